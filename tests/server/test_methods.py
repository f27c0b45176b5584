"""The three methods over HTTP: execute_kip, execute_kip_readonly (single, batch, dry run,
read-only refusal), list_logs (paging, no parameter values), and HTTP status by error
class (CONTRACT §1–§2)."""
from __future__ import annotations

import json
import time

import pytest

from nexus.errors import ErrorCode
from nexus.server import http_status

TYPE_DEF = ('UPSERT { CONCEPT ?t { {type: "$ConceptType", name: "Gadget"} '
            'SET ATTRIBUTES {description: "A test gadget"} } }')
UPSERT_GADGET = 'UPSERT { CONCEPT ?g { {type: "Gadget", name: :name} SET ATTRIBUTES {n: :n} } }'
FIND_GADGET = 'FIND(?g.attributes.n) WHERE { ?g {type: "Gadget", name: :name} }'


@pytest.fixture(scope="session", autouse=True)
def gadget_type(server):
    status, data = server.kip(TYPE_DEF)
    assert status == 200, data


def test_execute_kip_single_write_then_read(server):
    status, data = server.kip(UPSERT_GADGET, {"name": "g-single", "n": 1})
    assert status == 200
    assert data["result"]["upsert_concept_nodes"][0].startswith("C:")
    status, data = server.kip(FIND_GADGET, {"name": "g-single"}, readonly=True)
    assert (status, data) == (200, {"result": [1]})


def test_readonly_refuses_kml_before_running_it(server):
    status, data = server.kip(UPSERT_GADGET, {"name": "g-refused", "n": 1}, readonly=True)
    assert status == 400
    err = data["error"]
    assert err["code"] == "KIP_1001" and "execute_kip" in err["message"]
    status, data = server.kip(FIND_GADGET, {"name": "g-refused"}, readonly=True)
    assert status == 404 and data["error"]["code"] == "KIP_3002"   # nothing was written


def test_readonly_batch_reports_the_refusal_in_place(server):
    status, data = server.call("execute_kip_readonly", {"commands": [
        UPSERT_GADGET, FIND_GADGET], "parameters": {"name": "g-single", "n": 5}})
    assert status == 200
    first, second = data["result"]
    assert first["error"]["code"] == "KIP_1001"
    assert second == {"result": [1]}


def test_batch_mixing_kql_meta_kml_stops_after_a_failing_kml(server):
    status, data = server.call("execute_kip", {
        "commands": [
            'DESCRIBE CONCEPT TYPE "Gadget"',
            {"command": UPSERT_GADGET, "parameters": {"name": "g-batch-1", "n": 10}},
            'FIND(?x) WHERE { ?x {type: "Gadget", name: "no such gadget"} }',   # KQL error
            {"command": FIND_GADGET, "parameters": {"name": "g-batch-1"}},
            'UPSERT { CONCEPT ?u { {type: "Undefined_Type", name: "u"} } }',    # KML error
            {"command": UPSERT_GADGET, "parameters": {"name": "g-batch-2", "n": 20}},
            FIND_GADGET,
        ],
        "parameters": {"name": "g-batch-1"},
    })
    assert status == 200                      # every batch is 200
    results = data["result"]
    assert len(results) == 5                  # stopped right after the failing KML
    assert results[0]["result"]["name"] == "Gadget"
    assert results[1]["result"]["upsert_concept_nodes"]
    assert results[2]["error"]["code"] == "KIP_3002"   # reported in place, batch goes on
    assert results[3] == {"result": [10]}
    assert results[4]["error"]["code"] == "KIP_2001"
    status, data = server.kip(FIND_GADGET, {"name": "g-batch-2"})
    assert status == 404                      # the command after the failure never ran


def test_dry_run_validates_and_writes_nothing(server):
    status, data = server.call("execute_kip", {"command": UPSERT_GADGET, "dry_run": True,
                                               "parameters": {"name": "g-dry", "n": 3}})
    assert status == 200
    assert data["result"]["upsert_concept_nodes"] == []
    assert server.kip(FIND_GADGET, {"name": "g-dry"})[0] == 404
    status, data = server.call("execute_kip", {
        "command": 'UPSERT { CONCEPT ?x { {type: "Nope", name: "x"} } }', "dry_run": True})
    assert status == 400 and data["error"]["code"] == "KIP_2001"


@pytest.mark.parametrize("command, code, http", [
    ("FIND(?x WHERE { }", "KIP_1001", 400),
    ('FIND(?bad-name) WHERE { ?bad-name {type: "Gadget"} }', "KIP_1002", 400),
    ('UPSERT { CONCEPT ?x { {type: "NoSuchType", name: "x"} } }', "KIP_2001", 400),
    ('UPSERT { CONCEPT ?x { {type: "Gadget", name: "meta"} } WITH METADATA {_version: 9} }',
     "KIP_2002", 400),
    ('FIND(?y) WHERE { ?x {type: "Gadget"} }', "KIP_3001", 400),
    ('FIND(?x) WHERE { ?x {id: "C:999999999"} }', "KIP_3002", 404),
    ('DELETE CONCEPT ?d DETACH WHERE { ?d {type: "Domain", name: "CoreSchema"} }',
     "KIP_3004", 403),
    ('FIND(?a, ?b) WHERE { ?a {type: "Gadget"} (?a, "x"{1,500}, ?b) }', "KIP_4002", 400),
])
def test_http_status_by_error_class(server, command, code, http):
    status, data = server.kip(command)
    assert data["error"]["code"] == code, data
    assert status == http


