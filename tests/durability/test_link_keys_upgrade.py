"""A database written before element ids were capped (format `nexus-store/1`: the link
indexes' keys with 8-byte element ids, 28 bytes) opens in this version: its owner's open
converts the three link tables to 16-byte keys once, in one write transaction, after the
write-ahead log's replay; every answer is the same and `check --deep` is clean. A kill during
the conversion leaves the old layout, which the next open converts. A read-only open of an
unconverted database is refused with a hint (only a writable open converts)."""
from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import textwrap

import lmdb
import pytest

from nexus import Nexus
from nexus.errors import KipError
from nexus.ops.check import verify
from nexus.store import codec
from nexus.store import wal as walog
from nexus.store.lmdb_store import LmdbGraphStore

# The link keys as the earlier version wrote them (its codec's SPO, OPS and PSO).
OLD = {"spo": struct.Struct(">QIQQ"), "ops": struct.Struct(">QIQQ"),
       "pso": struct.Struct(">IQQQ")}
NEW = struct.Struct(">IIII")

DATA = """
UPSERT {
  CONCEPT ?a { {type: "Person", name: "Ada"} SET ATTRIBUTES { age: 36 } }
  CONCEPT ?b { {type: "Person", name: "Bob"} }
  CONCEPT ?c { {type: "Person", name: "Cy"} }
  CONCEPT ?e { {type: "Event", name: "Launch"} }
  CONCEPT ?a2 { {type: "Person", name: "Ada"} SET PROPOSITIONS { ("knows", ?b) ("knows", ?c)
      ("attended", ?e) } }
  CONCEPT ?b2 { {type: "Person", name: "Bob"} SET PROPOSITIONS { ("knows", ?c)
      ("attended", ?e) } }
}
"""
SCHEMA = """
UPSERT {
  CONCEPT ?p { {type: "$ConceptType", name: "Person"} }
  CONCEPT ?v { {type: "$ConceptType", name: "Event"} }
  CONCEPT ?k { {type: "$PropositionType", name: "knows"} }
  CONCEPT ?t { {type: "$PropositionType", name: "attended"} }
}
"""
QUERIES = [
    'FIND(?a.name, ?b.name) WHERE { ?a {type: "Person"} (?a, "knows", ?b) } ORDER BY ?a.name',
    'FIND(?p.name) WHERE { (?p, "attended", {type: "Event", name: "Launch"}) } '
    'ORDER BY ?p.name',
    'FIND(?l) WHERE { ?l ({type: "Person", name: "Ada"}, "knows", {type: "Person", '
    'name: "Cy"}) }',
    'FIND(COUNT(?l)) WHERE { ?l (?s, ?p, ?o) }',
]


def _answers(nx: Nexus) -> list:
    out = []
    for q in QUERIES:
        response = nx.execute_kip_readonly({"command": q})
        assert "error" not in response, response
        out.append(response["result"])
    return out


def _links(path_or_store) -> dict:
    """Every link index answer of the store, read through the protocol."""
    store = path_or_store
    with store.read() as r:
        elements = list(r.elements())
        out = {"out": {n: list(r.out_links(n)) for n in elements},
               "in": {n: list(r.in_links(n)) for n in elements},
               "preds": {p: list(r.links_of_predicate(p)) for p in r.link_predicates()}}
        out["ids"] = {(s, p, o): r.link_id(s, p, o) for s in elements
                      for p, o, _ in out["out"][s]}
        out["by_pred"] = {p: list(r.out_links(s, p)) for s in elements
                          for p, _, _ in out["out"][s]}
    return out


