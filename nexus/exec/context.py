"""The execution context: everything one command runs with, passed explicitly.

A command executes inside exactly one store transaction (`txn`), under the budgets of the
engine's `Limits` (deadline, row and hop caps), with a fixed timestamp (`now`, from the
context's clock) so that every element it touches gets the same `_updated_at`. The engine's
services a command may need travel with it as typed fields — the search service (SEARCH,
the PRIMER's search modes), the PRIMER cache, the FIND executor choice — so no executor
reaches back into the engine.

`ExecContext` is a read command's context; `WriteContext` (the engine's write session makes
it) adds the write transaction and what the command changed. `privileged` is set only for the
bundled capsules and trusted operator loads (they may write protected definitions);
`dry_run` makes a write validate and then roll back.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

from ..config import Limits
from ..errors import ErrorCode, KipError
from ..store.protocol import ReadTxn, WriteTxn
from ..timestamps import now_iso

if TYPE_CHECKING:
    from ..search import SearchService
    from .admission import Ticket

Clock = Callable[[], str]


class RankingCache(Protocol):
    """What DESCRIBE PRIMER needs of its cache (`nexus.exec.primer.PrimerCache`)."""

    def settle(self, txn: ReadTxn, seq: int) -> None: ...
    def get(self, domain: int) -> dict[str, Any] | None: ...
    def put(self, domain: int, seq: int, ranking: dict[str, Any]) -> None: ...


class ExecContext:
    """One command's context (see module doc). `now` is read from the clock on first use:
    reads never need it, and formatting a timestamp is a measurable part of a point lookup."""

    __slots__ = ("txn", "limits", "deadline", "_now", "clock", "privileged", "dry_run",
                 "text", "search", "primer", "columnar", "ticket", "hint")

    # (Not keyword-only: the engine passes them by position, once per read command.)
    def __init__(self, txn: ReadTxn, limits: Limits, deadline: float,
                 now: str | None = None, clock: Clock = now_iso, privileged: bool = False,
                 dry_run: bool = False, text: str | None = None,
                 search: "SearchService | None" = None, primer: RankingCache | None = None,
                 columnar: str | None = None, ticket: "Ticket | None" = None) -> None:
        self.txn = txn
        self.limits = limits
        self.deadline = deadline          # time.monotonic() value
        self._now = now
        self.clock = clock
        self.privileged = privileged
        self.dry_run = dry_run
        self.text = text                  # the command text, for error snippets
        self.search = search              # the search service, when attached
        self.primer = primer              # the PRIMER ranking cache, when kept
        self.columnar = columnar          # FIND executor: "auto" | "always" | "never"
        self.ticket = ticket              # its place in the fast/heavy lanes (admission)
        # A hint for the agent beside a successful result (SEARCH: the MODE it asked
        # for is served as another, CONTRACT §10); the engine adds it to the response.
        self.hint: str | None = None

    def reading(self, txn: ReadTxn) -> "ExecContext":
        """This context over another read transaction (FIND … AS OF reads the past through
        one); the row executor only, as column views belong to the current snapshot."""
        return ExecContext(txn, self.limits, self.deadline, now=self._now, clock=self.clock,
                           privileged=self.privileged, dry_run=self.dry_run, text=self.text,
                           search=self.search, primer=self.primer, columnar="never",
                           ticket=self.ticket)

    @property
    def now(self) -> str:
        """The command's fixed timestamp (every element it touches gets the same)."""
        now = self._now
        if now is None:
            now = self._now = self.clock()
        return now

    @now.setter
    def now(self, value: str) -> None:
        self._now = value

    @classmethod
    def start(cls, txn: ReadTxn, limits: Limits, **kw: object) -> "ExecContext":
        """A context whose deadline is `limits.query_timeout` from now."""
        return cls(txn, limits, time.monotonic() + limits.query_timeout, **kw)  # type: ignore[arg-type]

    def check_deadline(self) -> None:
        now = time.monotonic()
        ticket = self.ticket
        if ticket is not None and now >= ticket.next_check and now <= self.deadline:
            if not ticket.checkpoint(now, self.deadline):
                now = self.deadline + 1.0     # waited for a heavy slot until the deadline
        if now > self.deadline:
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


