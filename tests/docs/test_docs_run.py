"""What the README and docs/ show must run: every Python block, every `kip` command line,
and the README's quick start, each against a fresh directory.

* Python blocks (```python) run as a script in an empty directory.
* KIP blocks (```kip) run as KIP commands, in document order, all the blocks of a page in
  one session: a fresh bootstrapped in-memory database per page. Leading comment lines of
  a block may say `// parameters: {json}` (the command's parameters), `// expect: <json>`
  (the result, exactly), `// expect subset: {json}` (keys the result object holds with
  these values) or `// expect error: KIP_xxxx`; without `expect error` the command must
  succeed. ```prolog blocks are illustrations (templates, fragments) and are not run.
* `kip ...` lines of ```sh blocks run with bash in an empty directory that holds the files
  the docs mention (`my-capsules/`, `capsule.kip`) and `KIP_API_KEY` set. A `kip serve`
  line is started, asked one FIND over HTTP and stopped with SIGTERM (exit 0 expected); a
  line with `--url` talks to a server started for it. Ports 8080/9000 in a line are
  replaced by 0 (the server reports the free port it took) or by that server's port, `/var/lib/nexus` by a folder of the test's directory.
* The quick start (the README's first block): `pip install .` is done as the same build
  into a private folder (`pip install --no-deps --target`; the
  dependencies come from this environment), and `kip serve` from there must answer from a
  directory outside the repository — so the wheel carries everything (grammar, capsules);
  the README's library block runs beside that server, in its directory (it must not need
  the server's database); and `from nexus import Nexus` works from the repository root too. The second quick-start
  line, `pip install -e '.[test]' && pytest`, is what `.ci/run` runs.
"""
from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Lines that run the project's own test suites (documented in guarantees.md) are not
# product commands; the test suite runs them.
NOT_PRODUCT = re.compile(r"^\s*(NEXUS_FULL=\S+\s+)?(pytest|python tests/)")
_LISTENING = re.compile(rb"serving .* on http://([^/]+)/kip")
CAPSULE = ('UPSERT { CONCEPT ?w { {type: "$ConceptType", name: "Widget"} '
           'SET ATTRIBUTES { description: "A thing" } } }\n')


def blocks(path: Path, lang: str) -> list[tuple[int, str]]:
    """(line number, text) of the fenced blocks of a language in a markdown file."""
    out, current, start = [], None, 0
    for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if current is None and line.strip() == f"```{lang}":
            current, start = [], no + 1
        elif current is not None and line.strip() == "```":
            out.append((start, "\n".join(current)))
            current = None
        elif current is not None:
            current.append(line)
    return out


def _python_blocks():
    for path in DOCS:
        for no, text in blocks(path, "python"):
            yield pytest.param(text, id=f"{path.name}:{no}")


def _kip_blocks():
    """The `kip` lines of every ```sh block but the README's quick start, block by block:
    a block is a session (later lines use what earlier ones made)."""
    for path in DOCS:
        for i, (no, text) in enumerate(blocks(path, "sh")):
            if path.name == "README.md" and i == 0:
                continue        # the quick start: its own test below
            lines = []
            for line in text.splitlines():
                command = re.sub(r"\s+#.*$", "", line).strip()
                if command and not NOT_PRODUCT.match(command) and "kip " in command:
                    lines.append(command)
            if lines:
                yield pytest.param(lines, id=f"{path.name}:{no}")


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.pop("KIP_API_KEY", None)     # set only for lines that use $KIP_API_KEY
    env.pop("KIP_DB", None)
    env["HOME"] = str(tmp)            # the shell's history file
    return env


