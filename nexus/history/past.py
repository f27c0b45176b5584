"""The graph as it was: a past state rebuilt from the version log, and a read transaction
that answers from it.

`past_state(txn, seq=…)` / `past_state(txn, ts=…)` reads the log records written after that
point and keeps, per element they changed, its changes newest first. Nothing else is read
up front: an element's state then is folded (its changes undone one by one, from its
current state) the first time a query asks for it. Only elements whose *head* differs then
and now — created since, deleted since, or a link MERGE repointed — change what the index
scans return; those few are indexed by the keys the store's indexes have, and `AsOfTxn`
merges them into the current snapshot's scans, in order. Elements that were only updated
keep their place in every index: they answer their old attributes and metadata. So a read
AS OF a recent point costs the current read plus the records after that point.
"""
from __future__ import annotations

import heapq
from bisect import bisect_right
from typing import TYPE_CHECKING, Any, Iterator

from nexus.history.log import decode_head, entries_after, undo
from nexus.history.recording import PreImage, pre_image
from nexus.store.batched import LoopBatches
from nexus.store.protocol import AuxTable, ConceptHead, Head, JsonMap, LinkHead, ReadTxn

if TYPE_CHECKING:
    from nexus.store.columns import StoreColumns, TxnColumns

_UNSET: Any = object()


class PastState:
    """The elements changed after a point in the log, and (lazily) their state then."""

    def __init__(self, chains: dict[int, list[list[Any]]], ranges: list[tuple[int, int]],
                 entries: int) -> None:
        self.chains = chains                    # n -> its changes after the point, newest first
        self.ranges = sorted(ranges)            # ids created in bulk after the point
        self._starts = [a for a, _ in self.ranges]
        self.entries = entries
        self._at: dict[int, PreImage | None] = {}
        # Elements whose head then differs from now (or that exist only then or only now).
        self.moved = {n for n, chain in chains.items()
                      if any(c[1] in ("c", "d") or (c[1] == "u" and c[2] is not None)
                             for c in chain)}
        self._index: _Index | None = None

    def in_ranges(self, n: int) -> bool:
        if not self.ranges:
            return False
        i = bisect_right(self._starts, n) - 1
        return i >= 0 and n < self.ranges[i][1]

    def changed(self, n: int) -> bool:
        return n in self.chains or self.in_ranges(n)

    def moved_or_new(self, n: int) -> bool:
        """Whether `n`'s head (or existence) then differs from now."""
        return n in self.moved or self.in_ranges(n)

    def at(self, base: ReadTxn, n: int) -> PreImage | None:
        """`n`'s state then: its changes undone from its state in `base` (the snapshot the
        log was read in)."""
        hit = self._at.get(n, _UNSET)
        if hit is not _UNSET:
            return hit
        if self.in_ranges(n):
            state: PreImage | None = None
        else:
            state = pre_image(base, n)
            for change in self.chains.get(n, ()):
                state = undo(change, state)
        self._at[n] = state
        return state

    def index(self, base: ReadTxn) -> "_Index":
        if self._index is None:
            self._index = _Index(self, base)
        return self._index


class _Index:
    """The moved elements that existed then, by the keys the store's indexes have."""

    def __init__(self, past: PastState, base: ReadTxn) -> None:
        self.by_type: dict[int, list[int]] = {}
        self.by_name: dict[str, list[int]] = {}
        self.by_key: dict[tuple[int, str], int] = {}
        self.by_spo: dict[tuple[int, int, int], int] = {}
        self.out: dict[int, list[tuple[int, int, int]]] = {}
        self.inn: dict[int, list[tuple[int, int, int]]] = {}
        self.by_pred: dict[int, list[tuple[int, int, int]]] = {}
        self.present: list[int] = []
        for n in sorted(past.moved):
            pre = past.at(base, n)
            if pre is None:
                continue
            self.present.append(n)
            h = pre.head
            if isinstance(h, ConceptHead):
                self.by_type.setdefault(h.type_id, []).append(n)
                self.by_name.setdefault(h.name, []).append(n)
                self.by_key[(h.type_id, h.name)] = n
            else:
                s, p, o = h.subject, h.predicate_id, h.object
                self.by_spo[(s, p, o)] = n
                self.out.setdefault(s, []).append((p, o, n))
                self.inn.setdefault(o, []).append((p, s, n))
                self.by_pred.setdefault(p, []).append((s, o, n))
        for rows in (*self.out.values(), *self.inn.values(), *self.by_pred.values()):
            rows.sort()


def past_state(txn: ReadTxn, *, seq: int | None = None, ts: int | None = None) -> PastState:
    """The state after log record `seq` (0: before the first), or at time `ts` (epoch ms,
    records at that millisecond included), as seen from the snapshot `txn`."""
    chains: dict[int, list[list[Any]]] = {}
    ranges: list[tuple[int, int]] = []
    entries = entries_after(txn, seq=seq, ts=ts)
    for entry in reversed(entries):
        for change in entry.changes:
            chains.setdefault(change[0], []).append(change)
        ranges.extend((a, b) for a, b in entry.fresh)
    return PastState(chains, ranges, len(entries))


