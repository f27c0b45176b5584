"""The LMDB store gives LMDB's page buffers back after a large commit by reopening its
environment (nexus.store.lmdb_store, "Memory"). The storage contract must not notice: an
open read keeps its snapshot, every commit before the swap is readable (and durable) after
it, reads and writes keep working, and every index still agrees with the data."""
from __future__ import annotations

import threading

import pytest

from nexus.ops.check import verify
from nexus.store import LmdbGraphStore, lmdb_store


@pytest.fixture
def release_always(monkeypatch):
    """Every commit that grows the file counts as large."""
    monkeypatch.setattr(lmdb_store, "RELEASE_PAGES", 1)


def _write_concepts(store, first: int, count: int) -> None:
    with store.write() as w:
        t = w.intern("Thing")
        ids = w.reserve_ids(count)
        w.create_concept_columns(ids, [t] * count, [f"thing {first + i}" for i in range(count)],
                                 [{"i": first + i} for i in range(count)], None)


def _names(txn) -> set[str]:
    return {txn.head(n).name for n in txn.elements()}


def test_open_read_keeps_its_snapshot_across_a_large_commit(tmp_path, release_always):
    store = LmdbGraphStore(str(tmp_path / "db"))
    try:
        _write_concepts(store, 0, 500)
        env = store._env
        reader = store.read()
        before = _names(reader)
        _write_concepts(store, 500, 500)            # large: due, but a read is open
        assert store._env is env                    # not swapped under the reader
        assert _names(reader) == before             # still its own snapshot
        reader.__exit__(None, None, None)
        assert store._env is not env                # released once the reader ended
        with store.read() as r:
            assert len(_names(r)) == 1000
            assert r.attributes(r.concept_id(r.symbol_id("Thing"), "thing 999")) == {"i": 999}
        _write_concepts(store, 1000, 10)            # writes keep working after the swap
        with store.read() as r:
            assert len(_names(r)) == 1010
    finally:
        store.close()
    reopened = LmdbGraphStore(str(tmp_path / "db"))   # and everything was durable
    try:
        with reopened.read() as r:
            assert len(_names(r)) == 1010
    finally:
        reopened.close()


def test_concurrent_readers_see_whole_commits_while_the_store_releases(tmp_path,
                                                                        release_always):
    store = LmdbGraphStore(str(tmp_path / "db"))
    errors: list[BaseException] = []
    stop = threading.Event()

    def read_loop():
        try:
            while not stop.is_set():
                with store.read() as r:
                    count = r.count_concepts()
                    assert count % 200 == 0         # a commit is all or nothing
                    assert sum(1 for _ in r.elements()) >= count
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=read_loop) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for k in range(10):
            _write_concepts(store, k * 200, 200)
    finally:
        stop.set()
        for t in threads:
            t.join()
    try:
        assert not errors, errors
        with store.read() as r:
            assert r.count_concepts() == 2000
    finally:
        store.close()


def test_indexes_agree_with_the_data_after_a_bulk_import_that_released(tmp_path,
                                                                        release_always):
    from nexus.api import Nexus
    from nexus.ops.bulk_import import bulk_import
    nx = Nexus.open(str(tmp_path / "nx"))
    try:
        assert "error" not in nx.execute_kip({"command": """
            UPSERT {
              CONCEPT ?a { {type: "$ConceptType", name: "Drug"} }
              CONCEPT ?b { {type: "$PropositionType", name: "treats"} }
            }"""})
        drugs = [{"type": "Drug", "name": f"drug {i}", "attributes": {"rank": i}}
                 for i in range(300)]
        links = [{"subject": {"type": "Drug", "name": f"drug {i}"}, "predicate": "treats",
                  "object": {"type": "Drug", "name": f"drug {(i * 7 + 1) % 300}"},
                  "metadata": {"source": "test"}} for i in range(300)]
        counts = bulk_import(nx, drugs, links, batch_size=100, chunk_size=50)
        assert counts["concepts_created"] == 300 and counts["propositions_created"] == 300
        report = verify(nx, deep=True)
        assert report["ok"], report
        response = nx.execute_kip({"command": 'FIND(?d.name) WHERE { ?d {type: "Drug"} '
                                              '(?d, "treats", {type: "Drug", name: "drug 8"}) }'})
        assert response["result"] == ["drug 1"], response
    finally:
        nx.close()
