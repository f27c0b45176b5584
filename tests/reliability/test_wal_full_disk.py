"""A database with the write-ahead log on a full disk (docs/guarantees.md, "Storage faults";
issue 18): it opens and serves every acknowledged command as plain LMDB does — even when the
log holds commits that the disk leaves no room to replay into the data file — `kip check`
runs and says a recovery is pending, writes fail with the full-disk KIP error, and once
space is freed the next write finishes the recovery and nothing acknowledged is lost.

On a real 8 MiB tmpfs (root only, as in test_storage_faults.py): filled by the database
itself, with a ballast file to free afterwards.
"""
from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nexus.api import Nexus
from nexus.store import lmdb_file
from nexus.store import wal as walog

from .kipserver import launch
from .test_storage_faults import ROOT, kip, snapshot

FILLER = """
import json, os, signal, sys
from nexus.api import Nexus
from nexus.store import lmdb_store
db, stop = sys.argv[1], sys.argv[2]
if stop == "kill":      # no checkpoint after the first: every later commit is in the log only
    lmdb_store.WAL_SOFT_GROWTH = lmdb_store.WAL_SOFT_GROWTH_MAX = 1 << 40
    lmdb_store.WAL_IDLE_SECONDS = 1e9
nx = Nexus.open(db, wal=True)
acked = []
for i in range(100000):
    r = nx.execute_kip({"command": 'UPSERT { CONCEPT ?p { {type: "Person", name: :n} '
                        'SET ATTRIBUTES { person_class: "Human", bio: :b } } }',
                        "parameters": {"n": f"p{i}", "b": f"{i} " + "x" * 20000}})
    if "error" in r:
        print(json.dumps({"acked": acked, "failed": f"p{i}", "error": r["error"]}), flush=True)
        break
    acked.append(f"p{i}")
if stop == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
nx.close()
"""

UPSERT = 'UPSERT { CONCEPT ?p { {type: "Person", name: :n} SET ATTRIBUTES { person_class: "Human" } } }'


