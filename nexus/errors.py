"""The KIP error codes (spec Appendix 4) and the one exception type the engine raises.

Every failure that reaches a caller — from the parser, the binder, the executor, the store or
an adapter — is a `KipError` carrying a code, the spec's error name, a message that names the
problem, a hint that tells an agent how to recover, and (for syntax errors) the position.
Foreign exceptions (Lark, lmdb, msgpack, usearch) are translated where they enter our code;
`internal_error` wraps anything unexpected as `KIP_4003` so nothing else escapes.
"""
from __future__ import annotations

import enum
from typing import Any


class ErrorCode(enum.Enum):
    """The wire contract: value = code string; name, default hint and HTTP status attached."""

    KIP_1001 = "KIP_1001"
    KIP_1002 = "KIP_1002"
    KIP_2001 = "KIP_2001"
    KIP_2002 = "KIP_2002"
    KIP_2003 = "KIP_2003"
    KIP_3001 = "KIP_3001"
    KIP_3002 = "KIP_3002"
    KIP_3003 = "KIP_3003"
    KIP_3004 = "KIP_3004"
    KIP_3005 = "KIP_3005"
    KIP_4001 = "KIP_4001"
    KIP_4002 = "KIP_4002"
    KIP_4003 = "KIP_4003"

    @property
    def error_name(self) -> str:
        return _INFO[self][0]

    @property
    def default_hint(self) -> str:
        return _INFO[self][1]

    @property
    def http_status(self) -> int:
        return _INFO[self][2]


_INFO: dict[ErrorCode, tuple[str, str, int]] = {
    ErrorCode.KIP_1001: (
        "InvalidSyntax",
        "Check parenthesis matching, keyword spelling, and statement structure. "
        "Ensure JSON data format is valid.",
        400,
    ),
    ErrorCode.KIP_1002: (
        "InvalidIdentifier",
        "Identifiers must match regex [a-zA-Z_][a-zA-Z0-9_]*.",
        400,
    ),
    ErrorCode.KIP_2001: (
        "TypeMismatch",
        "Execute DESCRIBE to confirm type names. Remember types are case-sensitive "
        "(`Drug` vs `drug`).",
        400,
    ),
    ErrorCode.KIP_2002: (
        "ConstraintViolation",
        "Supply the missing required attributes.",
        400,
    ),
    ErrorCode.KIP_2003: (
        "InvalidValueType",
        "Correct the JSON value type.",
        400,
    ),
    ErrorCode.KIP_3001: (
        "ReferenceError",
        "Ensure the CONCEPT block defining the handle is placed before subsequent clauses "
        "referencing it in UPSERT.",
        400,
    ),
    ErrorCode.KIP_3002: (
        "NotFound",
        "Target may have been deleted or never created. Try SEARCH or FIND to confirm "
        "existence first.",
        404,
    ),
    ErrorCode.KIP_3003: (
        "DuplicateExists",
        "If intent is update, check if UPSERT should be used instead of creation logic.",
        409,
    ),
    ErrorCode.KIP_3004: (
        "ImmutableTarget",
        "Operation prohibited: system structures ($ConceptType, $PropositionType, CoreSchema, "
        "the identity and core_directives of $self/$system) cannot be changed.",
        403,
    ),
    ErrorCode.KIP_3005: (
        "VersionConflict",
        "Re-read the element (its current _version) and retry with the new version.",
        409,
    ),
    ErrorCode.KIP_4001: (
        "ExecutionTimeout",
        "Optimize the query: reduce UNION usage, lower LIMIT, or reduce regex/hops.",
        408,
    ),
    ErrorCode.KIP_4002: (
        "ResourceExhausted",
        "Use LIMIT and CURSOR for pagination.",
        400,
    ),
    ErrorCode.KIP_4003: (
        "InternalError",
        "Contact the system administrator or retry later.",
        500,
    ),
}


class KipError(Exception):
    """A KIP error: the only exception type the engine lets reach a caller.

    `line`/`column` are 1-based positions in the command text (syntax errors and errors that
    point at a clause); `snippet` is the offending line with a caret under the column.
    """

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        hint: str | None = None,
        *,
        line: int | None = None,
        column: int | None = None,
        snippet: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint or code.default_hint
        self.line = line
        self.column = column
        self.snippet = snippet
        self.data = dict(data) if data else {}

    @property
    def name(self) -> str:
        return self.code.error_name

    @property
    def http_status(self) -> int:
        return self.code.http_status

    def with_position(self, text: str, line: int, column: int) -> "KipError":
        """Attach a position in `text` (and its caret snippet) unless one is already set."""
        if self.line is None:
            self.line, self.column = line, column
            self.snippet = caret_snippet(text, line, column)
        return self

    def to_dict(self) -> dict[str, Any]:
        """The `error` object of the wire format (CONTRACT §2)."""
        err: dict[str, Any] = {
            "code": self.code.value,
            "name": self.name,
            "message": self.message,
            "hint": self.hint,
        }
        data = dict(self.data)
        if self.line is not None:
            data["line"] = self.line
            data["column"] = self.column
            if self.snippet is not None:
                data["snippet"] = self.snippet
        if data:
            err["data"] = data
        return err

    def __repr__(self) -> str:
        where = f" at {self.line}:{self.column}" if self.line is not None else ""
        return f"KipError({self.code.value}{where}: {self.message})"


def caret_snippet(text: str, line: int, column: int, width: int = 120) -> str:
    """The `line`-th line of `text` and a caret under `column` (both 1-based), clipped."""
    lines = text.split("\n")   # as Lark counts lines (splitlines also breaks on \r, \u2028...)
    if not 1 <= line <= len(lines):
        return ""
    src = lines[line - 1].expandtabs(1)
    col = max(1, column)
    start = 0
    if len(src) > width:
        start = max(0, min(col - width // 2, len(src) - width))
        src = src[start : start + width]
    return f"{src}\n{' ' * (col - 1 - start)}^"


def syntax_error(message: str, hint: str | None = None, **kw: Any) -> KipError:
    return KipError(ErrorCode.KIP_1001, message, hint, **kw)


def internal_error(exc: BaseException) -> KipError:
    """Wrap an unexpected exception so that only KipError crosses the API boundary."""
    return KipError(
        ErrorCode.KIP_4003,
        f"Internal error: {type(exc).__name__}: {exc}",
    )
