"""`bulk_import`: JSONL-shaped concepts and links with UPSERT's semantics, one transaction
per batch, no KIP parse per item."""
from __future__ import annotations

import pytest

from nexus.ops.bulk_import import bulk_import
from nexus.errors import KipError

SCHEMA = """
UPSERT {
  CONCEPT ?a { {type: "$ConceptType", name: "Drug"} }
  CONCEPT ?b { {type: "$ConceptType", name: "Symptom"} }
  CONCEPT ?c { {type: "$PropositionType", name: "treats"} }
  CONCEPT ?d { {type: "$PropositionType", name: "has_side_effect"} }
}
"""


def C(t, n, a=None, m=None):
    item = {"type": t, "name": n}
    if a is not None:
        item["attributes"] = a
    if m is not None:
        item["metadata"] = m
    return item


def L(s, p, o, m=None, a=None):
    item = {"subject": {"type": s[0], "name": s[1]}, "predicate": p,
            "object": {"type": o[0], "name": o[1]}, "metadata": m or {}}
    if a is not None:
        item["attributes"] = a
    return item


def state(nx):
    """Every element but the bootstrap's, keyed by what it is, without timestamps."""
    out = {}
    with nx.store.read() as t:
        def key(n):
            h = t.head(n)
            if hasattr(h, "name"):
                return (t.symbol_text(h.type_id), h.name)
            return (key(h.subject), t.symbol_text(h.predicate_id), key(h.object))
        for n in t.elements():
            meta = {k: v for k, v in t.metadata(n).items() if k not in ("_created_at",
                                                                          "_updated_at")}
            out[key(n)] = (t.attributes(n), meta)
    return out


@pytest.fixture
def schema_nx(nx):
    assert "error" not in nx.execute_kip({"command": SCHEMA})
    return nx


def test_creates_merges_and_counts(schema_nx):
    nx = schema_nx
    concepts = [C("Drug", "Aspirin", {"risk": 1}, {"source": "a"}), C("Symptom", "Headache"),
                C("Drug", "Aspirin", {"otc": True}, {"confidence": 0.5}),     # repeated: merge
                C("Symptom", "Fever", {"x": None})]
    links = [L(("Drug", "Aspirin"), "treats", ("Symptom", "Headache"), {"source": "l"}),
             L(("Drug", "Aspirin"), "treats", ("Symptom", "Headache"), {"w": 1}, {"k": 2}),
             L(("Drug", "Aspirin"), "treats", ("Symptom", "Fever"))]
    counts = bulk_import(nx, concepts, links)
    assert counts == {"concepts_created": 3, "concepts_updated": 0, "propositions_created": 2,
                      "propositions_updated": 0, "batches": 2}
    s = state(nx)
    assert s[("Drug", "Aspirin")] == ({"risk": 1, "otc": True},
                                      {"source": "a", "_version": 2, "confidence": 0.5})
    assert s[("Symptom", "Fever")] == ({"x": None}, {"_version": 1})
    assert s[(("Drug", "Aspirin"), "treats", ("Symptom", "Headache"))] == (
        {"k": 2}, {"source": "l", "_version": 2, "w": 1})
    # again, in small batches: everything exists, everything is updated once per item
    counts = bulk_import(nx, concepts, links, batch_size=2)
    assert counts["concepts_created"] == counts["propositions_created"] == 0
    assert counts["concepts_updated"] == 4 and counts["propositions_updated"] == 3
    assert counts["batches"] == 4
    assert state(nx)[("Drug", "Aspirin")][1]["_version"] == 4


