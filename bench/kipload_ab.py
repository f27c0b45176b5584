"""Issue 18's KIP load, two source trees alternated in fresh processes (before/after A/B).

    python -m bench.kipload_ab --data /work/main/bench/data/n10000 \
        --tree before=/tmp/before --tree after=. [--rounds 2] [--search detached,attached]

Each run is a fresh `python` whose PYTHONPATH puts one tree first, so `nexus` and the
bench's own command builders (`bench.kipload_grouped`) come from that tree. It opens a
fresh LMDB database, defines the benchmark schema, and sends the data set as issue 18's
grouped commands (500 CONCEPT blocks per command, then links grouped by subject, 250
subjects per command with SET PROPOSITIONS to `{type, name}` objects, every value a
parameter) through `Nexus.execute_kip`, with SEARCH detached or attached. The trees
alternate (ABBA by round) so that the machine's load falls on both alike. Reported per run:
wall seconds of the load, CPU seconds of the loading thread and of the whole process
(the vector indexer included when attached), items/s, items per thread-CPU-second and
thread-CPU microseconds per item; and, attached, the seconds `close` waited for the
vector index to catch up.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

_CHILD = r"""
import gc, json, shutil, sys, tempfile, time
from bench import kipload_grouped as G, nexus_peer as NP, workload as W
from bench.loader import kip
from nexus.api import Nexus
data, search = sys.argv[1], sys.argv[2]
concepts, props, _meta, _ = W.read(data)
gc.collect(); gc.freeze()
commands = G.concept_commands(concepts) + G.grouped_link_commands(props)
items = len(concepts) + len(props)
db = tempfile.mkdtemp(prefix="kipload-ab-")
try:
    nx = Nexus.open(db)
    if search == "detached":
        nx.detach_search()
    kip(nx, NP.SCHEMA)
    gc.collect()
    t0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
    for text, params in commands:
        kip(nx, text, **params)
    t1, c1, p1 = time.perf_counter(), time.thread_time(), time.process_time()
    nx.close()
    t2 = time.perf_counter()
finally:
    shutil.rmtree(db, ignore_errors=True)
print(json.dumps({"items": items, "commands": len(commands), "wall_s": t1 - t0,
                  "thread_cpu_s": c1 - c0, "process_cpu_s": p1 - p0, "close_s": t2 - t1}))
"""


def run(tree: str, data: str, search: str) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    out = subprocess.run([sys.executable, "-c", _CHILD, data, search], env=env,
                         cwd=os.path.abspath(tree), capture_output=True, text=True, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return {"wall_s": round(r["wall_s"], 2), "thread_cpu_s": round(r["thread_cpu_s"], 2),
            "process_cpu_s": round(r["process_cpu_s"], 2), "close_s": round(r["close_s"], 2),
            "items_per_s": round(r["items"] / r["wall_s"]),
            "items_per_cpu_s": round(r["items"] / r["thread_cpu_s"]),
            "us_per_item": round(1e6 * r["thread_cpu_s"] / r["items"], 1),
            "items": r["items"], "commands": r["commands"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--tree", action="append", required=True, help="NAME=PATH (two)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--search", default="detached,attached")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    trees = [t.split("=", 1) for t in args.tree]
    runs = []
    for search in args.search.split(","):
        for r in range(args.rounds):
            order = trees if r % 2 == 0 else trees[::-1]
            for name, path in order:
                result = {"search": search, "round": r + 1, "tree": name,
                          "load_average": round(os.getloadavg()[0], 1),
                          **run(path, args.data, search)}
                runs.append(result)
                print(json.dumps(result), flush=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(runs, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
