"""SEARCH on PostgreSQL (issue 22): the vectors live in the database (pgvector, HNSW), so
two engines — two servers — on one database find each other's writes at once, in every
mode, with no in-process index to go stale; and `_score` means what it means on LMDB."""
from __future__ import annotations

import pytest

from nexus import Nexus
from nexus.errors import ErrorCode, KipError

pytest.importorskip("psycopg", reason="the postgres extra is not installed")


def kip(nx: Nexus, command: str) -> list:
    out = nx.execute_kip({"command": command})
    assert "result" in out, out
    return out["result"]


def names(rows: list) -> list[str]:
    return [r["name"] for r in rows]


@pytest.fixture
def two(pg_server):
    url = pg_server.fresh_database("search")
    a = Nexus.open(url)
    b = Nexus.open(url)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def test_the_database_ships_pgvector_and_search_uses_it(two):
    a, _ = two
    from nexus.search.pg_search import PgSearchService
    assert isinstance(a.search, PgSearchService)
    with a.store.read() as txn:
        rows = txn.rows("SELECT extname FROM pg_extension WHERE extname = 'vector'", ())
        assert rows == [("vector",)]
        # Bootstrapped elements have their vectors.
        assert a.search.pg_vectors.count(txn) > 0


def test_a_big_space_gets_its_hnsw_index_and_queries_use_it(pg_server, monkeypatch):
    from nexus.search import pg_vectors
    monkeypatch.setattr(pg_vectors, "INDEX_AT", 20)      # (the bootstrap alone passes it)
    monkeypatch.setattr(pg_vectors, "INDEX_CHECK", 10)
    with Nexus.open(pg_server.fresh_database("search")) as nx:
        table = nx.search.pg_vectors
        with nx.store.read() as txn:
            defs = [r[0] for r in txn.rows(
                "SELECT indexdef FROM pg_indexes WHERE indexname = ANY(%s)",
                (table.index_names,))]
            # One partial HNSW index, the concepts' (links have no vectors of their own).
            assert len(defs) == 1 and "hnsw" in defs[0] and "kind = 0" in defs[0], defs
            bound = table.bind(txn)
            qvec = bound.query_vector("Person")
            # (At this size a scan and a sort are cheaper: the planner is told not to, to
            # see that the query's form matches the partial index.)
            txn.rows("SELECT set_config('enable_seqscan', 'off', true), "
                     "set_config('enable_sort', 'off', true)", ())
            plan = txn.rows("EXPLAIN SELECT id FROM " + table.table + " WHERE space = "
                            + table.space_lit + " AND kind = 0 ORDER BY embedding <=> %s::vector"
                            " LIMIT 10", (pg_vectors.vector_literal(qvec),))
            assert table.index_names[0] in " ".join(r[0] for r in plan), plan
        hits = kip(nx, 'SEARCH CONCEPT "Persn" LIMIT 3')
        assert names(hits)[:1] == ["Person"], hits


