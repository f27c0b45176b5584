"""The PostgreSQL backend's aux tables as a transaction sees them.

Owns what a transaction keeps of the `nexus_aux` rows it reads (`PgAuxCache`, the base of
`pg_txn.PgReadTxn`): the values of keys, and the last and first pair under a prefix, kept
true after the transaction's own writes and read many at once by `prefetch_aux`; and the
AuxTable views over them (`PgAux` reads, `PgWriteAux` writes held back by the write
transaction, which writes them in batches: `pg_aux_write`). Nothing is kept beyond the
transaction: another server on the same database may commit next.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator, Sequence

from nexus.store import codec
from nexus.store.pg_conn import MISSING, Byteas, internal, pages

LOCAL_AUX = 100_000             # aux values a transaction keeps (emptied when full)
# AuxTable.prefetch: the values of keys, and the last pair under each prefix, in one
# statement: a lateral probe of the primary key per key and per prefix (`k = ANY(...)`
# may be planned as a filter over the whole table's rows).
_PREFETCH = (
    "SELECT 0, a.k, NULL::bytea, a.v FROM unnest(%b::bytea[]) AS q(k) JOIN LATERAL "
    "(SELECT k, v FROM nexus_aux WHERE space = %s AND tbl = %s AND k = q.k LIMIT 1) a ON TRUE "
    "UNION ALL "
    "SELECT 1, p.p, a.k, a.v FROM unnest(%b::bytea[], %b::bytea[]) AS p(p, e) "
    "JOIN LATERAL (SELECT k, v FROM nexus_aux WHERE space = %s AND tbl = %s AND k >= p.p "
    "AND k < p.e ORDER BY k DESC LIMIT 1) a ON TRUE")
PREFETCH_CHUNK = 10_000         # keys (or prefixes) per prefetch statement
_AFTER_ALL = b"\xff" * (codec.MAX_KEY + 1)     # above every key (a prefix without an end)


class PgAuxCache:
    """The aux rows a transaction has read (see the module doc); `rows`, `one` and the
    write transaction's held-back work are the transaction's own (`pg_txn`, `pg_pipeline`)."""

    space: str
    aux_writes = 0          # aux puts and deletes so far (a write transaction's)

    def __init__(self) -> None:
        # The aux values read: (table, key) -> value or None (absent); write transactions
        # keep them in step with their own writes.
        self.aux_values: dict[tuple[str, bytes], bytes | None] = {}
        # The last pair under an aux prefix, read by `prefetch_aux` (None: nothing under
        # it), kept in step with this transaction's own writes; and per table the lengths
        # of those prefixes (to find a written key's cached prefixes).
        self.aux_last: dict[tuple[str, bytes], tuple[bytes, bytes] | None] = {}
        # The first pair under a prefix likewise (`prefetch_aux_many`'s `first_under`: a
        # forward scan's first pair, e.g. the lexical index's lowest pending document);
        # `aux_last_lens` holds the lengths of the prefixes of both caches.
        self.aux_first: dict[tuple[str, bytes], tuple[bytes, bytes] | None] = {}
        self.aux_last_lens: dict[str, set[int]] = {}
        # Aux puts and deletes per table (a write transaction's): what a held-back
        # prefetch checks before keeping its rows of a table.
        self.aux_table_writes: dict[str, int] = {}

    def rows(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        raise NotImplementedError       # (the transaction's: `PgReadTxn.rows`)

    def one(self, sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
        raise NotImplementedError       # (the transaction's: `PgReadTxn.one`)

    def pend_aux(self, table: str, key: bytes, value: bytes | None) -> None:
        raise internal("aux tables are read-only in a read transaction")

    def remember_aux(self, table: str, key: bytes, value: bytes | None) -> None:
        """Keep an aux value read in this snapshot (package-internal: `PgAux`)."""
        values = self.aux_values
        if len(values) >= LOCAL_AUX:
            values.clear()
        values[(table, key)] = value

    def settle_prefetch(self) -> None:
        """Send a held-back aux prefetch before a read its caches miss (a write
        transaction's: `PgPipelined`; none here)."""

    def flush_aux(self, table: str, hold: bool = False) -> None:
        """Write the table's pending aux changes (a write transaction's; none here); with
        `hold`, held back until the caller's next statement, a read of the table."""

    def aux_pending(self, table: str) -> dict[bytes, bytes | None]:
        """The table's aux changes not yet written (a write transaction's; none here)."""
        return {}

    def prefetch_aux(self, table: str, keys: Iterable[bytes], last_under: Iterable[bytes]
                     ) -> None:
        """Read the values of `keys` and the last pair under each prefix of `last_under`
        into this transaction's caches (`aux_values`, `aux_last`), a statement per
        PREFETCH_CHUNK of them: what `PgAux.get` and a reverse `PgAux.scan` then serve
        without a round trip. Keys changed by this transaction are not read (their
        values are known); a table with pending changes is written first when a prefix is
        asked for (the database's last pair must include them)."""
        self.settle_prefetch()
        pending = self.aux_pending(table)
        asked = list(dict.fromkeys(k for k in keys if 0 < len(k) <= codec.MAX_KEY
                                   and k not in pending))
        want = [k for k in asked if (table, k) not in self.aux_values]
        prefixes = list(dict.fromkeys(p for p in last_under if len(p) <= codec.MAX_KEY
                                      and (table, p) not in self.aux_last))
        if not want and not prefixes:
            return
        if prefixes and pending:
            self.flush_aux(table, hold=True)        # (they go with the read below)
        if len(self.aux_last) + len(prefixes) > LOCAL_AUX:     # bounded (the rest: scans)
            self.clear_aux_heads()
            prefixes = prefixes[:LOCAL_AUX]
        if len(self.aux_values) + len(want) >= LOCAL_AUX:
            # Emptied now, not part way through what is read here (which would lose the
            # first part of it: a statement per key when the caller asks for them).
            self.aux_values.clear()
            pending = self.aux_pending(table)
            want = [k for k in asked if k not in pending]
        lens = self.aux_last_lens.setdefault(table, set())
        step = PREFETCH_CHUNK
        for i in range(0, max(len(want), len(prefixes)), step):
            part, heads = want[i:i + step], prefixes[i:i + step]
            ends = [codec.prefix_end(p) or _AFTER_ALL for p in heads]
            found: dict[bytes, bytes] = {}
            last: dict[bytes, tuple[bytes, bytes]] = {}
            for kind, k, k2, v in self.rows(_PREFETCH, (Byteas(part), self.space, table,
                                                        Byteas(heads), Byteas(ends),
                                                        self.space, table)):
                if kind == 0:
                    found[bytes(k)] = bytes(v)
                else:
                    last[bytes(k)] = (bytes(k2), bytes(v))
            for k in part:
                self.remember_aux(table, k, found.get(k))
            for p in heads:
                self.aux_last[(table, p)] = last.get(p)
                lens.add(len(p))

    def clear_aux_heads(self) -> None:
        """Forget the cached last and first pairs under prefixes (bounded caches)."""
        self.aux_last.clear()
        self.aux_first.clear()
        self.aux_last_lens.clear()

    def note_aux_write(self, table: str, key: bytes, value: bytes | None) -> None:
        """Keep `aux_last` and `aux_first` true after this transaction changes `key`
        (None: deleted): a put at or after a prefix's cached last pair (at or before its
        cached first pair) becomes it; deleting a cached pair forgets it (the next scan
        asks the database)."""
        lens = self.aux_last_lens.get(table)
        if not lens:
            return
        last, first = self.aux_last, self.aux_first
        for n in lens:
            if n > len(key):
                continue
            slot = (table, key[:n])
            if slot in last:
                cur = last[slot]
                if value is None:
                    if cur is not None and cur[0] == key:
                        del last[slot]
                elif cur is None or key >= cur[0]:
                    last[slot] = (key, value)
            if slot in first:
                cur = first[slot]
                if value is None:
                    if cur is not None and cur[0] == key:
                        del first[slot]
                elif cur is None or key <= cur[0]:
                    first[slot] = (key, value)


class PgAux:
    """AuxTable over `nexus_aux` rows of one table name (bytea keys compare bytewise)."""

    def __init__(self, txn: PgAuxCache, table: str) -> None:
        self.txn = txn
        self.table = table

    def get(self, key: bytes) -> bytes | None:
        if not key or len(key) > codec.MAX_KEY:
            return None
        txn = self.txn
        known = txn.aux_values.get((self.table, key), MISSING)
        if known is MISSING:
            txn.settle_prefetch()
            known = txn.aux_values.get((self.table, key), MISSING)
        if known is not MISSING:
            return known        # type: ignore[return-value]  # (bytes | None when found)
        row = txn.one("SELECT v FROM nexus_aux WHERE space = %s AND tbl = %s AND k = %s",
                      (txn.space, self.table, key))
        value = None if row is None else bytes(row[0])
        txn.remember_aux(self.table, bytes(key), value)
        return value

    def prefetch(self, keys: Iterable[bytes] = (), last_under: Iterable[bytes] = ()) -> None:
        """See the protocol: read them all now, a statement per chunk (`prefetch_aux`)."""
        self.txn.prefetch_aux(self.table, keys, last_under)

    def scan(self, prefix: bytes = b"", *, reverse: bool = False,
             start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        if len(prefix) > codec.MAX_KEY or (start is not None and len(start) > codec.MAX_KEY):
            raise internal(f"aux scan prefix/start longer than {codec.MAX_KEY} bytes")
        if start is None:
            self.txn.settle_prefetch()
            cache = self.txn.aux_last if reverse else self.txn.aux_first
            hit = cache.get((self.table, prefix), MISSING)
            if hit is not MISSING:
                return self._from_known(prefix, reverse, hit)  # type: ignore[arg-type]
        return self._scan(prefix, reverse, start)

    def _from_known(self, prefix: bytes, reverse: bool, hit: tuple[bytes, bytes] | None
                    ) -> Iterator[tuple[bytes, bytes]]:
        """A scan whose first pair is known (prefetched: the last pair for a reverse scan,
        the first for a forward one): that pair without a round trip, then (if the caller
        reads on) the database's pairs after it in the scan's order."""
        if hit is None:
            return
        yield hit
        for pair in self._scan(prefix, reverse, hit[0]):
            if pair[0] != hit[0]:
                yield pair

    def _scan(self, prefix: bytes, reverse: bool, start: bytes | None
              ) -> Iterator[tuple[bytes, bytes]]:
        self.txn.flush_aux(self.table, hold=True)  # (they go with the first page's read)
        where, params = self._under(prefix)
        if start is not None:
            where += " AND k <= %s" if reverse else " AND k >= %s"
            params.append(start)
        order = "k DESC" if reverse else "k"
        cmp = "<" if reverse else ">"
        first = f"SELECT k, v FROM nexus_aux WHERE {where} ORDER BY {order} LIMIT %s"
        later = f"SELECT k, v FROM nexus_aux WHERE {where} AND k {cmp} %s ORDER BY {order} LIMIT %s"
        txn = self.txn

        def fetch(after: tuple[Any, ...] | None, limit: int) -> list[tuple[Any, ...]]:
            if after is None:
                return txn.rows(first, (*params, limit))
            return txn.rows(later, (*params, after[0], limit))
        return ((bytes(k), bytes(v)) for k, v in pages(fetch, lambda row: (row[0],)))

    def _under(self, prefix: bytes) -> tuple[str, list[Any]]:
        """The WHERE clause (and its parameters) of this table's rows under `prefix`."""
        where = "space = %s AND tbl = %s"
        params: list[Any] = [self.txn.space, self.table]
        if prefix:
            where += " AND k >= %s"
            params.append(prefix)
            end = codec.prefix_end(prefix)
            if end is not None:
                where += " AND k < %s"
                params.append(end)
        return where, params

    def put(self, key: bytes, value: bytes) -> None:
        raise internal("aux tables are read-only in a read transaction")

    def delete(self, key: bytes) -> bool:
        raise internal("aux tables are read-only in a read transaction")

    def count(self, prefix: bytes = b"") -> int:
        self.txn.flush_aux(self.table, hold=True)  # (they go with the count)
        where, params = self._under(prefix)
        row = self.txn.one(f"SELECT count(*) FROM nexus_aux WHERE {where}", params)
        return 0 if row is None else int(row[0])


class PgWriteAux(PgAux):
    """The write transaction's AuxTable: put and delete too, kept in the transaction and
    written in batches (before a scan or count of the table, when many are pending, and at
    commit): the search postings of one command are many small puts. The pairs a scan
    reads are remembered (a `get` or `delete` of them after the scan needs no round trip:
    the lexical index deletes the pending documents it scanned)."""

    def _scan(self, prefix: bytes, reverse: bool, start: bytes | None
              ) -> Iterator[tuple[bytes, bytes]]:
        txn, table = self.txn, self.table
        writes = -1
        for k, v in super()._scan(prefix, reverse, start):
            if writes < 0:
                writes = txn.aux_writes
            # Not after a write (the page read may be older than it), nor into a cache
            # half full (a long scan would empty it: `remember_aux`).
            if txn.aux_writes == writes and len(txn.aux_values) < LOCAL_AUX // 2:
                txn.remember_aux(table, k, v)
            yield k, v

    def get(self, key: bytes) -> bytes | None:
        pending = self.txn.aux_pending(self.table)      # (the cache may have been emptied)
        if key in pending:
            return pending[key]
        return super().get(key)

    def put(self, key: bytes, value: bytes) -> None:
        _check_aux_key(key)
        self.txn.pend_aux(self.table, bytes(key), bytes(value))

    def delete(self, key: bytes) -> bool:
        _check_aux_key(key)
        if self.get(key) is None:
            return False
        self.txn.pend_aux(self.table, bytes(key), None)
        return True


def _check_aux_key(key: bytes) -> None:
    if not isinstance(key, (bytes, bytearray)) or not key or len(key) > codec.MAX_KEY:
        raise internal(f"aux key must be 1..{codec.MAX_KEY} bytes")
