"""The SEARCH row of `python -m bench` alone, with its misses: hit@1 / hit@10 and CPU per query.

    python -m bench.search_row DATA_DIR DB [--out misses.json] [--reuse] [--no-w2]

DATA_DIR is a peers data set (bench/data/n10000, …). DB is bulk-loaded there by
`bench.loader` (SEARCH attached) unless `--reuse` finds it. Then, as the runner does before
its SEARCH row: 200 durable W2 upserts, SEARCH detached for 200 more, attached again
(`--no-w2` skips that). Then the row's 100 queries (bench/mixed.py `search_bench`'s, same
seed: half a name as stored, half with one typo): hit@1, hit@10, every query's top hits
(`--out`), and CPU per query (`time.thread_time`, median / p95 over 3 passes). Made to
bisect the row's hit@10 (bench/RESULTS.md, "hit@10 of the peers bench's SEARCH row").
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time

from . import nexus_peer as NP
from . import workload as W
from .mixed import SEARCH, typo


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.search_row")
    ap.add_argument("data")
    ap.add_argument("db")
    ap.add_argument("--out")
    ap.add_argument("--reuse", action="store_true")
    ap.add_argument("--no-w2", action="store_true")
    args = ap.parse_args(argv)
    if not (args.reuse and os.path.isdir(args.db)):
        shutil.rmtree(args.db, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "bench.loader", "load", "--data", args.data,
                        "--db", args.db, "--mode", "bulk", "--search", "attached",
                        "--out", args.db + ".load.json"], check=True)
    from nexus.api import Nexus
    with open(os.path.join(args.data, "concepts.jsonl"), "rb") as f:
        names = [(c["type"], c["name"]) for c in map(json.loads, f)]
    with open(os.path.join(args.data, "meta.json"), encoding="utf-8") as f:
        meta = json.load(f)
    rng = random.Random(meta["seed"] + 11)             # as search_bench draws them
    targets = [names[rng.randrange(len(names))] for _ in range(100)]
    queries = [(t, n, n if i % 2 == 0 else typo(rng, n)) for i, (t, n) in enumerate(targets)]
    nx = Nexus.open(args.db)
    try:
        if not args.no_w2:
            h = NP.NexusQueries(nx)
            items = W.make_upserts([{"type": t, "name": n} for t, n in names], meta, 200)
            for item in items:
                h.upsert(item)
            nx.detach_search()
            for item in items:
                h.upsert({**item, "concept": {**item["concept"],
                                              "name": item["concept"]["name"] + " (store only)"}})
            nx.attach_search()
        rows, h1, h10 = [], 0, 0
        for t, n, q in queries:
            r = nx.execute_kip_readonly({"command": SEARCH, "parameters": {"q": q}})
            if "error" in r:
                raise RuntimeError(r["error"])
            found = [(x["type"], x["name"]) for x in r["result"]]
            h1 += bool(found) and found[0] == (t, n)
            h10 += (t, n) in found
            rows.append({"type": t, "name": n, "query": q, "rank": found.index((t, n))
                         if (t, n) in found else None, "found": [f"{a}:{b}" for a, b in found]})
        cpu = []
        for _ in range(3):
            for _t, _n, q in queries:
                c0 = time.thread_time()
                nx.execute_kip_readonly({"command": SEARCH, "parameters": {"q": q}})
                cpu.append(time.thread_time() - c0)
    finally:
        nx.close()
    cpu.sort()
    print(json.dumps({"hit_at_1": h1 / len(queries), "hit_at_10": h10 / len(queries),
                      "cpu_median_ms": round(cpu[len(cpu) // 2] * 1e3, 3),
                      "cpu_p95_ms": round(cpu[int(len(cpu) * 0.95)] * 1e3, 3)}))
    for row in rows:
        if row["rank"] != 0:
            print(f"  {row['type']} {row['name']!r} as {row['query']!r}: rank {row['rank']}; "
                  f"first {row['found'][:3]}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
