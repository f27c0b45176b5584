"""The bulk path: turning columns of new elements into sorted index entries, fast.

Owns only the transformation (columns -> per-table sorted keys and values), for
`GraphWriteTxn.create_concept_columns/create_link_columns`, which insert them. Key layouts
are those of `codec`; the link indexes are built column-wise with numpy (big-endian
structured arrays, sorted, viewed as raw bytes), because Python-level packing and sorting of
millions of byte keys is several times slower. Maps are encoded a column at a time
(`codec.encode_maps`). The cyclic garbage collector is paused while a batch is built: it
would otherwise re-traverse the growing lists many times over, and nothing built here forms
a cycle.

An entry list is `(keys, values)`: `values` is None for the index tables whose values are
empty, else a list aligned with `keys`.
"""
from __future__ import annotations

import gc
from itertools import repeat
from operator import itemgetter, lt
from typing import Iterable, Sequence, TypeAlias, TypedDict, TypeVar, cast

import numpy as np

from nexus.errors import ErrorCode, KipError
from nexus.store import codec, heap
from nexus.store.codec import pack_n, pack_sid
from nexus.store.model import JsonMap, MapColumn

U64, U32 = ">u8", ">u4"
HEAD_DTYPE = np.dtype([("tag", "u1"), ("s", U32), ("p", U32), ("o", U32)])   # codec.LINK_HEAD

# (keys, values) of one table, sorted by key; values None: all empty (index tables).
Entries: TypeAlias = tuple[list[bytes], list[bytes] | None]
T = TypeVar("T")


class ConceptEntries(TypedDict):
    """What `concept_entries` builds: each table's entries and the statistics' deltas."""
    head: Entries
    tn: Entries
    tid: Entries
    name: Entries
    attrs: Entries
    metas: Entries
    per_type: dict[int, int]        # type id -> concepts created
    max_id: int
    count: int


class LinkEntries(TypedDict):
    """What `link_entries` builds: the head, spo and map entries, the raw (s, p, o, n)
    columns for the other two link indexes, and the statistics' deltas."""
    head: Entries
    spo: Entries
    attrs: Entries
    metas: Entries
    s: np.ndarray
    p: np.ndarray
    o: np.ndarray
    n: np.ndarray
    per_pred: dict[int, int]        # predicate id -> links created
    max_id: int
    count: int
    duplicate: tuple[int, int, int] | None      # an (s, p, o) repeated in the columns


def internal(message: str) -> KipError:
    return KipError(ErrorCode.KIP_4003, message)


class gc_paused:
    """`with gc_paused():` — the cyclic collector off for the block (as it was after).
    A class, not a generator context manager: an UPSERT and its version log record enter
    it on every write, and the generator's set-up cost several times the block's own."""

    __slots__ = ("_was",)

    def __enter__(self) -> None:
        self._was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._was:
            gc.enable()


def trim_heap() -> None:
    """Give freed heap pages back to the system (glibc's `malloc_trim`; a no-op elsewhere):
    after a bulk load, a checkpoint, or an in-memory index copy dropped. A load's batches'
    buffers — index keys and values, encoded maps, embedding batches, in the main arena and
    the arenas of the threads that embedded and inserted vectors — are freed when it
    returns, but glibc keeps freed pages mapped for reuse, so the process's resident size
    would stay at the load's high-water mark (measured at N=100k in bench/RESULTS.md,
    "Memory of a serving process")."""
    heap.trim()


def _ascending(ns: Sequence[int]) -> bool:
    return type(ns) is range and ns.step > 0 or all(map(lt, ns, ns[1:]))


def _check_ids(ns: Sequence[int]) -> None:
    if type(ns) is range:
        if ns.start <= 0 or ns.step <= 0:
            raise internal("bulk create: element ids must be positive integers")
        if len(ns) and ns[-1] > codec.MAX_ELEMENT_ID:
            raise codec.id_limit_error(ns[-1])
        return
    if set(map(type, ns)) != {int} or min(ns) <= 0:
        raise internal("bulk create: element ids must be positive integers")
    if max(ns) > codec.MAX_ELEMENT_ID:
        raise codec.id_limit_error(max(ns))


def map_entries(keys: list[bytes], maps: MapColumn | None, what: str,
                extra: JsonMap | None = None) -> tuple[list[bytes], list[bytes]]:
    """The (keys, values) of a map column, empty maps left out (stored as absent)."""
    if maps is None:
        if not extra:
            return [], []
        maps = [None] * len(keys)
    values = codec.encode_maps(maps if type(maps) is list else list(maps), what, extra)
    if None in values:
        pairs = [(k, v) for k, v in zip(keys, values) if v is not None]
        return [k for k, _ in pairs], [v for _, v in pairs]
    return keys, cast("list[bytes]", values)        # no None among them (just checked)


