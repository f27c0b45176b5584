"""SEARCH PROPOSITION recall at scale: does the right link come back, per mode and query kind.

    python bench/proposition_recall.py --db <dir> [--n 200] [--seed 5]

`--db` is any LMDB database with SEARCH (e.g. a copy of the 100k graph that
bench/paraphrase.py builds; it is opened without durability and written only by the
vector indexer's own files). `--n` links are drawn at random; for each, four queries
(the link's ends and predicate as the search document shows them):

- `ends`: "subject object", as written;
- `ends typo`: the same with one character dropped from the longest word of each end;
- `ends+pred typo`: "subject predicate object" with those typos;
- `object+pred`: "predicate object" (no typo).

A query counts as found when a link with the same subject and object (`ends*`), or the
link itself (the others), is among the first 5 hits of `nexus.search.query` in that mode
(keyword, semantic, hybrid; the ranking only, as bench/search_quality_100k.py measures it),
with the median CPU time of one ranking (`time.thread_time`). Prints markdown.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

from nexus import Nexus  # noqa: E402
from bench.search_quality_100k import ranking_modes  # noqa: E402
from nexus.search.text import F_ENDPOINT, F_PREDICATE, KIND_LINK, element_doc  # noqa: E402


def typo(text: str) -> str:
    words = text.split()
    if not words:
        return text
    i = max(range(len(words)), key=lambda k: len(words[k]))
    w = words[i]
    if len(w) >= 4:
        words[i] = w[: len(w) // 2] + w[len(w) // 2 + 1:]
    return " ".join(words)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    nx = Nexus.open(args.db, durable=False, semantic="wordllama")
    try:
        nx.search.drain()
        s = nx.search
        modes = ranking_modes(s, KIND_LINK)
        with nx.store.read() as txn:
            links = sorted(link for _, _, link in _all_links(txn))
            rng = random.Random(args.seed)
            sample = rng.sample(links, min(args.n, len(links)))
            queries: list[tuple[str, str, int]] = []
            for n in sample:
                doc = element_doc(txn, n)
                assert doc is not None
                pred = next(t for f, t in doc.fields if f == F_PREDICATE).replace("_", " ")
                subj, obj = [t for f, t in doc.fields if f == F_ENDPOINT][:2]
                queries += [("ends", f"{subj} {obj}", n),
                            ("ends typo", f"{typo(subj)} {typo(obj)}", n),
                            ("ends+pred typo", f"{typo(subj)} {pred} {typo(obj)}", n),
                            ("object+pred", f"{pred} {obj}", n)]
            hits: dict[str, dict[str, list[int]]] = {m: {} for m in modes}
            cpu: dict[str, list[float]] = {m: [] for m in modes}
            for cat, text, target in queries:
                want = txn.head(target)
                for mode, rank in modes.items():
                    c0 = time.thread_time()
                    r = rank(txn, text, 10)
                    cpu[mode].append(time.thread_time() - c0)
                    top = [n for n, _ in r[:5]]
                    if cat.startswith("ends"):
                        ok = any((h := txn.head(n)) is not None and h.subject == want.subject
                                 and h.object == want.object for n in top)
                    else:
                        ok = target in top
                    row = hits[mode].setdefault(cat, [0, 0])
                    row[0] += ok
                    row[1] += 1
    finally:
        nx.close()
    cats = list(hits["keyword"])
    print(f"{len(sample)} links of {len(links)}, recall@5")
    print("| mode | CPU per ranking, median | " + " | ".join(cats) + " |")
    print("| --- | --- |" + " --- |" * len(cats))
    for mode in modes:
        cells = " | ".join(f"{hits[mode][c][0] / hits[mode][c][1]:.3f}" for c in cats)
        print(f"| {mode} | {statistics.median(cpu[mode]) * 1e3:.2f} ms | {cells} |")


def _all_links(txn: Any):
    for pred in _predicates(txn):
        yield from txn.links_of_predicate(pred)


def _predicates(txn: Any) -> list[int]:
    seen: set[int] = set()
    for n in txn.elements():
        h = txn.head(n)
        p = getattr(h, "predicate_id", None)
        if p is not None and p not in seen:
            seen.add(p)
    return sorted(seen)


if __name__ == "__main__":
    main()
