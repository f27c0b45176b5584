"""Every limit of docs/limits.md is configurable — as a Python option of `Nexus.open`, a `kip
serve` flag and a `KIP_*` environment variable — and produces the documented error (and HTTP
status) when exceeded, while the same request passes under the default limits."""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
from reliability_support import seeded
from kipserver import KipServer

from nexus.api import Nexus
from nexus.config import Limits

ROOT = Path(__file__).resolve().parents[2]
ITEMS = 150
ITEMS_COMMAND = "UPSERT { " + " ".join(
    f'CONCEPT ?c{i} {{ {{type: "Drug", name: "d{i}"}} SET ATTRIBUTES {{ k: {i} }} }}'
    for i in range(ITEMS)) + " }"
CROSS3 = ('FIND(COUNT(?a)) WHERE { ?a {type: "Drug"} ?b {type: "Drug"} ?c {type: "Drug"} '
          'FILTER(?a.attributes.k < 10 && ?b.attributes.k < 10 && ?c.attributes.k < 10) }')
FIND = 'FIND(?d.name) WHERE { ?d {type: "Drug", name: "Aspirin"} }'


def _request(command, **extra):
    return {"command": command, **extra}


# field → (small value, request, expected code, HTTP status; None: not an error but a cap)
CASES = {
    "max_command_bytes": (200, _request(FIND + " " * 300), "KIP_4002", 400),
    "max_nesting": (4, _request('FIND(?d) WHERE { ?d {type: "Drug"} FILTER(((((?d.name == '
                                '"x"))))) }'), "KIP_4002", 400),
    "max_batch": (3, {"commands": [FIND] * 4}, "KIP_4002", 400),
    "max_rows": (20, _request('FIND(?a.name, ?b.name) WHERE { ?a {type: "$ConceptType"} '
                              '?b {type: "$ConceptType"} }'), "KIP_4002", 400),
    "max_hops": (2, _request('FIND(?a, ?b) WHERE { (?a, "treats"{1,3}, ?b) }'), "KIP_4002", 400),
    "max_path_visits": (3, _request('FIND(?a, ?b) WHERE { (?a, "belongs_to_domain"{0,5}, ?b) }'),
                        "KIP_4002", 400),
    "max_link_scan": (3, _request('FIND(?p) WHERE { (?s, ?p, ?o) } LIMIT 5'), "KIP_4002", 400),
    "max_regex_length": (5, _request('FIND(?d) WHERE { ?d {type: "Drug"} '
                                     'FILTER(REGEX(?d.name, "Aspirin|Ibuprofen")) }'),
                         "KIP_1001", 400),
    "regex_timeout": (0.05, _request('FIND(?d) WHERE { ?d {type: "Drug", name: "Aspirin"} '
                                     f'FILTER(REGEX("{"a" * 40}!", "(a|aa)+$")) }}'),
                      "KIP_4001", 408),
    "query_timeout": (0.3, _request(CROSS3), "KIP_4001", 408),
    "max_search_limit": (2, _request('SEARCH CONCEPT "d1" LIMIT 50'), None, 200),
    "max_search_chars": (5, _request('SEARCH CONCEPT "aspirin fever"'), "KIP_4002", 400),
    "max_result_bytes": (40, _request('FIND(?t.name) WHERE { ?t {type: "$ConceptType"} }'),
                         "KIP_4002", 400),
}


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    db = tmp_path_factory.mktemp("limits") / "db"
    with Nexus.open(str(db)) as nx:
        seeded(nx)
        assert "result" in nx.execute_kip({"command": ITEMS_COMMAND})
    return db


def _check(response: dict, status: int | None, case: str) -> None:
    _, _, code, http = CASES[case]
    if code is None:
        assert len(response["result"]) == 2, response           # capped, not refused
    else:
        assert response.get("error", {}).get("code") == code, (case, response)
        assert response["error"]["hint"]
    if status is not None:
        assert status == http, (case, status, response)


@pytest.mark.parametrize("case", sorted(CASES))
def test_python_option(database, case):
    value, request, code, _ = CASES[case]
    with Nexus.open(str(database), **{case: value}) as nx:
        started = time.monotonic()
        _check(nx.execute_kip(request), None, case)
        assert time.monotonic() - started < 10
    if code is not None and case not in ("query_timeout", "regex_timeout"):
        with Nexus.open(str(database)) as nx:           # the defaults let it through
            response = nx.execute_kip(request)
            assert "result" in response, (case, response)


def test_limits_are_a_dataclass_the_table_covers():
    assert set(CASES) | {"max_body_bytes", "default_search_limit"} == \
        {f.name for f in dataclasses.fields(Limits)}


# Limits that do not get in each other's way, one server each.
SERVERS = (("query_timeout", "regex_timeout", "max_search_limit", "max_batch", "max_hops",
            "max_path_visits", "max_link_scan"),
           ("max_command_bytes", "max_nesting", "max_rows", "max_regex_length",
            "max_search_chars", "max_result_bytes"))


