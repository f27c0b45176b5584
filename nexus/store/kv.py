"""The sorted key-value layer under the graph store, with its LMDB and in-memory backends.

`nexus.store.graph` writes the graph logic once against `KvRead` / `KvWrite`; this module
provides them over an `lmdb.Transaction` (`LmdbKv`; `WalKv` also records the writes for the
write-ahead log of `nexus.store.wal`; `PendingKv` reads through that log's records when an
open could not replay them into the file) and over sorted in-memory tables
(`MemReadKv`, `MemWriteKv`). It owns no key layout and no graph semantics.

The point-access methods are deliberately py-lmdb's own signatures
(`get(key, default, db)`, `put(key, value, ..., overwrite=, db=)`, `delete(key, db=)`),
so `LmdbKv` hands out the C methods of the LMDB transaction itself and the hottest paths
pay no Python indirection. `db` is an opaque table handle (an LMDB `_Database` or, in
memory, the table name): the protocols take its type as their parameter.

Memory snapshots: committed state is a `MemVersion` (table name -> SortedDict). Readers
pin the version they began on; a writer never touches a version directly but collects its
changes in an overlay (per-table SortedDict, `DELETED` marks removals) and reads through
it. Commit applies the overlay in place when no reader holds the version, else to a copy
of the changed tables; abort just drops the overlay. So readers see a stable snapshot,
never block the writer, and an aborted write leaves the tables exactly as they were.
"""
from __future__ import annotations

from bisect import bisect_left
from enum import Enum
from functools import partial
from itertools import chain, compress, repeat
from typing import (TYPE_CHECKING, Final, Iterable, Iterator, Mapping, Protocol, Sequence,
                    TypeAlias, TypeVar, cast, overload)

from sortedcontainers import SortedDict

if TYPE_CHECKING:
    import lmdb

# py-lmdb's table handle (its stubs name the class with an underscore): the one mention of
# that name in this package.
LmdbTable: TypeAlias = "lmdb._Database"

Db_contra = TypeVar("Db_contra", contravariant=True)
V = TypeVar("V")
T = TypeVar("T")


# The point-access methods as callables: `LmdbKv` hands out the LMDB transaction's own
# methods, and transactions bind them once (see the module doc).
class GetFn(Protocol[Db_contra]):
    def __call__(self, key: bytes, default: None, db: Db_contra, /) -> bytes | None: ...


class PutFn(Protocol[Db_contra]):
    def __call__(self, key: bytes, value: bytes, *, overwrite: bool = True,
                 db: Db_contra) -> bool:
        """False (and nothing written) when overwrite=False and the key exists."""
        ...


class DeleteFn(Protocol[Db_contra]):
    def __call__(self, key: bytes, *, db: Db_contra) -> bool: ...


class KeysFn(Protocol[Db_contra]):
    def __call__(self, db: Db_contra, lo: bytes, /) -> Iterator[bytes]: ...


class KvRead(Protocol[Db_contra]):
    """A snapshot of sorted tables; `Db_contra` is the backend's table handle type."""

    def get(self, key: bytes, default: None, db: Db_contra, /) -> bytes | None: ...
    def keys_from(self, db: Db_contra, lo: bytes, /) -> Iterator[bytes]:
        """Keys >= lo ascending, to the end of the table (callers cut with takewhile)."""
        ...
    def items_from(self, db: Db_contra, lo: bytes, /) -> Iterator[tuple[bytes, bytes]]: ...
    def items_before(self, db: Db_contra, hi: bytes | None, /
                     ) -> Iterator[tuple[bytes, bytes]]:
        """Pairs with key < hi (all when None), descending."""
        ...
    def last_key(self, db: Db_contra, /) -> bytes | None: ...
    def count(self, db: Db_contra, /) -> int: ...
    def snapshot_id(self) -> int:
        """The id of the committed state a read sees (see `ReadTxn.snapshot_id`)."""
        ...


