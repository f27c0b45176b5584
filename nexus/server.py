"""`kip serve`: the KIP JSON-RPC endpoint — a pure ASGI app over `Nexus`, run by uvicorn.

Owns the HTTP side of CONTRACT §1: routes (`POST /kip`, `GET /`, `GET /healthz`), Bearer auth
checked before any body byte is read, the body size limit (413), JSON decoding (400 +
`KIP_1001`), method dispatch (`execute_kip`, `execute_kip_readonly`, `list_logs`), the plain
and the JSON-RPC 2.0 framings, HTTP status by error class, the per-request timeout (408 +
`KIP_4001`), 503 while shutting down, the access log and the audit records.
Owns no engine logic: request validation, batches, the read-only rule and dry runs are
`Nexus`'s (`nexus.api`); the audit log is `nexus.ops.audit`'s.

Framing (decided, see docs/server.md): a body with a `"jsonrpc"` key is JSON-RPC 2.0 and is
answered `{"jsonrpc": "2.0", "id": ..., "result": <KIP response>}` whenever the method ran —
including when the KIP response is `{"error": ...}`, so an agent reads the same KIP shape in
both framings. Errors found before a method could run (bad JSON, bad envelope, unknown
method) are JSON-RPC error objects `{"code": -32700|-32600|-32601, "message", "data": <KIP
error object>}`. A JSON array is a JSON-RPC batch. HTTP status is the same in both framings.

Concurrency: the event loop only does I/O; every method runs in a thread pool. The engine is
thread-safe (LMDB snapshots for reads, one write lock), so reads run in parallel with one
writer. A request that outlives `request_timeout` is answered 408 while its thread runs on:
threads are never killed, so a write that has started commits or rolls back as a whole (each
command is one store transaction) — never half-applied.
"""
from __future__ import annotations

import asyncio
import gc
import hmac
import ipaddress
import json
import os
import re
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO, Callable

import orjson

from .api import KIP_VERSION, AuditLog, Nexus, __version__, audit_entry, iso_time
from .config import DEFAULT_DB       # ./nexus-data, the one documented default
from .config import Config
from .spaces import DEFAULT_MAX_OPEN, Spaces, check_name, unknown_space
from .errors import ErrorCode, KipError
from .language import command_label, kind_of_text

METHODS = ("execute_kip", "execute_kip_readonly", "list_logs")
_ENVELOPE = frozenset(("method", "params"))
_RPC_ENVELOPE = frozenset(("jsonrpc", "id", "method", "params"))

# Worker threads: enough that cheap requests find one free while slow ones run (slow reads
# wait for a heavy slot asleep, see nexus.exec.admission); `kip serve --threads N`.
DEFAULT_THREADS = 64
SWITCH_INTERVAL = 0.001         # seconds between GIL hand-overs in `kip serve`

# JSON-RPC 2.0 error codes
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND = -32700, -32600, -32601


def command_kind(text: Any) -> str:
    """KQL / KML / META of a command from its first keyword (for logs only; `?` if unknown)."""
    return command_label(text)


def commands_of(params: Any) -> tuple[list[str], bool]:
    """The command texts of an execute_kip request (for logs), and whether it is a batch."""
    if not isinstance(params, dict):
        return [], False
    if isinstance(params.get("commands"), list):
        texts = []
        for item in params["commands"]:
            if isinstance(item, dict):
                item = item.get("command")
            texts.append(item if isinstance(item, str) else "")
        return texts, True
    command = params.get("command")
    return ([command] if isinstance(command, str) else []), False


def asks_to_write(body: bytes) -> bool:
    """Whether a request body holds a command that writes (an `execute_kip` call with a KML
    or ADMIN command, alone, in `commands` or in a JSON-RPC batch). Unreadable bodies and
    unknown commands do not: they create nothing and get their error from the space."""
    try:
        payload = _loads(body)
    except (ValueError, MemoryError):
        return False
    for call in payload if isinstance(payload, list) else [payload]:
        if isinstance(call, dict) and call.get("method") == "execute_kip":
            for text in commands_of(call.get("params"))[0]:
                kind = kind_of_text(text)
                if kind is not None and kind.writes:
                    return True
    return False


def http_status(response: dict[str, Any]) -> int:
    """200 unless the response is a top-level error; then by error class (CONTRACT §1).
    A batch answer (`{"result": [...]}`) is always 200."""
    err = response.get("error")
    if err is None:
        return 200
    try:
        return ErrorCode(err.get("code")).http_status
    except (ValueError, AttributeError):
        return 500