@pytest.fixture
def full_disk(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)],
                          capture_output=True)
    if made.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (not root)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def fill(mount: Path, stop: str) -> tuple[Path, dict]:
    """The database at mount/db, written with the log on until the disk was full (a ballast
    file of 1 MiB beside it, to free later); the filler closed it or was SIGKILLed."""
    (mount / "ballast").write_bytes(b"\1" * (1 << 20))
    db = mount / "db"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    env.pop("NEXUS_WAL", None)
    proc = subprocess.run([sys.executable, "-c", FILLER, str(db), stop], capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == (-9 if stop == "kill" else 0), proc.stderr[-3000:]
    outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    assert outcome["error"]["code"] == "KIP_4003" and "is full" in \
        outcome["error"]["message"], outcome
    assert outcome["acked"]
    return db, outcome


def top_up(mount: Path) -> None:
    """Fill what is left of the disk."""
    fd = os.open(mount / "ballast2", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while os.write(fd, b"\2" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


def names(nx: Nexus) -> set[str]:
    r = nx.execute_kip({"command": 'FIND(?p.name) WHERE { ?p {type: "Person"} }'})
    assert "result" in r, r
    return set(r["result"]) - {"$self", "$system"}


def write(nx: Nexus, name: str) -> bool:
    """Whether an UPSERT of `name` was acknowledged; if not, it failed with the store's
    full-disk error."""
    r = nx.execute_kip({"command": UPSERT, "parameters": {"n": name}})
    if "result" in r:
        return True
    assert r["error"]["code"] == "KIP_4003" and "is full" in r["error"]["message"], r
    assert "retry" in r["error"]["hint"]
    return False


def free_write_and_reopen(mount: Path, db: Path, acked: set[str]) -> None:
    """Opened while the disk is full, space freed, a write: it finishes what the open could
    not; then a reopen finds everything."""
    with Nexus.open(str(db), bootstrap=False, wal=True) as nx:
        assert names(nx) == acked
        for name in ("ballast", "ballast2"):
            if (mount / name).exists():
                (mount / name).unlink()
        r = nx.execute_kip({"command": UPSERT, "parameters": {"n": "after"}})
        assert "result" in r, r
        assert names(nx) == acked | {"after"}
    with Nexus.open(str(db), bootstrap=False, wal=True) as nx:
        assert names(nx) == acked | {"after"}
        report = nx.check(deep=True, wait=120)
        assert report["ok"] and "pending" not in report, report


def test_a_full_disk_after_a_clean_close_opens_reads_and_checks(full_disk):
    db, outcome = fill(full_disk, "close")
    acked = set(outcome["acked"])
    with Nexus.open(str(db), bootstrap=False, wal=True) as nx:
        assert names(nx) == acked
        # (the close gave the log's disk back: a small write may fit)
        acked |= {"late"} if write(nx, "late") else set()
        assert names(nx) == acked
    before = snapshot(db)
    check = kip("check", "--deep", "--db", str(db))
    assert check.returncode == 0 and "Traceback" not in check.stderr, check.stderr[-2000:]
    assert json.loads(check.stdout)["ok"]
    assert snapshot(db) == before
    free_write_and_reopen(full_disk, db, acked)


def test_log_records_the_full_disk_leaves_no_room_to_replay_are_read_in_memory(full_disk):
    db, outcome = fill(full_disk, "kill")
    acked = set(outcome["acked"])
    # As after a power loss: the data file's growth since the checkpoint never reached the
    # disk, and the room it took is taken by something else. The replay needs new blocks.
    ckpt = walog.read_checkpoint(str(db))
    assert ckpt is not None and list(walog.records(str(db), ckpt.generation))
    psize = len(ckpt.metas) // 2
    last = max((lmdb_file.Meta(ckpt.metas[i * psize:]) for i in range(2)),
               key=lambda m: m.txnid).last_pg
    assert (db / "data.mdb").stat().st_size > (last + 1) * psize
    os.truncate(db / "data.mdb", (last + 1) * psize)
    top_up(full_disk)
    with Nexus.open(str(db), bootstrap=False, wal=True) as nx:
        assert names(nx) == acked           # the log's records, read in memory
        assert nx.check(deep=True, wait=120)["ok"]
        assert not write(nx, "late")        # the recovery needs room first
        assert names(nx) == acked
    before = snapshot(db)
    check = kip("check", "--deep", "--db", str(db))
    assert check.returncode == 0 and "Traceback" not in check.stderr, check.stderr[-2000:]
    report = json.loads(check.stdout)
    assert report["ok"] and "write-ahead log" in report["pending"], report
    assert "kip: note:" in check.stderr and "free space" in check.stderr
    # The check's own attempt to replay failed: nothing changed (LMDB may have written to
    # pages no meta page refers to before the disk refused the rest, hence the content)
    assert {k: v[1] for k, v in snapshot(db).items()} == {k: v[1] for k, v in before.items()}
    free_write_and_reopen(full_disk, db, acked)


def _names_over_http(host: str, port: int) -> set[str]:
    """Person names, asked on a new connection (the kernel hands each new connection to
    one of the processes accepting on the port)."""
    conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        conn.request("POST", "/kip", json.dumps({"method": "execute_kip_readonly", "params": {
            "command": 'FIND(?p.name) WHERE { ?p {type: "Person"} }'}}),
            {"Content-Type": "application/json"})
        r = json.loads(conn.getresponse().read())
    finally:
        conn.close()
    assert "result" in r, r
    return set(r["result"]) - {"$self", "$system"}


def test_workers_answer_what_the_owner_holds_in_memory(full_disk, tmp_path):
    """`kip serve --workers`: the owner reads the log's unreplayed commits from memory; a
    follower reading the data file would miss them, so while they are held every request
    goes to the owner (docs/server.md). Once space is freed and a write ends the recovery,
    every process answers with it."""
    db, outcome = fill(full_disk, "kill")
    acked = set(outcome["acked"])
    ckpt = walog.read_checkpoint(str(db))
    assert ckpt is not None
    psize = len(ckpt.metas) // 2
    last = max((lmdb_file.Meta(ckpt.metas[i * psize:]) for i in range(2)),
               key=lambda m: m.txnid).last_pg
    os.truncate(db / "data.mdb", (last + 1) * psize)
    top_up(full_disk)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    env.pop("KIP_API_KEY", None)
    proc, host, port = launch(db, ["--workers", "2", "--no-audit"], log=tmp_path / "log",
                              env=env)
    try:
        for _ in range(24):
            assert _names_over_http(host, port) == acked
        for name in ("ballast", "ballast2"):
            (full_disk / name).unlink()
        conn = http.client.HTTPConnection(host, port, timeout=60)
        conn.request("POST", "/kip", json.dumps({"method": "execute_kip", "params": {
            "command": UPSERT, "parameters": {"n": "after"}}}),
            {"Content-Type": "application/json"})
        r = json.loads(conn.getresponse().read())
        conn.close()
        assert "result" in r, r
        for _ in range(24):
            assert _names_over_http(host, port) == acked | {"after"}
    finally:
        proc.terminate()
        proc.wait(60)
