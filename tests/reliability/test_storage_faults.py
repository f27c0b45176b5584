"""Storage faults on real LMDB directories and real processes (issue 17, docs/guarantees.md
"Storage faults"): a data file cut short or overwritten is refused or reported with a KIP
error naming the database, the cause and a way out — never a death by SIGBUS or SIGABRT,
never a traceback — and `kip check` writes nothing, on a healthy and on a damaged database.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from nexus.api import Nexus
from nexus.errors import KipError
from nexus.search.embed import semantic_installed

ROOT = Path(__file__).resolve().parents[2]
PAGE = 4096
P_BRANCH, P_LEAF = 0x01, 0x02
LOCK_FILES = {"lock.mdb", "owner.lock"}     # LMDB's reader table and the owner lock


def kip(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    return subprocess.run([sys.executable, "-m", "nexus.cli", *argv], capture_output=True,
                          text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A bootstrapped database with enough data for trees of several levels."""
    db = tmp_path_factory.mktemp("faults") / "db"
    with Nexus.open(str(db), durable=False) as nx:
        r = nx.execute_kip({"command": 'UPSERT { CONCEPT ?t { {type: "$ConceptType", '
                            'name: "Item"} SET ATTRIBUTES {description: "an item"} } }'})
        assert "result" in r, r
        nx.bulk_import([{"type": "Item", "name": f"item number {i}",
                         "attributes": {"k": i, "text": "x" * (i % 50)}}
                        for i in range(1500)])
    return db


@pytest.fixture
def db(pristine, tmp_path) -> Path:
    copy = tmp_path / "db"
    shutil.copytree(pristine, copy)
    return copy


