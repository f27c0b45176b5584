"""The execution context: everything one command runs with, passed explicitly.

A command executes inside exactly one store transaction (`txn`), under the budgets of the
engine's `Limits` (deadline, row and hop caps), with a fixed timestamp (`now`) so that every
element it touches gets the same `_updated_at`. `privileged` is set only by the capsule
loader (it may write protected definitions); `dry_run` makes KML validate and then abort.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..config import Limits
from ..errors import ErrorCode, KipError


def now_iso() -> str:
    """Current UTC time as ISO 8601 with milliseconds and `Z` (CONTRACT §3)."""
    now = datetime.now(timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


@dataclass
class ExecContext:
    txn: Any                              # ReadTxn, or WriteTxn for KML
    limits: Limits
    deadline: float                       # time.monotonic() value
    now: str = field(default_factory=now_iso)
    privileged: bool = False
    dry_run: bool = False
    engine: Any = None                    # the Nexus (for search indexes, caches)
    text: str | None = None               # the command text, for error snippets
    # What a write changed, for indexes kept beside the store (search) — KML records every
    # element it creates or modifies in `touched` and every element it deletes in `removed`.
    touched: set = field(default_factory=set)
    removed: set = field(default_factory=set)

    @classmethod
    def start(cls, txn: Any, limits: Limits, **kw: Any) -> "ExecContext":
        return cls(txn=txn, limits=limits, deadline=time.monotonic() + limits.query_timeout,
                   **kw)

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
