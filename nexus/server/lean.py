"""The lean path of `kip serve` for `POST /kip` (nexus.server): uvicorn's httptools protocol,
but a `POST /kip` request goes from the parser's callbacks straight to the app's KIP handling
— `KipApp.admit` on its headers, the body gathered under the size limit, `KipApp.answer_kip`
on it, the answer's head and body written in one `transport.write`, `KipApp.log_access` —
without uvicorn's ASGI cycle for it: no scope or message dicts, no receive/send coroutines,
no asyncio task or event per request, no routing (bench/RESULTS.md "## HTTP server",
s17-lean: that cycle was about a fifth of the server's CPU per point FIND). The
answer is awaited by stepping `answer_kip`'s coroutine from the parser callback itself: a
FIND answered on the event loop (`app.INLINE_BUDGET`) is done before the callback returns;
one that waits for the worker pool resumes from the pool future's done-callback.

Everything else a connection carries (other routes and verbs, `/kip?query`, upgrades) goes
through uvicorn and the ASGI app as before, and a pipelined connection keeps its order: a
request starts once the one before it was answered, whichever path each takes. What the
ASGI route does, this does: the refusals before any body byte is read (503 while shutting
down, 401, 413 on a declared length; the connection closed after them), `Expect:
100-continue` answered once admitted, chunked bodies, the body limit as the body arrives
(413), keep-alive and HTTP/1.0, uvicorn's default headers (`date`), the access log with a
trusted proxy's `X-Forwarded-For` client, graceful shutdown (uvicorn closes idle
connections; one answering closes after its answer). The app's handling — JSON-RPC,
the audit, the worker pool and its timeout, a follower's forwarding — is the same code
for both paths. The adapter holds no engine logic.
"""
from __future__ import annotations

import time
from typing import Any, Coroutine

from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
from uvicorn.protocols.http.httptools_impl import STATUS_LINE

from ..errors import ErrorCode, KipError
from .app import KipApp
from .wire import Call, Reject

_KIP_URLS = (b"/kip", b"/kip/")
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class _NoEvent:
    """What uvicorn's protocol sets when a connection is lost (`cycle.message_event`):
    nothing waits on a lean request's."""

    __slots__ = ()

    def set(self) -> None:
        pass


_NO_EVENT = _NoEvent()


class _Request:
    """One `POST /kip` on the lean path, in the protocol's `cycle` slot: the attributes
    uvicorn's protocol reads of a cycle (`response_complete`, `keep_alive`,
    `disconnected`, `message_event`) mean what they mean on its own cycles."""

    __slots__ = ("headers", "path", "keep_alive", "expect_continue", "chunks", "size",
                 "complete", "started", "refused", "response_complete", "disconnected",
                 "began")
    message_event = _NO_EVENT

    def __init__(self, headers: list[tuple[bytes, bytes]], path: str, keep_alive: bool,
                 expect_continue: bool) -> None:
        self.headers, self.path = headers, path
        self.keep_alive, self.expect_continue = keep_alive, expect_continue
        self.chunks: list[bytes] = []
        self.size = 0
        self.complete = False          # the whole body has arrived
        self.started = False           # its turn on the connection has come
        self.refused = False           # answered before its body was read: the rest is dropped
        self.response_complete = False
        self.disconnected = False
        self.began = 0.0