def _dumps(obj: Any) -> bytes:
    try:
        return orjson.dumps(obj)
    except TypeError:
        # An int beyond 64 bits, or a lone surrogate that a client sent as a `\ud800` escape
        # and an error message (or a JSON-RPC id) echoes: the stdlib writes both, as ASCII
        # JSON with the same escapes.
        return json.dumps(obj).encode("ascii")


_TOO_DEEP = "the JSON is nested too deeply"
# A JSON integer of 19 digits or more may be outside orjson's exact range (-2^63 .. 2^64-1),
# which orjson reads as a lossy float: such bodies are read by the stdlib, which keeps every
# integer exact (a digit run inside a string only costs the slower reader).
_LONG_DIGITS = re.compile(rb"[0-9]{19}")


def _loads(body: bytes) -> Any:
    """The request body as JSON; ValueError for anything else (invalid JSON, NaN or
    Infinity, too deep, or not UTF-8 — RFC 8259 §8.1: no UTF-16 or UTF-32)."""
    if _LONG_DIGITS.search(body) is None:
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            if "recursion" in str(exc).lower():      # orjson's own depth limit (1024)
                raise ValueError(_TOO_DEEP) from None
            # the stdlib reads lone surrogate escapes and words the error for the client
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"the body is not UTF-8 (byte {exc.start}); send JSON encoded as "
                         f"UTF-8") from None

    def nan(word: str) -> Any:
        raise ValueError(f"{word} is not JSON")
    try:
        return json.loads(text, parse_constant=nan)
    except RecursionError:      # the stdlib recurses: deep nesting must not be a 500
        raise ValueError(_TOO_DEEP) from None


def _out_of_memory(doing: str) -> dict[str, Any]:
    return _kip_error(ErrorCode.KIP_4002, f"The server ran out of its memory budget while "
                      f"{doing}",
                      "Ask for less at once: lower LIMIT and page with CURSOR, project fields "
                      "instead of whole elements, send smaller batches.")


def _api_key(key: str | None) -> bytes | None:
    """The configured API key as compared with the header: surrounding whitespace (a newline
    from a file or an environment variable) removed, as it is from the header's token — a
    key that kept it could never authenticate. A key of only whitespace is refused."""
    if not key:
        return None
    stripped = key.strip()
    if not stripped:
        raise ValueError("the API key is only whitespace: set a real key with --api-key "
                         "(or KIP_API_KEY), or none")
    return stripped.encode("utf-8")


def _kip_error(code: ErrorCode, message: str, hint: str | None = None) -> dict[str, Any]:
    return KipError(code, message, hint).to_dict()


class _Reject(Exception):
    """An HTTP-level refusal: status + KIP error object (+ extra headers)."""

    def __init__(self, status: int, error: dict[str, Any],
                 headers: list[tuple[bytes, bytes]] | None = None) -> None:
        self.status, self.error, self.headers = status, error, headers or []


class _Disconnected(Exception):
    pass


class _Call:
    """What one JSON-RPC call did, for the access log and the audit."""

    __slots__ = ("method", "kinds", "batch", "status", "error", "errors", "nexus", "read_only",
                 "audit")

    def __init__(self) -> None:
        self.nexus: Any = None          # the space's Nexus on /v1/{space}/kip
        self.audit: AuditLog | None = None      # ... and its audit log
        self.read_only = False          # a `read` key: execute_kip runs as the readonly method
        self.method: str | None = None
        self.kinds: list[str] = []
        self.batch = False
        self.status = 200
        self.error: str | None = None
        self.errors: list[str] = []


