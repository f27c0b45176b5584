"""Micro-benchmark of the LMDB graph store (nexus.store), below the executor.

Loads N concepts + M links through the bulk path into a temporary LMDB directory, then
times the executor's hottest store calls and a single durable write transaction:

    python bench/store_micro.py [--concepts 100000] [--links 500000] [--dir D]

Figures are per call, the best of 5 warm loops over random ids (the head cache filled),
inside one read transaction unless stated. Expect noise on a shared machine.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from nexus.store import LmdbGraphStore  # noqa: E402


def per_call_us(fn, args: list, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for a in args:
            fn(a)
        best = min(best, time.perf_counter() - t0)
    return best / len(args) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concepts", type=int, default=100_000)
    ap.add_argument("--links", type=int, default=500_000)
    ap.add_argument("--dir", default=None, help="parent directory of the temporary store")
    args = ap.parse_args()
    rng = random.Random(42)
    root = tempfile.mkdtemp(prefix="nexus-store-bench-", dir=args.dir)
    try:
        store = LmdbGraphStore(os.path.join(root, "db"))
        n_types, n_preds = 20, 50

        # --- bulk load (row generation excluded; commit included) ------------------------
        with store.write() as w:
            types = [w.intern(f"Type{i}") for i in range(n_types)]
            preds = [w.intern(f"pred_{i}") for i in range(n_preds)]
        with store.write() as w:
            cids = w.reserve_ids(args.concepts)
            crows = [(n, types[n % n_types], f"concept number {n}",
                      {"rank": n, "score": n / 7} if n % 2 else None, {"_version": 1})
                     for n in cids]
            t0 = time.perf_counter()
            w.create_concepts(crows)
            t1 = time.perf_counter()
        t2 = time.perf_counter()
        del crows
        with store.write() as w:
            lids = w.reserve_ids(args.links)
            seen = set()
            lrows = []
            lo, hi = cids[0], cids[-1]
            for n in lids:
                while True:
                    s, p, o = (rng.randint(lo, hi), preds[rng.randrange(n_preds)],
                               rng.randint(lo, hi))
                    if (s, p, o) not in seen:
                        seen.add((s, p, o))
                        break
                lrows.append((n, s, p, o, {"w": n} if n % 5 == 0 else None, None))
            del seen
            t3 = time.perf_counter()
            w.create_links(lrows)
            t4 = time.perf_counter()
        t5 = time.perf_counter()
        del lrows
        load_s = (t2 - t0) + (t5 - t3)
        total = args.concepts + args.links
        print(f"bulk load: {args.concepts:,} concepts {t1 - t0:.2f}s + commit {t2 - t1:.2f}s; "
              f"{args.links:,} links {t4 - t3:.2f}s + commit {t5 - t4:.2f}s "
              f"-> {total / load_s:,.0f} items/s")
        size = os.path.getsize(os.path.join(root, "db", "data.mdb"))
        print(f"data.mdb: {size / 2**20:.0f} MiB")

        # --- point reads ----------------------------------------------------------------
        sample = [rng.randint(cids[0], lids[-1]) for _ in range(50_000)]
        csample = [rng.randint(cids[0], cids[-1]) for _ in range(50_000)]
        with store.read() as r:
            names = [(types[n % n_types], f"concept number {n}") for n in csample]
            for n in sample:                                # warm the head cache
                r.head(n)
            print(f"head(n)              {per_call_us(r.head, sample):6.2f} us")
            print(f"known_head(n)        {per_call_us(r.known_head, sample):6.2f} us")
            print(f"concept_id(t, name)  "
                  f"{per_call_us(lambda tn: r.concept_id(*tn), names):6.2f} us")
            print(f"attributes(n)        {per_call_us(r.attributes, csample):6.2f} us")
            degree = args.links / args.concepts
            scan = per_call_us(lambda n: list(r.out_links(n)), csample)
            print(f"list(out_links(n))   {scan:6.2f} us  (avg {degree:.1f} links; "
                  f"{scan / degree:.2f} us/link)")
            print(f"list(in_links(n,p))  "
                  f"{per_call_us(lambda n: list(r.in_links(n, preds[n % n_preds])), csample):6.2f}"
                  f" us")
            count = sum(1 for _ in r.links_of_predicate(preds[0]))
            t = time.perf_counter()
            for _ in r.links_of_predicate(preds[0]):
                pass
            print(f"links_of_predicate   {(time.perf_counter() - t) / count * 1e6:6.3f} us/link "
                  f"({count:,} links)")

        def one_read(n):
            with store.read() as r:
                r.head(n)
        print(f"read txn + head(n)   {per_call_us(one_read, sample[:20_000]):6.2f} us")

        # --- single durable write transactions ---------------------------------------------
        lat = []
        for i in range(200):
            t = time.perf_counter()
            with store.write() as w:
                n = w.new_id()
                w.create_concept(n, types[0], f"fresh {i}", {"i": i}, {"_version": 1})
                w.create_link(w.new_id(), n, preds[0], cids[i], {}, {"_version": 1})
                w.create_link(w.new_id(), cids[i], preds[1], n, {}, {"_version": 1})
            lat.append(time.perf_counter() - t)
        lat.sort()
        print(f"durable write txn (1 concept + 2 links): median {lat[100] * 1e3:.2f} ms, "
              f"p95 {lat[190] * 1e3:.2f} ms")
        store.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