def test_status_table_covers_every_code():
    expected = {"KIP_1001": 400, "KIP_1002": 400, "KIP_2001": 400, "KIP_2002": 400,
                "KIP_2003": 400, "KIP_3001": 400, "KIP_3002": 404, "KIP_3003": 409,
                "KIP_3004": 403, "KIP_3005": 409, "KIP_4001": 408, "KIP_4002": 400, "KIP_4003": 500}
    for code in ErrorCode:
        assert http_status({"error": {"code": code.value}}) == expected[code.value]
    assert http_status({"result": [{"error": {"code": "KIP_3002"}}]}) == 200


def test_oversized_batch_is_resource_exhausted(server):
    status, data = server.call("execute_kip_readonly",
                               {"commands": ["DESCRIBE PRIMER"] * 1001})
    assert status == 400 and data["error"]["code"] == "KIP_4002"


# --- list_logs -----------------------------------------------------------------------------

SECRET = "pa55word-do-not-log-7f3a"


def test_list_logs_pages_newest_first_without_parameter_values(server):
    for i in range(5):
        status, _ = server.kip(UPSERT_GADGET, {"name": f"{SECRET}-{i}", "n": 424242 + i})
        assert status == 200
    server.kip(FIND_GADGET, {"name": SECRET}, readonly=True)
    status, page1 = server.call("list_logs", {"limit": 2})
    assert status == 200
    assert len(page1["result"]) == 2 and page1["next_cursor"]
    newest = page1["result"][0]
    assert newest["method"] == "execute_kip_readonly" and newest["kind"] == "KQL"
    assert newest["command"] == FIND_GADGET
    assert newest["status"] == 404 and newest["error"] == "KIP_3002"
    assert {"time", "duration_ms"} <= set(newest)
    assert page1["result"][1]["result"]["upsert_concept_nodes"] == 1
    status, page2 = server.call("list_logs", {"limit": 2, "cursor": page1["next_cursor"]})
    assert status == 200 and len(page2["result"]) == 2
    times = [e["time"] for e in page1["result"] + page2["result"]]
    assert times == sorted(times, reverse=True)
    assert page1["result"][1] != page2["result"][0]
    # walk to the end: every page is newest-first and the cursor ends
    seen, cursor = 0, None
    while True:
        status, page = server.call("list_logs", {"limit": 50, **({"cursor": cursor}
                                                                 if cursor else {})})
        seen += len(page["result"])
        dump = json.dumps(page)
        assert SECRET not in dump and "424242" not in dump
        cursor = page.get("next_cursor")
        if not cursor:
            break
    assert seen >= 6
    assert SECRET.encode() not in server.log.read_bytes()   # nor in the access log


def test_list_logs_truncates_long_commands(server):
    long_find = FIND_GADGET + " " + "// padding " * 200
    server.kip(long_find, {"name": "x"})
    _, page = server.call("list_logs", {"limit": 1})
    entry = page["result"][0]
    assert len(entry["command"]) <= 501 and entry["command"].startswith("FIND(")


def test_list_logs_records_batches(server):
    server.call("execute_kip", {"commands": ["DESCRIBE PRIMER", "FIND(?x WHERE"]})
    _, page = server.call("list_logs", {"limit": 1})
    entry = page["result"][0]
    assert entry["kind"] == "batch" and entry["kinds"] == ["META", "KQL"]
    assert entry["result"] == {"executed": 2, "failed": 1} and entry["errors"] == ["KIP_1001"]


def test_list_logs_bad_params(server):
    for params in ({"cursor": "garbage"}, {"limit": 0}, {"limit": "5"}, {"what": 1}):
        status, data = server.call("list_logs", params)
        assert status == 400 and data["error"]["code"] == "KIP_1001", params


def test_access_log_lines(server):
    server.kip(FIND_GADGET, {"name": SECRET})
    # The line is written just after the response is sent: on a busy machine the client may
    # read the log before the server wrote it.
    deadline = time.monotonic() + 10
    while True:
        lines = [l for l in server.log_lines() if l.get("method") == "execute_kip"]
        if lines and lines[-1]["kinds"] == ["KQL"] or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert lines
    last = lines[-1]
    assert last["http"] == "POST /kip" and last["kinds"] == ["KQL"]
    assert last["status"] == 404 and last["error"] == "KIP_3002"
    assert isinstance(last["duration_ms"], float)
