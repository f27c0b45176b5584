"""The PostgreSQL graph store: the storage protocol over SQL tables (`postgresql://` URLs).

Owns the connection to the database (a small pool of psycopg connections, one per open
transaction), the schema, the transaction lifecycle and the translation of database errors
into KipError with the password never shown. The SQL of each protocol call is
`pg_txn`'s.

Schema (created on first open; `pg_schema.SCHEMA`): every table has a `space` column first —
the distribution key (Citus `create_distributed_table(..., 'space')`; CockroachDB and
YugabyteDB range/hash-split on the primary key's prefix), so a space's concepts, links
(co-located with their subject: same space), symbols and aux rows live together. Only plain
SQL that Citus, CockroachDB and YugabyteDB also accept: tables with composite primary keys,
unique and plain indexes, `INSERT ... ON CONFLICT`, `UPDATE ... RETURNING`, row-value
comparisons for paging, COPY for bulk loads.

Transactions: a read transaction is `REPEATABLE READ READ ONLY` (one snapshot for its whole
life, never blocking the writer). A write transaction runs `READ COMMITTED` after taking the
space's row lock in `nexus_meta` (`UPDATE ... RETURNING` its counters), so writers are
serialized across processes and machines sharing the database and each statement sees
every earlier commit. The id and symbol counters live in that row: read when the lock is
taken, written back at commit, so servers sharing a database never hand out one id twice and
an aborted write leaves no trace (as in LMDB).

Caches: only what nobody can make stale — symbols (interning is permanent) and concept heads
(immutable; ids never reused) are cached per store, and only once committed. Link heads
(MERGE may move a link's ends in another server), counts and columns are not: `columns()`
and `column_cache()` answer None, and `snapshot_id()` answers None (nothing is keyed by a
snapshot this process cannot see change).
"""
from __future__ import annotations

import itertools
import threading
from types import TracebackType
from typing import Any, Callable, Literal, TypeVar

import psycopg

from nexus.errors import ErrorCode, KipError
from nexus.store import pg_schema
from nexus.store.model import ConceptHead
from nexus.store.pg_conn import PgLocation, first_line, translate
from nexus.store.pg_txn import PgReadTxn
from nexus.store.pg_check import check_tables
from nexus.store.pg_write import PgWriteTxn
from nexus.store.protocol import ReadTxn, TableCheck

T = TypeVar("T")

MAX_IDLE = 8                        # idle connections kept per store
HEAD_CACHE = 200_000                # concept heads cached per store (emptied when full)
_TOKENS = itertools.count(1)        # store tokens: never shared by two stores of a process


