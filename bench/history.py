"""Version history benchmark (docs/history.md): what the log costs and what AS OF costs.

    python bench/history.py [--n 10000] [--edits 10] [--record bench/RESULTS.md]

Two on-disk databases get the same workload, one with the version log on and one with it
off: `--n` Item concepts (each with a few attributes) chained by `next` links, bulk
imported, then `--edits` rounds of KIP UPSERT commands that change one attribute of every
item (500 items per command: each item ends with `--edits` updates). Reported:

- the log's disk overhead: (allocated size with the log − without) / without — the target
  (issue 20) is ≤ 2× the live graph after 10 updates per element;
- a point FIND and a one-hop FIND, current and `AS OF VERSION` a recent record (the one
  before the last command: the newest 500 edits undone), medians and their ratio — the
  target is ≤ 3× the current query;
- the UPSERT commands' throughput with and without the log (what recording costs a write;
  the two runs send different values, so neither reuses the other's parsed commands).

`--record` replaces the `## Version history` section of the results file.
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
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from datetime import datetime, timezone  # noqa: E402

from bench.results_md import replace_section  # noqa: E402
from nexus import Nexus  # noqa: E402

SECTION = "## Version history"
SCHEMA = '''UPSERT {
  CONCEPT ?t { {type: "$ConceptType", name: "Item"} SET ATTRIBUTES { description: "an item" } }
  CONCEPT ?p { {type: "$PropositionType", name: "next"} SET ATTRIBUTES { description: "n" } }
}'''
POINT = 'FIND(?i.attributes) WHERE { ?i {type: "Item", name: :name} }'
HOP = 'FIND(?j.name, ?j.attributes.v) WHERE { ({type: "Item", name: :name}, "next", ?j) }'
PER_COMMAND = 500


def disk_bytes(path: str) -> int:
    return sum(os.stat(os.path.join(root, f)).st_blocks * 512
               for root, _, files in os.walk(path) for f in files)


def build(path: str, n: int, edits: int, history: bool, via: str) -> dict:
    nx = Nexus.open(path)
    try:
        if not history:
            nx.set_history(False)
        nx.execute_kip({"command": SCHEMA})
        concepts = ({"type": "Item", "name": f"item{i}",
                     "attributes": {"v": 0, "label": f"Item number {i}", "group": i % 97}}
                    for i in range(n))
        links = ({"subject": {"type": "Item", "name": f"item{i}"}, "predicate": "next",
                  "object": {"type": "Item", "name": f"item{i + 1}"}} for i in range(n - 1))
        nx.bulk_import(concepts, links)
        started = time.perf_counter()
        blocks = 0
        for round_ in range(1, edits + 1):
            if via == "bulk":
                nx.bulk_import(({"type": "Item", "name": f"item{i}",
                                 "attributes": {"v": round_}} for i in range(n)), (),
                               batch_size=PER_COMMAND)
                blocks += n
                continue
            for lo in range(0, n, PER_COMMAND):
                body = " ".join(
                    f'CONCEPT ?c{i} {{ {{type: "Item", name: "item{i}"}} SET ATTRIBUTES '
                    f'{{ v: {round_ + (0 if history else 1000)} }} }}'
                    for i in range(lo, min(n, lo + PER_COMMAND)))
                response = nx.execute_kip({"command": f"UPSERT {{ {body} }}"})
                assert "result" in response, response
                blocks += min(n, lo + PER_COMMAND) - lo
        seconds = time.perf_counter() - started
    finally:
        nx.close()
    return {"edit_seconds": seconds, "edits_per_s": blocks / seconds,
            "disk": disk_bytes(path)}


def timed(nx: Nexus, command: str, names: list[str], suffix: str, reps: int) -> float:
    request = [{"command": command + suffix, "parameters": {"name": name}} for name in names]
    for r in request[:5]:
        assert "result" in nx.execute_kip(r), nx.execute_kip(r)
    times = []
    for _ in range(reps):
        for r in request:
            t = time.perf_counter()
            nx.execute_kip(r)
            times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--edits", type=int, default=10)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--via", choices=("kip", "bulk"), default="kip",
                    help="send the edits as KIP UPSERT commands (default) or through "
                    "bulk_import in transactions of 500 items (faster at large N)")
    ap.add_argument("--record", metavar="RESULTS_MD")
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="nexus-history-bench-")
    try:
        on = build(os.path.join(work, "on"), args.n, args.edits, True, args.via)
        off = build(os.path.join(work, "off"), args.n, args.edits, False, args.via)
        overhead = (on["disk"] - off["disk"]) / off["disk"]
        with Nexus.open(os.path.join(work, "on")) as nx:
            log = nx.execute_kip({"command": "DESCRIBE HISTORY LIMIT 1"})["result"][0]
            recent = f" AS OF VERSION {log['seq'] - 1}"
            names = [f"item{i}" for i in range(args.n - 1, 0, -max(1, args.n // 64))][:64]
            rows = {}
            for label, query in (("point FIND", POINT), ("one-hop FIND", HOP)):
                now = timed(nx, query, names, "", args.reps)
                then = timed(nx, query, names, recent, args.reps)
                rows[label] = (now, then)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    command = "python bench/history.py " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = [SECTION, "",
             f"`{command.strip()}` — {datetime.now(timezone.utc):%Y-%m-%d}, "
             f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
             f"LMDB on disk, durable. N = {args.n:,} items + {args.n - 1:,} links, then "
             f"{args.edits} updates of every item ({PER_COMMAND} per "
             f"{'command' if args.via == 'kip' else 'bulk_import transaction'}).", "",
             "| figure | with the log | without | ratio | target |",
             "|---|---:|---:|---:|---|",
             f"| disk after the edits (MB) | {on['disk'] / 1e6:,.1f} | {off['disk'] / 1e6:,.1f} "
             f"| log = {overhead:.2f}× the live graph | ≤ 2× |",
             f"| updates ({args.via}, items/s) | {on['edits_per_s']:,.0f} | "
             f"{off['edits_per_s']:,.0f} | {on['edits_per_s'] / off['edits_per_s']:.2f} | |"]
    for label, (now, then) in rows.items():
        lines.append(f"| {label}: AS OF the previous record vs current (ms, median) | "
                     f"{then:.3f} | {now:.3f} | {then / now:.2f}× | ≤ 3× |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.record:
        replace_section(args.record, SECTION, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
