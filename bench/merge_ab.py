"""A/B of MERGE's CPU time between two source trees, on one database built once.

    python bench/merge_ab.py --db DIR --n 10000 --rounds 15 --base TREE_A --work TREE_B

`bench/merge.py` builds a new database per run (minutes at N=100k) and its wall column
moves with the machine's load. This script builds the database of `bench/merge.py` once
(at `--db`, reused when it exists: chained items, SEARCH attached, no vectors —
NEXUS_SEMANTIC=none — so that no indexer backlog competes), then starts one worker per
tree (each on its own copy of the database, with PYTHONPATH set to its tree) and
alternates them round by round (order swapped every round): both see the same load. Each
round is the UPSERT of `bench/merge.py`'s round k (not timed), then its MERGE; the figure
is the worker thread's CPU time over the MERGE (`time.thread_time`, commit included).
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import time


def build(db: str, n: int) -> None:
    from bench.merge import SCHEMA, kip
    from nexus import Nexus
    with Nexus.open(db) as nx:
        kip(nx, SCHEMA)
        nx.bulk_import(({"type": "Item", "name": f"item{i}"} for i in range(n)),
                       ({"subject": {"type": "Item", "name": f"item{i}"}, "predicate": "next",
                         "object": {"type": "Item", "name": f"item{i + 1}"}}
                        for i in range(n - 1)))


def worker(db: str, n: int, links: int) -> None:
    from bench.merge import MERGE, kip, twins
    from nexus import Nexus
    work = f"{db}.ab{os.getpid()}"
    shutil.copytree(db, work)
    rng = random.Random(7)
    try:
        with Nexus.open(work) as nx:
            print("ready", flush=True)
            for line in sys.stdin:
                k = int(line)
                kip(nx, twins(rng, n, links, k))
                started = time.thread_time()
                kip(nx, MERGE, d=f"dup{k}", c=f"canon{k}")
                print((time.thread_time() - started) * 1000, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--links", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--base", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ["NEXUS_SEMANTIC"] = "none"
    if args.worker:             # in its tree (PYTHONPATH): `bench` and `nexus` from there
        worker(args.db, args.n, args.links)
        return 0
    if not os.path.exists(args.db):
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        build(args.db, args.n)
    sides = {"base": os.path.abspath(args.base), "work": os.path.abspath(args.work)}
    procs = {}
    for side, tree in sides.items():
        procs[side] = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker",
             "--db", os.path.abspath(args.db), "--n", str(args.n), "--links", str(args.links),
             "--base", args.base, "--work", args.work],
            cwd=tree, env=dict(os.environ, PYTHONPATH=tree), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True)
    for p in procs.values():
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    cpu: dict[str, list[float]] = {side: [] for side in sides}
    for k in range(args.rounds):
        for side in (list(sides) if k % 2 == 0 else list(reversed(sides))):
            p = procs[side]
            assert p.stdin is not None and p.stdout is not None
            p.stdin.write(f"{k}\n")
            p.stdin.flush()
            cpu[side].append(float(p.stdout.readline()))
    for p in procs.values():
        assert p.stdin is not None
        p.stdin.close()
        p.wait()
    for side, values in cpu.items():
        q = sorted(values)
        print(f"{side} ({sides[side]}): median {statistics.median(q):.1f} ms, lower quartile "
              f"{q[len(q) // 4]:.1f}, min {q[0]:.1f}, CPU ms per MERGE over {len(q)} rounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
