"""The request audit log behind the `list_logs` method (CONTRACT §1).

Owns: the audit entry format, its persistence in the store's `audit` aux table, retention
(`Config.audit_max_entries`, `Config.audit_max_age_days`), and paging (`list_logs`).
Does not own: what a request is or how it ran — the caller (the JSON-RPC server) builds the
entry with `entry(...)` and hands it to `AuditLog.record`.

An entry says what happened, never with which data: time, method, command kind(s), the
command text cut to `Config.audit_command_chars`, duration, HTTP status, and a result summary
made only of counts (rows returned, ids written) or the error code(s). Parameter values are
never recorded (they are not in the command text, and results are reduced to numbers).

Durability: recording is an in-memory append. A background thread flushes the buffer in one
store write transaction every `flush_interval` seconds (0.5 s), sooner when `flush_size`
(256) entries are waiting, and on `close()`. So a request never waits for an audit write,
and a crash can lose the last fraction of a second of audit entries (never graph data).
The audit write goes through the engine's write session like every write (it changes no
element, so the commit hooks have nothing to do).

Keys are 8-byte big-endian microsecond timestamps, unique per store (a clash moves the
later entry one microsecond on), so a reverse scan is newest-first and the key of the last
entry on a page is the cursor of the next one.

Who records: the server, for every `execute_kip` / `execute_kip_readonly` request (not for
`list_logs` itself, nor `GET` probes). The Python API and `kip exec --db` do not record — the
log is about what remote agents did; an embedding application may use `AuditLog` itself.
"""
from __future__ import annotations

import base64
import logging
import struct
import threading
import time
from typing import Any, Iterable, Mapping

import orjson

from ..engine import Engine
from ..errors import ErrorCode, KipError
from ..timestamps import stamp_text

TABLE = "audit"
DEFAULT_PAGE = 50
MAX_PAGE = 1000
_KEY = struct.Struct(">Q")
_CURSOR_PREFIX = "log1."


def iso_time(ts: float) -> str:
    """A UNIX time as the engine's stamp (ISO 8601 UTC with milliseconds and `Z`)."""
    return stamp_text(int(ts * 1000))


def summarize(response: Mapping[str, Any]) -> dict[str, Any]:
    """A single command's KIP response reduced to what an audit may keep:
    `{"result": {...counts}}` or `{"error": "KIP_xxxx"}` — counts and codes, no values."""
    if "error" in response:
        return {"error": _code(response["error"])}
    return {"result": _shape(response.get("result"))}


def summarize_batch(response: Mapping[str, Any]) -> dict[str, Any]:
    """`summarize` for the response to a `commands` request:
    `{"result": {"executed": n, "failed": k}, "errors": [codes...]}`."""
    if "error" in response:
        return {"error": _code(response["error"])}
    items = response.get("result") or []
    codes = [_code(r["error"]) for r in items if isinstance(r, Mapping) and "error" in r]
    out: dict[str, Any] = {"result": {"executed": len(items), "failed": len(codes)}}
    if codes:
        out["errors"] = codes
    return out


def _code(error: Any) -> str:
    return error.get("code", "?") if isinstance(error, Mapping) else "?"


def _shape(result: Any) -> Any:
    """Counts only: a list → {"rows": n}; a map → its numbers and list lengths."""
    if isinstance(result, list):
        return {"rows": len(result)}
    if isinstance(result, Mapping):
        out = {}
        for key, value in result.items():
            if isinstance(value, bool):
                continue
            if isinstance(value, (int, float)):
                out[key] = value
            elif isinstance(value, list):
                out[key] = len(value)
        return out
    if result is None:
        return {}
    return {"value": type(result).__name__}   # a scalar aggregate: its type, not its value