class KvWrite(KvRead[Db_contra], Protocol[Db_contra]):
    """The single writer's view: reads see its own writes."""

    def put(self, key: bytes, value: bytes, *, overwrite: bool = True,
            db: Db_contra) -> bool:
        """False (and nothing written) when overwrite=False and the key exists."""
        ...
    def delete(self, key: bytes, *, db: Db_contra) -> bool: ...
    def putmulti(self, db: Db_contra, items: Iterable[tuple[bytes, bytes]], append: bool,
                 overwrite: bool, /) -> int:
        """Insert sorted pairs; returns how many were added. `append` promises every key is
        greater than the table's last key (LMDB then skips the tree search)."""
        ...
    def delete_many(self, db: Db_contra, keys: Sequence[bytes], /) -> int:
        """`delete` of each key (sorted: neighbours share pages), in one call; returns how
        many were there. A MERGE removes thousands of index entries at once."""
        ...
    def commit_id(self) -> int:
        """The snapshot id readers will see once this write commits."""
        ...


class LmdbKv:
    """KvWrite over an lmdb.Transaction; get/put/delete are the transaction's own methods."""

    __slots__ = ("txn",)

    def __init__(self, txn: lmdb.Transaction[bytes]) -> None:
        self.txn = txn

    # Properties, not attributes set in __init__: binding three C methods per transaction
    # would cost more than beginning the LMDB transaction itself.
    @property
    def get(self) -> GetFn[LmdbTable]:
        return self.txn.get

    @property
    def put(self) -> PutFn[LmdbTable]:
        return self.txn.put

    @property
    def delete(self) -> DeleteFn[LmdbTable]:
        return self.txn.delete

    def keys_from(self, db: LmdbTable, lo: bytes, /) -> Iterator[bytes]:
        cur = self.txn.cursor(db)
        # An unpositioned cursor would iterate from the FIRST key, hence the check.
        return cur.iternext(values=False) if cur.set_range(lo) else iter(())

    def items_from(self, db: LmdbTable, lo: bytes, /) -> Iterator[tuple[bytes, bytes]]:
        cur = self.txn.cursor(db)
        return cur.iternext() if cur.set_range(lo) else iter(())

    def items_before(self, db: LmdbTable, hi: bytes | None, /
                     ) -> Iterator[tuple[bytes, bytes]]:
        cur = self.txn.cursor(db)
        if hi is None or not cur.set_range(hi):
            ok = cur.last()
        else:
            ok = cur.prev()
        return cur.iterprev() if ok else iter(())

    def putmulti(self, db: LmdbTable, items: Iterable[tuple[bytes, bytes]],
                 append: bool, overwrite: bool, /) -> int:
        if append:
            return self.txn.cursor(db).putmulti(items, overwrite=overwrite, append=True)[1]
        return put_filled(self.txn.cursor(db), items, overwrite)

    def delete_many(self, db: LmdbTable, keys: Sequence[bytes], /) -> int:
        # The transaction's own method mapped over the keys: no Python frame per key.
        return sum(map(partial(self.txn.delete, db=db), keys))

    def snapshot_id(self) -> int:
        """LMDB's transaction id: for a read transaction, the id of the commit it sees."""
        return self.txn.id()

    def commit_id(self) -> int:
        """For a write transaction, its own id: what readers see once it commits."""
        return self.txn.id()

    def last_key(self, db: LmdbTable, /) -> bytes | None:
        cur = self.txn.cursor(db)
        return cur.key() if cur.last() else None

    def count(self, db: LmdbTable, /) -> int:
        return self.txn.stat(db)["entries"]


# --- sorted inserts that fill their pages -----------------------------------------------------
#
# LMDB splits a full page in the middle unless the new key goes to the page's last slot. A
# sorted run inserted *between* two keys of a table therefore keeps meeting the keys after
# it on the page it fills (they move along with each split) and leaves every page it passes
# half full: the link name keys of a 100k bulk load, inserted per chunk in runs between
# other predicates' keys, took 42.9 MB of pages for 16.8 MB of keys and values. With the
# keys after the run's place taken out first (a page's worth: the rest of that page), each
# insert goes to a last slot, LMDB's split leaves the page full, and the run fills its
# pages as an append would; the keys taken out are then put back, with the values they had.
FILL_MIN = 64            # pairs in a putmulti before runs are looked for
RUN_MIN = 32             # pairs of a run (between two keys of the table) worth a move
SHORT_MAX = 16           # short runs met before the rest goes in as it is (scattered keys)
MOVE_BYTES = 8192        # bytes of keys after a run taken out of its way (two pages)


