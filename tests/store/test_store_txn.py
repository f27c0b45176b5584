"""Transactions: commit on normal exit, exact abort (by exception or abort()), snapshot
isolation for readers, one writer at a time — on both stores."""
from __future__ import annotations

import threading

import pytest

from nexus.errors import ErrorCode, KipError


class Boom(Exception):
    pass


def mutate_everything(w, g):
    """Touch every kind of state: symbols, counters, heads, maps, indexes, stats, aux."""
    t = w.intern("NewType")
    p = w.intern("new_pred")
    n = w.new_id()
    w.create_concept(n, t, "fresh", {"a": 1}, {"_version": 1})
    w.create_link(w.new_id(), n, p, g.aspirin, {}, {})
    w.set_attributes(g.aspirin, {"changed": True})
    w.set_metadata(g.l1, {"_version": 9})
    for _, _, link in list(w.in_links(g.fever)):
        w.delete(link)
    w.delete(g.fever)
    w.delete(g.l4)
    w.aux("engine").put(b"k", b"v")
    w.aux("lex").delete(b"term")
    w.reserve_ids(10)
    w.create_concepts([(w.new_id(), t, f"bulk{i}", None, None) for i in range(3)])


@pytest.fixture
def with_aux(graph):
    with graph.store.write() as w:
        w.aux("lex").put(b"term", b"posting")
    return graph


def test_exception_aborts_and_leaves_store_unchanged(with_aux, snapshot_of):
    g = with_aux
    before = snapshot_of(g.store)
    with pytest.raises(Boom):
        with g.store.write() as w:
            mutate_everything(w, g)
            raise Boom()
    assert snapshot_of(g.store) == before


def test_kip_error_aborts_and_propagates_unchanged(with_aux, snapshot_of):
    g = with_aux
    before = snapshot_of(g.store)
    err = KipError(ErrorCode.KIP_2002, "constraint")
    with pytest.raises(KipError) as e:
        with g.store.write() as w:
            mutate_everything(w, g)
            raise err
    assert e.value is err
    assert snapshot_of(g.store) == before


def test_base_exception_aborts_too(with_aux, snapshot_of):
    g = with_aux
    before = snapshot_of(g.store)
    with pytest.raises(KeyboardInterrupt):
        with g.store.write() as w:
            mutate_everything(w, g)
            raise KeyboardInterrupt
    assert snapshot_of(g.store) == before


def test_abort_call_discards_and_exits_normally(with_aux, snapshot_of):
    g = with_aux
    before = snapshot_of(g.store)
    with g.store.write() as w:
        mutate_everything(w, g)
        w.abort()
        w.abort()                                   # idempotent
    assert snapshot_of(g.store) == before


def test_aborted_txn_cannot_be_used(store):
    with store.write() as w:
        w.abort()
        with pytest.raises(KipError) as e:
            w.intern("X")
        assert e.value.code is ErrorCode.KIP_4003
        with pytest.raises(KipError):
            w.head(1)
        with pytest.raises(KipError):
            list(w.out_links(1))
        with pytest.raises(KipError):
            w.aux("engine").put(b"k", b"v")


def test_ids_of_an_aborted_write_may_be_handed_out_again(store):
    with store.write() as w:
        first = w.new_id()
        w.abort()
    with store.write() as w:
        assert w.new_id() == first
        assert w.max_id() == first


def test_store_usable_after_abort(graph):
    g = graph
    with pytest.raises(Boom):
        with g.store.write() as w:
            w.delete(g.l1)
            raise Boom()
    with g.store.write() as w:
        w.delete(g.l1)
    with g.store.read() as r:
        assert r.head(g.l1) is None


def test_commit_is_visible_to_later_readers_only(graph):
    g = graph
    old = g.store.read().__enter__()
    try:
        with g.store.write() as w:
            w.delete(g.l3)
            w.set_attributes(g.aspirin, {"v": 2})
            n = w.new_id()
            w.create_concept(n, g.drug, "Naproxen", {}, {})
        # The reader opened before the commit keeps its snapshot...
        assert old.head(g.l3) is not None
        assert old.head(n) is None
        assert old.concept_id(g.drug, "Naproxen") is None
        assert old.attributes(g.aspirin) == {"label": "Aspirin"}
        assert old.count_concepts() == 4 and old.count_links() == 5
        assert list(old.concepts_of_type(g.drug)) == [g.aspirin, g.ibu]
        # ...a later one sees the commit.
        with g.store.read() as new:
            assert new.head(g.l3) is None
            assert new.head(n) is not None
            assert new.attributes(g.aspirin) == {"v": 2}
            assert new.count_concepts() == 5 and new.count_links() == 4
    finally:
        old.__exit__(None, None, None)