def _post(port: int, command: str, key: str | None) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    body = json.dumps({"method": "execute_kip", "params": {"command": command}})
    try:
        conn.request("POST", "/kip", body, headers)
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def _start(argv: str, cwd: Path, env: dict, log: Path) -> tuple[subprocess.Popen, int]:
    with open(log, "wb") as fh:
        # `exec env ...` keeps the server the shell's own process (SIGTERM reaches it) and
        # takes `VAR=value cmd` prefixes as the shell would.
        proc = subprocess.Popen(["bash", "-c", f"exec env {argv}"], cwd=cwd, env=env,
                                stdout=subprocess.DEVNULL, stderr=fh)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = _LISTENING.search(log.read_bytes())
        if m:
            return proc, int(m.group(1).decode().rpartition(":")[2])
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"{argv!r} did not start serving:\n{log.read_text(errors='replace')}")


def _stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise


def _workdir(tmp: Path) -> Path:
    """A directory with what the docs assume exists: a database and a few capsules."""
    from nexus import Nexus
    Nexus.open(str(tmp / "nexus-data")).close()
    (tmp / "my-capsules").mkdir()
    (tmp / "my-capsules" / "widget.kip").write_text(CAPSULE)
    (tmp / "capsule.kip").write_text(CAPSULE)
    return tmp


def _localize(command: str, tmp: Path, port: int) -> str:
    command = re.sub(r"\b(8080|9000)\b", str(port), command)
    return command.replace("/var/lib/nexus", str(tmp / "var-lib-nexus"))


@pytest.mark.parametrize("code", list(_python_blocks()))
def test_python_block_runs(code, tmp_path):
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("lines", list(_kip_blocks()))
def test_kip_block_runs(lines, tmp_path):
    cwd, env = _workdir(tmp_path), _env(tmp_path)
    for command in lines:
        _run_line(command, tmp_path, cwd, env)


def _run_line(command: str, tmp_path: Path, cwd: Path, env: dict) -> None:
    # A server a line starts listens on `--port 0` (the port it took is read from its log),
    # so parallel test processes never race for a port; a `--url` line gets the port of the
    # server started for it.
    serves = re.search(r"\bkip serve\b", command) is not None
    server, port = None, 0
    if not serves and "--url" in command:
        served = f"kip serve --db {tmp_path / 'served'} --port 0"
        key = _key(_localize(command, tmp_path, 0), env)
        if key:
            served += f" --api-key {key}"
        server, port = _start(served, cwd, _line_env(command, env), tmp_path / "url.log")
    try:
        _run_localized(command, _localize(command, tmp_path, port), tmp_path, cwd,
                       _line_env(command, env))
    finally:
        if server is not None:
            _stop(server)


def _line_env(line: str, env: dict) -> dict:
    env = dict(env)
    if "$KIP_API_KEY" in line:
        env["KIP_API_KEY"] = "docs-test-key"
    return env


def _key(line: str, env: dict) -> str | None:
    env = _line_env(line, env)
    m = re.search(r"(?:--api-key\s+|KIP_API_KEY=)(\S+)", line)
    return None if m is None else env.get("KIP_API_KEY", "") if "$KIP_API_KEY" in m.group(1) \
        else m.group(1).strip("'\"")


