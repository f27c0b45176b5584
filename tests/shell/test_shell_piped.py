"""The shell with standard input not a terminal: scripts, pipes, output and exit codes.

The main cases run `python -m nexus.shell` as a real process; the smaller ones call
`nexus.shell.main` in this process with stdin/stdout replaced (same code path, no start-up
cost).
"""
from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from serving import launch  # noqa: E402

KEY = "shell-test-key"


def run_shell(args: list[str], script: str, env_extra: dict | None = None,
              timeout: float = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("KIP_API_KEY", "NO_COLOR")}
    env.update({"COLUMNS": "100", **(env_extra or {})})
    return subprocess.run([sys.executable, "-m", "nexus.shell", *args], input=script,
                          capture_output=True, text=True, env=env, timeout=timeout)


def run_inproc(args: list[str], script: str, monkeypatch, capsys) -> tuple[int, str]:
    from nexus.shell import main
    monkeypatch.setattr("sys.stdin", io.StringIO(script))
    monkeypatch.setenv("COLUMNS", "100")
    code = main(args)
    return code, capsys.readouterr().out


SCRIPT = """\
// A script: comments, commands over several lines, `;` and :commands.
FIND(?w.name, ?w.attributes.size)
WHERE { ?w {type: "Widget"} FILTER(?w.attributes.size >= 3) }
ORDER BY ?w.attributes.size DESC

:param who "w1"
FIND(?w) WHERE { ?w {name: :who} };
FIND(COUNT(?w)) WHERE { ?w {type: "Widget"} }
"""


