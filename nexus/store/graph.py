"""The read side of the graph store, written once over the key-value layer (`kv`).

Owns the graph semantics of reading: element heads and their indexes, symbols, statistics,
aux tables, and how the process-wide caches are consulted. Byte layouts are `codec`'s; the
write transaction is `graph_write`'s; the lifecycle (locks, commit, abort) is `base`'s; how a
backend opens, snapshots or commits is `lmdb_store`'s and `memory_store`'s.

Caches: heads (but for links MERGE moved: `moved_heads`) and symbols are immutable and ids are
never reused, so one dict per store
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
from types import TracebackType
from typing import (Any, Callable, Generic, Iterable, Iterator, Literal, NoReturn, Protocol,
                    Sequence, cast)

from nexus.errors import ErrorCode, KipError
from nexus.store import codec
from nexus.store.batched import LoopBatches
from nexus.store.codec import (BIG, SP, SPO3, TAIL_PON, TAIL_SON, TID_N, TRIPLE, decode_count,
                               first, pack_end, pack_n, pack_sid)
from nexus.store.columns import StoreColumns, TxnColumns, columns_for
from nexus.store.kv import GetFn, KeysFn, KvRead
from nexus.store.model import ConceptHead, Head, JsonMap
from nexus.store.protocol import AUX_TABLES
from nexus.store.tables import Db, Tables


def internal(message: str) -> KipError:
    return KipError(ErrorCode.KIP_4003, message)


class TxnHost(Protocol[Db]):
    """What a transaction needs from its store (`nexus.store.base.StoreBase` provides it;
    package-internal): the table handles, the process-wide caches every transaction of
    the store shares (module doc), the column caches, the store's token, and the
    translation of backend exceptions."""

    tables: Tables[Db]
    head_cache: dict[int, Head]
    moved_heads: set[int]           # ids whose head changed (MERGE repointing): not cached
    symbol_ids: dict[str, int]
    symbol_texts: dict[int, str]
    cache_cap: int                  # the head cache is emptied when it reaches this size
    column_cache: StoreColumns
    token: int

    def translate(self, exc: BaseException) -> KipError | None:
        """The KipError for a backend exception, or None when it is not the backend's."""
        ...

    def snapshot_of(self, kv: KvRead[Db]) -> int:
        """The snapshot id a read transaction's kv sees (`ReadTxn.snapshot_id`)."""
        ...


