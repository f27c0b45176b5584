"""`kip serve --workers N` (docs/server.md): N processes answer on one port over one
database. A write acknowledged through one connection is seen by reads through every other
(whichever process holds them); SEARCH sees it; writes, SEARCH and list_logs answer as on
one process; a killed worker leaves the server answering (and is replaced); reads stay
fast while slow queries run (the head-of-line bound)."""
from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import threading
import time

import pytest

from .conftest import KEY, SLOW_QUERY, start_server

DRUG_TYPE = ('UPSERT { CONCEPT ?t { {type: "$ConceptType", name: "Drug"} SET ATTRIBUTES '
             '{description: "a drug"} } }')
DRUG = 'UPSERT { CONCEPT ?d { {type: "Drug", name: :name} } } WITH METADATA {source: "t"}'
POINT = 'FIND(?d.name) WHERE { ?d {type: "Drug", name: :name} }'


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def post(conn: http.client.HTTPConnection, method: str, command: str, **params) -> tuple:
    body = {"method": method, "params": {"command": command, "parameters": params}}
    conn.request("POST", "/kip", json.dumps(body), {"Authorization": f"Bearer {KEY}",
                                                     "Content-Type": "application/json"})
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read())


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("workers") / "db", "--workers", "3")
    assert srv.kip(DRUG_TYPE)[0] == 200
    yield srv
    assert srv.stop() == 0
    assert srv.proc.poll() == 0


def test_three_processes_serve_the_port(team):
    assert len(children(team.proc.pid)) == 2


def test_a_write_is_seen_through_every_connection(team):
    writer = team.connect()
    readers = [team.connect() for _ in range(12)]     # spread over the processes
    for i in range(5):
        status, data = post(writer, "execute_kip", DRUG, name=f"Seen{i}")
        assert status == 200, data
        for conn in readers:
            status, data = post(conn, "execute_kip_readonly", POINT, name=f"Seen{i}")
            assert (status, data) == (200, {"result": [f"Seen{i}"]})


def test_a_schema_describe_through_any_connection_sees_the_latest_write(team):
    """A follower answers DESCRIBE CONCEPT TYPE itself (nexus.server.workers): from a
    snapshot as fresh as a FIND's, the usage counts included."""
    writer = team.connect()
    readers = [team.connect() for _ in range(12)]     # spread over the processes

    def counts() -> set:
        seen = set()
        for conn in readers:
            status, data = post(conn, "execute_kip_readonly", 'DESCRIBE CONCEPT TYPE "Drug"')
            assert status == 200, data
            seen.add(data["result"]["usage"]["instance_count"])
        return seen
    [first] = counts()                                # the same answer everywhere
    for i in range(1, 4):
        status, data = post(writer, "execute_kip", DRUG, name=f"Counted{i}")
        assert status == 200, data
        assert counts() == {first + i}


def test_a_follower_forwards_what_it_does_not_answer():
    from nexus.server.workers import needs_owner

    def forwarded(command, method="execute_kip_readonly"):
        return needs_owner({"method": method, "params": {"command": command}})
    assert not forwarded('FIND(?d.name) WHERE { ?d {type: "Drug"} }')
    assert not forwarded('DESCRIBE CONCEPT TYPE "Drug"')
    assert not forwarded("DESCRIBE PROPOSITION TYPES LIMIT 5")
    assert not forwarded("// the domains\nDESCRIBE DOMAINS", method="execute_kip")
    assert forwarded("DESCRIBE PRIMER")
    assert forwarded('SEARCH CONCEPT "aspirin" LIMIT 10')
    assert forwarded('UPSERT { CONCEPT ?d { {type: "Drug", name: "x"} } }', "execute_kip")
    assert needs_owner({"method": "list_logs", "params": {}})