def with_lean_kip(base: type) -> type:
    """`base` (uvicorn's httptools protocol, as `kip serve` extends it) answering `POST
    /kip` on the lean path (module doc)."""

    class LeanKipProtocol(base):
        cycle: Any          # uvicorn's cycle of the last request read, or a `_Request`

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            app, trusted = self.app, None
            while app is not None and not isinstance(app, KipApp):
                if isinstance(app, ProxyHeadersMiddleware):
                    trusted = app.trusted_hosts
                app = getattr(app, "app", None)
            # Only a server of one database answers /kip itself (`--spaces` has no /kip),
            # and uvicorn's concurrency limit, when set, is left to uvicorn.
            self.kip: KipApp | None = (app if app is not None and app.nexus is not None
                                       and self.limit_concurrency is None else None)
            self.trusted = trusted

        # --- the parser's callbacks ---------------------------------------------------------
        def on_message_begin(self) -> None:
            # (uvicorn's scope is built only for a request the ASGI app answers)
            self.url = b""
            self.expect_100_continue = False
            headers: list[tuple[bytes, bytes]] = []
            self.headers = headers

        def on_headers_complete(self) -> None:
            parser = self.parser
            if self.kip is None or self.url not in _KIP_URLS or \
                    parser.get_method() != b"POST" or parser.should_upgrade():
                url, headers, expect = self.url, self.headers, self.expect_100_continue
                super().on_message_begin()
                self.url, self.headers, self.expect_100_continue = url, headers, expect
                self.scope["headers"] = headers
                super().on_headers_complete()
                return
            request = _Request(self.headers, self.url.decode("ascii"),
                               parser.get_http_version() != "1.0" and
                               parser.should_keep_alive(), self.expect_100_continue)
            previous = self.cycle
            self.cycle = request
            if self.transport.is_closing():     # after a refusal in the same data
                request.refused = request.response_complete = True
            elif previous is None or previous.response_complete:
                self._lean_start(request)
            else:                               # pipelined: after the one before it
                self.flow.pause_reading()
                self.pipeline.appendleft((request, None))

        def on_body(self, body: bytes) -> None:
            request: Any = self.cycle
            if type(request) is not _Request:
                super().on_body(body)
                return
            if request.refused:
                return
            request.size += len(body)
            assert self.kip is not None
            if request.size > self.kip.max_body:
                request.chunks = []
                if request.started:
                    self._lean_refuse(request, self.kip.too_large(request.size, True))
                return
            request.chunks.append(body)

        def on_message_complete(self) -> None:
            request: Any = self.cycle
            if type(request) is not _Request:
                super().on_message_complete()
                return
            if request.refused:
                return
            request.complete = True
            if request.started:
                self._lean_run(request)

        def _start_asgi_task(self, cycle: Any, app: Any) -> None:
            # The next pipelined request, once the one before it was answered. A lean one
            # starts from the loop, not inside that answer's call chain: a long pipeline
            # answered on the loop would otherwise nest a call per request.
            if type(cycle) is _Request:
                self.loop.call_soon(self._lean_start, cycle)
            else:
                super()._start_asgi_task(cycle, app)

        # --- a lean request --------------------------------------------------------------
        def _lean_start(self, request: _Request) -> None:
            """Its turn has come: the refusals before the body, then the body's run."""
            request.started = True
            request.began = time.perf_counter()
            kip = self.kip
            assert kip is not None
            try:
                kip.admit(request.headers)
            except Reject as rej:
                self._lean_refuse(request, rej)
                return
            if request.size > kip.max_body:
                self._lean_refuse(request, kip.too_large(request.size, True))
            elif request.complete:
                self._lean_run(request)
            elif request.expect_continue and not self.transport.is_closing():
                self.transport.write(_CONTINUE)

        def _lean_refuse(self, request: _Request, rej: Reject) -> None:
            request.refused = True
            call = Call()
            call.error = rej.error["code"]
            self._lean_answer(request, call, rej.status, {"error": rej.error}, rej.headers)

        def _lean_run(self, request: _Request) -> None:
            chunks = request.chunks
            body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            request.chunks = []
            call = Call()
            assert self.kip is not None
            self._lean_step(request, call, self.kip.answer_kip(body, call, request.headers))

        def _lean_step(self, request: _Request, call: Call,
                       coro: Coroutine[Any, Any, tuple[int, Any, list[tuple[bytes, bytes]]]]
                       ) -> None:
            """Run `coro` (the app's answer) until it waits for a future, to be resumed
            when that is done — what an asyncio task would do, without making one."""
            try:
                waited = coro.send(None)
            except StopIteration as done:
                status, payload, extra = done.value
                self._lean_answer(request, call, status, payload, extra)
                return
            except BaseException as exc:  # noqa: BLE001 - a KIP answer, and the connection closed
                request.keep_alive = False
                call.error = "KIP_4003"
                self._lean_answer(request, call, 500, {"error": KipError(
                    ErrorCode.KIP_4003, f"Internal error: {type(exc).__name__}: {exc}"
                ).to_dict()}, [])
                return
            if waited is None:                      # a bare yield (asyncio.sleep(0))
                self.loop.call_soon(self._lean_step, request, call, coro)
            else:
                waited._asyncio_future_blocking = False
                waited.add_done_callback(lambda _: self._lean_step(request, call, coro))

        def _lean_answer(self, request: _Request, call: Call, status: int, payload: Any,
                         extra: list[tuple[bytes, bytes]]) -> None:
            kip = self.kip
            assert kip is not None
            status, body = kip.encode(status, payload, call)
            head = [STATUS_LINE[status]]
            for name, value in self.server_state.default_headers:
                head += [name, b": ", value, b"\r\n"]
            if body:
                head.append(b"content-type: application/json\r\n")
            head.append(b"content-length: %d\r\n" % len(body))
            keep_alive = request.keep_alive
            for name, value in extra:
                head += [name, b": ", value, b"\r\n"]
                if name == b"connection" and b"close" in value.lower():
                    keep_alive = False
            if not keep_alive and not any(name == b"connection" for name, _ in extra):
                head.append(b"connection: close\r\n")
            head += [b"\r\n", body]
            data = b"".join(head)
            if self.flow.write_paused and not self.transport.is_closing():
                # the client reads slower than it asks: this answer waits for the buffer
                # to drain, and the connection's next request waits for this answer
                task = self.loop.create_task(self._lean_drain(request, data, keep_alive))
                task.add_done_callback(self.tasks.discard)
                self.tasks.add(task)
            else:
                self._lean_write(request, data, keep_alive)
            if kip.access_log is not None:
                kip.log_access(self._lean_client(request), "POST", request.path, call,
                               time.perf_counter() - request.began)

        async def _lean_drain(self, request: _Request, data: bytes, keep_alive: bool) -> None:
            await self.flow.drain()
            self._lean_write(request, data, keep_alive)

        def _lean_write(self, request: _Request, data: bytes, keep_alive: bool) -> None:
            transport = self.transport
            if not transport.is_closing():
                transport.write(data)
                if not keep_alive or not request.keep_alive:
                    transport.close()
            request.response_complete = True
            self.on_response_complete()

        def _lean_client(self, request: _Request) -> Any:
            """The client of the access log: a trusted proxy's `X-Forwarded-For` client, as
            uvicorn's proxy-headers middleware gives the ASGI app."""
            client = self.client
            trusted = self.trusted
            if trusted is not None and client and client[0] in trusted:
                forwarded = [v for n, v in request.headers if n == b"x-forwarded-for"]
                if forwarded:
                    host, port = trusted.get_trusted_client_address(
                        b", ".join(forwarded).decode("latin1"))
                    if host:
                        return host, port
            return client

    LeanKipProtocol.__name__ = f"Lean{base.__name__}"
    return LeanKipProtocol
