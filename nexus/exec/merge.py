"""MERGE (spec §4.4, CONTRACT §10): consolidate one concept node into another, atomically.

Owns `MERGE CONCEPT ?source INTO ?target WHERE {...}`:

* binding: `?source` and `?target` must each bind exactly one concept node (none →
  `KIP_3002`, several → `KIP_3003`, a link → `KIP_1001`) of the same type (else `KIP_2002`);
  the same node on both sides is a no-op success. A missing source whose `{type, name}` is
  already listed in the target's `_merged_from` gets a hint saying the merge already
  happened (replay of a committed MERGE);
* protection: a protected source or target (core definitions, `$self` / `$system`) is
  `KIP_3004`; a type or predicate definition still in use cannot be the source (`KIP_2002`,
  as for DELETE CONCEPT: its instances would be left undefined);
* links: every link with the source as subject or object is repointed to the target,
  keeping its id (`WriteTxn.repoint_links`, one batch; `_version` +1, and its search
  document brought up to date: it holds its ends' names — `writes.touch` tells the index
  which end moved, so that it swaps that end's terms in the stored entry instead of
  deriving the whole document again). When the repointed triple
  already exists, the existing link survives: its missing attribute / author-metadata keys
  are filled from the duplicate (existing keys win), the links that refer to the duplicate
  (higher-order) are moved onto the survivor the same way, and the duplicate is deleted;
* attributes: source keys absent on the target are copied (the target wins on conflict);
  `aliases` is the union of both, plus the source's name; `_merged_from` on the target gets
  the source's own `_merged_from` entries, then `"<Type>:<name>"` of the source (no
  duplicates); the source is deleted.

Result: `{"merged": true, "links_repointed", "links_deduplicated", "attributes_filled"}`;
`attributes_filled` counts the target's attribute keys the merge added or changed
(`aliases` included). A dry run validates everything and answers zero counts with
`"merged": false` (the API rolls the transaction back).
"""
from __future__ import annotations

from typing import Any

from ..errors import ErrorCode, KipError
from ..search.text import endpoint_text
from ..store.bulk import gc_paused
from ..store.protocol import ConceptHead, LinkHead, WriteTxn
from ..syntax import ast as A
from . import protect, writes
from .context import WriteContext
from .registry import executes
from .writes import pos_kw

MERGED_FROM = "_merged_from"
ALIASES = "aliases"


@executes(A.Merge)
def execute_merge(ctx: WriteContext, command: A.Merge, params: Any = None
                  ) -> tuple[dict[str, Any], None]:
    source, target = _bind(ctx, command)
    txn = ctx.txn
    result = {"merged": not ctx.dry_run, "links_repointed": 0, "links_deduplicated": 0,
              "attributes_filled": 0}
    if source == target:
        return result, None
    src = txn.known_head(source)
    dst = txn.known_head(target)
    assert isinstance(src, ConceptHead) and isinstance(dst, ConceptHead)
    for head in (src, dst):
        if not ctx.privileged and (protect.is_immutable(txn, head)
                                   or protect.is_actor(txn, head)):
            raise KipError(ErrorCode.KIP_3004,
                           f"Cannot MERGE {protect.label(txn, head)}: it is a protected "
                           f"system element",
                           "Protected definitions and the $self / $system actors are never "
                           "merged; merge ordinary concepts only.", **pos_kw(command.pos))
    protect.check_definitions_unused(ctx, [src], {source}, set())
    # Many short-lived objects and no cycles: the collector would only walk the heap
    # (every cached head) over and over while the links move.
    with gc_paused():
        repointed, removed = _move_links(ctx, source, target)
        filled = _fill_target(ctx, src, dst)
        writes.delete(ctx, source)
    if ctx.dry_run:
        return result, None
    result.update(links_repointed=len(repointed), links_deduplicated=removed,
                  attributes_filled=filled)
    return result, None


# --- binding ------------------------------------------------------------------------------

