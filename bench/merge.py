"""Entity-consolidation benchmark (RC11 §4.4): MERGE of a concept with 1k links at N items.

    python bench/merge.py [--n 100000] [--links 1000] [--rounds 5] [--record bench/RESULTS.md]

A fresh on-disk database (durable, SEARCH attached: the defaults) gets `--n` Item concepts
chained by `--n - 1` `next` links (bulk import). Each round then adds (one UPSERT, not timed)
a duplicate `dupK` with `--links` links — half leaving it, half entering it, to random
items — and its canonical twin `canonK`, which already has a tenth of the same links (so a
tenth of the merge's links collide and are deduplicated), and times

    MERGE CONCEPT ?d INTO ?c WHERE { ?d {type: "Item", name: :d} ?c {type: "Item", name: :c} }

end to end through `execute_kip` (match, repoint, fill, delete, lexical search index, durable
commit), after the background vector indexer has caught up with the setup (it re-embeds the
repointed links after the commit, off the clock as for every write).
The target (issue 16): ≤ 50 ms at N=100k. The CPU column is the calling thread's own CPU
time over the same span (`time.thread_time`): on a shared machine it moves far less with
the load than the wall time (it leaves out the commit's disk wait and the time the thread
waits for a core). `--record` replaces the `## MERGE` section of the
results file.
"""
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from datetime import datetime, timezone  # noqa: E402

from bench.results_md import replace_section  # noqa: E402
from nexus import Nexus  # noqa: E402

SECTION = "## MERGE"
SCHEMA = '''UPSERT {
  CONCEPT ?t { {type: "$ConceptType", name: "Item"} SET ATTRIBUTES { description: "an item" } }
  CONCEPT ?p { {type: "$PropositionType", name: "next"} SET ATTRIBUTES { description: "n" } }
}'''
MERGE = ('MERGE CONCEPT ?d INTO ?c WHERE { ?d {type: "Item", name: :d} '
         '?c {type: "Item", name: :c} }')


def kip(nx: Nexus, command: str, **params: object) -> dict:
    response = nx.execute_kip({"command": command, "parameters": params})
    assert "result" in response, response
    return response["result"]


def twins(rng: random.Random, n: int, links: int, k: int) -> str:
    """The UPSERT of round k: dupK with `links` links, canonK sharing a tenth of them."""
    items = rng.sample(range(n), links)
    blocks = [f'CONCEPT ?d {{ {{type: "Item", name: "dup{k}"}} SET ATTRIBUTES {{ a: {k} }} }}',
              f'CONCEPT ?c {{ {{type: "Item", name: "canon{k}"}} }}']
    for j, i in enumerate(items):
        item = json.dumps(f"item{i}")
        ends = [f'(?d, "next", {{type: "Item", name: {item}}})' if j % 2 == 0 else
                f'({{type: "Item", name: {item}}}, "next", ?d)']
        if j % 10 == 0:
            ends.append(ends[0].replace("?d", "?c"))
        blocks += [f"PROPOSITION {{ {e} }}" for e in ends]
    return "UPSERT {\n" + "\n".join(blocks) + "\n}"


def run(path: str, n: int, links: int, rounds: int
        ) -> tuple[list[float], list[float], dict]:
    rng = random.Random(7)
    with Nexus.open(path) as nx:
        kip(nx, SCHEMA)
        nx.bulk_import(({"type": "Item", "name": f"item{i}"} for i in range(n)),
                       ({"subject": {"type": "Item", "name": f"item{i}"}, "predicate": "next",
                         "object": {"type": "Item", "name": f"item{i + 1}"}}
                        for i in range(n - 1)))
        times, cpu, result = [], [], {}
        for k in range(rounds):
            kip(nx, twins(rng, n, links, k))
            if nx.search is not None:       # the setup's vectors embedded before the clock
                nx.search.drain(60)
            started, on_cpu = time.perf_counter(), time.thread_time()
            result = kip(nx, MERGE, d=f"dup{k}", c=f"canon{k}")
            times.append(time.perf_counter() - started)
            cpu.append(time.thread_time() - on_cpu)
            assert result["links_repointed"] + result["links_deduplicated"] == links, result
        return times, cpu, result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--links", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--record", metavar="RESULTS_MD")
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="nexus-merge-")
    try:
        times, cpu, result = run(os.path.join(work, "db"), args.n, args.links, args.rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ms = sorted(t * 1000 for t in times)
    command = "python bench/merge.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = "\n".join([
        SECTION, "",
        f"`{command.strip()}` — {datetime.now(timezone.utc):%Y-%m-%d}, {platform.machine()} "
        f"{os.cpu_count()} cores (shared, loaded VM), Python {platform.python_version()}, LMDB "
        f"on disk, durable, SEARCH attached. {args.n:,} items chained by {args.n - 1:,} `next` "
        f"links; each round MERGEs a duplicate with {args.links:,} links (a tenth colliding "
        f"with its twin's) into the twin (last answer {result}).", "",
        "| MERGE of a concept with its links | median ms | min ms | max ms | median CPU ms "
        "| rounds | target |",
        "|---|---:|---:|---:|---:|---:|---|",
        f"| {args.links:,} links at N={args.n:,} | {statistics.median(ms):.1f} | {ms[0]:.1f} | "
        f"{ms[-1]:.1f} | {statistics.median(cpu) * 1000:.1f} | {len(ms)} | ≤ 50 ms at N=100k |",
    ]) + "\n"
    print(text)
    if args.record:
        replace_section(args.record, SECTION, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
