"""A conjunctive pattern over integer ids that a store may match in ONE query (issue 22).

The executor's operators ask the store one protocol call at a time (or a chunk of rows at
a time, `nexus.exec.chunked`). A store whose calls are round trips (PostgreSQL) may also
offer the optional capability `PatternMatcher`: the executor (`nexus.exec.pushdown`)
translates the part of a pattern group it can express here — concept clauses, link clauses
with constant predicates, their joins, correlated NOT and OPTIONAL blocks made of the same —
into a `Pattern`, and the store answers it in one statement, the rows in exactly the order
the operators would have produced them. LMDB and memory do not offer it (their calls are
in-process lookups); a transaction offering it answers `pattern_matcher()` with the
callable, None when it cannot (a write transaction, a view of the past).

Everything is resolved before it gets here: symbols are ids, constants are ids, and a
clause that can match nothing (an unknown type, a name that is not text) carries
`NOTHING` as its type or id. A column is a small int naming a variable; `Pattern.columns`
lists the ones a result row holds, in row order.

Row order (what the operators give, which the store must reproduce): a block's rows are
ordered step by step, lexicographically: a new concept by id; a link step by the position
of its predicate in `predicates`, then its new ends (subject before object), then the
link id; a link step that binds nothing (no new end, no link column) is a test and keeps
at most one row; an OPTIONAL block's rows follow the outer row's (a miss: one row of
nulls); a NOT block drops the outer rows that it extends.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence, Union, runtime_checkable

NOTHING = -1        # a type/concept id no element has: the clause matches nothing


@dataclass(frozen=True, slots=True)
class ConceptStep:
    """Bind `col` to concepts (new) or test the bound `col` (not new): of type `type_id`,
    named `name`, the concept `id` (each None: any)."""
    col: int
    new: bool
    type_id: int | None = None
    name: str | None = None
    id: int | None = None


@dataclass(frozen=True, slots=True)
class LinkStep:
    """Links `(subject, p, object)` with p in `predicates` (ids; empty: matches nothing).
    `new_subject` / `new_object`: the end is bound here (else it tests the bound column);
    `subject == object` with both new binds one column to self-loops. `link`: the column
    the link id is bound to, if any."""
    subject: int
    object: int
    predicates: tuple[int, ...]
    new_subject: bool
    new_object: bool
    link: int | None = None


@dataclass(frozen=True, slots=True)
class NotBlock:
    """Keep the rows that no row of `steps` (over the outer columns) extends."""
    steps: tuple["Step", ...]


@dataclass(frozen=True, slots=True)
class OptionalBlock:
    """Extend each row by the rows of `steps`, or by nulls when there are none; `exports`
    are the block's columns that the outer rows receive, in order."""
    steps: tuple["Step", ...]
    exports: tuple[int, ...]


Step = Union[ConceptStep, LinkStep, NotBlock, OptionalBlock]


@dataclass(frozen=True, slots=True)
class Want:
    """What the caller will read of a column's elements next: heads and/or maps. The
    store reads them in the same statement and keeps them in the transaction."""
    col: int
    heads: bool
    maps: bool


@dataclass(frozen=True, slots=True)
class Pattern:
    steps: tuple[Step, ...]
    columns: tuple[int, ...]        # the result row, in order
    wants: tuple[Want, ...] = ()
    limit: int | None = None        # at most this many rows (the first ones, in order)
    # Seconds the query may run (the command's deadline): a store that cannot stop it by
    # then cancels it (a KIP_4003 error, which the caller turns into its timeout).
    timeout: float | None = None


Matcher = Callable[[Pattern], Sequence[tuple[int | None, ...]]]


@runtime_checkable
class PatternMatcher(Protocol):
    """The optional capability (see the module doc): a read transaction that has it answers
    `pattern_matcher()` with a function Pattern -> rows (or None when it cannot here)."""

    def pattern_matcher(self) -> Matcher | None: ...


__all__ = ["NOTHING", "ConceptStep", "LinkStep", "Matcher", "NotBlock", "OptionalBlock",
           "Pattern", "PatternMatcher", "Step", "Want"]
