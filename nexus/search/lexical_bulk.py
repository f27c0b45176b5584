"""A bulk write's postings, held and written once per list (`Deferred`, `finish`).

Owns how the new documents' postings of the chunks one write transaction stages (a bulk
load's, a reindex's) are kept between the chunks and written at the end, each term's list
once, in key order, and appended where LMDB allows it (`Tail`); and the buffered view of
the `lex` table the writers hand to `postings` (`Buffered`). The key layout is
`lexical`'s (its module doc); `lexical._Writer` feeds `Deferred`.
"""
from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from itertools import islice
from typing import Any, Iterable, Iterator, Mapping

import numpy as np

from . import postings
from .lexical_cols import Derived

KIND_BYTES = (b"c", b"p")       # kind byte of concepts, links (see `lexical`)
_U32 = struct.Struct(">I")


class Buffered:
    """The `lex` table as `_Writer.flush` hands it to `postings`: reads and deletes go
    through, puts are collected for one sorted insert at the end (a fold writes a block
    and a df per term: one C call instead of two checked Python calls per term). Safe
    because each key is read before the flush writes it, and written at most once."""

    __slots__ = ("get", "scan", "delete", "puts")

    def __init__(self, aux: Any) -> None:
        self.get, self.scan, self.delete = aux.get, aux.scan, aux.delete
        self.puts: dict[bytes, bytes] = {}

    def put(self, key: bytes, value: bytes) -> None:
        self.puts[key] = value


def put_columns(lex: Any, cols: Mapping[bytes, tuple[postings.Columns, int, int]],
                 buf: Buffered, fresh: Buffered) -> None:
    """Write the new documents' postings `cols` (term key -> a run of columns), each
    term's df with them: a new list into `fresh`, an append to a list into `buf`."""
    for tb, (columns, start, end) in cols.items():
        key = b"d" + tb
        prefix = b"t" + tb + b"\x00"
        raw = lex.get(key)
        if raw is None:         # a term without postings gets its first list
            fresh.put(key, _U32.pack(columns.create(fresh, prefix, start, end)))
            continue
        got = columns.append(buf, prefix, start, end)
        if got is None:         # (ids not all after the list's: the general path)
            ids = columns.ids[start:end]
            weights, groups = columns.weights[start:end], columns.groups[start:end]
            got = postings.apply(buf, prefix, dict(zip(
                ids.tolist(), zip(weights.tolist(), groups.tolist()))))
        buf.put(key, _U32.pack(_U32.unpack(raw)[0] + got))


DEFER_RUN = 400_000         # postings written per sorted insert by `finish`
MOVE_MAX = 20_000           # keys after a kind's lists that `finish` moves (see there)


