"""The read side of the graph store, written once over the key-value layer (`kv`).

Owns the graph semantics of reading: element heads and their indexes, symbols, statistics,
aux tables, and how the process-wide caches are consulted. Byte layouts are `codec`'s; the
write transaction is `graph_write`'s; the lifecycle (locks, commit, abort) is `base`'s; how a
backend opens, snapshots or commits is `lmdb_store`'s and `memory_store`'s.

Caches: heads and symbols are immutable and ids are never reused, so one dict per store
(n -> head, text <-> sid) serves every transaction. `head()` returns a cached head only
after the calling snapshot confirmed that `n` exists (one B-tree get, needed anyway to
answer existence; the cache saves the decoding); `known_head()` skips that get, for ids the
caller just read from the same snapshot. Write transactions never put into the shared
caches directly: what they learn is merged after a successful commit, so an aborted write
leaves no trace (its ids may be handed out again).
"""
from __future__ import annotations

import struct
from itertools import takewhile
from operator import methodcaller
from typing import TYPE_CHECKING, Iterator

from nexus.errors import ErrorCode, KipError
from nexus.store import codec
from nexus.store.codec import (BIG, SP, SPO3, TAIL_PON, TAIL_SON, TID_N, first, pack_n,
                               pack_sid)
from nexus.store.protocol import AUX_TABLES, ConceptHead, LinkHead

if TYPE_CHECKING:
    from nexus.store.base import StoreBase

CORE_TABLES = ("meta", "stats", "sym", "symx", "head", "attrs", "metas", "tn", "tid", "name",
               "spo", "ops", "pso")


def internal(message: str) -> KipError:
    return KipError(ErrorCode.KIP_4003, message)


class Tables:
    """Backend table handles by role (attributes named as in CORE_TABLES) plus `aux`."""

    __slots__ = CORE_TABLES + ("aux",)

    def __init__(self, handles: dict, aux: dict) -> None:
        for name in CORE_TABLES:
            setattr(self, name, handles[name])
        self.aux = aux


def _count(v: bytes | None) -> int:
    return 0 if v is None else int.from_bytes(v, "big")