@pytest.mark.parametrize("batch,chunk", [(16, 16), (1000, 7), (1000, 1000)])
def test_same_result_as_upsert(open_nexus, batch, chunk):
    a, b = open_nexus(name="a"), open_nexus(name="b")
    for nx in (a, b):
        nx.execute_kip({"command": SCHEMA})
    concepts = [C("Drug", f"D{i}", {"i": i, "f": i / 2}, {"source": "gen"}) for i in range(50)]
    concepts += [C("Symptom", f"S{i}", {"i": i}) for i in range(10)]
    concepts += [C("Drug", "D3", {"again": True})]
    links = [L(("Drug", f"D{i}"), "treats", ("Symptom", f"S{i % 10}"), {"c": i}) for i in range(50)]
    links += [L(("Drug", f"D{i}"), "has_side_effect", ("Symptom", f"S{(i * 7) % 10}"))
              for i in range(0, 50, 3)]
    links += [L(("Drug", "D5"), "treats", ("Symptom", "S5"), {"c": 99})]
    bulk_import(a, concepts, links, batch_size=batch, chunk_size=chunk)
    for c in concepts:
        r = b.execute_kip({"command": "UPSERT { CONCEPT ?x { {type: :t, name: :n} "
                                      "SET ATTRIBUTES :a } WITH METADATA :m }",
                           "parameters": {"t": c["type"], "n": c["name"],
                                          "a": c.get("attributes", {}),
                                          "m": c.get("metadata", {})}})
        assert "error" not in r, r
    for link in links:
        r = b.execute_kip({"command": "UPSERT { PROPOSITION ?l { ({type: :st, name: :sn}, :p, "
                                      "{type: :ot, name: :on}) } WITH METADATA :m }",
                           "parameters": {"st": link["subject"]["type"],
                                          "sn": link["subject"]["name"], "p": link["predicate"],
                                          "ot": link["object"]["type"],
                                          "on": link["object"]["name"],
                                          "m": link["metadata"]}})
        assert "error" not in r, r
    assert state(a) == state(b)


@pytest.mark.parametrize("concepts,links,code", [
    ([C("Gene", "X")], [], "KIP_2001"),
    ([C("Drug", "X")], [L(("Drug", "X"), "cures", ("Drug", "X"))], "KIP_2001"),
    ([C("Drug", "X")], [L(("Drug", "X"), "treats", ("Symptom", "Nope"))], "KIP_3002"),
    ([C("Drug", "X", {"_a": 1})], [], "KIP_2002"),
    ([C("Drug", "X", None, {"_version": 7})], [], "KIP_2002"),
    ([C("Domain", "CoreSchema", {"description": "mine"})], [], "KIP_3004"),
    ([{"type": "Drug"}], [], "KIP_1001"),
    ([C("Drug", "X", {"big": 2 ** 70})], [], "KIP_2003"),
    ([C("Drug", "X")], [{**L(("Drug", "X"), "treats", ("Drug", "X")), "predicate": 7}],
     "KIP_1001"),
    ([C("Drug", "X")], [{**L(("Drug", "X"), "treats", ("Drug", "X")), "predicate": ["t"]}],
     "KIP_1001"),
])
def test_errors_leave_the_batch_out(schema_nx, concepts, links, code):
    nx = schema_nx
    before = nx.store.dump()
    with nx.store.read() as t:
        links_before = t.count_links()
    with pytest.raises(KipError) as info:
        bulk_import(nx, concepts, links)
    assert info.value.code.value == code
    if links:       # the concept batch committed before the failing link batch
        with nx.store.read() as t:
            # none of the failing batch's links (its concepts have no domain link)
            assert t.count_links() == links_before
    else:
        assert nx.store.dump() == before


def test_privileged_bulk_may_touch_the_core(schema_nx):
    bulk_import(schema_nx, [C("Domain", "CoreSchema", {"extra": 1})], privileged=True)
    assert state(schema_nx)[("Domain", "CoreSchema")][0]["extra"] == 1


def test_links_to_existing_concepts_and_progress(schema_nx):
    nx = schema_nx
    nx.execute_kip({"command": 'UPSERT { CONCEPT ?h { {type: "Symptom", name: "Headache"} } }'})
    seen = []
    bulk_import(nx, [C("Drug", f"D{i}") for i in range(5)],
                [L(("Drug", f"D{i}"), "treats", ("Symptom", "Headache")) for i in range(5)],
                batch_size=2, progress=lambda kind, done: seen.append((kind, done)))
    assert seen == [("concepts", 2), ("concepts", 4), ("concepts", 5),
                    ("links", 2), ("links", 4), ("links", 5)]
    with nx.store.read() as t:
        h = t.concept_id(t.symbol_id("Symptom"), "Headache")
        assert len(list(t.in_links(h))) == 5


