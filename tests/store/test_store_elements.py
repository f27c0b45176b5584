"""Elements, indexes, counters and symbols, as the storage protocol specifies them.

Every test runs against the LMDB store and the memory store (see conftest.py).
"""
from __future__ import annotations

import pytest

from nexus.errors import ErrorCode, KipError
from nexus.store import ConceptHead, LinkHead, ReadTxn, WriteTxn


def test_transactions_satisfy_the_protocol(store):
    with store.read() as r:
        assert isinstance(r, ReadTxn)
    with store.write() as w:
        assert isinstance(w, WriteTxn)


def test_empty_store(store):
    with store.read() as r:
        assert r.max_id() == 0
        assert list(r.elements()) == []
        assert r.head(1) is None
        assert r.attributes(1) == {} and r.metadata(1) == {}
        assert r.count_concepts() == 0 and r.count_links() == 0
        assert r.symbol_id("Drug") is None
        assert list(r.concepts_of_type(1)) == []
        assert list(r.out_links(1)) == [] and list(r.in_links(1)) == []
        assert list(r.links_of_predicate(1)) == []
        assert list(r.link_predicates()) == []


def test_heads(graph):
    g = graph
    with g.store.read() as r:
        assert r.head(g.aspirin) == ConceptHead(g.aspirin, g.drug, "Aspirin")
        assert r.head(g.l1) == LinkHead(g.l1, g.aspirin, g.treats, g.headache)
        assert r.head(g.meta_link) == LinkHead(g.meta_link, g.l1, g.source, g.fever)
        assert r.head(10_000) is None
        # Values that cannot be ids are simply absent.
        assert r.head(0) is None and r.head(-3) is None and r.head(2**70) is None


def test_one_counter_for_concepts_and_links(graph):
    g = graph
    ids = [g.aspirin, g.ibu, g.headache, g.fever, g.l1, g.l2, g.l3, g.l4, g.meta_link]
    assert ids == list(range(1, 10))
    with g.store.read() as r:
        assert r.max_id() == 9
        assert list(r.elements()) == ids


def test_concept_indexes(graph):
    g = graph
    with g.store.read() as r:
        assert r.concept_id(g.drug, "Aspirin") == g.aspirin
        assert r.concept_id(g.symptom, "Aspirin") is None
        assert r.concept_id(g.drug, "aspirin") is None            # case-sensitive
        assert r.concept_id(g.drug, "Aspiri") is None
        assert list(r.concepts_of_type(g.drug)) == [g.aspirin, g.ibu]
        assert list(r.concepts_of_type(g.symptom)) == [g.headache, g.fever]
        assert list(r.concepts_named("Fever")) == [g.fever]
        assert list(r.concepts_named("Feve")) == []


def test_same_name_under_two_types(store):
    with store.write() as w:
        a, b = w.intern("A"), w.intern("B")
        x, y, z = w.new_id(), w.new_id(), w.new_id()
        w.create_concept(x, a, "Same", {}, {})
        w.create_concept(y, b, "Same", {}, {})
        w.create_concept(z, a, "Samest", {}, {})
    with store.read() as r:
        assert list(r.concepts_named("Same")) == [x, y]
        assert r.concept_id(a, "Same") == x and r.concept_id(b, "Same") == y


def test_names_that_extend_each_other(store):
    """A name index scan yields exactly that name, also when other names start with it
    or continue it with a NUL character."""
    names = ["A", "A\x00", "A\x00B", "AB", "", "\x00"]
    with store.write() as w:
        t = w.intern("T")
        ids = {}
        for name in names:
            ids[name] = w.new_id()
            w.create_concept(ids[name], t, name, {}, {})
    with store.read() as r:
        for name in names:
            assert list(r.concepts_named(name)) == [ids[name]], name
            assert r.concept_id(t, name) == ids[name]


def test_link_indexes(graph):
    g = graph
    with g.store.read() as r:
        assert r.link_id(g.aspirin, g.treats, g.headache) == g.l1
        assert r.link_id(g.aspirin, g.treats, g.ibu) is None
        assert r.link_id(g.headache, g.treats, g.aspirin) is None
        # out_links: (predicate, object, link), ordered by predicate then object.
        assert list(r.out_links(g.aspirin)) == [
            (g.treats, g.headache, g.l1), (g.treats, g.fever, g.l2),
            (g.interacts, g.ibu, g.l4)]
        assert list(r.out_links(g.aspirin, g.interacts)) == [(g.interacts, g.ibu, g.l4)]
        assert list(r.out_links(g.aspirin, g.source)) == []
        assert list(r.out_links(g.l1)) == [(g.source, g.fever, g.meta_link)]
        # in_links: (predicate, subject, link).
        assert list(r.in_links(g.headache)) == [(g.treats, g.aspirin, g.l1),
                                                (g.treats, g.ibu, g.l3)]
        assert list(r.in_links(g.fever)) == [(g.treats, g.aspirin, g.l2),
                                             (g.source, g.l1, g.meta_link)]
        assert list(r.in_links(g.fever, g.source)) == [(g.source, g.l1, g.meta_link)]
        assert list(r.in_links(g.aspirin)) == []
        # links_of_predicate: (subject, object, link).
        assert list(r.links_of_predicate(g.treats)) == [
            (g.aspirin, g.headache, g.l1), (g.aspirin, g.fever, g.l2),
            (g.ibu, g.headache, g.l3)]
        assert list(r.links_of_predicate(g.interacts)) == [(g.aspirin, g.ibu, g.l4)]
        # link_predicates: the predicates that have links, ascending.
        assert list(r.link_predicates()) == sorted({g.treats, g.interacts, g.source})


