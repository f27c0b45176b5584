"""Fixtures for the HTTP server tests: `kip serve` runs as a real subprocess on a free
loopback port (`--port 0`; the port is read from the line the server prints when it
listens) and is driven over HTTP with the standard library only."""
from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from serving import launch  # noqa: E402

KEY = "s3cret-test-key"
SLOW_ITEMS = 600      # Item concepts in the `slow` database: a self-join takes 0.3–0.6 s here (2026-11)


class Server:
    """A running `kip serve` process and small HTTP helpers."""

    def __init__(self, proc: subprocess.Popen, host: str, port: int, key: str | None,
                 log: Path, db: Path) -> None:
        self.proc, self.host, self.port, self.key, self.log, self.db = \
            proc, host, port, key, log, db

    # --- HTTP ------------------------------------------------------------------------------
    def connect(self, timeout: float = 30) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, verb: str, path: str, body: bytes | None = None,
                headers: dict | None = None, timeout: float = 30
                ) -> tuple[int, Any, dict]:
        conn = self.connect(timeout)
        try:
            conn.request(verb, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            raw = resp.read()
            data = json.loads(raw) if raw else None
            return resp.status, data, {k.lower(): v for k, v in resp.getheaders()}
        finally:
            conn.close()

    def post(self, payload: Any, key: str | None | bool = True, raw: bytes | None = None,
             timeout: float = 30, headers: dict | None = None) -> tuple[int, Any]:
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        use = self.key if key is True else key
        if use:
            hdrs["Authorization"] = f"Bearer {use}"
        body = raw if raw is not None else json.dumps(payload).encode()
        status, data, _ = self.request("POST", "/kip", body, hdrs, timeout)
        return status, data

    def call(self, method: str, params: Any = None, **kw: Any) -> tuple[int, Any]:
        payload = {"method": method}
        if params is not None:
            payload["params"] = params
        return self.post(payload, **kw)

    def kip(self, command: str, parameters: dict | None = None, readonly: bool = False,
            **kw: Any) -> tuple[int, Any]:
        params: dict = {"command": command}
        if parameters:
            params["parameters"] = parameters
        return self.call("execute_kip_readonly" if readonly else "execute_kip", params, **kw)

    # --- process ---------------------------------------------------------------------------
    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        """Signal the server and return its exit status (killed if it hangs)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise

    def log_lines(self) -> list[dict]:
        out = []
        for line in self.log.read_bytes().splitlines():
            if line.startswith(b"{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out


def start_server(db: Path, *args: str, key: str | None = KEY, env: dict | None = None,
                 wait: float = 60) -> Server:
    log = db.parent / f"{db.name}-server-{time.monotonic_ns()}.log"
    full_env = {k: v for k, v in os.environ.items() if k != "KIP_API_KEY"}
    full_env.update(env or {})
    proc, host, port = launch(db, list(args), log=log, env=full_env, key=key, wait=wait)
    return Server(proc, host, port, key, log, db)


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """A bootstrapped database served with an API key and a 1 MiB body limit (one process
    for the whole session: tests use their own names so they do not depend on order)."""
    db = tmp_path_factory.mktemp("srv") / "db"
    srv = start_server(db, "--max-body", str(1024 * 1024))
    yield srv
    srv.stop()


def make_slow_db(db: Path, items: int = SLOW_ITEMS) -> None:
    """A database with `items` concepts of type Item (for slow self-join queries)."""
    from nexus.api import Nexus
    from nexus.ops.bulk_import import bulk_import
    with Nexus.open(str(db)) as nx:
        r = nx.execute_kip({"command": 'UPSERT { CONCEPT ?t { {type: "$ConceptType", '
                            'name: "Item"} SET ATTRIBUTES {description: "test item"} } }'})
        assert "result" in r, r
        bulk_import(nx, [{"type": "Item", "name": f"i{i}", "attributes": {"k": i}}
                         for i in range(items)])


# A self-join with an inequality: quadratic work whatever the planner does.
SLOW_QUERY = ('FIND(COUNT(?a)) WHERE { ?a {type: "Item"} ?b {type: "Item"} '
              'FILTER(?a.attributes.k < ?b.attributes.k) }')
SLOW_RESULT = SLOW_ITEMS * (SLOW_ITEMS - 1) // 2


class SlowDb:
    """The `slow` database and how long SLOW_QUERY takes on it here (tests scale their
    timeouts and sleeps by it, so they hold on slow and fast machines alike)."""

    def __init__(self, path: Path, seconds: float) -> None:
        self.path, self.seconds = path, seconds


@pytest.fixture(scope="session")
def slow_db(tmp_path_factory):
    from nexus.api import Nexus
    db = tmp_path_factory.mktemp("slow") / "db"
    make_slow_db(db)
    with Nexus.open(str(db), bootstrap=False) as nx:
        started = time.monotonic()
        assert nx.execute_kip_readonly({"command": SLOW_QUERY}) == {"result": SLOW_RESULT}
        seconds = time.monotonic() - started
    assert seconds > 0.2, f"SLOW_QUERY took only {seconds:.3f} s: raise SLOW_ITEMS"
    return SlowDb(db, seconds)
