"""EXPORT (spec §5.3, CONTRACT §10): the elements a WHERE binds, as a Knowledge Capsule.

Owns `EXPORT ?x WHERE {...} [LIMIT n] [CURSOR "..."]`, a read (META: allowed on
`execute_kip_readonly`) over one snapshot:

* the elements are the distinct concepts and links bound to `?x` (a variable bound nowhere
  is `KIP_3001`), less the protected Genesis core that every nexus has
  (`nexus.exec.capsule`), put in capsule order — definitions first, a link after the links
  it refers to — so pages applied in order never refer forward;
* a page holds at most `LIMIT` elements (default and cap `PAGE_CAP`); when more remain the
  response carries `next_cursor`, an opaque token of the offset and a fingerprint of the
  command (a cursor of another EXPORT, or of other parameter values, is `KIP_1001`);
* the capsule text is `nexus.exec.capsule`'s (the same as `kip export`): `UPSERT`
  statements of at most `STATEMENT_BLOCKS` blocks; ends outside a statement, including
  elements of earlier pages, are `{type, name}` or structural `(s, "p", o)` references.

Result: `{"capsule": "<KIP UPSERT script>", "concepts": n, "propositions": m}`.
"""
from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

from ..errors import ErrorCode, KipError
from ..store.protocol import ConceptHead
from ..syntax import ast as A
from ..syntax.printer import to_text
from .capsule import CapsuleWriter
from .context import ExecContext
from .registry import executes
from .shape import cursor_data, cursor_token

PAGE_CAP = 1000             # elements per page, with or without LIMIT
STATEMENT_BLOCKS = 200      # blocks per UPSERT statement in a capsule


@executes(A.Export)
def execute_export(ctx: ExecContext, command: A.Export, params: Any = None
                   ) -> tuple[dict[str, Any], str | None]:
    from .kql import solutions  # the KQL engine's WHERE matcher (imported late: no cycle)
    limit = _int(command.limit) if command.limit is not None else PAGE_CAP
    page_size = min(limit, PAGE_CAP)
    fingerprint = _fingerprint(command)
    offset = _offset(command.cursor, fingerprint) if command.cursor is not None else 0
    txn = ctx.txn
    writer = CapsuleWriter(txn)
    found: dict[int, None] = {}
    for row in solutions(ctx, command.where, [command.target]):
        n = row[0]
        if n is not None and n not in found:
            found[n] = None
            if len(found) > ctx.limits.max_rows:
                raise ctx.too_many_rows("elements to export")
    ctx.check_deadline()
    chosen = [n for n in found if not writer.is_core(txn.known_head(n))]
    concepts, links = writer.order(chosen)
    ordered = concepts + links
    page = ordered[offset:offset + page_size]
    more = offset + page_size < len(ordered)
    parts: list[str] = []
    n_concepts = 0
    for i in range(0, len(page), STATEMENT_BLOCKS):     # concepts first, then links
        chunk = page[i:i + STATEMENT_BLOCKS]
        cs = [n for n in chunk if type(txn.known_head(n)) is ConceptHead]
        n_concepts += len(cs)
        parts.append(writer.statement(cs, chunk[len(cs):]))
    result = {"capsule": "\n".join(parts), "concepts": n_concepts,
              "propositions": len(page) - n_concepts}
    cursor = cursor_token({"o": offset + page_size, "f": fingerprint}) if more else None
    return result, cursor


def _int(value: A.Value) -> int:
    v = value.value if isinstance(value, A.Literal) else value
    if type(v) is not int or v < 1:
        raise KipError(ErrorCode.KIP_1001, f"EXPORT LIMIT must be a positive integer, got {v!r}",
                       f"Write LIMIT n with 1 <= n; pages hold at most {PAGE_CAP} elements.")
    return v


def _fingerprint(command: A.Export) -> str:
    """What identifies "the same EXPORT": its target and WHERE with parameters bound."""
    text = to_text(dataclasses.replace(command, limit=None, cursor=None, pos=None))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _offset(cursor: A.Value, fingerprint: str) -> int:
    token = cursor.value if isinstance(cursor, A.Literal) else cursor
    data = cursor_data(token, 512)
    offset = data.get("o") if data is not None else None
    if type(offset) is not int or offset < 0 or data is None or data.get("f") != fingerprint:
        raise KipError(ErrorCode.KIP_1001, "Invalid CURSOR: it does not belong to this EXPORT",
                       "Pass the `next_cursor` returned by the previous page of the same "
                       "EXPORT (same target, WHERE and parameters), or drop CURSOR to start "
                       "over.")
    return offset
