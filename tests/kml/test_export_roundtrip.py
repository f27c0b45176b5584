"""EXPORT round trip (spec §5.3): a random graph → EXPORT, page by page → applied in order
to a fresh database → the same graph, ids and engine metadata aside.

200 random small graphs on memory:// stores: a few types and predicates, concepts with
random attribute and metadata values (nested, unicode, quotes, floats and integers),
links between concepts and higher-order links (a link's end another link), and random
MERGEs before the export (they move links onto other nodes, so a link may come to refer to a
newer one). The export is paged with a random LIMIT; every page is an independent capsule
applied in order (§5.3 "applying the pages in order reproduces the full subgraph"). Every
fourth graph also goes through `kip export`'s text (`Nexus.export_text`), the same writer.
"""
from __future__ import annotations

import json
import random
import sys
from importlib.resources import files
from pathlib import Path
from typing import Any

from nexus import Nexus

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from canonical import canonical_graph  # noqa: E402   (shared with tests/cli: tests/canonical.py)

# A fresh database: the Genesis capsule only, no search index (neither is under test here;
# opening with every bundled capsule and indexing it would be most of the test's time).
GENESIS = files("nexus.bundled").joinpath("Genesis.kip").read_text(encoding="utf-8")
TYPES = ("Alpha", "Beta")
PREDICATES = ("rel", "about")
SCHEMA = "UPSERT {\n" + "".join(
    f'  CONCEPT ?t{i} {{ {{type: "$ConceptType", name: "{t}"}} SET ATTRIBUTES '
    f'{{ description: "type {t}" }} }}\n' for i, t in enumerate(TYPES)) + "".join(
    f'  CONCEPT ?p{i} {{ {{type: "$PropositionType", name: "{p}"}} SET ATTRIBUTES '
    f'{{ description: "predicate {p}", subject_types: ["*"], object_types: ["*"] }} }}\n'
    for i, p in enumerate(PREDICATES)) + "}"
BRANCHES = ([f'?x {{type: "{t}"}}' for t in TYPES]
            + [f'?x {{type: "$ConceptType", name: "{t}"}}' for t in TYPES]
            + [f'?x {{type: "$PropositionType", name: "{p}"}}' for p in PREDICATES]
            + [f'?x (?s, "{p}", ?o)' for p in PREDICATES])
EVERYTHING = ("EXPORT ?x WHERE { " + BRANCHES[0] + "".join(
    f" UNION {{ {b} }}" for b in BRANCHES[1:]) + " }")
NAMES = ["a", "b", "c", "Zoë", 'say "hi"', "back\\slash", "日本", "x y", "d", "e"]


def value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 2 else 6)
    if kind == 0:
        return rng.randint(-5, 10**6)
    if kind == 1:
        return rng.choice([0.5, -2.25, 1e-7, 3.0, 123456.789])
    if kind == 2:
        return rng.choice(NAMES)
    if kind == 3:
        return rng.choice([True, False])
    if kind == 4:
        return None
    if kind == 5:
        return ""
    if kind in (6, 7):
        return [value(rng, depth + 1) for _ in range(rng.randrange(3))]
    return {rng.choice(["k", "deep", "ü"]): value(rng, depth + 1) for _ in range(2)}


def a_map(rng: random.Random, prefix: str) -> dict[str, Any]:
    return {f"{prefix}{i}": value(rng) for i in range(rng.randrange(3))}


def build(rng: random.Random, nx: Nexus) -> None:
    run(nx, SCHEMA)
    concepts = [(rng.choice(TYPES), name) for name in rng.sample(NAMES, rng.randint(1, 7))]
    blocks = []
    for i, (t, name) in enumerate(concepts):
        attrs, meta = a_map(rng, "attr"), a_map(rng, "meta")
        blocks.append(f"CONCEPT ?c{i} {{ {{type: {json.dumps(t)}, name: {json.dumps(name)}}}"
                      + (f" SET ATTRIBUTES {json.dumps(attrs)}" if attrs else "") + " }"
                      + (f" WITH METADATA {json.dumps(meta)}" if meta else ""))
    ends = [f"?c{i}" for i in range(len(concepts))]
    triples: set[tuple[str, str, str]] = set()
    for j in range(rng.randrange(10)):
        s, p, o = rng.choice(ends), rng.choice(PREDICATES), rng.choice(ends)
        if (s, p, o) in triples:
            continue
        triples.add((s, p, o))
        attrs, meta = a_map(rng, "la"), a_map(rng, "lm")
        blocks.append(f'PROPOSITION ?l{j} {{ ({s}, "{p}", {o})'
                      + (f" SET ATTRIBUTES {json.dumps(attrs)}" if attrs else "") + " }"
                      + (f" WITH METADATA {json.dumps(meta)}" if meta else ""))
        ends.append(f"?l{j}")          # later links may be about this one
    run(nx, "UPSERT {\n" + "\n".join(blocks) + "\n}")
    for _ in range(rng.randrange(3)):      # consolidate some same-type pairs
        same = [(a, b) for a in concepts for b in concepts if a != b and a[0] == b[0]]
        if not same:
            break
        (t, s), (_, o) = rng.choice(same)
        out = nx.execute_kip({"command": "MERGE CONCEPT ?s INTO ?t WHERE { ?s {type: :t, name: "
                              ":s} ?t {type: :t, name: :o} }",
                              "parameters": {"t": t, "s": s, "o": o}})
        assert "error" not in out or out["error"]["code"] == "KIP_3002", out
        concepts = [c for c in concepts if c != (t, s)]


def fresh() -> Nexus:
    nx = Nexus.open("memory://", bootstrap=False)
    nx.detach_search()
    run(nx, GENESIS)
    return nx


def run(nx: Nexus, command: str, **params: Any) -> Any:
    out = nx.execute_kip({"command": command, "parameters": params})
    assert "error" not in out, (out, command)
    return out


def export_pages(nx: Nexus, limit: int) -> list[str]:
    pages, cursor = [], None
    while True:
        command = EVERYTHING + f" LIMIT {limit}" + (" CURSOR :c" if cursor else "")
        out = nx.execute_kip_readonly({"command": command,
                                       "parameters": {"c": cursor} if cursor else {}})
        assert "error" not in out, out
        pages.append(out["result"]["capsule"])
        cursor = out.get("next_cursor")
        if cursor is None:
            return pages
        assert len(pages) < 100


def test_export_reproduces_200_random_graphs():
    for seed in range(200):
        rng = random.Random(seed)
        with fresh() as src:
            build(rng, src)
            expected = canonical_graph(src)
            pages = export_pages(src, rng.choice([1, 2, 3, 5, 1000]))
            text = src.export_text() if seed % 4 == 0 else None
        with fresh() as dst:
            for page in pages:
                if page:
                    run(dst, page)
            assert canonical_graph(dst) == expected, (seed, pages)
        if text is not None:
            with fresh() as dst:
                run(dst, text)
                assert canonical_graph(dst) == expected, (seed, text)
