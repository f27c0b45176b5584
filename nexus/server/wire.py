"""What crosses the wire of `kip serve` (nexus.server): the request envelope and the JSON-RPC
2.0 error codes, reading and writing JSON bodies (exact big integers, bounded depth, UTF-8
only), KIP error objects and the HTTP status of a response (CONTRACT §1), the refusals raised
before a method runs (`Reject`), the record of what one call did (`Call`), and the command
texts of a request (for the access log, the audit and `--auto-create`).
"""
from __future__ import annotations

import json
from typing import Any, Iterator

import orjson

from ..api import AuditLog
from ..errors import ErrorCode, KipError
from ..language import command_label, kind_of_text

METHODS = ("execute_kip", "execute_kip_readonly", "list_logs")
ENVELOPE = frozenset(("method", "params"))
RPC_ENVELOPE = frozenset(("jsonrpc", "id", "method", "params"))


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


def calls_in(payload: Any) -> Iterator[tuple[Any, list[str]]]:
    """(method, command texts) of each call of a parsed request body: the call itself, or
    each object of a JSON-RPC batch (other items are skipped: they get their own error)."""
    for call in payload if isinstance(payload, list) else [payload]:
        if isinstance(call, dict):
            yield call.get("method"), commands_of(call.get("params"))[0]


def asks_to_write(body: bytes) -> bool:
    """Whether a request body holds a command that writes (an `execute_kip` call with a KML
    or ADMIN command, alone, in `commands` or in a JSON-RPC batch). Unreadable bodies and
    unknown commands do not: they create nothing and get their error from the space."""
    try:
        payload = loads(body)
    except (ValueError, MemoryError):
        return False
    for method, texts in calls_in(payload):
        if method == "execute_kip":
            for text in texts:
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


def dumps(obj: Any) -> bytes:
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
# integer exact (a digit run inside a string only costs the slower reader). The run is found
# by mapping every digit to "0" and every other byte to a space, then one substring search:
# both in C, ~10x cheaper than the regex `[0-9]{19}` on a big UPSERT body (bench/RESULTS.md,
# s17-kiphttp), and the same answer.
_DIGIT_MASK = bytes(b"0"[0] if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_DIGIT_RUN = b"0" * 19


def has_long_digit_run(body: bytes) -> bool:
    """Whether `body` holds 19 or more ASCII digits in a row."""
    return _DIGIT_RUN in body.translate(_DIGIT_MASK)


def loads(body: bytes) -> Any:
    """The request body as JSON; ValueError for anything else (invalid JSON, NaN or
    Infinity, too deep, or not UTF-8 — RFC 8259 §8.1: no UTF-16 or UTF-32)."""
    if not has_long_digit_run(body):
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


def out_of_memory(doing: str) -> dict[str, Any]:
    return kip_error(ErrorCode.KIP_4002, f"The server ran out of its memory budget while "
                      f"{doing}",
                      "Ask for less at once: lower LIMIT and page with CURSOR, project fields "
                      "instead of whole elements, send smaller batches.")


def key_bytes(key: str | None) -> bytes | None:
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


def kip_error(code: ErrorCode, message: str, hint: str | None = None) -> dict[str, Any]:
    return KipError(code, message, hint).to_dict()


class Reject(Exception):
    """An HTTP-level refusal: status + KIP error object (+ extra headers)."""

    def __init__(self, status: int, error: dict[str, Any],
                 headers: list[tuple[bytes, bytes]] | None = None) -> None:
        self.status, self.error, self.headers = status, error, headers or []


class RawJson:
    """A response body that is JSON already (the owner's answer to a forwarded request)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class Disconnected(Exception):
    pass


class Call:
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


def command_count(item: Any) -> int:
    """How many commands one call of a JSON-RPC batch carries (1 unless it is an
    execute_kip call with a `commands` array)."""
    params = item.get("params") if isinstance(item, dict) else None
    commands = params.get("commands") if isinstance(params, dict) else None
    return len(commands) if isinstance(commands, list) else 1


def rpc_error(rpc_id: Any, code: int, kip_error: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id,
            "error": {"code": code, "message": kip_error["message"], "data": kip_error}}
