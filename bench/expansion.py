"""WordNet query expansion of the semantic embedder: paraphrase recall on two halves of the
set, the settings tried, and the CPU it adds per query.

    python bench/expansion.py [--tune] [--no-cost]

The 245 queries of bench/data/paraphrases.json are split at random into half A (the first
122 indexes of `random.Random(0).shuffle(list(range(245)))`) and half B (the other 123).
Settings are chosen on A only; A, B and all are reported, so B tells whether a choice fitted
A. The graph is bench/paraphrase.py's (the set's concepts and types, plus the bootstrap
concepts as distractors), in memory, searched end to end with
`SEARCH CONCEPT :q MODE :m LIMIT 5`.

1. The engine as shipped, expansion off and on (recall@5 and @1, semantic and hybrid).
2. `--tune`: the coordinate search that chose the shipped settings (two rounds over each
   setting, keeping the best sum of semantic + hybrid recall@5 on A, then of recall@1 on
   A, then the current value): a weighted variant of `nexus.search.wordnet.expand`
   (weights per relation: synonyms 1, broader terms, narrower terms, similar adjectives;
   senses per word; the weight of the expansion against the query). ~7 s per setting.
3. The CPU time of one query (`time.thread_time`), expansion off / on (caches warm) / on
   with every cache emptied before the query, alternated per query, best of 5 each,
   median over the 245 queries; and the cost of opening WordNet.

Prints markdown; bench/RESULTS.md's "SEARCH modes: what was tried" is written by hand.
"""
from __future__ import annotations

import argparse
import random
import re
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

from bench.paraphrase import load_paraphrase_graph, load_set  # noqa: E402
from nexus import Nexus  # noqa: E402
from nexus.search import embed, wordnet  # noqa: E402

MODES = ("semantic", "hybrid")