def test_link_predicates_follow_writes(graph):
    """A predicate whose last link is deleted is no longer listed, in the write transaction
    and after it; an empty store lists none."""
    g = graph
    with g.store.write() as w:
        w.delete(g.l4)
        assert list(w.link_predicates()) == sorted({g.treats, g.source})
    with g.store.read() as r:
        assert list(r.link_predicates()) == sorted({g.treats, g.source})


def test_scans_do_not_leak_into_neighbouring_ids(store):
    """Prefix scans stop at the boundary even when ids differ only in the last byte."""
    with store.write() as w:
        p = w.intern("p")
        ids = [w.new_id() for _ in range(300)]
        for n in ids:
            w.create_concept(n, p, str(n), {}, {})
        links = []
        for s, o in zip(ids[:-1], ids[1:]):
            links.append((w.new_id(), s, o))
            w.create_link(links[-1][0], s, p, o, {}, {})
    with store.read() as r:
        for l, s, o in links:
            assert list(r.out_links(s)) == [(p, o, l)]
            assert list(r.in_links(o)) == [(p, s, l)]
        assert len(list(r.links_of_predicate(p))) == len(links)


def test_counts_follow_creates_and_deletes(graph):
    g = graph
    with g.store.read() as r:
        assert r.count_concepts() == 4 and r.count_links() == 5
        assert r.count_type(g.drug) == 2 and r.count_type(g.symptom) == 2
        assert r.count_predicate(g.treats) == 3 and r.count_predicate(g.source) == 1
        assert r.count_type(999) == 0
    with g.store.write() as w:
        assert w.delete(g.meta_link) is True
        assert w.delete(g.l1) is True
        assert w.count_links() == 3 and w.count_predicate(g.treats) == 2
        assert w.count_predicate(g.source) == 0
    with g.store.read() as r:
        assert r.count_links() == 3 and r.count_predicate(g.treats) == 2
        assert r.count_predicate(g.source) == 0
        assert r.count_concepts() == 4


def test_delete_concept_removes_every_index_entry(graph):
    g = graph
    with g.store.write() as w:
        # The caller cascades: remove the concept's links first.
        for _, _, link in list(w.out_links(g.ibu)) + list(w.in_links(g.ibu)):
            w.delete(link)
        assert w.delete(g.ibu) is True
        assert w.delete(g.ibu) is False                 # already gone
    with g.store.read() as r:
        assert r.head(g.ibu) is None
        assert r.attributes(g.ibu) == {} and r.metadata(g.ibu) == {}
        assert r.concept_id(g.drug, "Ibuprofen") is None
        assert list(r.concepts_named("Ibuprofen")) == []
        assert list(r.concepts_of_type(g.drug)) == [g.aspirin]
        assert r.count_type(g.drug) == 1 and r.count_concepts() == 3
        assert g.ibu not in list(r.elements())
        assert r.link_id(g.ibu, g.treats, g.headache) is None
        assert list(r.in_links(g.headache)) == [(g.treats, g.aspirin, g.l1)]
        assert list(r.links_of_predicate(g.interacts)) == []


def test_delete_link_removes_it_from_all_three_orders(graph):
    g = graph
    with g.store.write() as w:
        w.delete(g.l2)
    with g.store.read() as r:
        assert r.head(g.l2) is None
        assert r.link_id(g.aspirin, g.treats, g.fever) is None
        assert (g.treats, g.fever, g.l2) not in list(r.out_links(g.aspirin))
        assert list(r.in_links(g.fever)) == [(g.source, g.l1, g.meta_link)]
        assert (g.aspirin, g.fever, g.l2) not in list(r.links_of_predicate(g.treats))


def test_recreating_after_delete_gets_a_new_id(graph):
    g = graph
    with g.store.write() as w:
        for _, _, link in list(w.in_links(g.fever)):
            w.delete(link)
        w.delete(g.fever)
        n = w.new_id()
        w.create_concept(n, g.symptom, "Fever", {}, {})
    assert n == 10 and n != g.fever
    with g.store.read() as r:
        assert r.concept_id(g.symptom, "Fever") == n
        assert r.head(g.fever) is None


