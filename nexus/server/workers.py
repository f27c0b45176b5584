"""`kip serve --workers N`: N processes answering on one port over one LMDB database.

One interpreter runs one request's Python at a time; on a machine with several cores the
server's throughput grows with processes, not threads. The process started as `kip serve`
is the *owner*: it opens the database as always (owner lock, bootstrap, search index,
audit log, every write) and serves on the listening socket. It starts N - 1 *followers*
that accept on the same socket (inherited: the kernel hands each new connection to one of
the processes waiting in `accept`) and open the database with `Nexus.follow` (read-only,
no owner lock; LMDB serves readers across processes and serializes writers).

What a follower answers itself: `execute_kip` / `execute_kip_readonly` requests whose every
command is a query (FIND, EXPLAIN) without SEARCH, or a DESCRIBE of the schema (DOMAINS,
CONCEPT TYPE[S], PROPOSITION TYPE[S]: the snapshot's definitions and counts, read like a
FIND's). Everything else — a command that writes, the other META (SEARCH: the owner's vector
index holds the latest writes; DESCRIBE PRIMER, EXPORT), `list_logs`, anything it cannot
classify — is *forwarded*: the body and the Authorization header go as
they came to the owner over a Unix socket in a private directory (`POST /kip`, checked
there like any request), and the owner's answer goes back unchanged. Freshness: a follower
checks its caches against the snapshot each read sees (`StoreBase.follow`), so a read that
begins after a write was acknowledged — by any process — sees it.

Audit: what a follower answers itself is recorded in the owner's audit log — the follower
sends its entries to the owner (`POST /_audit` on the Unix socket, batched every
`AUDIT_EVERY` seconds); forwarded requests are audited by the owner as its own. Each
process writes its own access-log lines (appended to the same file).

Admission control (docs/limits.md) spans the processes: they share one heavy slot
(`Nexus.share_heavy_slot`, a lock file in the private directory), so a cheap request meets
at most one slow query running, as on one process — the head-of-line bound of bench/hol.py.

Commits held in memory: when the owner opened a database on a full disk and could not
replay the write-ahead log into the data file, its reads take those commits from memory
(`Nexus.commits_held_in_memory`), and a follower reading the data file would answer from
an older state. While that lasts a flag file in the private directory says so, and the
followers forward every request to the owner; the owner removes the flag once its
recovery has ended (`HOLD_POLL`). If the flag cannot be made, no follower is started.

Failures: a follower that exits is started again by the owner (after `RESTART_DELAY`); its
open connections are lost, the others and new connections are served meanwhile. Followers
end with the owner (SIGTERM from the kernel when their parent dies, Linux); if the owner is
unreachable, a forwarded request gets 503 + KIP_4003.
"""
from __future__ import annotations

import http.client
import json
import logging
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable

from ..api import AuditBuffer
from ..language import StatementKind, kind_of_text
from .wire import calls_in, dumps

AUDIT_EVERY = 0.2           # seconds between a follower's audit batches
AUDIT_BATCH = 200           # entries per request to the owner
START_WAIT = 120.0          # seconds `kip serve` waits for its followers to serve
RESTART_DELAY = 0.5         # seconds before a follower that exited is started again
SOCKET_NAME = "owner.sock"
HELD_NAME = "held-in-memory"    # the flag file: followers forward everything while it exists
HOLD_POLL = 0.5                 # seconds between the owner's checks that its recovery ended
log = logging.getLogger("nexus.server")

_FOLLOWER = "import sys; from nexus.server.run import follower; sys.exit(follower())"
_SEARCH = re.compile(r"\bSEARCH\b", re.IGNORECASE)
# A DESCRIBE of the schema, which a follower answers from its snapshot (module doc)
_DESCRIBE_SCHEMA = re.compile(r"(?:\s+|//[^\n]*)*DESCRIBE(?:\s+|//[^\n]*)+"
                              r"(?:DOMAINS|CONCEPT|PROPOSITION)\b")


