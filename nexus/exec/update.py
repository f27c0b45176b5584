"""UPDATE (RC11 §4.3): pattern-matched bulk mutation of existing concepts or links.

Owns the execution of `UPDATE ?target SET ATTRIBUTES {…} SET METADATA {…} WHERE {…} LIMIT n`:

* the targets are the distinct elements bound to `?target` by the WHERE (the KQL matcher,
  `nexus.exec.kql.solutions`), at most LIMIT of them — read first (their ids only, so the
  scan never runs under its own writes), then written, all in the command's transaction:
  atomic, like every command. The sweep shape of RC11 §4.3, one predicate's links
  (`WHERE { ?target (?s, "pred", ?o) }`), is read straight from the predicate's index in
  the order the matcher would give (`_predicate_scan`), and, that predicate not being
  `belongs_to_domain`, its links' heads are not read: they exist and are never protected;
* a value is JSON, or an update expression — `ADD(a, b)`, `MUL(a, b)`, `CLAMP(x, lo, hi)`,
  `COALESCE(x, default)` over numbers, placeholders and paths on `?target` itself; an
  expression that meets `null` (outside COALESCE) or a non-number yields null and its key is
  skipped for that element;
* shallow merge (§2.10); `_` keys refused (KIP_2002); never creates; a protected target
  fails the statement (KIP_3004); `{"updated", "matched"}` — matched counts the selected
  targets, updated those that had at least one key to write.
"""
from __future__ import annotations

import math
from itertools import islice
from typing import Any, Callable, Mapping

from ..errors import ErrorCode, KipError
from ..store.bulk import gc_paused
from ..syntax import ast as A
from . import protect, writes
from .context import WriteContext
from .kql import solutions
from .registry import executes
from .upsert import literal

Params = Mapping[str, Any]
CHUNK = 1024                # targets read, computed and written per store call
SCAN_STEP = 4096            # links read from an index between two deadline checks


@executes(A.Update)
def run_update(ctx: WriteContext, command: A.Update, params: Params) -> tuple[dict, None]:
    if not command.attributes and not command.metadata:
        raise KipError(ErrorCode.KIP_1001, "UPDATE needs SET ATTRIBUTES or SET METADATA "
                       "with at least one key", "Write UPDATE ?x SET ATTRIBUTES { key: value "
                       "} WHERE { … }.", **writes.pos_kw(command.pos))
    for where, entries in (("SET ATTRIBUTES", command.attributes),
                           ("SET METADATA", command.metadata)):
        for entry in entries or ():
            writes.check_keys([entry.key], where, entry.pos)
    limit = literal(command.limit) if command.limit is not None else None
    scanned = _predicate_scan(ctx, command, limit)
    if scanned is not None:
        targets, pid = scanned
    else:
        pid = None
        targets = []
        for (n,) in solutions(ctx, command.where, [command.target], params):
            if n is None:
                continue                        # ?target unbound in an OPTIONAL branch
            targets.append(n)
            if limit is not None and len(targets) >= limit:
                break
    set_attributes = _compile_entries(command.attributes)
    # A metadata sweep (the decay pattern) never needs the stored attributes: not read.
    read_attributes = bool(set_attributes) or _reads_attributes(command.metadata)
    check = protect.write_checker(ctx, command.pos)
    # A chunk of targets is read, computed and written in one store call. The cyclic GC is
    # paused meanwhile: the session's bookkeeping (the version log's pre-images) holds a few
    # objects per element, and each full collection would walk them all again (a sweep
    # creates no cycles; refcounting frees the rest).
    with gc_paused():
        if set_attributes:
            updated = _update_rows(ctx, command, targets, set_attributes, check)
        else:
            # Links of one predicate that is not `belongs_to_domain` are never protected
            # (`protect.write_checker`), and exist (just read from the index): no head read.
            heads = pid is None or (not ctx.privileged
                                    and pid == ctx.txn.symbol_id("belongs_to_domain"))
            updated = _update_metadata(ctx, command, targets, read_attributes, check, heads)
    if ctx.dry_run:
        return {"updated": 0, "matched": 0}, None
    return {"updated": updated, "matched": len(targets)}, None