def test_ids_are_never_reused(store):
    with store.write() as w:
        t = w.intern("T")
        a = w.new_id()
        w.create_concept(a, t, "a", {}, {})
        b = w.new_id()
        w.create_concept(b, t, "b", {}, {})
    with store.write() as w:
        w.delete(b)                                     # the highest id
    with store.write() as w:
        assert w.max_id() == b
        assert w.new_id() == b + 1
        assert w.reserve_ids(3) == range(b + 2, b + 5)
        assert w.new_id() == b + 5


def test_explicit_id_beyond_the_counter_moves_it(store):
    with store.write() as w:
        t = w.intern("T")
        w.create_concept(50, t, "x", {}, {})
    with store.write() as w:
        assert w.new_id() == 51


def test_uniqueness_is_enforced(graph):
    g = graph
    with pytest.raises(KipError) as e:
        with g.store.write() as w:
            w.create_concept(w.new_id(), g.drug, "Aspirin", {}, {})
    assert e.value.code is ErrorCode.KIP_3003
    with pytest.raises(KipError) as e:
        with g.store.write() as w:
            w.create_link(w.new_id(), g.aspirin, g.treats, g.headache, {}, {})
    assert e.value.code is ErrorCode.KIP_3003


def test_reusing_a_live_id_is_refused(graph):
    with pytest.raises(KipError) as e:
        with graph.store.write() as w:
            w.create_concept(graph.aspirin, graph.symptom, "Other", {}, {})
    assert e.value.code is ErrorCode.KIP_4003


def test_symbols(store):
    with store.write() as w:
        a = w.intern("Drug")
        assert w.intern("Drug") == a                    # idempotent
        b = w.intern("treats")
        assert a != b and a > 0 and b > 0
        assert w.symbol_id("Drug") == a and w.symbol_text(b) == "treats"
    with store.read() as r:
        assert r.symbol_id("Drug") == a and r.symbol_id("treats") == b
        assert r.symbol_text(a) == "Drug"
        assert r.symbol_id("drug") is None
        with pytest.raises(KipError) as e:
            r.symbol_text(999)
        assert e.value.code is ErrorCode.KIP_4003
    with store.write() as w:
        assert w.intern("Drug") == a                    # permanent across transactions
        assert w.intern("🧪 Ünïcode") not in (a, b)


def test_long_symbol_text(store):
    text = "p" * 5000
    with store.write() as w:
        sid = w.intern(text)
        other = w.intern("p" * 4999 + "q")
    assert sid != other
    with store.read() as r:
        assert r.symbol_id(text) == sid and r.symbol_text(sid) == text


def test_aborted_interning_is_forgotten(store):
    with store.write() as w:
        w.intern("Keep")
    with store.write() as w:
        lost = w.intern("Lost")
        w.abort()
    with store.read() as r:
        assert r.symbol_id("Lost") is None
    with store.write() as w:
        again = w.intern("Other")
    assert again == lost          # the aborted id was never committed
    with store.read() as r:
        assert r.symbol_text(again) == "Other" and r.symbol_id("Lost") is None


def test_attributes_and_metadata_are_separate_and_replaceable(graph):
    g = graph
    with g.store.write() as w:
        w.set_attributes(g.aspirin, {"dose": 500})
        w.set_metadata(g.l1, {"_version": 2, "source": "x"})
        w.set_attributes(g.l1, {})
    with g.store.read() as r:
        assert r.attributes(g.aspirin) == {"dose": 500}
        assert r.metadata(g.aspirin) == {"_version": 1}
        assert r.metadata(g.l1) == {"_version": 2, "source": "x"}
        assert r.attributes(g.l1) == {}
        fresh = r.attributes(g.aspirin)
        fresh["dose"] = 1                               # the caller may mutate it
        assert r.attributes(g.aspirin) == {"dose": 500}


def test_setting_maps_of_a_missing_element(store):
    with pytest.raises(KipError) as e:
        with store.write() as w:
            w.set_attributes(123, {"a": 1})
    assert e.value.code is ErrorCode.KIP_3002


def test_write_txn_reads_its_own_writes(store):
    with store.write() as w:
        t = w.intern("T")
        n = w.new_id()
        w.create_concept(n, t, "x", {"a": 1}, {})
        assert w.head(n) == ConceptHead(n, t, "x")
        assert w.concept_id(t, "x") == n and w.attributes(n) == {"a": 1}
        assert w.count_type(t) == 1 and w.max_id() == n
        w.delete(n)
        assert w.head(n) is None and w.concept_id(t, "x") is None
        assert w.count_type(t) == 0


def test_known_head_matches_head_for_indexed_ids(graph):
    g = graph
    with g.store.read() as r:
        for n in r.elements():
            assert r.known_head(n) == r.head(n)
        for _, o, link in r.out_links(g.aspirin):
            assert r.known_head(o) == r.head(o) and r.known_head(link) == r.head(link)
    with g.store.write() as w:
        n = w.new_id()
        w.create_concept(n, g.drug, "New", {}, {})
        assert w.known_head(w.concept_id(g.drug, "New")) == ConceptHead(n, g.drug, "New")
