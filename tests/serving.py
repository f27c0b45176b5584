"""Starting a real `kip serve` subprocess for the tests that talk HTTP to it (tests/server,
tests/shell, tests/reliability, tests/spaces, bench/spaces.py): `--port 0` picks a free
loopback port, which is read from the line the server prints when it listens (`... on
http://HOST:PORT/kip`, or `/v1/{space}/kip` with `--spaces`); the server counts as up once
`/healthz` answers. Standard library only, so the stand-alone scripts can use it too.
"""
from __future__ import annotations

import http.client
import re
import subprocess
import sys
import time
from pathlib import Path

_LISTENING = re.compile(rb"serving .* on http://([^/]+)/(?:kip|v1/\{space\}/kip)\n")


def launch(db: Path | None, args: list[str], *, log: Path, env: dict[str, str],
           key: str | None = None, wait: float = 60.0, spaces: Path | None = None
           ) -> tuple[subprocess.Popen, str, int]:
    """Run `kip serve --db DB --port 0 ARGS [--api-key KEY]` (`--spaces SPACES` instead of
    `--db` when given) with stderr to `log`; return (process, host, port) once it answers,
    or kill it and raise RuntimeError with its log."""
    where = ["--spaces", str(spaces)] if spaces is not None else ["--db", str(db)]
    cmd = [sys.executable, "-m", "nexus.cli", "serve", *where, "--port", "0", *args]
    if key:
        cmd += ["--api-key", key]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=fh, env=env)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        m = _LISTENING.search(log.read_bytes())
        if m:
            host, _, port = m.group(1).decode().rpartition(":")
            host = host.strip("[]")
            while time.monotonic() < deadline:
                if _healthy(host, int(port)):
                    return proc, host, int(port)
                time.sleep(0.05)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"kip serve did not start: {log.read_text(errors='replace')}")


def _healthy(host: str, port: int) -> bool:
    conn = http.client.HTTPConnection(host, port, timeout=5)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()
