"""The statement registry: what each AST statement class *is*, declared beside its class.

Every top-level command class of `nexus.syntax.ast` carries `@statement(kind, keywords)`.
The kind decides how the engine runs it, and everything that must know reads it here
instead of keeping a list of its own:

* the engine's dispatch (a read snapshot or the one write session),
* the read-only guard of `execute_kip_readonly` (refuses every kind that writes),
* dry runs (a writing statement runs and is rolled back),
* the audit log's command kind and the server's access log,
* EXPLAIN and the shell's completion and read-only mode (by leading keyword).

An unregistered class, or text whose leading keyword no statement claims, is treated as a
*write*: a new statement that forgot its declaration is refused by the read-only method
instead of running through it.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Callable, TypeVar


class StatementKind(enum.Enum):
    """What a statement does to the graph. `label` is the spec's language name."""

    QUERY = "query"      # KQL: FIND (and EXPLAIN FIND) over a snapshot
    META = "meta"        # DESCRIBE, SEARCH, EXPORT: read a snapshot
    WRITE = "write"      # KML: UPSERT, DELETE, ...: one atomic write transaction
    ADMIN = "admin"      # engine operations that change stored state outside the graph

    @property
    def writes(self) -> bool:
        """Whether running it may change the store (refused by `execute_kip_readonly`)."""
        return self in (StatementKind.WRITE, StatementKind.ADMIN)

    @property
    def label(self) -> str:
        """KQL / KML / META / ADMIN, as logs and the shell show it."""
        return _LABELS[self]


_LABELS = {StatementKind.QUERY: "KQL", StatementKind.META: "META", StatementKind.WRITE: "KML",
           StatementKind.ADMIN: "ADMIN"}


@dataclass(frozen=True, slots=True)
class StatementInfo:
    """One registered statement class."""
    cls: type
    kind: StatementKind
    keywords: tuple[str, ...]     # the words a command of this class starts with
    late_binding: bool            # parameters are read at execution (a cached plan)


_BY_CLASS: dict[type, StatementInfo] = {}
_BY_KEYWORD: dict[str, StatementKind] = {}

T = TypeVar("T", bound=type)


def statement(kind: StatementKind, *keywords: str, late_binding: bool = False
              ) -> Callable[[T], T]:
    """Class decorator: register an AST statement class with its kind and leading keyword.

    `late_binding=True` says the executor binds `:name` parameters itself (FIND caches its
    prepared plan per parsed command); the engine then only checks that every placeholder
    has a value.
    """
    def register(cls: T) -> T:
        _BY_CLASS[cls] = StatementInfo(cls, kind, tuple(keywords), late_binding)
        for word in keywords:
            known = _BY_KEYWORD.get(word)
            # Statements sharing a leading word must agree on its kind (DELETE ..., DESCRIBE
            # ...): the kind of a text is then known from its first word alone.
            if known is not None and known is not kind:
                raise ValueError(f"keyword {word} is registered as {known.name} and "
                                 f"{kind.name}")
            _BY_KEYWORD[word] = kind
        return cls
    return register


def info(command: object) -> StatementInfo | None:
    """The registration of a command (instance or class), or None."""
    cls = command if isinstance(command, type) else type(command)
    found = _BY_CLASS.get(cls)
    if found is None:
        # A subclass of a statement class is that statement (ast.ColumnUpsert: an Upsert
        # read as columns).
        for base in cls.__mro__[1:-1]:
            found = _BY_CLASS.get(base)
            if found is not None:
                break
    return found


def kind_of(command: object) -> StatementKind:
    """The kind of a command (instance or class); WRITE when it is not registered."""
    found = info(command)
    return StatementKind.WRITE if found is None else found.kind


def registered() -> tuple[StatementInfo, ...]:
    """Every registered statement, in registration order."""
    return tuple(_BY_CLASS.values())


def statement_keywords() -> tuple[str, ...]:
    """The words a command may start with, sorted (for completion)."""
    return tuple(sorted(_BY_KEYWORD))


_FIRST_WORD = re.compile(r"(?:\s+|//[^\n]*)*([A-Za-z_]+)")


def kind_of_text(text: object) -> StatementKind | None:
    """The kind of a command text from its leading keyword, without parsing it; None when no
    statement starts with that word (callers that guard treat None as a write)."""
    if not isinstance(text, str):
        return None
    m = _FIRST_WORD.match(text)
    return _BY_KEYWORD.get(m.group(1)) if m else None
