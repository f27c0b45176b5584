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

Concurrency: methods run on worker threads (`pool`), but for a single short FIND seen cheap
before, which the event loop answers itself if it is done within 2 ms (else it moves to a
thread, and that text stays there; `app.INLINE_BUDGET`). The engine is
thread-safe (LMDB snapshots for reads, one write lock), so reads run in parallel with one
writer. A request that outlives `request_timeout` is answered 408 while its thread runs on:
threads are never killed, so a write that has started commits or rolls back as a whole (each
command is one store transaction) — never half-applied.

The package: `wire` (the envelope, JSON bodies, KIP errors and HTTP status, the refusals
raised before a method runs), `app` (`KipApp`, the ASGI app: `/kip`, the framings, dispatch
to the worker threads, timeouts, the access log and the audit), `lean` (`POST /kip` answered
from uvicorn's httptools protocol without the ASGI cycle, by the same `KipApp` handling),
`pool` (the worker threads),
`spaces_routes` (the keys file and the `/v1/{space}/kip`, `/v1/admin/spaces` routes of
`--spaces`), `workers` (`--workers N`: the owner and its follower processes on one port),
`run` (`serve()`: uvicorn, the socket, the memory budget).
"""
from __future__ import annotations

from .app import DEFAULT_THREADS, KipApp
from .run import (SWITCH_INTERVAL, default_memory_budget, is_loopback, serve,
                  set_memory_budget)
from .spaces_routes import Grant, Keys
from .wire import METHODS, asks_to_write, command_kind, commands_of, http_status

__all__ = ["DEFAULT_THREADS", "KipApp", "SWITCH_INTERVAL", "default_memory_budget",
           "is_loopback", "serve", "set_memory_budget", "Grant", "Keys", "METHODS",
           "asks_to_write", "command_kind", "commands_of", "http_status"]
