"""A `kip serve` subprocess on a free loopback port, for the soak and hostile-input suites
(usable from pytest and from the stand-alone scripts alike; stdlib HTTP only).

`KipServer.start(db, *flags, key=...)` runs `python -m nexus.cli serve --port 0` and waits
until /healthz answers; `post()` sends raw bytes and returns (status, decoded body or raw
bytes); `rss()` reads the server's resident memory from /proc.
"""
from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# tests/serving.py starts the process (shared with tests/server and tests/shell).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from serving import launch  # noqa: E402


class KipServer:
    def __init__(self, proc: subprocess.Popen, host: str, port: int, key: str | None,
                 log: Path) -> None:
        self.proc, self.host, self.port, self.key, self.log = proc, host, port, key, log

    @classmethod
    def start(cls, db: str | os.PathLike, *flags: str, key: str | None = None,
              env: dict | None = None, wait: float = 60.0) -> "KipServer":
        db = Path(db)
        log = db.parent / f"{db.name}-serve-{time.monotonic_ns()}.log"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("KIP_")}
        full_env.update(env or {})
        proc, host, port = launch(db, ["--access-log", "off", *flags], log=log, env=full_env,
                                  key=key, wait=wait)
        return cls(proc, host, port, key, log)

    # --- HTTP --------------------------------------------------------------------------------
    def connect(self, timeout: float = 60.0) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, verb: str, path: str, body: bytes | None = None,
                headers: dict | None = None, timeout: float = 60.0) -> tuple[int, Any]:
        conn = self.connect(timeout)
        try:
            conn.request(verb, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, _decode(resp.read())
        finally:
            conn.close()

    def headers(self, key: str | None | bool = True) -> dict[str, str]:
        hdrs = {"Content-Type": "application/json"}
        use = self.key if key is True else key
        if use:
            hdrs["Authorization"] = f"Bearer {use}"
        return hdrs

    def post(self, body: bytes | Any, key: str | None | bool = True,
             timeout: float = 60.0, conn: http.client.HTTPConnection | None = None
             ) -> tuple[int, Any]:
        """POST /kip; `body` is raw bytes or a JSON-able value. With `conn`, reuses that
        keep-alive connection."""
        raw = body if isinstance(body, (bytes, bytearray)) else json.dumps(body).encode()
        if conn is None:
            return self.request("POST", "/kip", raw, self.headers(key), timeout)
        conn.request("POST", "/kip", body=raw, headers=self.headers(key))
        resp = conn.getresponse()
        return resp.status, _decode(resp.read())

    def kip(self, params: dict, method: str = "execute_kip", **kw: Any) -> tuple[int, Any]:
        return self.post({"method": method, "params": params}, **kw)

    def raw(self, data: bytes, timeout: float = 30.0, half_close: bool = True
            ) -> tuple[int, Any]:
        """Send raw bytes on a new socket (whatever they are: a request whose body the
        server will refuse before reading it, or no HTTP at all) and return the status and
        body of the answer. ConnectionResetError when the server answers nothing.

        `half_close` shuts the socket's sending side once the bytes are out, so a server
        waiting for more of a broken request sees the end of it. A complete request must
        not do that: an HTTP server may (uvicorn does) take the client's EOF for an abort
        and drop the answer of a request that is still running."""
        with socket.create_connection((self.host, self.port), timeout=timeout) as sock:
            try:
                sock.sendall(data)
                if half_close:
                    sock.shutdown(socket.SHUT_WR)
            except OSError:         # the server answered and closed before reading it all
                pass
            chunks = []
            while True:
                try:
                    chunk = sock.recv(65536)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                chunks.append(chunk)
        reply = b"".join(chunks)
        if not reply:
            raise ConnectionResetError("closed without an answer")
        head, _, body = reply.partition(b"\r\n\r\n")
        return int(head.split(b" ", 2)[1]), _decode(body)

    def raw_post(self, body: bytes, key: str | None | bool = True) -> tuple[int, Any]:
        """POST /kip with `body` over a raw socket (see `raw`)."""
        head = "".join(f"{k}: {v}\r\n" for k, v in self.headers(key).items())
        return self.raw(f"POST /kip HTTP/1.1\r\nHost: {self.host}\r\n{head}Content-Length: "
                        f"{len(body)}\r\nConnection: close\r\n\r\n".encode() + body,
                        half_close=False)

    # --- process -----------------------------------------------------------------------------
    def rss(self) -> dict[str, int]:
        """VmRSS and RssAnon of the server in KiB (RssAnon leaves out LMDB's file-backed
        pages, which grow with the database, not with leaks)."""
        out = {}
        with open(f"/proc/{self.proc.pid}/status") as fh:
            for line in fh:
                name, _, value = line.partition(":")
                if name in ("VmRSS", "RssAnon", "RssFile"):
                    out[name] = int(value.split()[0])
        return out

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw
