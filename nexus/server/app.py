"""The ASGI application of `kip serve` (nexus.server): `POST /kip`, `GET /` and `GET /healthz`;
Bearer auth checked before any body byte is read; the body size limit (413); the plain and
the JSON-RPC 2.0 framings, batches and notifications; method dispatch to the thread pool
(a short FIND seen cheap before is tried on the loop first, `INLINE_BUDGET`);
the per-request timeout (KIP_4001); 503 while shutting down; the access log and the audit
records. The `/v1` routes of `--spaces` come from `SpaceRoutes`
(nexus/server/spaces_routes.py); the framing's building blocks from nexus/server/wire.py.
"""
from __future__ import annotations

import asyncio
import gc
import hmac
import time
from typing import Any, BinaryIO, Callable

import orjson

from ..api import KIP_VERSION, __version__, audit_entry, iso_time
from ..config import Config
from ..errors import ErrorCode, KipError
from ..spaces import Spaces
from .pool import WorkerPool
from .spaces_routes import SPACE_ROUTE, Keys, SpaceRoutes
from .workers import Owner, needs_owner
from .wire import (ENVELOPE, INVALID_REQUEST, METHOD_NOT_FOUND, METHODS, PARSE_ERROR,
                   RPC_ENVELOPE, Call, Disconnected, RawJson, Reject, command_count, command_kind,
                   commands_of, dumps, http_status, key_bytes, kip_error, loads, out_of_memory,
                   rpc_error)

# Worker threads: enough that cheap requests find one free while slow ones run (slow reads
# wait for a heavy slot asleep, see nexus.exec.admission); `kip serve --threads N`.
DEFAULT_THREADS = 64
# A single FIND of a short text that was answered within `INLINE_BUDGET` before is run on the
# event loop under that time budget: a point read (~35 µs of engine work) then costs no hop to
# a worker thread and back (that hop was most of the server's CPU per request beside the HTTP
# work). One that is not done within the budget stops at its next deadline check and runs
# again in the pool as before — but deadline checks can be far apart in a big join (a
# self-join of 450 items ran ~150-400 ms before its first one), so a text is tried inline
# only once it has been seen cheap in the pool; once it overran on the loop, not again with
# the same parameter values (a hub's may be dear where others' are cheap: bench/http_bench.py
# --mix's Q2 and Q3 on "Headache"), and not at all after `INLINE_STRIKES` overruns — one
# overrun used to end it for every parameter value, so that on a loaded machine a third of
# the mix's FINDs went through the pool for good after one slow moment each.
# SEARCH (which may embed text without a deadline check) and long texts (a first parse may
# take a while) always go to the pool. `INLINE_TEXTS` bounds the texts (and the
# text-and-parameters pairs) remembered.
INLINE_BUDGET = 0.002
INLINE_TEXT = 2048
INLINE_TEXTS = 4096
INLINE_STRIKES = 8
_NOT_STARTED = object()


class KipApp(SpaceRoutes):
    """The ASGI application. `nexus` is an open `Nexus`; the app closes it on lifespan
    shutdown only if `owns_nexus`."""

    def __init__(self, nexus: Any, *, api_key: str | None = None,
                 max_body: int | None = None, request_timeout: float | None = None,
                 access_log: BinaryIO | None = None, audit: Any = True,
                 threads: int | None = None, owns_nexus: bool = False,
                 spaces: Spaces | None = None, keys: Keys | None = None,
                 owner: Owner | None = None, audit_intake: bool = False) -> None:
        """`nexus` may be None when `spaces` is given (then only /v1/{space}/kip serves).
        `audit`: True (the nexus's `AuditLog`), an audit log, or None/False (none).
        `owner`: this app is a `--workers` follower that forwards to that owner what it
        does not answer itself; `audit_intake`: this app is the owner, and records the
        audit entries its followers send (nexus.server.workers)."""
        self.spaces, self.keys = spaces, keys
        self.owner, self.audit_intake = owner, audit_intake
        self.nexus = nexus
        config = (nexus.config if nexus is not None
                  else Config.from_options(**(spaces.options if spaces else {})))
        limits = self.limits = config.limits
        self.api_key = key_bytes(api_key)
        self.max_body = max_body if max_body is not None else limits.max_body_bytes
        self.request_timeout = (request_timeout if request_timeout is not None
                                else max(60.0, 2 * limits.query_timeout))
        if owner is not None:       # the owner answers within the same bound (408 past it)
            owner.timeout = self.request_timeout + 5.0
        self.access_log = access_log
        self._log_pending: list[bytes] = []     # access-log lines not written yet
        if audit is True:
            audit = nexus.audit_log() if nexus is not None else None
        self.audit: Any = audit or None         # an AuditLog, or a follower's RemoteAudit
        self.audit_chars = config.audit_command_chars
        self.pool = WorkerPool(threads or DEFAULT_THREADS, thread_name_prefix="nexus-kip")
        # FIND texts: True = answered within INLINE_BUDGET in the pool (tried on the loop
        # from then on), False = overran its budget on the loop INLINE_STRIKES times (never
        # tried there again); `dear`: (text, parameter values) that overran on the loop,
        # `strikes`: overruns by text
        self.cheap: dict[str, bool] = {}
        self.dear: dict[tuple[str, Any], None] = {}
        self.strikes: dict[str, int] = {}
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
        self._flush_log()
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
        call = Call()
        headers: list[tuple[bytes, bytes]] = []
        try:
            status, payload, headers = await self._route(scope, receive, call)
        except Reject as rej:
            status, payload, headers = rej.status, {"error": rej.error}, rej.headers
            call.error = rej.error["code"]
        except Disconnected:
            return
        except Exception as exc:  # noqa: BLE001 - nothing but a KIP response leaves
            status = 500
            payload = {"error": KipError(ErrorCode.KIP_4003,
                                         f"Internal error: {type(exc).__name__}: {exc}").to_dict()}
            call.error = "KIP_4003"
        status, body = self.encode(status, payload, call)
        out = [(b"content-type", b"application/json")] if body else []
        out.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": status,
                    "headers": out + headers})
        await send({"type": "http.response.body", "body": body})
        if self.access_log is not None and scope["path"] != "/_audit":
            self.log_access(scope.get("client"), scope["method"], scope["path"], call,
                            time.perf_counter() - started)

    def encode(self, status: int, payload: Any, call: Call) -> tuple[int, bytes]:
        """(HTTP status, body) of an answer: JSON, or a KIP error when it cannot be encoded
        (`call` records the status and error sent)."""
        call.status = status
        try:
            body = (b"" if payload is None else payload.data if isinstance(payload, RawJson)
                    else dumps(payload))
        except MemoryError:
            status, call.status, call.error = 400, 400, "KIP_4002"
            body = dumps({"error": out_of_memory("encoding the response")})
        except (TypeError, ValueError) as exc:  # a KIP response, even when encoding fails
            status, call.status, call.error = 500, 500, "KIP_4003"
            body = dumps({"error": KipError(ErrorCode.KIP_4003, f"Internal error: the "
                                             f"response cannot be encoded: {exc}").to_dict()})
        return status, body

    async def _route(self, scope: dict, receive: Callable, call: Call
                     ) -> tuple[int, Any, list[tuple[bytes, bytes]]]:
        path, verb = scope["path"], scope["method"]
        if path in ("/kip", "/kip/") and self.nexus is not None:
            if verb != "POST":
                raise Reject(405, kip_error(ErrorCode.KIP_1001,
                                              f"{verb} /kip is not allowed",
                                              "Send requests as POST /kip with a JSON body."),
                              [(b"allow", b"POST")])
            self.admit(scope["headers"])
            body = await self._read_body(scope, receive)
            status, payload = await self._handle_body(body, call, scope["headers"])
            return status, payload, []
        if path == "/_audit" and self.audit_intake and verb == "POST" and \
                _on_unix_socket(scope):             # only on the owner's Unix socket
            self._check_auth(scope["headers"])
            entries = loads(await self._read_body(scope, receive))
            if self.audit is not None:
                for ts, item in entries:
                    self.audit.record(item, ts)
            return 204, None, []
        if self.spaces is not None and (path == "/v1/admin/spaces"
                                        or path.startswith("/v1/admin/spaces/")):
            return await self.route_admin(path[len("/v1/admin/spaces/"):], scope, receive)
        space = SPACE_ROUTE.fullmatch(path)
        if space is not None and self.spaces is not None:
            return await self.route_space(space.group(1), scope, receive, call)
        if self.spaces is not None and path.startswith("/v1/") and path.rstrip("/").endswith(
                "/kip"):            # a name with a slash (or a decoded %2F): not a space
            raise Reject(400, kip_error(
                ErrorCode.KIP_1001, f"Invalid space name {path.rstrip('/')[4:-4][:80]!r}",
                "A space name is 1-63 characters of a-z, 0-9, '_' and '-', starting with a "
                "letter or a digit."))
        if verb not in ("GET", "HEAD") or path not in ("/", "/healthz"):
            raise Reject(404, kip_error(ErrorCode.KIP_1001, f"No route {verb} {path}",
                                          "KIP requests go to POST /kip; GET / describes the "
                                          "server and GET /healthz reports health."))
        if path == "/healthz":
            if self.shutting_down:
                return 503, {"status": "shutting_down"}, []
            return 200, {"status": "ok"}, []
        return 200, {"name": "nexus", "version": __version__, "kip_version": KIP_VERSION}, []

    # --- POST /kip, as the ASGI route and the lean protocol (nexus.server.lean) run it ---
    def admit(self, headers: list[tuple[bytes, bytes]]) -> None:
        """Raise the `Reject` of a `POST /kip` that is refused before its body is read:
        503 while shutting down, 401 without the API key, 413 when its declared
        Content-Length is over the limit (400 when that is not a number)."""
        if self.shutting_down:
            raise Reject(503, kip_error(ErrorCode.KIP_4003,
                                          "The server is shutting down",
                                          "Retry the request in a moment."),
                          [(b"connection", b"close"), (b"retry-after", b"1")])
        self._check_auth(headers)
        self._check_length(headers)

    async def answer_kip(self, body: bytes, call: Call, headers: list[tuple[bytes, bytes]]
                         ) -> tuple[int, Any, list[tuple[bytes, bytes]]]:
        """(status, payload, extra headers) of an admitted `POST /kip` whose body is
        `body`: what `__call__` answers for it, refusals and internal errors included."""
        try:
            status, payload = await self._handle_body(body, call, headers)
            return status, payload, []
        except Reject as rej:
            call.error = rej.error["code"]
            return rej.status, {"error": rej.error}, rej.headers
        except Exception as exc:  # noqa: BLE001 - nothing but a KIP response leaves
            call.error = "KIP_4003"
            return 500, {"error": KipError(
                ErrorCode.KIP_4003, f"Internal error: {type(exc).__name__}: {exc}").to_dict()}, []

    async def _forward(self, headers: list[tuple[bytes, bytes]], body: bytes
                       ) -> tuple[int, Any]:
        """A follower's answer to what only the owner answers: the owner's own."""
        auth = next((v for n, v in headers if n == b"authorization"), None)
        assert self.owner is not None
        try:
            answer = await self._in_pool(self.owner.forward, (body, auth))
        except OSError as exc:
            raise Reject(503, kip_error(
                ErrorCode.KIP_4003, f"The server's owner process cannot be reached: {exc}",
                "Retry in a moment; a write that was sent may have been applied: check "
                "with FIND before retrying it."), [(b"retry-after", b"1")]) from None
        if answer is None or answer is _NOT_STARTED:
            raise Reject(408, kip_error(
                ErrorCode.KIP_4001,
                f"The request did not finish within {self.request_timeout:g} s",
                "A write that had started completes or rolls back as a whole: check with "
                "FIND before retrying it."))
        status, raw = answer
        return status, RawJson(raw)

    def _check_auth(self, headers: list[tuple[bytes, bytes]]) -> None:
        """Raise 401 unless `headers` carry `Authorization: Bearer <the API key>` (when
        the server has one)."""
        if self.api_key is None:
            return
        given = b""
        for name, value in headers:
            if name == b"authorization":
                scheme, _, token = value.partition(b" ")
                if scheme.lower() == b"bearer":
                    given = token.strip()
                break
        if not given or not hmac.compare_digest(given, self.api_key):
            raise Reject(401, kip_error(
                ErrorCode.KIP_4003,
                "Unauthorized: missing or invalid API key" if given or any(
                    n == b"authorization" for n, _ in headers)
                else "Unauthorized: this server requires an API key",
                "Send the header `Authorization: Bearer <key>` with the key the server was "
                "started with (--api-key or KIP_API_KEY)."),
                [(b"www-authenticate", b'Bearer realm="kip"'), (b"connection", b"close")])

    def _check_length(self, headers: list[tuple[bytes, bytes]]) -> None:
        for name, value in headers:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    raise Reject(400, kip_error(ErrorCode.KIP_1001,
                                                  "Invalid Content-Length header")) from None
                if declared > self.max_body:
                    raise self.too_large(declared)

    async def _read_body(self, scope: dict, receive: Callable) -> bytes:
        self._check_length(scope["headers"])
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise Disconnected()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                raise self.too_large(size, at_least=True)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def too_large(self, size: int, at_least: bool = False) -> Reject:
        return Reject(413, kip_error(
            ErrorCode.KIP_4002,
            f"The request body is {'over ' if at_least else ''}{size} bytes, over the limit "
            f"of {self.max_body} bytes",
            "Send smaller requests: split a large batch, or load big capsules with "
            "`kip load`."), [(b"connection", b"close")])

    # --- JSON-RPC -------------------------------------------------------------------------
    async def _handle_body(self, body: bytes, call: Call,
                           headers: list[tuple[bytes, bytes]] | None = None
                           ) -> tuple[int, Any]:
        """The answer to a `/kip` body; a follower forwards to the owner what only the owner
        answers (`headers`: the request's, for its Authorization header), the body read
        once."""
        try:
            payload = loads(body)
        except MemoryError:
            call.error = "KIP_4002"
            return 400, {"error": out_of_memory("reading the request body")}
        except (ValueError, UnicodeDecodeError) as exc:
            err = kip_error(ErrorCode.KIP_1001, f"The request body is not valid JSON: {exc}",
                             "Send a JSON object: {\"method\": \"execute_kip\", \"params\": "
                             "{\"command\": \"...\"}}.")
            call.error = "KIP_1001"
            if b'"jsonrpc"' in body:
                return 400, rpc_error(None, PARSE_ERROR, err)
            return 400, {"error": err}
        if self.owner is not None and headers is not None and (
                needs_owner(payload) or self.owner.holds_newer_data()):
            return await self._forward(headers, body)
        if isinstance(payload, list):       # a JSON-RPC batch of calls
            if not payload:
                call.error = "KIP_1001"
                return 400, rpc_error(None, INVALID_REQUEST, kip_error(
                    ErrorCode.KIP_1001, "Empty JSON-RPC batch", "Send at least one call."))
            # The limits of one request hold for the whole body: its calls and their
            # commands count against `max_batch` together, and they share one
            # `request_timeout` (calls that cannot start in time are answered KIP_4001).
            total = sum(command_count(item) for item in payload)
            limit = self.limits.max_batch
            if total > limit:
                call.error = "KIP_4002"
                return 400, rpc_error(None, INVALID_REQUEST, kip_error(
                    ErrorCode.KIP_4002,
                    f"The JSON-RPC batch holds {len(payload)} calls and {total} commands, "
                    f"over the limit of {limit} commands per request",
                    "Split the batch into smaller requests."))
            deadline = asyncio.get_running_loop().time() + self.request_timeout
            answers = []
            for item in payload:
                sub = Call()       # the same space, key mode and audit log as the body's
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

    async def _handle_call(self, payload: Any, call: Call, deadline: float | None = None
                           ) -> tuple[int, Any]:
        framed = isinstance(payload, dict) and "jsonrpc" in payload
        rpc_id = payload.get("id") if framed else None

        def fail(rpc_code: int, message: str, hint: str) -> tuple[int, Any]:
            err = kip_error(ErrorCode.KIP_1001, message, hint)
            call.error = "KIP_1001"
            return 400, (rpc_error(rpc_id, rpc_code, err) if framed else {"error": err})

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
        unknown = sorted(set(payload) - (RPC_ENVELOPE if framed else ENVELOPE))
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

    async def _run(self, method: str, params: Any, call: Call,
                   deadline: float | None = None) -> dict[str, Any]:
        response: dict[str, Any]
        if method == "list_logs":
            audit = call.audit if call.nexus is not None else self.audit
            if audit is None:
                response = {"result": []}
            else:
                response = await asyncio.get_running_loop().run_in_executor(
                    self.pool, audit.list_logs, params)
            if "error" in response:
                call.error = response["error"]["code"]
            return response
        texts, batch = commands_of(params)
        call.kinds = [command_kind(t) for t in texts]
        call.batch = batch
        nexus = call.nexus if call.nexus is not None else self.nexus
        writable = method == "execute_kip" and not call.read_only
        fn = nexus.execute_kip if writable else nexus.execute_kip_readonly
        arg = params if params is not None else {}
        started_wall, started = time.time(), time.perf_counter()
        inline, text = None, None
        if call.kinds == ["KQL"] and not batch and len(texts[0]) <= INLINE_TEXT and \
                "SEARCH" not in texts[0]:
            text = texts[0]
            within = getattr(nexus, "execute_kip_within", None)
            if within is not None and self.cheap.get(text):
                pair = (text, _values_of(arg)) if self.dear else None
                if pair is None or pair not in self.dear:
                    inline = within(arg, INLINE_BUDGET, readonly=not writable)
                    if inline is None:
                        self._overran(text, arg)
        if inline is not None:
            response = inline
        else:
            response = await self._in_pool(fn, arg, deadline)
            if text is not None and text not in self.cheap and \
                    len(self.cheap) < INLINE_TEXTS and \
                    time.perf_counter() - started <= INLINE_BUDGET:
                self.cheap[text] = True
        if response is _NOT_STARTED:
            response = {"error": kip_error(
                ErrorCode.KIP_4001,
                f"Not run: the JSON-RPC batch used up its {self.request_timeout:g} s before "
                f"this call could start",
                "Send fewer or cheaper calls per batch; nothing of this call ran.")}
        elif response is None:
            response = {"error": kip_error(
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

    def _overran(self, text: str, arg: Any) -> None:
        """`text` with `arg`'s parameters overran its budget on the loop: not tried there
        again with those values; after INLINE_STRIKES overruns, never again."""
        strikes = self.strikes.get(text, 0) + 1
        values = _values_of(arg)
        if strikes >= INLINE_STRIKES or values is None or len(self.dear) >= INLINE_TEXTS or \
                (text not in self.strikes and len(self.strikes) >= INLINE_TEXTS):
            self.cheap[text] = False
            return
        self.strikes[text] = strikes
        self.dear[(text, values)] = None

    async def _in_pool(self, fn: Callable, arg: Any, deadline: float | None = None) -> Any:
        """`fn(arg)` in the worker pool; None once `request_timeout` (or the loop time
        `deadline` of a whole JSON-RPC batch) has passed — the thread runs on: a started
        command finishes or rolls back on its own —, `_NOT_STARTED` when `deadline` had
        passed already. A timer is cheaper than `asyncio.wait_for`, which wraps every call
        in a task; `WorkerPool.call` is cheaper than `run_in_executor` (nexus.server.pool)."""
        loop = asyncio.get_running_loop()
        wait = self.request_timeout
        if deadline is not None:
            wait = deadline - loop.time()
            if wait <= 0:
                return _NOT_STARTED
        future = self.pool.call(loop, fn, arg)
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
    def log_access(self, client: Any, verb: str, path: str, call: Call,
                   duration: float) -> None:
        """One access-log line: `client` is the (host, port) answered, `verb` and `path`
        the request's."""
        line: dict[str, Any] = {"time": iso_time(time.time())}
        if client:
            line["client"] = client[0]
        line["http"] = f"{verb} {path}"
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
        if self.access_log is None:
            return
        # The lines of the answers of one turn of the event loop are written together, at
        # the start of its next turn (one write and flush instead of one per request: a
        # system call each, ~10 us per request under bench/http_bench.py).
        pending = self._log_pending
        pending.append(orjson.dumps(line) + b"\n")
        if len(pending) == 1:
            try:
                asyncio.get_running_loop().call_soon(self._flush_log)
            except RuntimeError:            # not on the loop: now
                self._flush_log()

    def _flush_log(self) -> None:
        lines, self._log_pending = self._log_pending, []
        log = self.access_log
        if not lines or log is None:
            return
        try:
            log.write(b"".join(lines))
            log.flush()
        except (OSError, ValueError):   # a closed or broken log stream never fails a request
            pass


def _values_of(arg: Any) -> Any:
    """A request's parameter values as a hashable key (None when they are not: a list or
    an object as a value)."""
    params = arg.get("parameters") if isinstance(arg, dict) else None
    if not params:
        return ()
    if not isinstance(params, dict):
        return None
    try:
        key = tuple(sorted(params.items()))
        hash(key)
    except TypeError:
        return None
    return key


def _on_unix_socket(scope: dict) -> bool:
    """Whether the request came through a Unix socket (uvicorn's `server` is then
    `(path, None)`; `(host, port)` on TCP)."""
    server = scope.get("server")
    return isinstance(server, (tuple, list)) and len(server) == 2 and server[1] is None