class Deferred:
    """The postings of new documents that several `write`s of one transaction (a bulk
    load's chunks, a reindex's) leave for `finish` to write once, each term's list whole,
    in key order.

    Why: written per chunk, each term's list gets a block (or a longer last block) once per
    chunk between the keys of other terms, and LMDB splits the pages it inserts into in
    half: the postings of a 100k load filled their pages to 49 % (111.5 MB of pages for
    54.5 MB of keys and values). Inserted once, in key order, each page is filled before
    the next is started, as by an append.

    Held compactly between the writes: per posting a term code (int32) and its weight
    (float32), per document its id, group and number of terms (~9 bytes a posting; the
    term strings once each). A write that changes or removes a document held here first
    writes everything held (`flush_if_touched`): the lists are then as they would be
    without deferring, and the change applies to them as usual."""

    __slots__ = ("kinds", "low", "high", "size")

    def __init__(self) -> None:
        # per kind: (term -> code, [codes int32], [weights float32], [ids], [groups],
        # [counts]); the arrays one per write
        self.kinds: tuple[tuple[dict[str, int], list[np.ndarray], list[np.ndarray],
                                list[np.ndarray], list[np.ndarray], list[np.ndarray]],
                          ...] = tuple(({}, [], [], [], [], []) for _ in KIND_BYTES)
        self.low, self.high, self.size = 0, -1, 0

    def __bool__(self) -> bool:
        return self.size > 0

    def take(self, cols: tuple[tuple[list[str], list[float], list[int], list[int],
                                     list[int]], ...]) -> None:
        """Hold a `_Writer`'s new-document columns (see `_Writer.cols`)."""
        for kind, (terms, weights, ids, groups, counts) in enumerate(cols):
            if not ids:
                continue
            index, codes, ws, id_cols, group_cols, count_cols = self.kinds[kind]
            setd = index.setdefault
            codes.append(np.fromiter([setd(t, len(index)) for t in terms], dtype=np.int32,
                                     count=len(terms)))
            # (float64 -> float32 as `postings._arrays` rounds them: the same blocks)
            ws.append(np.array(weights, dtype=np.float64).astype(np.float32))
            id_cols.append(np.array(ids, dtype=np.uint64))
            group_cols.append(np.array(groups, dtype=np.uint32))
            count_cols.append(np.array(counts, dtype=np.int64))
            low, high = min(ids), max(ids)
            self.low = low if not self.size else min(self.low, low)
            self.high = max(self.high, high)
            self.size += len(terms) or 1

    def take_derived(self, d: Derived) -> None:
        """Hold a chunk's postings derived from its columns (`lexical_cols.Derived`)."""
        if not len(d.ids):
            return
        index, codes, ws, id_cols, group_cols, count_cols = self.kinds[d.kind]
        if not index:
            # (the first chunk held — a command's only one: its terms, distinct, are coded
            # in their order, so its codes are the chunk's own)
            index.update(zip(d.terms, range(len(d.terms))))
            codes.append(d.codes.astype(np.int32))
        else:
            setd = index.setdefault
            known = np.fromiter([setd(t, len(index)) for t in d.terms], dtype=np.int32,
                                count=len(d.terms))
            codes.append(known[d.codes])
        ws.append(d.weights.astype(np.float32))     # (as `take` rounds them)
        id_cols.append(d.ids.astype(np.uint64))
        group_cols.append(d.groups.astype(np.uint32))
        count_cols.append(d.counts.astype(np.int64))
        low, high = int(d.ids.min()), int(d.ids.max())
        self.low = low if not self.size else min(self.low, low)
        self.high = max(self.high, high)
        self.size += len(d.codes) or 1

    def holds(self, kind: int) -> bool:
        """Whether postings of `kind` are held."""
        return bool(self.kinds[kind][1])

    def touches(self, ids: list[int]) -> bool:
        """Whether any of `ids` is a document held here."""
        if not self.size or not ids:
            return False
        inside = [n for n in ids if self.low <= n <= self.high]
        if not inside:
            return False
        held = np.concatenate([c for kind in self.kinds for c in kind[3]])
        return bool(np.isin(np.array(inside, dtype=np.uint64), held).any())

    def runs(self, kind: int) -> Iterator[dict[bytes, tuple[postings.Columns, int, int]]]:
        """The held postings of `kind`, as `_Writer._columns` gives them, in runs of about
        DEFER_RUN postings of whole terms, terms in key order; emptied as it goes."""
        index, codes_l, ws_l, ids_l, groups_l, counts_l = self.kinds[kind]
        if not codes_l:
            return
        kb = KIND_BYTES[kind]
        keys = [kb + t.encode() for t in index]
        index.clear()
        codes = np.concatenate(codes_l)
        weights = np.concatenate(ws_l)
        counts = np.concatenate(counts_l)
        ids = np.repeat(np.concatenate(ids_l), counts)
        groups = np.repeat(np.concatenate(groups_l), counts)
        for part in (codes_l, ws_l, ids_l, groups_l, counts_l):
            part.clear()
        rank = np.empty(len(keys), dtype=np.int32)
        by_key = sorted(range(len(keys)), key=keys.__getitem__)
        rank[np.array(by_key, dtype=np.int64)] = np.arange(len(keys), dtype=np.int32)
        codes = rank[codes]
        if not len(ids) or int(ids.max()) < 1 << 32:
            # by term (key order), then id: one sort of both in a uint64 (each (term, id)
            # once — a document is held once, each of its terms once —, so an unstable
            # sort gives the one order; ~0.2 CPU s less than `lexsort` at N=100k)
            order = np.argsort((codes.astype(np.uint64) << np.uint64(32)) | ids)
        else:
            order = np.lexsort((ids, codes))
        codes = codes[order]
        ids, weights, groups = ids[order], weights[order], groups[order]
        del order
        ends = np.cumsum(np.bincount(codes, minlength=len(keys))).tolist()
        del codes
        t = 0
        while t < len(keys):
            base = ends[t - 1] if t else 0
            u = t
            while u < len(keys) and ends[u] - base < DEFER_RUN:
                u += 1
            u = max(u, t + 1)
            top = ends[u - 1]
            columns = postings.Columns(ids[base:top], weights[base:top], groups[base:top],
                                       np.array([base, *ends[t:u - 1]], dtype=np.int64) - base)
            out = {}
            start = 0
            for c in range(t, u):
                end = ends[c] - base
                if end > start:
                    out[keys[by_key[c]]] = (columns, start, end)
                start = end
            yield out
            t = u
        self.size = 0


