"""The bulk path has exactly the effects of the single-item calls, and both stores end up
byte-identical after the same operations."""
from __future__ import annotations

import pytest

from nexus.errors import ErrorCode, KipError
from nexus.store import MemoryGraphStore


def rows(w, n_concepts=50):
    t1, t2, p1, p2 = w.intern("A"), w.intern("B"), w.intern("p"), w.intern("q")
    ids = list(w.reserve_ids(n_concepts))
    concepts = [(n, t1 if n % 3 else t2, f"name{n % 17}-{n}" if n % 5 else "x" * 600 + str(n),
                 {"i": n, "f": n / 2} if n % 2 else None, {"_version": 1})
                for n in ids]
    link_ids = w.reserve_ids(n_concepts * 2)
    links = []
    for k, n in enumerate(link_ids):
        s, o = ids[k % n_concepts], ids[(k * 7 + 3) % n_concepts]
        p = p1 if k < n_concepts else p2
        links.append((n, s, p, o, {"w": k} if k % 4 == 0 else {}, None))
    return concepts, links


def load_single(store):
    with store.write() as w:
        concepts, links = rows(w)
        for n, t, name, a, m in concepts:
            w.create_concept(n, t, name, a or {}, m or {})
        for n, s, p, o, a, m in links:
            w.create_link(n, s, p, o, a or {}, m or {})


def load_bulk(store):
    with store.write() as w:
        concepts, links = rows(w)
        # Deliberately out of order: the bulk path sorts.
        assert w.create_concepts(reversed(concepts)) == len(concepts)
        assert w.create_links(links[::-1]) == len(links)


def test_bulk_equals_single_calls(make_store, snapshot_of):
    a = make_store()
    b = MemoryGraphStore()
    load_single(a)
    load_bulk(b)
    assert same_state(snapshot_of(a), snapshot_of(b))
    c, d = make_store(), MemoryGraphStore()     # and the other way round
    load_bulk(c)
    load_single(d)
    assert same_state(snapshot_of(c), snapshot_of(d))


def same_state(a, b) -> bool:
    """Equal as read through the protocol, and byte-identical when both keep the same raw
    tables (LMDB and memory; a SQL backend's raw rows are its own)."""
    if a[0] != b[0]:
        return False
    return a[1] == b[1] if set(a[1]) == set(b[1]) else True


def test_both_stores_are_byte_identical(make_store, kind):
    if kind != "lmdb":
        pytest.skip("compares the LMDB store with the memory store")
    disk, mem = make_store(), MemoryGraphStore()
    for s in (disk, mem):
        load_bulk(s)
        with s.write() as w:
            w.delete(3)
            w.set_attributes(4, {"new": [1, 2.0]})
            w.aux("lex").put(b"t", b"p")
            w.intern("later")
    assert disk.dump() == mem.dump()


def test_bulk_into_a_non_empty_store(graph):
    g = graph
    with g.store.write() as w:
        new = list(w.reserve_ids(3))
        w.create_concepts([(new[0], g.drug, "Zz", {"a": 1}, None),
                           (new[1], g.drug, "Aa", None, None),
                           (new[2], g.symptom, "Aspirin", None, None)])
        l = w.new_id()
        w.create_links([(l, new[0], g.treats, g.headache, None, {"m": 1})])
    with g.store.read() as r:
        assert r.concept_id(g.drug, "Zz") == new[0] and r.attributes(new[0]) == {"a": 1}
        assert list(r.concepts_of_type(g.drug)) == [g.aspirin, g.ibu, new[0], new[1]]
        assert list(r.concepts_named("Aspirin")) == [g.aspirin, new[2]]
        assert r.count_type(g.drug) == 4 and r.count_concepts() == 7
        assert r.link_id(new[0], g.treats, g.headache) == l and r.metadata(l) == {"m": 1}
        assert r.count_predicate(g.treats) == 4 and r.count_links() == 6
        assert r.max_id() == l


@pytest.mark.parametrize("case", ["repeat_in_batch", "already_stored"])
def test_bulk_duplicate_concepts(graph, snapshot_of, case):
    g = graph
    before = snapshot_of(g.store)
    with pytest.raises(KipError) as e:
        with g.store.write() as w:
            a, b = w.reserve_ids(2)
            name = "Dup" if case == "repeat_in_batch" else "Aspirin"
            w.create_concepts([(a, g.drug, name, None, None), (b, g.drug, "Dup", None, None)])
    assert e.value.code is ErrorCode.KIP_3003
    assert snapshot_of(g.store) == before