def test_what_one_engine_writes_the_other_finds_in_every_mode(two):
    a, b = two
    assert kip(b, 'SEARCH CONCEPT "Zanzibarite" LIMIT 5') == [] or \
        "Zanzibarite Quarry" not in names(kip(b, 'SEARCH CONCEPT "Zanzibarite" LIMIT 5'))
    kip(a, 'UPSERT { CONCEPT ?c { {type: "Person", name: "Zanzibarite Quarry"} '
           'SET ATTRIBUTES { description: "a geologist who studies rare blue minerals" } } }')
    modes = ["keyword"] + (["semantic", "hybrid"] if b.search.pg_semantic else [])
    for mode in modes:
        exact = kip(b, f'SEARCH CONCEPT "Zanzibarite Quarry" MODE "{mode}" LIMIT 3')
        assert names(exact)[:1] == ["Zanzibarite Quarry"], (mode, exact)
        assert exact[0]["metadata"]["_score"] == 1.0
    # A typo: found by the n-gram vectors (in pgvector) and the names.
    typo = kip(b, 'SEARCH CONCEPT "zanzibrite quary" MODE "keyword" LIMIT 3')
    assert names(typo)[:1] == ["Zanzibarite Quarry"], typo
    assert 0.0 < typo[0]["metadata"]["_score"] < 1.0
    # The type filter runs in the same statement: only persons.
    typed = kip(b, 'SEARCH CONCEPT "zanzibrite" WITH TYPE "Person" LIMIT 5')
    assert "Zanzibarite Quarry" in names(typed)
    assert all(r["type"] == "Person" for r in typed)
    assert kip(b, 'SEARCH CONCEPT "zanzibrite" WITH TYPE "$ConceptType" LIMIT 5') == [] or \
        "Zanzibarite Quarry" not in names(
            kip(b, 'SEARCH CONCEPT "zanzibrite" WITH TYPE "$ConceptType" LIMIT 5'))
    if b.search.pg_semantic:
        meaning = kip(b, 'SEARCH CONCEPT "scientist of rocks and gems" MODE "semantic" '
                         'LIMIT 5')
        assert "Zanzibarite Quarry" in names(meaning), meaning
        assert all(0.0 <= r["metadata"]["_score"] <= 1.0 for r in meaning)


def test_a_rename_and_a_delete_in_one_engine_show_in_the_other(two):
    a, b = two
    kip(a, 'UPSERT { CONCEPT ?c { {type: "Person", name: "Quillon Vexmoor"} } }')
    assert names(kip(b, 'SEARCH CONCEPT "Quillon Vexmor" LIMIT 3'))[:1] == ["Quillon Vexmoor"]
    kip(a, 'UPDATE ?c SET ATTRIBUTES { aliases: ["Qv Tinderbrook"] } '
           'WHERE { ?c {type: "Person", name: "Quillon Vexmoor"} }')
    assert "Quillon Vexmoor" in names(kip(b, 'SEARCH CONCEPT "Tinderbrook" LIMIT 3'))
    kip(a, 'DELETE CONCEPT ?c DETACH WHERE { ?c {type: "Person", name: "Quillon Vexmoor"} }')
    for mode in ["keyword"] + (["semantic", "hybrid"] if b.search.pg_semantic else []):
        gone = kip(b, f'SEARCH CONCEPT "Quillon Vexmoor" MODE "{mode}" LIMIT 5')
        assert "Quillon Vexmoor" not in names(gone), (mode, gone)
    assert b.search.check()["ok"], b.search.check()


def test_a_command_keeps_each_slot_of_a_concept_as_its_texts_say(pg_server):
    # A command's vectors: an alias adds a slot, dropping it removes the slot, and an
    # UPSERT that keeps the texts leaves the rows as they were (no new row version: the
    # HNSW index is not written again); the deep check compares every vector with its text.
    with Nexus.open(pg_server.fresh_database("search")) as nx:
        table = nx.search.pg_vectors

        def rows() -> list[tuple]:
            with nx.store.read() as txn:
                return txn.rows(f"SELECT slot, xmin::text FROM {table.table} WHERE space = "
                                f"%s AND id = (SELECT id FROM nexus_concepts WHERE space = "
                                f"%s AND name = %s) ORDER BY slot",
                                (txn.space, txn.space, b"Ysolde Carrow"))

        upsert = ('UPSERT { CONCEPT ?c { {type: "Person", name: "Ysolde Carrow"} '
                  'SET ATTRIBUTES { aliases: %s, note: "%s" } } }')
        kip(nx, upsert % ('["Ys Vantregar"]', "one"))
        two = rows()
        assert [slot for slot, _ in two] == [0, 1]
        kip(nx, upsert % ('["Ys Vantregar"]', "two"))     # same texts: rows untouched
        assert rows() == two
        kip(nx, upsert % ("[]", "three"))                 # the alias's slot goes
        assert [slot for slot, _ in rows()] == [0]
        assert rows()[0] == two[0]
        deep = nx.check(deep=True)
        assert deep["ok"], deep