class KipApp:
    """The ASGI application. `nexus` is an open `Nexus`; the app closes it on lifespan
    shutdown only if `owns_nexus`."""

    def __init__(self, nexus: Any, *, api_key: str | None = None,
                 max_body: int | None = None, request_timeout: float | None = None,
                 access_log: BinaryIO | None = None, audit: AuditLog | None | bool = True,
                 threads: int | None = None, owns_nexus: bool = False,
                 spaces: Spaces | None = None, keys: Keys | None = None) -> None:
        """`nexus` may be None when `spaces` is given (then only /v1/{space}/kip serves)."""
        self.spaces, self.keys = spaces, keys
        self.nexus = nexus
        config = (nexus.config if nexus is not None
                  else Config.from_options(**(spaces.options if spaces else {})))
        limits = self.limits = config.limits
        self.api_key = _api_key(api_key)
        self.max_body = max_body if max_body is not None else limits.max_body_bytes
        self.request_timeout = (request_timeout if request_timeout is not None
                                else max(60.0, 2 * limits.query_timeout))
        self.access_log = access_log
        if audit is True:
            audit = nexus.audit_log() if nexus is not None else None
        self.audit: AuditLog | None = audit or None
        self.audit_chars = config.audit_command_chars
        self.pool = ThreadPoolExecutor(max_workers=threads or DEFAULT_THREADS,
                                       thread_name_prefix="nexus-kip")
        self.owns_nexus = owns_nexus
        self.shutting_down = False
        self._closed = False
        if self.audit is not None:
            self.audit.start()

    # --- lifecycle ------------------------------------------------------------------------
    def close(self) -> None:
        """Wait for running calls, flush the audit, close the nexus if owned (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.shutting_down = True
        self.pool.shutdown(wait=True)
        if self.audit is not None:
            self.audit.close()
        if self.owns_nexus and self.nexus is not None:
            self.nexus.close()
        if self.owns_nexus and self.spaces is not None:
            self.spaces.close()

    def warm_up(self) -> None:
        if self.nexus is None:
            return
        self.nexus.execute_kip_readonly(
            {"command": 'FIND(?t.name) WHERE { ?t {type: "$ConceptType"} } LIMIT 1'})

    async def _lifespan(self, receive: Callable, send: Callable) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                # Build the parser and planner now, not during the first agent request.
                await asyncio.get_running_loop().run_in_executor(self.pool, self.warm_up)
                # Everything alive now (parser tables, caches, indexes) lives as long as the
                # server: keep it out of the cyclic GC's full collections, whose pauses
                # otherwise land in the tail latency.
                gc.collect()
                gc.freeze()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.shutting_down = True
                await asyncio.get_running_loop().run_in_executor(None, self.close)
                await send({"type": "lifespan.shutdown.complete"})
                return

    # --- ASGI entry -----------------------------------------------------------------------
    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        started = time.perf_counter()
        call = _Call()
        headers: list[tuple[bytes, bytes]] = []
        try:
            status, payload, headers = await self._route(scope, receive, call)
        except _Reject as rej:
            status, payload, headers = rej.status, {"error": rej.error}, rej.headers
            call.error = rej.error["code"]
        except _Disconnected:
            return
        except Exception as exc:  # noqa: BLE001 - nothing but a KIP response leaves
            status = 500
            payload = {"error": KipError(ErrorCode.KIP_4003,
                                         f"Internal error: {type(exc).__name__}: {exc}").to_dict()}
            call.error = "KIP_4003"
        call.status = status
        try:
            body = b"" if payload is None else _dumps(payload)
        except MemoryError:
            status, call.status, call.error = 400, 400, "KIP_4002"
            payload = None
            body = _dumps({"error": _out_of_memory("encoding the response")})
        except (TypeError, ValueError) as exc:  # a KIP response, even when encoding fails
            status, call.status, call.error = 500, 500, "KIP_4003"
            body = _dumps({"error": KipError(ErrorCode.KIP_4003, f"Internal error: the "
                                             f"response cannot be encoded: {exc}").to_dict()})
        out = [(b"content-type", b"application/json")] if body else []
        out.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": status,
                    "headers": out + headers})
        await send({"type": "http.response.body", "body": body})
        if self.access_log is not None:
            self._log_access(scope, call, time.perf_counter() - started)

    async def _route(self, scope: dict, receive: Callable, call: _Call
                     ) -> tuple[int, Any, list[tuple[bytes, bytes]]]:
        path, verb = scope["path"], scope["method"]
        if path in ("/kip", "/kip/") and self.nexus is not None:
            if verb != "POST":
                raise _Reject(405, _kip_error(ErrorCode.KIP_1001,
                                              f"{verb} /kip is not allowed",
                                              "Send requests as POST /kip with a JSON body."),
                              [(b"allow", b"POST")])
            if self.shutting_down:
                raise _Reject(503, _kip_error(ErrorCode.KIP_4003,
                                              "The server is shutting down",
                                              "Retry the request in a moment."),
                              [(b"connection", b"close"), (b"retry-after", b"1")])
            self._check_auth(scope)
            body = await self._read_body(scope, receive)
            status, payload = await self._handle_body(body, call)
            return status, payload, []
        if self.spaces is not None and (path == "/v1/admin/spaces"
                                        or path.startswith("/v1/admin/spaces/")):
            return await self._route_admin(path[len("/v1/admin/spaces/"):], scope, receive)
        space = _SPACE_ROUTE.fullmatch(path)
        if space is not None and self.spaces is not None:
            return await self._route_space(space.group(1), scope, receive, call)
        if self.spaces is not None and path.startswith("/v1/") and path.rstrip("/").endswith(
                "/kip"):            # a name with a slash (or a decoded %2F): not a space
            raise _Reject(400, _kip_error(
                ErrorCode.KIP_1001, f"Invalid space name {path.rstrip('/')[4:-4][:80]!r}",
                "A space name is 1-63 characters of a-z, 0-9, '_' and '-', starting with a "
                "letter or a digit."))
        if verb not in ("GET", "HEAD") or path not in ("/", "/healthz"):
            raise _Reject(404, _kip_error(ErrorCode.KIP_1001, f"No route {verb} {path}",
                                          "KIP requests go to POST /kip; GET / describes the "
                                          "server and GET /healthz reports health."))
        if path == "/healthz":
            if self.shutting_down:
                return 503, {"status": "shutting_down"}, []
            return 200, {"status": "ok"}, []
        return 200, {"name": "nexus", "version": __version__, "kip_version": KIP_VERSION}, []

    async def _route_admin(self, name: str, scope: dict, receive: Callable
                           ) -> tuple[int, Any, list[tuple[bytes, bytes]]]:
        """GET /v1/admin/spaces (list), POST /v1/admin/spaces {"name"} (create),
        DELETE /v1/admin/spaces/{name} (drop). With --keys only an `admin` key may create or
        drop, and a list shows only the key's spaces."""
        spaces = self.spaces
        assert spaces is not None
        verb = scope["method"]
        grant: Grant | None = None
        if self.keys is not None:
            grant = self.keys.grant(_bearer(scope))
            if grant is None:
                raise _Reject(401, _kip_error(ErrorCode.KIP_4003,
                                              "Unauthorized: missing or invalid API key",
                                              "Send `Authorization: Bearer <key>`."))
        else:
            self._check_auth(scope)
        loop = asyncio.get_running_loop()
        if verb == "GET" and not name:
            names = await loop.run_in_executor(self.pool, spaces.names)
            return 200, {"result": [n for n in names if grant is None or grant.covers(n)]}, []
        if grant is not None and grant.mode != "admin":
            raise _Reject(403, _kip_error(ErrorCode.KIP_4003,
                                          "Forbidden: creating and dropping spaces needs an "
                                          "admin key", "Use a key whose mode is \"admin\"."))
        try:
            if verb == "POST" and not name:
                body = await self._read_body(scope, receive)
                try:
                    request = _loads(body)
                except ValueError as exc:
                    raise _Reject(400, _kip_error(ErrorCode.KIP_1001, f"Invalid JSON: {exc}",
                                                  'Send {"name": "SPACE"}.')) from None
                new = check_name(request.get("name") if isinstance(request, dict) else None)
                created = await loop.run_in_executor(self.pool, spaces.create, new)
                return 200, {"result": {"name": new, "created": created}}, []
            if verb == "DELETE" and name:
                check_name(name)
                if grant is not None and not grant.covers(name):
                    raise unknown_space(name)
                dropped = await loop.run_in_executor(self.pool, spaces.drop, name)
                if not dropped:
                    raise unknown_space(name)
                return 200, {"result": {"name": name, "dropped": True}}, []
        except KipError as exc:
            status = 404 if exc.message.startswith("No space") else exc.code.http_status
            raise _Reject(status, exc.to_dict()) from None
        raise _Reject(405, _kip_error(ErrorCode.KIP_1001, f"{verb} {scope['path']} is not "
                                      f"allowed", "GET or POST /v1/admin/spaces, DELETE "
                                      "/v1/admin/spaces/NAME."))

    async def _route_space(self, name: str, scope: dict, receive: Callable, call: _Call
                           ) -> tuple[int, Any, list[tuple[bytes, bytes]]]:
        """POST /v1/{space}/kip: the /kip handling over the space's own store. A key that
        does not cover the space gets exactly the answer of a space that does not exist."""
        if scope["method"] != "POST":
            raise _Reject(405, _kip_error(ErrorCode.KIP_1001,
                                          f"{scope['method']} {scope['path']} is not allowed",
                                          "Send requests as POST with a JSON body."),
                          [(b"allow", b"POST")])
        if self.shutting_down:
            raise _Reject(503, _kip_error(ErrorCode.KIP_4003, "The server is shutting down",
                                          "Retry the request in a moment."),
                          [(b"connection", b"close"), (b"retry-after", b"1")])
        spaces = self.spaces
        assert spaces is not None
        try:
            check_name(name)
        except KipError as exc:
            raise _Reject(400, exc.to_dict()) from None
        if self.keys is not None:
            grant = self.keys.grant(_bearer(scope))
            if grant is None:
                raise _Reject(401, _kip_error(ErrorCode.KIP_4003,
                                              "Unauthorized: missing or invalid API key",
                                              "Send `Authorization: Bearer <key>`."))
            if not grant.covers(name):
                raise _Reject(404, unknown_space(name).to_dict())
            call.read_only = grant.mode == "read"
            create = spaces.auto_create and not call.read_only
        else:
            self._check_auth(scope)
            create = spaces.auto_create
        body = await self._read_body(scope, receive)
        # --auto-create: only a request that writes creates its missing space; a read of a
        # missing space answers as missing (and leaves no trace on disk).
        create = create and not spaces.exists(name) and asks_to_write(body)
        loop = asyncio.get_running_loop()
        held = spaces.acquire(name, create=create)
        try:
            call.nexus = await loop.run_in_executor(self.pool, held.__enter__)
        except KipError as exc:
            raise _Reject(404, exc.to_dict()) from None
        call.audit = spaces.audit_log(name)
        try:
            status, payload = await self._handle_body(body, call)
        finally:
            await loop.run_in_executor(self.pool, held.__exit__, None, None, None)
        return status, payload, []

    def _check_auth(self, scope: dict) -> None:
        if self.api_key is None:
            return
        given = b""
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, token = value.partition(b" ")
                if scheme.lower() == b"bearer":
                    given = token.strip()
                break
        if not given or not hmac.compare_digest(given, self.api_key):
            raise _Reject(401, _kip_error(
                ErrorCode.KIP_4003,
                "Unauthorized: missing or invalid API key" if given or any(
                    n == b"authorization" for n, _ in scope["headers"])
                else "Unauthorized: this server requires an API key",
                "Send the header `Authorization: Bearer <key>` with the key the server was "
                "started with (--api-key or KIP_API_KEY)."),
                [(b"www-authenticate", b'Bearer realm="kip"'), (b"connection", b"close")])

    async def _read_body(self, scope: dict, receive: Callable) -> bytes:
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    raise _Reject(400, _kip_error(ErrorCode.KIP_1001,
                                                  "Invalid Content-Length header")) from None
                if declared > self.max_body:
                    raise self._too_large(declared)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Disconnected()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                raise self._too_large(size, at_least=True)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _too_large(self, size: int, at_least: bool = False) -> _Reject:
        return _Reject(413, _kip_error(
            ErrorCode.KIP_4002,
            f"The request body is {'over ' if at_least else ''}{size} bytes, over the limit "
            f"of {self.max_body} bytes",
            "Send smaller requests: split a large batch, or load big capsules with "
            "`kip load`."), [(b"connection", b"close")])

    # --- JSON-RPC -------------------------------------------------------------------------
    async def _handle_body(self, body: bytes, call: _Call) -> tuple[int, Any]:
        try:
            payload = _loads(body)
        except MemoryError:
            call.error = "KIP_4002"
            return 400, {"error": _out_of_memory("reading the request body")}
        except (ValueError, UnicodeDecodeError) as exc:
            err = _kip_error(ErrorCode.KIP_1001, f"The request body is not valid JSON: {exc}",
                             "Send a JSON object: {\"method\": \"execute_kip\", \"params\": "
                             "{\"command\": \"...\"}}.")
            call.error = "KIP_1001"
            if b'"jsonrpc"' in body:
                return 400, _rpc_error(None, PARSE_ERROR, err)
            return 400, {"error": err}
        if isinstance(payload, list):       # a JSON-RPC batch of calls
            if not payload:
                call.error = "KIP_1001"
                return 400, _rpc_error(None, INVALID_REQUEST, _kip_error(
                    ErrorCode.KIP_1001, "Empty JSON-RPC batch", "Send at least one call."))
            # The limits of one request hold for the whole body: its calls and their
            # commands count against `max_batch` together, and they share one
            # `request_timeout` (calls that cannot start in time are answered KIP_4001).
            total = sum(_command_count(item) for item in payload)
            limit = self.limits.max_batch
            if total > limit:
                call.error = "KIP_4002"
                return 400, _rpc_error(None, INVALID_REQUEST, _kip_error(
                    ErrorCode.KIP_4002,
                    f"The JSON-RPC batch holds {len(payload)} calls and {total} commands, "
                    f"over the limit of {limit} commands per request",
                    "Split the batch into smaller requests."))
            deadline = asyncio.get_running_loop().time() + self.request_timeout
            answers = []
            for item in payload:
                sub = _Call()       # the same space, key mode and audit log as the body's
                sub.nexus, sub.read_only, sub.audit = call.nexus, call.read_only, call.audit
                _, answer = await self._handle_call(item, sub, deadline)
                call.kinds += sub.kinds
                call.errors += ([sub.error] if sub.error else []) + sub.errors
                call.method = call.method or sub.method
                if answer is not None:
                    answers.append(answer)
            call.batch = True
            return (200, answers) if answers else (204, None)
        return await self._handle_call(payload, call)

    async def _handle_call(self, payload: Any, call: _Call, deadline: float | None = None
                           ) -> tuple[int, Any]:
        framed = isinstance(payload, dict) and "jsonrpc" in payload
        rpc_id = payload.get("id") if framed else None

        def fail(rpc_code: int, message: str, hint: str) -> tuple[int, Any]:
            err = _kip_error(ErrorCode.KIP_1001, message, hint)
            call.error = "KIP_1001"
            return 400, (_rpc_error(rpc_id, rpc_code, err) if framed else {"error": err})

        if not isinstance(payload, dict):
            return fail(INVALID_REQUEST, "The request body must be a JSON object",
                        "Send {\"method\": \"execute_kip\", \"params\": {\"command\": "
                        "\"...\"}}.")
        if framed:
            if payload.get("jsonrpc") != "2.0":
                return fail(INVALID_REQUEST, "`jsonrpc` must be \"2.0\"",
                            "Send \"jsonrpc\": \"2.0\", or leave the key out.")
            if not isinstance(rpc_id, (str, int, type(None))) or isinstance(rpc_id, bool):
                rpc_id = None
                return fail(INVALID_REQUEST, "`id` must be a string, a number or null",
                            "Send a string or integer request id.")
        unknown = sorted(set(payload) - (_RPC_ENVELOPE if framed else _ENVELOPE))
        if unknown:
            return fail(INVALID_REQUEST, f"Unknown request field(s): {', '.join(unknown)}",
                        "A request is {\"method\": \"...\", \"params\": {...}} (plus "
                        "\"jsonrpc\" and \"id\" in JSON-RPC 2.0 framing).")
        method = payload.get("method")
        call.method = method[:64] if isinstance(method, str) else None
        if method not in METHODS:
            if framed and isinstance(method, str) and "id" not in payload:
                return 204, None            # a JSON-RPC notification is never answered
            what = f"Unknown method {method!r}" if isinstance(method, str) else \
                "The request has no `method` string"
            return fail(METHOD_NOT_FOUND if isinstance(method, str) else INVALID_REQUEST,
                        what, f"Use one of: {', '.join(METHODS)}.")
        params = payload.get("params")
        response = await self._run(method, params, call, deadline)
        status = http_status(response)
        call.status = status
        if framed:
            if "id" not in payload:       # a notification: no answer
                return 204, None
            return status, {"jsonrpc": "2.0", "id": rpc_id, "result": response}
        return status, response

    async def _run(self, method: str, params: Any, call: _Call,
                   deadline: float | None = None) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        response: dict[str, Any]
        if method == "list_logs":
            audit = call.audit if call.nexus is not None else self.audit
            if audit is None:
                response = {"result": []}
            else:
                response = await loop.run_in_executor(self.pool, audit.list_logs, params)
            if "error" in response:
                call.error = response["error"]["code"]
            return response
        texts, batch = commands_of(params)
        call.kinds = [command_kind(t) for t in texts]
        call.batch = batch
        nexus = call.nexus if call.nexus is not None else self.nexus
        fn = (nexus.execute_kip if method == "execute_kip" and not call.read_only
              else nexus.execute_kip_readonly)
        arg = params if params is not None else {}
        started_wall, started = time.time(), time.perf_counter()
        response = await self._in_pool(fn, arg, deadline)
        if response is _NOT_STARTED:
            response = {"error": _kip_error(
                ErrorCode.KIP_4001,
                f"Not run: the JSON-RPC batch used up its {self.request_timeout:g} s before "
                f"this call could start",
                "Send fewer or cheaper calls per batch; nothing of this call ran.")}
        elif response is None:
            response = {"error": _kip_error(
                ErrorCode.KIP_4001,
                f"The request did not finish within {self.request_timeout:g} s",
                "Optimize the query (bind a concept by {type, name} first, lower LIMIT, "
                "narrow path ranges) or send fewer commands per batch. A write that had "
                "started completes or rolls back as a whole: check with FIND before "
                "retrying it.")}
        duration = time.perf_counter() - started
        if "error" in response:
            call.error = response["error"].get("code")
        elif batch:
            call.errors = [r["error"].get("code") for r in response.get("result", [])
                           if isinstance(r, dict) and "error" in r]
        audit = call.audit if call.nexus is not None else self.audit
        if audit is not None:
            audit.record(audit_entry(
                method=method, kinds=call.kinds, commands=texts, duration=duration,
                status=http_status(response), response=response,
                batch=batch and "error" not in response, chars=self.audit_chars,
                started=started_wall), started_wall)
        return response

    async def _in_pool(self, fn: Callable, arg: Any, deadline: float | None = None) -> Any:
        """`fn(arg)` in the worker pool; None once `request_timeout` (or the loop time
        `deadline` of a whole JSON-RPC batch) has passed — the thread runs on: a started
        command finishes or rolls back on its own —, `_NOT_STARTED` when `deadline` had
        passed already. A timer is cheaper than `asyncio.wait_for`, which wraps every call
        in a task."""
        loop = asyncio.get_running_loop()
        wait = self.request_timeout
        if deadline is not None:
            wait = deadline - loop.time()
            if wait <= 0:
                return _NOT_STARTED
        future = loop.run_in_executor(self.pool, fn, arg)
        expired = []

        def expire() -> None:
            if not future.done():
                expired.append(True)
                future.cancel()
        timer = loop.call_later(wait, expire)
        try:
            return await future
        except asyncio.CancelledError:
            if expired:
                return None
            raise
        finally:
            timer.cancel()

    # --- access log -----------------------------------------------------------------------
    def _log_access(self, scope: dict, call: _Call, duration: float) -> None:
        line: dict[str, Any] = {"time": iso_time(time.time())}
        client = scope.get("client")
        if client:
            line["client"] = client[0]
        line["http"] = f"{scope['method']} {scope['path']}"
        if call.method:
            line["method"] = call.method
        if call.kinds:
            line["kinds"] = call.kinds
        if call.batch:
            line["batch"] = True
        line["status"] = call.status
        if call.error:
            line["error"] = call.error
        if call.errors:
            line["errors"] = call.errors
        line["duration_ms"] = round(duration * 1000.0, 3)
        log = self.access_log
        if log is None:
            return
        try:
            log.write(orjson.dumps(line) + b"\n")
            log.flush()
        except (OSError, ValueError):   # a closed or broken log stream never fails a request
            pass