def halves(n: int) -> dict[str, set[int]]:
    idx = list(range(n))
    random.Random(0).shuffle(idx)
    return {"A": set(idx[:n // 2]), "B": set(idx[n // 2:]), "all": set(range(n))}


def evaluate(nx: Nexus, queries: list[dict], parts: dict[str, set[int]]) -> dict:
    """mode -> part -> (recall@5, recall@1)."""
    out: dict = {}
    for mode in MODES:
        h5, h1 = [], []
        for q in queries:
            r = nx.execute_kip_readonly({"command": "SEARCH CONCEPT :q MODE :m LIMIT 5",
                                         "parameters": {"q": q["query"], "m": mode}})
            names = [f'{h["type"]}:{h["name"]}' for h in r["result"]]
            h5.append(q["target"] in names)
            h1.append(bool(names) and names[0] == q["target"])
        out[mode] = {k: (sum(h5[i] for i in s) / len(s), sum(h1[i] for i in s) / len(s))
                     for k, s in parts.items()}
    return out


def row(label: str, res: dict) -> str:
    cells = [f"{res[m][k][at]:.3f}" for at in (0, 1) for m in MODES for k in ("A", "B", "all")]
    return f"| {label} | " + " | ".join(cells) + " |"


HEADER = ("| variant | semantic r@5 A | B | all | hybrid r@5 A | B | all "
          "| semantic r@1 A | B | all | hybrid r@1 A | B | all |\n| --- " + "| --- " * 12 + "|")


# --- the weighted variant searched by --tune ---------------------------------------------------

_WORD = re.compile(r"[a-z0-9][a-z0-9'-]*")


def weighted_terms(wn: wordnet.WordNet, text: str, senses: int, w_hyp: float,
                   w_hypo: float, w_sim: float, hypo_k: int = 3) -> dict[str, float]:
    """`wordnet.expand` with a weight per relation (synonyms 1) and narrower terms too."""
    toks = _WORD.findall(text.lower())
    out: dict[str, float] = {}
    i = 0
    while i < len(toks):
        word = ""
        for n in range(min(wordnet.PHRASE, len(toks) - i), 1, -1):
            lemma = "_".join(toks[i:i + n])
            if any(lemma in wn.index[p] for p in wordnet.POS):
                word, i = lemma, i + n
                break
        if not word:
            word, i = toks[i], i + 1
            if word in embed._FUNCTION_WORDS or len(word) < 3:
                continue
        forms = ([(p, word) for p in wordnet.POS if word in wn.index[p]]
                 or [(p, b) for p in wordnet.POS for b in wn.base_forms(word, p)])

        def add(t: str, w: float) -> None:
            if w > 0 and t.lower() != word:
                t = t.replace("_", " ")
                out[t] = max(out.get(t, 0.0), w)
        for pos, lemma in forms:
            for ss in wn.synsets(lemma, pos)[:senses]:
                for t in ss.lemmas:
                    add(t, 1.0)
                hypo = 0
                for sym, ppos, off in ss.pointers:
                    if sym in ("@", "@i"):
                        for t in wn.synset(ppos, off).lemmas[:2]:
                            add(t, w_hyp)
                    elif sym in ("~", "~i") and w_hypo > 0 and hypo < hypo_k:
                        hypo += 1
                        for t in wn.synset(ppos, off).lemmas[:1]:
                            add(t, w_hypo)
                    elif sym == "&":
                        for t in wn.synset(ppos, off).lemmas[:1]:
                            add(t, w_sim)
    return out


def weighted_query(alpha: float, **kw: float) -> Callable:
    wn = wordnet.wordnet()
    assert wn is not None

    def embed_query(self: embed.WordLlamaEmbedder, text: str) -> np.ndarray:
        q = self._embed([text])[0]
        terms = weighted_terms(wn, text, **kw)  # type: ignore[arg-type]
        if not terms or alpha == 0:
            return q
        vecs = self._term_vectors(list(terms))
        e = (np.asarray(list(terms.values()), dtype=np.float32)[:, None] * vecs).sum(axis=0)
        norm = float(np.linalg.norm(e))
        if norm == 0:
            return q
        v = q + alpha * e / norm
        return v / np.linalg.norm(v)
    return embed_query


def tune(nx: Nexus, queries: list[dict], parts: dict[str, set[int]]) -> None:
    params: dict = dict(alpha=1.0, senses=2, w_hyp=0.5, w_hypo=0.0, w_sim=0.5)
    grid: dict = dict(alpha=[0.5, 0.75, 1.0, 1.5, 2.0], senses=[1, 2, 3, 4],
                      w_hyp=[0.0, 0.25, 0.5, 1.0], w_hypo=[0.0, 0.25, 0.5],
                      w_sim=[0.0, 0.5, 1.0])
    shipped = embed.WordLlamaEmbedder.embed_query
    seen: dict = {}

    def score(p: dict) -> tuple[float, float]:
        key = tuple(sorted(p.items()))
        if key not in seen:
            kw = {k: v for k, v in p.items() if k != "alpha"}
            embed.WordLlamaEmbedder.embed_query = weighted_query(  # type: ignore[method-assign]
                p["alpha"], **kw)
            seen[key] = evaluate(nx, queries, parts)
            label = ", ".join(f"{k} {v}" for k, v in p.items())
            print(row(label, seen[key]), flush=True)
        r = seen[key]
        return (r["semantic"]["A"][0] + r["hybrid"]["A"][0],
                r["semantic"]["A"][1] + r["hybrid"]["A"][1])
    print(HEADER)
    try:
        for _ in range(2):
            for name, values in grid.items():
                now = params[name]
                params[name] = max(values, key=lambda v: (score({**params, name: v}),
                                                          v == now))
        print(f"\nchosen on A: {params}")
    finally:
        embed.WordLlamaEmbedder.embed_query = shipped  # type: ignore[method-assign]


def cost(nx: Nexus, queries: list[dict]) -> None:
    emb: Any = nx.search.semantic.embedder  # type: ignore[union-attr]
    wn = wordnet.wordnet()
    assert wn is not None
    texts = [q["query"] for q in queries]

    def search(mode: str) -> Callable[[str], object]:
        return lambda t: nx.execute_kip_readonly({
            "command": "SEARCH CONCEPT :q MODE :m LIMIT 5", "parameters": {"q": t, "m": mode}})

    def cpu(fn: Callable[[str], object], t: str) -> float:
        c = time.thread_time()
        fn(t)
        return time.thread_time() - c

    def empty_caches() -> None:
        embed._TERM_VECTORS.clear()
        wn._synset.cache_clear()
        wn._related.cache_clear()
    for t in texts:
        search("hybrid")(t)
    print("| CPU per query (median of 245, best of 5 each) | expansion off | on | on, caches "
          "empty | added: on / caches empty |\n| --- | --- | --- | --- | --- |")
    for label, fn in (("query vector (embed_query)", emb.embed_query),
                      ("SEARCH MODE \"semantic\"", search("semantic")),
                      ("SEARCH MODE \"hybrid\"", search("hybrid"))):
        off, on, cold = [], [], []
        for t in texts:
            a, b, c = [], [], []
            for _ in range(5):
                emb.expansion = False
                a.append(cpu(fn, t))
                emb.expansion = True
                b.append(cpu(fn, t))
                empty_caches()
                c.append(cpu(fn, t))
            off.append(min(a))
            on.append(min(b))
            cold.append(min(c))

        def ms(v: list[float]) -> str:
            return f"{statistics.median(v) * 1000:.3f} ms"
        print(f"| {label} | {ms(off)} | {ms(on)} | {ms(cold)} | "
              f"+{ms([y - x for x, y in zip(off, on)])} / "
              f"+{ms([y - x for x, y in zip(off, cold)])} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tune", action="store_true", help="rerun the search over settings")
    ap.add_argument("--no-cost", action="store_true", help="skip the CPU measurement")
    args = ap.parse_args()
    if not (embed.semantic_installed() and wordnet.installed()):
        sys.exit("bench/expansion.py needs the semantic extra: pip install 'nexus[semantic]'")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0, c0 = time.perf_counter(), time.process_time()
    wordnet.wordnet()
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) / 1024
    print(f"WordNet opened in {time.perf_counter() - t0:.3f} s ({time.process_time() - c0:.3f} "
          f"s CPU), max RSS +{grown:.0f} MB\n")
    data = load_set()
    queries = data["queries"]
    parts = halves(len(queries))
    nx = Nexus.open(None, semantic="wordllama")
    try:
        load_paraphrase_graph(nx, data)
        emb: Any = nx.search.semantic.embedder  # type: ignore[union-attr]
        print(HEADER)
        emb.expansion = False
        print(row("WordLlama alone (expansion off)", evaluate(nx, queries, parts)))
        emb.expansion = True
        print(row("with WordNet expansion (as shipped)", evaluate(nx, queries, parts)))
        print()
        if args.tune:
            tune(nx, queries, parts)
            print()
        if not args.no_cost:
            cost(nx, queries)
    finally:
        nx.close()


if __name__ == "__main__":
    main()
