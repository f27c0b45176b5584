"""The clients take a space: `kip shell --space NAME` with `--spaces DIR` or the `--url` of a
spaces server, `kip exec --space NAME --url URL` (and `--spaces DIR`, tests/spaces/
test_spaces_http.py); what one space is sent stays in it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UPSERT = ('UPSERT { CONCEPT ?p { {type: "Person", name: "Ada"} '
          'SET ATTRIBUTES { person_class: "Human" } } }')
FIND = 'FIND(?p.name) WHERE { ?p {type: "Person", name: "Ada"} }'


def _kip(*args: str, script: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("KIP_API_KEY", "KIP_DB")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "nexus.cli", *args], input=script, env=env,
                          capture_output=True, text=True, timeout=120)


def test_shell_and_exec_over_the_url_of_a_spaces_server(spaces_server):
    server = spaces_server()
    for name in ("a", "b"):
        assert server.request("POST", "/v1/admin/spaces", {"name": name})[0] == 200
    url = f"http://{server.host}:{server.port}"
    shell = _kip("shell", "--url", url, "--space", "a", "--json", script=f"{UPSERT}\n{FIND}\n")
    assert shell.returncode == 0, shell.stdout + shell.stderr
    assert "Ada" in shell.stdout.splitlines()[-1]
    found = _kip("exec", "--url", url, "--space", "a", FIND)
    assert found.returncode == 0 and json.loads(found.stdout)["result"], found.stdout
    elsewhere = _kip("exec", "--url", url, "--space", "b", FIND)
    assert json.loads(elsewhere.stdout)["error"]["code"] == "KIP_3002"     # not in b
    missing = _kip("exec", "--url", url, "--space", "c", FIND)
    assert missing.returncode == 1 and "No space" in missing.stdout
    hostile = _kip("exec", "--url", url, "--space", "../a", FIND)
    assert hostile.returncode == 1 and "Invalid space name" in hostile.stdout


def test_shell_on_a_space_of_a_spaces_directory(tmp_path):
    root = str(tmp_path / "d")
    assert _kip("space", "create", "a", "--spaces", root).returncode == 0
    shell = _kip("shell", "--spaces", root, "--space", "a", "--json",
                 script=f"{UPSERT}\n{FIND}\n")
    assert shell.returncode == 0, shell.stdout + shell.stderr
    assert "Ada" in shell.stdout.splitlines()[-1]
    assert "Ada" in _kip("exec", "--spaces", root, "--space", "a", FIND).stdout
    for args, said in ((["--space", "a"], "--space NAME needs"),
                       (["--spaces", root], "--spaces DIR needs --space"),
                       (["--spaces", root, "--space", "nope"], "no space named 'nope'"),
                       (["--spaces", root, "--space", "../a"], "Invalid space name")):
        refused = _kip("shell", *args, script=FIND)
        assert refused.returncode == 2 and said in refused.stderr, refused.stderr
    assert sorted(os.listdir(root)) == [".templates", "a"]