_NOT_STARTED = object()
_SPACE_ROUTE = re.compile(r"/v1/([^/]*)/kip/?")
_MODES = ("read", "write", "admin")


def _bearer(scope: dict) -> bytes:
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.partition(b" ")
            return token.strip() if scheme.lower() == b"bearer" else b""
    return b""


class Grant:
    """What one key may do: its spaces (a set, or None for all) and its mode."""

    def __init__(self, spaces: frozenset[str] | None, mode: str) -> None:
        self.spaces, self.mode = spaces, mode

    def covers(self, name: str) -> bool:
        return self.spaces is None or name in self.spaces


class Keys:
    """The `--keys FILE` table, `{"<key>": {"spaces": [...] | "*", "mode": ...}}`;
    `reload()` rereads it (SIGHUP), keeping the old table if the file is now invalid."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.table: dict[bytes, Grant] = {}
        self.reload(strict=True)

    def reload(self, strict: bool = False) -> None:
        try:
            with open(self.path, "rb") as f:
                raw = json.loads(f.read())
            table: dict[bytes, Grant] = {}
            if not isinstance(raw, dict):
                raise ValueError("the keys file must be a JSON object")
            for key, entry in raw.items():
                if not isinstance(entry, dict) or not key.strip():
                    raise ValueError(f"bad entry for a key in {self.path}")
                spaces, mode = entry.get("spaces"), entry.get("mode", "read")
                if mode not in _MODES:
                    raise ValueError(f"mode must be one of {_MODES}, not {mode!r}")
                if spaces == "*":
                    table[key.strip().encode()] = Grant(None, mode)
                elif isinstance(spaces, list) and all(isinstance(s, str) for s in spaces):
                    table[key.strip().encode()] = Grant(frozenset(spaces), mode)
                else:
                    raise ValueError('"spaces" must be a list of names or "*"')
        except (OSError, ValueError) as exc:
            if strict:
                raise ValueError(f"cannot read the keys file {self.path}: {exc}") from None
            sys.stderr.write(f"nexus: keys not reloaded, {self.path}: {exc}\n")
            return
        self.table = table

    def grant(self, given: bytes) -> Grant | None:
        found = None
        for key, grant in self.table.items():
            if hmac.compare_digest(given, key):
                found = grant
        return found


def _command_count(item: Any) -> int:
    """How many commands one call of a JSON-RPC batch carries (1 unless it is an
    execute_kip call with a `commands` array)."""
    params = item.get("params") if isinstance(item, dict) else None
    commands = params.get("commands") if isinstance(params, dict) else None
    return len(commands) if isinstance(commands, list) else 1


def _rpc_error(rpc_id: Any, code: int, kip_error: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id,
            "error": {"code": code, "message": kip_error["message"], "data": kip_error}}


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
          keys: str | None = None) -> int:
    """Open the nexus at `db` and serve it until SIGTERM/SIGINT; returns the exit status.

    With `spaces` (a directory) it serves `POST /v1/{space}/kip` over the spaces in it
    instead (`nexus.spaces`; `auto_create`: a write to a missing space creates it; at most
    `max_open_spaces` open at once); `keys` is a keys file (docs/server.md), reread on SIGHUP.

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

    _api_key(api_key)       # a key of only whitespace stops the start (ValueError)
    key_table = Keys(keys) if keys else None
    if not api_key and not key_table and not allow_remote and not is_loopback(host):
        raise ValueError(f"refusing to listen on {host} without an API key: set --api-key "
                         f"(or KIP_API_KEY), or pass --allow-remote to serve it unauthenticated")
    options: dict[str, Any] = {"bootstrap": bootstrap, "durable": durable, **(limits or {})}
    if timeout is not None:
        options["query_timeout"] = timeout
    if max_body is not None:
        options["max_body_bytes"] = max_body
    sock = _bind(host, port)
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
    else:
        os.makedirs(db, exist_ok=True)
        nexus = Nexus.open(db, **options)
    log_stream: BinaryIO | None = None
    if access_log == "-":
        log_stream = sys.stderr.buffer
    elif access_log:
        log_stream = open(access_log, "ab")
    app = KipApp(nexus, api_key=api_key, request_timeout=request_timeout,
                 access_log=log_stream, threads=threads, audit=audit, owns_nexus=True,
                 spaces=registry, keys=key_table)
    if key_table is not None:
        import signal
        signal.signal(signal.SIGHUP, lambda *_: key_table.reload())
    config = uvicorn.Config(app, lifespan="on", access_log=False, log_level=log_level,
                            http=_http_protocol(http), loop=loop,
                            server_header=False, timeout_graceful_shutdown=int(max(
                                30.0, app.request_timeout + 5)))
    server = _Server(config, app)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    out = announce or sys.stderr.buffer
    out.write(f"nexus {__version__}: serving {os.path.abspath(db)} on "
              f"http://{shown}:{bound_port}"
              f"{'/v1/{space}/kip' if registry else '/kip'}\n".encode())
    out.flush()
    try:
        server.run(sockets=[sock])
    finally:
        app.close()
        sock.close()
        if log_stream is not None and log_stream is not sys.stderr.buffer:
            log_stream.close()
    return 0


_BAD_HTTP = _dumps({"error": KipError(
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

    KipProtocol.__name__ = f"Kip{base.__name__}"
    return KipProtocol


def _server_class():
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, telling the app when shutdown starts (so new requests on kept
        connections get 503) and exiting 0 after a graceful shutdown on SIGTERM instead of
        re-raising the signal."""

        def __init__(self, config: Any, app: KipApp) -> None:
            super().__init__(config)
            self.kip_app = app

        def handle_exit(self, sig: int, frame: Any) -> None:
            self.kip_app.shutting_down = True
            super().handle_exit(sig, frame)
            if hasattr(self, "_captured_signals"):
                self._captured_signals.clear()

    return Server


def _Server(config: Any, app: KipApp) -> Any:
    return _server_class()(config, app)
