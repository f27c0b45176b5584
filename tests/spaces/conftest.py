"""A real `kip serve --spaces DIR` subprocess on a free loopback port, driven over HTTP."""
from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
from serving import launch  # noqa: E402


class SpacesServer:
    def __init__(self, proc: subprocess.Popen, host: str, port: int, root: Path) -> None:
        self.proc, self.host, self.port, self.root = proc, host, port, root

    def request(self, verb: str, path: str, payload: Any = None,
                key: str | None = None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        try:
            body = None if payload is None else json.dumps(payload).encode()
            conn.request(verb, path, body=body, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else None)
        finally:
            conn.close()

    def kip(self, space: str, command: str, *, readonly: bool = False,
            key: str | None = None) -> tuple[int, Any]:
        method = "execute_kip_readonly" if readonly else "execute_kip"
        return self.request("POST", f"/v1/{space}/kip",
                            {"method": method, "params": {"command": command}}, key)


def start(root: Path, *args: str, wait: float = 60.0, audit: bool = False) -> SpacesServer:
    """`kip serve --spaces ROOT ARGS` on a free port (stderr in ROOT.log), up and answering;
    without an audit log unless `audit`."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    flags = ["--access-log", "off", *([] if audit else ["--no-audit"]), *args]
    proc, host, port = launch(None, flags,
                              log=root.parent / f"{root.name}.log", env=env, wait=wait,
                              spaces=root)
    return SpacesServer(proc, host, port, root)


def stop(server: SpacesServer) -> None:
    if server.proc.poll() is None:
        server.proc.terminate()
        try:
            server.proc.wait(30)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()


@pytest.fixture
def spaces_server(tmp_path: Path) -> Iterator[Any]:
    """A factory: `spaces_server(*flags)` starts a server over tmp_path/spaces."""
    started: list[SpacesServer] = []

    def make(*args: str, audit: bool = False) -> SpacesServer:
        server = start(tmp_path / "spaces", *args, audit=audit)
        started.append(server)
        return server
    yield make
    for server in started:
        stop(server)
