"""The execution context: everything one command runs with, passed explicitly.

A command executes inside exactly one store transaction (`txn`), under the budgets of the
engine's `Limits` (deadline, row and hop caps), with a fixed timestamp (`now`) so that every
element it touches gets the same `_updated_at`. `privileged` is set only by the capsule
loader (it may write protected definitions); `dry_run` makes KML validate and then abort.
"""
from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from ..config import Limits
from ..errors import ErrorCode, KipError


def now_iso() -> str:
    """Current UTC time as ISO 8601 with milliseconds and `Z` (CONTRACT §3)."""
    now = datetime.now(timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


class ExecContext:
    """One command's context (see module doc). `now` is computed on first use: reads never
    need it, and formatting a timestamp is a measurable part of a point lookup."""

    __slots__ = ("txn", "limits", "deadline", "_now", "privileged", "dry_run", "engine",
                 "text", "touched", "removed")

    def __init__(self, txn: Any, limits: Limits, deadline: float, now: str | None = None,
                 privileged: bool = False, dry_run: bool = False, engine: Any = None,
                 text: str | None = None, touched: set | None = None,
                 removed: set | None = None) -> None:
        self.txn = txn                    # ReadTxn, or WriteTxn for KML
        self.limits = limits
        self.deadline = deadline          # time.monotonic() value
        self._now = now
        self.privileged = privileged
        self.dry_run = dry_run
        self.engine = engine              # the Nexus (for search indexes, caches)
        self.text = text                  # the command text, for error snippets
        # What a write changed, for indexes kept beside the store (search) — KML records
        # every element it creates or modifies in `touched` and every element it deletes
        # in `removed`.
        self.touched = set() if touched is None else touched
        self.removed = set() if removed is None else removed

    @property
    def now(self) -> str:
        """The command's fixed timestamp (every element it touches gets the same)."""
        now = self._now
        if now is None:
            now = self._now = now_iso()
        return now

    @now.setter
    def now(self, value: str) -> None:
        self._now = value

    @classmethod
    def start(cls, txn: Any, limits: Limits, **kw: Any) -> "ExecContext":
        return cls(txn, limits, time.monotonic() + limits.query_timeout, **kw)

    def check_deadline(self) -> None:
        if time.monotonic() > self.deadline:
            raise KipError(
                ErrorCode.KIP_4001,
                f"The command ran longer than the limit of {self.limits.query_timeout:g} s",
                "Optimize the query: bind a concept by {type, name} or id first, lower LIMIT, "
                "narrow path ranges, reduce UNION and REGEX use.")

    def too_many_rows(self, what: str = "solutions") -> KipError:
        return KipError(
            ErrorCode.KIP_4002,
            f"The query produced more than {self.limits.max_rows} {what}",
            "Narrow the WHERE patterns, or use LIMIT and CURSOR to page through results.")