def put_filled(cur: "lmdb.Cursor[bytes]", items: Iterable[tuple[bytes, bytes]],
               overwrite: bool) -> int:
    """`cur.putmulti(items, overwrite=overwrite)`'s added count and table contents, with
    each long run of sorted `items` between two keys of the table inserted as filling
    pages (see above). `items` must be sorted by key, without repeats."""
    pairs = items if type(items) is list else list(items)
    if len(pairs) < FILL_MIN:
        return cur.putmulti(pairs, overwrite=overwrite)[1]
    keys = [k for k, _ in pairs]
    n, i, added, short = len(pairs), 0, 0, 0
    while i < n:
        if not cur.set_range(keys[i]):      # the rest follows the table's last key
            return added + cur.putmulti(pairs[i:], overwrite=overwrite, append=True)[1]
        if short >= SHORT_MAX:
            return added + cur.putmulti(pairs[i:], overwrite=overwrite)[1]
        j = bisect_left(keys, cur.key(), i)
        if j == i:                          # the pair's key is in the table
            j = i + 1
            short += 1
        elif j - i >= RUN_MIN:
            moved = []
            size = 0
            while size < MOVE_BYTES:
                k = cur.key()
                if not k:
                    break
                v = cur.value()
                moved.append((k, v))
                size += len(k) + len(v)
                if not cur.delete():
                    break
            added += cur.putmulti(pairs[i:j], overwrite=overwrite)[1]
            cur.putmulti(moved)
            i = j
            continue
        else:
            short += 1
        added += cur.putmulti(pairs[i:j], overwrite=overwrite)[1]
        i = j
    return added


# A putmulti of at least this many pairs is a bulk write: the transaction stops logging
# (see WalKv). An UPSERT's or a MERGE's index updates stay far below it.
UNLOGGED_PAIRS = 16384


class WalKv(LmdbKv):
    """LmdbKv that also records its writes, in order, for the write-ahead log
    (`nexus.store.wal`): `ops` is the flat list [table, key, value-or-None, ...] of what
    changed, or None once their size passed `limit` or a putmulti of UNLOGGED_PAIRS or more
    pairs (a bulk load) came (the commit then syncs LMDB itself instead of logging: the
    same guarantee, without writing the data twice). A separate class so that the plain
    path pays nothing."""

    __slots__ = ("ops", "size", "names", "limit")

    def __init__(self, txn: lmdb.Transaction[bytes], names: Mapping[LmdbTable, str],
                 limit: int) -> None:
        super().__init__(txn)
        self.ops: list[object] | None = []
        self.size = 0
        self.names = names
        self.limit = limit

    @property
    def put(self) -> PutFn[LmdbTable]:
        return self._put

    @property
    def delete(self) -> DeleteFn[LmdbTable]:
        return self._delete

    def _record(self, db: LmdbTable, key: bytes, value: bytes | None) -> None:
        ops = self.ops
        if ops is not None:
            self.size += len(key) + (len(value) if value is not None else 0) + 8
            if self.size > self.limit:
                self.ops = None
            else:
                ops += (self.names[db], key, value)

    def _put(self, key: bytes, value: bytes, *, overwrite: bool = True,
             db: LmdbTable) -> bool:
        if self.txn.put(key, value, overwrite=overwrite, db=db):
            ops = self.ops                  # `_record`, inlined: a W2 makes ~40 puts
            if ops is not None:
                self.size += len(key) + len(value) + 8
                if self.size > self.limit:
                    self.ops = None
                else:
                    ops += (self.names[db], key, value)
            return True
        return False

    def _delete(self, key: bytes, *, db: LmdbTable) -> bool:
        if self.txn.delete(key, db=db):
            self._record(db, key, None)
            return True
        return False

    def putmulti(self, db: LmdbTable, items: Iterable[tuple[bytes, bytes]],
                 append: bool, overwrite: bool, /) -> int:
        if self.ops is None:                # not logging: the pairs go straight to LMDB
            return super().putmulti(db, items, append, overwrite)
        pairs = items if type(items) is list else list(items)
        if len(pairs) >= UNLOGGED_PAIRS:
            # A bulk write (a load's columns): logging it would write it twice and cost a
            # copy of every pair; its commit syncs LMDB instead, as past `limit`.
            self.ops = None
        # (put_filled's moved keys go back with the values they had: nothing to log)
        added = super().putmulti(db, pairs, append, overwrite)
        if self.ops is None:
            return added
        if (append or not overwrite) and added != len(pairs):
            # Some keys existed (and kept their values): log what the table now holds.
            get = self.txn.get
            pairs = [(k, v) for k, v in pairs if get(k, None, db) == v]
        if pairs:
            self._record_many(db, [k for k, _ in pairs], [v for _, v in pairs])
        return added

    def delete_many(self, db: LmdbTable, keys: Sequence[bytes], /) -> int:
        found = list(map(partial(self.txn.delete, db=db), keys))
        gone = list(compress(keys, found))
        if gone:
            self._record_many(db, gone, None)
        return len(gone)

    def _record_many(self, db: LmdbTable, keys: list[bytes], values: list[bytes] | None
                     ) -> None:
        """`_record` of each (key, value) — None: deleted — in one step: the size checked
        once for the batch (it only grows, so the log is given up just as op by op)."""
        ops = self.ops
        if ops is None:
            return
        self.size += sum(map(len, keys)) + 8 * len(keys) + \
            (sum(map(len, values)) if values is not None else 0)
        if self.size > self.limit:
            self.ops = None
            return
        name = self.names[db]
        ops += chain.from_iterable(zip(repeat(name), keys,
                                       repeat(None) if values is None else values))