def test_piped_script_prints_plain_tables_and_exits_0(db_args):
    proc = run_shell(db_args, SCRIPT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "\x1b[" not in out                                  # no colour when piped
    assert (" ?w.name | ?w.attributes.size\n"
            "---------+--------------------\n"
            " w4      |                  4\n"
            " w3      |                  3\n"
            "(2 rows)\n") in out
    assert ':who = "w1"\n' in out
    assert '\nWidget "w1"\n  attributes:\n    size: 1\n' in out
    assert " COUNT(?w)\n-----------\n         5\n(1 row)\n" in out
    assert " ms)" not in out                                   # no timing unless asked


def test_piped_stops_at_the_first_error_with_exit_1(db_args):
    script = ('FIND(?w.name) WHERE { ?w {name: "w0"} }\n'
              'FIND(?w.name) WHERE { ?w {type: "Widget"} FILTER(?w.size = 1) }\n'
              'FIND(?w.name) WHERE { ?w {name: "w2"} }\n')
    proc = run_shell(db_args, script)
    assert proc.returncode == 1
    out = proc.stdout
    assert " w0\n(1 row)" in out
    assert "KIP_1001 InvalidSyntax" in out
    assert "hint:" in out
    assert re.search(r"\n    .*FILTER\(\?w\.size = 1\) }\n +\^\n", out)   # snippet and caret
    assert "w2" not in out                                     # never ran


def test_piped_kml_and_load(db_args, tmp_path):
    capsule = tmp_path / "more.kip"
    capsule.write_text('UPSERT { CONCEPT { {type: "Widget", name: "w7"} '
                       'SET ATTRIBUTES { size: 7 } } }\n')
    script = (f'UPSERT {{ CONCEPT ?m {{ {{type: "Maker", name: "acme"}} }}\n'
              f'  CONCEPT ?w {{ {{type: "Widget", name: "w0"}}\n'
              f'    SET PROPOSITIONS {{ ("made_by", ?m) }} }} }}\n'
              f'WITH METADATA {{ source: "test" }}\n'
              f':load {capsule}\n'
              f'FIND(?w.name, ?m.name) WHERE {{ ?w {{type: "Widget"}} (?w, "made_by", ?m) }}\n'
              f'FIND(?w.attributes.size) WHERE {{ ?w {{name: "w7"}} }}\n')
    proc = run_shell(db_args, script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert re.search(r"UPSERT: 2 concepts \(C:\d+, C:\d+\)\n", out)
    assert re.search(r"Loaded .*more\.kip: 1 concept", out)
    assert " w0      | acme\n(1 row)" in out
    assert " ?w.attributes.size\n--------------------\n                  7\n" in out


def test_piped_json_mode_prints_one_response_per_line(db_args, monkeypatch, capsys):
    code, out = run_inproc(db_args + ["--json"],
                           'FIND(?w.name) WHERE { ?w {type: "Widget"} } LIMIT 2\n'
                           'FIND(?w.name) WHERE { ?w {name: "w4"} }\n', monkeypatch, capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith('{"result": ["w0", "w1"], "next_cursor": "')
    assert lines[1] == '{"result": ["w4"]}'


def test_piped_cursor_is_reported_not_followed(db_args, monkeypatch, capsys):
    code, out = run_inproc(db_args, 'FIND(?w.name) WHERE { ?w {type: "Widget"} } LIMIT 3\n',
                           monkeypatch, capsys)
    assert code == 0
    assert re.search(r'\(3 rows\)\n-- more rows: CURSOR "[^"]+"\n$', out)


def test_piped_readonly_refuses_writes(db_args, monkeypatch, capsys):
    code, out = run_inproc(db_args + ["--readonly"],
                           'UPSERT { CONCEPT { {type: "Widget", name: "x"} } }\n',
                           monkeypatch, capsys)
    assert code == 1
    assert "execute_kip_readonly cannot run KML" in out


def test_unknown_meta_command_is_an_error(db_args, monkeypatch, capsys):
    code, out = run_inproc(db_args, ':frobnicate\nFIND(?w) WHERE { ?w {name: "w0"} }\n',
                           monkeypatch, capsys)
    assert code == 1
    assert "Unknown command :frobnicate" in out
    assert "w0" not in out


def test_timing_and_colour_can_be_forced(db_args, monkeypatch, capsys):
    code, out = run_inproc(db_args + ["--timing", "on", "--color", "always"],
                           'FIND(?w.name) WHERE { ?w {name: "w0"} }\nFIND(?w) WHERE {}\n',
                           monkeypatch, capsys)
    assert code == 1
    assert re.search(r"\(1 row, [\d.]+ ms\)", out)
    assert re.search(r"\x1b\[1;31mKIP_3001 ReferenceError\x1b\[0m: Unbound", out)


def test_empty_input_exits_0(db_args, monkeypatch, capsys):
    assert run_inproc(db_args, "", monkeypatch, capsys)[0] == 0
    assert run_inproc(db_args, "// nothing but a comment\n\n", monkeypatch, capsys)[0] == 0


def test_cannot_open_exits_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    proc = run_shell(["--db", str(blocker / "db")], "")
    assert proc.returncode == 2
    assert "cannot open" in proc.stderr


# --- against a running `kip serve` --------------------------------------------------------

@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    """`kip serve` on a free loopback port, with an API key."""
    db = tmp_path_factory.mktemp("srv") / "db"
    env = {k: v for k, v in os.environ.items() if k != "KIP_API_KEY"}
    proc, host, port = launch(db, [], log=db.parent / "server.log", env=env, key=KEY)
    try:
        yield f"http://{host}:{port}"
    finally:
        proc.terminate()
        proc.wait(30)


def test_piped_over_http(server_url, tmp_path):
    capsule = tmp_path / "remote.kip"
    capsule.write_text('UPSERT { CONCEPT ?t { {type: "$ConceptType", name: "Remote"} } }\n'
                       'UPSERT { CONCEPT { {type: "Remote", name: "r1"} } '
                       'CONCEPT { {type: "Remote", name: "r2"} } }\n')
    script = (f":load {capsule}\n"
              'FIND(?r.name) WHERE { ?r {type: "Remote"} } LIMIT 1\n'
              'FIND(?r.name) WHERE { ?r {type: "Nope", name: "x"} }\n')
    proc = run_shell(["--url", server_url, "--api-key", KEY], script)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert re.search(r"Loaded .*remote\.kip: 2 statements, 3 concepts", out)
    assert re.search(r" r1\n\(1 row\)\n-- more rows: CURSOR ", out)
    assert "KIP_3002 NotFound" in out


def test_http_key_from_environment_and_wrong_key(server_url):
    ok = run_shell(["--url", server_url], 'FIND(COUNT(?r)) WHERE { ?r {type: "Person"} }\n',
                   env_extra={"KIP_API_KEY": KEY})
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = run_shell(["--url", server_url, "--api-key", "wrong"],
                    'FIND(COUNT(?r)) WHERE { ?r {type: "Person"} }\n')
    assert bad.returncode == 1
    assert re.search(r"(Unauthorized|KIP_\d{4})", bad.stdout)


def test_http_server_not_running(tmp_path):
    proc = run_shell(["--url", "http://127.0.0.1:9"], 'FIND(?x) WHERE { ?x {name: "a"} }\n')
    assert proc.returncode == 1
    assert "SHELL ConnectionError" in proc.stdout


def test_piped_links_by_name_ids_on_request_and_shell_words(db_args, monkeypatch, capsys):
    script = ('UPSERT { CONCEPT ?m { {type: "Maker", name: "acme"} }\n'
              '  CONCEPT { {type: "Widget", name: "w3"} SET PROPOSITIONS { ("made_by", ?m) } } }\n'
              'FIND(?l) WHERE { ?l (?w, "made_by", ?m) }\n'
              'help\n'
              'quit\n'
              'FIND(?w.name) WHERE { ?w {name: "w4"} }\n')
    code, out = run_inproc(db_args, script, monkeypatch, capsys)
    assert code == 0
    assert "\nw3 —made_by→ acme\n" in out
    assert "Shell commands\n" in out
    assert " w4\n" not in out                                    # `quit` ended the script
    code, out = run_inproc(db_args + ["--ids"], 'FIND(?w) WHERE { ?w {name: "w1"} }\n'
                           'FIND(?w) WHERE { ?w {type: "Widget"} } LIMIT 2\n', monkeypatch,
                           capsys)
    assert code == 0
    assert re.match(r'Widget "w1"  \[C:\d+\]\n', out)
    assert re.search(r" id +\| name \| type   \| size\n.*\n C:\d+ +\| w0   \| Widget \|    0\n",
                     out)
