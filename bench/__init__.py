"""nexus benchmarks.

    python -m bench                      # N = 10k and 100k, peers when available (~20 min idle)
    python -m bench --quick              # N = 2000, short budgets (~1 min)
    python -m bench --n 10000 --peers none --no-write
    python -m bench.workload --n 10000   # only generate the workload (bench/data/n10000)

`python -m bench` is the one benchmark command (bench/runner.py): it generates the peers
workload (bench/workload.py — gen.py's semantics, byte-identical output), loads it into
nexus through the bulk path and through KIP UPSERT batches, runs Q1–Q6, W2, SEARCH and a
mixed read/write agent loop, and, when `../shared/peers` (or `--peers-dir`) and the peer
packages are there, the peer harness for Kùzu, Ladybug and Oxigraph (nexus plugged into it
too up to N=20k, `--harness-nexus`), checking that every engine returns identical answers
(exit status 1 otherwise, with the query, parameters and differing rows). Without the
harness the peers are skipped with a note and nexus is checked against bench/reference.py.

Output: the `## Summary` section of bench/RESULTS.md (only that section is rewritten),
`bench/results/<date>.json` (compact, committed for tracking; other sizes
`<date>-n<N>.json`, git-ignored) and `bench/results/full/` (every call's and parameter's
figures, the harness's own JSON; git-ignored). `python -m bench --from-json FILE`
re-renders the Summary from either.

The other scripts here are focused benchmarks of one layer each (parse.py, load.py,
queries.py, search.py, http_bench.py, store_micro.py), each owning its RESULTS.md section.
"""