def _predicate_scan(ctx: WriteContext, command: A.Update, limit: int | None
                    ) -> tuple[list[int], int] | None:
    """The targets of the sweep shape of RC11 §4.3, `WHERE { ?target (?s, "pred", ?o) }`
    (one predicate name, two distinct free ends): the predicate's links in its index's
    order — the order the matcher's scan yields them in, so LIMIT keeps the same ones —
    read straight from the index, with the matcher's row cap and deadline (and the
    predicate id). None: another shape, left to the matcher (`solutions`)."""
    if len(command.where) != 1:
        return None
    pattern = command.where[0]
    if type(pattern) is not A.PropositionPattern or pattern.var != command.target:
        return None
    match = pattern.match
    if type(match) is not A.PropositionMatch:
        return None
    predicate, subject, obj = match.predicate, match.subject, match.object
    if (type(predicate) is not A.Predicate or predicate.hops is not None
            or len(predicate.names) != 1 or type(predicate.names[0]) is not A.Literal
            or type(subject) is not A.VarTerm or type(obj) is not A.VarTerm
            or len({subject.name, obj.name, command.target}) != 3):
        return None
    name = predicate.names[0].value
    pid = ctx.txn.symbol_id(name) if type(name) is str else None
    if pid is None:
        return None                         # (the matcher answers the unknown name)
    ids: list[int] = []
    cap = ctx.limits.max_rows
    links = ctx.txn.links_of_predicate(pid)
    while limit is None or len(ids) < limit:
        step = SCAN_STEP if limit is None else min(SCAN_STEP, limit - len(ids))
        found = [n for _, _, n in islice(links, step)]
        ids += found
        if len(ids) > cap:
            raise ctx.too_many_rows()
        if len(found) < step:
            break
        ctx.check_deadline()
    return ids, pid


def _update_rows(ctx: WriteContext, command: A.Update, targets: list[int],
                 set_attributes: list[tuple[str, Compiled | None, Any]],
                 check: Callable[[Any, dict | None], None]) -> int:
    """SET ATTRIBUTES (and maybe METADATA): element by element."""
    txn = ctx.txn
    set_metadata = _compile_entries(command.metadata)
    updated = 0
    for start in range(0, len(targets), CHUNK):
        ctx.check_deadline()
        for n in targets[start:start + CHUNK]:
            head = txn.head(n)
            if head is None:
                continue
            stored_meta = txn.metadata(n)
            stored_attributes = txn.attributes(n)
            attributes = _values(set_attributes, stored_attributes, stored_meta)
            metadata = _values(set_metadata, stored_attributes, stored_meta)
            check(head, attributes or None)
            if attributes:
                writes.update_known(ctx, n, stored_attributes, stored_meta, attributes,
                                    metadata or None)
            elif metadata:
                stored_meta.update(metadata)
                writes.update_metadata_many(ctx, [(n, stored_meta)])
            else:
                continue
            updated += 1
    return updated


def _update_metadata(ctx: WriteContext, command: A.Update, targets: list[int],
                     read_attributes: bool, check: Callable[[Any, dict | None], None],
                     heads: bool = True) -> int:
    """SET METADATA alone (the decay sweep): a chunk at a time, its maps read in one call,
    each expression evaluated over the chunk's column of maps (`_compile_column`), merged
    in place, then written in one store call. `heads=False`: the targets are known to
    exist and to be unprotected (`_predicate_scan`), their heads are not read."""
    txn = ctx.txn
    entries = [(e.key, _compile_column(e.value) if isinstance(e.value, (A.UpdateCall, A.Path))
                else None, None if isinstance(e.value, (A.UpdateCall, A.Path))
                else literal(e.value)) for e in command.metadata or ()]
    # A plain JSON value (null included) is always written: every element is updated.
    always = any(column is None for _, column, _ in entries)
    head_of, metadata_of, attributes_of = txn.head, txn.metadata_of, txn.attributes_of
    updated = 0
    for start in range(0, len(targets), CHUNK):
        ctx.check_deadline()
        ids = targets[start:start + CHUNK]
        if heads:
            known: list[int] = []
            for n in ids:
                head = head_of(n)
                if head is None:
                    continue
                check(head, None)
                known.append(n)
            ids = known
        metas = metadata_of(ids)
        attrs = attributes_of(ids) if read_attributes else metas
        # Every column computed from the stored maps before any is merged into them.
        values = [(key, column(attrs, metas) if column is not None else None, plain)
                  for key, column, plain in entries]
        hits: list[bool] | None = None if always else [False] * len(ids)
        for key, column_values, plain in values:
            if column_values is None:
                for m in metas:
                    m[key] = plain
                continue
            for i, (m, v) in enumerate(zip(metas, column_values)):
                if v is not None:               # null-yielding expression: key skipped
                    m[key] = v
                    if hits is not None:
                        hits[i] = True
        batch = (list(zip(ids, metas)) if hits is None
                 else [(n, m) for n, m, hit in zip(ids, metas, hits) if hit])
        writes.update_metadata_many(ctx, batch)
        updated += len(batch)
    return updated


Compiled = Callable[[dict, dict], Any]
Column = Callable[[list[dict], list[dict]], list[Any]]
_NUMBERS: frozenset[Any] = frozenset({int, float})     # not bool (an int subclass)
_LOW, _HIGH = -(1 << 63), 1 << 64


