"""The PostgreSQL backend's faults and secrets (issue 22): a database that is down or
unreachable is a KIP error naming the cause within the connect timeout; a connection lost
mid-command rolls the command back and says so; a password never appears in an error, a
log line or a DESCRIBE result. Runs on the session's real server (tests/pgtest.py)."""
from __future__ import annotations

import json
import logging
import time

import pytest

from nexus import Nexus
from nexus.errors import ErrorCode, KipError
from nexus.store import open_store

PASSWORD = "Sekr1t-pa55word"


def terminate_backends(pg_server, url: str) -> int:
    """Kill every server process connected to the database of `url` (as a crash or a
    network cut would); returns how many."""
    dbname = url.split("?")[0].rsplit("/", 1)[1]
    rows = pg_server.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                         f"WHERE datname = '{dbname}' AND pid <> pg_backend_pid()")
    return len(rows)


def test_unreachable_database_is_kip_4003_naming_the_cause_quickly():
    url = f"postgresql://kip:{PASSWORD}@127.0.0.1:1/nexus?connect_timeout=3"
    started = time.monotonic()
    with pytest.raises(KipError) as e:
        Nexus.open(url)
    assert time.monotonic() - started < 10
    err = e.value
    assert err.code is ErrorCode.KIP_4003
    assert "unreachable" in err.message and "127.0.0.1" in err.message
    assert "refused" in err.message.lower()         # the cause, from the driver
    text = json.dumps(err.to_dict())
    assert PASSWORD not in text and "***" in text


def test_a_password_never_shows(pg_server, caplog):
    caplog.set_level(logging.DEBUG)
    pg_server.sql(f"DO $$ BEGIN CREATE ROLE kipuser LOGIN SUPERUSER PASSWORD '{PASSWORD}'; "
                  "EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    base = pg_server.fresh_database("pw")
    url = base.replace("postgresql://postgres@", f"postgresql://kipuser:{PASSWORD}@")
    nx = Nexus.open(url)
    try:
        outputs = [nx.execute_kip({"command": c}) for c in (
            "DESCRIBE PRIMER", "DESCRIBE DOMAINS", "DESCRIBE CONCEPT TYPES",
            'UPSERT { CONCEPT ?x { {type: "Person", name: "A"} } } WITH METADATA {}',
            "FIND(?x) WHERE { ?x {type: \"NoSuchType\"} }",
            "not a command")]
        outputs.append(nx.info())
        assert PASSWORD not in nx.store.location and "***" in nx.store.location
        # A database error mid-life: the connection is cut under an open nexus.
        terminate_backends(pg_server, base)
        outputs.append(nx.execute_kip({"command": "DESCRIBE PRIMER"}))
    finally:
        nx.close()
    text = json.dumps(outputs, default=str)
    assert PASSWORD not in text
    assert PASSWORD not in caplog.text


def test_connection_lost_mid_write_rolls_back_and_reports(pg_server):
    url = pg_server.fresh_database("lost") + "&space=lost"
    store = open_store(url)
    try:
        with store.write() as w:
            t = w.intern("Thing")
            w.create_concept(w.new_id(), t, "kept", {}, {})
        with pytest.raises(KipError) as e:
            with store.write() as w:
                w.create_concept(w.new_id(), t, "lost", {}, {})
                assert terminate_backends(pg_server, url) >= 1
                w.create_concept(w.new_id(), t, "lost too", {}, {})
        assert e.value.code is ErrorCode.KIP_4003
        assert "connection" in e.value.message and "rolled back" in e.value.message
        # The store goes on (a new connection), and nothing of the lost write is there.
        with store.read() as r:
            assert r.concept_id(t, "kept") is not None
            assert r.concept_id(t, "lost") is None and r.concept_id(t, "lost too") is None
            assert r.count_concepts() == 1
    finally:
        store.close()


def test_connections_that_died_while_idle_are_replaced(pg_server):
    """The database restarted or the network cut the pooled connections between two
    commands: nothing was running on them, so the next command starts on a new one."""
    url = pg_server.fresh_database("cut")
    nx = Nexus.open(url)
    try:
        upsert = nx.execute_kip({"command": 'UPSERT { CONCEPT ?a { {type: "Person", '
                                            'name: "a"} } }'})
        assert "result" in upsert, upsert
        assert terminate_backends(pg_server, url) >= 1
        found = nx.execute_kip({"command": 'FIND(?a.name) WHERE { ?a {type: "Person", '
                                           'name: "a"} }'})
        assert "result" in found, found
        assert json.dumps(found["result"]).count('"a"') == 1
    finally:
        nx.close()


def test_a_write_on_a_connection_that_died_while_idle_runs_on_a_new_one(pg_server):
    """A write's BEGIN goes with its first statement: when the pooled connection it took
    had died while idle, nothing had run on it, so the write starts again on a new one
    (and commits once)."""
    url = pg_server.fresh_database("cutw")
    nx = Nexus.open(url)
    try:
        first = nx.execute_kip({"command": 'UPSERT { CONCEPT ?a { {type: "Person", '
                                           'name: "a"} } }'})
        assert "result" in first, first
        assert terminate_backends(pg_server, url) >= 1
        second = nx.execute_kip({"command": 'UPSERT { CONCEPT ?b { {type: "Person", '
                                            'name: "b"} SET ATTRIBUTES { n: 1 } } }'})
        assert "result" in second, second
        found = nx.execute_kip({"command": 'FIND(?b.attributes.n) WHERE { ?b {type: '
                                           '"Person", name: "b"} }'})
        assert json.dumps(found["result"]) == "[1]", found
    finally:
        nx.close()
