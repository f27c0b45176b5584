"""The shapes of an `execute_kip` request (CONTRACT §1–§2): one command with or without
parameters, a dry run, a batch — and the malformed ones, which are KIP_1001 before anything
runs. The engine takes the commonest shape (`{command, parameters}`) by a shorter path; these
state that every shape answers what the contract says, whichever path it takes."""
from __future__ import annotations

import pytest

from kqlsupport import open_db

FIND = 'FIND(?c.name) WHERE { ?c {type: "Gadget", name: :name} }'
FIND_ALL = 'FIND(?c.name) WHERE { ?c {type: "Gadget"} }'
UPSERT = 'UPSERT { CONCEPT ?c { {type: "Gadget", name: :name} } }'


@pytest.fixture(scope="module")
def nx():
    nx = open_db("memory", None, bootstrap=True)
    for text in ('UPSERT { CONCEPT ?t { {type: "$ConceptType", name: "Gadget"} } }',):
        assert "error" not in nx.execute_kip({"command": text})
    assert "error" not in nx.execute_kip({"command": UPSERT, "parameters": {"name": "g1"}})
    yield nx
    nx.close()


def test_one_command(nx):
    assert nx.execute_kip({"command": FIND, "parameters": {"name": "g1"}}) == {"result": ["g1"]}
    assert nx.execute_kip({"command": FIND_ALL}) == {"result": ["g1"]}
    assert nx.execute_kip({"command": FIND_ALL, "parameters": None}) == {"result": ["g1"]}
    assert nx.execute_kip({"command": FIND_ALL, "parameters": {}}) == {"result": ["g1"]}
    # a parameter the command does not use is ignored; a missing one is KIP_1001
    assert nx.execute_kip({"command": FIND_ALL, "parameters": {"x": 1}}) == {"result": ["g1"]}
    assert nx.execute_kip({"command": FIND})["error"]["code"] == "KIP_1001"


def test_the_caller_s_parameters_are_not_changed(nx):
    params = {"name": "g1"}
    nx.execute_kip({"command": FIND, "parameters": params})
    assert params == {"name": "g1"}


def test_dry_run_and_batch(nx):
    response = nx.execute_kip({"command": UPSERT, "parameters": {"name": "g2"},
                               "dry_run": True})
    assert "error" not in response, response
    response = nx.execute_kip({"command": UPSERT, "dry_run": True})
    assert response["error"]["code"] == "KIP_1001"       # :name missing
    assert nx.execute_kip({"command": FIND_ALL}) == {"result": ["g1"]}
    response = nx.execute_kip({"commands": [FIND_ALL, {"command": FIND}],
                               "parameters": {"name": "g1"}})
    assert response == {"result": [{"result": ["g1"]}, {"result": ["g1"]}]}


@pytest.mark.parametrize("request_", [
    {"command": FIND_ALL, "commands": [FIND_ALL]},
    {"command": FIND_ALL, "params": {}},
    {"command": 5},
    {"command": FIND_ALL, "parameters": [1]},
    {"command": FIND_ALL, "parameters": "x"},
    {"command": FIND_ALL, "dry_run": "yes"},
    {},
    [FIND_ALL],
])
def test_malformed_requests(nx, request_):
    response = nx.execute_kip(request_)
    assert set(response) == {"error"} and response["error"]["code"] == "KIP_1001", response