def test_reindex_and_a_fresh_engine_rebuild_the_tables(pg_server):
    url = pg_server.fresh_database("search")
    with Nexus.open(url) as nx:
        kip(nx, 'UPSERT { CONCEPT ?c { {type: "Person", name: "Orlaith Brennock"} } }')
        report = nx.reindex()
        assert report["elements"] > 0
        assert nx.search.check()["ok"]
        deep = nx.check(deep=True)
        assert deep["ok"], deep
        assert deep["search"]["vectors_compared"] > 0
        # A vector that is not its text's is found by the deep check.
        table = nx.search.pg_vectors.table
        with nx.store.write() as w:
            w.run(f"UPDATE {table} SET embedding = (SELECT embedding FROM {table} "
                  f"WHERE space = %s ORDER BY id LIMIT 1) WHERE space = %s AND id = "
                  f"(SELECT max(id) FROM {table} WHERE space = %s)",
                  (w.space, w.space, w.space))
        assert nx.check(deep=True)["search"]["vector_stale"] == 1
        assert nx.check(deep=True, repair=True)["repaired"]["ok"]
        # Rows lost behind the engine's back (their table no longer marked complete) are
        # rebuilt by the next engine that opens the space.
        from nexus.search.pg_vectors import KEY_COMPLETE
        with nx.store.write() as w:
            w.run(f"DELETE FROM {table} WHERE space = %s", (w.space,))
            w.aux("vecq").delete(KEY_COMPLETE)
    with Nexus.open(url) as nx:
        assert nx.search.opened == "rebuilt"
        assert names(kip(nx, 'SEARCH CONCEPT "Orlaith Brenock" LIMIT 3'))[:1] == \
            ["Orlaith Brennock"]
        assert nx.search.check()["ok"]


def _people(prefix: str, count: int) -> list[dict]:
    return [{"type": "Person", "name": f"{prefix} {i:03d}",
             "attributes": {"description": f"a keeper of {prefix.lower()} lighthouse {i}"}}
            for i in range(count)]


def test_a_bulk_load_writes_vectors_that_are_its_texts_embeddings(pg_server):
    # More than a command's worth of elements: the vectors go by binary COPY; the deep
    # check compares every stored vector with its text's embedding, so a byte out of place
    # in that format would show.
    with Nexus.open(pg_server.fresh_database("search")) as nx:
        table = nx.search.pg_vectors
        with nx.store.read() as txn:
            before = table.count(txn)
        report = nx.bulk_import(_people("Quillon", 300))
        assert report["concepts_created"] == 300
        with nx.store.read() as txn:
            assert table.count(txn) >= before + 300     # (a vector per name at least)
        assert names(kip(nx, 'SEARCH CONCEPT "Quillon 123" MODE "keyword" LIMIT 1')) == \
            ["Quillon 123"]
        assert names(kip(nx, 'SEARCH CONCEPT "Quilon 123" MODE "keyword" LIMIT 3'))[:1] == \
            ["Quillon 123"]
        deep = nx.check(deep=True)
        assert deep["ok"], deep
        assert deep["search"]["vectors_compared"] >= 300


def test_a_failed_bulk_load_leaves_no_rows_and_no_vectors(pg_server):
    with Nexus.open(pg_server.fresh_database("search")) as nx:
        tables = nx.search.tables()
        with nx.store.read() as txn:
            before = [t.count(txn) for t in tables]
            elements = txn.count_concepts()
        items: list = _people("Marrowby", 200)
        items[150] = {"type": "Person"}                 # no name: the batch fails
        with pytest.raises(KipError) as failed:        # (after the first chunk's COPY)
            nx.bulk_import(items, batch_size=1000, chunk_size=100)
        assert failed.value.code is ErrorCode.KIP_1001
        with nx.store.read() as txn:
            assert [t.count(txn) for t in tables] == before
            assert txn.count_concepts() == elements
        assert "Marrowby 001" not in names(kip(nx, 'SEARCH CONCEPT "Marrowby 001" LIMIT 3'))
        assert nx.check()["ok"]
