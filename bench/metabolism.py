"""Memory-metabolism benchmark (RC11 §4.3): an UPDATE decay sweep over N links.

    python bench/metabolism.py [--n 100000] [--record bench/RESULTS.md]

A fresh on-disk database (durable) gets `--n` Item concepts chained by `--n - 1` `next`
links (bulk import), then one statement decays every link's memory strength:

    UPDATE ?l SET METADATA { memory_strength: CLAMP(MUL(COALESCE(?l.metadata.memory_strength,
        0.7), 0.9), 0.0, 1.0), decay_applied_at: :t } WHERE { ?l (?a, "next", ?b) }

timed end to end through `execute_kip` (match, compute, write, commit, commit hooks), with
the version log on (the default) and off. The bulk import's vectors are embedded by a
background thread for minutes afterwards: that thread is paused while the statement runs
(`search.bulk_loading()`; a metadata-only sweep gives it no work), otherwise the clock
measures its competition for the interpreter lock — the cause of the "cost per link that
grows with N" of earlier runs. The target (issue 16): ≤ 2 s for 100k links. `--record` replaces the
`## Memory metabolism` section of the results file.
"""
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import argparse  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from contextlib import nullcontext  # noqa: E402
from datetime import datetime, timezone  # noqa: E402

from bench.results_md import replace_section  # noqa: E402
from nexus import Nexus  # noqa: E402

SECTION = "## Memory metabolism"
SCHEMA = '''UPSERT {
  CONCEPT ?t { {type: "$ConceptType", name: "Item"} SET ATTRIBUTES { description: "an item" } }
  CONCEPT ?p { {type: "$PropositionType", name: "next"} SET ATTRIBUTES { description: "n" } }
}'''
SWEEP = ('UPDATE ?l SET METADATA { memory_strength: CLAMP(MUL(COALESCE('
         '?l.metadata.memory_strength, 0.7), 0.9), 0.0, 1.0), decay_applied_at: :t } '
         'WHERE { ?l (?a, "next", ?b) }')


def sweep(path: str, n: int, history: bool) -> tuple[float, float, dict]:
    """(wall seconds, CPU seconds of the process, answer) of one sweep over `n - 1` links."""
    with Nexus.open(path) as nx:
        if not history:
            nx.set_history(False)
        nx.execute_kip({"command": SCHEMA})
        nx.bulk_import(({"type": "Item", "name": f"item{i}"} for i in range(n)),
                       ({"subject": {"type": "Item", "name": f"item{i}"}, "predicate": "next",
                         "object": {"type": "Item", "name": f"item{i + 1}"}}
                        for i in range(n - 1)))
        paused = nx.search.bulk_loading() if nx.search is not None else nullcontext()
        with paused:                    # the setup's vector catch-up waits (module doc)
            started, cpu = time.perf_counter(), time.process_time()
            response = nx.execute_kip({"command": SWEEP, "parameters": {"t": "2026-11-25"}})
            seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        assert "result" in response, response
        return seconds, cpu, response["result"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--record", metavar="RESULTS_MD")
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="nexus-metabolism-")
    try:
        on, on_cpu, result = sweep(os.path.join(work, "on"), args.n, True)
        off, off_cpu, _ = sweep(os.path.join(work, "off"), args.n, False)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    command = "python bench/metabolism.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = "\n".join([
        SECTION, "",
        f"`{command.strip()}` — {datetime.now(timezone.utc):%Y-%m-%d}, {platform.machine()} "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, LMDB on disk, durable. "
        f"{args.n:,} items chained by {args.n - 1:,} `next` links; one UPDATE decays every "
        f"link (answer {result}); load average {os.getloadavg()[0]:.1f} at the end. CPU: the "
        f"process's CPU time over the statement (the vector indexer paused: the statement's "
        f"own), the figure to compare on a shared machine.", "",
        "| UPDATE decay sweep | seconds | CPU s | links/s | target |",
        "|---|---:|---:|---:|---|",
        f"| version log on (default) | {on:.2f} | {on_cpu:.2f} | {result['updated'] / on:,.0f} "
        f"| ≤ 2 s |",
        f"| version log off | {off:.2f} | {off_cpu:.2f} | {result['updated'] / off:,.0f} "
        f"| ≤ 2 s |",
    ]) + "\n"
    print(text)
    if args.record:
        replace_section(args.record, SECTION, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
