"""Running `kip serve` (nexus.server): `serve()` opens the database (or the spaces directory),
binds the socket, caps the process's memory, and runs `KipApp` under uvicorn — with an HTTP
protocol that answers an unparsable request with a KIP error and, on httptools, answers
`POST /kip` without the ASGI cycle (nexus.server.lean) — until SIGTERM/SIGINT.
"""
from __future__ import annotations

import ipaddress
import os
import signal
import socket
import sys
import threading
from typing import Any, BinaryIO

from ..api import Nexus, __version__
from ..config import DEFAULT_DB       # ./nexus-data, the one documented default
from ..errors import ErrorCode, KipError
from ..location import is_url, shown
from ..spaces import DEFAULT_MAX_OPEN, Spaces
from .app import KipApp
from .spaces_routes import Keys
from .wire import dumps, key_bytes
from .workers import Owner, RemoteAudit, Team

SWITCH_INTERVAL = 0.001         # seconds between GIL hand-overs in `kip serve`


# --- serving ------------------------------------------------------------------------------

def default_memory_budget() -> int:
    """`kip serve`'s memory budget when none is given: 3/4 of the machine's memory."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 3 // 4)
    except (ValueError, OSError, AttributeError):    # pragma: no cover - not Linux
        return 0


def set_memory_budget(budget: int) -> None:
    """Cap this process's heap — every private writable mapping: the Python heap, numpy,
    the vector index, thread stacks; not the LMDB file mapping, which is shared page cache
    — at `budget` bytes (RLIMIT_DATA; 0 leaves it as it is). An allocation past it fails
    with MemoryError in the thread that asked, which the engine and the server answer with
    KIP_4002: the one request that needed the memory fails, the process lives on."""
    if budget <= 0:
        return
    import resource
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        budget = min(budget, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (budget, hard))


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _bind(host: str, port: int) -> socket.socket:
    host = host.strip("[]")
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6 and host in ("::", ""):
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.bind(addr)
    sock.listen(2048)   # connections made during start-up wait in the backlog, not refused
    sock.set_inheritable(True)
    return sock


def serve(db: str = DEFAULT_DB, *, host: str = "127.0.0.1", port: int = 8080,
          api_key: str | None = None, allow_remote: bool = False,
          timeout: float | None = None, request_timeout: float | None = None,
          max_body: int | None = None, limits: dict[str, Any] | None = None,
          access_log: str | None = "-",
          log_level: str = "warning", bootstrap: bool = True, durable: bool = True,
          threads: int | None = None, audit: bool = True, http: str = "auto",
          loop: str = "auto", announce: BinaryIO | None = None,
          max_memory: int | None = None, spaces: str | None = None,
          auto_create: bool = False, max_open_spaces: int = DEFAULT_MAX_OPEN,
          keys: str | None = None, workers: int = 1,
          follow: dict[str, Any] | None = None) -> int:
    """Open the nexus at `db` and serve it until SIGTERM/SIGINT; returns the exit status.

    With `spaces` (a directory) it serves `POST /v1/{space}/kip` over the spaces in it
    instead (`nexus.spaces`; `auto_create`: a write to a missing space creates it; at most
    `max_open_spaces` open at once); `keys` is a keys file (docs/server.md), reread on SIGHUP.

    `workers` > 1 runs that many processes on the port over one LMDB database: this one
    owns it, the others read it and forward the rest here (nexus.server.workers; `follow`
    is how such a follower is started, not for callers).

    `max_memory` (bytes; None: `default_memory_budget()`, 0: none) caps the process's
    heap (RLIMIT_DATA, see `set_memory_budget`): a request that would pass it fails alone
    with KIP_4002, the server lives on.
    `timeout` → `Limits.query_timeout` (per command, enforced by the engine; a KML command
    that hits it rolls back); `request_timeout` → the server's wall-clock limit per request
    (default max(60 s, 2 × timeout)); `max_body` → `Limits.max_body_bytes`; `limits` → any
    other `Limits` fields (docs/limits.md), e.g. `{"max_rows": 10000}`; `access_log` is
    a file path, `-` for stderr, or None. `http`/`loop` pick uvicorn's HTTP parser and event
    loop (`auto` = httptools and uvloop when installed, else h11 and asyncio). Refuses (raises `ValueError`) to listen on a
    non-loopback host without an API key unless `allow_remote`.
    """
    import uvicorn

    key_bytes(api_key)       # a key of only whitespace stops the start (ValueError)
    key_table = Keys(keys) if keys else None
    if not api_key and not key_table and not allow_remote and not is_loopback(host):
        raise ValueError(f"refusing to listen on {host} without an API key: set --api-key "
                         f"(or KIP_API_KEY), or pass --allow-remote to serve it unauthenticated")
    if workers < 1:
        raise ValueError("--workers must be at least 1")
    if workers > 1 and (spaces or is_url(db)):
        raise ValueError("--workers serves one database directory (--db), not --spaces or "
                         "a URL")
    options: dict[str, Any] = {"bootstrap": bootstrap, "durable": durable, **(limits or {})}
    if timeout is not None:
        options["query_timeout"] = timeout
    if max_body is not None:
        options["max_body_bytes"] = max_body
    sock = _bind(host, port) if follow is None else socket.socket(fileno=follow["fd"])
    # The interpreter lock changes hands every 1 ms instead of 5: a cheap request waiting
    # behind a running slow one gets it sooner (bench/hol.py), for a few % of throughput.
    sys.setswitchinterval(SWITCH_INTERVAL)
    set_memory_budget(default_memory_budget() if max_memory is None else max_memory)
    registry: Spaces | None = None
    nexus: Nexus | None = None
    if spaces:
        registry = Spaces(spaces, max_open=max_open_spaces, auto_create=auto_create,
                          audit=audit, **options)
        db = spaces
    elif follow is not None:
        nexus = Nexus.follow(db, **options)
        nexus.share_heavy_slot(follow["heavy"])
    else:
        if not is_url(db):          # a URL names a database server, not a directory
            os.makedirs(db, exist_ok=True)
        nexus = Nexus.open(db, **options)
    team: Team | None = None
    if workers > 1:
        team = Team(workers - 1, sock, {"db": db, "options": dict(
            api_key=api_key, allow_remote=True, timeout=timeout,
            request_timeout=request_timeout, max_body=max_body, limits=limits,
            access_log=access_log, log_level=log_level, durable=durable, threads=threads,
            audit=audit, http=http, loop=loop, max_memory=max_memory)})
    log_stream: BinaryIO | None = None
    if access_log == "-":
        log_stream = sys.stderr.buffer
    elif access_log:
        log_stream = open(access_log, "ab")
    owner = None
    if follow is not None:
        owner = Owner(follow["owner"], held=follow.get("held"))   # (timeout: KipApp's)
    app = KipApp(nexus, api_key=api_key, request_timeout=request_timeout,
                 access_log=log_stream, threads=threads,
                 audit=RemoteAudit(owner, key_bytes(api_key)) if owner and audit else audit,
                 owns_nexus=True, spaces=registry, keys=key_table, owner=owner,
                 audit_intake=team is not None)
    if key_table is not None:
        signal.signal(signal.SIGHUP, lambda *_: key_table.reload())
    config = uvicorn.Config(app, lifespan="on", access_log=False, log_level=log_level,
                            http=_http_protocol(http), loop=loop,
                            server_header=False, timeout_graceful_shutdown=int(max(
                                30.0, app.request_timeout + 5)))
    server = _Server(config, app, team, follow.get("ready") if follow else None)
    if team is not None:
        assert nexus is not None
        nexus.share_heavy_slot(team.heavy)
        team.hold_while(nexus.commits_held_in_memory)
        team.start()
    if threading.current_thread() is threading.main_thread():
        # A SIGTERM/SIGINT after the announcement below but before uvicorn installs its own
        # handlers (a client stopping the server as soon as it says it listens) stops it
        # gracefully too, instead of killing it (uvicorn puts these back when it returns).
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, server.handle_exit)
    bound_host, bound_port = sock.getsockname()[:2]
    host_shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    if follow is None:
        out = announce or sys.stderr.buffer
        out.write(f"nexus {__version__}: serving {shown(db)} on "
                  f"http://{host_shown}:{bound_port}"
                  f"{'/v1/{space}/kip' if registry else '/kip'}\n".encode())
        out.flush()
    try:
        server.run(sockets=[sock] if team is None else [sock, team.socket])
    finally:
        if team is not None:        # they forward to this process: before it closes
            team.stop(config.timeout_graceful_shutdown or 30)
        app.close()
        sock.close()
        if log_stream is not None and log_stream is not sys.stderr.buffer:
            log_stream.close()
    return 0


_BAD_HTTP = dumps({"error": KipError(
    ErrorCode.KIP_1001, "Invalid HTTP request: the request line, the headers or the framing "
    "of the body cannot be parsed",
    "Send HTTP/1.1: POST /kip with `Content-Type: application/json`, a Content-Length (or "
    "chunked encoding) and a JSON body.").to_dict()})


def _http_protocol(name: str) -> Any:
    """uvicorn's HTTP protocol `name` ("auto", "httptools", "h11"), answering a request it
    cannot parse with a KIP error in JSON (HTTP 400, then the connection is closed) instead
    of uvicorn's plain-text "Invalid HTTP request received."."""
    if name == "auto":
        try:
            import httptools  # noqa: F401
            name = "httptools"
        except ImportError:     # pragma: no cover - httptools is a dependency
            name = "h11"
    if name == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    elif name == "h11":
        from uvicorn.protocols.http.h11_impl import H11Protocol as base  # type: ignore[assignment]
    else:
        return name

    class KipProtocol(base):
        def send_400_response(self, msg: str) -> None:
            head = [b"HTTP/1.1 400 Bad Request\r\n"]
            for header, value in self.server_state.default_headers:
                head += [header, b": ", value, b"\r\n"]
            head += [b"content-type: application/json\r\n",
                     b"content-length: " + str(len(_BAD_HTTP)).encode() + b"\r\n",
                     b"connection: close\r\n\r\n", _BAD_HTTP]
            self.transport.write(b"".join(head))
            self.transport.close()

        if name == "httptools":
            def on_headers_complete(self) -> None:
                super().on_headers_complete()
                cycle = getattr(self, "cycle", None)
                # (a HEAD response has no body write that would release its head)
                if cycle is not None and cycle.scope["method"] != "HEAD" and \
                        not isinstance(cycle.transport, _Corked):
                    cycle.transport = _Corked(cycle.transport)

    KipProtocol.__name__ = f"Kip{base.__name__}"
    if name == "httptools":         # POST /kip without the ASGI cycle (nexus.server.lean)
        from .lean import with_lean_kip
        return with_lean_kip(KipProtocol)
    return KipProtocol