class GraphReadTxn(LoopBatches, Generic[Db]):
    """ReadTxn over one backend snapshot; also its own context manager.

    `kv` and `tables` (the key-value transaction and the table handles) are public for
    this package only: the integrity check reads the raw tables through them."""

    __slots__ = ("_host", "kv", "_get", "_keys", "tables", "_heads", "_sids", "_stexts",
                 "_end", "_snap")

    kv: KvRead[Db]
    # The kv's point lookup and scan, bound once per transaction: the hottest calls.
    _get: GetFn[Db]
    _keys: KeysFn[Db]

    def __init__(self, store: TxnHost[Db], kv: KvRead[Db],
                 end: Callable[[], None] | None = None,
                 heads: dict[int, Head] | None = None) -> None:
        """`heads`: the head cache this transaction shares (default: the store's)."""
        self._host = store
        self.kv = kv
        self._get = kv.get
        self._keys = kv.keys_from
        self.tables = store.tables
        self._heads = store.head_cache if heads is None else heads
        self._sids = store.symbol_ids
        self._stexts = store.symbol_texts
        self._end = end
        self._snap: int | None = None

    def __enter__(self) -> GraphReadTxn[Db]:
        return self

    def __exit__(self, et: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        self.kv = _ENDED                        # any later use is a KipError (see invalidate)
        self._get = self._keys = used_after_end
        try:
            if self._end is not None:           # (always set: a write txn has its own exit)
                self._end()
        except Exception as end_exc:  # noqa: BLE001 - e.g. the environment was closed
            if exc is None:
                raise self._host.translate(end_exc) or internal(str(end_exc)) from end_exc
        if exc is not None and not isinstance(exc, KipError):
            err = self._host.translate(exc)
            if err is not None:
                raise err from exc
        return False

    def snapshot_id(self) -> int | None:
        """The id of the committed snapshot this read transaction sees (equal ids: equal
        data); None in a write transaction, whose data is not a committed snapshot."""
        if self._end is None:
            return None
        snap = self._snap
        if snap is None:                # (asked several times per query: one lookup)
            snap = self._snap = self._host.snapshot_of(self.kv)
        return snap

    def store_token(self) -> int:
        return self._host.token

    def columns(self) -> TxnColumns | None:
        """The column view of this snapshot (`nexus.store.columns`), or None."""
        return columns_for(self, self._host.column_cache)

    def column_cache(self) -> StoreColumns:
        return self._host.column_cache

    def raw_keys(self, table: str, prefix: bytes) -> Iterator[bytes]:
        """The keys of the core table `table` from `prefix` on, ascending (package-internal:
        the column views read index keys directly)."""
        return self._keys(self.tables.named(table), prefix)

    def invalidate(self) -> None:
        """Make any further use of this transaction a KipError (on both backends alike;
        package-internal: the lifecycle ends write transactions with it)."""
        self.kv = _ENDED
        self._get = self._keys = used_after_end

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
        v = self._get(key, None, self.tables.symx)
        if v is None:
            return None
        sid: int = codec.unpack_sid(v)[0]
        if codec.is_hashed(key) and self._get(v, None, self.tables.sym) != text.encode():
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
            v = self._get(pack_sid(sid), None, self.tables.sym)
        except struct.error:
            v = None
        if v is None:
            raise internal(f"unknown symbol id {sid!r}")
        return v.decode()

    # --- elements ------------------------------------------------------------------------
    def head(self, n: int) -> Head | None:
        try:
            v = self._get(pack_n(n), None, self.tables.head)
        except struct.error:        # not an id at all (negative, too big, not an int)
            return None
        if v is None:
            return None
        h = self._heads.get(n)
        if h is None:
            h = codec.decode_head(n, v)
            if n in self._host.moved_heads:     # its head differs between snapshots
                return h
            heads = self._heads
            if len(heads) >= self._host.cache_cap:
                heads.clear()
            heads[n] = h
        return h

    def known_head(self, n: int) -> Head:
        """head() for an id known to exist in this snapshot (one just read from this
        transaction's indexes): served from the cache without touching the store."""
        h = self._heads.get(n)
        # (the caller's promise that n exists makes head() answer a head)
        return h if h is not None else cast(Head, self.head(n))

    def uncached_head(self, n: int) -> Head:
        """known_head() that leaves the head cache as it is: for a reader that keeps what
        it needs of each head itself (the column views' element info keeps a type id and a
        name per id in arrays). Caching the heads too would hold every concept a columnar
        query touched twice — the head, its two ints and its dict slot, ~130 bytes: 7 MB
        after Q1–Q6 at N=100k — and fill the cache with heads the row path may never ask
        for."""
        h = self._heads.get(n)
        if h is not None:
            return h
        v = self._get(pack_n(n), None, self.tables.head)
        # (the caller's promise that n exists makes v a head; as head(): None if not)
        return codec.decode_head(n, v) if v is not None else cast(Head, None)

    def attributes(self, n: int) -> JsonMap:
        try:
            v = self._get(pack_n(n), None, self.tables.attrs)
        except struct.error:
            return {}
        return {} if v is None else codec.decode_map(v)

    def metadata(self, n: int) -> JsonMap:
        try:
            v = self._get(pack_n(n), None, self.tables.metas)
        except struct.error:
            return {}
        return {} if v is None else codec.decode_map(v)

    def metadata_of(self, ns: Sequence[int]) -> list[JsonMap]:
        """`metadata` over many elements in one loop (an UPDATE sweep reads a chunk)."""
        get, db = self._get, self.tables.metas
        try:
            values = [get(pack_n(n), None, db) for n in ns]
        except struct.error:
            return [self.metadata(n) for n in ns]
        return codec.decode_maps(values)

    def max_id(self) -> int:
        return decode_count(self._get(codec.META_MAX_ID, None, self.tables.meta))

    def elements(self) -> Iterator[int]:
        return map(int.from_bytes, self._keys(self.tables.head, b""), BIG)

    # --- concept indexes -----------------------------------------------------------------
    def concept_id(self, type_id: int, name: str) -> int | None:
        try:
            tkey = codec.text_key(codec.encode_text(name))
            v = self._get(pack_sid(type_id) + tkey, None, self.tables.tn)
        except (KipError, struct.error):
            return None
        if v is None:
            return None
        n = int.from_bytes(v, "big")
        if codec.is_hashed(tkey):
            h = self.head(n)
            if not isinstance(h, ConceptHead) or h.name != name:
                return None
        return n

    def concepts_of_type(self, type_id: int) -> Iterator[int]:
        try:
            prefix = pack_sid(type_id)
        except struct.error:
            return iter(())
        keys = self._keys(self.tables.tid, prefix)
        return map(first, map(TID_N, takewhile(methodcaller("startswith", prefix), keys)))

    def concepts_named(self, name: str) -> Iterator[int]:
        try:
            tkey = codec.text_key(codec.encode_text(name))
        except KipError:
            return iter(())
        return self._named(tkey + b"\x00", codec.is_hashed(tkey), name)

    def _named(self, prefix: bytes, hashed: bool, name: str) -> Iterator[int]:
        size = len(prefix) + 8      # longer keys belong to names that contain a NUL here
        for k in takewhile(methodcaller("startswith", prefix), self._keys(self.tables.name, prefix)):
            if len(k) == size:
                n = int.from_bytes(k[-8:], "big")
                if not hashed:
                    yield n
                    continue
                h = self.head(n)
                if isinstance(h, ConceptHead) and h.name == name:
                    yield n

    # --- link indexes --------------------------------------------------------------------
    def link_id(self, subject: int, predicate_id: int, object: int) -> int | None:
        try:
            prefix = SPO3.pack(subject, predicate_id, object)
        except struct.error:
            return None
        k = next(self._keys(self.tables.spo, prefix), None)
        if k is None or not k.startswith(prefix):
            return None
        return int.from_bytes(k[TRIPLE:], "big")

    def out_links(self, subject: int, predicate_id: int | None = None
                  ) -> Iterator[tuple[int, int, int]]:
        return self._scan(self.tables.spo, subject, predicate_id)

    def in_links(self, object: int, predicate_id: int | None = None
                 ) -> Iterator[tuple[int, int, int]]:
        return self._scan(self.tables.ops, object, predicate_id)

    def _scan(self, db: Db, n: int, p: int | None) -> Iterator[tuple[int, int, int]]:
        try:
            prefix = pack_end(n) if p is None else SP.pack(n, p)
        except struct.error:
            return iter(())
        return map(TAIL_PON, takewhile(methodcaller("startswith", prefix), self._keys(db, prefix)))

    def links_of_predicate(self, predicate_id: int) -> Iterator[tuple[int, int, int]]:
        try:
            prefix = pack_sid(predicate_id)
        except struct.error:
            return iter(())
        keys = self._keys(self.tables.pso, prefix)
        return map(TAIL_SON, takewhile(methodcaller("startswith", prefix), keys))

    def link_predicates(self) -> Iterator[int]:
        db = self.tables.pso
        pid = 0
        while pid < 1 << 32:
            k = next(self._keys(db, pack_sid(pid)), None)
            if k is None:
                return
            pid = int.from_bytes(k[:4], "big")
            yield pid
            pid += 1

    # --- statistics ----------------------------------------------------------------------
    def _stat(self, key: bytes) -> int:
        return decode_count(self._get(key, None, self.tables.stats))

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
    def aux(self, table: str) -> Aux[Db]:
        db = self.tables.aux.get(table)
        if db is None and table in AUX_TABLES:
            return _NO_TABLE        # a read-only open of a file that lacks it: empty
        return Aux(self, self._aux_table(table))

    def _aux_table(self, table: str) -> Db:
        db = self.tables.aux.get(table)
        if db is None:
            raise internal(f"unknown aux table {table!r}; declared tables: {AUX_TABLES}")
        return db


class Aux(Generic[Db]):
    """AuxTable: a sorted bytes -> bytes map living in the transaction of its txn
    (read-only: `graph_write.WriteAux` is the writable one)."""

    __slots__ = ("_txn", "_db")

    def __init__(self, txn: GraphReadTxn[Db], db: Db) -> None:
        self._txn = txn
        self._db = db

    def get(self, key: bytes) -> bytes | None:
        if not key or len(key) > codec.MAX_KEY:     # cannot be stored, so is absent
            return None
        return self._txn.kv.get(key, None, self._db)

    def scan(self, prefix: bytes = b"", *, reverse: bool = False,
             start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        kv = self._txn.kv
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
        raise internal("aux tables are read-only in a read transaction")

    def delete(self, key: bytes) -> bool:
        raise internal("aux tables are read-only in a read transaction")

    def prefetch(self, keys: Iterable[bytes] = (), last_under: Iterable[bytes] = ()) -> None:
        """Nothing to do: a read here is a local B-tree lookup (see the protocol)."""

    def count(self, prefix: bytes = b"") -> int:
        if not prefix:
            return self._txn.kv.count(self._db)
        return sum(1 for _ in self.scan(prefix))


class _AbsentAux(Aux[Any]):
    """A declared aux table that a read-only open found missing from the file (a database
    its owner, of an earlier version, has not opened since): it reads as empty (writes are
    refused as in any read transaction: `Aux`)."""

    __slots__ = ()

    def __init__(self) -> None:     # no transaction, no table: nothing is ever read
        pass

    def get(self, key: bytes) -> bytes | None:
        return None

    def scan(self, prefix: bytes = b"", *, reverse: bool = False,
             start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        return iter(())

    def count(self, prefix: bytes = b"") -> int:
        return 0


_NO_TABLE = _AbsentAux()


def used_after_end(*args: object, **kwargs: object) -> NoReturn:
    """What every operation of an ended transaction is replaced by (package-internal)."""
    raise internal("the transaction has ended (committed or aborted); it cannot be used "
                   "any more")


class _EndedKv:
    """Stands in for the key-value txn once the transaction ended: any use is an error."""

    get = put = delete = keys_from = items_from = items_before = putmulti = delete_many = \
        last_key = count = snapshot_id = commit_id = staticmethod(used_after_end)


_ENDED = _EndedKv()
