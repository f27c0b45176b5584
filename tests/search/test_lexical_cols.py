"""A bulk load's lexical rows derived from the columns it wrote (`nexus.search.lexical_cols`)
are the rows the per-document path derives: the `lex` and `lexdoc` tables byte for byte,
and SEARCH answers with the same `_score`s.

The data is made to reach every corner of the derivation: a term in several fields of one
document (a name's word in its type, its description, its aliases; a predicate's word in an
end's name; both ends of a link with the same name), repeated words, camelCase, accents,
CJK, a name that normalises to nothing, tokens past the term and field limits, nested
attribute text, and links with attribute text (left to the per-document path) among links
without."""
from __future__ import annotations

import random

import pytest

from nexus.api import Nexus
from nexus.ops.bulk_import import bulk_import
from nexus.search import lexical, lexical_cols, lexical_terms
from nexus.search.text import MAX_TERM_BYTES
from nexus.store.graph_write import GraphWriteTxn

SCHEMA = """
UPSERT {
  CONCEPT ?a { {type: "$ConceptType", name: "DrugClass"} SET ATTRIBUTES {description: "x"} }
  CONCEPT ?b { {type: "$ConceptType", name: "Pain"} SET ATTRIBUTES {description: "y"} }
  CONCEPT ?c { {type: "$PropositionType", name: "treats_pain"}
               SET ATTRIBUTES {description: "z", subject_types: ["*"], object_types: ["*"]} }
  CONCEPT ?d { {type: "$PropositionType", name: "near"}
               SET ATTRIBUTES {description: "w", subject_types: ["*"], object_types: ["*"]} }
}
"""
WORDS = ["pain", "drug", "class", "treats", "willow", "Bark", "fever", "Ångström", "naïve",
         "東京大学", "drugClass", "MedicalDevice", "near", "x" * (MAX_TERM_BYTES + 9), "pain"]


def _text(rng: random.Random, k: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(k))


def _data(seed: int, n: int) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    concepts = []
    for i in range(n):
        t = ("DrugClass", "Pain")[i % 2]
        name = f"{_text(rng, rng.randint(1, 3))} {i}" if i % 17 else \
            f"!!! {'?' * (i + 1)}"          # (normalises to nothing)
        attrs: dict = {"description": _text(rng, rng.randint(0, 12)),
                       "score": rng.random()}
        if i % 3 == 0:
            attrs["aliases"] = [_text(rng, 2), _text(rng, 1)]
        if i % 7 == 0:
            attrs["alias"] = f"{name} {_text(rng, 1)}"
        if i % 5 == 0:
            attrs["notes"] = {"deep": [_text(rng, 3), {"deeper": _text(rng, 2)}]}
        if i % 11 == 0:
            attrs["description"] = _text(rng, 450)      # past MAX_TOKENS_PER_FIELD
        concepts.append({"type": t, "name": name, "attributes": attrs})
    for i in range(0, 40, 4):           # the same name in the other type: ends alike
        twin = dict(concepts[i], type=("Pain", "DrugClass")[i % 2])
        concepts.append(twin)
    n = len(concepts)
    links, seen = [], set()
    for i in range(4 * n):
        s, o = rng.randrange(n), rng.randrange(n)
        p = ("treats_pain", "near")[i % 2]
        if (s, p, o) in seen:
            continue
        seen.add((s, p, o))
        link = {"subject": {"type": concepts[s]["type"], "name": concepts[s]["name"]},
                "predicate": p,
                "object": {"type": concepts[o]["type"], "name": concepts[o]["name"]}}
        if i % 9 == 0:
            link["attributes"] = {"note": _text(rng, 3)}     # text: the per-document path
        elif i % 13 == 0:
            link["attributes"] = {"weight": i}               # no text: derived
        links.append(link)
    return concepts, links


def _tables(nx: Nexus) -> dict:
    with nx.store.read() as txn:
        return {t: list(txn.aux(t).scan()) for t in ("lex", "lexdoc")}


QUERIES = ['SEARCH CONCEPT "willow bark" LIMIT 20', 'SEARCH CONCEPT "drug class" LIMIT 20',
           'SEARCH CONCEPT "angstrom naive" WITH TYPE "Pain" LIMIT 30',
           'SEARCH CONCEPT "東京" LIMIT 10', 'SEARCH CONCEPT "medical device" LIMIT 10',
           'SEARCH PROPOSITION "treats pain fever" LIMIT 20', 'SEARCH PROPOSITION "near" LIMIT 20']


def _answers(nx: Nexus, kip) -> list:
    """Per query its scores, and its hits above the last score (hits of equal score come
    in the vector index's order, which its threaded build does not fix: a tie at the
    LIMIT may be cut either way)."""
    out = []
    for q in QUERIES:
        rows = [(h.get("id"), h["metadata"]["_score"]) for h in kip(nx, q)]
        last = rows[-1][1] if rows else None
        out.append(([r[1] for r in rows], sorted(r for r in rows if r[1] != last)))
    return out


def _derive_spied(columns: bool, monkeypatch) -> list[int]:
    """`lexical.derive` replaced for the test: from the columns (`columns`) or never (every
    document then takes the per-document path); returns the list that collects the number
    of documents each call derived."""
    derived: list[int] = []
    real = lexical_cols.derive

    def spy(*args):
        order, got = real(*args) if columns else (args[3], [])
        derived.extend(len(d.ids) for d in got)
        return order, got
    monkeypatch.setattr(lexical, "derive", spy)
    return derived