def _bind(ctx: WriteContext, command: A.Merge) -> tuple[int, int]:
    from .kql import solutions  # the KQL engine's WHERE matcher (imported late: no cycle)
    try:
        rows = list(solutions(ctx, command.where, [command.source, command.target]))
    except KipError as e:
        if e.code is ErrorCode.KIP_3002:
            _raise_if_merged(ctx, command)
        raise
    sources = list(dict.fromkeys(r[0] for r in rows if r[0] is not None))
    targets = list(dict.fromkeys(r[1] for r in rows if r[1] is not None))
    for var, found in ((command.source, sources), (command.target, targets)):
        if not found:
            if var == command.source:
                _raise_if_merged(ctx, command)
            raise KipError(ErrorCode.KIP_3002,
                           f"MERGE: ?{var} matched no concept",
                           f"Check the WHERE clause that binds ?{var} (its type and name); "
                           f"use SEARCH CONCEPT to find the right node.",
                           **pos_kw(command.pos))
        if len(found) > 1:
            raise KipError(ErrorCode.KIP_3003,
                           f"MERGE: ?{var} matched {len(found)} concepts; it must bind "
                           f"exactly one",
                           f"Bind ?{var} to one node, e.g. ?{var} {{type: \"...\", name: "
                           f"\"...\"}} or {{id: \"C:...\"}}.", **pos_kw(command.pos))
    source, target = sources[0], targets[0]
    txn = ctx.txn
    heads = [txn.known_head(source), txn.known_head(target)]
    for var, head in zip((command.source, command.target), heads):
        if not isinstance(head, ConceptHead):
            raise KipError(ErrorCode.KIP_1001,
                           f"MERGE: ?{var} is bound to a proposition link, not a concept",
                           f"MERGE CONCEPT consolidates concept nodes: bind ?{var} with a "
                           f"concept clause ?{var} {{type: \"...\", name: \"...\"}}.",
                           **pos_kw(command.pos))
    s, t = heads
    assert isinstance(s, ConceptHead) and isinstance(t, ConceptHead)
    if s.type_id != t.type_id:
        raise KipError(ErrorCode.KIP_2002,
                       f"MERGE: {protect.label(txn, s)} and {protect.label(txn, t)} are of "
                       f"different types",
                       "Only concepts of the same type can be merged; to relate concepts "
                       "of different types, UPSERT a proposition between them.",
                       **pos_kw(command.pos))
    return source, target


def _raise_if_merged(ctx: WriteContext, command: A.Merge) -> None:
    """KIP_3002 with the "already merged" hint when the source's `{type, name}` clause
    names a node the target's `_merged_from` lists (a replayed MERGE)."""
    source = _literal_identity(command.where, command.source)
    target = _literal_identity(command.where, command.target)
    if source is None or target is None:
        return
    txn = ctx.txn
    tid = txn.symbol_id(target[0])
    n = txn.concept_id(tid, target[1]) if tid is not None else None
    if n is None:
        return
    entry = f"{source[0]}:{source[1]}"
    trail = txn.metadata(n).get(MERGED_FROM)
    if isinstance(trail, list) and entry in trail:
        raise KipError(ErrorCode.KIP_3002,
                       f"MERGE: the source {entry} does not exist: it was already merged "
                       f"into {target[0]}:{target[1]}",
                       f"Nothing to do: {entry} was already merged into "
                       f"{target[0]}:{target[1]} (listed in its metadata._merged_from); "
                       f"treat this as success.", **pos_kw(command.pos))


def _literal_identity(where: tuple[A.Pattern, ...], var: str) -> tuple[str, str] | None:
    for p in where:
        if isinstance(p, A.ConceptPattern) and p.var == var:
            t, name = p.match.type, p.match.name
            if (isinstance(t, A.Literal) and isinstance(name, A.Literal)
                    and isinstance(t.value, str) and isinstance(name.value, str)):
                return t.value, name.value
    return None


# --- links --------------------------------------------------------------------------------

