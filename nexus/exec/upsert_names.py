"""The concepts an UPSERT names, looked up in one batched read (issue 22, PostgreSQL).

An UPSERT resolves, block by block, the concepts it names by `{type, name}` and the
definitions of their types and of its predicates (`nexus.exec.schema`): a `concept_id` each,
an in-process lookup on LMDB and memory but one SQL round trip each on PostgreSQL (a W2
upsert — one concept and two links — asked eight). On a transaction that
`prefers_batches()`, `prefetch` collects every such pair the command names with a plain
value (literal or parameter) before it runs and asks them in one `concept_ids` call, whose
answers the write transaction remembers; the executor then asks as before, block by block,
and gets the same answers without a round trip. A hint: it changes no answer and raises
nothing (a value that is not a name, or a type never interned, is left to the executor,
which reports it where it occurs).
"""
from __future__ import annotations

from typing import Any, Iterator

from ..syntax import ast as A
from ..syntax.bind import value_of
from .schema import CONCEPT_TYPE, PROPOSITION_TYPE

MAX_PAIRS = 20_000       # pairs looked up ahead per command (a big load: the rest one by one)


def prefetch(txn: Any, command: A.Upsert, params: Any) -> None:
    """Look up at once the `{type, name}` pairs `command` names (see the module doc)."""
    named: dict[tuple[str, str], None] = {}
    for type_name, name in _names(command, params):
        named[(type_name, name)] = None
        named[(CONCEPT_TYPE, type_name)] = None        # the type's definition
        if len(named) >= MAX_PAIRS:
            break
    pairs = []
    sids: dict[str, int | None] = {}
    for type_name, name in named:
        if type_name not in sids:
            sids[type_name] = txn.symbol_id(type_name)
        sid = sids[type_name]
        if sid is not None:
            pairs.append((sid, name))
    if len(pairs) > 1:
        txn.concept_ids(pairs)


def _names(command: A.Upsert, params: Any) -> Iterator[tuple[str, str]]:
    """(type, name) of each concept the command names, its predicates as
    ($PropositionType, p)."""
    for statement in command.statements:
        for block in statement.blocks:
            if isinstance(block, A.ConceptBlock):
                yield from _concept(block.match, params)
                for entry in block.propositions or ():
                    yield from _predicate(entry.predicate, params)
                    yield from _term(entry.target, params)
            elif isinstance(block.match, A.PropositionMatch):
                yield from _term(block.match, params)


def _term(term: Any, params: Any) -> Iterator[tuple[str, str]]:
    if isinstance(term, A.ConceptMatch):
        yield from _concept(term, params)
    elif isinstance(term, A.PropositionMatch):
        yield from _term(term.subject, params)
        if isinstance(term.predicate, A.Predicate) and term.predicate.names:
            yield from _predicate(term.predicate.names[0], params)
        yield from _term(term.object, params)


def _concept(match: A.ConceptMatch, params: Any) -> Iterator[tuple[str, str]]:
    if match.id is None and match.type is not None and match.name is not None:
        type_name, name = _plain(match.type, params), _plain(match.name, params)
        if type(type_name) is str and type(name) is str:
            yield type_name, name


def _predicate(value: Any, params: Any) -> Iterator[tuple[str, str]]:
    name = _plain(value, params)
    if type(name) is str:
        yield PROPOSITION_TYPE, name


def _plain(value: Any, params: Any) -> Any:
    """The value of a literal or a bound parameter (None for anything else)."""
    if type(value) is A.Literal:
        return value.value
    try:
        return value_of(value, params)
    except Exception:  # noqa: BLE001 - a hint: the executor reports a bad value in order
        return None