def finish(txn: Any, deferred: Deferred, move_tail: bool = True) -> None:
    """Write the postings `deferred` holds (see `Deferred`) in `txn`, each term's list
    once, in key order, and their dfs. `move_tail=False`: never take the keys after a
    kind's lists out to append them again (`Tail`) — for one command's postings, where
    moving up to MOVE_MAX keys per command would cost more than the page fill it buys."""
    if not deferred:
        return
    lex = txn.aux("lex")
    put_new = getattr(txn, "aux_put_new", None)
    # (the reads' hint is for a store whose reads are round trips; a local one ignores it,
    # and its ~4,000 keys a command would be built for nothing)
    hint = txn.prefers_batches()
    for kind in range(len(KIND_BYTES)):
        if not deferred.holds(kind):
            continue
        # LMDB fills its pages only when keys are appended (MDB_APPEND, which
        # `aux_put_many` uses when every key follows the table's last one): a sorted run
        # inserted before other keys splits each page it fills in half. So when few keys
        # follow the first of this kind's lists (a first load: the bootstrap's postings,
        # then the concepts' when the links are loaded), they are taken out (`Tail`) and
        # written again in order with the new lists, all appended.
        tail = (Tail.take(lex, b"t" + KIND_BYTES[kind])
                if put_new is None and move_tail else None)
        aux: Any = tail if tail is not None else lex
        for cols in deferred.runs(kind):
            if hint:
                lex.prefetch([b"d" + tb for tb in cols], [b"t" + tb + b"\x00" for tb in cols])
            buf = Buffered(aux)
            fresh = Buffered(aux) if put_new is not None else buf
            put_columns(aux, cols, buf, fresh)
            if tail is not None:
                tail.write(txn, buf.puts)
                continue
            if buf.puts:
                txn.aux_put_many("lex", buf.puts.items())
            if put_new is not None and fresh.puts:
                put_new("lex", fresh.puts.items())
        if tail is not None:
            tail.write(txn, {}, last=True)
    deferred.low, deferred.high, deferred.size = 0, -1, 0


class Tail:
    """An aux table (`lex`, or `table`) with its keys from `start` on taken out (at most
    MOVE_MAX of them), as `postings` reads it: those keys are read, changed and deleted
    here, and `write` puts them back, merged with the new ones, by appends (`finish`;
    `gram_index.Batch.write`)."""

    __slots__ = ("lex", "start", "keys", "values", "table")

    def __init__(self, lex: Any, start: bytes, items: list[tuple[bytes, bytes]],
                 table: str = "lex") -> None:
        self.lex, self.start, self.table = lex, start, table
        self.keys = [k for k, _ in items]           # sorted; those not written back yet
        self.values: dict[bytes, bytes | None] = dict(items)     # (None: deleted)

    @classmethod
    def take(cls, lex: Any, start: bytes, table: str = "lex") -> "Tail | None":
        """The tail of `lex` (the aux table `table`) from `start`, taken out; None when it
        has more than MOVE_MAX keys (then nothing is taken)."""
        items = list(islice(lex.scan(start=start), MOVE_MAX + 1))
        if len(items) > MOVE_MAX:
            return None
        for key, _ in items:
            lex.delete(key)
        return cls(lex, start, items, table)

    def get(self, key: bytes) -> bytes | None:
        if key in self.values:
            return self.values[key]
        got: bytes | None = self.lex.get(key)
        return got

    def scan(self, prefix: bytes = b"", *, reverse: bool = False,
             start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        merged = dict(self.lex.scan(prefix))
        i = bisect_left(self.keys, prefix)
        while i < len(self.keys) and self.keys[i].startswith(prefix):
            value = self.values[self.keys[i]]
            if value is not None:
                merged[self.keys[i]] = value
            i += 1
        items = sorted(merged.items(), reverse=reverse)
        if start is not None:
            items = [kv for kv in items if (kv[0] <= start if reverse else kv[0] >= start)]
        return iter(items)

    def delete(self, key: bytes) -> bool:
        if key in self.values:
            was = self.values[key] is not None
            self.values[key] = None
            return was
        done: bool = self.lex.delete(key)
        return done

    def prefetch(self, keys: Iterable[bytes] = (), last_under: Iterable[bytes] = ()) -> None:
        self.lex.prefetch(keys, last_under)

    def write(self, txn: Any, puts: dict[bytes, bytes], last: bool = False) -> None:
        """Put `puts`: the keys before `start` as usual, the others merged with the taken
        keys up to the greatest of them (all of them when `last`), appended."""
        start = self.start
        head = [(k, v) for k, v in puts.items() if k < start]
        if head:
            txn.aux_put_many(self.table, head)
        new = {k: v for k, v in puts.items() if k >= start}
        top = max(new) if new else b""
        upto = len(self.keys) if last else bisect_right(self.keys, top)
        for key in self.keys[:upto]:
            value = self.values.pop(key)
            if value is not None and key not in new:
                new[key] = value
        del self.keys[:upto]
        for key in new:
            self.values.pop(key, None)
        if new:
            txn.aux_put_many(self.table, new.items())