def entry(*, method: str, kinds: list[str], commands: list[str], duration: float,
          status: int, response: Mapping[str, Any], batch: bool, chars: int,
          started: float | None = None) -> dict[str, Any]:
    """Build one audit entry. `commands` are the command texts (truncated here to `chars`
    in total); `kinds` their kinds (KQL/KML/META, `?` when unknown)."""
    text = commands[0] if len(commands) == 1 else "\n;\n".join(commands)
    if len(text) > chars:
        text = text[:chars] + "…"
    out: dict[str, Any] = {
        "time": iso_time(started if started is not None else time.time()),
        "method": method,
        "kind": ("batch" if batch else (kinds[0] if kinds else "?")),
    }
    if batch:
        out["kinds"] = kinds
    out["command"] = text
    out["duration_ms"] = round(duration * 1000.0, 3)
    out["status"] = status
    out.update(summarize_batch(response) if batch else summarize(response))
    return out


class AuditBuffer:
    """Entries queued in memory by `record` and handed on in batches by one background
    thread (every `flush_interval` seconds, sooner once `flush_size` wait, and at `close`).
    Where a batch goes is the subclass's `_write`: the store (`AuditLog`) or another
    process (a `kip serve --workers` follower's relay). A failing `_write` is logged and
    never stops the thread: audit must never take the server down."""

    thread_name = "nexus-audit"

    def __init__(self, *, flush_interval: float = 0.5, flush_size: int = 256) -> None:
        self.flush_interval = flush_interval
        self.flush_size = flush_size
        self._buffer: list[tuple[float, dict]] = []
        self._lock = threading.Lock()           # guards _buffer
        self._flush_lock = threading.Lock()     # one flush at a time, in order
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def record(self, item: dict[str, Any], ts: float | None = None) -> None:
        """Queue one entry (never blocks on storage)."""
        with self._lock:
            self._buffer.append((time.time() if ts is None else ts, item))
            full = len(self._buffer) >= self.flush_size
        if full:
            self._wake.set()

    def start(self) -> "AuditBuffer":
        """Start the background flusher (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.thread_name,
                                            daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.flush_interval)
            self._wake.clear()
            try:
                self.flush()
            except Exception:   # noqa: BLE001 - audit must never take the server down
                logging.getLogger("nexus.ops.audit").exception("audit flush failed")

    def close(self) -> None:
        """Stop the flusher and hand on what is buffered."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self.flush()

    def flush(self) -> int:
        """Hand the buffered entries to `_write`; the number of entries taken."""
        with self._flush_lock:
            with self._lock:
                batch, self._buffer = self._buffer, []
            if batch:           # an idle server does no writes
                self._write(batch)
            return len(batch)

    def _write(self, batch: list[tuple[float, dict]]) -> None:
        raise NotImplementedError


