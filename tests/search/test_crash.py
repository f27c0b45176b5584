"""Crash safety of the vector index: a real process is SIGKILLed after its data commits and
before the vector index is saved; the reopened nexus must find every committed node and
nothing deleted (the change queue in LMDB is replayed, or the index rebuilt)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from nexus.api import Nexus

CHILD = r'''
import sys, time
from nexus.api import Nexus

def kip(nx, command):
    r = nx.execute_kip({"command": command})
    assert "result" in r, r
    return r["result"]

def concepts(prefix, ids):
    blocks = " ".join(f'CONCEPT ?c{i} {{ {{type: "Compound", name: "{prefix} compound {i}"}} '
                      f'SET ATTRIBUTES {{description: "{prefix} batch member {i}"}} }}'
                      for i in ids)
    return "UPSERT { " + blocks + " }"

path, save_first = sys.argv[1], sys.argv[2] == "save"
nx = Nexus.open(path)
kip(nx, 'UPSERT { CONCEPT ?t { {type: "$ConceptType", name: "Compound"} '
        'SET ATTRIBUTES {description: "a compound"} } }')
kip(nx, concepts("Alpha", range(40)))
if save_first:
    nx.search.save()                          # the saved index covers Alpha only
kip(nx, concepts("Beta", range(40)))
for prefix in ("Alpha", "Beta"):
    for i in range(10):
        kip(nx, f'DELETE CONCEPT ?c DETACH WHERE {{ ?c {{type: "Compound", '
                f'name: "{prefix} compound {i}"}} }}')
print("COMMITTED", flush=True)
time.sleep(120)
'''


def _run_and_kill(path: str, mode: str) -> None:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-c", CHILD, path, mode], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "COMMITTED", (line, proc.stderr.read() if proc.poll() else "")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def _names(nx, command):
    response = nx.execute_kip({"command": command})
    assert "result" in response, response
    return [h["name"] for h in response["result"]]


@pytest.mark.parametrize("mode", ["save", "nosave"])
def test_sigkill_between_commit_and_vector_save(tmp_path, mode):
    path = str(tmp_path / "db")
    _run_and_kill(path, mode)
    meta_path = os.path.join(path, "vectors.json")
    if mode == "save":
        saved = json.load(open(meta_path))["seq"]
    else:
        assert not os.path.exists(meta_path)

    nx = Nexus.open(path)
    try:
        if mode == "save":
            assert nx.search.opened == "caught-up"
            from nexus.search.vectors import read_seq
            with nx.store.read() as txn:
                assert read_seq(txn) > saved          # the kill left the saved index behind
        else:
            assert nx.search.opened == "rebuilt"
        for prefix in ("Alpha", "Beta"):
            for i in range(10, 40):
                assert _names(nx, f'SEARCH CONCEPT "{prefix} compound {i}" LIMIT 1') \
                    == [f"{prefix} compound {i}"]
            # typo'd: only the vector side and fuzzy rescoring can find these
            assert _names(nx, f'SEARCH CONCEPT "{prefix.lower()} compund 25" LIMIT 3')[0] \
                == f"{prefix} compound 25"
            for i in range(10):
                hits = _names(nx, f'SEARCH CONCEPT "{prefix} compound {i}" LIMIT 100')
                assert f"{prefix} compound {i}" not in hits
        report = nx.search.check()
        assert report["ok"], report
        assert report["vector_orphans"] == 0 and report["vector_missing"] == 0
    finally:
        nx.close()