class AsOfTxn(LoopBatches):
    """A `ReadTxn` over the current snapshot `base` that answers as of `past`."""

    def __init__(self, base: ReadTxn, past: PastState) -> None:
        self.base = base
        self.past = past
        self._deltas: dict[str, dict[int, int]] | None = None

    def _index(self) -> _Index:
        return self.past.index(self.base)

    # --- elements --------------------------------------------------------------------------
    def head(self, n: int) -> Head | None:
        if self.past.moved_or_new(n):
            pre = self.past.at(self.base, n)
            return None if pre is None else pre.head
        return self.base.head(n)

    def known_head(self, n: int) -> Head:
        if self.past.moved_or_new(n):
            pre = self.past.at(self.base, n)
            if pre is not None:
                return pre.head
        return self.base.known_head(n)

    def attributes(self, n: int) -> JsonMap:
        if self.past.changed(n):
            pre = self.past.at(self.base, n)
            return {} if pre is None else dict(pre.attributes)
        return self.base.attributes(n)

    def metadata(self, n: int) -> JsonMap:
        if self.past.changed(n):
            pre = self.past.at(self.base, n)
            return {} if pre is None else dict(pre.metadata)
        return self.base.metadata(n)

    def max_id(self) -> int:
        return self.base.max_id()

    def elements(self) -> Iterator[int]:
        moved = self.past.moved_or_new
        return heapq.merge((n for n in self.base.elements() if not moved(n)),
                           self._index().present)

    # --- concept indexes ---------------------------------------------------------------------
    def concept_id(self, type_id: int, name: str) -> int | None:
        m = self.base.concept_id(type_id, name)
        if m is not None and not self.past.moved_or_new(m):
            return m
        if not self.past.moved:
            return None
        return self._index().by_key.get((type_id, name))

    def concepts_of_type(self, type_id: int) -> Iterator[int]:
        moved = self.past.moved_or_new
        return heapq.merge((n for n in self.base.concepts_of_type(type_id) if not moved(n)),
                           self._index().by_type.get(type_id, []))

    def concepts_named(self, name: str) -> Iterator[int]:
        moved = self.past.moved_or_new
        return heapq.merge((n for n in self.base.concepts_named(name) if not moved(n)),
                           self._index().by_name.get(name, []))

    # --- link indexes --------------------------------------------------------------------------
    def link_id(self, subject: int, predicate_id: int, object: int) -> int | None:
        m = self.base.link_id(subject, predicate_id, object)
        if m is not None and not self.past.moved_or_new(m):
            return m
        if not self.past.moved:
            return None
        return self._index().by_spo.get((subject, predicate_id, object))

    def out_links(self, subject: int, predicate_id: int | None = None
                  ) -> Iterator[tuple[int, int, int]]:
        moved = self.past.moved_or_new
        mine = self._index().out.get(subject, []) if self.past.moved else []
        if predicate_id is not None:
            mine = [r for r in mine if r[0] == predicate_id]
        return heapq.merge((r for r in self.base.out_links(subject, predicate_id)
                            if not moved(r[2])), mine)

    def in_links(self, object: int, predicate_id: int | None = None
                 ) -> Iterator[tuple[int, int, int]]:
        moved = self.past.moved_or_new
        mine = self._index().inn.get(object, []) if self.past.moved else []
        if predicate_id is not None:
            mine = [r for r in mine if r[0] == predicate_id]
        return heapq.merge((r for r in self.base.in_links(object, predicate_id)
                            if not moved(r[2])), mine)

    def links_of_predicate(self, predicate_id: int) -> Iterator[tuple[int, int, int]]:
        moved = self.past.moved_or_new
        return heapq.merge((r for r in self.base.links_of_predicate(predicate_id)
                            if not moved(r[2])), self._index().by_pred.get(predicate_id, []))

    def link_predicates(self) -> Iterator[int]:
        mine = self._index().by_pred
        return iter(sorted(set(self.base.link_predicates()) | {p for p, rows in mine.items()
                                                              if rows}))

    # --- statistics ----------------------------------------------------------------------------
    def _delta(self) -> dict[str, dict[int, int]]:
        """Count corrections: minus the moved elements as they are now, plus as they were."""
        if self._deltas is not None:
            return self._deltas
        d: dict[str, dict[int, int]] = {"type": {}, "pred": {}, "all": {0: 0, 1: 0}}

        def count(h: Head | None, sign: int) -> None:
            if isinstance(h, ConceptHead):
                d["type"][h.type_id] = d["type"].get(h.type_id, 0) + sign
                d["all"][0] += sign
            elif isinstance(h, LinkHead):
                d["pred"][h.predicate_id] = d["pred"].get(h.predicate_id, 0) + sign
                d["all"][1] += sign
        past = self.past
        ids = set(past.moved)
        for a, b in past.ranges:
            ids.update(range(a, b))
        for n in ids:
            count(self.base.head(n), -1)
            pre = past.at(self.base, n)
            count(None if pre is None else pre.head, +1)
        self._deltas = d
        return d

    def count_type(self, type_id: int) -> int:
        return self.base.count_type(type_id) + self._delta()["type"].get(type_id, 0)

    def count_predicate(self, predicate_id: int) -> int:
        return self.base.count_predicate(predicate_id) + \
            self._delta()["pred"].get(predicate_id, 0)

    def count_concepts(self) -> int:
        return self.base.count_concepts() + self._delta()["all"][0]

    def count_links(self) -> int:
        return self.base.count_links() + self._delta()["all"][1]

    # --- the rest: the current snapshot's -------------------------------------------------------
    def symbol_id(self, text: str) -> int | None:
        return self.base.symbol_id(text)

    def symbol_text(self, sid: int) -> str:
        return self.base.symbol_text(sid)

    def aux(self, table: str) -> AuxTable:
        return self.base.aux(table)

    def snapshot_id(self) -> int | None:
        return None             # nothing derived from the current snapshot applies

    def store_token(self) -> int:
        return self.base.store_token()

    def columns(self) -> "TxnColumns | None":
        return None             # the columnar executor reads the current arrays: not here

    def column_cache(self) -> "StoreColumns | None":
        return None


def _check_protocol(txn: AsOfTxn) -> ReadTxn:
    return txn          # mypy: AsOfTxn is a ReadTxn


__all__ = ["AsOfTxn", "PastState", "past_state", "decode_head"]
