"""What both stores share: the caches, the writer lock and the transaction lifecycle.

Owns when transactions begin and end: `read()` and `write()`, commit on a normal exit,
abort (exactly) on an exception or `abort()`, the merge of what a committed write learned
into the process-wide caches (`GraphWriteTxn.publish`), and the translation of backend
exceptions. Backends implement `_begin_read() -> (kv, end)`, `_begin_write() -> kv`,
`_commit(kv)`, `_abort(kv)`, `_translate(exc) -> KipError | None` and `_close()`.

`StoreBase` is the `TxnHost` / `WriteHost` of its transactions (`graph`, `graph_write`):
the attributes and methods those protocols name are public for this package only.
"""
from __future__ import annotations

import itertools
import struct
import threading
from types import TracebackType
from typing import Any, Callable, Generic, TypeVar

from nexus.errors import KipError
from nexus.store.columns import StoreColumns
from nexus.store.graph import GraphReadTxn, internal
from nexus.store.graph_write import GraphWriteTxn
from nexus.store.integrity import EXAMPLES, check_tables
from nexus.store.kv import KvRead, KvWrite
from nexus.store.model import Head
from nexus.store.protocol import ReadTxn, TableCheck
from nexus.store.tables import Db, Tables

T = TypeVar("T")
S = TypeVar("S", bound="StoreBase[Any]")

# The head cache is bounded by memory: a cached head costs about HEAD_BYTES (the frozen
# dataclass, its ints, a short name and the dict slot; measured with tracemalloc on the
# peers graph: 170-230 bytes), so the default budget holds ~320k heads. When the cache is
# full it is simply emptied (heads are cheap to decode again).
HEAD_BYTES = 200
DEFAULT_HEAD_CACHE_MB = 64
DEFAULT_HEAD_CACHE = DEFAULT_HEAD_CACHE_MB * 2**20 // HEAD_BYTES

# Store tokens: unlike id(store), never shared by two stores of one process, even when one
# was closed and freed before the other was opened.
_TOKENS = itertools.count(1)


