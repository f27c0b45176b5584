"""One owner per database (docs/guarantees.md, "One owner per database"): a live process
that opened a database keeps every other process out — `kip serve`, `kip load`,
`kip check --repair`, `kip info`, `Nexus.open` — with a KIP error naming the holder; a lock
left by a process that is gone is taken over; within one process a second open while the
first is open is refused the same way, and the store reopens freely once closed.
Real processes, a real lock file."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from nexus.api import Nexus
from nexus.errors import KipError
from nexus.store import open_store

ROOT = Path(__file__).resolve().parents[2]
HOLDER = """
import sys
from nexus.api import Nexus
nx = Nexus.open(sys.argv[1], bootstrap=False)
print("ready", flush=True)
sys.stdin.read()
nx.close()
"""


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))


@pytest.fixture
def holder(tmp_path):
    """A live process owning tmp_path/db (killed at the end)."""
    db = tmp_path / "db"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(db)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line == b"ready\n", (line, proc.stderr.read() if proc.stderr else b"")
    yield db, proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def kip(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nexus.cli", *argv], capture_output=True,
                          text=True, timeout=300, env=_env(), stdin=subprocess.DEVNULL)


def test_the_lock_file_names_the_holder(holder):
    db, proc = holder
    record = json.loads((db / "owner.lock").read_text())
    assert record["pid"] == proc.pid and record["host"] == socket.gethostname()
    assert "Nexus.open" in record["command"] or record["command"]
    assert record["started"].endswith("Z")


def test_a_second_process_is_refused_naming_the_holder(holder, tmp_path):
    db, proc = holder
    capsule = tmp_path / "one.kip"
    capsule.write_text('UPSERT { CONCEPT ?d { {type: "Domain", name: "Elsewhere"} } }\n')
    for argv in (["load", str(capsule)], ["check", "--repair"], ["check"], ["info"],
                 ["exec", 'FIND(?d) WHERE { ?d {type: "Domain"} }'],
                 ["serve", "--port", "0"]):
        r = kip(*argv, "--db", str(db))
        assert r.returncode == 2, (argv, r.returncode, r.stderr[-1000:])
        assert f"in use by process {proc.pid}" in r.stderr, (argv, r.stderr[-1000:])
        assert "Traceback" not in r.stderr
    with pytest.raises(KipError) as err:
        Nexus.open(str(db))
    assert err.value.code.value == "KIP_4003" and str(proc.pid) in err.value.message
    assert "stop that process" in err.value.hint
    assert proc.poll() is None          # the holder is untouched and still owns it
    assert json.loads((db / "owner.lock").read_text())["pid"] == proc.pid


def test_a_stale_lock_is_taken_over(holder):
    db, proc = holder
    proc.send_signal(signal.SIGKILL)    # no chance to clean up: the file still names it
    proc.wait()
    assert json.loads((db / "owner.lock").read_text())["pid"] == proc.pid
    with Nexus.open(str(db), bootstrap=False) as nx:
        assert json.loads((db / "owner.lock").read_text())["pid"] == os.getpid()
        assert nx.execute_kip({"command": "DESCRIBE PRIMER"}).get("result") is not None
    r = kip("info", "--db", str(db))
    assert r.returncode == 0, r.stderr


def test_one_process_reopens_and_releases(tmp_path):
    db = str(tmp_path / "db")
    for _ in range(3):                  # close then open again, as tests and spaces do
        store = open_store(db)
        store.close()
    store = open_store(db)
    try:
        r = kip("info", "--db", db)     # another process: refused while we own it
        assert r.returncode == 2 and f"process {os.getpid()}" in r.stderr
    finally:
        store.close()
    assert kip("info", "--db", db).returncode == 0    # released by close


@pytest.mark.parametrize("wal", [False, True])
def test_a_second_open_in_the_same_process_is_refused_like_another_process(tmp_path, wal):
    """One open per database in a process as across processes: the same KIP_4003 with a
    message naming this process and a hint, before the second open touches any file."""
    db = str(tmp_path / "db")
    with Nexus.open(db, wal=wal) as nx:
        assert "result" in nx.execute_kip(
            {"command": 'UPSERT { CONCEPT ?d { {type: "Domain", name: "Kept"} } }'})
        for again in (lambda: Nexus.open(db, wal=wal),
                      lambda: open_store(db), lambda: open_store(db + "/")):
            with pytest.raises(KipError) as err:
                again()
            assert err.value.code.value == "KIP_4003"
            assert f"in use by this process (pid {os.getpid()})" in err.value.message
            assert "already open" in err.value.message and "close it" in err.value.hint
        # the refused opens left the first one working
        found = nx.execute_kip({"command": 'FIND(?d.name) WHERE { ?d {type: "Domain"} }'})
        assert "Kept" in json.dumps(found["result"])
    with Nexus.open(db, wal=wal) as nx:     # closed: opens again
        found = nx.execute_kip({"command": 'FIND(?d.name) WHERE { ?d {type: "Domain"} }'})
        assert "Kept" in json.dumps(found["result"])


def test_a_read_only_store_reads_beside_the_owner_and_writes_nothing(holder):
    db, proc = holder
    store = open_store(str(db), readonly=True)      # no owner lock: LMDB readers coexist
    try:
        with store.read() as txn:
            assert txn.max_id() >= 0
        with pytest.raises(KipError) as err:
            with store.write():
                pass
        assert "read-only" in err.value.message
    finally:
        store.close()
    assert json.loads((db / "owner.lock").read_text())["pid"] == proc.pid
    with pytest.raises(KipError):
        open_store(str(db.parent / "missing"), readonly=True)
