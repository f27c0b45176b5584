"""`WriteTxn.repoint_link` (MERGE, spec §4.4): a link's ends move, its id stays.

Every test runs against every registered backend (conftest.py). What the protocol says:
same id, predicate, attributes and metadata; every index follows; a taken (s, p, o) is
KIP_3003 and a missing link KIP_3002; snapshots older than the commit keep the old ends,
newer ones (and the writing transaction itself) see the new ones.
"""
from __future__ import annotations

import pytest

from nexus.errors import ErrorCode, KipError
from nexus.store import LinkHead


def test_repoint_moves_the_ends_and_every_index(graph):
    g = graph
    with g.store.write() as w:
        # Aspirin -treats-> Fever becomes Ibuprofen -treats-> Fever
        w.repoint_link(g.l2, g.ibu, g.fever)
        assert w.head(g.l2) == LinkHead(g.l2, g.ibu, g.treats, g.fever)
        assert w.link_id(g.ibu, g.treats, g.fever) == g.l2
    with g.store.read() as r:
        assert r.head(g.l2) == LinkHead(g.l2, g.ibu, g.treats, g.fever)
        assert r.known_head(g.l2) == LinkHead(g.l2, g.ibu, g.treats, g.fever)
        assert r.link_id(g.aspirin, g.treats, g.fever) is None
        assert r.link_id(g.ibu, g.treats, g.fever) == g.l2
        assert (g.treats, g.fever, g.l2) in list(r.out_links(g.ibu))
        assert (g.treats, g.fever, g.l2) not in list(r.out_links(g.aspirin))
        assert (g.treats, g.ibu, g.l2) in list(r.in_links(g.fever))
        assert (g.ibu, g.fever, g.l2) in list(r.links_of_predicate(g.treats))
        assert (g.aspirin, g.fever, g.l2) not in list(r.links_of_predicate(g.treats))
        assert r.count_predicate(g.treats) == 3 and r.count_links() == 5
        assert r.attributes(g.l1) == {"confidence": 0.9}
        report = g.store.check_tables(r).report
        assert report["ok"], report


def test_repoint_keeps_attributes_and_metadata(graph):
    g = graph
    with g.store.write() as w:
        w.repoint_link(g.l1, g.ibu, g.fever)
    with g.store.read() as r:
        assert r.attributes(g.l1) == {"confidence": 0.9}
        # the higher-order link still refers to the same id
        assert r.head(g.meta_link).subject == g.l1


def test_an_older_snapshot_keeps_the_old_ends(graph):
    g = graph
    with g.store.read() as before:
        assert before.head(g.l3) == LinkHead(g.l3, g.ibu, g.treats, g.headache)
        with g.store.write() as w:
            w.repoint_link(g.l3, g.ibu, g.fever)
        assert before.head(g.l3) == LinkHead(g.l3, g.ibu, g.treats, g.headache)
        assert before.known_head(g.l3) == LinkHead(g.l3, g.ibu, g.treats, g.headache)
        with g.store.read() as after:
            assert after.head(g.l3) == LinkHead(g.l3, g.ibu, g.treats, g.fever)
            assert after.known_head(g.l3) == LinkHead(g.l3, g.ibu, g.treats, g.fever)
        # the old reader reading again does not put the old head back for newer readers
        assert before.head(g.l3).object == g.headache
        with g.store.read() as after:
            assert after.known_head(g.l3).object == g.fever


def test_an_aborted_repoint_leaves_nothing(graph, snapshot_of):
    g = graph
    with g.store.read() as r:
        r.head(g.l2)
    before = snapshot_of(g.store)
    with pytest.raises(RuntimeError):
        with g.store.write() as w:
            w.repoint_link(g.l2, g.ibu, g.fever)
            raise RuntimeError("abort")
    assert snapshot_of(g.store) == before
    with g.store.read() as r:
        assert r.known_head(g.l2) == LinkHead(g.l2, g.aspirin, g.treats, g.fever)


def test_a_taken_triple_and_a_missing_link_are_refused(graph, snapshot_of):
    g = graph
    before = snapshot_of(g.store)
    with pytest.raises(KipError) as e:
        with g.store.write() as w:
            w.repoint_link(g.l2, g.aspirin, g.headache)   # = l1
    assert e.value.code is ErrorCode.KIP_3003
    with pytest.raises(KipError) as e:
        with g.store.write() as w:
            w.repoint_link(g.aspirin, g.ibu, g.fever)     # a concept, not a link
    assert e.value.code is ErrorCode.KIP_3002
    assert snapshot_of(g.store) == before


# --- repoint_links: the batch form (MERGE moves all of a concept's links in one call) ------