class AuditLog(AuditBuffer):
    """Buffered, persisted audit log over a graph store's `audit` aux table."""

    def __init__(self, engine: Engine, *, max_entries: int = 10_000,
                 max_age_days: float = 30.0, flush_interval: float = 0.5,
                 flush_size: int = 256) -> None:
        super().__init__(flush_interval=flush_interval, flush_size=flush_size)
        self.engine = engine
        self.store = engine.store
        self.max_entries = max_entries
        self.max_age = max_age_days * 86400.0
        self._last_key = 0

    @classmethod
    def for_engine(cls, engine: Engine, **kw: Any) -> "AuditLog":
        """An audit log configured from the engine's `Config` (retention)."""
        cfg = engine.config
        return cls(engine, max_entries=cfg.audit_max_entries,
                   max_age_days=cfg.audit_max_age_days, **kw)

    def _write(self, batch: list[tuple[float, dict]]) -> None:
        """Write the entries and apply retention in one write transaction (reads hide
        entries past the age limit until the next flush prunes them)."""
        with self.engine.write_session() as session:
            table = session.txn.aux(TABLE)
            if self._last_key == 0:
                for key, _ in table.scan(reverse=True):
                    self._last_key = _KEY.unpack(key)[0]
                    break
            for ts, item in batch:
                k = max(int(ts * 1_000_000), self._last_key + 1)
                self._last_key = k
                table.put(_KEY.pack(k), orjson.dumps(item))
            self._prune(table)

    def _cutoff(self) -> int:
        """Keys below this are past the age limit."""
        return max(0, int((time.time() - self.max_age) * 1_000_000)) if self.max_age > 0 else 0

    def _prune(self, table: Any) -> None:
        cutoff = self._cutoff()
        excess = table.count() - self.max_entries if self.max_entries > 0 else 0
        doomed = []
        for key, _ in table.scan():
            if excess > 0 or _KEY.unpack(key)[0] < cutoff:
                doomed.append(key)
                excess -= 1
            else:
                break
        for key in doomed:
            table.delete(key)

    # --- reading -------------------------------------------------------------------------
    def list_logs(self, params: Any = None) -> dict[str, Any]:
        """The `list_logs` method: `{"cursor"?, "limit"?}` → `{"result": [...],
        "next_cursor"?}`, newest first. Flushes the buffer first so the page is current."""
        try:
            cursor, limit = _parse_params(params)
        except KipError as err:
            return {"error": err.to_dict()}
        self.flush()
        if cursor == 0:
            return {"result": []}
        start = None if cursor is None else _KEY.pack(cursor - 1)
        rows: list[dict] = []
        last = None
        more = False
        cutoff = _KEY.pack(self._cutoff())
        with self.store.read() as txn:
            for key, value in txn.aux(TABLE).scan(reverse=True, start=start):
                if key < cutoff:
                    break
                if len(rows) == limit:
                    more = True
                    break
                rows.append(orjson.loads(value))
                last = key
        response: dict[str, Any] = {"result": rows}
        if more and last is not None:
            response["next_cursor"] = _encode_cursor(_KEY.unpack(last)[0])
        return response

    def entries(self) -> Iterable[dict]:
        """Every persisted entry, newest first (tests, tools)."""
        self.flush()
        with self.store.read() as txn:
            return [orjson.loads(v) for _, v in txn.aux(TABLE).scan(reverse=True)]


def _parse_params(params: Any) -> tuple[int | None, int]:
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        raise KipError(ErrorCode.KIP_1001, "list_logs `params` must be an object",
                       "Send {\"cursor\"?: \"...\", \"limit\"?: n}.")
    unknown = sorted(set(params) - {"cursor", "limit"})
    if unknown:
        raise KipError(ErrorCode.KIP_1001,
                       f"Unknown list_logs field(s): {', '.join(map(str, unknown))}",
                       "list_logs takes only `cursor` and `limit`.")
    limit = params.get("limit", DEFAULT_PAGE)
    if limit is None:
        limit = DEFAULT_PAGE
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise KipError(ErrorCode.KIP_1001,
                       f"list_logs `limit` must be an integer from 1 to {MAX_PAGE}",
                       f"Send a page size such as {DEFAULT_PAGE}.")
    cursor = params.get("cursor")
    if cursor is None:
        return None, limit
    if not isinstance(cursor, str):
        raise KipError(ErrorCode.KIP_1001, "list_logs `cursor` must be a string",
                       "Pass back the `next_cursor` of the previous page unchanged.")
    return _decode_cursor(cursor), limit


def _encode_cursor(key: int) -> str:
    raw = base64.urlsafe_b64encode(_KEY.pack(key)).decode("ascii").rstrip("=")
    return _CURSOR_PREFIX + raw


def _decode_cursor(cursor: str) -> int:
    try:
        if not cursor.startswith(_CURSOR_PREFIX):
            raise ValueError
        raw = cursor[len(_CURSOR_PREFIX):]
        data = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
        return _KEY.unpack(data)[0]
    except (ValueError, struct.error):
        raise KipError(ErrorCode.KIP_1001, "Invalid list_logs cursor",
                       "Pass back the `next_cursor` of the previous page unchanged, or omit "
                       "it to start from the newest entry.") from None