class _Corked:
    """A connection's transport as one response cycle of uvicorn's httptools protocol sees
    it: the response head is held back until the body, so that a response leaves in one
    `write` (one send syscall, one TCP segment) instead of two — the head alone was a tenth
    of the server's CPU per small request (py-spy under bench/http_bench.py). Every response
    but HEAD's writes its body, possibly empty, after its head; a cycle that closes the
    connection instead writes the head first; `100 Continue` is never held."""

    __slots__ = ("_transport", "_held")

    def __init__(self, transport: Any) -> None:
        self._transport = transport
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + data)
        elif data.startswith(b"HTTP/1.1 ") and not data.startswith(b"HTTP/1.1 100 "):
            self._held = data
        else:
            self._transport.write(data)

    def flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _server_class():
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, telling the app when shutdown starts (so new requests on kept
        connections get 503) and exiting 0 after a graceful shutdown on SIGTERM instead of
        re-raising the signal."""

        def __init__(self, config: Any, app: KipApp, team: Team | None,
                     ready: int | None) -> None:
            super().__init__(config)
            self.kip_app = app
            self.team = team
            self.ready = ready          # a follower's pipe to the owner: closed once serving

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.ready is not None:
                os.close(self.ready)
                self.ready = None

        def handle_exit(self, sig: int, frame: Any) -> None:
            self.kip_app.shutting_down = True
            if self.team is not None:       # the followers finish what they run, too
                self.team.signal(signal.SIGTERM)
            super().handle_exit(sig, frame)
            if hasattr(self, "_captured_signals"):
                self._captured_signals.clear()

    return Server


def _Server(config: Any, app: KipApp, team: Team | None = None,
            ready: int | None = None) -> Any:
    return _server_class()(config, app, team, ready)


# --- a follower of `--workers` (started by `workers.Team`) ---------------------------------

def follower() -> int:
    """A `--workers` follower process: its settings come as JSON on stdin."""
    import json
    spec = json.loads(sys.stdin.buffer.read())
    _die_with_parent(spec["parent"])
    return serve(spec["db"], follow=spec, **spec["options"])


def _die_with_parent(parent: int) -> None:
    """SIGTERM this process when its parent (the owner) exits (Linux)."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)           # PR_SET_PDEATHSIG
    except (OSError, AttributeError):           # pragma: no cover - not Linux
        pass
    if os.getppid() != parent:                  # it died before the call above
        raise SystemExit(0)