def _column_list(column: Iterable[T], n: int, what: str) -> list[T]:
    column = column if type(column) is list else list(column)
    if len(column) != n:
        raise internal(f"bulk create: the {what} column has {len(column)} values, not {n}")
    return column


def concept_entries(ns: Sequence[int], types: Sequence[int], names: Sequence[str],
                    attrs: MapColumn | None, metas: MapColumn | None,
                    extra: JsonMap | None = None) -> ConceptEntries | None:
    """Columns of new concepts -> {table: (keys, values)} in key order, plus 'per_type'
    {type_id: count}, 'max_id' and 'count'. None when there are no rows."""
    count = len(ns)
    if not count:
        return None
    if len(types) != count or len(names) != count:
        raise internal("bulk create_concepts: columns of different lengths")
    _check_ids(ns)
    attrs = _column_list(attrs, count, "attributes") if attrs is not None else None
    metas = _column_list(metas, count, "metadata") if metas is not None else None
    if not _ascending(ns):
        order = sorted(range(count), key=ns.__getitem__)
        pick = itemgetter(*order) if count > 1 else (lambda c: (c[order[0]],))
        ns, types, names = list(pick(ns)), list(pick(types)), list(pick(names))
        attrs = list(pick(attrs)) if attrs is not None else None
        metas = list(pick(metas)) if metas is not None else None
    head_keys = list(map(pack_n, ns))
    type_keys = {t: pack_sid(t) for t in set(types)}
    per_type = dict.fromkeys(type_keys, 0)
    for t in types:
        per_type[t] += 1
    try:
        utf8 = list(map(str.encode, names))
    except (TypeError, UnicodeEncodeError):
        utf8 = list(map(codec.encode_text, names))      # raises the proper KIP_2003
    tkeys = (utf8 if max(map(len, utf8)) <= codec.MAX_INLINE_TEXT
             else list(map(codec.text_key, utf8)))
    if len(type_keys) == 1:
        (tb,) = type_keys.values()
        head_values = list(map((b"\x01" + tb).__add__, utf8))
        tn_keys = list(map(tb.__add__, tkeys))
        tid = list(map(tb.__add__, head_keys))
    else:
        tbs = list(map(type_keys.__getitem__, types))
        head_values = list(map(b"\x01".__add__, map(bytes.__add__, tbs, utf8)))
        tn_keys = list(map(bytes.__add__, tbs, tkeys))
        tid = sorted(map(bytes.__add__, tbs, head_keys))
    by_name = sorted(map(bytes.__add__, map(bytes.__add__, tkeys, repeat(b"\x00")), head_keys))
    # (sorting the positions by key, not (key, id) tuples: half the time; stable, so a
    # repeated key keeps its ids in order, as the tuples did)
    tn = sorted(range(count), key=tn_keys.__getitem__)
    return {"head": (head_keys, head_values),
            "tn": (list(map(tn_keys.__getitem__, tn)), list(map(head_keys.__getitem__, tn))),
            "tid": (tid, None), "name": (by_name, None),
            "attrs": map_entries(head_keys, attrs, "attributes"),
            "metas": map_entries(head_keys, metas, "metadata", extra),
            "per_type": per_type, "max_id": ns[-1], "count": count}


def _column(values: Sequence[int], kind: str) -> np.ndarray:
    """A column of ids (or predicate ids) as numpy u64, each checked to be 1..2**32 - 1
    (an element id past the cap is `codec.id_limit_error`)."""
    limit = 1 << 32
    if type(values) is range:
        a = np.arange(values.start, values.stop, values.step, dtype=np.uint64)
        bad = values.start <= 0 or bool(len(a) and values[-1] >= limit)
    else:
        try:
            a = np.array(values)
        except (OverflowError, ValueError, TypeError):
            raise internal(f"bulk create_links: {kind} must be positive integers below "
                           f"{limit}") from None
        bad = a.dtype.kind not in "iu" or a.ndim != 1 or bool(a.size and a.min() <= 0)
        if not bad and a.size and a.max() >= limit:
            if kind == "ids":
                raise codec.id_limit_error(int(a.max()))
            bad = True
    if bad:
        raise internal(f"bulk create_links: {kind} must be positive integers below {limit}")
    return a.astype(np.uint64)


