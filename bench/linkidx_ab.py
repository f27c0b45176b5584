#!/usr/bin/env python3
"""Q1–Q6 and W2 (store only) on a loaded database, CPU and wall, for A/B runs of two trees
(bench/RESULTS.md, "Disk: the link indexes as 16-byte keys"):

    PYTHONPATH=TREE python bench/linkidx_ab.py --data bench/data/n100000 --db D [--rounds 5]

D is a database loaded by the same tree (`python -m bench.loader load --data ... --search
detached --db D`); it is copied to a scratch directory first, so W2's writes leave it as it
was. Opens it with SEARCH detached, runs every Q1–Q6 parameter once (the first round, `cold`:
what reads the link indexes to build the column views; answers digested, to compare with
`bench.reference`'s), then `--rounds` timed rounds; per query the median over
rounds of the round's total, in CPU (`time.thread_time`) and wall ms. Then W2 as
`python -m bench` runs it store only: `--upserts` durable upserts, per-upsert median CPU and
wall ms, and the reference's post-W2 checks; between them the link index reads themselves
(`_primitives`: CPU per 20,000 calls). Prints one JSON object. nexus is imported from PYTHONPATH (the tree measured), the
bench package from beside this file.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bench import nexus_peer as NP  # noqa: E402
from bench import reference as R  # noqa: E402
from bench import workload as W  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--db", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--upserts", type=int, default=200)
    args = ap.parse_args()
    from nexus.api import Nexus

    with open(os.path.join(args.data, "meta.json"), encoding="utf-8") as f:
        meta = json.load(f)
    scratch = tempfile.mkdtemp(prefix="linkidx-ab-")
    db = os.path.join(scratch, "db")
    shutil.copytree(args.db, db)
    out: dict = {"tree": sys.modules["nexus"].__file__, "load_start": os.getloadavg()[0]}
    try:
        nx = Nexus.open(db, bootstrap=False)
        nx.detach_search()
        h = NP.NexusQueries(nx)
        fns = {"Q1": h.q1, "Q2": h.q2, "Q3": h.q3, "Q4": h.q4, "Q5": h.q5, "Q6": h.q6}
        tt, pc = time.thread_time, time.perf_counter
        digests, cold = {}, {}
        for q in R.QUERIES:         # the first round: the column views built (cold)
            c0, w0 = tt(), pc()
            digests.update(R.answer_digests(lambda q, **p: fns[q](**p), meta["params"], (q,)))
            cold[q] = {"cpu_ms": round((tt() - c0) * 1000, 2),
                       "wall_ms": round((pc() - w0) * 1000, 2)}
        out["cold"] = cold
        gc.collect()
        gc.freeze()
        for q in R.QUERIES:
            params, fn = meta["params"][q], fns[q]
            cpu, wall = [], []
            for _ in range(args.rounds):
                c0, w0 = tt(), pc()
                for p in params:
                    fn(**p)
                cpu.append((tt() - c0) * 1000)
                wall.append((pc() - w0) * 1000)
            out[q] = {"cpu_ms": round(statistics.median(cpu), 2),
                      "wall_ms": round(statistics.median(wall), 2), "calls": len(params)}
        out["primitives"] = _primitives(nx, args.rounds)
        names = [{"type": t, "name": n} for t, n in _names(args.data)]
        items = W.make_upserts(names, meta, args.upserts)
        cpu, wall = [], []
        for item in items:
            c0, w0 = tt(), pc()
            h.upsert(item)
            cpu.append((tt() - c0) * 1000)
            wall.append((pc() - w0) * 1000)
        out["W2_store"] = {"cpu_ms": round(statistics.median(cpu), 4),
                           "wall_ms": round(statistics.median(wall), 4), "upserts": len(items)}
        digests.update(R.post_w2_checks(lambda q, **p: fns[q](**p), items))
        nx.close()
        out["digests"] = digests
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    out["load_end"] = os.getloadavg()[0]
    print(json.dumps(out))


def _primitives(nx, rounds: int) -> dict:
    """CPU ms per 20,000 calls of the link index reads (graph.py's), best of `rounds`, on
    20,000 random links of the store (seeded): their subjects, objects, (s, p), (o, p) and
    (s, p, o); and one read of the largest predicate's links."""
    import random
    rng = random.Random(7)
    with nx.store.read() as r:
        pids = list(r.link_predicates())
        by_pred = {p: list(r.links_of_predicate(p)) for p in pids}
        links = [(s, p, o) for p in pids for s, o, _ in by_pred[p]]
        pick = [links[rng.randrange(len(links))] for _ in range(20_000)]
        big = max(pids, key=lambda p: len(by_pred[p]))
        links = []
        calls = {
            "out_links(s)": lambda: [list(r.out_links(s)) for s, _, _ in pick],
            "out_links(s, p)": lambda: [list(r.out_links(s, p)) for s, p, _ in pick],
            "in_links(o)": lambda: [list(r.in_links(o)) for _, _, o in pick],
            "in_links(o, p)": lambda: [list(r.in_links(o, p)) for _, p, o in pick],
            "link_id(s, p, o)": lambda: [r.link_id(s, p, o) for s, p, o in pick],
            "links_of_predicate(largest)": lambda: list(r.links_of_predicate(big)),
        }
        out = {}
        tt = time.thread_time
        for name, fn in calls.items():
            best = float("inf")
            for _ in range(rounds):
                c0 = tt()
                fn()
                best = min(best, tt() - c0)
            out[name] = round(best * 1000, 2)
    return out


def _names(data: str) -> list[tuple[str, str]]:
    from orjson import loads
    with open(os.path.join(data, "concepts.jsonl"), "rb") as f:
        return [(c["type"], c["name"]) for c in map(loads, f)]


if __name__ == "__main__":
    main()