class GraphReadTxn:
    """ReadTxn over one backend snapshot; also its own context manager."""

    __slots__ = ("_store", "_kv", "_get", "_keys", "_d", "_heads", "_sids", "_stexts", "_end")

    def __init__(self, store: StoreBase, kv, end=None) -> None:
        self._store = store
        self._kv = kv
        self._get = kv.get
        self._keys = kv.keys_from
        self._d = store._d
        self._heads = store._heads
        self._sids = store._sids
        self._stexts = store._stexts
        self._end = end

    def __enter__(self):
        return self

    def __exit__(self, et, exc, tb) -> bool:
        self._kv = _DEAD                        # any later use is a KipError (see _kill)
        self._get = self._keys = _dead
        try:
            self._end()
        except Exception as end_exc:  # noqa: BLE001 - e.g. the environment was closed
            if exc is None:
                raise self._store._translate(end_exc) or internal(str(end_exc)) from end_exc
        if exc is not None and not isinstance(exc, KipError):
            err = self._store._translate(exc)
            if err is not None:
                raise err from exc
        return False

    def snapshot_id(self) -> int | None:
        """The id of the committed snapshot this read transaction sees (equal ids: equal
        data); None in a write transaction, whose data is not a committed snapshot."""
        if self._end is None:
            return None
        return self._kv.snapshot_id()

    def columns(self):
        """The column view of this snapshot (`nexus.store.columns`), or None."""
        from nexus.store.columns import columns_for
        return columns_for(self)

    def _kill(self) -> None:
        """Make any further use of this transaction a KipError (on both backends alike)."""
        self._kv = _DEAD
        self._get = self._keys = _dead

    # --- symbols -------------------------------------------------------------------------
    def symbol_id(self, text: str) -> int | None:
        sid = self._sids.get(text)
        if sid is None:
            sid = self._load_symbol(text)
            if sid is not None:
                self._sids[text] = sid
        return sid

    def _load_symbol(self, text: str) -> int | None:
        try:
            key = codec.text_key(codec.encode_text(text))
        except KipError:
            return None
        v = self._get(key, None, self._d.symx)
        if v is None:
            return None
        sid = codec.unpack_sid(v)[0]
        if codec.is_hashed(key) and self._get(v, None, self._d.sym) != text.encode():
            return None
        return sid

    def symbol_text(self, sid: int) -> str:
        text = self._stexts.get(sid)
        if text is None:
            text = self._load_symbol_text(sid)
            self._stexts[sid] = text
        return text

    def _load_symbol_text(self, sid: int) -> str:
        try:
            v = self._get(pack_sid(sid), None, self._d.sym)
        except struct.error:
            v = None
        if v is None:
            raise internal(f"unknown symbol id {sid!r}")
        return v.decode()

    # --- elements ------------------------------------------------------------------------
    def head(self, n: int) -> ConceptHead | LinkHead | None:
        try:
            v = self._get(pack_n(n), None, self._d.head)
        except struct.error:        # not an id at all (negative, too big, not an int)
            return None
        if v is None:
            return None
        h = self._heads.get(n)
        if h is None:
            h = codec.decode_head(n, v)
            heads = self._heads
            if len(heads) >= self._store._cache_cap:
                heads.clear()
            heads[n] = h
        return h

    def known_head(self, n: int) -> ConceptHead | LinkHead:
        """head() for an id known to exist in this snapshot (one just read from this
        transaction's indexes): served from the cache without touching the store."""
        h = self._heads.get(n)
        return h if h is not None else self.head(n)

    def attributes(self, n: int) -> dict:
        try:
            v = self._get(pack_n(n), None, self._d.attrs)
        except struct.error:
            return {}
        return {} if v is None else codec.decode_map(v)

    def metadata(self, n: int) -> dict:
        try:
            v = self._get(pack_n(n), None, self._d.metas)
        except struct.error:
            return {}
        return {} if v is None else codec.decode_map(v)

    def max_id(self) -> int:
        return _count(self._get(codec.META_MAX_ID, None, self._d.meta))

    def elements(self) -> Iterator[int]:
        return map(int.from_bytes, self._keys(self._d.head, b""), BIG)

    # --- concept indexes -----------------------------------------------------------------
    def concept_id(self, type_id: int, name: str) -> int | None:
        try:
            tkey = codec.text_key(codec.encode_text(name))
            v = self._get(pack_sid(type_id) + tkey, None, self._d.tn)
        except (KipError, struct.error):
            return None
        if v is None:
            return None
        n = int.from_bytes(v, "big")
        if codec.is_hashed(tkey):
            h = self.head(n)
            if h is None or h.name != name:
                return None
        return n

    def concepts_of_type(self, type_id: int) -> Iterator[int]:
        try:
            prefix = pack_sid(type_id)
        except struct.error:
            return iter(())
        keys = self._keys(self._d.tid, prefix)
        return map(first, map(TID_N, takewhile(methodcaller("startswith", prefix), keys)))

    def concepts_named(self, name: str) -> Iterator[int]:
        try:
            tkey = codec.text_key(codec.encode_text(name))
        except KipError:
            return iter(())
        return self._named(tkey + b"\x00", codec.is_hashed(tkey), name)

    def _named(self, prefix: bytes, hashed: bool, name: str) -> Iterator[int]:
        size = len(prefix) + 8      # longer keys belong to names that contain a NUL here
        for k in takewhile(methodcaller("startswith", prefix), self._keys(self._d.name, prefix)):
            if len(k) == size:
                n = int.from_bytes(k[-8:], "big")
                if not hashed or self.head(n).name == name:
                    yield n

    # --- link indexes --------------------------------------------------------------------
    def link_id(self, subject: int, predicate_id: int, object: int) -> int | None:
        try:
            prefix = SPO3.pack(subject, predicate_id, object)
        except struct.error:
            return None
        k = next(self._keys(self._d.spo, prefix), None)
        if k is None or not k.startswith(prefix):
            return None
        return int.from_bytes(k[20:], "big")

    def out_links(self, subject: int, predicate_id: int | None = None
                  ) -> Iterator[tuple[int, int, int]]:
        return self._scan(self._d.spo, subject, predicate_id)

    def in_links(self, object: int, predicate_id: int | None = None
                 ) -> Iterator[tuple[int, int, int]]:
        return self._scan(self._d.ops, object, predicate_id)

    def _scan(self, db, n: int, p: int | None) -> Iterator[tuple[int, int, int]]:
        try:
            prefix = pack_n(n) if p is None else SP.pack(n, p)
        except struct.error:
            return iter(())
        return map(TAIL_PON, takewhile(methodcaller("startswith", prefix), self._keys(db, prefix)))

    def links_of_predicate(self, predicate_id: int) -> Iterator[tuple[int, int, int]]:
        try:
            prefix = pack_sid(predicate_id)
        except struct.error:
            return iter(())
        keys = self._keys(self._d.pso, prefix)
        return map(TAIL_SON, takewhile(methodcaller("startswith", prefix), keys))

    # --- statistics ----------------------------------------------------------------------
    def _stat(self, key: bytes) -> int:
        return _count(self._get(key, None, self._d.stats))

    def count_type(self, type_id: int) -> int:
        try:
            return self._stat(codec.ST_TYPE + pack_sid(type_id))
        except struct.error:
            return 0

    def count_predicate(self, predicate_id: int) -> int:
        try:
            return self._stat(codec.ST_PRED + pack_sid(predicate_id))
        except struct.error:
            return 0

    def count_concepts(self) -> int:
        return self._stat(codec.ST_CONCEPTS)

    def count_links(self) -> int:
        return self._stat(codec.ST_LINKS)

    # --- aux -----------------------------------------------------------------------------
    def aux(self, table: str) -> "Aux":
        db = self._d.aux.get(table)
        if db is None:
            raise internal(f"unknown aux table {table!r}; declared tables: {AUX_TABLES}")
        return Aux(self, db, False)