# --- memory ---------------------------------------------------------------------------------

class SortedMap(Protocol[V]):
    """The part of `sortedcontainers.SortedDict` (bytes keys) the memory backend uses."""

    @overload
    def get(self, key: bytes, default: None = None, /) -> V | None: ...
    @overload
    def get(self, key: bytes, default: T, /) -> V | T: ...
    def __getitem__(self, key: bytes, /) -> V: ...
    def __setitem__(self, key: bytes, value: V, /) -> None: ...
    def __delitem__(self, key: bytes, /) -> None: ...
    def __contains__(self, key: object, /) -> bool: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[bytes]: ...
    def __reversed__(self) -> Iterator[bytes]: ...
    def irange(self, minimum: bytes | None = None, maximum: bytes | None = None,
               inclusive: tuple[bool, bool] = (True, True), reverse: bool = False
               ) -> Iterator[bytes]: ...
    def keys(self) -> Sequence[bytes]: ...
    def items(self) -> Iterable[tuple[bytes, V]]: ...
    def bisect_left(self, key: bytes, /) -> int: ...
    def bisect_right(self, key: bytes, /) -> int: ...
    def copy(self) -> SortedMap[V]: ...
    def update(self, other: Mapping[bytes, V] | SortedMap[V], /) -> None: ...


def sorted_map() -> SortedMap[V]:
    """A new empty SortedDict, typed."""
    table: SortedMap[V] = SortedDict()
    return table


class _Deleted(Enum):
    DELETED = 0


class _Missing(Enum):
    MISSING = 0


DELETED: Final = _Deleted.DELETED     # overlay mark: the key is removed in this write
_MISSING: Final = _Missing.MISSING
Table: TypeAlias = SortedMap[bytes]                   # a committed table
Overlay: TypeAlias = SortedMap[bytes | _Deleted]      # a writer's changes to one table


class MemVersion:
    """One committed state: table name -> SortedDict, how many readers pin it, and which
    tables it owns (may mutate in place) rather than shares with an older version."""

    __slots__ = ("tables", "readers", "owned", "serial")

    def __init__(self, tables: dict[str, Table], owned: set[str] | None = None) -> None:
        self.tables = tables
        self.readers = 0
        self.owned = set(tables) if owned is None else owned
        self.serial = 0             # commit serial, set by the memory store on commit


class MemReadKv:
    """KvRead over one committed version (read only); table handles are table names."""

    __slots__ = ("_t", "_serial")

    def __init__(self, version: MemVersion) -> None:
        self._t = version.tables
        self._serial = version.serial

    def snapshot_id(self) -> int:
        """The commit serial of the version this reader pinned."""
        return self._serial

    def get(self, key: bytes, default: None, db: str, /) -> bytes | None:
        return self._t[db].get(key, default)

    def keys_from(self, db: str, lo: bytes, /) -> Iterator[bytes]:
        return self._t[db].irange(lo)

    def items_from(self, db: str, lo: bytes, /) -> Iterator[tuple[bytes, bytes]]:
        t = self._t[db]
        return ((k, t[k]) for k in t.irange(lo))

    def items_before(self, db: str, hi: bytes | None, /) -> Iterator[tuple[bytes, bytes]]:
        t = self._t[db]
        keys = reversed(t) if hi is None else t.irange(None, hi, (True, False), True)
        return ((k, t[k]) for k in keys)

    def last_key(self, db: str, /) -> bytes | None:
        t = self._t[db]
        return t.keys()[-1] if t else None

    def count(self, db: str, /) -> int:
        return len(self._t[db])


