"""The LMDB and memory stores cap element ids at 2**32 - 1 (`codec.MAX_ELEMENT_ID`: the link
indexes hold ids in 4 bytes). The id allocator refuses to go past it with KIP_4002
(ResourceExhausted), naming the cap, and nothing is written; ids up to the cap work in
every index. The id counter is set near the cap by a direct write of the `meta` table
(not by four billion writes). PostgreSQL has ids of its own and no such cap."""
from __future__ import annotations

import pytest

from nexus import Nexus
from nexus.errors import KipError
from nexus.store import codec

CAP = codec.MAX_ELEMENT_ID
assert CAP == 2**32 - 1


@pytest.fixture
def capped(kind, store):
    if kind == "postgresql":
        pytest.skip("PostgreSQL's element ids are its own (no 4-byte cap)")
    return store


def _set_counter(store, max_id: int) -> None:
    with store.write() as w:        # the counter as stored, past what this txn read
        w.kv.put(codec.META_MAX_ID, codec.pack_n(max_id), db=w.tables.meta)
    with store.read() as r:
        assert r.max_id() == max_id


def _refused(exc: pytest.ExceptionInfo[KipError]) -> None:
    assert exc.value.code.value == "KIP_4002"
    assert str(CAP) in exc.value.message
    assert "another database" in exc.value.hint


def test_the_allocator_hands_out_ids_up_to_the_cap_then_refuses(capped):
    store = capped
    with store.write() as w:
        t = w.intern("T")
    _set_counter(store, CAP - 2)
    with store.write() as w:
        assert w.new_id() == CAP - 1
        assert w.new_id() == CAP
        with pytest.raises(KipError) as exc:
            w.new_id()
        _refused(exc)
        with pytest.raises(KipError) as exc:
            w.reserve_ids(1)
        _refused(exc)
        w.abort()
    with store.write() as w:
        assert w.reserve_ids(2) == range(CAP - 1, CAP + 1)
        w.abort()
    with store.write() as w:
        with pytest.raises(KipError) as exc:
            w.reserve_ids(3)
        _refused(exc)
        with pytest.raises(KipError) as exc:        # an explicit id past the cap
            w.create_concept(CAP + 1, t, "x", {}, {})
        _refused(exc)
        with pytest.raises(KipError) as exc:
            w.create_concept_columns([CAP, CAP + 1], [t, t], ["x", "y"])
        _refused(exc)
        w.abort()
    with store.read() as r:
        assert r.max_id() == CAP - 2 and r.count_concepts() == 0


def test_links_between_ids_at_the_cap_are_found_by_every_index(capped):
    store = capped
    _set_counter(store, CAP - 5)
    with store.write() as w:
        t, p = w.intern("T"), w.intern("p")
        a, b = w.new_id(), w.new_id()
        w.create_concept(a, t, "a", {}, {})
        w.create_concept(b, t, "b", {}, {})
        ab = w.new_id()
        w.create_link(ab, a, p, b, {}, {})
        ids = w.reserve_ids(2)
        w.create_link_columns(ids, [b, b], [p, p], [a, b])     # the bulk path
        assert ids[-1] == CAP
    ba, bb = ids
    with store.read() as r:
        assert r.link_id(a, p, b) == ab and r.link_id(b, p, b) == bb
        assert list(r.out_links(a)) == [(p, b, ab)]
        assert list(r.out_links(b, p)) == [(p, a, ba), (p, b, bb)]
        assert list(r.in_links(b)) == [(p, a, ab), (p, b, bb)]
        assert list(r.links_of_predicate(p)) == [(a, b, ab), (b, a, ba), (b, b, bb)]
        assert r.link_id(a, p, CAP + 1) is None and list(r.out_links(CAP + 1)) == []
        check = store.check_tables(r)
        assert check.report["ok"], check.report
    with store.write() as w:
        with pytest.raises(KipError) as exc:
            w.new_id()
        _refused(exc)
        for end in (CAP + 1, 2**40):    # no element can have that id
            with pytest.raises(KipError) as exc:
                w.create_link(CAP - 5, a, p, end, {}, {})
            assert exc.value.code.value == "KIP_3002"
            with pytest.raises(KipError) as exc:
                w.repoint_link(ab, a, end)
            assert exc.value.code.value == "KIP_3002"
        assert list(w.out_links(a)) == [(p, b, ab)] and w.head(CAP - 5) is None
        w.abort()


def test_a_kip_upsert_past_the_cap_is_refused_and_writes_nothing():
    with Nexus.open("memory://", semantic="none") as nx:
        before = nx.execute_kip_readonly({"command": "DESCRIBE PRIMER"})
        _set_counter(nx.store, CAP)
        response = nx.execute_kip({"command": 'UPSERT { CONCEPT ?a { {type: "Person", '
                                              'name: "Past the cap"} } }'})
        assert response["error"]["code"] == "KIP_4002", response
        assert str(CAP) in response["error"]["message"]
        found = nx.execute_kip_readonly({"command": 'FIND(?a) WHERE { ?a {type: "Person", '
                                                    'name: "Past the cap"} }'})
        assert found["error"]["code"] == "KIP_3002", found
        with nx.store.read() as r:
            assert r.max_id() == CAP
        assert nx.execute_kip_readonly({"command": "DESCRIBE PRIMER"}) == before
