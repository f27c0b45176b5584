"""A commit that writes only the audit log keeps the snapshot id (nexus.store.protocol
JOURNAL_TABLES, LMDB with its write-ahead log): two reads with equal snapshot ids still see
identical data, every other commit still changes the id, and what is cached per snapshot
(the columnar arrays) survives the audit log's flushes — `kip serve` flushes it every few
hundred requests, and rebuilding those caches after each flush cost a third of the
throughput of a mix of reads (bench/http_bench.py --mix)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from nexus import Nexus
from nexus.ops.audit import AuditLog

UPSERT = ('UPSERT { CONCEPT ?a { {type: "Person", name: :a} SET ATTRIBUTES {age: :age} } '
          'CONCEPT ?b { {type: "Person", name: :b} } '
          'PROPOSITION ?l { (?a, "belongs_to_domain", ?b) } }')
READER = textwrap.dedent("""
    import sys
    from nexus.store import open_store
    store = open_store(sys.argv[1], readonly=True)
    with store.read() as txn:
        print(txn.snapshot_id(), flush=True)
    store.close()
""")


def _write(nx: Nexus, a: str, age: int = 1) -> None:
    r = nx.execute_kip({"command": UPSERT, "parameters": {"a": a, "b": a + "-b", "age": age}})
    assert "error" not in r, r


def _snap(nx: Nexus) -> int:
    with nx.store.read() as txn:
        snap = txn.snapshot_id()
    assert isinstance(snap, int)
    return snap


def _age(nx: Nexus, name: str) -> int:
    r = nx.execute_kip_readonly({"command": 'FIND(?p.attributes.age) WHERE { ?p {type: '
                                 '"Person", name: :n} }', "parameters": {"n": name}})
    return r["result"][0]


def _audit(nx: Nexus, n: int = 3) -> None:
    log = AuditLog.for_engine(nx)
    for i in range(n):
        log.record({"method": "execute_kip_readonly", "kinds": ["KQL"], "i": i})
    assert log.flush() == n


def test_an_audit_flush_keeps_the_snapshot_id_and_a_data_commit_changes_it(tmp_path):
    with Nexus.open(str(tmp_path / "db"), wal=True) as nx:
        nx.search.drain()
        _write(nx, "ann", 30)
        nx.search.drain()
        first = _snap(nx)
        _audit(nx)
        assert _snap(nx) == first
        _audit(nx)                          # journal-only after journal-only: still kept
        assert _snap(nx) == first
        assert nx.audit_log().list_logs({"limit": 10})["result"]    # the entries are there
        _write(nx, "ann", 31)               # the data changed: a new id
        nx.search.drain()
        second = _snap(nx)
        assert second != first
        assert _age(nx, "ann") == 31
        _audit(nx)
        assert _snap(nx) == second


def test_a_commit_that_writes_the_audit_log_and_anything_else_changes_the_id(tmp_path):
    with Nexus.open(str(tmp_path / "db"), wal=True) as nx:
        nx.search.drain()
        before = _snap(nx)
        with nx.store.write() as txn:
            txn.aux("audit").put(b"\x00" * 8, b"{}")
            txn.aux("engine").put(b"journal-test", b"1")
        after = _snap(nx)
        assert after != before
        with nx.store.read() as txn:
            assert txn.aux("engine").get(b"journal-test") == b"1"


def test_another_process_sees_the_kept_id(tmp_path):
    path = str(tmp_path / "db")
    with Nexus.open(path, wal=True) as nx:
        _write(nx, "bob")
        nx.search.drain()
        mine = _snap(nx)
        _audit(nx)
        out = subprocess.run([sys.executable, "-c", READER, path], capture_output=True,
                             text=True, timeout=120, check=True).stdout
        assert int(out.split()[0]) == mine == _snap(nx)


def test_the_columnar_arrays_survive_an_audit_flush(tmp_path):
    with Nexus.open(str(tmp_path / "db"), wal=True) as nx:
        for i in range(5):
            _write(nx, f"p{i}", i)
        nx.search.drain()
        with nx.store.read() as txn:
            pid = txn.symbol_id("belongs_to_domain")
            columns = txn.columns()
            assert columns is not None and pid is not None
            links = columns.links(pid)
        assert len(links) >= 5
        _audit(nx)
        with nx.store.read() as txn:
            columns = txn.columns()
            assert columns is not None
            assert columns.links(pid) is links      # from the cache, not built again
        _write(nx, "p9", 9)
        nx.search.drain()
        with nx.store.read() as txn:
            columns = txn.columns()
            assert columns is not None
            fresh = columns.links(pid)
        assert fresh is not links and len(fresh) == len(links) + 1