class MemWriteKv(MemReadKv):
    """KvWrite of the single writer: changes go to an overlay over the base version."""

    __slots__ = ("overlay",)

    def __init__(self, version: MemVersion) -> None:
        super().__init__(version)
        self.overlay: dict[str, Overlay] = {}

    def commit_id(self) -> int:
        """The serial readers will see once this write commits (the memory store's commit
        gives every commit the next serial)."""
        return self._serial + 1

    def get(self, key: bytes, default: None, db: str, /) -> bytes | None:
        o = self.overlay.get(db)
        if o is not None:
            v = o.get(key, _MISSING)
            if v is not _MISSING:
                return default if v is DELETED else v
        return self._t[db].get(key, default)

    def put(self, key: bytes, value: bytes, *, overwrite: bool = True, db: str) -> bool:
        if not overwrite and self.get(key, None, db) is not None:
            return False
        o = self.overlay.get(db)
        if o is None:
            o = self.overlay[db] = sorted_map()
        o[key] = bytes(value)
        return True

    def delete(self, key: bytes, *, db: str) -> bool:
        if self.get(key, None, db) is None:
            return False
        o = self.overlay.get(db)
        if o is None:
            o = self.overlay[db] = sorted_map()
        if key in self._t[db]:
            o[key] = DELETED
        else:
            del o[key]
        return True

    # Write-side scans are lazy merges of the (immutable) base and the overlay. The caller
    # may write while it iterates, so the overlay is walked by re-bisecting after each key
    # rather than with an iterator that a SortedDict insert would invalidate.
    def keys_from(self, db: str, lo: bytes, /) -> Iterator[bytes]:
        return map(_first, self.items_from(db, lo))

    def items_from(self, db: str, lo: bytes, /) -> Iterator[tuple[bytes, bytes]]:
        base = super().items_from(db, lo)
        return _merge(base, _walk(self.overlay, db, lo, None, False), False)

    def items_before(self, db: str, hi: bytes | None, /) -> Iterator[tuple[bytes, bytes]]:
        base = super().items_before(db, hi)
        return _merge(base, _walk(self.overlay, db, b"", hi, True), True)

    def putmulti(self, db: str, items: Iterable[tuple[bytes, bytes]], append: bool,
                 overwrite: bool, /) -> int:
        put = self.put
        return sum(put(k, v, overwrite=overwrite, db=db) for k, v in items)

    def delete_many(self, db: str, keys: Sequence[bytes], /) -> int:
        delete = self.delete
        return sum(delete(k, db=db) for k in keys)

    def last_key(self, db: str, /) -> bytes | None:
        for k, _ in self.items_before(db, None):
            return k
        return None

    def count(self, db: str, /) -> int:
        n = len(self._t[db])
        o = self.overlay.get(db)
        if o:
            base = self._t[db]
            for k, v in o.items():
                n += (v is not DELETED) - (k in base)
        return n


