"""The graph as it was: a past state rebuilt from the version log, and a read transaction
that answers from it.

`past_state(txn, seq=…)` / `past_state(txn, ts=…)` undoes the log records written after
that point, newest first, starting from the current state: for each element they changed it
keeps its state then — or "absent" when it was created after. `AsOfTxn` then answers every read of the store
protocol from the current snapshot, except for those elements, whose past state it answers
instead (the index scans filtered and merged in their order). A recent point in time has
few records after it, so a read AS OF it costs about what the current read does.
"""
from __future__ import annotations

import heapq
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

from nexus.history.log import entries_after, undo
from nexus.history.recording import PreImage, pre_image
from nexus.store.protocol import AuxTable, ConceptHead, Head, JsonMap, LinkHead, ReadTxn

if TYPE_CHECKING:
    from nexus.store.columns import StoreColumns, TxnColumns


@dataclass
class PastState:
    """Each element changed after the point: its state then (None: it did not exist)."""
    pre: dict[int, PreImage | None]
    ranges: list[tuple[int, int]]               # [start, end) ids created in bulk after
    entries: int = 0                            # log records undone
    _starts: list[int] = field(default_factory=list)
    _index: "_Index | None" = None

    def __post_init__(self) -> None:
        self.ranges.sort()
        self._starts = [a for a, _ in self.ranges]

    def in_ranges(self, n: int) -> bool:
        i = bisect_right(self._starts, n) - 1
        return i >= 0 and n < self.ranges[i][1]

    def known(self, n: int) -> bool:
        return n in self.pre or (bool(self.ranges) and self.in_ranges(n))

    def at(self, n: int) -> PreImage | None:
        if self.ranges and self.in_ranges(n):
            return None
        return self.pre.get(n)

    @property
    def index(self) -> "_Index":
        if self._index is None:
            self._index = _Index(self)
        return self._index


class _Index:
    """The past elements by the keys the store's indexes have, sorted as those are."""

    def __init__(self, past: PastState) -> None:
        self.by_type: dict[int, list[int]] = {}
        self.by_name: dict[str, list[int]] = {}
        self.by_key: dict[tuple[int, str], int] = {}
        self.by_spo: dict[tuple[int, int, int], int] = {}
        self.out: dict[int, list[tuple[int, int, int]]] = {}
        self.inn: dict[int, list[tuple[int, int, int]]] = {}
        self.by_pred: dict[int, list[tuple[int, int, int]]] = {}
        self.present: list[int] = []
        for n in sorted(past.pre):
            pre = past.at(n)
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
    records at that millisecond included): the records after it undone, newest first,
    from the current state of `txn`."""
    state: dict[int, PreImage | None] = {}
    ranges: list[tuple[int, int]] = []
    entries = entries_after(txn, seq=seq, ts=ts)
    for entry in reversed(entries):
        for change in entry.changes:
            n = change[0]
            after = state[n] if n in state else pre_image(txn, n)
            state[n] = undo(change, after)
        ranges.extend((a, b) for a, b in entry.fresh)
    return PastState(state, ranges, len(entries))


class AsOfTxn:
    """A `ReadTxn` over the current snapshot `base` that answers as of `past`."""

    def __init__(self, base: ReadTxn, past: PastState) -> None:
        self.base = base
        self.past = past
        self._deltas: dict[str, dict[int, int]] | None = None

    # --- elements --------------------------------------------------------------------------
    def head(self, n: int) -> Head | None:
        past = self.past
        if past.known(n):
            pre = past.at(n)
            return None if pre is None else pre.head
        return self.base.head(n)

    def known_head(self, n: int) -> Head:
        past = self.past
        if past.known(n):
            pre = past.at(n)
            if pre is not None:
                return pre.head
        return self.base.known_head(n)

    def attributes(self, n: int) -> JsonMap:
        if self.past.known(n):
            pre = self.past.at(n)
            return {} if pre is None else dict(pre.attributes)
        return self.base.attributes(n)

    def metadata(self, n: int) -> JsonMap:
        if self.past.known(n):
            pre = self.past.at(n)
            return {} if pre is None else dict(pre.metadata)
        return self.base.metadata(n)

    def max_id(self) -> int:
        return self.base.max_id()

    def elements(self) -> Iterator[int]:
        known = self.past.known
        return heapq.merge((n for n in self.base.elements() if not known(n)),
                           self.past.index.present)

    # --- concept indexes ---------------------------------------------------------------------
    def concept_id(self, type_id: int, name: str) -> int | None:
        m = self.base.concept_id(type_id, name)
        if m is not None and not self.past.known(m):
            return m
        return self.past.index.by_key.get((type_id, name))

    def concepts_of_type(self, type_id: int) -> Iterator[int]:
        known = self.past.known
        return heapq.merge((n for n in self.base.concepts_of_type(type_id) if not known(n)),
                           self.past.index.by_type.get(type_id, []))

    def concepts_named(self, name: str) -> Iterator[int]:
        known = self.past.known
        return heapq.merge((n for n in self.base.concepts_named(name) if not known(n)),
                           self.past.index.by_name.get(name, []))

    # --- link indexes --------------------------------------------------------------------------
    def link_id(self, subject: int, predicate_id: int, object: int) -> int | None:
        m = self.base.link_id(subject, predicate_id, object)
        if m is not None and not self.past.known(m):
            return m
        return self.past.index.by_spo.get((subject, predicate_id, object))

    def out_links(self, subject: int, predicate_id: int | None = None
                  ) -> Iterator[tuple[int, int, int]]:
        known = self.past.known
        mine = self.past.index.out.get(subject, [])
        if predicate_id is not None:
            mine = [r for r in mine if r[0] == predicate_id]
        return heapq.merge((r for r in self.base.out_links(subject, predicate_id)
                            if not known(r[2])), mine)

    def in_links(self, object: int, predicate_id: int | None = None
                 ) -> Iterator[tuple[int, int, int]]:
        known = self.past.known
        mine = self.past.index.inn.get(object, [])
        if predicate_id is not None:
            mine = [r for r in mine if r[0] == predicate_id]
        return heapq.merge((r for r in self.base.in_links(object, predicate_id)
                            if not known(r[2])), mine)

    def links_of_predicate(self, predicate_id: int) -> Iterator[tuple[int, int, int]]:
        known = self.past.known
        return heapq.merge((r for r in self.base.links_of_predicate(predicate_id)
                            if not known(r[2])), self.past.index.by_pred.get(predicate_id, []))

    # --- statistics ----------------------------------------------------------------------------
    def _delta(self) -> dict[str, dict[int, int]]:
        """Count corrections: minus the known elements as they are now, plus as they were."""
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
        ids = set(past.pre)
        for a, b in past.ranges:
            ids.update(range(a, b))
        for n in ids:
            count(self.base.head(n), -1)
            pre = past.at(n)
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
