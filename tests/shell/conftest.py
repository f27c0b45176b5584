"""Fixtures for the shell tests: a small database, and the real shell in a pseudo-terminal.

`shell_db` is a bootstrapped database that also holds the types `Widget` and `Maker`, the
predicate `made_by`, and five widgets `w0`…`w4` with `attributes.size` = 0…4 (written once
per session with KML, then copied for each test).

`spawn_shell(...)` starts `python -m nexus.shell` in a pty (pexpect) with its history file
and HOME in the test's tmp dir and colour off, and returns a `Term`: `expect()` matches
against the output with ANSI escape sequences removed, so prompt_toolkit's redraws do not
get in the way of matching. `spawn_shell("--url", url, db=False)` leaves out `--db`;
`served_shell_db` is a `kip serve` (no API key) over a copy of the test database.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import time
from pathlib import Path

import pexpect
import pytest

from nexus.api import Nexus

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from serving import launch  # noqa: E402

TIMEOUT = 30          # seconds per expectation: generous for a slow 2-core VM
WIDGETS = [f"w{i}" for i in range(5)]

# ---------------------------------------------------------------------------------------
# The database
# ---------------------------------------------------------------------------------------


_SCHEMA_KML = """
UPSERT {
  CONCEPT ?widget { {type: "$ConceptType", name: "Widget"} }
  CONCEPT ?maker { {type: "$ConceptType", name: "Maker"} }
  CONCEPT ?made_by { {type: "$PropositionType", name: "made_by"} }
}
"""


def make_db(path: str) -> None:
    """Create the (bootstrapped) test database at `path`."""
    with Nexus.open(path) as nx:
        response = nx.execute_kip({"command": _SCHEMA_KML})
        assert "error" not in response, response
        widgets = " ".join(
            f'CONCEPT {{ {{type: "Widget", name: "{n}"}} SET ATTRIBUTES {{ size: {i} }} }}'
            for i, n in enumerate(WIDGETS))
        response = nx.execute_kip({"command": f"UPSERT {{ {widgets} }}"})
        assert "error" not in response, response


@pytest.fixture(scope="session")
def _template_db(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("template") / "db")
    make_db(path)
    return path


@pytest.fixture
def shell_db(tmp_path, _template_db) -> str:
    """A fresh copy of the test database for one test."""
    dst = str(tmp_path / "db")
    shutil.copytree(_template_db, dst)
    return dst


@pytest.fixture
def db_args(shell_db) -> list[str]:
    return ["--db", shell_db]


# ---------------------------------------------------------------------------------------
# The shell in a pty
# ---------------------------------------------------------------------------------------

_ESCAPES = re.compile(r"\x1b\[(\d*)C|\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[=>()][0-9A-Za-z]?"
                      r"|[\x00-\x08\x0b-\x1f\x7f]")


def strip_ansi(text: str) -> str:
    """Terminal output as plain text: escapes removed (cursor-forward becomes spaces)."""
    def sub(m: re.Match) -> str:
        if m.group(1) is not None:
            return " " * int(m.group(1) or 1)
        return ""
    return _ESCAPES.sub(sub, text.replace("\r\n", "\n"))


class Term:
    """A pexpect child whose output is matched with ANSI escapes stripped."""

    def __init__(self, child: pexpect.spawn) -> None:
        self.child = child
        self.raw = ""
        self.pos = 0          # in the stripped text: where the next search starts
        self.eof = False

    @property
    def text(self) -> str:
        return strip_ansi(self.raw)

    def _read(self, timeout: float) -> None:
        try:
            self.raw += self.child.read_nonblocking(65536, timeout=timeout)
        except pexpect.TIMEOUT:
            pass
        except pexpect.EOF:
            self.eof = True

    def expect(self, pattern: str, timeout: float = TIMEOUT) -> re.Match:
        """Wait for `pattern` (a regex) after the previous match; return the match."""
        regex = re.compile(pattern, re.S)
        deadline = time.monotonic() + timeout
        while True:
            text = self.text
            m = regex.search(text, self.pos)
            if m:
                self.pos = m.end()
                return m
            if self.eof or time.monotonic() > deadline:
                raise AssertionError(f"did not see {pattern!r}; output after the last match:"
                                     f"\n{text[self.pos:][-3000:]}")
            self._read(0.2)

    def prompt(self) -> None:
        self.expect(r"kip(\(ro\))?>")

    def complete(self, typed: str, echo: str, inserted: str) -> None:
        """Type `typed`, wait for its `echo` (a regex) on the screen, press Tab and wait for
        the completion to show `inserted` (a regex). Waiting matters: prompt_toolkit drops a
        completion when more keys arrive while it is computing it."""
        self.send(typed)
        self.expect(echo)
        self.send("\t")
        self.expect(inserted)

    def send(self, text: str) -> None:
        self.child.send(text)

    def line(self, text: str) -> None:
        """Type `text` and press Enter (\r, as a terminal sends it)."""
        self.child.send(text + "\r")

    def wait_exit(self, timeout: float = TIMEOUT) -> int:
        deadline = time.monotonic() + timeout
        while not self.eof and time.monotonic() < deadline:
            self._read(0.2)
        self.child.close()
        return self.child.exitstatus if self.child.exitstatus is not None else -1

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)


@pytest.fixture
def shell_env(tmp_path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "TERM": "xterm",
        "PROMPT_TOOLKIT_NO_CPR": "1",        # nobody answers cursor-position requests
        "NO_COLOR": "1",
        "HOME": str(tmp_path / "home"),
        "KIP_HISTORY_FILE": str(tmp_path / "history"),
    })
    for name in ("KIP_API_KEY", "COLUMNS", "LINES", "XDG_STATE_HOME"):
        env.pop(name, None)
    os.makedirs(env["HOME"], exist_ok=True)
    return env


@pytest.fixture
def spawn_shell(shell_env, db_args):
    children: list[Term] = []

    def spawn(*extra: str, rows: int = 50, cols: int = 160, db: bool = True,
              cwd: str | None = None, args: list[str] | None = None) -> Term:
        argv = list(args) if args is not None else [*(db_args if db else []), *extra]
        child = pexpect.spawn(sys.executable, ["-m", "nexus.shell", *argv],
                              env=shell_env, dimensions=(rows, cols), encoding="utf-8",
                              codec_errors="replace", timeout=TIMEOUT, cwd=cwd)
        term = Term(child)
        children.append(term)
        term.prompt()
        return term

    yield spawn
    for term in children:
        term.close()


@pytest.fixture
def served_shell_db(tmp_path, _template_db):
    """`kip serve` over a copy of the test database; yields its URL."""
    db = tmp_path / "served"
    shutil.copytree(_template_db, db)
    env = {k: v for k, v in os.environ.items() if k != "KIP_API_KEY"}
    proc, host, port = launch(db, [], log=tmp_path / "serve.log", env=env)
    try:
        yield f"http://{host}:{port}"
    finally:
        proc.terminate()
        proc.wait(30)