class WriteContext(ExecContext):
    """A write command's context: the write transaction, and what the command changed.

    Every element write records the ids it creates or modifies in `touched` and the ids it
    deletes in `removed` (`nexus.exec.writes`); the engine's commit hooks (search indexing,
    the PRIMER cache) consume them.
    """

    __slots__ = ("touched", "removed", "versioned", "unsearched", "moved", "store_txn",
                 "known_heads", "new_docs", "before_heads", "before_attributes")
    txn: WriteTxn                         # narrowed: a write context holds the write txn

    def __init__(self, txn: WriteTxn, limits: Limits, deadline: float, *,
                 store_txn: WriteTxn | None = None, **kw: object) -> None:
        super().__init__(txn, limits, deadline, **kw)  # type: ignore[arg-type]
        # The store's own transaction, below the write wrappers (the version log's
        # recorder): for the derived tables that change no element (the search index's).
        self.store_txn: WriteTxn = txn if store_txn is None else store_txn
        self.touched: set[int] = set()
        self.removed: set[int] = set()
        # Elements whose `_version` this command already advanced (or created): a command
        # bumps each element once, however many blocks or clauses write it (CONTRACT §3).
        self.versioned: set[int] = set()
        # Touched ids whose searchable text cannot have changed (only metadata was
        # written): the search indexes skip them.
        self.unsearched: set[int] = set()
        # Touched links whose only searchable change is an end moved to another element
        # (MERGE): id → (the old end's endpoint text, the new one's). The lexical index
        # rewrites their documents from the stored ones (`nexus.search.lexical.write`).
        self.moved: dict[int, tuple[str, str]] = {}
        # The heads of elements a columnar writer created or wrote in this session, as
        # columns: `(ids, type_ids)` for concepts, `(ids, subjects, predicate_ids,
        # objects)` for links (nexus.exec.upsert_columns). A commit hook that wants a
        # written element's head (the PRIMER cache) takes it from here instead of reading
        # it back. Kept for the whole session (a head does not change unless a MERGE moves
        # or a DELETE removes its element, and those set `moved` / `removed`).
        self.known_heads: list[tuple[Sequence[int], ...]] = []
        # The searchable texts of touched elements a bulk load created, as the columns it
        # wrote (`nexus.search.lexical_cols.NewConcepts` / `NewLinks`): the lexical index
        # derives their documents from these instead of reading them back. Emptied with
        # `touched` when a session stages.
        self.new_docs: list[Any] = []
        # The head each element this session deleted or repointed had before it (the
        # first one: as the search index last saw it), by id — with the heads of the ends
        # it deleted, what the lexical index needs to know which postings a link it never
        # stored the texts of had (`nexus.search.lexical_entry.MARK`: a link's forward entry
        # says "derived from the graph"). Emptied with `touched` when a session stages.
        # None where the index keeps the texts (a store whose reads are round trips:
        # PostgreSQL), so that a delete costs no extra read there.
        self.before_heads: dict[int, Any] | None = \
            None if self.store_txn.prefers_batches() else {}
        # The attributes each element had before this session overwrote or deleted them
        # (the first ones since the session last staged: as the search index last saw
        # them), by id: what the lexical index derives the terms a concept had from (its
        # forward entry holds a digest of its document, not the terms: `nexus.search.
        # lexical_entry.derived_bytes`). Kept by `nexus.exec.writes.keep_attributes` before
        # every attribute write or delete; emptied and None as `before_heads`.
        self.before_attributes: dict[int, Any] | None = \
            None if self.store_txn.prefers_batches() else {}