class PgGraphStore:
    """GraphStore on a PostgreSQL database (see the module doc). `location` is the URL
    without `postgresql://`. Options other stores take (`durable`, cache sizes) are ignored:
    every commit is durable as the database's settings say."""

    def __init__(self, location: str, **options: Any) -> None:
        self.where = PgLocation(location)
        self.space = self.where.space
        self.token = next(_TOKENS)
        self._idle: list[psycopg.Connection[Any]] = []
        self._pool_lock = threading.Lock()
        self._wlock = threading.Lock()
        self._writer: int | None = None
        self._closed = False
        self.concept_heads: dict[int, ConceptHead] = {}
        self.symbol_ids: dict[str, int] = {}
        self.symbol_texts: dict[int, str] = {}
        conn = self.connect()
        try:
            pg_schema.ensure(conn, self.space)
            self.lock_space = pg_schema.lock_statement(conn)
        except BaseException as exc:
            conn.close()
            raise translate(exc, self.where) or exc
        self.release(conn)

    # --- connections -----------------------------------------------------------------------
    def connect(self) -> psycopg.Connection[Any]:
        """A new connection, or KIP_4003 naming the cause."""
        if self._closed:
            raise KipError(ErrorCode.KIP_4003, "the store is closed")
        try:
            return psycopg.connect(self.where.conninfo, autocommit=True)
        except Exception as exc:
            raise translate(exc, self.where) or KipError(
                ErrorCode.KIP_4003, f"cannot connect to {self.where.shown}: "
                f"{self.where.scrub(first_line(exc))}") from None

    def _pooled(self) -> psycopg.Connection[Any] | None:
        if self._closed:
            raise KipError(ErrorCode.KIP_4003, "the store is closed")
        with self._pool_lock:
            while self._idle:
                conn = self._idle.pop()
                if not conn.closed and not conn.broken:
                    return conn
        return None

    def begin(self, start: Callable[[psycopg.Connection[Any]], T], writing: bool
              ) -> tuple[psycopg.Connection[Any], T]:
        """A connection with a transaction begun by `start(conn)`: an idle pooled one, or a
        new one when none is idle or the pooled one died while idle (the database restarted,
        the network cut it) — nothing had happened on it, so starting again is safe."""
        conn = self._pooled()
        for fresh in (conn is None, True):
            if conn is None:
                conn = self.connect()
            try:
                return conn, start(conn)
            except psycopg.OperationalError as exc:
                self.discard(conn)
                conn = None
                if fresh:
                    raise translate(exc, self.where, writing=writing) or exc
            except BaseException as exc:
                self.end(conn, commit=False)
                raise translate(exc, self.where, writing=writing) or exc
        raise AssertionError("unreachable")     # (the loop returns or raises)

    def discard(self, conn: psycopg.Connection[Any]) -> None:
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - closing a dead connection
            pass

    def release(self, conn: psycopg.Connection[Any]) -> None:
        """Give a connection back (closed instead when broken, in a transaction, or when
        enough are idle)."""
        ok = (not conn.closed and not conn.broken and not self._closed
              and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE)
        if ok:
            with self._pool_lock:
                if len(self._idle) < MAX_IDLE:
                    self._idle.append(conn)
                    return
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - closing a dead connection
            pass

    @property
    def writing(self) -> bool:
        """Whether a write transaction is open in this process now (`GraphStore.writing`)."""
        return self._wlock.locked()

    @property
    def path(self) -> None:
        """None: no directory holds this store (what keeps files beside a store, the
        vector index, keeps it in memory as for memory://)."""
        return None

    @property
    def location(self) -> str:
        """The URL with its password masked (the only form shown anywhere)."""
        return self.where.shown

    # --- transactions ----------------------------------------------------------------------
    def read(self) -> PgReadTxn:
        conn, _ = self.begin(_begin_read, writing=False)
        return PgReadTxn(self, conn)

    def write(self) -> PgWriteTxn:
        """A write transaction whose BEGIN and lock go with its first statement (held back:
        `PgWriteTxn.start`): no round trip of their own. A pooled connection that died while
        idle is replaced when that first round trip fails (nothing had run on it)."""
        if self._writer == threading.get_ident():
            raise KipError(ErrorCode.KIP_4003,
                           "a write transaction is already open in this thread")
        self._wlock.acquire()
        try:
            conn = self._pooled()
            pooled = conn is not None
            if conn is None:
                conn = self.connect()
        except BaseException:
            self._wlock.release()
            raise
        self._writer = threading.get_ident()
        return PgWriteTxn(self, conn, pooled=pooled)

    def end(self, conn: psycopg.Connection[Any], *, commit: bool) -> None:
        """Commit or roll back the connection's transaction and give it back."""
        try:
            if not conn.closed and not conn.broken:
                conn.execute("COMMIT" if commit else "ROLLBACK")
        except BaseException:
            if not commit:
                try:
                    conn.close()
                except Exception:  # noqa: BLE001
                    pass
                return
            raise
        finally:
            self.release(conn)

    def writer_done(self) -> None:
        """The write transaction ended: let the next writer in."""
        self._writer = None
        self._wlock.release()

    def publish(self, sids: dict[str, int], texts: dict[int, str],
                heads: dict[int, ConceptHead]) -> None:
        """Cache what a committed write learned (symbols, concept heads)."""
        self.symbol_ids.update(sids)
        self.symbol_texts.update(texts)
        self.cache_heads(heads)

    def cache_heads(self, heads: dict[int, ConceptHead]) -> None:
        if len(self.concept_heads) + len(heads) > HEAD_CACHE:
            self.concept_heads.clear()
        if len(heads) <= HEAD_CACHE:
            self.concept_heads.update(heads)

    def forget(self, ids: list[int]) -> None:
        for n in ids:
            self.concept_heads.pop(n, None)

    # --- the rest of GraphStore ------------------------------------------------------------
    def check_tables(self, txn: ReadTxn, *, examples: int = 5,
                     repair: bool = False) -> TableCheck:
        if not isinstance(txn, PgReadTxn) or txn.host is not self:
            raise KipError(ErrorCode.KIP_4003, "check_tables needs a transaction of this store")
        return check_tables(txn, examples, repair)

    def close(self) -> None:
        if self._writer == threading.get_ident():
            raise KipError(ErrorCode.KIP_4003,
                           "cannot close the store inside its own write transaction")
        with self._wlock:
            self._closed = True
            with self._pool_lock:
                idle, self._idle = self._idle, []
            for conn in idle:
                try:
                    conn.close()
                except Exception:  # noqa: BLE001
                    pass
        self.concept_heads.clear()

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every table's rows of this space, in key order (tests and debugging)."""
        conn = self.connect()
        try:
            return {table: [tuple(r) for r in conn.execute(sql, (self.space,)).fetchall()]
                    for table, sql in pg_schema.DUMP.items()}
        finally:
            self.release(conn)

    def __enter__(self) -> PgGraphStore:
        return self

    def __exit__(self, et: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        self.close()
        return False




def _begin_read(conn: psycopg.Connection[Any]) -> None:
    """BEGIN a read-only snapshot, taken now (by its first statement), in one round trip."""
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SELECT 1")
