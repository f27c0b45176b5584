"""Progress of long CLI work: `kip load`, `kip reindex`, `kip export`, `kip check` and the
bootstrap (or upgrade) of a database. At a terminal (a real pseudo-terminal here) a bar
drawn by tqdm; otherwise a line of counts when a phase starts, every few seconds, and when
it ends. Plus the engine's callbacks behind them (`Nexus.open(progress=…)`,
`Nexus.export_lines(progress=…)`).
"""
from __future__ import annotations

import json
import os
import re
import sys

import pexpect
import pytest

from nexus import Nexus

from .conftest import run_kip

CAPSULE = "".join(f'UPSERT {{ CONCEPT {{ {{type: "Gadget", name: "g{i}"}} }} }}\n'
                  for i in range(40))
TYPE_DEF = 'UPSERT { CONCEPT ?t { {type: "$ConceptType", name: "Gadget"} } }\n'


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    root = tmp_path_factory.mktemp("progress")
    (root / "gadgets.kip").write_text(TYPE_DEF + CAPSULE)
    proc = run_kip("load", "--db", str(root / "db"), str(root / "gadgets.kip"))
    assert proc.returncode == 0, proc.stderr
    return root / "db"


def _pty(*args: str, cwd: str | None = None) -> str:
    """`kip ARGS` in a pseudo-terminal; its whole output, once it has exited with 0."""
    env = {k: v for k, v in os.environ.items() if k not in ("KIP_API_KEY", "KIP_DB")}
    env["TERM"] = "xterm"
    child = pexpect.spawn(sys.executable, ["-m", "nexus.cli", *args], env=env, cwd=cwd,
                          dimensions=(40, 120), encoding="utf-8", timeout=120)
    out = child.read()
    child.close()
    assert child.exitstatus == 0, out
    return out.replace("\r\n", "\n")


# --- not a terminal: lines of counts --------------------------------------------------------

def test_load_reports_counts_when_stderr_is_not_a_terminal(tmp_path):
    capsule = tmp_path / "gadgets.kip"
    capsule.write_text(TYPE_DEF + CAPSULE)
    proc = run_kip("load", "--db", str(tmp_path / "db"), str(capsule))
    assert proc.returncode == 0, proc.stderr
    size = len(capsule.read_bytes())
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("kip load:")]
    assert re.fullmatch(rf"kip load: gadgets\.kip: {size / 1024:.1f} KB of {size / 1024:.1f} KB "
                        r"\(100%\)(, done in [\d.]+ s)?", lines[-1]), proc.stderr
    assert lines[-1].endswith(" s")
    assert "\r" not in proc.stderr                     # no bar redrawn in a log
    assert json.loads(proc.stdout)[0]["concepts_created"] == 41


def test_reindex_export_and_check_report_their_phases(db, tmp_path):
    proc = run_kip("reindex", "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    phases = re.findall(r"^kip reindex: (\w+): .*done in", proc.stderr, re.M)
    # (the default embedder: its typo candidates' postings, no n-gram vectors)
    assert phases[:2] == ["clear", "lexical"] and phases[-1] == "grams", proc.stderr
    out = tmp_path / "out.kip"
    proc = run_kip("export", "--db", str(db), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"^kip export: elements: (\d+) of (\d+) elements \(100%\), done in",
                  proc.stderr, re.M)
    assert m and m.group(1) == m.group(2) and int(m.group(1)) >= 41, proc.stderr
    assert out.read_text().count('{type: "Gadget", name: "g') == 40
    proc = run_kip("check", "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^kip check: verifying: 1 of 1 \(100%\), done in [\d.]+ s$",
                     proc.stderr, re.M), proc.stderr
    proc = run_kip("export", "--db", str(db))                  # to stdout: progress apart
    assert proc.stdout.startswith("// nexus ") and "kip export" not in proc.stdout


# --- a terminal: tqdm bars ---------------------------------------------------------------------

def test_bars_at_a_terminal(db, tmp_path):
    capsule = tmp_path / "more.kip"
    capsule.write_text(CAPSULE.replace('"g', '"h'))
    out = _pty("load", "--db", str(db), str(capsule))
    assert re.search(r"kip load more\.kip: 100%\|[^|]*\| [\d.]+k?/[\d.]+k? ", out), out
    out = _pty("reindex", "--db", str(db))
    for phase in ("clear", "lexical", "grams"):      # (the default embedder: no vectors)
        assert re.search(rf"kip reindex {phase}: 100%\|", out), out
    out = _pty("export", "--db", str(db), "-o", str(tmp_path / "x.kip"))
    assert re.search(r"kip export elements: 100%\|[^|]*\| (\d+)/\1 .*elements/s", out), out
    out = _pty("check", "--db", str(db))
    assert re.search(r"kip check verifying: 100%\|[^|]*\| 1/1 ", out), out


# --- the engine's callbacks ----------------------------------------------------------------------

def test_bootstrap_and_upgrade_call_progress(tmp_path):
    calls: list[tuple] = []
    path = str(tmp_path / "db")
    os.makedirs(path)
    with Nexus.open(path, bootstrap=False):
        pass
    with Nexus.open(path, progress=lambda *a: calls.append(a)):      # the upgrade
        pass
    names = [c[0] for c in calls]
    assert names[0] == "Genesis.kip" and names[-1] == "persons/self.kip"
    total = calls[0][2]
    assert [c[1] for c in calls] == list(range(total)) + [total]
    assert all(c[2] == total for c in calls)
    calls.clear()
    with Nexus.open(path, progress=lambda *a: calls.append(a)):      # nothing to apply
        pass
    assert calls == []


def test_export_lines_calls_progress():
    with Nexus.open(None) as nx:
        nx.execute_kip({"command": TYPE_DEF + CAPSULE})
        calls: list[tuple] = []
        text = "".join(nx.export_lines(progress=lambda *a: calls.append(a)))
        assert calls[0] == ("elements", 0, calls[-1][2])
        assert calls[-1][1] == calls[-1][2] >= 41
        # (the same capsule, but for the time stamp in its first line)
        assert text.split("\n", 1)[1] == nx.export_text().split("\n", 1)[1]