class Aux:
    """AuxTable: a sorted bytes -> bytes map living in the transaction of its txn."""

    __slots__ = ("_txn", "_db", "_writable")

    def __init__(self, txn: GraphReadTxn, db, writable: bool) -> None:
        self._txn = txn
        self._db = db
        self._writable = writable

    def get(self, key: bytes) -> bytes | None:
        if not key or len(key) > codec.MAX_KEY:     # cannot be stored, so is absent
            return None
        return self._txn._kv.get(key, None, self._db)

    def scan(self, prefix: bytes = b"", *, reverse: bool = False,
             start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        kv = self._txn._kv
        if len(prefix) > codec.MAX_KEY or (start is not None and len(start) > codec.MAX_KEY):
            raise internal(f"aux scan prefix/start longer than {codec.MAX_KEY} bytes")
        if not reverse:
            it = kv.items_from(self._db, prefix if start is None or start < prefix else start)
        else:
            hi = codec.prefix_end(prefix)
            if start is not None and (hi is None or start + b"\x00" < hi):
                hi = start + b"\x00"                # keys <= start
            it = kv.items_before(self._db, hi)
        return takewhile(lambda kv_: kv_[0].startswith(prefix), it) if prefix else it

    def put(self, key: bytes, value: bytes) -> None:
        self._check_write(key)
        self._txn._kv.put(key, value, db=self._db)

    def delete(self, key: bytes) -> bool:
        self._check_write(key)
        return self._txn._kv.delete(key, db=self._db)

    def count(self, prefix: bytes = b"") -> int:
        if not prefix:
            return self._txn._kv.count(self._db)
        return sum(1 for _ in self.scan(prefix))

    def _check_write(self, key: bytes) -> None:
        if not self._writable:
            raise internal("aux tables are read-only in a read transaction")
        if not key or len(key) > codec.MAX_KEY:
            raise internal(f"aux key must be 1..{codec.MAX_KEY} bytes, got {len(key)}")


def _dead(*args, **kwargs):
    raise internal("the transaction has ended (committed or aborted); it cannot be used "
                   "any more")


class _Dead:
    """Stands in for the key-value txn once the transaction ended: any use is an error."""

    def __getattr__(self, name):
        return _dead


_DEAD = _Dead()