def _move_links(ctx: WriteContext, source: int, target: int) -> tuple[dict[int, None], int]:
    """Repoint every link touching `source` onto `target` (one `repoint_links` call); on a
    collision keep the existing link, fill it, move what refers to the duplicate onto it
    (another batch), delete the duplicate.
    Returns (the ids repointed, in order; how many duplicates were deleted)."""
    txn = ctx.txn
    repointed: dict[int, None] = {}
    doomed: list[int] = []
    work = [(source, target)]
    while work:
        old, new = work.pop()
        moves, heads = _moves(txn, old, new)
        if not moves:
            continue
        ends = (endpoint_text(txn, old), endpoint_text(txn, new))
        ctx.check_deadline()
        before = ctx.before_heads      # where each link was (`WriteContext.before_heads`)
        if before is not None:
            for head in heads:
                before.setdefault(head.n, head)
        made: list[int] = []
        for (link, _, _), holder in zip(moves, txn.repoint_links(moves, heads)):
            if holder is None:
                made.append(link)
                repointed[link] = None
            else:
                _fill_link(ctx, holder, link)
                work.append((link, holder))
                doomed.append(link)
        writes.touch(ctx, made, ends)   # _version +1; their documents change with their ends
    for link in doomed:
        protect.check_delete(ctx, txn.head(link))
        writes.delete(ctx, link)
        repointed.pop(link, None)
    return repointed, len(doomed)


def _moves(txn: WriteTxn, old: int, new: int
           ) -> tuple[list[tuple[int, int, int]], list[LinkHead]]:
    """`(link, subject, object)` moving each link that touches `old` onto `new`, in index
    order (leaving, then entering), and each link's head as it is: both from the link
    indexes (the store need not read the heads again)."""
    moves: dict[int, tuple[int, int, int]] = {}
    heads: dict[int, LinkHead] = {}
    for p, o, link in txn.out_links(old):
        moves[link] = (link, new, new if o == old else o)
        heads[link] = LinkHead(link, old, p, o)
    for p, s, link in txn.in_links(old):
        if link not in moves:
            moves[link] = (link, s, new)
            heads[link] = LinkHead(link, s, p, old)
    return list(moves.values()), list(heads.values())


def _fill_link(ctx: WriteContext, survivor: int, duplicate: int) -> None:
    """Copy the duplicate's attribute / author-metadata keys the survivor lacks."""
    txn = ctx.txn
    have_a, have_m = txn.attributes(survivor), txn.metadata(survivor)
    add_a = {k: v for k, v in txn.attributes(duplicate).items() if k not in have_a}
    add_m = {k: v for k, v in txn.metadata(duplicate).items()
             if k not in have_m and not k.startswith("_")}
    if add_a or add_m:
        protect.check_write(ctx, txn.head(survivor), add_a)
        writes.update(ctx, survivor, add_a, add_m)


# --- the target's attributes and provenance -----------------------------------------------

def _fill_target(ctx: WriteContext, src: ConceptHead, dst: ConceptHead) -> int:
    txn = ctx.txn
    mine, theirs = txn.attributes(dst.n), txn.attributes(src.n)
    changes: dict[str, Any] = {k: v for k, v in theirs.items()
                               if k != ALIASES and k not in mine}
    aliases = _as_list(mine.get(ALIASES))
    merged = list(aliases)
    for value in _as_list(theirs.get(ALIASES)) + [src.name]:
        if value not in merged and value != dst.name:
            merged.append(value)
    if merged != aliases or (ALIASES in mine and not isinstance(mine[ALIASES], list)):
        changes[ALIASES] = merged
    trail = _as_list(txn.metadata(dst.n).get(MERGED_FROM))
    entry = f"{txn.symbol_text(src.type_id)}:{src.name}"
    for value in _as_list(txn.metadata(src.n).get(MERGED_FROM)) + [entry]:
        if value not in trail:
            trail.append(value)
    writes.update(ctx, dst.n, changes, {MERGED_FROM: trail})
    return len(changes)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]