def needs_owner(payload: Any) -> bool:
    """Whether a follower must forward this parsed `/kip` body to the owner (module doc).
    A body that is not JSON never gets here: the follower answers it (the same error
    either way)."""
    for method, texts in calls_in(payload):
        if method not in ("execute_kip", "execute_kip_readonly"):
            if method == "list_logs":
                return True
            continue            # an unknown method: the follower answers the error
        for text in texts:
            if kind_of_text(text) is not StatementKind.QUERY or _SEARCH.search(text):
                if _DESCRIBE_SCHEMA.match(text) and not _SEARCH.search(text):
                    continue
                return True
    return False


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class Owner:
    """A follower's way to the owner process: HTTP/1.1 over its Unix socket, one connection
    per call (a forwarded call is never retried: it may have written)."""

    def __init__(self, path: str, timeout: float = 65.0, held: str | None = None) -> None:
        # (The follower's KipApp sets `timeout` from its own request timeout.)
        self.path, self.timeout = path, timeout
        self.held = held

    def holds_newer_data(self) -> bool:
        """Whether the owner reads commits from memory that the data file lacks (module
        doc): then every request goes to it. One stat per request."""
        return self.held is not None and os.path.exists(self.held)

    def post(self, target: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        """(status, body) of the owner's answer; OSError when it cannot be reached."""
        conn = _UnixConnection(self.path, self.timeout)
        try:
            conn.request("POST", target, body, headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        except http.client.HTTPException as exc:
            raise OSError(f"the owner process broke the connection: {exc}") from exc
        finally:
            conn.close()

    def forward(self, request: tuple[bytes, bytes | None]) -> tuple[int, bytes]:
        body, authorization = request
        headers = {"Content-Type": "application/json"}
        if authorization is not None:
            headers["Authorization"] = authorization.decode("latin-1")
        return self.post("/kip", body, headers)


class RemoteAudit(AuditBuffer):
    """A follower's audit log: entries are queued and sent to the owner's audit log in
    batches (`record`, `start`, `close` as `AuditLog`; `list_logs` is forwarded)."""

    thread_name = "nexus-audit-relay"

    def __init__(self, owner: Owner, api_key: bytes | None) -> None:
        super().__init__(flush_interval=AUDIT_EVERY, flush_size=AUDIT_BATCH)
        self.owner = owner
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = "Bearer " + api_key.decode()

    def _write(self, batch: list[tuple[float, dict]]) -> None:
        for at in range(0, len(batch), AUDIT_BATCH):    # each well under any body limit
            try:
                self.owner.post("/_audit", dumps(batch[at:at + AUDIT_BATCH]), self._headers)
            except OSError as exc:      # the owner is gone: these entries are lost with it
                log.warning("audit entries not delivered to the owner process: %s", exc)
                break

    def list_logs(self, params: Any = None) -> dict[str, Any]:   # pragma: no cover
        raise RuntimeError("list_logs is forwarded to the owner process")


# --- the owner's side ------------------------------------------------------------------------

class Team:
    """The owner's followers: started with the listening socket, started again when one
    exits, stopped with the owner."""

    def __init__(self, count: int, listener: socket.socket, spec: dict[str, Any]) -> None:
        self.directory = tempfile.mkdtemp(prefix="kip-serve-")      # mode 0700
        self.path = os.path.join(self.directory, SOCKET_NAME)
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.socket.bind(self.path)
        self.socket.listen(512)
        self.count = count
        self.listener = listener
        self.heavy = os.path.join(self.directory, "heavy.lock")   # the shared heavy slot
        self.held = os.path.join(self.directory, HELD_NAME)
        self.spec = {**spec, "fd": listener.fileno(), "owner": self.path,
                     "parent": os.getpid(), "heavy": self.heavy, "held": self.held}
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * count
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def hold_while(self, held_in_memory: Callable[[], int]) -> None:
        """Before `start`: while `held_in_memory()` (the owner's count of commits only it
        can read) is not 0, the flag file makes the followers forward everything (module
        doc); a thread removes it once the count is 0. If the flag cannot be made, no
        follower will be started: the owner serves alone rather than let one answer stale."""
        if not held_in_memory():
            return
        try:
            with open(self.held, "x"):
                pass
        except OSError as exc:
            log.warning("kip serve: commits of the write-ahead log are held in memory and "
                        "the flag for the workers cannot be written (%s): serving without "
                        "workers", exc)
            self.count = 0
            self.procs = []
            return

        def release() -> None:
            while not self.stopping.wait(HOLD_POLL):
                if not held_in_memory():
                    try:
                        os.unlink(self.held)
                    except OSError:
                        pass
                    return
        threading.Thread(target=release, daemon=True, name="nexus-held-flag").start()

    def start(self, wait: float = START_WAIT) -> None:
        """Start the followers and wait (at most `wait` seconds) until each one serves, so
        that the server is whole when it says it listens."""
        ready = [self._spawn(slot) for slot in range(self.count)]
        deadline = time.monotonic() + wait
        for fd in ready:
            try:
                select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            finally:
                os.close(fd)
        for slot in range(self.count):
            t = threading.Thread(target=self._watch, args=(slot,), daemon=True,
                                 name=f"nexus-follower-{slot}")
            t.start()
            self._threads.append(t)

    def _spawn(self, slot: int) -> int:
        """Start the follower of `slot`; the read end of the pipe it closes once it
        serves (or exits)."""
        read, write = os.pipe()
        try:
            proc = subprocess.Popen([sys.executable, "-c", _FOLLOWER], stdin=subprocess.PIPE,
                                    pass_fds=[self.listener.fileno(), write])
        finally:
            os.close(write)
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({**self.spec, "ready": write}).encode())
        proc.stdin.close()
        with self._lock:
            self.procs[slot] = proc
        return read

    def _watch(self, slot: int) -> None:
        while True:
            proc = self.procs[slot]
            if proc is None:
                return
            code = proc.wait()
            if self.stopping.is_set():
                return
            sys.stderr.write(f"kip serve: worker {proc.pid} exited ({code}); starting "
                             f"another\n")
            if self.stopping.wait(RESTART_DELAY):
                return
            with self._lock:
                if self.stopping.is_set():
                    return
            os.close(self._spawn(slot))

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p is not None and p.poll() is None]

    def signal(self, sig: int) -> None:
        """Send `sig` to the followers (no new ones are started from now on)."""
        self.stopping.set()
        with self._lock:
            procs = [p for p in self.procs if p is not None]
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(sig)
                except OSError:
                    pass

    def stop(self, timeout: float) -> None:
        """SIGTERM the followers (they finish what they run) and wait for them."""
        self.signal(signal.SIGTERM)         # (none is started after it)
        with self._lock:
            procs = [p for p in self.procs if p is not None]
        deadline = time.monotonic() + timeout
        for p in procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.socket.close()
        shutil.rmtree(self.directory, ignore_errors=True)