def test_writes_between_batches_are_seen(schema_nx):
    """Another writer committing between two batches (here: from the progress callback)
    creates a concept and a link that a later batch also names: they are merged, never
    duplicated, and a concept it deletes is not linked to."""
    nx = schema_nx

    def meddle(kind, done):
        if (kind, done) == ("concepts", 2):
            r = nx.execute_kip({"command": 'UPSERT { CONCEPT ?d { {type: "Drug", name: "D3"} } }'})
            assert "error" not in r
        if (kind, done) == ("concepts", 5):
            r = nx.execute_kip({"command": 'UPSERT { CONCEPT ?d { {type: "Drug", name: "D1"} '
                                           'SET PROPOSITIONS { ("treats", {type: "Symptom", '
                                           'name: "S"}) } } }'})
            assert "error" not in r
            r = nx.execute_kip({"command": 'DELETE CONCEPT ?d DETACH WHERE '
                                           '{ ?d {type: "Drug", name: "D2"} }'})
            assert "error" not in r

    concepts = [C("Symptom", "S"), C("Drug", "D0"), C("Drug", "D1"), C("Drug", "D2"),
                C("Drug", "D3", {"a": 1})]
    links = [L(("Drug", "D0"), "treats", ("Symptom", "S")),
             L(("Drug", "D1"), "treats", ("Symptom", "S"), {"bulk": True})]
    counts = bulk_import(nx, concepts, links, batch_size=2, progress=meddle)
    assert counts["concepts_created"] == 4 and counts["concepts_updated"] == 1
    assert counts["propositions_created"] == 1 and counts["propositions_updated"] == 1
    s = state(nx)
    assert s[("Drug", "D3")][0] == {"a": 1}
    assert s[(("Drug", "D1"), "treats", ("Symptom", "S"))][1]["bulk"] is True
    with nx.store.read() as t:
        sym = t.symbol_id("Symptom")
        assert len(list(t.in_links(t.concept_id(sym, "S")))) == 2
    with pytest.raises(KipError) as info:       # D2 was deleted by the other writer
        bulk_import(nx, [], [L(("Drug", "D2"), "treats", ("Symptom", "S"))])
    assert info.value.code.value == "KIP_3002"


def test_streams_generators_in_chunks_of_one_transaction(schema_nx):
    """Generators are consumed chunk by chunk; a batch is still one transaction (a failure
    in its last chunk leaves nothing of its earlier chunks)."""
    nx = schema_nx
    consumed = []

    def concepts():
        for i in range(25):
            consumed.append(i)
            yield C("Drug", f"G{i}")
        yield C("Drug", "G_bad", {"_reserved": 1})
    with pytest.raises(KipError) as info:
        bulk_import(nx, concepts(), batch_size=100, chunk_size=10)
    assert info.value.code.value == "KIP_2002"
    assert not any(k[0] == "Drug" for k in state(nx))         # the whole batch is out
    counts = bulk_import(nx, (C("Drug", f"G{i}") for i in range(25)), batch_size=100,
                         chunk_size=10)
    assert counts["concepts_created"] == 25 and counts["batches"] == 1


def test_chunks_larger_than_a_slice_of_the_column_passes(schema_nx):
    """The fast paths read their columns a slice at a time (`_SLICE` items): a chunk of
    several slices loads every item once, in order, and an item in a later slice that the
    fast path cannot take (a repeat, a malformed item) still sends the whole chunk to the
    item-by-item path, with the same answer."""
    from nexus.ops.bulk_import import _SLICE
    nx = schema_nx
    n = 2 * _SLICE + 5
    concepts = [C("Drug", f"D{i}", {"i": i}) for i in range(n)]
    concepts += [C("Symptom", f"S{i}") for i in range(7)]
    links = [L(("Drug", f"D{i}"), "treats", ("Symptom", f"S{i % 7}"), {"c": i})
             for i in range(n)]
    links.append(L(("Drug", "D1"), "treats", ("Symptom", "S1"), {"again": True}))  # repeat
    counts = bulk_import(nx, concepts, links)
    assert counts["concepts_created"] == n + 7 and counts["propositions_created"] == n
    s = state(nx)
    assert s[("Drug", f"D{n - 1}")] == ({"i": n - 1}, {"_version": 1})
    assert s[(("Drug", f"D{n - 1}"), "treats", ("Symptom", f"S{(n - 1) % 7}"))] == (
        {}, {"c": n - 1, "_version": 1})
    assert s[(("Drug", "D1"), "treats", ("Symptom", "S1"))] == (
        {}, {"c": 1, "again": True, "_version": 2})
    bad = [L(("Drug", f"D{i}"), "has_side_effect", ("Symptom", "S0")) for i in range(n)]
    bad[-1] = {"subject": {"type": "Drug", "name": "D0"}, "predicate": "has_side_effect",
               "object": {"type": "Symptom"}}                  # no name: in the last slice
    with nx.store.read() as t:
        links_before = t.count_links()
    with pytest.raises(KipError) as info:
        bulk_import(nx, [], bad)
    assert info.value.code.value == "KIP_1001" and f"link #{n - 1} " in info.value.message
    with nx.store.read() as t:
        assert t.count_links() == links_before