def _key_sizes(path: str) -> dict[str, set[int]]:
    env = lmdb.open(path, subdir=True, max_dbs=64, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            sizes = {t: {len(k) for k in txn.cursor(env.open_db(t.encode(), txn=txn))
                         .iternext(values=False)} for t in OLD}
            sizes["format"] = {txn.get(codec.META_FORMAT,
                                       db=env.open_db(b"meta", txn=txn))}  # type: ignore
    finally:
        env.close()
    return sizes


def _as_an_earlier_version(path: str, tag: bytes = codec.FORMAT_TAG_V1) -> None:
    """Rewrite the closed database at `path` as the earlier version left it: the three link
    tables with 28-byte keys and its format tag (or only the tag `tag`), made the log's
    checkpoint when it has one (as a clean close leaves it)."""
    ckpt = walog.read_checkpoint(path)
    env = lmdb.open(path, subdir=True, max_dbs=64)
    with env.begin(write=True) as txn:
        for table, old in OLD.items() if tag == codec.FORMAT_TAG_V1 else ():
            db = env.open_db(table.encode(), txn=txn)
            keys = [NEW.unpack(k) for k in txn.cursor(db).iternext(values=False)]
            txn.drop(db, delete=False)
            for fields in keys:
                assert txn.put(old.pack(*fields), b"", db=db)
        txn.put(codec.META_FORMAT, tag, db=env.open_db(b"meta", txn=txn))
    env.sync(True)
    txnid, psize = env.info()["last_txnid"], env.stat()["psize"]
    env.close()
    if ckpt is not None:
        log = walog.Wal(path, ckpt.generation)
        log.checkpoint(txnid, walog.read_metas(os.path.join(path, "data.mdb"), psize))
        log.truncate()
        log.close()
        assert walog.prepare(path).clean


def _opens_the_same_and_writes(path: str, wal: bool, answers: list, links: dict) -> None:
    """Opened by its owner, the database at `path` gives `links` and `answers`, checks clean
    deep, and takes a new link (Cy knows Ada), clean after it too."""
    with Nexus.open(path, semantic="none", wal=wal, bootstrap=False) as nx:
        assert _links(nx.store) == links
        assert _answers(nx) == answers
        report = verify(nx, deep=True)
        assert report["ok"], report
        response = nx.execute_kip({"command": 'UPSERT { CONCEPT ?c { {type: "Person", '
                                              'name: "Cy"} SET PROPOSITIONS { ("knows", '
                                              '{type: "Person", name: "Ada"}) } } }'})
        assert "error" not in response, response
        assert verify(nx, deep=True)["ok"]


def _made(path: str):
    with Nexus.open(path, semantic="none") as nx:
        for command in (SCHEMA, DATA):
            response = nx.execute_kip({"command": command})
            assert "error" not in response, response
        answers = _answers(nx)
        links = _links(nx.store)
    return answers, links


@pytest.mark.parametrize("wal", [True, False])
def test_an_earlier_versions_database_is_converted_once_and_answers_the_same(tmp_path, wal,
                                                                              caplog):
    path = str(tmp_path / "db")
    answers, links = _made(path)
    assert _key_sizes(path) == {"spo": {16}, "ops": {16}, "pso": {16},
                                "format": {codec.FORMAT_TAG}}
    _as_an_earlier_version(path)
    assert _key_sizes(path) == {"spo": {28}, "ops": {28}, "pso": {28},
                                "format": {codec.FORMAT_TAG_V1}}
    caplog.set_level("INFO", logger="nexus.store")
    _opens_the_same_and_writes(path, wal, answers, links)   # a new link: the new layout
    assert sum("converted" in r.getMessage() for r in caplog.records) == 1
    assert _key_sizes(path) == {"spo": {16}, "ops": {16}, "pso": {16},
                                "format": {codec.FORMAT_TAG}}
    caplog.clear()
    with Nexus.open(path, semantic="none", wal=wal, bootstrap=False) as nx:
        assert not any("converted" in r.getMessage() for r in caplog.records)
        assert not any("unclean stop" in r.getMessage() for r in caplog.records)
        assert verify(nx, deep=True)["ok"]
        ada_knows = nx.execute_kip_readonly({"command": QUERIES[0]})["result"]
        assert ("Cy", "Ada") in set(zip(*ada_knows))


def test_the_logs_records_are_replayed_before_the_conversion(tmp_path, caplog):
    """A log of the earlier version (its records hold 28-byte keys) is replayed onto the
    old layout, then the whole is converted: the replayed link is found by every index."""
    path = str(tmp_path / "db")
    _made(path)
    _as_an_earlier_version(path)
    with _raw(path) as state:
        cy, bob, knows, n_links, n_knows, max_id = state
    new = max_id + 1
    ops: list[object] = [
        "head", codec.pack_n(new), codec.link_head_value(cy, knows, bob),
        "spo", OLD["spo"].pack(cy, knows, bob, new), b"",
        "ops", OLD["ops"].pack(bob, knows, cy, new), b"",
        "pso", OLD["pso"].pack(knows, cy, bob, new), b"",
        "stats", codec.ST_LINKS, codec.pack_n(n_links + 1),
        "stats", codec.ST_PRED + codec.pack_sid(knows), codec.pack_n(n_knows + 1),
        "meta", codec.META_MAX_ID, codec.pack_n(new)]
    ckpt = walog.read_checkpoint(path)
    assert ckpt is not None
    log = walog.Wal(path, ckpt.generation)
    log.append(walog.encode_ops(ops))
    log.close()
    caplog.set_level("INFO", logger="nexus.store")
    with LmdbGraphStore(path, wal=True) as store:
        with store.read() as r:
            assert r.link_id(cy, knows, bob) == new
            assert (knows, bob, new) in list(r.out_links(cy))
            assert (knows, cy, new) in list(r.in_links(bob))
            assert (cy, bob, new) in list(r.links_of_predicate(knows))
            check = store.check_tables(r)
            assert check.report["ok"], check.report
    messages = [r.getMessage() for r in caplog.records]
    replayed = next(i for i, m in enumerate(messages) if "replayed 1 write-ahead" in m)
    converted = next(i for i, m in enumerate(messages) if "converted" in m)
    assert replayed < converted
    assert _key_sizes(path)["spo"] == {16}


class _raw:
    """(Cy, Bob, knows, links, knows links, max_id) of the closed database at `path`, read
    from its raw tables (it is in the earlier format: no store opens it read-only)."""

    def __init__(self, path: str) -> None:
        self.env = lmdb.open(path, subdir=True, max_dbs=64, readonly=True, lock=False)

    def __enter__(self):
        env = self.env
        with env.begin() as txn:
            def db(name: str):
                return env.open_db(name.encode(), txn=txn)
            person = codec.unpack_sid(txn.get(b"Person", db=db("symx")))[0]
            knows = codec.unpack_sid(txn.get(b"knows", db=db("symx")))[0]

            def concept(name: str) -> int:
                return int.from_bytes(txn.get(codec.pack_sid(person) + name.encode(),
                                              db=db("tn")), "big")
            stats = db("stats")
            return (concept("Cy"), concept("Bob"), knows,
                    codec.decode_count(txn.get(codec.ST_LINKS, db=stats)),
                    codec.decode_count(txn.get(codec.ST_PRED + codec.pack_sid(knows),
                                               db=stats)),
                    codec.decode_count(txn.get(codec.META_MAX_ID, db=db("meta"))))

    def __exit__(self, *exc) -> None:
        self.env.close()


CHILD = textwrap.dedent("""
    import os, signal, sys
    from nexus.store import link_upgrade
    real = link_upgrade._new_dtype
    seen = []

    def dying(fields):
        seen.append(fields)
        if len(seen) == 3:          # spo and ops rewritten, in the open transaction
            os.kill(os.getpid(), signal.SIGKILL)
        return real(fields)

    link_upgrade._new_dtype = dying
    from nexus.store.lmdb_store import LmdbGraphStore
    LmdbGraphStore(sys.argv[1], wal=True)
""")


def test_a_kill_during_the_conversion_leaves_the_old_layout_which_converts_next_time(
        tmp_path):
    path = str(tmp_path / "db")
    answers, links = _made(path)
    _as_an_earlier_version(path)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.run([sys.executable, "-c", CHILD, path], env=env,
                           capture_output=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]
    assert _key_sizes(path) == {"spo": {28}, "ops": {28}, "pso": {28},
                                "format": {codec.FORMAT_TAG_V1}}
    with Nexus.open(path, semantic="none", bootstrap=False) as nx:
        assert _links(nx.store) == links
        assert _answers(nx) == answers
        assert verify(nx, deep=True)["ok"]


def test_a_read_only_open_of_an_unconverted_database_is_refused_with_a_hint(tmp_path):
    path = str(tmp_path / "db")
    _, links = _made(path)
    _as_an_earlier_version(path)
    with pytest.raises(KipError) as caught:
        LmdbGraphStore(path, readonly=True)
    assert caught.value.code.value == "KIP_4003"
    assert "earlier version" in caught.value.message
    assert "Open it once for writing" in caught.value.hint
    assert _key_sizes(path)["format"] == {codec.FORMAT_TAG_V1}     # nothing written
    LmdbGraphStore(path).close()                                   # its owner converts
    with LmdbGraphStore(path, readonly=True) as store:
        assert _links(store) == links


def test_another_format_is_refused(tmp_path):
    path = str(tmp_path / "db")
    _made(path)
    _as_an_earlier_version(path, b"nexus-store/9")
    for readonly in (True, False):
        with pytest.raises(KipError, match="unsupported format"):
            LmdbGraphStore(path, readonly=readonly)


def test_a_failed_conversion_is_a_kip_error_and_leaves_the_old_layout(tmp_path, monkeypatch):
    from nexus.store import link_upgrade
    path = str(tmp_path / "db")
    _, links = _made(path)
    _as_an_earlier_version(path)
    real, calls = link_upgrade._new_dtype, []

    def failing(fields):
        calls.append(fields)
        if len(calls) == 3:         # the disk refuses in the middle of the transaction
            raise lmdb.DiskError("simulated")
        return real(fields)
    monkeypatch.setattr(link_upgrade, "_new_dtype", failing)
    with pytest.raises(KipError) as caught:
        LmdbGraphStore(path, wal=True)
    assert caught.value.code.value == "KIP_4003" and "simulated" in caught.value.message
    assert _key_sizes(path) == {"spo": {28}, "ops": {28}, "pso": {28},
                                "format": {codec.FORMAT_TAG_V1}}
    monkeypatch.setattr(link_upgrade, "_new_dtype", real)
    with LmdbGraphStore(path, wal=True) as store:       # the lock was released; converts
        assert _links(store) == links
    assert _key_sizes(path)["format"] == {codec.FORMAT_TAG}