def test_a_batch_moves_every_link_and_every_index(graph):
    g = graph
    with g.store.write() as w:
        # Aspirin's links move onto Ibuprofen; l1 would collide with l3 (Ibuprofen treats
        # Headache), and l4 (Aspirin interacts_with Ibuprofen) becomes a self-loop
        answers = w.repoint_links([(g.l1, g.ibu, g.headache), (g.l2, g.ibu, g.fever),
                                   (g.l4, g.ibu, g.ibu)])
        assert answers == [g.l3, None, None]
        assert w.head(g.l1) == LinkHead(g.l1, g.aspirin, g.treats, g.headache)
        assert w.head(g.l2) == LinkHead(g.l2, g.ibu, g.treats, g.fever)
        assert w.link_id(g.ibu, g.interacts, g.ibu) == g.l4
    with g.store.read() as r:
        assert r.head(g.l2) == LinkHead(g.l2, g.ibu, g.treats, g.fever)
        assert r.head(g.l4) == LinkHead(g.l4, g.ibu, g.interacts, g.ibu)
        assert r.link_id(g.aspirin, g.treats, g.fever) is None
        assert r.link_id(g.aspirin, g.interacts, g.ibu) is None
        assert sorted(r.out_links(g.aspirin)) == [(g.treats, g.headache, g.l1)]
        assert (g.interacts, g.ibu, g.l4) in list(r.in_links(g.ibu))
        assert (g.ibu, g.fever, g.l2) in list(r.links_of_predicate(g.treats))
        assert r.attributes(g.l1) == {"confidence": 0.9}
        assert r.count_links() == 5
        report = g.store.check_tables(r).report
        assert report["ok"], report


def test_a_batch_answers_collisions_in_order(graph):
    g = graph
    with g.store.write() as w:
        # l2 takes (Ibuprofen, treats, Fever) first: l3 then collides with l2, the batch's
        # own move; l2 left (Aspirin, treats, Fever), so a later move may take it
        answers = w.repoint_links([(g.l2, g.ibu, g.fever), (g.l3, g.ibu, g.fever),
                                   (g.l1, g.aspirin, g.fever)])
        assert answers == [None, g.l2, None]
        # l3 still holds (Ibuprofen, treats, Headache) when l1 asks, then moves to the
        # triple l1 left in the previous batch
        answers = w.repoint_links([(g.l1, g.ibu, g.headache), (g.l3, g.aspirin, g.headache)])
        assert answers == [g.l3, None]
    with g.store.read() as r:
        assert r.link_id(g.ibu, g.treats, g.fever) == g.l2
        assert r.link_id(g.aspirin, g.treats, g.headache) == g.l3
        assert r.head(g.l1) == LinkHead(g.l1, g.aspirin, g.treats, g.fever)
        assert r.head(g.l3) == LinkHead(g.l3, g.aspirin, g.treats, g.headache)
        report = g.store.check_tables(r).report
        assert report["ok"], report


def test_a_batch_with_a_missing_link_or_a_repeated_id_writes_nothing(graph, snapshot_of):
    g = graph
    before = snapshot_of(g.store)
    for moves, code in (([(g.l2, g.ibu, g.fever), (g.aspirin, g.ibu, g.fever)],
                         ErrorCode.KIP_3002),
                        ([(g.l2, g.ibu, g.fever), (g.l2, g.ibu, g.headache)],
                         ErrorCode.KIP_4003)):
        with pytest.raises(KipError) as e:
            with g.store.write() as w:
                w.repoint_links(moves)
        assert e.value.code is code
        with g.store.read() as r:
            assert r.head(g.l2) == LinkHead(g.l2, g.aspirin, g.treats, g.fever)
    assert snapshot_of(g.store) == before


def test_bump_versions_answers_what_it_replaced_and_the_rest_stays(graph):
    # `WriteTxn.bump_versions` (MERGE's moved links): `_version` +1, `_updated_at` now, the
    # other keys as they were; a store may decline (None), then the caller bumps the map.
    g = graph
    now = "2026-11-28T20:00:00.125Z"
    with g.store.write() as w:
        w.set_metadata(g.l2, {"source": "trial", "_version": 3,
                              "_created_at": "2026-11-28T11:24:17.402Z",
                              "_updated_at": "2026-11-28T11:24:17.402Z"})
    with g.store.write() as w:
        before = w.metadata(g.l2)
        [answer] = w.bump_versions([g.l2], now)
        if answer is None:          # not patched in place by this store (PostgreSQL)
            assert "Pg" in type(w).__name__
            return
        assert answer == (before["_version"], before["_updated_at"])
        assert w.metadata(g.l2) == {**before, "_version": before["_version"] + 1,
                                    "_updated_at": now}
    with g.store.read() as r:
        assert r.metadata(g.l2) == {**before, "_version": before["_version"] + 1,
                                    "_updated_at": now}