def snapshot(db: Path) -> dict[str, tuple[int, str]]:
    """Every data file's (mtime in ns, sha256) — the lock files excepted."""
    return {p.name: (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(db.iterdir()) if p.name not in LOCK_FILES}


def last_page(data: bytes) -> int:
    """The last page in use, from the newest meta page."""
    metas = [struct.unpack_from("=QQ", data, i * PAGE + 136) for i in (0, 1)]
    return max(metas, key=lambda m: m[1])[0]


def zero_later_leaves(db: Path) -> int:
    """Zero every leaf page that is not the first child of its branch page: a cursor
    walking a table reaches it sideways, where LMDB asserts instead of checking (today a
    SIGABRT). Returns how many pages were zeroed."""
    path = db / "data.mdb"
    data = bytearray(path.read_bytes())
    top = last_page(bytes(data))
    victims = set()
    for pg in range(2, top + 1):
        base = pg * PAGE
        flags, lower, upper = struct.unpack_from("=HHH", data, base + 10)
        if flags != P_BRANCH or not 16 <= lower <= upper <= PAGE:
            continue            # not a branch page (or the inside of an overflow page)
        for i in range(1, (lower - 16) // 2):
            ptr = struct.unpack_from("=H", data, base + 16 + 2 * i)[0]
            if not upper <= ptr <= PAGE - 8:
                continue
            lo, hi, fl = struct.unpack_from("=HHH", data, base + ptr)
            child = lo | hi << 16 | fl << 32
            if 2 <= child <= top and struct.unpack_from("=H", data, child * PAGE + 10)[0] \
                    & P_LEAF:
                victims.add(child)
    for pg in victims:
        data[pg * PAGE:(pg + 1) * PAGE] = bytes(PAGE)
    path.write_bytes(bytes(data))
    return len(victims)


def assert_reported(proc: subprocess.CompletedProcess, db: Path, *words: str) -> None:
    """Exited by itself (no signal) with a failure status and a message, no traceback."""
    assert proc.returncode > 0, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr
    for word in (str(db), *words):
        assert word in proc.stderr, (word, proc.stderr[-2000:])


# --- a data file cut short or not LMDB's: refused before it is mapped -----------------------

@pytest.mark.parametrize("cut", ["half", "one_page_short", "inside_meta"])
def test_a_truncated_data_file_is_refused_by_every_command(db, cut):
    path = db / "data.mdb"
    size = path.stat().st_size
    keep = {"half": size // 2 // PAGE * PAGE, "one_page_short": size - PAGE,
            "inside_meta": PAGE + 100}[cut]
    os.truncate(path, keep)
    before = snapshot(db)
    for argv in (["check"], ["check", "--deep"], ["info"], ["export"], ["serve", "--port", "0"],
                 ["exec", "FIND(?c) WHERE { ?c {type: \"Item\"} } LIMIT 1"]):
        proc = kip(*argv, "--db", str(db))
        assert_reported(proc, db, "truncated", "backup")
    with pytest.raises(KipError) as err:
        Nexus.open(str(db))
    assert err.value.code.value == "KIP_4003" and "truncated" in err.value.message
    assert str(db) in err.value.message and "backup" in err.value.hint
    assert snapshot(db) == before


def test_a_data_file_that_is_not_lmdb_is_refused(db):
    path = db / "data.mdb"
    path.write_bytes(os.urandom(path.stat().st_size))
    for argv in (["check"], ["info"]):
        assert_reported(kip(*argv, "--db", str(db)), db, "not an LMDB file", "backup")


# --- damage inside the trees: kip check reports it, never dies --------------------------------

def test_kip_check_reports_zeroed_pages_instead_of_dying(db):
    assert zero_later_leaves(db) > 0
    before = snapshot(db)
    for deep in ([], ["--deep"]):
        proc = kip("check", *deep, "--db", str(db))
        assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr
        assert "damaged" in proc.stderr or "corrupted" in proc.stderr, proc.stderr[-2000:]
        assert "backup" in proc.stderr
    assert snapshot(db) == before


def test_kip_check_writes_nothing_on_a_healthy_database(db):
    before = snapshot(db)
    assert {"data.mdb", "vectors.json"} <= set(before)
    for argv in (["check"], ["check", "--deep"]):
        proc = kip(*argv, "--db", str(db))
        assert proc.returncode == 0, proc.stderr[-2000:]
    assert snapshot(db) == before


# --- the vector catch-up: bounded, reported as pending ------------------------------------------

BULK = 20_000       # the size at which a check once waited > 10 minutes for the vectors


@pytest.fixture(scope="module")
def backlog(tmp_path_factory) -> Path:
    """A freshly bulk-loaded database whose vectors are all still queued: the loader's
    indexer held back and the load's own vector building skipped (as when a load's process
    stops right after its last commit), and the loader closed without waiting. The vectors
    are the semantic index's (the default embedder's typo candidates are gram postings,
    written with the data: nothing of them is ever queued)."""
    import contextlib
    if not semantic_installed("wordllama"):
        pytest.skip("needs the semantic extra (a vector index with a queue to catch up)")
    db = tmp_path_factory.mktemp("backlog") / "db"
    with Nexus.open(str(db), durable=False, semantic="wordllama") as nx:
        nx.execute_kip({"command": 'UPSERT { CONCEPT ?t { {type: "$ConceptType", '
                        'name: "Item"} SET ATTRIBUTES {description: "an item"} } }'})
        for index in nx.search.vector_indexes():
            index.pause()
        nx.search.bulk_loading = contextlib.nullcontext      # the load builds no vectors
        nx.bulk_import([{"type": "Item", "name": f"bulk item {i}", "attributes": {"k": i}}
                        for i in range(BULK)])
    return db


def test_check_of_a_fresh_bulk_load_reports_pending_vectors_instead_of_waiting(backlog,
                                                                              monkeypatch):
    monkeypatch.setenv("NEXUS_SEMANTIC", "auto")        # (the database's own choice)
    before = snapshot(backlog)
    # (--wait 0: the semantic index's adds are cheap since it is an inverted file, so 20k
    # queued vectors may be caught up within a second's wait)
    proc = kip("check", "--deep", "--wait", "0", "--db", str(backlog), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = __import__("json").loads(proc.stdout)
    pending = report["search"]["semantic_pending"]
    # No waiting: the report is of vectors still pending, not of a caught-up index (a check
    # that waited would find none pending; no wall-clock bound, which a loaded host breaks).
    assert pending["ids"] > 0 and (pending["changes"] > 0 or pending["rebuild"]), pending
    assert "catching up" in report["pending"] and "--wait" in report["pending"]
    assert "semantic_missing" not in report["search"]      # not counted as drift
    assert "vector_pending" not in report["search"]         # the gram postings: complete
    assert report["ok"] and report["store"]["ok"]
    assert "kip: note: the vector indexer is still catching up" in proc.stderr
    assert snapshot(backlog) == before  # the catch-up stayed in memory: nothing written


def test_the_wait_comes_from_the_environment_too(backlog):
    env_wait = dict(os.environ, KIP_CHECK_WAIT="0", NEXUS_SEMANTIC="auto")
    proc = subprocess.run([sys.executable, "-m", "nexus.cli", "check", "--db", str(backlog)],
                          capture_output=True, text=True, timeout=120, env={
                              **env_wait, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0 and "semantic_pending" in proc.stdout, proc.stderr[-2000:]
    bad = kip("check", "--wait", "soon", "--db", str(backlog))
    assert bad.returncode == 2 and "--wait" in bad.stderr


# --- a full disk ----------------------------------------------------------------------------------

FILLER = """
import json, os, resource, sys
from nexus.api import Nexus
db, limit = sys.argv[1], int(sys.argv[2])
nx = Nexus.open(db, bootstrap=True)
if limit:       # the file size limit of this process: writes past it fail with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
acked = []
for i in range(100000):
    r = nx.execute_kip({"command": 'UPSERT { CONCEPT ?p { {type: "Person", name: :n} '
                        'SET ATTRIBUTES { person_class: "Human", bio: :b } } }',
                        "parameters": {"n": f"p{i}", "b": f"{i} " + "x" * 20000}})
    if "error" in r:
        print(json.dumps({"acked": acked, "failed": f"p{i}", "error": r["error"]}), flush=True)
        break
    acked.append(f"p{i}")
nx.close()
"""


@pytest.fixture(params=["tmpfs", "fsize"])
def cramped(request, tmp_path):
    """(database directory, file size limit or 0): a database on a 4 MiB tmpfs (root only),
    or one whose writer runs under RLIMIT_FSIZE."""
    if request.param == "fsize":
        yield tmp_path / "db", 4 << 20, "file size limit"
        return
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
                          capture_output=True)
    if made.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (not root): the fsize case covers it")
    try:
        yield mount / "db", 0, "is full"
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_full_disk_fails_the_write_cleanly_and_leaves_no_trace(cramped):
    import json
    db, limit, words = cramped
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run([sys.executable, "-c", FILLER, str(db), str(limit)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]      # nor at shutdown
    outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    error = outcome["error"]
    assert error["code"] == "KIP_4003" and words in error["message"], error
    assert str(db) in error["message"] and "nothing of it is stored" in error["message"] \
        or "not committed" in error["message"], error
    assert "retry" in error["hint"], error
    assert outcome["acked"], "some writes fit before the disk filled up"
    assert not [p for p in db.iterdir() if p.name.endswith(".tmp")]   # no half-written file
    if not limit:
        # Still full: a check runs, finds nothing wrong and writes nothing.
        before = snapshot(db)
        check = kip("check", "--deep", "--db", str(db))
        assert check.returncode == 0, check.stderr[-2000:]
        assert "Traceback" not in check.stderr
        assert snapshot(db) == before
    with Nexus.open(str(db), bootstrap=False) as nx:
        names = nx.execute_kip({"command": 'FIND(?p.name) WHERE { ?p {type: "Person"} }'})
        stored = set(names["result"]) - {"$self", "$system"}
        assert stored == set(outcome["acked"]), (len(stored), len(outcome["acked"]))
        assert outcome["failed"] not in stored      # the failed command left no trace
        report = nx.check(deep=True, wait=120)
        assert report["ok"], report
