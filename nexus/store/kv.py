"""The sorted key-value layer under the graph store, with its LMDB and in-memory backends.

`nexus.store.graph` writes the graph logic once against `KvTxn`; this module provides it
over an `lmdb.Transaction` (`LmdbKv`) and over sorted in-memory tables (`MemReadKv`,
`MemWriteKv`). It owns no key layout and no graph semantics.

The point-access methods are deliberately py-lmdb's own signatures
(`get(key, default, db)`, `put(key, value, ..., overwrite=, db=)`, `delete(key, db=)`),
so `LmdbKv` hands out the C methods of the LMDB transaction itself and the hottest paths
pay no Python indirection. `db` is an opaque table handle (an LMDB `_Database` or, in
memory, the table name).

Memory snapshots: committed state is a `MemVersion` (table name -> SortedDict). Readers
pin the version they began on; a writer never touches a version directly but collects its
changes in an overlay (per-table SortedDict, `DELETED` marks removals) and reads through
it. Commit applies the overlay in place when no reader holds the version, else to a copy
of the changed tables; abort just drops the overlay. So readers see a stable snapshot,
never block the writer, and an aborted write leaves the tables exactly as they were.
"""
from __future__ import annotations

from typing import Iterable, Iterator, Protocol

from sortedcontainers import SortedDict