@pytest.mark.parametrize("case", ["repeat_in_batch", "already_stored"])
def test_bulk_duplicate_links(graph, snapshot_of, case):
    g = graph
    before = snapshot_of(g.store)
    with pytest.raises(KipError) as e:
        with g.store.write() as w:
            a, b = w.reserve_ids(2)
            first = (g.ibu, g.treats, g.fever) if case == "repeat_in_batch" else \
                (g.aspirin, g.treats, g.headache)
            w.create_links([(a, *first, None, None), (b, g.ibu, g.treats, g.fever, None, None)])
    assert e.value.code is ErrorCode.KIP_3003
    assert snapshot_of(g.store) == before


def test_bulk_refuses_live_ids(graph):
    with pytest.raises(KipError) as e:
        with graph.store.write() as w:
            w.create_concepts([(graph.aspirin, graph.drug, "New", None, None)])
    assert e.value.code is ErrorCode.KIP_4003


def test_bulk_bad_value_is_kip_2003(store, snapshot_of):
    before = snapshot_of(store)
    with pytest.raises(KipError) as e:
        with store.write() as w:
            t = w.intern("T")
            w.create_concepts([(w.new_id(), t, "ok", {"x": 1}, None),
                               (w.new_id(), t, "bad", {"x": 2**64}, None)])
    assert e.value.code is ErrorCode.KIP_2003
    assert snapshot_of(store) == before


def test_empty_bulk(store):
    with store.write() as w:
        assert w.create_concepts([]) == 0 and w.create_links(iter(())) == 0
    with store.read() as r:
        assert r.count_concepts() == 0


def test_bulk_links_known_new_into_a_non_empty_store(graph):
    g = graph
    with g.store.write() as w:
        a, b = w.reserve_ids(2)
        assert w.create_links([(a, g.ibu, g.treats, g.fever, None, None),
                               (b, g.fever, g.interacts, g.aspirin, None, None)],
                              known_new=True) == 2
    with g.store.read() as r:
        assert r.link_id(g.ibu, g.treats, g.fever) == a
        assert list(r.in_links(g.aspirin)) == [(g.interacts, g.fever, b)]
        assert r.count_links() == 7
    with pytest.raises(KipError) as e:                  # a repeat in the batch is still seen
        with g.store.write() as w:
            c, d = w.reserve_ids(2)
            w.create_links([(c, g.ibu, g.source, g.fever, None, None),
                            (d, g.ibu, g.source, g.fever, None, None)], known_new=True)
    assert e.value.code is ErrorCode.KIP_3003


def test_column_methods_with_extra_metadata_equal_single_calls(make_store, snapshot_of):
    extra = {"_version": 1, "_created_at": "t0", "_updated_at": "t0"}
    a, b = make_store(), MemoryGraphStore()
    with a.write() as w:
        concepts, links = rows(w)
        for n, t, name, at, m in concepts:
            w.create_concept(n, t, name, at or {}, {**(m or {}), **extra})
        for n, s, p, o, at, m in links:
            w.create_link(n, s, p, o, at or {}, {**(m or {}), **extra})
    with b.write() as w:
        concepts, links = rows(w)
        ns, ts, names, ats, ms = map(list, zip(*concepts))
        ms = [{k: v for k, v in m.items() if not k.startswith("_")} if m else None for m in ms]
        w.create_concept_columns(range(ns[0], ns[-1] + 1), ts, names, ats, ms,
                                 extra_metadata=extra)
        half = len(links) // 2                  # two calls: ops/pso inserted at commit
        for part in (links[:half], links[half:]):
            ns, ss, ps, os_, ats, ms = map(list, zip(*part))
            w.create_link_columns(range(ns[0], ns[-1] + 1), ss, ps, os_, ats, ms,
                                  extra_metadata=extra)
        # a read of the deferred indexes inside the transaction sees them
        s, p, o = links[0][1:4]
        assert (p, s, links[0][0]) in list(w.in_links(o, p))
    assert same_state(snapshot_of(a), snapshot_of(b))


def test_deferred_link_indexes_survive_a_delete_in_the_same_transaction(graph, snapshot_of):
    g = graph
    with g.store.write() as w:
        a, b = w.reserve_ids(2)
        w.create_link_columns([a, b], [g.ibu, g.fever], [g.treats, g.interacts],
                              [g.fever, g.aspirin], known_new=True)
        assert w.delete(a)
    with g.store.read() as r:
        assert r.link_id(g.ibu, g.treats, g.fever) is None
        assert [x for x in r.links_of_predicate(g.treats) if x[2] == a] == []
        assert list(r.in_links(g.aspirin)) == [(g.interacts, g.fever, b)]


