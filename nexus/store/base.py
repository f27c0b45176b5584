"""What both stores share: the caches, the writer lock and the transaction lifecycle.

Owns when transactions begin and end: `read()` and `write()`, commit on a normal exit,
abort (exactly) on an exception or `abort()`, the merge of what a committed write learned
into the process-wide caches, and the translation of backend exceptions. Backends implement
`_begin_read() -> (kv, end)`, `_begin_write() -> kv`, `_commit(kv)`, `_abort(kv)`,
`_translate(exc) -> KipError | None` and `_close()`.
"""
from __future__ import annotations

import struct
import threading

from nexus.errors import KipError
from nexus.store.graph import GraphReadTxn, Tables, internal
from nexus.store.graph_write import GraphWriteTxn
from nexus.store.protocol import ConceptHead, LinkHead

# The head cache is bounded by memory: a cached head costs about HEAD_BYTES (the frozen
# dataclass, its ints, a short name and the dict slot; measured with tracemalloc on the
# peers graph: 170-230 bytes), so the default budget holds ~320k heads. When the cache is
# full it is simply emptied (heads are cheap to decode again).
HEAD_BYTES = 200
DEFAULT_HEAD_CACHE_MB = 64
DEFAULT_HEAD_CACHE = DEFAULT_HEAD_CACHE_MB * 2**20 // HEAD_BYTES


def head_cache_entries(size: int | None = None, mb: float | None = None) -> int:
    """Entries of the head cache for an entry count or a memory budget in MB (default:
    DEFAULT_HEAD_CACHE_MB)."""
    if size is not None:
        return max(1, int(size))
    return max(1, int((DEFAULT_HEAD_CACHE_MB if mb is None else mb) * 2**20 // HEAD_BYTES))


class StoreBase:
    """The lifecycle shared by LmdbGraphStore and MemoryGraphStore (see module doc)."""

    def __init__(self, tables: Tables, head_cache_size: int | None = None,
                 head_cache_mb: float | None = None) -> None:
        self._d = tables
        self._heads: dict[int, ConceptHead | LinkHead] = {}
        self._sids: dict[str, int] = {}
        self._stexts: dict[int, str] = {}
        self._cache_cap = head_cache_entries(head_cache_size, head_cache_mb)
        self._wlock = threading.Lock()
        self._writer: int | None = None       # thread ident of the open write txn
        self._closed = False

    def read(self) -> GraphReadTxn:
        """A read transaction: `with store.read() as txn: ...`."""
        if self._closed:
            raise internal("the store is closed")
        try:
            kv, end = self._begin_read()
        except Exception as exc:
            raise self._translate(exc) or internal(f"cannot begin a read: {exc}") from exc
        return GraphReadTxn(self, kv, end)

    def write(self) -> GraphWriteTxn:
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

    def _finish_write(self, txn: GraphWriteTxn, exc: BaseException | None) -> None:
        try:
            if exc is not None or txn._aborted:
                if not txn._aborted:
                    txn._aborted = True
                    self._abort(txn._kv)
                if exc is not None and not isinstance(exc, KipError):
                    err = self._translate(exc)
                    if err is not None:
                        raise err from exc
                return
            try:
                txn._flush()
                self._commit(txn._kv)
            except BaseException as e:
                self._abort(txn._kv)
                err = None if isinstance(e, KipError) else self._translate(e)
                if err is not None:
                    raise err from e
                raise
            self._after_commit(txn)
        finally:
            txn._kill()
            self._writer = None
            self._wlock.release()

    def _after_commit(self, txn: GraphWriteTxn) -> None:
        heads = self._heads
        for n in txn._deleted:
            heads.pop(n, None)
        new = txn._new_heads
        if new:
            if len(heads) + len(new) > self._cache_cap:
                heads.clear()
            if len(new) <= self._cache_cap:
                heads.update(new)
        self._sids.update(txn._new_sids)
        self._stexts.update(txn._new_stexts)

    def _call(self, fn):
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

    def close(self) -> None:
        """Close the store (waits for an open write transaction to finish)."""
        if self._writer == threading.get_ident():
            raise internal("cannot close the store inside its own write transaction")
        with self._wlock:
            if not self._closed:
                self._closed = True
                self._close()
        self._heads.clear()

    def _close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # Backend hooks ----------------------------------------------------------------------
    def _begin_read(self):
        raise NotImplementedError

    def _begin_write(self):
        raise NotImplementedError

    def _commit(self, kv) -> None:
        raise NotImplementedError

    def _abort(self, kv) -> None:
        raise NotImplementedError

    def _translate(self, exc: BaseException) -> KipError | None:
        if isinstance(exc, struct.error):
            return internal(f"invalid id or symbol for the store: {exc}")
        return None