class PendingKv:
    """KvRead over an LMDB read transaction with changes laid over it: the write-ahead log's
    records that an open could not replay into the file (a full disk: `lmdb_store`). Per
    table, a SortedDict of key -> value or `DELETED`, never written while readers use it."""

    __slots__ = ("base", "_over")

    def __init__(self, base: LmdbKv, overlay: Mapping[LmdbTable, Overlay]) -> None:
        self.base = base
        self._over = overlay

    def snapshot_id(self) -> int:
        return self.base.snapshot_id()

    def get(self, key: bytes, default: None, db: LmdbTable, /) -> bytes | None:
        o = self._over.get(db)
        if o is not None:
            v = o.get(key, _MISSING)
            if v is not _MISSING:
                return default if v is DELETED else v
        return self.base.get(key, default, db)

    def _pairs(self, db: LmdbTable, lo: bytes, hi: bytes | None, desc: bool
               ) -> Iterator[tuple[bytes, bytes | _Deleted]]:
        o = self._over.get(db)
        if o is None:
            return iter(())
        keys = o.irange(None, hi, (True, False), True) if desc else o.irange(lo)
        return ((k, o[k]) for k in keys)

    def keys_from(self, db: LmdbTable, lo: bytes, /) -> Iterator[bytes]:
        return map(_first, self.items_from(db, lo))

    def items_from(self, db: LmdbTable, lo: bytes, /) -> Iterator[tuple[bytes, bytes]]:
        return _merge(self.base.items_from(db, lo), self._pairs(db, lo, None, False), False)

    def items_before(self, db: LmdbTable, hi: bytes | None, /
                     ) -> Iterator[tuple[bytes, bytes]]:
        return _merge(self.base.items_before(db, hi), self._pairs(db, b"", hi, True), True)

    def last_key(self, db: LmdbTable, /) -> bytes | None:
        for k, _ in self.items_before(db, None):
            return k
        return None

    def count(self, db: LmdbTable, /) -> int:
        n = self.base.count(db)
        get = self.base.get
        for k, v in self._over.get(db, {}).items():
            n += (v is not DELETED) - (get(k, None, db) is not None)
        return n


def pending_overlay(ops: Iterable[tuple[T, bytes, bytes | None]]) -> dict[T, Overlay]:
    """Per table, the last value (or `DELETED`) each key gets from `ops`, in order."""
    out: dict[T, Overlay] = {}
    for db, key, value in ops:
        o = out.get(db)
        if o is None:
            o = out[db] = sorted_map()
        o[key] = DELETED if value is None else value
    return out


def _first(pair: tuple[bytes, bytes]) -> bytes:
    return pair[0]


def _walk(overlay: dict[str, Overlay], db: str, lo: bytes, hi: bytes | None, desc: bool
          ) -> Iterator[tuple[bytes, bytes | _Deleted]]:
    """Overlay pairs with key >= lo ascending, or key < hi descending; robust to writes."""
    o = overlay.get(db)
    if o is None:
        o = overlay[db] = sorted_map()    # so that writes made while iterating are seen
    keys = o.keys()
    if not desc:
        i = o.bisect_left(lo)
        while i < len(keys):
            k = keys[i]
            yield k, o[k]
            i = o.bisect_right(k)
    else:
        i = (len(keys) if hi is None else o.bisect_left(hi)) - 1
        while i >= 0:
            k = keys[i]
            yield k, o[k]
            i = o.bisect_left(k) - 1


def _merge(base: Iterator[tuple[bytes, bytes]], over: Iterator[tuple[bytes, bytes | _Deleted]],
           desc: bool) -> Iterator[tuple[bytes, bytes]]:
    """Merge two sorted (key, value) streams; the overlay wins ties and DELETED drops a key."""
    x = next(base, None)
    y = next(over, None)
    while y is not None:
        if x is not None and y[0] != x[0] and (y[0] > x[0]) != desc:
            yield x                         # the base key comes first
            x = next(base, None)
            continue
        if x is not None and x[0] == y[0]:
            x = next(base, None)
        k, v = y
        if v is not DELETED:
            yield k, v
        y = next(over, None)
    while x is not None:
        yield x
        x = next(base, None)


def apply_overlay(version: MemVersion, overlay: dict[str, Overlay]) -> MemVersion:
    """The committed version after `overlay`: in place when no reader pins `version`,
    else a new version sharing the untouched tables. A shared table is copied before its
    first change (an older version's readers may still be scanning it)."""
    if version.readers:
        version = MemVersion(dict(version.tables), owned=set())
    for db, o in overlay.items():
        if not o:
            continue
        t = version.tables[db]
        if db not in version.owned:
            t = version.tables[db] = t.copy()
            version.owned.add(db)
        removed = [k for k, v in o.items() if v is DELETED]
        for k in removed:
            del t[k]
        # One bulk update: SortedDict re-sorts once instead of inserting key by key.
        if removed:
            t.update({k: v for k, v in o.items() if v is not DELETED})
        else:
            t.update(cast(Table, o))    # no DELETED marks: the overlay is plain values
    return version