def _load(path: str, kip, data: tuple[list, list], chunk: int, columns: bool,
          monkeypatch) -> tuple[dict, list, int]:
    """Load `data` into a new LMDB nexus at `path`, deriving from the columns or not;
    (the tables, the answers, the documents derived from columns)."""
    derived = _derive_spied(columns, monkeypatch)
    lexical_terms.drop_caches()
    nx = Nexus.open(path, durable=False, semantic="none")
    try:
        kip(nx, SCHEMA)
        bulk_import(nx, *data, chunk_size=chunk)
        assert nx.search.check(deep=True)["ok"]
        return _tables(nx), _answers(nx, kip), sum(derived)
    finally:
        nx.close()


@pytest.mark.parametrize("seed,chunk,ids_known_new", [(1, 50_000, True), (2, 61, True),
                                                     (3, 500, True), (8, 97, False)])
def test_rows_derived_from_columns_are_the_per_document_rows(tmp_path, kip, monkeypatch,
                                                            seed, chunk, ids_known_new):
    if not ids_known_new:       # a store that cannot tell: the forward entries are read
        monkeypatch.delattr(GraphWriteTxn, "first_new_id")
    data = _data(seed, 300)
    per_doc = _load(str(tmp_path / "a"), kip, data, chunk, False, monkeypatch)
    by_cols = _load(str(tmp_path / "b"), kip, data, chunk, True, monkeypatch)
    assert per_doc[2] == 0
    # every concept and every link without attribute text came from the columns, but
    # those of a chunk small enough to be left pending (`lexical.SMALL_WRITE`)
    want = 0
    for items in data:
        for i in range(0, len(items), chunk):
            part = items[i:i + chunk]
            if len(part) > lexical.SMALL_WRITE:
                want += sum(1 for x in part if "note" not in x.get("attributes", {}))
    assert by_cols[2] == want
    assert by_cols[0]["lexdoc"] and by_cols[0] == per_doc[0]
    assert all(scores for scores, _ in by_cols[1]) and by_cols[1] == per_doc[1]


def test_the_loads_text_table_started_over_mid_load_gives_the_same_rows(tmp_path, kip,
                                                                       monkeypatch):
    """The load's table of counted texts (`lexical_terms.LoadTexts`) starts over when it
    would pass ROWS_MAX: the chunks after that count their texts again, into new rows and
    term codes, and derive the same rows as the per-document path."""
    data = _data(5, 300)
    per_doc = _load(str(tmp_path / "a"), kip, data, 97, False, monkeypatch)
    cleared: list[int] = []
    real_clear = lexical_terms.LoadTexts.clear

    def clear(self):
        cleared.append(getattr(self, "size", 0))
        real_clear(self)
    monkeypatch.setattr(lexical_terms.LoadTexts, "clear", clear)
    monkeypatch.setattr(lexical_terms.LoadTexts, "ROWS_MAX", 150)
    by_cols = _load(str(tmp_path / "b"), kip, data, 97, True, monkeypatch)
    assert by_cols[2] > 0
    assert any(cleared), "the table never started over mid-load"
    assert by_cols[0]["lexdoc"] and by_cols[0] == per_doc[0]
    assert by_cols[1] == per_doc[1]


def test_the_loads_text_table_is_emptied_when_the_load_ends(tmp_path, kip):
    """The counted texts of a bulk load are kept for the load only (`drop_caches`, which
    the search service calls when a load ends)."""
    nx = Nexus.open(str(tmp_path / "db"), durable=False, semantic="none")
    try:
        kip(nx, SCHEMA)
        lexical_terms.drop_caches()
        assert not len(lexical_terms.LOAD_TEXTS)
        table = lexical_terms.LOAD_TEXTS
        rows = table.rows_of(True, ["aspirinTablet", "Willow bark", "aspirinTablet"])
        assert rows[0] == rows[2] != rows[1]
        starts, sizes, codes, reps = table.arrays()
        first = [table.terms[c] for c in codes[starts[0]:starts[1]].tolist()]
        assert first == [t for t, _ in lexical_terms.count_text("aspirinTablet", True)[1]]
        bulk_import(nx, *_data(6, 40), chunk_size=1000)     # (its end empties it)
        assert not len(lexical_terms.LOAD_TEXTS) and not lexical_terms.LOAD_TEXTS.terms
    finally:
        nx.close()


def test_a_second_load_updating_elements_takes_the_per_document_path(tmp_path, kip,
                                                                      monkeypatch):
    """Elements that exist already (an update) are never derived from the columns: a
    second load that changes the first's concepts and adds new ones indexes as the
    per-document path does."""
    first = _data(4, 120)
    more = _data(5, 200)[0][120:160]            # new names (their index is in them)
    changed = [dict(c, attributes={"description": f"changed {c['name']} willow"})
               for c in first[0]]
    second = (changed + more, [
        {"subject": {"type": a["type"], "name": a["name"]}, "predicate": "near",
         "object": {"type": b["type"], "name": b["name"]}} for a, b in zip(more, more[1:])])
    out = []
    for name, columns in (("a", False), ("b", True)):
        _load(str(tmp_path / name), kip, first, 40, columns, monkeypatch)
        # (chunks of 65: the 130 changed concepts, then the 40 new ones)
        out.append(_load(str(tmp_path / name), kip, second, 65, columns, monkeypatch))
    assert out[1][0] == out[0][0] and out[1][1] == out[0][1]
    # the new concepts and links are derived from the columns, the updates are not
    assert len(first[0]) == 130 and out[1][2] == len(more) + len(second[1])