def _run_localized(command: str, line: str, tmp_path: Path, cwd: Path, env: dict) -> None:
    key = _key(line, env)
    if re.search(r"\bkip serve\b", line):
        if "--port" not in line:
            line = f"{line} --port 0"
        proc, bound = _start(line, cwd, env, tmp_path / "serve.log")
        try:
            answer = _post(bound, 'FIND(?t.name) WHERE { ?t {type: "$ConceptType"} }', key)
        finally:
            code = _stop(proc)
        assert "result" in answer, (command, answer)
        assert code == 0, (tmp_path / "serve.log").read_text(errors="replace")
        return
    for part in line.split(";"):
        proc = subprocess.run(["bash", "-c", part], cwd=cwd, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, (part, proc.stdout[-2000:], proc.stderr[-2000:])


def test_quick_start(tmp_path):
    lines = [re.sub(r"\s+#.*$", "", ln).strip()
             for ln in blocks(ROOT / "README.md", "sh")[0][1].splitlines()]
    venv = "python3 -m venv .venv && . .venv/bin/activate && "
    assert lines == [venv + "pip install . && kip serve",
                     venv + "pip install -e '.[test]' && pytest"]
    assert "pip install -e '.[test]' && pytest" in (ROOT / ".ci" / "run").read_text()
    # pip install . — the same build, into a private folder
    target = tmp_path / "site"
    build = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                            "--target", str(target), str(ROOT)],
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    assert (target / "nexus" / "grammar" / "kip.lark").is_file()
    assert (target / "nexus" / "bundled" / "Genesis.kip").is_file()
    env = _env(tmp_path)
    env["PYTHONPATH"] = str(target)
    fresh = tmp_path / "elsewhere"
    fresh.mkdir()
    # kip serve, from the installed package, in a directory of its own
    proc, bound = _start(f"{sys.executable} -c 'import sys; from nexus.cli import main; "
                         f"sys.exit(main())' serve --port 0", fresh, env,
                         tmp_path / "serve.log")
    try:
        answer = _post(bound, 'FIND(?t.name) WHERE { ?t {type: "$ConceptType"} }', None)
        # the README's library block, next to that server (the first command keeps running
        # in the directory where a reader tries the next block)
        library = blocks(ROOT / "README.md", "python")[0][1]
        beside = subprocess.run([sys.executable, "-c", library], cwd=fresh, env=env,
                                capture_output=True, text=True, timeout=300)
    finally:
        code = _stop(proc)
    assert "$ConceptType" in answer["result"], answer
    assert code == 0
    assert beside.returncode == 0, beside.stderr[-3000:]
    assert (fresh / "nexus-data" / "data.mdb").is_file()
    loaded = subprocess.run([sys.executable, "-c", "import nexus; print(nexus.__file__)"],
                            cwd=fresh, env=env, capture_output=True, text=True)
    assert loaded.stdout.startswith(str(target)), loaded
    # from the repository root, `import nexus` is the source tree: it must work the same
    here = subprocess.run([sys.executable, "-c", "from nexus import Nexus\n"
                           "with Nexus.open(None) as nx:\n"
                           "    print(nx.execute_kip({'command': 'DESCRIBE PRIMER'})['result']"
                           "['identity']['name'])"],
                          cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True,
                          timeout=120)
    assert here.stdout.strip() == "$self", here.stderr[-2000:]


# --- KIP blocks (```kip): one session per page ------------------------------------------------

_DIRECTIVE = re.compile(r"^\s*//\s*(parameters|expect subset|expect error|expect):\s*(.*)$")


def _kip_pages():
    for path in DOCS:
        found = blocks(path, "kip")
        if found:
            yield pytest.param(path, found, id=path.name)


def _directives(text: str) -> dict[str, str]:
    """The `// name: value` lines at the top of a block (the block itself is run as written:
    they are KIP comments)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _DIRECTIVE.match(line)
        if m is None:
            if line.strip().startswith("//"):
                continue
            break
        out[m.group(1)] = m.group(2).strip()
    return out


@pytest.mark.parametrize("path,found", list(_kip_pages()))
def test_kip_examples_run(path, found):
    from nexus import Nexus
    with Nexus.open(None) as nx:
        for no, text in found:
            where = f"{path.name}:{no}"
            said = _directives(text)
            parameters = json.loads(said.get("parameters", "{}"))
            response = nx.execute_kip({"command": text, "parameters": parameters})
            if "expect error" in said:
                assert response.get("error", {}).get("code") == said["expect error"], (
                    where, response)
                continue
            assert "error" not in response, (where, response)
            result = response["result"]
            if "expect" in said:
                assert result == json.loads(said["expect"]), (where, result)
            if "expect subset" in said:
                wanted = json.loads(said["expect subset"])
                assert {k: result.get(k) for k in wanted} == wanted, (where, result)
