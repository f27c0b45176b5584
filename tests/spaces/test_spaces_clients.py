"""The clients take a space: `kip shell --space NAME` with `--spaces DIR` or the `--url` of a
spaces server, `kip exec --space NAME --url URL` (and `--spaces DIR`, tests/spaces/
test_spaces_http.py); what one space is sent stays in it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clirun import kip_in_process  # tests/clirun.py (tests/ is on the path)

REPO = Path(__file__).resolve().parents[2]
UPSERT = ('UPSERT { CONCEPT ?p { {type: "Person", name: "Ada"} '
          'SET ATTRIBUTES { person_class: "Human" } } }')
FIND = 'FIND(?p.name) WHERE { ?p {type: "Person", name: "Ada"} }'


def _kip(*args: str, script: str | None = None, real: bool = False
         ) -> subprocess.CompletedProcess:
    """`kip ARGS`: a real `python -m nexus.cli` process when `real` (at least one of each
    command per test), else the same entry point in this process (tests/clirun.py)."""
    if not real:
        return kip_in_process(*args, input=script, drop_env=("KIP_API_KEY", "KIP_DB"))
    env = {k: v for k, v in os.environ.items() if k not in ("KIP_API_KEY", "KIP_DB")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "nexus.cli", *args], input=script, env=env,
                          capture_output=True, text=True, timeout=120)


def test_shell_and_exec_over_the_url_of_a_spaces_server(spaces_server):
    server = spaces_server()
    for name in ("a", "b"):
        assert server.request("POST", "/v1/admin/spaces", {"name": name})[0] == 200
    url = f"http://{server.host}:{server.port}"
    shell = _kip("shell", "--url", url, "--space", "a", "--json", script=f"{UPSERT}\n{FIND}\n",
                 real=True)
    assert shell.returncode == 0, shell.stdout + shell.stderr
    assert "Ada" in shell.stdout.splitlines()[-1]
    found = _kip("exec", "--url", url, "--space", "a", FIND, real=True)
    assert found.returncode == 0 and json.loads(found.stdout)["result"], found.stdout
    elsewhere = _kip("exec", "--url", url, "--space", "b", FIND)
    assert json.loads(elsewhere.stdout)["error"]["code"] == "KIP_3002"     # not in b
    missing = _kip("exec", "--url", url, "--space", "c", FIND)
    assert missing.returncode == 1 and "No space" in missing.stdout
    hostile = _kip("exec", "--url", url, "--space", "../a", FIND)
    assert hostile.returncode == 1 and "Invalid space name" in hostile.stdout


@pytest.mark.slow
def test_shell_on_a_space_of_a_spaces_directory(tmp_path):
    root = str(tmp_path / "d")
    assert _kip("space", "create", "a", "--spaces", root).returncode == 0
    shell = _kip("shell", "--spaces", root, "--space", "a", "--json",
                 script=f"{UPSERT}\n{FIND}\n", real=True)
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


# --- kip load / export / check take a space (issue 22): --url of a spaces server, --spaces --

CAPSULE = f"{UPSERT}\n{UPSERT.replace('Ada', 'Bob')}\n"


def _elements(capsule: str) -> set[str]:
    """The `{type, name}` of the elements a capsule names (definitions, concepts, link ends)."""
    import re
    return set(re.findall(r'\{type: "[^"]*", name: "[^"]*"\}', capsule))


def test_load_export_and_check_over_the_url_of_a_spaces_server(spaces_server, tmp_path):
    server = spaces_server()
    for name in ("a", "b"):
        assert server.request("POST", "/v1/admin/spaces", {"name": name})[0] == 200
    url = f"http://{server.host}:{server.port}"
    capsule = tmp_path / "people.kip"
    capsule.write_text(CAPSULE)
    loaded = _kip("load", "--url", url, "--space", "a", str(capsule), real=True)
    assert loaded.returncode == 0, loaded.stderr
    assert json.loads(loaded.stdout)[0]["statements"] == 2
    found = _kip("exec", "--url", url, "--space", "a",
                 'FIND(?p.name) WHERE { ?p {type: "Person", name: "Bob"} }')
    assert json.loads(found.stdout)["result"] == ["Bob"]
    assert "KIP_3002" in _kip("exec", "--url", url, "--space", "b", FIND).stdout   # not in b

    # A failing command stops its file; over HTTP the commands before it stay applied.
    bad = tmp_path / "bad.kip"
    bad.write_text(UPSERT.replace("Ada", "Cy") + '\nUPSERT { CONCEPT ?x { {type: "Nope", '
                   'name: "x"} } }\n')
    failed = _kip("load", "--url", url, "--space", "b", str(bad))
    assert failed.returncode == 1
    report = json.loads(failed.stdout)[0]
    assert report["statements"] == 1 and report["error"]["code"] == "KIP_2001", report
    assert "stopped after 1 command(s)" in failed.stderr

    # export: the whole graph by EXPORT, loadable into a new database
    out = tmp_path / "a.kip"
    exported = _kip("export", "--url", url, "--space", "a", "-o", str(out), real=True)
    assert exported.returncode == 0, exported.stderr
    over_http = out.read_text()
    assert '{type: "Person", name: "Bob"}' in over_http
    copy = str(tmp_path / "copy")
    assert _kip("load", "--db", copy, str(out)).returncode == 0
    assert "Ada" in _kip("exec", "--db", copy, FIND).stdout

    refused = _kip("check", "--url", url, "--space", "a")
    assert refused.returncode == 2 and "check cannot run over --url" in refused.stderr
    assert "--spaces DIR" in refused.stderr
    domain = _kip("export", "--url", url, "--space", "a", "--domain", "CoreSchema")
    assert domain.returncode == 2 and "EXPORT ?x WHERE" in domain.stderr
    privileged = _kip("load", "--url", url, "--space", "a", "--privileged", str(capsule))
    assert privileged.returncode == 2 and "--privileged" in privileged.stderr

    # The same elements as the export of the space's own database (once the server let go).
    server.proc.terminate()
    server.proc.wait(30)
    local = _kip("export", "--spaces", str(server.root), "--space", "a")
    assert local.returncode == 0, local.stderr
    assert _elements(local.stdout) == _elements(over_http)


def test_load_export_and_check_a_space_of_a_spaces_directory(tmp_path):
    root = str(tmp_path / "d")
    assert _kip("space", "create", "a", "--spaces", root, real=True).returncode == 0
    capsule = tmp_path / "people.kip"
    capsule.write_text(CAPSULE)
    assert _kip("load", "--spaces", root, "--space", "a", str(capsule)).returncode == 0
    exported = _kip("export", "--spaces", root, "--space", "a")
    assert '{type: "Person", name: "Bob"}' in exported.stdout
    checked = _kip("check", "--spaces", root, "--space", "a", real=True)
    assert checked.returncode == 0 and json.loads(checked.stdout)["ok"], checked.stderr
    for command in (["load", str(capsule)], ["export"], ["check"]):
        missing = _kip(*command, "--spaces", root, "--space", "nope")
        assert missing.returncode == 2 and "no space named 'nope'" in missing.stderr
        assert not os.path.exists(os.path.join(root, "nope"))
