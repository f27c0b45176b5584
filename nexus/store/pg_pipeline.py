"""The PostgreSQL write transaction's round trips: held-back element writes, sent with the
next statement, and the commit hooks' aux reads of several tables in one statement.

Owns when a write transaction's element writes reach the server. A write whose outcome
the transaction already knows — a concept or link it knows to be absent, a map of an element
it knows to exist — need not wait for its answer: it is held back (`defer`) and sent in
one pipeline with the next statement the transaction runs (a read, the search hooks'
writes, or the commit), so a command's element writes cost no round trip of their own.
Every statement of the transaction goes through `rows` / `run` / `pipeline` here, so none
reads the tables without the held-back writes before it, in order.

Each held-back write has a check of its result (the row it inserted, the rows it updated),
run when the pipeline returns: a write that did not take — which the knowledge it was
deferred on rules out, so it would be an internal fault — fails the transaction then, with
the same KIP error the write would have raised at once. The commit sends and checks them
before its COMMIT; held-back statements without a check (the vector rows of the search
hook) go in the commit's own pipeline (`unchecked_writes`).

`prefetch_aux_many` reads the aux keys (and the last pair under prefixes) of several
tables in one statement: what the commit hooks will read (the version log's switch and
last record, the vector tables' completeness marker), asked for at once by the engine
before they run (`Engine.write_session`, through each hook's `aux_reads`). That statement
is held back too, and goes with the first hook's own read: no round trip of its own.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import psycopg
from psycopg.pq import ExecStatus

from nexus.store import codec
from nexus.store.pg_conn import Byteas, Texts, call
from nexus.store.pg_aux import LOCAL_AUX, PREFETCH_CHUNK
from nexus.store.pg_txn import PgReadTxn, used_after_end

TUPLES_OK = ExecStatus.TUPLES_OK
DEFER_MAX = 256                 # element writes held back at most (then sent on their own)

Check = Callable[[Any], None]   # a held-back write's check of its result
Statement = tuple[str, Sequence[Any]]
# (table, keys, last_under[, first_under]): keys, and prefixes whose last (first) pair is read
AuxRead = (tuple[str, Iterable[bytes], Iterable[bytes]]
           | tuple[str, Iterable[bytes], Iterable[bytes], Iterable[bytes]])
_AFTER_ALL = b"\xff" * (codec.MAX_KEY + 1)     # above every key (a prefix without an end)
# prefetch_aux_many: `AuxTable.prefetch`'s statement with the table a column of the probes.
_PREFETCH_MANY = (
    "SELECT 0, q.t, a.k, NULL::bytea, a.v FROM unnest(%b::text[], %b::bytea[]) AS q(t, k) "
    "JOIN LATERAL (SELECT k, v FROM nexus_aux WHERE space = %s AND tbl = q.t AND k = q.k "
    "LIMIT 1) a ON TRUE UNION ALL "
    "SELECT 1, p.t, p.p, a.k, a.v FROM unnest(%b::text[], %b::bytea[], %b::bytea[]) "
    "AS p(t, p, e) JOIN LATERAL (SELECT k, v FROM nexus_aux WHERE space = %s AND tbl = p.t "
    "AND k >= p.p AND k < p.e ORDER BY k DESC LIMIT 1) a ON TRUE UNION ALL "
    "SELECT 2, f.t, f.p, a.k, a.v FROM unnest(%b::text[], %b::bytea[], %b::bytea[]) "
    "AS f(t, p, e) JOIN LATERAL (SELECT k, v FROM nexus_aux WHERE space = %s AND tbl = f.t "
    "AND k >= f.p AND k < f.e ORDER BY k LIMIT 1) a ON TRUE")


class PgPipelined(PgReadTxn):
    """A transaction whose element writes may be held back (see the module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deferred: list[tuple[str, Sequence[Any], Check | None]] = []
        self._prefetch_held = False     # a `prefetch_aux_many` among the held-back statements

    def defer(self, sql: str, params: Sequence[Any], check: Check | None = None) -> None:
        """Hold the statement back until the next one (see the module doc); `check` gets
        its result (rows, or the row count of a statement without rows)."""
        if self.conn is None:
            used_after_end()
        self._deferred.append((sql, params, check))
        if len(self._deferred) >= DEFER_MAX:
            self.flush_writes()

    def flush_writes(self) -> None:
        """Send the held-back writes now (before a COPY, a raw use of the connection, the
        COMMIT), and check them."""
        if self._deferred:
            self.pipeline([])

    def unchecked_writes(self) -> list[Statement]:
        """The held-back writes, taken to run with the caller's statements (the commit's):
        those with a check are sent (and checked) first, on their own; the rest (the vector
        rows) need no answer and are returned."""
        if any(check is not None for _, _, check in self._deferred):
            self.flush_writes()
        out = [(sql, params) for sql, params, _ in self._deferred]
        self._deferred = []
        return out

    def reconnect(self) -> psycopg.Connection[Any] | None:
        """A new connection to send the failed round trip again on, when the transaction
        may (`PgWriteTxn`: its first round trip on a pooled connection); None here."""
        return None

    def drop_writes(self) -> None:
        """Forget the held-back writes (the transaction rolls back)."""
        self._deferred = []
        self._prefetch_held = False

    def settle_prefetch(self) -> None:
        """Before an aux read that its caches do not answer: send a held-back
        `prefetch_aux_many` (with the writes before it) so that they may — the read would
        have carried it in the same round trip."""
        if self._prefetch_held:
            self.flush_writes()

    def pipeline(self, statements: Sequence[Statement]) -> list[Any]:
        """The held-back writes, then `statements`, in one round trip; the results of
        `statements` (rows, or the row count of a statement without rows), after the
        held-back writes' checks passed."""
        deferred, self._deferred = self._deferred, []
        self._prefetch_held = False
        conn = self.conn
        if conn is None:
            used_after_end()
        todo = [(sql, params) for sql, params, _ in deferred] + list(statements)
        if not todo:
            return []

        def send(conn: psycopg.Connection[Any]) -> list[Any]:
            if len(todo) == 1:
                cursors = [conn.execute(*todo[0])]
            else:
                with conn.pipeline():
                    cursors = [conn.execute(sql, params) for sql, params in todo]
            # (a result with rows: TUPLES_OK — what `description` says, without building
            # its Column objects)
            return [cur.fetchall() if (res := cur.pgresult) is not None
                    and res.status == TUPLES_OK else cur.rowcount for cur in cursors]

        def run() -> list[Any]:
            assert conn is not None
            try:
                return send(conn)
            except psycopg.OperationalError:
                fresh = self.reconnect()        # (a pooled connection that died idle)
                if fresh is None:
                    raise
                return send(fresh)
        results = call(run, self.host.where, self.writing)
        for (_, _, check), result in zip(deferred, results):
            if check is not None:
                check(result)
        return results[len(deferred):]

    def rows(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        if not self._deferred:
            return super().rows(sql, params)
        result: list[tuple[Any, ...]] = self.pipeline([(sql, params)])[0]
        return result

    def run(self, sql: str, params: Sequence[Any]) -> int:
        if not self._deferred:
            return super().run(sql, params)
        count: int = self.pipeline([(sql, params)])[0]
        return count

    def prefetch_aux_many(self, reads: Iterable[AuxRead]) -> None:
        """`AuxTable.prefetch` of several tables at once: a statement per PREFETCH_CHUNK
        keys (and prefixes) whatever their tables, held back until the next statement (see
        the module doc); the values and last pairs go where `PgAux.get` and a reverse
        `PgAux.scan` find them, as `prefetch_aux` puts them; the first pairs under the
        optional `first_under` prefixes where a forward `PgAux.scan` finds them."""
        keys: list[tuple[str, bytes]] = []
        prefixes: list[tuple[str, bytes]] = []
        firsts: list[tuple[str, bytes]] = []
        for read in reads:
            table, tkeys, last_under = read[0], read[1], read[2]
            first_under: Iterable[bytes] = read[3] if len(read) > 3 else ()
            self.aux(table)                         # (the table name is checked)
            pending = self.aux_pending(table)
            keys += [(table, k) for k in dict.fromkeys(tkeys)
                     if 0 < len(k) <= codec.MAX_KEY and k not in pending
                     and (table, k) not in self.aux_values]
            heads = [(table, p) for p in dict.fromkeys(last_under)
                     if len(p) <= codec.MAX_KEY and (table, p) not in self.aux_last]
            low = [(table, p) for p in dict.fromkeys(first_under)
                   if len(p) <= codec.MAX_KEY and (table, p) not in self.aux_first]
            if (heads or low) and pending:
                self.flush_aux(table, hold=True)    # (the pairs read must include them)
            prefixes += heads
            firsts += low
        if not keys and not prefixes and not firsts:
            return
        if len(self.aux_last) + len(self.aux_first) + len(prefixes) + len(firsts) > LOCAL_AUX:
            self.clear_aux_heads()                  # bounded (the rest: scans)
            prefixes = prefixes[:LOCAL_AUX // 2]
            firsts = firsts[:LOCAL_AUX // 2]
        step = PREFETCH_CHUNK
        for i in range(0, max(len(keys), len(prefixes), len(firsts)), step):
            part, heads, low = keys[i:i + step], prefixes[i:i + step], firsts[i:i + step]
            params = (Texts([t for t, _ in part]), Byteas([k for _, k in part]), self.space,
                      Texts([t for t, _ in heads]), Byteas([p for _, p in heads]),
                      Byteas([codec.prefix_end(p) or _AFTER_ALL for _, p in heads]), self.space,
                      Texts([t for t, _ in low]), Byteas([p for _, p in low]),
                      Byteas([codec.prefix_end(p) or _AFTER_ALL for _, p in low]), self.space)
            # Held back like a write: it goes with the next statement (a hint read ahead).
            self.defer(_PREFETCH_MANY, params, self._prefetched(part, heads, low))
            self._prefetch_held = True

    def _prefetched(self, part: list[tuple[str, bytes]], heads: list[tuple[str, bytes]],
                    low: list[tuple[str, bytes]]) -> Check:
        """What keeps a held-back prefetch's rows — of the tables the transaction has not
        changed since it was asked for (the rows of those may be older than its own
        writes)."""
        writes = dict(self.aux_table_writes)

        def keep(rows: list[tuple[Any, ...]]) -> None:
            now = self.aux_table_writes
            stale = {t for t in now if now[t] != writes.get(t)}
            found: dict[tuple[str, bytes], bytes] = {}
            pairs: tuple[dict[tuple[str, bytes], tuple[bytes, bytes]], ...] = ({}, {})
            for kind, t, k, k2, v in rows:
                if kind == 0:
                    found[(t, bytes(k))] = bytes(v)
                else:
                    pairs[kind - 1][(t, bytes(k))] = (bytes(k2), bytes(v))
            for slot in part:
                if slot[0] not in stale and slot not in self.aux_values:
                    self.remember_aux(slot[0], slot[1], found.get(slot))
            for cache, asked, got in ((self.aux_last, heads, pairs[0]),
                                      (self.aux_first, low, pairs[1])):
                for slot in asked:
                    if slot[0] not in stale and slot not in cache:
                        cache[slot] = got.get(slot)
                        self.aux_last_lens.setdefault(slot[0], set()).add(len(slot[1]))
        return keep