def _compile_column(value: Any) -> Column:
    """`_compile` over a column: the expression as a function of the chunk's (attributes
    maps, metadata maps), returning one value per element (None: null, key skipped) —
    a list comprehension per operator instead of a call chain per element."""
    if isinstance(value, A.Path):
        field = 0 if value.segments[0] == "attributes" else 1
        first, rest = value.segments[1], value.segments[2:]

        def path(attributes: list[dict], metadata: list[dict]) -> list[Any]:
            out = [m.get(first) for m in (attributes if field == 0 else metadata)]
            for segment in rest:
                out = [c.get(segment) if c.__class__ is dict else None for c in out]
            return out
        return path
    if isinstance(value, A.UpdateCall):
        args = [_compile_column(a) for a in value.args]
        if value.func == "COALESCE":
            x, default = args

            def coalesce(attributes: list[dict], metadata: list[dict]) -> list[Any]:
                return [v if v is not None else d for v, d in
                        zip(x(attributes, metadata), default(attributes, metadata))]
            return coalesce
        if value.func == "CLAMP":
            x, lo, hi = args

            def clamp(attributes: list[dict], metadata: list[dict]) -> list[Any]:
                return _finite([min(max(a, b), c) if a.__class__ in _NUMBERS and
                                b.__class__ in _NUMBERS and c.__class__ in _NUMBERS else None
                                for a, b, c in zip(x(attributes, metadata),
                                                   lo(attributes, metadata),
                                                   hi(attributes, metadata))])
            return clamp
        left, right = args
        multiply = value.func == "MUL"

        def arithmetic(attributes: list[dict], metadata: list[dict]) -> list[Any]:
            pairs = zip(left(attributes, metadata), right(attributes, metadata))
            return _finite([(a * b if multiply else a + b) if a.__class__ in _NUMBERS and
                            b.__class__ in _NUMBERS else None for a, b in pairs])
        return arithmetic
    constant = literal(value)
    return lambda attributes, metadata: [constant] * len(metadata)


def _finite(values: list[Any]) -> list[Any]:
    """`values` with what JSON cannot hold exactly (`_representable`) as None."""
    return [v if v is None or (-math.inf < v < math.inf if v.__class__ is float
                               else _LOW <= v < _HIGH) else None for v in values]


def _compile_entries(entries: tuple[A.UpdateEntry, ...] | None
                     ) -> list[tuple[str, Compiled | None, Any]]:
    """(key, compiled expression or None, plain value) per entry: expressions become
    closures once per command, not a tree walked per element."""
    return [(e.key, _compile(e.value), None) if isinstance(e.value, (A.UpdateCall, A.Path))
            else (e.key, None, literal(e.value)) for e in entries or ()]


def _reads_attributes(entries: tuple[A.UpdateEntry, ...] | None) -> bool:
    """Whether an expression among `entries` reads a path under `attributes`."""
    stack: list[Any] = [e.value for e in entries or ()]
    while stack:
        value = stack.pop()
        if isinstance(value, A.Path):
            if value.segments[:1] == ("attributes",):
                return True
        elif isinstance(value, A.UpdateCall):
            stack.extend(value.args)
    return False


def _values(entries: list[tuple[str, Compiled | None, Any]], attributes: dict,
            metadata: dict) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, expression, plain in entries:
        if expression is None:
            out[key] = plain
            continue
        result = expression(attributes, metadata)
        if result is not None:              # null-yielding expression: key skipped
            out[key] = result
    return out


def _number(value: Any) -> int | float | None:
    if value.__class__ is int or value.__class__ is float:
        return value
    return None                             # bool (an int subclass), str, null, objects


def _compile(value: Any) -> Compiled:
    """An update expression as a function of one element's (attributes, metadata); it
    returns None when the expression yields null."""
    if isinstance(value, A.Path):
        field = 0 if value.segments[0] == "attributes" else 1
        first, rest = value.segments[1], value.segments[2:]

        def path(attributes: dict, metadata: dict) -> Any:
            current = (attributes if field == 0 else metadata).get(first)
            for segment in rest:
                current = current.get(segment) if isinstance(current, dict) else None
            return current
        return path
    if isinstance(value, A.UpdateCall):
        args = [_compile(a) for a in value.args]
        if value.func == "COALESCE":
            x, default = args

            def coalesce(attributes: dict, metadata: dict) -> Any:
                found = x(attributes, metadata)
                return found if found is not None else default(attributes, metadata)
            return coalesce
        # One closure per operator: this runs once per element of a sweep.
        if value.func == "CLAMP":
            x, lo, hi = args

            def clamp(attributes: dict, metadata: dict) -> Any:
                a = _number(x(attributes, metadata))
                b = _number(lo(attributes, metadata))
                c = _number(hi(attributes, metadata))
                if a is None or b is None or c is None:
                    return None
                out = min(max(a, b), c)
                return out if _representable(out) else None
            return clamp
        left, right = args
        multiply = value.func == "MUL"

        def arithmetic(attributes: dict, metadata: dict) -> Any:
            a = _number(left(attributes, metadata))
            b = _number(right(attributes, metadata))
            if a is None or b is None:
                return None
            out = a * b if multiply else a + b
            return out if _representable(out) else None
        return arithmetic
    constant = literal(value)
    return lambda attributes, metadata: constant


def _representable(value: Any) -> bool:
    """JSON can hold it exactly: a finite float, an integer within 64 bits (CONTRACT §3)."""
    if value.__class__ is float:
        return -math.inf < value < math.inf
    return isinstance(value, int) and -(1 << 63) <= value < (1 << 64)