def sorted_keys(columns: list[tuple[np.ndarray, str]]) -> np.ndarray:
    """A structured array of the big-endian columns, rows sorted like their bytes.

    When the columns' values fit in 64 bits together, one argsort of the packed integer
    orders the rows (several times faster than a lexsort); else the rows are sorted as
    fixed-width byte strings. Callers take `as_bytes(...)` for the keys.
    """
    dtype = np.dtype([(f"f{i}", code) for i, (_, code) in enumerate(columns)])
    out = np.empty(len(columns[0][0]), dtype=dtype)
    if not len(out):
        return out
    bits = [int(col.max()).bit_length() for col, _ in columns]
    if sum(bits) <= 64:
        # The packed integer is the row itself (each column in its own bits): sorted in
        # place, then unpacked field by field — no argsort and no gather per column (5×
        # faster on a load's 504k links). Equal integers are equal rows: no order to keep.
        packed = columns[0][0].astype(np.uint64)
        for (col, _), b in zip(columns[1:], bits[1:]):
            packed <<= np.uint64(b)
            packed |= col
        packed.sort()
        for i in range(len(columns) - 1, 0, -1):
            out[f"f{i}"] = packed & np.uint64((1 << bits[i]) - 1)
            packed >>= np.uint64(bits[i])
        out["f0"] = packed
        return out
    for i, (col, _) in enumerate(columns):
        out[f"f{i}"] = col
    return np.sort(out.view(f"S{dtype.itemsize}")).view(dtype)


def as_bytes(structured: np.ndarray) -> list[bytes]:
    keys: list[bytes] = structured.view(f"V{structured.dtype.itemsize}").tolist()
    return keys


def link_entries(ns: Sequence[int], ss: Sequence[int], ps: Sequence[int],
                 os_: Sequence[int], attrs: MapColumn | None, metas: MapColumn | None,
                 extra: JsonMap | None = None) -> LinkEntries | None:
    """Columns of new links -> {table: (keys, values)} for head, spo, attrs and metas, the
    raw columns 's', 'p', 'o', 'n' (numpy u64, below 2**32) for the ops and pso indexes, plus
    'per_pred', 'max_id', 'count' and 'duplicate': an (s, p, o) that occurs twice in the
    columns, or None."""
    count = len(ns)
    if not count:
        return None
    if not (len(ss) == len(ps) == len(os_) == count):
        raise internal("bulk create_links: columns of different lengths")
    n = _column(ns, "ids")
    s = _column(ss, "subjects")
    p = _column(ps, "predicate ids")
    o = _column(os_, "objects")
    spo = sorted_keys([(s, U32), (p, U32), (o, U32), (n, U32)])
    s1, p1, o1 = spo["f0"], spo["f1"], spo["f2"]    # a repeated (s, p, o) is adjacent
    same = np.flatnonzero((s1[1:] == s1[:-1]) & (p1[1:] == p1[:-1]) & (o1[1:] == o1[:-1]))
    duplicate = (int(s1[same[0]]), int(p1[same[0]]), int(o1[same[0]])) if same.size else None
    attrs = _column_list(attrs, count, "attributes") if attrs is not None else None
    metas = _column_list(metas, count, "metadata") if metas is not None else None
    if type(ns) is not range or ns.step <= 0:
        order = np.argsort(n, kind="stable")
        if (order != np.arange(count)).any():
            n, s, p, o = n[order], s[order], p[order], o[order]
            pick = order.tolist()
            attrs = [attrs[i] for i in pick] if attrs is not None else None
            metas = [metas[i] for i in pick] if metas is not None else None
    values = np.empty(count, dtype=HEAD_DTYPE)
    values["tag"] = codec.LINK_TAG
    values["s"], values["p"], values["o"] = s, p, o
    keys = n.astype(U64).view("V8").tolist()
    uniq, counts = np.unique(p, return_counts=True)
    per_pred = dict(zip(uniq.tolist(), counts.tolist()))
    return {"head": (keys, as_bytes(values)), "spo": (as_bytes(spo), None),
            "attrs": map_entries(keys, attrs, "attributes"),
            "metas": map_entries(keys, metas, "metadata", extra),
            "s": s, "p": p, "o": o, "n": n,
            "per_pred": per_pred, "max_id": int(n[-1]), "count": count,
            "duplicate": duplicate}


def other_link_indexes(s: np.ndarray, p: np.ndarray, o: np.ndarray, n: np.ndarray
                       ) -> dict[str, np.ndarray]:
    """The ops and pso keys of links (sorted structured arrays; see `as_bytes`)."""
    return {"ops": sorted_keys([(o, U32), (p, U32), (s, U32), (n, U32)]),
            "pso": sorted_keys([(p, U32), (s, U32), (o, U32), (n, U32)])}