class KvTxn(Protocol):
    def get(self, key: bytes, default=None, db=None) -> bytes | None: ...
    def put(self, key: bytes, value: bytes, dupdata=True, overwrite=True, append=False,
            db=None) -> bool:
        """False (and nothing written) when overwrite=False and the key exists."""
        ...
    def delete(self, key: bytes, value=b"", db=None) -> bool: ...
    def keys_from(self, db, lo: bytes) -> Iterator[bytes]:
        """Keys >= lo ascending, to the end of the table (callers cut with takewhile)."""
        ...
    def items_from(self, db, lo: bytes) -> Iterator[tuple[bytes, bytes]]: ...
    def items_before(self, db, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """Pairs with key < hi (all when None), descending."""
        ...
    def putmulti(self, db, items: Iterable[tuple[bytes, bytes]], append: bool,
                 overwrite: bool) -> int:
        """Insert sorted pairs; returns how many were added. `append` promises every key is
        greater than the table's last key (LMDB then skips the tree search)."""
        ...
    def last_key(self, db) -> bytes | None: ...
    def count(self, db) -> int: ...


_EMPTY: Iterator = iter(())


class LmdbKv:
    """KvTxn over an lmdb.Transaction; get/put/delete are the transaction's own methods."""

    __slots__ = ("txn",)

    def __init__(self, txn) -> None:
        self.txn = txn

    # Properties, not attributes set in __init__: binding three C methods per transaction
    # would cost more than beginning the LMDB transaction itself.
    get = property(lambda self: self.txn.get)
    put = property(lambda self: self.txn.put)
    delete = property(lambda self: self.txn.delete)

    def keys_from(self, db, lo):
        cur = self.txn.cursor(db)
        # An unpositioned cursor would iterate from the FIRST key, hence the check.
        return cur.iternext(values=False) if cur.set_range(lo) else iter(())

    def items_from(self, db, lo):
        cur = self.txn.cursor(db)
        return cur.iternext() if cur.set_range(lo) else iter(())

    def items_before(self, db, hi):
        cur = self.txn.cursor(db)
        if hi is None or not cur.set_range(hi):
            ok = cur.last()
        else:
            ok = cur.prev()
        return cur.iterprev() if ok else iter(())

    def putmulti(self, db, items, append, overwrite):
        return self.txn.cursor(db).putmulti(items, overwrite=overwrite, append=append)[1]

    def snapshot_id(self):
        """LMDB's transaction id: for a read transaction, the id of the commit it sees."""
        return self.txn.id()

    def commit_id(self):
        """For a write transaction, its own id: what readers see once it commits."""
        return self.txn.id()

    def last_key(self, db):
        cur = self.txn.cursor(db)
        return cur.key() if cur.last() else None

    def count(self, db):
        return self.txn.stat(db)["entries"]


# --- memory ---------------------------------------------------------------------------------

DELETED = object()      # overlay mark: the key is removed in this write
_MISSING = object()


class MemVersion:
    """One committed state: table name -> SortedDict, how many readers pin it, and which
    tables it owns (may mutate in place) rather than shares with an older version."""

    __slots__ = ("tables", "readers", "owned", "serial")

    def __init__(self, tables: dict[str, SortedDict], owned: set[str] | None = None) -> None:
        self.tables = tables
        self.readers = 0
        self.owned = set(tables) if owned is None else owned
        self.serial = 0             # commit serial, set by the memory store on commit


class MemReadKv:
    """KvTxn over one committed version (read only)."""

    __slots__ = ("_t", "_serial")

    def __init__(self, version: MemVersion) -> None:
        self._t = version.tables
        self._serial = version.serial

    def snapshot_id(self):
        """The commit serial of the version this reader pinned."""
        return self._serial

    def get(self, key, default=None, db=None):
        return self._t[db].get(key, default)

    def keys_from(self, db, lo):
        return self._t[db].irange(lo)

    def items_from(self, db, lo):
        t = self._t[db]
        return ((k, t[k]) for k in t.irange(lo))

    def items_before(self, db, hi):
        t = self._t[db]
        keys = reversed(t) if hi is None else t.irange(None, hi, (True, False), True)
        return ((k, t[k]) for k in keys)

    def last_key(self, db):
        t = self._t[db]
        return t.keys()[-1] if t else None

    def count(self, db):
        return len(self._t[db])


class MemWriteKv(MemReadKv):
    """KvTxn of the single writer: changes go to an overlay over the base version."""

    __slots__ = ("overlay",)

    def __init__(self, version: MemVersion) -> None:
        super().__init__(version)
        self.overlay: dict[str, SortedDict] = {}

    def commit_id(self):
        """The serial readers will see once this write commits (the memory store's commit
        gives every commit the next serial)."""
        return self._serial + 1

    def get(self, key, default=None, db=None):
        o = self.overlay.get(db)
        if o is not None:
            v = o.get(key, _MISSING)
            if v is not _MISSING:
                return default if v is DELETED else v
        return self._t[db].get(key, default)

    def put(self, key, value, dupdata=True, overwrite=True, append=False, db=None):
        if not overwrite and self.get(key, None, db) is not None:
            return False
        o = self.overlay.get(db)
        if o is None:
            o = self.overlay[db] = SortedDict()
        o[key] = bytes(value)
        return True

    def delete(self, key, value=b"", db=None):
        if self.get(key, None, db) is None:
            return False
        o = self.overlay.get(db)
        if o is None:
            o = self.overlay[db] = SortedDict()
        if key in self._t[db]:
            o[key] = DELETED
        else:
            del o[key]
        return True

    # Write-side scans are lazy merges of the (immutable) base and the overlay. The caller
    # may write while it iterates, so the overlay is walked by re-bisecting after each key
    # rather than with an iterator that a SortedDict insert would invalidate.
    def keys_from(self, db, lo):
        return map(_first, self.items_from(db, lo))

    def items_from(self, db, lo):
        base = super().items_from(db, lo)
        return _merge(base, _walk(self.overlay, db, lo, None, False), False)

    def items_before(self, db, hi):
        base = super().items_before(db, hi)
        return _merge(base, _walk(self.overlay, db, None, hi, True), True)

    def putmulti(self, db, items, append, overwrite):
        put = self.put
        return sum(put(k, v, overwrite=overwrite, db=db) for k, v in items)

    def last_key(self, db):
        for k, _ in self.items_before(db, None):
            return k
        return None

    def count(self, db):
        n = len(self._t[db])
        o = self.overlay.get(db)
        if o:
            base = self._t[db]
            for k, v in o.items():
                n += (v is not DELETED) - (k in base)
        return n


def _first(pair):
    return pair[0]


def _walk(overlay: dict, db, lo, hi, desc: bool) -> Iterator[tuple[bytes, object]]:
    """Overlay pairs with key >= lo ascending, or key < hi descending; robust to writes."""
    o = overlay.get(db)
    if o is None:
        o = overlay[db] = SortedDict()    # so that writes made while iterating are seen
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


def _merge(base: Iterator, over: Iterator, desc: bool) -> Iterator[tuple[bytes, bytes]]:
    """Merge two sorted (key, value) streams; the overlay wins ties and DELETED drops a key."""
    x = next(base, None)
    y = next(over, None)
    while x is not None or y is not None:
        if y is not None and (x is None or y[0] == x[0] or (y[0] > x[0]) == desc):
            if x is not None and x[0] == y[0]:
                x = next(base, None)
            if y[1] is not DELETED:
                yield y
            y = next(over, None)
        else:
            yield x
            x = next(base, None)


def apply_overlay(version: MemVersion, overlay: dict[str, SortedDict]) -> MemVersion:
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
        t.update({k: v for k, v in o.items() if v is not DELETED} if removed else o)
    return version
