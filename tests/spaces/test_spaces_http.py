"""Many memories behind one server (`kip serve --spaces DIR`): each space is its own store,
keys answer only in their spaces, hostile names touch no file, open spaces stay bounded."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clirun import kip_in_process  # tests/clirun.py (tests/ is on the path)

UPSERT = ('UPSERT { CONCEPT ?p { {type: "Person", name: "Ada"} '
          'SET ATTRIBUTES { person_class: "Human" } } }')
FIND = 'FIND(?p.name) WHERE { ?p {type: "Person", name: "Ada"} }'
TYPES = 'FIND(?t.name) WHERE { ?t {type: "$ConceptType"} } LIMIT 1'


def _create(server, name: str, key: str | None = None) -> tuple[int, object]:
    return server.request("POST", "/v1/admin/spaces", {"name": name}, key)


def test_a_write_in_one_space_is_invisible_in_another(spaces_server):
    server = spaces_server("--auto-create")
    status, body = server.kip("a", UPSERT)
    assert status == 200 and "error" not in body, body
    status, body = server.kip("a", FIND, readonly=True)
    assert status == 200 and "Ada" in json.dumps(body["result"]), body
    status, body = server.kip("b", UPSERT.replace("Ada", "Bob"))   # b: a fresh store
    assert status == 200 and "error" not in body, body
    status, body = server.kip("b", FIND, readonly=True)
    assert body["error"]["code"] == "KIP_3002", body        # Ada is not found there
    assert sorted(n for n in os.listdir(server.root) if not n.startswith(".")) == ["a", "b"]


def test_auto_create_creates_a_space_on_its_first_write_only(spaces_server):
    server = spaces_server("--auto-create")
    for method_readonly, command in ((True, FIND), (False, FIND), (False, TYPES),
                                     (True, UPSERT), (False, "NOT A COMMAND")):
        status, body = server.kip("later", command, readonly=method_readonly)
        assert status == 404 and body["error"]["code"] == "KIP_1001", (command, body)
        assert "No space" in body["error"]["message"]
        assert not (server.root / "later").exists()
    batch = {"method": "execute_kip", "params": {"commands": [FIND, UPSERT]}}
    status, body = server.request("POST", "/v1/later/kip", batch)   # a batch that writes
    assert status == 200 and "error" not in body["result"][1], body
    assert "Ada" in json.dumps(server.kip("later", FIND, readonly=True)[1]["result"])


def test_a_missing_space_is_an_error_without_auto_create(spaces_server):
    server = spaces_server()
    status, body = server.kip("nowhere", FIND, readonly=True)
    assert status == 404 and body["error"]["code"] == "KIP_1001"
    assert not (server.root / "nowhere").exists()


@pytest.mark.parametrize("name", ["..", ".hidden", "a%2Fb", "a\\b", "a%00b", "A",
                                  "%D0%B0", "x" * 64, "", "-lead"])
def test_hostile_space_names_are_refused_and_touch_no_file(spaces_server, tmp_path, name):
    server = spaces_server("--auto-create")
    before = sorted(p.name for p in tmp_path.iterdir())
    status, body = server.kip(name, UPSERT)
    assert status in (400, 404), (status, body)
    assert body["error"]["code"] == "KIP_1001"
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert os.listdir(server.root) == []


def _keys(tmp_path: Path, table: dict) -> Path:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps(table))
    return path


def test_a_key_outside_its_spaces_gets_the_answer_of_a_missing_space(spaces_server,
                                                                     tmp_path):
    keys = _keys(tmp_path, {"ka": {"spaces": ["a"], "mode": "write"},
                            "kall": {"spaces": "*", "mode": "write"}})
    server = spaces_server("--auto-create", "--keys", str(keys))
    assert "error" not in server.kip("b", UPSERT, key="kall")[1]     # b exists now
    hidden = server.kip("b", FIND, readonly=True, key="ka")
    missing = server.kip("zz", FIND, readonly=True, key="ka")
    assert hidden[0] == missing[0] == 404
    assert hidden[1]["error"]["code"] == missing[1]["error"]["code"] == "KIP_1001"
    assert hidden[1]["error"]["message"].replace("'b'", "X") == \
        missing[1]["error"]["message"].replace("'zz'", "X")
    assert server.kip("a", FIND, readonly=True)[0] == 401           # no key at all
    assert server.kip("a", UPSERT, key="ka")[0] == 200
    assert "Ada" in json.dumps(server.kip("a", FIND, readonly=True, key="ka")[1])


def test_a_read_key_is_refused_writes_even_through_execute_kip(spaces_server, tmp_path):
    keys = _keys(tmp_path, {"kw": {"spaces": ["a"], "mode": "write"},
                            "kr": {"spaces": ["a"], "mode": "read"}})
    server = spaces_server("--auto-create", "--keys", str(keys))
    assert "error" not in server.kip("a", UPSERT, key="kw")[1]
    status, body = server.kip("a", UPSERT.replace("Ada", "Bob"), key="kr")
    assert "error" in body, body
    assert server.kip("a", FIND.replace("Ada", "Bob"), readonly=True, key="kr")[1][
        "error"]["code"] == "KIP_3002"                      # Bob was never written
    assert "Ada" in json.dumps(server.kip("a", FIND, readonly=True, key="kr")[1]["result"])


def test_sighup_reloads_the_keys(spaces_server, tmp_path):
    keys = _keys(tmp_path, {"old": {"spaces": "*", "mode": "write"}})
    server = spaces_server("--auto-create", "--keys", str(keys))
    assert server.kip("a", UPSERT, key="old")[0] == 200
    assert server.kip("a", TYPES, readonly=True, key="old")[0] == 200
    _keys(tmp_path, {"new": {"spaces": "*", "mode": "write"}})
    server.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while server.kip("a", TYPES, readonly=True, key="new")[0] != 200:
        assert time.monotonic() < deadline, "keys not reloaded"
        time.sleep(0.1)
    assert server.kip("a", TYPES, readonly=True, key="old")[0] == 401


def test_admin_creates_lists_and_drops_spaces(spaces_server, tmp_path):
    keys = _keys(tmp_path, {"adm": {"spaces": "*", "mode": "admin"},
                            "w": {"spaces": "*", "mode": "write"}})
    server = spaces_server("--keys", str(keys))
    assert _create(server, "s1", "w")[0] == 403
    status, body = _create(server, "s1", "adm")
    assert status == 200 and body["result"]["created"] is True, body
    assert server.request("GET", "/v1/admin/spaces", key="adm")[1]["result"] == ["s1"]
    assert server.kip("s1", UPSERT, key="w")[0] == 200
    status, body = _create(server, "../evil", "adm")
    assert status == 400 and body["error"]["code"] == "KIP_1001"
    assert server.request("DELETE", "/v1/admin/spaces/s1", key="adm")[0] == 200
    assert not (server.root / "s1").exists()
    assert server.kip("s1", FIND, readonly=True, key="w")[0] == 404


def test_cli_space_create_list_drop(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

    def kip(*args: str, real: bool = False) -> subprocess.CompletedProcess:
        """A real `kip space` process for the first command; the entry point in this
        process (tests/clirun.py) for the rest."""
        if not real:
            return kip_in_process("space", *args, "--spaces", str(tmp_path / "d"))
        return subprocess.run([sys.executable, "-m", "nexus.cli", "space", *args,
                               "--spaces", str(tmp_path / "d")], env=env,
                              capture_output=True, text=True, timeout=120)
    assert kip("create", "one", real=True).returncode == 0
    assert kip("list").stdout.split() == ["one"]
    bad = kip("create", "../x")
    assert bad.returncode != 0 and "Invalid space name" in bad.stderr
    assert not (tmp_path / "x").exists()
    assert kip("drop", "one").returncode == 0
    assert kip("list").stdout.split() == []


def test_cli_commands_take_a_space_of_a_spaces_directory(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    root = tmp_path / "d"

    def kip(*args: str, real: bool = False) -> subprocess.CompletedProcess:
        """A real `kip exec` process for the write; the entry point in this process
        (tests/clirun.py) for the rest."""
        if not real:
            return kip_in_process(*args)
        return subprocess.run([sys.executable, "-m", "nexus.cli", *args], env=env,
                              capture_output=True, text=True, timeout=120)
    assert kip("space", "create", "one", "--spaces", str(root)).returncode == 0
    assert kip("space", "create", "two", "--spaces", str(root)).returncode == 0
    wrote = kip("exec", "--space", "one", "--spaces", str(root), UPSERT, real=True)
    assert wrote.returncode == 0, wrote.stderr
    one = kip("exec", "--space", "one", "--spaces", str(root), FIND)
    two = kip("exec", "--space", "two", "--spaces", str(root), FIND)
    assert "Ada" in one.stdout and "KIP_3002" in two.stdout
    bad = kip("exec", "--space", "../one", "--spaces", str(root), FIND)
    assert bad.returncode == 2 and "Invalid space name" in bad.stderr


def test_each_space_keeps_its_own_audit_log(spaces_server):
    server = spaces_server("--auto-create", audit=True)
    assert server.kip("a", UPSERT)[0] == 200
    assert server.kip("b", UPSERT.replace("Ada", "Bob"))[0] == 200
    assert server.kip("a", FIND, readonly=True)[0] == 200

    def logged(space: str) -> list[str]:
        status, body = server.request("POST", f"/v1/{space}/kip",
                                      {"method": "list_logs", "params": {"limit": 50}})
        assert status == 200 and "error" not in body, body
        return [entry["command"] for entry in body["result"]]
    in_a, in_b = logged("a"), logged("b")
    assert len(in_a) == 2 and all("Ada" in c for c in in_a), in_a
    assert len(in_b) == 1 and "Bob" in in_b[0], in_b


def test_a_json_rpc_batch_runs_in_its_space(spaces_server):
    server = spaces_server("--auto-create")
    assert server.kip("a", UPSERT)[0] == 200
    batch = [{"jsonrpc": "2.0", "id": 1, "method": "execute_kip_readonly",
              "params": {"command": FIND}},
             {"jsonrpc": "2.0", "id": 2, "method": "execute_kip",
              "params": {"command": UPSERT.replace("Ada", "Cy")}}]
    status, body = server.request("POST", "/v1/a/kip", batch)
    assert status == 200, body
    assert "Ada" in json.dumps(body[0]["result"]) and "error" not in body[1]["result"], body
    assert "Cy" in json.dumps(server.kip("a", FIND.replace("Ada", "Cy"), readonly=True)[1])
