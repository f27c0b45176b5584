"""SEARCH quality per mode on the 100k paraphrase database: recall@5 of each mode at scale.

    python bench/search_quality_100k.py --db <dir> [--per 80] [--old-hybrid]

`--db` is a database built by bench/paraphrase.py's `build` (the 100k generated graph plus
the paraphrase set; it is only read). Two query sets, each target known:

- the paraphrase set (bench/data/paraphrases.json, 245 queries; recall at 100k is far
  below the small graph's, where the set's concepts have few neighbours);
- `--per` queries per category of tests/search's labelled generator over the same 100k
  concepts (exact names, case changes, one and two typos, prefixes, aliases, three words of
  the description).

Per mode (as served: `nexus.search.query`), recall@5 per set and category and the median
CPU time of one ranking (`time.thread_time`, best of 2; the ranking only, without parsing
and result shaping). `--old-hybrid` adds the hybrid fusion as it was before the keyword
hits' semantic scores were filled in (a missing side counted 0; both searches at breadth
128), for comparison. Also printed: the paraphrase recall@5 of the semantic index's exact
cosines (every vector compared, no HNSW), the ceiling of what its HNSW search can find.
Prints markdown; bench/RESULTS.md is written by hand.
"""
from __future__ import annotations

import argparse
import heapq
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "search"))

import search_corpus  # noqa: E402

from nexus import Nexus  # noqa: E402
from nexus.search import query as Q  # noqa: E402
from nexus.search.text import KIND_CONCEPT  # noqa: E402
from nexus.search.vectors import SLOTS  # noqa: E402

DATA = ROOT / "bench" / "data" / "paraphrases.json"


def old_hybrid(txn: Any, search: Any, text: str, limit: int) -> list[tuple[int, float]]:
    """The fusion before the fill: a side that did not return a hit counts 0."""
    kw = dict(Q.run(txn, search.keyword_source(txn), KIND_CONCEPT, text, None, limit, None,
                    128))
    sm = dict(Q.semantic(txn, search.semantic, KIND_CONCEPT, text, None, limit, None, 128))
    w = min(Q.W_SEM_MAX, max(Q.W_SEM_MIN, 1.0 - max(kw.values(), default=0.0)))
    scored = []
    for n in kw.keys() | sm.keys():
        k, s = kw.get(n, 0.0), sm.get(n, 0.0)
        score = 1.0 if k >= 1.0 else min(0.99, (1.0 - w) * k + w * s)
        if score >= Q.MIN_SCORE:
            scored.append((score, -n))
    return [(-neg, sc) for sc, neg in heapq.nlargest(limit, scored)]


def ranking_modes(s: Any, kind: int) -> dict[str, Callable[[Any, str, int],
                                                        list[tuple[int, float]]]]:
    """Each SEARCH mode's ranking of `kind` as served (`nexus.search.query`), over the
    search service `s`: mode -> f(txn, text, count) -> [(id, score)]."""
    return {
        "keyword": lambda txn, t, n: Q.run(txn, s.keyword_source(txn), kind, t, None, n),
        "semantic": lambda txn, t, n: Q.semantic(txn, s.semantic, kind, t, None, n),
        "hybrid": lambda txn, t, n: Q.hybrid(txn, s.keyword_source(txn), s.semantic, kind, t,
                                             None, n),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True)
    ap.add_argument("--per", type=int, default=80)
    ap.add_argument("--old-hybrid", action="store_true")
    args = ap.parse_args()
    data = json.loads(DATA.read_text(encoding="utf-8"))
    _, concepts, _ = search_corpus.make_corpus(100_000, seed=7)
    sets: dict[str, list[tuple[str, str, str]]] = {
        "paraphrase": [("paraphrase", q["query"], q["target"]) for q in data["queries"]],
        "labels": [(cat, q, f'{c["type"]}:{c["name"]}')
                   for cat, q, c in search_corpus.make_queries(concepts, args.per)],
    }
    nx = Nexus.open(args.db, durable=False, semantic="wordllama")
    try:
        nx.search.drain()
        s = nx.search
        modes = ranking_modes(s, KIND_CONCEPT)
        if args.old_hybrid:
            modes["hybrid, before the fill"] = lambda txn, t, n: old_hybrid(txn, s, t, n)
        hits: dict[str, dict[str, list[int]]] = {m: {} for m in modes}
        cpu: dict[str, list[float]] = {m: [] for m in modes}
        with nx.store.read() as txn:
            def label(n: int) -> str:
                h = txn.known_head(n)
                return f"{txn.symbol_text(h.type_id)}:{h.name}"
            for qs in sets.values():
                for cat, text, target in qs:
                    for mode, rank in modes.items():
                        best = float("inf")
                        for _ in range(2):
                            c0 = time.thread_time()
                            r = rank(txn, text, 10)
                            best = min(best, time.thread_time() - c0)
                        cpu[mode].append(best)
                        row = hits[mode].setdefault(cat, [0, 0])
                        row[0] += target in [label(n) for n, _ in r[:5]]
                        row[1] += 1
            exact = _exact_ceiling(s.semantic, txn, sets["paraphrase"], label)
    finally:
        nx.close()
    cats = list(hits["keyword"])
    print("| mode | CPU per ranking, median | " + " | ".join(cats) + " |")
    print("| --- | --- |" + " --- |" * len(cats))
    for mode in modes:
        cells = " | ".join(f"{hits[mode][c][0] / hits[mode][c][1]:.3f}" for c in cats)
        print(f"| {mode} | {statistics.median(cpu[mode]) * 1e3:.2f} ms | {cells} |")
    print(f"\nparaphrase recall@5 of exact cosines over the semantic index: {exact:.3f}")


def _exact_ceiling(index: Any, txn: Any, queries: list, label: Callable[[int], str]) -> float:
    ix = index.indexes[KIND_CONCEPT]
    # (a memory-mapped index: its saved file, which holds every vector once drained and
    # reopened; usearch's exact search is on the plain index)
    ix = getattr(ix, "base", None) or getattr(ix, "delta", ix)
    found = 0
    for _, text, target in queries:
        m = ix.search(index.query_vector(text), 200, exact=True)
        top: list[int] = []
        for key in m.keys.tolist():
            n = key // SLOTS
            if n not in top and txn.head(n) is not None:
                top.append(n)
            if len(top) == 5:
                break
        found += target in [label(n) for n in top]
    return found / len(queries)


if __name__ == "__main__":
    main()
