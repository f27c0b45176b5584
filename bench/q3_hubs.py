#!/usr/bin/env python3
"""Q3 per parameter (the two hub symptoms and the six ordinary ones) in CPU time, for nexus
or for Ladybug — the measurement of bench/RESULTS.md "Q3 on the hub symptoms (issue 18)".

    python bench/q3_hubs.py --db /tmp/q3/db --load          # load N=100k once (search detached)
    python bench/q3_hubs.py --db /tmp/q3/db                 # nexus: thread_time per call
    /path/to/venv-with-ladybug/bin/python bench/q3_hubs.py --ladybug --workdir /tmp/q3/lb

CPU time, because on a loaded shared machine a hub query's wall time is mostly waiting for a
core: nexus runs on one thread (`time.thread_time()`), Ladybug on several (`process_time()`,
all its threads). Prints one JSON object: parameter → [p10, median] ms. `--answers FILE`
writes (Ladybug) or checks (nexus) the sorted answers per parameter, so the two are compared.
The dataset: `python ../shared/peers/gen.py --n 100000 --out DATA`.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PEERS = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "peers"))
HUBS = ("Headache", "Fever")


def timed(fn, params: list[dict], clock) -> dict:
    out = {}
    for p in params:
        fn(**p)
        ts = []
        for _ in range(30 if p["symptom"] in HUBS else 100):
            t0 = clock()
            fn(**p)
            ts.append((clock() - t0) * 1000)
        ts.sort()
        out[p["symptom"]] = [round(ts[len(ts) // 10], 3), round(ts[len(ts) // 2], 3)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/tmp/peers-data")
    ap.add_argument("--n", type=int, default=100000)
    ap.add_argument("--db", help="nexus LMDB directory")
    ap.add_argument("--load", action="store_true", help="(re)load the dataset into --db")
    ap.add_argument("--ladybug", action="store_true")
    ap.add_argument("--workdir", default="/tmp/q3-ladybug")
    ap.add_argument("--answers")
    args = ap.parse_args()
    sys.path.insert(0, HERE)
    sys.path.insert(0, PEERS)
    with open(os.path.join(args.data, f"n{args.n}", "meta.json"), encoding="utf-8") as f:
        params = json.load(f)["params"]["Q3"]
    if args.ladybug:
        import bench_peers as B
        ds = B.load_dataset(args.n, args.data)
        peer = B.KuzuPeer(module="ladybug")
        shutil.rmtree(args.workdir, ignore_errors=True)
        os.makedirs(args.workdir)
        h = peer.load(ds, args.workdir)

        def q3(**p):
            return peer.q3(h, **p)
        if args.answers:
            with open(args.answers, "w", encoding="utf-8") as f:
                json.dump({p["symptom"]: sorted(q3(**p)) for p in params}, f)
        print(json.dumps(timed(q3, params, time.process_time)))
        return
    import nexus_peer as NP
    from nexus.api import Nexus
    if args.load:
        shutil.rmtree(args.db, ignore_errors=True)
        nx = Nexus.open(args.db, durable=False)
        nx.detach_search()
        NP.kip(nx, NP.SCHEMA)
        concepts, props, _ = __import__("queries").load_dataset(args.n, args.data)
        NP.load_into(nx, concepts, props)
        nx.close()
    nx = Nexus.open(args.db, durable=False)
    nx.detach_search()
    h = NP.NexusQueries(nx)
    if args.answers:
        with open(args.answers, encoding="utf-8") as f:
            expected = json.load(f)
        for p in params:
            assert sorted(h.q3(**p)) == expected[p["symptom"]], p["symptom"]
    print(json.dumps(timed(h.q3, params, time.thread_time)))
    nx.close()


if __name__ == "__main__":
    main()
