"""Process-level behaviour of `kip serve`: timeouts (engine and request), concurrency,
graceful SIGTERM, the no-key loopback rule, KIP_API_KEY."""
from __future__ import annotations

import subprocess
import sys
import threading
import time

from nexus.api import Nexus
from nexus.ops.audit import AuditLog

from .conftest import SLOW_ITEMS, SLOW_QUERY, SLOW_RESULT, start_server

FAST = 'FIND(?i.name) WHERE { ?i {type: "Item", name: "i7"} }'


def _in_thread(fn):
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc
    t = threading.Thread(target=run)
    t.start()
    return t, box


def test_engine_timeout_is_408_and_a_timed_out_write_rolls_back(slow_db):
    srv = start_server(slow_db.path, "--timeout", f"{slow_db.seconds / 4:.3f}")
    try:
        status, data = srv.kip(SLOW_QUERY)
        assert status == 408 and data["error"]["code"] == "KIP_4001"
        status, data = srv.kip(
            'DELETE ATTRIBUTES {"k"} FROM ?a WHERE { ?a {type: "Item"} ?b {type: "Item"} '
            'FILTER(?a.attributes.k < ?b.attributes.k) }')
        assert status == 408 and data["error"]["code"] == "KIP_4001"
        status, data = srv.kip('FIND(COUNT(?i)) WHERE { ?i {type: "Item"} '
                               'FILTER(IS_NOT_NULL(?i.attributes.k)) }')
        assert (status, data) == (200, {"result": SLOW_ITEMS})   # nothing half-deleted
    finally:
        assert srv.stop() == 0


def test_request_timeout_answers_408_and_the_server_stays_responsive(slow_db):
    limit = f"{slow_db.seconds / 4:.3f}"
    srv = start_server(slow_db.path, "--request-timeout", limit)
    try:
        started = time.monotonic()
        status, data = srv.kip(SLOW_QUERY)
        assert status == 408 and data["error"]["code"] == "KIP_4001"
        assert f"{float(limit):g} s" in data["error"]["message"]
        assert time.monotonic() - started < slow_db.seconds * 0.9
        assert srv.kip(FAST)[0] == 200
    finally:
        assert srv.stop() == 0


def test_reads_and_a_write_run_alongside_a_slow_read(slow_db):
    srv = start_server(slow_db.path)
    try:
        t, box = _in_thread(lambda: srv.kip(SLOW_QUERY))
        time.sleep(slow_db.seconds / 5)
        for _ in range(5):
            started = time.monotonic()
            assert srv.kip(FAST) == (200, {"result": ["i7"]})
            assert time.monotonic() - started < 0.5
        started = time.monotonic()
        status, data = srv.kip('UPSERT { CONCEPT ?i { {type: "Item", name: "i7"} '
                               'SET ATTRIBUTES {touched: true} } }')
        assert status == 200, data
        assert time.monotonic() - started < 0.5
        assert "value" in box or t.is_alive()
        t.join(30)
        assert box["value"] == (200, {"result": SLOW_RESULT})
    finally:
        assert srv.stop() == 0


def test_sigterm_finishes_in_flight_requests_and_flushes_the_audit(slow_db):
    srv = start_server(slow_db.path)
    try:
        t, box = _in_thread(lambda: srv.kip(SLOW_QUERY, timeout=60))
        # Long enough for the server to have read the request, well short of the query's
        # ~1 s: the calibration (`slow_db.seconds`) ran once per session, maybe on a busier
        # machine, so a fraction of it can outlast the query.
        time.sleep(min(slow_db.seconds / 4, 0.3))
        assert t.is_alive()
        code = srv.stop()
        t.join(30)
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()
    assert code == 0
    assert box.get("value") == (200, {"result": SLOW_RESULT}), box
    with Nexus.open(str(slow_db.path), bootstrap=False) as nx:
        entries = AuditLog(nx).entries()
    assert entries[0]["command"] == SLOW_QUERY and entries[0]["status"] == 200


def test_no_key_refuses_a_non_loopback_host(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "nexus.cli", "serve", "--db",
                           str(tmp_path / "db"), "--host", "0.0.0.0", "--port", "0"],
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2
    assert "--allow-remote" in proc.stderr and "API key" in proc.stderr


def test_api_key_from_the_environment(tmp_path):
    srv = start_server(tmp_path / "db", key=None, env={"KIP_API_KEY": "env-key"})
    try:
        query = 'FIND(?t.name) WHERE { ?t {type: "$ConceptType"} } LIMIT 1'
        assert srv.kip(query, key=None)[0] == 401
        srv.key = "env-key"
        assert srv.kip(query)[0] == 200
    finally:
        assert srv.stop() == 0
