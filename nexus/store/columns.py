"""Column views of the store for the columnar executor: numpy arrays read with one key scan.

Owns the arrays `nexus.exec.columnar` works on and the caches that keep them; it reads the
indexes' raw keys (fixed width, big-endian, see `codec`) and never decodes a value.

* `LinkColumns`: every link of one predicate as three int64 arrays `s`, `o`, `n`, sorted by
  (s, o, n) — the p-s-o-n index's order, so `out_links(s, p)` order within a subject —
  plus, built on first use, the same links sorted by (o, s, n) (the o-p-s-n order of
  `in_links`) and the (s, o) pair keys for point membership. One cursor walk over the
  predicate's p-s-o-n range: `b"".join(keys)` → `np.frombuffer` with a structured
  big-endian dtype; no Python object per link.
* `type_ids(tid)`: the ids of a type, ascending (the type → ids index).
* `AttrColumn` (`attribute(tid, key)`): one attribute of a type's concepts — a code per
  element id into the attribute's distinct values — so that a FILTER on a hub's thousands
  of candidates tests each distinct value once instead of reading and decoding every
  candidate's attribute map on every query. Filled on demand (the maps of the ids a run
  asks for, once per snapshot: the only column that decodes values); cached per snapshot
  like the others, so a write (in this process or another: the snapshot id is LMDB's
  transaction id) simply leaves it behind.
* `ElementInfo`: process-wide arrays indexed by element id: `tid_of` (0: not known yet,
  -1: a link, > 0: a concept's type id) and the concept's name (`names`). Heads are immutable
  and committed ids are never reused, so an entry filled from any committed snapshot is valid
  for every later one; entries are filled lazily from `uncached_head` (the arrays keep
  what they need: the heads are not also put in the store's head cache), only for ids a
  read transaction found in its own indexes (never from a write transaction, whose ids
  may be handed out again if it aborts). Index 0 is never an id: it stands for "null" in columns.

Snapshot caches (correct by construction): a read transaction's `snapshot_id()` names the
committed state it sees (LMDB's transaction id; the memory store's commit serial), and
equal ids mean identical data. Link and type arrays are cached per (snapshot id, key); a
commit changes the snapshot id, so nothing stale can be served — a query after a write
simply builds the arrays it needs again (that cost is in the planner's choice, see
`nexus.exec.columnar`). The cache keeps the two newest snapshots and at most
`budget_bytes` of arrays; what does not fit is built, used and dropped.

A store keeps one `StoreColumns` for its whole life (its `column_cache`); a view reads its
transaction only through `ColumnSource` (statistics, heads, raw index keys), so this module
imports neither the transactions nor the protocol.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from itertools import islice
from typing import Any, Callable, Iterator, Literal, Protocol, Sequence, TypeVar

import numpy as np

from nexus.store.codec import pack_sid
from nexus.store.model import ConceptHead, Head, JsonMap

PSO_DTYPE = np.dtype([("p", ">u4"), ("s", ">u4"), ("o", ">u4"), ("n", ">u4")])  # codec.PSO
TID_DTYPE = np.dtype([("t", ">u4"), ("n", ">u8")])

# Columns are used only while ids stay below this (ids index arrays directly, and a (s, o)
# pair packs into one int64 as s << 32 | o).
MAX_COLUMN_ID = 1 << 31
DEFAULT_BUDGET = 512 << 20

# ("L", predicate id) -> LinkColumns; ("T", type id) -> ids; ("A", type id, key) -> AttrColumn
CacheKey = tuple[Any, ...]
T = TypeVar("T")


class ColumnSource(Protocol):
    """What a column view reads from its read transaction (`nexus.store.graph`'s
    transactions are such sources): statistics, heads, and the raw keys of an index."""

    def snapshot_id(self) -> int | None: ...
    def max_id(self) -> int: ...
    def count_concepts(self) -> int: ...
    def count_links(self) -> int: ...
    def count_type(self, type_id: int) -> int: ...
    def count_predicate(self, predicate_id: int) -> int: ...
    def known_head(self, n: int) -> Head: ...
    def uncached_head(self, n: int) -> Head: ...
    def attributes_of(self, ns: Sequence[int]) -> list[JsonMap]: ...
    def raw_keys(self, table: str, prefix: bytes) -> Iterator[bytes]:
        """The keys of the core table `table` from `prefix` on, ascending."""
        ...


class LinkColumns:
    """One predicate's links in one snapshot (see module doc). Arrays are read-only."""

    __slots__ = ("s", "o", "n", "_by_o", "_so", "_lock", "_offsets")

    def __init__(self, s: np.ndarray, o: np.ndarray, n: np.ndarray) -> None:
        self.s, self.o, self.n = s, o, n
        self._by_o: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._so: np.ndarray | None = None
        self._lock = threading.Lock()
        self._offsets: dict[int, tuple[int, np.ndarray] | Literal[False]] = {}

    def ranges(self, keys: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(start, count) of each id's run in `keys` (self.s, or the by-object o): direct
        offsets when the keys' id range is dense (one fancy index per lookup), else
        binary search."""
        off = self._offsets.get(id(keys))
        if off is None:
            off = self._offsets[id(keys)] = _offsets(keys)
        if off is False:
            lo = np.searchsorted(keys, ids, "left")
            return lo, np.searchsorted(keys, ids, "right") - lo
        base, offs = off
        span = len(offs) - 2
        rel = ids - base
        rel[(rel < 0) | (rel >= span)] = span       # outside the range: the empty last run
        lo = offs[rel]
        return lo, offs[rel + 1] - lo

    def __len__(self) -> int:
        return len(self.s)

    def by_object(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(o, s, n) sorted by (o, s, n): a stable sort by o of the (s, o, n) order."""
        hit = self._by_o
        if hit is None:
            with self._lock:
                hit = self._by_o
                if hit is None:
                    perm = np.argsort(self.o, kind="stable")
                    hit = self._by_o = (_ro(self.o[perm]), _ro(self.s[perm]),
                                        _ro(self.n[perm]))
        return hit

    def pair_keys(self) -> np.ndarray:
        """s << 32 | o, ascending (the (s, o) order), unique within one predicate."""
        hit = self._so
        if hit is None:
            hit = self._so = _ro((self.s << 32) | self.o)
        return hit

    @property
    def nbytes(self) -> int:
        return 3 * 8 * len(self.s)


def _offsets(keys: np.ndarray) -> tuple[int, np.ndarray] | Literal[False]:
    """CSR offsets over the keys' id range [min, max] (plus a final empty run), or False
    when that range is much larger than the keys (binary search is then cheaper in memory)."""
    if not len(keys):
        return False
    base = int(keys[0])
    span = int(keys[-1]) - base + 1
    if span > 4 * len(keys) + 4096:
        return False
    counts = np.bincount(keys - base, minlength=span)
    offs = np.zeros(span + 2, dtype=np.int64)
    np.cumsum(counts, out=offs[1:span + 1])
    offs[span + 1] = offs[span]
    return base, _ro(offs)


def _ro(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


UNREAD = -2                     # AttrColumn: an element whose map was not read yet


class AttrColumn:
    """One attribute `key` of the concepts of one type, in one snapshot, filled on demand:
    `codes_for(ids, read)` gives each id's index in `values` (its value of the key, None
    when its map has no such key), reading the maps of the ids not read yet with `read`
    (the snapshot's `attributes_of`) — so a hub's candidates are decoded once per snapshot,
    not once per query, and nothing else is. -1 for an id outside the snapshot's ids
    (negative, 0, past the end). Equal scalar values of one Python type share a code (so a
    test runs once per distinct value); an array or object value has a code of its own.
    Entries only go from UNREAD to a code, under the lock; readers need none."""

    __slots__ = ("key", "codes", "values", "_index", "_lock")

    def __init__(self, key: str, size: int) -> None:
        self.key = key
        self.codes = np.full(size, UNREAD, dtype=np.int32)
        self.codes[:1] = -1
        self.values: list[Any] = []
        self._index: dict[tuple[type, Any], int] = {}
        self._lock = threading.Lock()

    def code_of(self, ids: np.ndarray) -> np.ndarray:
        """codes[ids], -1 where an id is outside the array (negative, or past the end)."""
        codes = self.codes
        inside = (ids >= 0) & (ids < len(codes))
        if inside.all():
            out: np.ndarray = codes[ids]
            return out
        out = np.full(len(ids), -1, dtype=codes.dtype)
        out[inside] = codes[ids[inside]]
        return out

    def codes_for(self, ids: np.ndarray,
                  read: Callable[[Sequence[int]], list[JsonMap]]) -> np.ndarray:
        """The codes of `ids` (ids of this column's snapshot), reading what is unread."""
        out = self.code_of(ids)
        unread = out == UNREAD
        if not unread.any():
            return out
        with self._lock:
            missing = np.unique(ids[unread])
            missing = missing[self.codes[missing] == UNREAD]
            if len(missing):
                self.codes[missing] = self._encode(read(missing.tolist()))
        return self.code_of(ids)

    def _encode(self, maps: list[JsonMap]) -> np.ndarray:
        key, values, index = self.key, self.values, self._index
        out = np.empty(len(maps), dtype=np.int32)
        for j, m in enumerate(maps):
            v = m.get(key)
            if type(v) in _SCALARS:
                code = index.get((type(v), v))
                if code is None:
                    code = index[(type(v), v)] = len(values)
                    values.append(v)
            else:                               # an array or object: a code of its own
                code = len(values)
                values.append(v)
            out[j] = code
        return out

    @property
    def nbytes(self) -> int:
        return int(self.codes.nbytes) + 65536


_SCALARS = (str, int, float, bool, type(None))


class ElementInfo:
    """id → type id / name, process-wide for one store (see module doc).

    The names are not an object array over every id (each entry written when it is made,
    so all resident: 4.8 MB at 600k ids of which 100k are concepts) but a slot per id
    (`name_ix`: zero-filled, so the pages of ids never filled — links, ids no query
    touched — are never written, never resident) into an array of the concepts' names
    (`name_at`; slot 0 is None). The slots are native ints (intp): numpy gathers with
    them as they are, where int32 slots cost a conversion at every `names` (+0.3 ms for
    Q6's 60k names)."""

    def __init__(self) -> None:
        self.tid_of = np.zeros(1024, dtype=np.int32)
        self.name_ix = np.zeros(1024, dtype=np.intp)
        self.name_at = np.empty(1024, dtype=object)        # slot 0: None
        self._names = 1                                     # slots in use
        self._lock = threading.Lock()

    def ensure(self, max_id: int) -> None:
        if max_id < len(self.tid_of):
            return
        with self._lock:
            size = len(self.tid_of)
            if max_id < size:
                return
            new = max(max_id + 1, size + size // 2)
            ix = np.zeros(new, dtype=np.intp)
            ix[:size] = self.name_ix
            tid = np.zeros(new, dtype=np.int32)
            tid[:size] = self.tid_of
            self.name_ix = ix           # names first: a filled tid implies a filled name
            self.tid_of = tid

    def fill(self, ids: np.ndarray, known_head: Callable[[int], Head]) -> None:
        """Fill the entries of `ids` (ids of the calling snapshot) not known yet."""
        tid_of = self.tid_of
        missing = ids[tid_of[ids] == 0]
        missing = missing[missing > 0]
        if not len(missing):
            return
        missing = np.unique(missing)
        tids: list[int] = []
        names: list[str] = []
        named: list[int] = []
        for n in missing.tolist():
            h = known_head(n)
            if type(h) is ConceptHead:
                tids.append(h.type_id)
                names.append(h.name)
                named.append(n)
            else:
                tids.append(-1)
        with self._lock:        # one writer at a time: ensure() copies, slots are handed out
            if names:
                at = np.asarray(named, dtype=np.int64)
                fresh = self.tid_of[at] == 0        # another thread may have filled some
                self.name_ix[at[fresh]] = self._slots([x for x, f in zip(names, fresh) if f])
            self.tid_of[missing] = tids

    def _slots(self, names: list[str]) -> np.ndarray:
        """Slots for `names` in `name_at` (grown by half when full; under the lock). The
        array is published before any slot of it is written to `name_ix`, so a reader that
        reads `name_ix` first always finds its slots."""
        first, last = self._names, self._names + len(names)
        name_at = self.name_at
        if last > len(name_at):
            grown = np.empty(max(last, len(name_at) + len(name_at) // 2), dtype=object)
            grown[:first] = name_at[:first]
            name_at = self.name_at = grown
        name_at[first:last] = names
        self._names = last
        return np.arange(first, last, dtype=np.intp)

    def names(self, ids: np.ndarray, known_head: Callable[[int], Head]) -> np.ndarray:
        """The names of `ids` (None for links and for 0), filling what is missing."""
        self.fill(ids, known_head)
        slots = self.name_ix[ids]
        names: np.ndarray = self.name_at[slots]
        return names


class StoreColumns:
    """The per-store column caches: snapshot-keyed arrays and the element info. A store
    keeps one for its whole life (`GraphStore` backends of this package: `column_cache`)."""

    def __init__(self, budget_bytes: int = DEFAULT_BUDGET) -> None:
        self.budget = budget_bytes
        self.info = ElementInfo()
        # snapshot id -> key -> (value, nbytes); the values are LinkColumns or id arrays
        self._snaps: OrderedDict[int, dict[CacheKey, tuple[Any, int]]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def lookup(self, snap: int, key: CacheKey) -> tuple[Any, int] | None:
        with self._lock:
            entries = self._snaps.get(snap)
            return None if entries is None else entries.get(key)

    def store(self, snap: int, key: CacheKey, value: Any, nbytes: int) -> None:
        with self._lock:
            entries = self._snaps.get(snap)
            if entries is None:
                if self._snaps and snap < next(reversed(self._snaps)):
                    return                  # an older reader: do not evict newer entries
                entries = self._snaps[snap] = {}
                while len(self._snaps) > 2:
                    self._drop_oldest()
            while self._bytes + nbytes > self.budget and len(self._snaps) > 1:
                self._drop_oldest()
            if self._bytes + nbytes > self.budget:
                return
            if key not in entries:
                entries[key] = (value, nbytes)
                self._bytes += nbytes

    def _drop_oldest(self) -> None:
        _, entries = self._snaps.popitem(last=False)
        self._bytes -= sum(nb for _, nb in entries.values())

    def cached(self, snap: int, key: CacheKey) -> bool:
        return self.lookup(snap, key) is not None

    def clear(self) -> None:
        with self._lock:
            self._snaps.clear()
            self._bytes = 0


class ColumnOwner(Protocol):
    """A store that keeps column caches (the stores of this package do)."""

    column_cache: StoreColumns


def store_columns(store: ColumnOwner) -> StoreColumns:
    """The column caches of `store` (it keeps them for its whole life)."""
    return store.column_cache


class TxnColumns:
    """The column view of one read transaction (its snapshot's arrays)."""

    __slots__ = ("txn", "snap", "cache", "info", "max_id", "_local")

    def __init__(self, txn: ColumnSource, snap: int, cache: StoreColumns, max_id: int) -> None:
        self.txn = txn
        self.snap = snap
        self.cache = cache
        self.info = cache.info
        self.max_id = max_id
        # what did not fit in the cache, for this transaction
        self._local: dict[CacheKey, Any] = {}
        cache.info.ensure(max_id)

    # --- cached arrays -------------------------------------------------------------------
    def _get(self, key: CacheKey, build: Callable[[], tuple[T, int]]) -> T:
        # The cache holds both kinds of arrays; the key's tag says which this is.
        hit: T | None = self._local.get(key)
        if hit is not None:
            return hit
        entry = self.cache.lookup(self.snap, key)
        if entry is not None:
            cached: T = entry[0]
            return cached
        value, nbytes = build()
        self.cache.store(self.snap, key, value, nbytes)
        self._local[key] = value
        return value

    def has_links(self, pid: int) -> bool:
        return ("L", pid) in self._local or self.cache.cached(self.snap, ("L", pid))

    def has_attribute(self, tid: int, key: str) -> bool:
        return ("A", tid, key) in self._local or self.cache.cached(self.snap, ("A", tid, key))

    def has_type(self, tid: int) -> bool:
        return ("T", tid) in self._local or self.cache.cached(self.snap, ("T", tid))

    def links(self, pid: int) -> LinkColumns:
        return self._get(("L", pid), lambda: self._build_links(pid))

    def type_ids(self, tid: int) -> np.ndarray:
        def build() -> tuple[np.ndarray, int]:
            ids = self._build_type(tid)
            return ids, ids.nbytes
        return self._get(("T", tid), build)

    def attribute(self, tid: int, key: str) -> AttrColumn:
        """Attribute `key` of the concepts of type `tid` (see AttrColumn; filled by
        `attribute_codes`)."""
        def build() -> tuple[AttrColumn, int]:
            col = AttrColumn(key, self.max_id + 1)
            return col, col.nbytes
        return self._get(("A", tid, key), build)

    def attribute_codes(self, column: AttrColumn, ids: np.ndarray) -> np.ndarray:
        """`column.codes_for(ids)`, reading unread maps from this snapshot."""
        return column.codes_for(ids, self.txn.attributes_of)

    # --- builders ------------------------------------------------------------------------
    def _scan(self, table: str, prefix: bytes, width: int, count: int) -> bytes:
        """The keys of `prefix`'s range joined: `count` (the exact statistic) keys, checked
        against the key after them; a mismatch falls back to a prefix-bounded walk."""
        keys = list(islice(self.txn.raw_keys(table, prefix), count + 1))
        # more keys in the range than the statistic says: it was short
        short = len(keys) > count and keys[count].startswith(prefix)
        if len(keys) > count:
            keys.pop()
        if not short and (not keys or (keys[0].startswith(prefix)
                                       and keys[-1].startswith(prefix))):
            data = b"".join(keys)
            if len(data) == width * len(keys):
                return data
        out = []
        for k in self.txn.raw_keys(table, prefix):
            if not k.startswith(prefix):
                break
            out.append(k)
        return b"".join(out)

    def _build_links(self, pid: int) -> tuple[LinkColumns, int]:
        data = self._scan("pso", pack_sid(pid), PSO_DTYPE.itemsize,
                          self.txn.count_predicate(pid))
        raw = np.frombuffer(data, dtype=PSO_DTYPE)
        cols = LinkColumns(_ro(raw["s"].astype(np.int64)), _ro(raw["o"].astype(np.int64)),
                           _ro(raw["n"].astype(np.int64)))
        # with the by-object copy, the pair keys and the offsets of both orders
        return cols, 15 * 8 * len(cols) + 65536

    def _build_type(self, tid: int) -> np.ndarray:
        data = self._scan("tid", pack_sid(tid), TID_DTYPE.itemsize,
                          self.txn.count_type(tid))
        return _ro(np.frombuffer(data, dtype=TID_DTYPE)["n"].astype(np.int64))

    # --- element info --------------------------------------------------------------------
    def type_of(self, ids: np.ndarray) -> np.ndarray:
        """tid_of[ids]: > 0 the concept's type id, -1 a link, 0 for the null id 0."""
        info = self.info
        out: np.ndarray = info.tid_of[ids]
        if (out == 0).any():
            info.fill(ids, self.txn.uncached_head)
            out = info.tid_of[ids]
        return out

    def names(self, ids: np.ndarray) -> np.ndarray:
        return self.info.names(ids, self.txn.uncached_head)


def columns_for(txn: ColumnSource, cache: StoreColumns) -> TxnColumns | None:
    """The column view of a read transaction over its store's caches, or None when columns
    cannot serve it (a write transaction, ids too large or too sparse for arrays indexed by
    id)."""
    snap = txn.snapshot_id()
    if snap is None:
        return None
    max_id = txn.max_id()
    if max_id >= MAX_COLUMN_ID or max_id > 8 * (txn.count_concepts() + txn.count_links()) \
            + (1 << 20):
        return None
    return TxnColumns(txn, snap, cache, max_id)