@pytest.mark.parametrize("cases", SERVERS, ids=["run-time", "size"])
def test_serve_flags(database, cases):
    flags = ["--max-body", "3000"]
    for case in cases:
        flag = "--timeout" if case == "query_timeout" else "--" + case.replace("_", "-")
        flags += [flag, str(CASES[case][0])]
    server = KipServer.start(database, *flags)
    try:
        for case in cases:
            status, data = server.kip(CASES[case][1])
            _check(data, status, case)
        status, data = server.post({"method": "execute_kip", "params": {
            "command": FIND, "parameters": {"pad": "x" * 3000}}})
        assert status == 413 and data["error"]["code"] == "KIP_4002"
    finally:
        assert server.stop() == 0


def test_serve_environment(database):
    env = {"KIP_MAX_BATCH": "3", "KIP_QUERY_TIMEOUT": "0.3", "KIP_MAX_BODY_BYTES": "3000",
           "KIP_MAX_HOPS": "9"}
    server = KipServer.start(database, "--max-hops", "2", env=env)      # a flag beats env
    try:
        for case in ("max_batch", "query_timeout", "max_hops"):
            status, data = server.kip(CASES[case][1])
            _check(data, status, case)
        status, data = server.post({"method": "execute_kip", "params": {
            "command": FIND, "parameters": {"pad": "x" * 3000}}})
        assert status == 413
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("argv, env, message", [
    (["--max-rows", "0"], {}, "--max-rows must be positive"),
    (["--regex-timeout", "-1"], {}, "--regex-timeout must be positive"),
    ([], {"KIP_MAX_BATCH": "many"}, "KIP_MAX_BATCH must be a number"),
])
def test_serve_refuses_bad_limits(tmp_path, monkeypatch, capsys, argv, env, message):
    from nexus.cli import main
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(["serve", "--db", str(tmp_path / "db"), "--port", "0", *argv]) == 2
    assert message in capsys.readouterr().err


def test_docs_list_every_limit():
    from nexus.cli import LIMIT_FLAGS
    text = (ROOT / "docs" / "limits.md").read_text()
    for field in dataclasses.fields(Limits):
        assert f"| `{field.name}`" in text, field.name
    for field, (flag, _, _) in LIMIT_FLAGS.items():
        assert f"`{flag} " in text and f"`KIP_{field.upper()}`" in text, field
    for code in ("KIP_4001", "KIP_4002", "KIP_1001", "KIP_2003", "413", "408"):
        assert code in text


# --- the fixed bounds of docs/limits.md ---------------------------------------------------------

def _deep(depth: int):
    value = 1
    for _ in range(depth):
        value = [value]
    return value


def _code(response: dict) -> str | None:
    return response.get("error", {}).get("code")


WRITE_A = 'UPSERT { CONCEPT ?d { {type: "Drug", name: "Bounds"} SET ATTRIBUTES { a: :v } } }'


def test_fixed_bounds_through_the_api():
    with Nexus.open(None) as nx:
        seeded(nx)

        def run(command, **parameters):
            request = {"command": command}
            if parameters:
                request["parameters"] = parameters
            return nx.execute_kip(request)
        find_in = 'FIND(?d.name) WHERE { ?d {type: "Drug"} FILTER(IN(?d.name, :v)) }'
        # parameter values: 64 levels of nesting, not 65
        assert "result" in run(find_in, v=_deep(64))
        response = run(find_in, v=_deep(65))
        assert _code(response) == "KIP_2003" and ":v" in response["error"]["message"]
        # stored integers: -2^63 .. 2^64-1, as parameters and as literals
        for value in (2**64 - 1, -(2**63)):
            assert "result" in run(WRITE_A, v=value)
            assert run('FIND(?d.attributes.a) WHERE { ?d {type: "Drug", name: "Bounds"} }'
                       )["result"] == [value]
            assert "result" in run(WRITE_A.replace(":v", str(value)))
        for value in (2**64, -(2**63) - 1):
            assert _code(run(WRITE_A, v=value)) == "KIP_2003"
            assert _code(run(WRITE_A.replace(":v", str(value)))) == "KIP_2003"
        assert "result" in run('FIND(?d) WHERE { ?d {type: "Drug"} '
                               f'FILTER(?d.attributes.dose_mg < {10**300}) }}')
        assert _code(run(WRITE_A.replace(":v", "9" * 4301))) == "KIP_1001"
        # an open path range is refused only when its lower bound passes max_hops
        assert "result" in run('FIND(?a, ?b) WHERE { (?a, "belongs_to_domain"{1,}, ?b) }')
        assert _code(run('FIND(?a, ?b) WHERE { (?a, "belongs_to_domain"{21,}, ?b) }')) \
            == "KIP_4002"
        # LIMIT: any integer >= 1
        find = 'FIND(?d.name) WHERE { ?d {type: "Drug"} } LIMIT '
        assert len(run(find + str(10**12))["result"]) == 3          # all the drugs
        for bad in ("0", "-1", "1.5"):
            assert _code(run(find + bad)) == "KIP_1001", bad
        # lone surrogates: fine to look for, refused when they would be written
        assert _code(run('FIND(?d) WHERE { ?d {type: "Drug", name: :v} }', v="\ud800")) \
            == "KIP_3002"
        assert _code(run(WRITE_A, v="x\udfffy")) == "KIP_2003"