def test_reader_does_not_see_uncommitted_writes(graph):
    g = graph
    with g.store.write() as w:
        w.delete(g.l1)
        with g.store.read() as r:           # same thread, while the write is open
            assert r.head(g.l1) is not None
            assert r.count_links() == 5
    with g.store.read() as r:
        assert r.head(g.l1) is None


def test_head_cache_respects_snapshots(graph):
    """A head seen (and cached) by a newer transaction must not appear in an older
    snapshot, and a deleted element must not reappear from the cache."""
    g = graph
    old = g.store.read().__enter__()
    try:
        with g.store.write() as w:
            n = w.new_id()
            w.create_concept(n, g.drug, "Later", {}, {})
            w.delete(g.l2)
        with g.store.read() as r:
            assert r.head(n) is not None            # now cached
        assert old.head(n) is None
        assert old.head(g.l2) is not None
        with g.store.read() as r:
            assert r.head(g.l2) is None
    finally:
        old.__exit__(None, None, None)


def test_nested_write_in_same_thread_is_refused(store):
    with store.write():
        with pytest.raises(KipError) as e:
            store.write()
        assert e.value.code is ErrorCode.KIP_4003


def test_concurrent_reader_thread_keeps_its_snapshot(graph):
    """A reader in another thread, open across a commit, sees the old state throughout,
    and never blocks the writer."""
    g = graph
    opened, committed, done = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def reader():
        with g.store.read() as r:
            seen["before"] = r.count_links()
            opened.set()
            committed.wait(10)
            seen["after"] = (r.count_links(), r.head(g.l1) is not None,
                             list(r.out_links(g.aspirin)))
        done.set()

    t = threading.Thread(target=reader)
    t.start()
    assert opened.wait(10)
    with g.store.write() as w:                       # must not wait for the reader
        w.delete(g.l1)
    committed.set()
    t.join(10)
    assert done.is_set()
    assert seen["before"] == 5
    assert seen["after"][0] == 5 and seen["after"][1] is True
    assert (g.treats, g.headache, g.l1) in seen["after"][2]
    with g.store.read() as r:
        assert r.count_links() == 4


def test_writers_are_serialized(store):
    """Two threads incrementing through read-modify-write never lose an update."""
    with store.write() as w:
        w.aux("engine").put(b"counter", b"0")

    def bump(times: int):
        for _ in range(times):
            with store.write() as w:
                t = w.aux("engine")
                t.put(b"counter", str(int(t.get(b"counter")) + 1).encode())

    threads = [threading.Thread(target=bump, args=(25,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    with store.read() as r:
        assert r.aux("engine").get(b"counter") == b"100"


def test_many_parallel_readers(graph):
    g = graph
    errors = []

    def read_many():
        try:
            for _ in range(200):
                with g.store.read() as r:
                    assert r.concept_id(g.drug, "Aspirin") == g.aspirin
                    assert len(list(r.out_links(g.aspirin))) == 3
        except Exception as exc:   # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=read_many) for _ in range(8)]
    for t in threads:
        t.start()
    with g.store.write() as w:
        w.set_attributes(g.ibu, {"x": 1})
    for t in threads:
        t.join(30)
    assert errors == []


def test_closed_store_refuses_transactions(make_store):
    s = make_store()
    s.close()
    for begin in (s.read, s.write):
        with pytest.raises(KipError) as e:
            begin()
        assert e.value.code is ErrorCode.KIP_4003


def test_finished_transactions_cannot_be_used(graph):
    g = graph
    with g.store.read() as r:
        aux = r.aux("engine")
    with g.store.write() as w:
        pass
    for call in (lambda: r.head(g.aspirin), lambda: list(r.out_links(g.aspirin)),
                 lambda: aux.get(b"k"), lambda: w.head(g.aspirin),
                 lambda: w.create_concept(w.new_id(), g.drug, "Late", {}, {})):
        with pytest.raises(KipError) as e:
            call()
        assert e.value.code is ErrorCode.KIP_4003


def test_close_inside_own_write_is_refused(store):
    with store.write():
        with pytest.raises(KipError):
            store.close()


def test_old_snapshot_survives_later_commits_to_other_tables(store):
    """A reader pinned before two commits — the first changing one table, the second
    another — still sees its own state of both."""
    with store.write() as w:
        w.aux("lex").put(b"a", b"1")
        w.aux("engine").put(b"e", b"1")
    old = store.read().__enter__()
    try:
        with store.write() as w:
            w.aux("lex").put(b"a", b"2")
        with store.write() as w:
            w.aux("engine").put(b"e", b"2")
            w.aux("engine").put(b"f", b"new")
        assert old.aux("lex").get(b"a") == b"1"
        assert old.aux("engine").get(b"e") == b"1"
        assert list(old.aux("engine").scan()) == [(b"e", b"1")]
    finally:
        old.__exit__(None, None, None)
    with store.read() as r:
        assert list(r.aux("engine").scan()) == [(b"e", b"2"), (b"f", b"new")]