def test_writes_search_and_logs_answer_through_any_connection(team):
    conns = [team.connect() for _ in range(6)]
    for i, conn in enumerate(conns):
        status, data = post(conn, "execute_kip", DRUG, name=f"Any{i}")
        assert status == 200, data
    for i, conn in enumerate(conns):
        status, data = post(conn, "execute_kip", f'SEARCH CONCEPT "Any{i}" WITH TYPE "Drug" '
                            f'LIMIT 1')
        assert status == 200 and data["result"][0]["name"] == f"Any{i}", data
    refusals = {json.dumps(post(conn, "execute_kip_readonly", DRUG, name="Refused"))
                for conn in conns}
    assert len(refusals) == 1 and '"error"' in refusals.pop()   # the same answer everywhere
    # what any process answered is in the one audit log (a worker sends its entries to
    # the owner every 0.2 s)
    finds = [f'FIND(?d.name) WHERE {{ ?d {{type: "Drug", name: "Any{i}"}} }}'
             for i in range(len(conns))]
    for conn, find in zip(conns, finds):
        assert post(conn, "execute_kip_readonly", find) == (200, {"result": [find[-8:-4]]})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status, data = team.call("list_logs", {"limit": 100})
        assert status == 200
        logged = {e["command"] for e in data["result"]}
        # (every entry arrives within the deadline, the SEARCHes' too: a follower's batches
        # and the owner's own entries need not arrive in request order)
        if set(finds) <= logged and \
                sum(c.startswith("SEARCH CONCEPT") for c in logged) >= len(conns):
            break
        time.sleep(0.2)
    assert set(finds) <= logged
    assert sum(c.startswith("SEARCH CONCEPT") for c in logged) >= len(conns)


def test_bad_requests_are_answered_the_same_everywhere(team):
    for conn in [team.connect() for _ in range(6)]:
        status, data = post(conn, "execute_kip_readonly", "FIND(?x WHERE")
        assert status == 400 and data["error"]["code"] == "KIP_1001"
        conn.request("POST", "/kip", "{}", {"Authorization": "Bearer wrong"})
        resp = conn.getresponse()
        assert resp.status == 401
        resp.read()


def test_a_killed_worker_leaves_the_server_answering(team):
    victim = children(team.proc.pid)[0]
    os.kill(victim, signal.SIGKILL)
    for i in range(20):       # new connections: whichever process takes them answers
        conn = team.connect()
        status, data = post(conn, "execute_kip", DRUG, name=f"After{i}")
        assert status == 200, data
        assert post(conn, "execute_kip_readonly", POINT, name=f"After{i}")[0] == 200
        conn.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:          # the owner starts another worker
        kids = children(team.proc.pid)
        if len(kids) == 2 and victim not in kids:
            break
        time.sleep(0.2)
    assert len(children(team.proc.pid)) == 2 and victim not in children(team.proc.pid)


def test_point_reads_stay_served_while_slow_queries_run(slow_db):
    srv = start_server(slow_db.path, "--workers", "2")
    try:
        answers: list = []

        def slow() -> None:
            answers.append(srv.kip(SLOW_QUERY, timeout=120))
        threads = [threading.Thread(target=slow) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(slow_db.seconds / 5)
        for i in range(10):
            conn = srv.connect()
            status, data = post(conn, "execute_kip_readonly",
                                'FIND(?i.name) WHERE { ?i {type: "Item", name: "i7"} }')
            assert (status, data) == (200, {"result": ["i7"]})
            conn.close()
        for t in threads:
            t.join(120)
        assert all(status == 200 for status, _ in answers)
    finally:
        assert srv.stop() == 0


def test_the_heavy_slot_is_one_across_openers(tmp_path):
    """`SharedAdmission` (what the processes of --workers share): one holder among all
    openers of the lock file; a waiter elsewhere makes the holder hand it on."""
    from nexus.exec.admission import SharedAdmission
    path = str(tmp_path / "heavy.lock")
    one, two = SharedAdmission(path, 0.02, 0.1), SharedAdmission(path, 0.02, 0.1)
    try:
        assert one.acquire(time.monotonic() + 1)
        assert not two.acquire(time.monotonic() + 0.05)     # held by the other opener
        assert not one.waiting
        got: list = []
        waiter = threading.Thread(target=lambda: got.append(two.acquire(
            time.monotonic() + 30)))
        waiter.start()
        deadline = time.monotonic() + 10
        while not one.waiting and time.monotonic() < deadline:
            time.sleep(0.01)
        assert one.waiting                  # the holder sees the waiter
        one.release()
        waiter.join(30)
        assert got == [True]
        assert not one.acquire(time.monotonic() + 0.05)
        two.release()
        assert one.acquire(time.monotonic() + 1)
        one.release()
    finally:
        one.close()
        two.close()