def test_repeat_in_link_columns_is_refused_before_writing(graph, snapshot_of):
    g = graph
    before = snapshot_of(g.store)
    with g.store.write() as w:
        c, d = w.reserve_ids(2)
        with pytest.raises(KipError) as e:
            w.create_link_columns([c, d], [g.ibu, g.ibu], [g.source, g.source],
                                  [g.fever, g.fever], known_new=True)
        assert e.value.code is ErrorCode.KIP_3003
        w.abort()
    assert snapshot_of(g.store) == before


@pytest.mark.parametrize("maps", [
    [{"a": 1, "b": "x"}, None, {}, {"c": [1, {"d": None}]}, {"e": 1.5, "f": True}],
    [{"k": i, "s": "v" * (i % 40)} for i in range(50)],
    [{str(i): i for i in range(14)}, {"x": 2**63 - 1}],
])
def test_encode_maps_equals_encode_map(maps):
    from nexus.store import codec
    extra = {"_version": 1, "_created_at": "now"}
    assert codec.encode_maps(maps) == [codec.encode_map(m or {}) for m in maps]
    assert codec.encode_maps(maps, extra=extra) == \
        [codec.encode_map({**(m or {}), **extra}) for m in maps]


class _Text(str):
    pass


@pytest.mark.parametrize("bad", [{"x": b"bytes"}, {1: "int key"}, {"x": 2**64},
                                 {"x": (1, 2)}, "not a map",
                                 # nested: JSON has no bytes, tuples or int keys either
                                 {"x": {"y": (1,)}}, {"x": {1: "a"}}, {"x": [b"b"]},
                                 {"x": [1, [2, {"z": 2**64}]]}, {"x": _Text("sub")}])
def test_encode_maps_refuses_what_encode_map_refuses(bad):
    from nexus.store import codec
    with pytest.raises(KipError) as e:
        codec.encode_maps([{"ok": 1}, bad], "metadata", {"_version": 1})
    assert e.value.code is ErrorCode.KIP_2003


@pytest.mark.parametrize("top", [1, 2**20, 2**40, 2**63])
def test_sorted_keys_orders_rows_as_their_bytes(top):
    """`bulk.sorted_keys` (the spo/ops/pso keys of bulk-created links) gives the rows in the
    order of their big-endian bytes, repeats kept — whether the columns fit one packed
    64-bit integer (small ids) or not (the byte-string sort)."""
    import random

    import numpy as np

    from nexus.store import bulk
    rng = random.Random(top)
    n = 500
    cols = [[rng.randrange(1, top + 1) for _ in range(n)],
            [rng.randrange(1, 9) for _ in range(n)],
            [rng.randrange(1, top + 1) for _ in range(n)],
            [rng.randrange(1, 2 * n) for _ in range(n)]]
    cols[0][:3] = cols[2][:3] = [top] * 3               # the largest id, and a repeated row
    cols[1][:3] = cols[3][:3] = [8, 8, 8]
    arrays = [np.array(c, dtype=np.uint64) for c in cols]
    codes = [bulk.U64, bulk.U32, bulk.U64, bulk.U64]
    got = bulk.as_bytes(bulk.sorted_keys(list(zip(arrays, codes))))
    expect = sorted(a.to_bytes(8, "big") + b.to_bytes(4, "big") + c.to_bytes(8, "big")
                    + d.to_bytes(8, "big") for a, b, c, d in zip(*cols))
    assert got == expect
    assert [len(k) for k in got] == [28] * n


@pytest.mark.parametrize("top", [1, 2**20, 2**32 - 1])
def test_sorted_keys_orders_the_16_byte_link_keys_as_their_bytes(top):
    """The link indexes' keys as `bulk` builds them (every field 4 bytes, ids up to the
    cap): rows in the order of their bytes, whichever sort path the widths take."""
    import random

    import numpy as np

    from nexus.store import bulk
    rng = random.Random(top)
    n = 500
    cols = [[rng.randrange(1, top + 1) for _ in range(4)] for _ in range(n)]
    cols[0] = cols[1] = [top] * 4                       # the largest id, a repeated row
    arrays = [np.array(c, dtype=np.uint64) for c in zip(*cols)]
    got = bulk.as_bytes(bulk.sorted_keys([(a, bulk.U32) for a in arrays]))
    assert got == sorted(b"".join(x.to_bytes(4, "big") for x in row) for row in cols)
    assert [len(k) for k in got] == [16] * n
