"""A write transaction on PostgreSQL holds back the element writes whose outcome it knows and
sends them with its next statement (nexus/store/pg_pipeline.py): what it wrote is what its
own later reads see, and every reader after the commit; a rollback leaves none of it; the
aux values the commit hooks read ahead are this transaction's own when it changed them."""
from __future__ import annotations

import pytest

pytest.importorskip("psycopg", reason="the postgres extra is not installed")

from nexus import Nexus  # noqa: E402
from nexus.store import open_store  # noqa: E402


@pytest.fixture
def store(pg_server):
    s = open_store(pg_server.fresh_database("writes") + "&space=w")
    yield s
    s.close()


def _new_pair(w):
    """Two new concepts and a link between them, each known absent first (held back)."""
    t, p = w.intern("Thing"), w.intern("likes")
    assert w.concept_ids([(t, "a"), (t, "b")]) == [None, None]
    a, b = w.new_id(), w.new_id()
    w.create_concept(a, t, "a", {"x": 1}, {})
    w.create_concept(b, t, "b", {}, {})
    assert w.link_id(a, p, b) is None
    n = w.new_id()
    w.create_link(n, a, p, b, {}, {"w": 1})
    w.set_attributes(a, {"x": 2})
    return t, p, a, b, n


def test_the_transaction_and_later_readers_see_what_it_held_back(store):
    with store.write() as w:
        t, p, a, b, n = _new_pair(w)
        # Reads that go to the database (not to what the transaction remembers).
        assert sorted(w.concepts_of_type(t)) == [a, b]
        assert w.out_links_of([a]) == {a: [(p, b, n)]}
    with store.read() as r:
        assert r.concept_ids([(t, "a"), (t, "b")]) == [a, b]
        assert r.attributes(a) == {"x": 2}
        assert r.link_id(a, p, b) == n and r.metadata(n) == {"w": 1}
        assert r.count_concepts() == 2 and r.count_links() == 1


def test_a_rollback_leaves_nothing_it_held_back(store):
    with pytest.raises(RuntimeError):
        with store.write() as w:
            t, p, a, b, n = _new_pair(w)
            raise RuntimeError("stop")
    with store.read() as r:
        t = r.symbol_id("Thing")
        assert t is None or r.concept_ids([(t, "a"), (t, "b")]) == [None, None]
        assert r.count_concepts() == 0 and r.count_links() == 0


def test_each_command_gets_the_next_record_of_the_version_log(pg_server):
    """The history hook reads the log's last record ahead, with the vector marker, in one
    statement: each command's record is the next one, and names what it changed."""
    nx = Nexus.open(pg_server.fresh_database("writes_kip"))
    try:
        def kip(command, **p):
            out = nx.execute_kip({"command": command, "parameters": p})
            assert "result" in out, out
            return out["result"]
        kip('UPSERT { CONCEPT ?t { {type: "$ConceptType", name: "Gadget"} '
            'SET ATTRIBUTES { description: "a thing" } } }')
        for size in (1, 2, 3):
            kip('UPSERT { CONCEPT ?g { {type: "Gadget", name: "G"} SET ATTRIBUTES '
                '{ size: :s } } }', s=size)
        log = kip("DESCRIBE HISTORY LIMIT 4")
        seqs = [e["seq"] for e in log]
        assert seqs == list(range(seqs[0], seqs[0] - 4, -1))
        gid = kip('FIND(?g) WHERE { ?g {type: "Gadget", name: "G"} }')[0]["id"]
        versions = kip("DESCRIBE HISTORY {id: :id}", id=gid)["versions"]
        assert [v["version"] for v in versions] == [3, 2, 1]
        assert versions[0]["change"] == {"attributes": {"changed": {"size": [2, 3]}}}
        assert kip('FIND(?g.attributes.size) WHERE { ?g {type: "Gadget", name: "G"} }') == [3]
    finally:
        nx.close()


def test_the_lock_statement_fits_the_server(store):
    """`plan_cache_mode` (PostgreSQL 12+) is set by the lock statement only where the server
    has it: setting an unknown parameter would abort every write (a PostgreSQL 11 based
    server). PostgreSQL 16 has it; the plain lock, what such a server gets, writes too."""
    from nexus.store import pg_schema
    assert store.lock_space == pg_schema.LOCK_SPACE_GENERIC
    store.lock_space = pg_schema.LOCK_SPACE
    with store.write() as w:
        t, p, a, b, n = _new_pair(w)
    with store.read() as r:
        assert r.concept_ids([(t, "a"), (t, "b")]) == [a, b] and r.link_id(a, p, b) == n
