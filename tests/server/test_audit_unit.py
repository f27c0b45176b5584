"""In-process checks of pieces that are awkward to reach over a socket: the audit log's
retention and paging, result summaries, and the app's 503 while shutting down."""
from __future__ import annotations

import asyncio
import json
import time

import pytest

from nexus.api import Nexus
from nexus.ops.audit import AuditLog, entry, summarize
from nexus.server import KipApp, command_kind


@pytest.fixture
def nexus():
    with Nexus.open(None, bootstrap=False) as nx:
        yield nx


def _entry(i: int) -> dict:
    return {"method": "execute_kip", "kind": "KQL", "command": f"c{i}"}


def test_retention_by_count(nexus):
    log = AuditLog(nexus, max_entries=5, max_age_days=30)
    for i in range(12):
        log.record(_entry(i))
    log.flush()
    assert [e["command"] for e in log.entries()] == ["c11", "c10", "c9", "c8", "c7"]


def test_retention_by_age(nexus):
    log = AuditLog(nexus, max_entries=100, max_age_days=1)
    now = time.time()
    log.record(_entry(0), ts=now - 3 * 86400)
    log.record(_entry(1), ts=now - 2 * 86400)
    log.record(_entry(2), ts=now)
    log.flush()
    assert [e["command"] for e in log.entries()] == ["c2"]


def test_paging_is_stable_while_new_entries_arrive(nexus):
    log = AuditLog(nexus)
    for i in range(7):
        log.record(_entry(i))
    page = log.list_logs({"limit": 3})
    assert [e["command"] for e in page["result"]] == ["c6", "c5", "c4"]
    log.record(_entry(99))                       # newer than the cursor: not on later pages
    page = log.list_logs({"limit": 3, "cursor": page["next_cursor"]})
    assert [e["command"] for e in page["result"]] == ["c3", "c2", "c1"]
    page = log.list_logs({"limit": 3, "cursor": page["next_cursor"]})
    assert [e["command"] for e in page["result"]] == ["c0"] and "next_cursor" not in page


def test_background_flush_and_close(nexus):
    log = AuditLog(nexus, flush_interval=0.05).start()
    log.record(_entry(1))
    time.sleep(0.3)
    with nexus.store.read() as txn:
        assert txn.aux("audit").count() == 1     # flushed without anyone asking
    log.record(_entry(2))
    log.close()
    with nexus.store.read() as txn:
        assert txn.aux("audit").count() == 2


def test_summaries_keep_counts_never_values():
    assert summarize({"result": [{"name": "secret"}] * 3}) == {"result": {"rows": 3}}
    assert summarize({"result": {"blocks": 1, "upsert_concept_nodes": ["C:1", "C:2"],
                                 "upsert_proposition_links": []}}) == {
        "result": {"blocks": 1, "upsert_concept_nodes": 2, "upsert_proposition_links": 0}}
    assert summarize({"result": {"identity": {"name": "secret"}, "total_domains": 4}}) == {
        "result": {"total_domains": 4}}
    assert summarize({"error": {"code": "KIP_3002", "message": "secret"}}) == {
        "error": "KIP_3002"}
    e = entry(method="execute_kip", kinds=["KQL"], commands=["x" * 50], duration=0.01,
              status=200, response={"result": 987654321}, batch=False, chars=10)
    # (a value no timestamp or duration can contain by chance)
    assert e["command"] == "x" * 10 + "…" and "987654321" not in json.dumps(e)


def test_command_kind():
    assert command_kind("  // note\n FIND(?x) WHERE {}") == "KQL"
    assert command_kind("UPSERT {}") == "KML" and command_kind("DELETE CONCEPT") == "KML"
    assert command_kind("DESCRIBE PRIMER") == "META" and command_kind("SEARCH CONCEPT") == "META"
    assert command_kind("bogus") == "?" and command_kind(None) == "?"


def _asgi(app, verb, path, body=b"", headers=()):
    sent = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": verb, "path": path, "headers": list(headers),
             "client": ("127.0.0.1", 1)}
    asyncio.run(app(scope, receive, send))
    start = sent[0]
    return start["status"], json.loads(sent[1]["body"])


def test_shutting_down_answers_503(nexus):
    app = KipApp(nexus, audit=False)
    try:
        body = json.dumps({"method": "execute_kip_readonly",
                           "params": {"command": "FIND(?x) WHERE { ?x {type: \"T\"} }"}})
        assert _asgi(app, "POST", "/kip", body.encode())[0] == 200
        app.shutting_down = True
        status, data = _asgi(app, "POST", "/kip", body.encode())
        assert status == 503 and data["error"]["code"] == "KIP_4003"
        assert _asgi(app, "GET", "/healthz")[0] == 503
    finally:
        app.close()


class _FlakyOwner:
    """Stands in for the owner process's socket: fails its first delivery with an error
    that is not an OSError, then records what it is sent."""

    def __init__(self) -> None:
        self.calls = 0
        self.delivered: list = []

    def post(self, path: str, body: bytes, headers: dict) -> None:
        self.calls += 1
        if self.calls == 1:
            raise ValueError("a garbled answer from the owner")
        self.delivered.extend(json.loads(body))


def test_a_follower_relay_outlives_a_failed_delivery(caplog):
    from nexus.server.workers import RemoteAudit
    owner = _FlakyOwner()
    relay = RemoteAudit(owner, None)     # type: ignore[arg-type]
    relay.flush_interval = 0.02
    relay.start()
    relay.record(_entry(1))
    deadline = time.monotonic() + 5
    while owner.calls < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    relay.record(_entry(2))              # after the failure: still delivered, by the thread
    while not owner.delivered and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        assert [e["command"] for _, e in owner.delivered] == ["c2"]
        assert "audit flush failed" in caplog.text
    finally:
        relay.close()