def head_cache_entries(size: int | None = None, mb: float | None = None) -> int:
    """Entries of the head cache for an entry count or a memory budget in MB (default:
    DEFAULT_HEAD_CACHE_MB)."""
    if size is not None:
        return max(1, int(size))
    return max(1, int((DEFAULT_HEAD_CACHE_MB if mb is None else mb) * 2**20 // HEAD_BYTES))


class StoreBase(Generic[Db]):
    """The lifecycle shared by LmdbGraphStore and MemoryGraphStore (see module doc)."""

    def __init__(self, tables: Tables[Db], head_cache_size: int | None = None,
                 head_cache_mb: float | None = None) -> None:
        self.tables = tables
        self.head_cache: dict[int, Head] = {}
        self.moved_heads: set[int] = set()    # links whose ends MERGE moved: never cached
        self.symbol_ids: dict[str, int] = {}
        self.symbol_texts: dict[int, str] = {}
        self.cache_cap = head_cache_entries(head_cache_size, head_cache_mb)
        self.column_cache = StoreColumns()
        self.token = next(_TOKENS)
        self._wlock = threading.Lock()
        self._writer: int | None = None       # thread ident of the open write txn
        self._closed = False
        # A follower (a read-only open beside the owner process, see `follow`): the newest
        # snapshot its readers have seen and the head cache valid at it, swapped together.
        self._follows = False
        self._heads_at: tuple[int, dict[int, Head]] = (-1, self.head_cache)
        self._snapshot_lock = threading.Lock()
        self._on_snapshot: list[Callable[[int], None]] = []

    def follow(self, on_snapshot: Callable[[int], None] | None = None) -> None:
        """Make this store a *follower*: another process (the owner) writes the data, so
        what this process caches must be checked against the committed snapshot each read
        sees (LMDB's transaction id, which every commit of any process advances). When a
        read first sees a newer snapshot, the head cache starts empty (a MERGE elsewhere
        may have moved a link's ends: `moved_heads` only knows this process's writes) and
        `on_snapshot(snapshot_id)` runs (the engine invalidates its PRIMER rankings), before
        that read — or any other at the new snapshot — goes on. A read still on an older
        snapshot gets a head cache of its own, so it never fills the shared one."""
        with self._snapshot_lock:
            self._follows = True
            if on_snapshot is not None:
                self._on_snapshot.append(on_snapshot)

    def _heads_for(self, snapshot: int) -> dict[int, Head]:
        seen, heads = self._heads_at       # one attribute read: a consistent pair
        if snapshot == seen:
            return heads
        with self._snapshot_lock:
            seen, heads = self._heads_at
            if snapshot > seen:
                for callback in self._on_snapshot:
                    callback(snapshot)
                heads = self.head_cache = {}
                self._heads_at = (snapshot, heads)
                return heads
            if snapshot == seen:
                return heads
        return {}

    def read(self) -> GraphReadTxn[Db]:
        """A read transaction: `with store.read() as txn: ...`."""
        if self._closed:
            raise internal("the store is closed")
        try:
            kv, end = self._begin_read()
        except Exception as exc:
            raise self._translate(exc) or internal(f"cannot begin a read: {exc}") from exc
        if self._follows:
            return GraphReadTxn(self, kv, end, self._heads_for(self.snapshot_of(kv)))
        return GraphReadTxn(self, kv, end)

    def snapshot_of(self, kv: KvRead[Db]) -> int:
        """The `snapshot_id()` of a read transaction's kv (a backend whose journal-only
        commits keep the id before them overrides it)."""
        return kv.snapshot_id()

    def write(self) -> GraphWriteTxn[Db]:
        """The write transaction: `with store.write() as txn: ...` (blocks while another
        thread writes; LMDB's own lock does the same across processes)."""
        if self._writer == threading.get_ident():
            raise internal("a write transaction is already open in this thread")
        self._wlock.acquire()
        try:
            self._check_open()
            kv = self._call(self._begin_write)
            try:
                txn = self._call(lambda: GraphWriteTxn(self, kv))
            except BaseException:
                self._abort(kv)
                raise
        except BaseException:
            self._wlock.release()
            raise
        self._writer = threading.get_ident()
        return txn

    def finish_write(self, txn: GraphWriteTxn[Db], exc: BaseException | None) -> None:
        """End the write transaction `txn` (its `with` block exited, with `exc` if it
        raised): commit, or abort after an exception or `abort()`; then release the writer
        lock."""
        try:
            if exc is not None or txn.aborted:
                txn.abort()                 # (once: a no-op after an explicit abort())
                if exc is not None and not isinstance(exc, KipError):
                    err = self._translate(exc)
                    if err is not None:
                        raise err from exc
                return
            try:
                txn.flush()
                self._commit(txn.kv)
            except BaseException as e:
                self._abort(txn.kv)
                err = None if isinstance(e, KipError) else self._translate(e)
                if err is not None:
                    raise err from e
                raise
            txn.publish()
        finally:
            txn.invalidate()
            self._writer = None
            self._wlock.release()

    def abort_kv(self, kv: KvWrite[Db]) -> None:
        """Abort the key-value transaction of the open write (its `abort()`)."""
        self._abort(kv)

    def translate(self, exc: BaseException) -> KipError | None:
        """The KipError a backend exception means, or None when it is not the backend's."""
        return self._translate(exc)

    def check_tables(self, txn: ReadTxn, *, examples: int = EXAMPLES,
                     repair: bool = False) -> TableCheck:
        """Verify (and with `repair`, rewrite) the derived tables as `txn` sees them: see
        `GraphStore.check_tables` and `nexus.store.integrity`."""
        if not isinstance(txn, GraphReadTxn) or txn.store_token() != self.token:
            raise internal("check_tables needs a transaction of this store")
        if repair and not isinstance(txn, GraphWriteTxn):
            raise internal("a repair needs the store's write transaction")
        return check_tables(txn, examples, repair)

    def _call(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except KipError:
            raise
        except Exception as exc:
            err = self._translate(exc)
            if err is None:
                raise
            raise err from exc

    def _check_open(self) -> None:
        if self._closed:
            raise internal("the store is closed")

    @property
    def writing(self) -> bool:
        """Whether a write transaction is open in this process now (`GraphStore.writing`)."""
        return self._wlock.locked()

    def close(self) -> None:
        """Close the store (waits for an open write transaction to finish)."""
        if self._writer == threading.get_ident():
            raise internal("cannot close the store inside its own write transaction")
        with self._wlock:
            if not self._closed:
                self._closed = True
                self._close()
        self.head_cache.clear()

    def _close(self) -> None:
        pass

    def drop_caches(self) -> None:
        """Empty the head cache (heads decode again on demand, as after it filled up). A
        bulk load ends with this (`nexus.ops.bulk_import`): its commits cached every head it
        wrote (up to the cache's budget, 64 MB), heads a server does not read soon, and
        those small objects, allocated among the load's short-lived ones, kept ~50 MB of
        Python's small-object arenas from being freed at N=10k (bench/RESULTS.md, "File
        pages and the loader's heap")."""
        self.head_cache.clear()

    def __enter__(self: S) -> S:
        return self

    def __exit__(self, et: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # Backend hooks ----------------------------------------------------------------------
    def _begin_read(self) -> tuple[KvRead[Db], Callable[[], None]]:
        raise NotImplementedError

    def _begin_write(self) -> KvWrite[Db]:
        raise NotImplementedError

    def _commit(self, kv: KvWrite[Db]) -> None:
        raise NotImplementedError

    def _abort(self, kv: KvWrite[Db]) -> None:
        raise NotImplementedError

    def _translate(self, exc: BaseException) -> KipError | None:
        if isinstance(exc, struct.error):
            return internal(f"invalid id or symbol for the store: {exc}")
        return None
