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
from typing import Any, Mapping

from ..errors import ErrorCode, KipError
from ..syntax import ast as A
from . import protect, writes
from .context import WriteContext
from .kql import solutions
from .registry import executes
from .upsert import literal

Params = Mapping[str, Any]
_SKIP = object()            # an expression that yielded null: the key is not written


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
    for n in targets:
        ctx.check_deadline()
        head = txn.head(n)
        if head is None:
            continue
        stored_attributes, stored_meta = txn.attributes(n), txn.metadata(n)
        attributes = _values(command.attributes, stored_attributes, stored_meta)
        metadata = _values(command.metadata, stored_attributes, stored_meta)
        protect.check_write(ctx, head, attributes or None, command.pos)
        if not attributes and not metadata:
            continue
        writes.update_known(ctx, n, stored_attributes, stored_meta, attributes or None,
                            metadata or None)
        updated += 1
    if ctx.dry_run:
        return {"updated": 0, "matched": 0}, None
    return {"updated": updated, "matched": len(targets)}, None


def _values(entries: tuple[A.UpdateEntry, ...] | None, attributes: dict, metadata: dict
            ) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for entry in entries or ():
        value = entry.value
        if isinstance(value, (A.UpdateCall, A.Path)):
            result = _eval(value, attributes, metadata)
            if result is None:
                continue                    # null-yielding expression: key skipped
            out[entry.key] = result
        else:
            out[entry.key] = literal(value)
    return out


def _number(value: Any) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def _eval(value: Any, attributes: dict, metadata: dict) -> Any:
    """An update expression over one element's own state; None when it yields null."""
    if isinstance(value, A.Path):
        source = attributes if value.segments[0] == "attributes" else metadata
        current: Any = source
        for segment in value.segments[1:]:
            current = current.get(segment) if isinstance(current, dict) else None
        return current
    if isinstance(value, A.UpdateCall):
        if value.func == "COALESCE":
            first = _eval(value.args[0], attributes, metadata)
            return first if first is not None else _eval(value.args[1], attributes, metadata)
        args = [_number(_eval(a, attributes, metadata)) for a in value.args]
        if any(a is None for a in args):
            return None
        if value.func == "ADD":
            out = args[0] + args[1]         # type: ignore[operator]
        elif value.func == "MUL":
            out = args[0] * args[1]         # type: ignore[operator]
        else:
            x, lo, hi = args
            out = min(max(x, lo), hi)       # type: ignore[type-var]
        return _number(out) if _representable(out) else None
    return literal(value)


def _representable(value: Any) -> bool:
    """JSON can hold it exactly: a finite float, an integer within 64 bits (CONTRACT §3)."""
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int) and -(1 << 63) <= value < (1 << 64)
