"""A database written by an earlier version lacks the aux tables a newer one added (e.g. the
gram postings' `gram`). Opening it creates them in a commit of the open's own, outside the
write-ahead log; a process that then writes nothing (`kip check`) must still leave the file
consistent with its checkpoint, or the next open takes it for an unclean stop, restores the
checkpoint and rolls the tables back — every time."""
from __future__ import annotations

import logging
import os

import lmdb

from nexus import Nexus
from nexus.ops.check import verify
from nexus.store import wal as walog

PERSON = 'UPSERT { CONCEPT ?a { {type: "Person", name: "Quinamiparin Smith"} } }'


def _as_an_earlier_version(path: str) -> None:
    """Drop the `aux.gram` table of the closed database at `path`, then make the log's
    checkpoint that state, as a clean close of an earlier version leaves it."""
    ckpt = walog.read_checkpoint(path)
    assert ckpt is not None, "the database is expected to have a write-ahead log"
    env = lmdb.open(path, subdir=True, max_dbs=64)
    with env.begin(write=True) as txn:
        txn.drop(env.open_db(b"aux.gram", txn=txn), delete=True)
    env.sync(True)
    txnid, psize = env.info()["last_txnid"], env.stat()["psize"]
    env.close()
    log = walog.Wal(path, ckpt.generation)
    log.checkpoint(txnid, walog.read_metas(os.path.join(path, "data.mdb"), psize))
    log.truncate()
    log.close()
    assert walog.prepare(path).clean


def _tables(path: str) -> set[bytes]:
    env = lmdb.open(path, subdir=True, max_dbs=64, readonly=True, lock=False)
    with env.begin() as txn:
        names = set(txn.cursor().iternext(values=False))
    env.close()
    return names


def test_a_check_of_an_earlier_versions_database_leaves_it_clean(tmp_path, caplog):
    path = str(tmp_path / "db")
    with Nexus.open(path, semantic="none") as nx:
        nx.execute_kip({"command": PERSON})
    _as_an_earlier_version(path)
    assert b"aux.gram" not in _tables(path)
    for _ in range(2):          # what `kip check` opens: a process that must write nothing
        with caplog.at_level(logging.WARNING, logger="nexus"):
            with Nexus.open(path, semantic="none", bootstrap=False,
                            save_vectors=False) as nx:
                report = verify(nx)
        assert not [r for r in caplog.records if "unclean stop" in r.getMessage()]
        assert report["ok"], report
        assert report["search"]["gram_unbuilt"] == 1
        assert "not built yet" in report["pending"]
        recovery = walog.prepare(path)
        assert recovery is not None and recovery.clean
        assert b"aux.gram" in _tables(path)
    with Nexus.open(path, semantic="none") as nx:   # an open for writing builds them
        hits = nx.execute_kip({"command": 'SEARCH CONCEPT "Quinamiprin Smith" LIMIT 3'})
        assert [h["name"] for h in hits["result"]] == ["Quinamiparin Smith"]
        report = verify(nx, deep=True)
        assert report["ok"] and report["search"]["gram_unbuilt"] == 0, report
        assert "pending" not in report


def test_a_reader_beside_the_owner_opens_an_earlier_versions_database(tmp_path):
    """`Nexus.follow` (a `kip serve --workers` reader) cannot create tables: the ones a
    newer version added read as empty, and everything else answers as before."""
    path = str(tmp_path / "db")
    with Nexus.open(path, semantic="none") as nx:
        nx.execute_kip({"command": PERSON})
    _as_an_earlier_version(path)
    find = {"command": 'FIND(?p.name) WHERE { ?p {type: "Person", name: :n} }',
            "parameters": {"n": "Quinamiparin Smith"}}
    with Nexus.follow(path) as reader:
        assert reader.execute_kip_readonly(find) == {"result": ["Quinamiparin Smith"]}
        with reader.store.read() as txn:
            assert txn.aux("gram").get(b"anything") is None
            assert list(txn.aux("gram").scan()) == [] and txn.aux("gram").count() == 0
        refused = reader.execute_kip({"command": PERSON.replace("Smith", "Jones")})
        assert refused["error"]["code"] == "KIP_4003"
    assert b"aux.gram" not in _tables(path)         # the reader created nothing
