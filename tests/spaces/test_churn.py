"""1,000 spaces behind one server with 64 open at a time (issue 22): every space keeps its
own data through the churn, and the server's memory stays bounded by the open spaces, not by
the spaces that were opened. CI runs a short form (160 spaces, 8 open); `NEXUS_FULL=1` the
long form (1,000 spaces, 64 open)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

FULL = os.environ.get("NEXUS_FULL", "") not in ("", "0")
COUNT, MAX_OPEN = (1000, 64) if FULL else (160, 8)
MIB = 1024      # /proc/PID/status reports kB


def _status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmData", "Threads"):
            out[key] = int(value.split()[0])
    return out


def _person(i: int) -> str:
    return (f'UPSERT {{ CONCEPT ?p {{ {{type: "Person", name: "p{i}"}} '
            f'SET ATTRIBUTES {{ person_class: "Human" }} }} }}')


def _people(server, i: int) -> list[str]:
    status, body = server.kip(f"s{i}", 'FIND(?p.name) WHERE { ?p {type: "Person"} }',
                              readonly=True)
    assert status == 200 and "error" not in body, (i, body)
    return [n for n in body["result"] if n not in ("$self", "$system")]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
def test_churn_through_many_spaces_keeps_each_its_own_and_memory_bounded(spaces_server):
    server = spaces_server("--auto-create", "--max-open-spaces", str(MAX_OPEN))
    pid = server.proc.pid
    half = COUNT // 2
    for i in range(COUNT):          # the first write creates each space (template copy)
        status, body = server.kip(f"s{i}", _person(i))
        assert status == 200 and "error" not in body, (i, body)
        if i == half:
            settled = _status(pid)
    after_writes = _status(pid)
    for i in range(COUNT):          # every touch a cold open: the LRU holds MAX_OPEN
        assert _people(server, i) == [f"p{i}"]
    after_reads = _status(pid)
    assert server.proc.poll() is None
    # Opening and closing spaces leaks nothing: memory after the second half of the spaces
    # (and after a second round over all of them) stays where the first half left it.
    assert after_writes["VmData"] - settled["VmData"] < 96 * MIB, (settled, after_writes)
    assert after_reads["VmData"] - after_writes["VmData"] < 96 * MIB, (after_writes,
                                                                       after_reads)
    assert after_reads["VmRSS"] < 500 * MIB, after_reads
    # Threads and file handles follow the open spaces (an indexer and an LMDB environment
    # each), not the spaces that exist.
    assert after_reads["Threads"] < MAX_OPEN + 80, after_reads
    assert len(os.listdir(f"/proc/{pid}/fd")) < 4 * MAX_OPEN + 64
