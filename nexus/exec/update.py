"""UPDATE (RC11 §4.3): pattern-matched bulk mutation of existing concepts or links.

Owns the execution of `UPDATE ?target SET ATTRIBUTES {…} SET METADATA {…} WHERE {…} LIMIT n`:

* the targets are the distinct elements bound to `?target` by the WHERE (the KQL matcher,
  `nexus.exec.kql.solutions`), at most LIMIT of them — read first (their ids only, so the
  scan never runs under its own writes), then written, all in the command's transaction:
  atomic, like every command;
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
    targets: list[int] = []
    for (n,) in solutions(ctx, command.where, [command.target], params):
        if n is None:
            continue                        # ?target unbound in an OPTIONAL branch
        targets.append(n)
        if limit is not None and len(targets) >= limit:
            break
    txn = ctx.txn
    updated = 0
    set_attributes = _compile_entries(command.attributes)
    set_metadata = _compile_entries(command.metadata)
    # A metadata sweep (the decay pattern) never needs the stored attributes: not read.
    read_attributes = bool(set_attributes) or _reads_attributes(command.metadata)
    no_attributes: dict = {}
    # A chunk of targets is read and computed, then its metadata-only writes go to the
    # store in one call. The cyclic GC is paused meanwhile: the session's bookkeeping (the
    # version log's pre-images) holds a few objects per element, and each full collection
    # would walk them all again (a sweep creates no cycles; refcounting frees the rest).
    with gc_paused():
        for start in range(0, len(targets), CHUNK):
            ctx.check_deadline()
            batch: list[tuple[int, dict, dict]] = []
            for n in targets[start:start + CHUNK]:
                head = txn.head(n)
                if head is None:
                    continue
                stored_meta = txn.metadata(n)
                stored_attributes = txn.attributes(n) if read_attributes else no_attributes
                attributes = _values(set_attributes, stored_attributes, stored_meta)
                metadata = _values(set_metadata, stored_attributes, stored_meta)
                protect.check_write(ctx, head, attributes or None, command.pos)
                if attributes:
                    writes.update_known(ctx, n, stored_attributes, stored_meta, attributes,
                                        metadata or None)
                elif metadata:
                    batch.append((n, stored_meta, metadata))
                else:
                    continue
                updated += 1
            writes.update_metadata_many(ctx, batch)
    if ctx.dry_run:
        return {"updated": 0, "matched": 0}, None
    return {"updated": updated, "matched": len(targets)}, None


Compiled = Callable[[dict, dict], Any]


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
