"""The PostgreSQL write transaction's aux-table writes (`PgAuxWriter`, a base of
`pg_write.PgWriteTxn`).

Owns how changes to `nexus_aux` reach the database: puts and deletes are held back in the
transaction (`pend_aux`, `aux_put_many`) and written in batches — one upsert per
COPY_CHUNK pairs and one delete, riding in the transaction's pipeline — before a scan or
count of the table, when many are pending, and at commit; keys the caller knows are new
(a bulk load's documents) go in by one binary COPY (`aux_put_new`).
"""
from __future__ import annotations

import struct
from bisect import bisect_left
from typing import Any, Iterable

import psycopg

from nexus.store import codec
from nexus.store.pg_aux import LOCAL_AUX, PgAux, PgWriteAux
from nexus.store.pg_conn import Byteas, Texts, internal
from nexus.store.pg_pipeline import PgPipelined
from nexus.store.pg_txn import used_after_end

COPY_CHUNK = 20_000             # aux entries per upsert statement (and kept pending at most)
_AUX_MANY = ("INSERT INTO nexus_aux (space, tbl, k, v) SELECT %s, t, k, v FROM "
             "unnest(%b::text[], %b::bytea[], %b::bytea[]) AS x(t, k, v) "
             "ON CONFLICT (space, tbl, k) DO UPDATE SET v = EXCLUDED.v")
_BYTES = {bytes}
_AUX_COPY_BINARY = "COPY nexus_aux (space, tbl, k, v) FROM STDIN (FORMAT BINARY)"
# COPY's binary format: the signature, flags and header extension length, each row's field
# count (4) and each field's byte length, and the end marker.
_BINARY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
_BINARY_TRAILER = b"\xff\xff"
_FIELDS = struct.pack(">h", 4)
_U32 = struct.Struct(">i").pack
COPY_NEW_MIN = 1_000             # `aux_put_new`: fewer new keys go by upsert (in a pipeline)
_AUX_DELETE = ("DELETE FROM nexus_aux a USING unnest(%b::text[], %b::bytea[]) AS x(t, k) "
               "WHERE a.space = %s AND a.tbl = x.t AND a.k = x.k")
AUX_WRITES = frozenset((_AUX_MANY, _AUX_DELETE))     # (pg_write: the commit's folding)


class PgAuxWriter(PgPipelined):
    """The aux writes of the write transaction (see the module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._aux_pending: dict[str, dict[bytes, bytes | None]] = {}
        self._aux_count = 0
        self._bulk_rows = 0             # rows written by COPY and batched aux upserts

    def aux(self, table: str) -> PgAux:
        base = super().aux(table)
        return PgWriteAux(self, base.table)

    def pend_aux(self, table: str, key: bytes, value: bytes | None) -> None:
        """Change an aux entry in this transaction (None: delete); written by `flush_aux`."""
        if self.conn is None:
            used_after_end()
        self._aux_pending.setdefault(table, {})[key] = value
        self.aux_writes += 1
        self.aux_table_writes[table] = self.aux_table_writes.get(table, 0) + 1
        self.remember_aux(table, key, value)
        self.note_aux_write(table, key, value)
        self._aux_count += 1
        if self._aux_count >= COPY_CHUNK:
            self._write_aux(self._aux_statements(*self._aux_pending))

    def aux_pending(self, table: str) -> dict[bytes, bytes | None]:
        return self._aux_pending.get(table, {})

    def flush_aux(self, table: str, hold: bool = False) -> None:
        """Write the table's pending changes now; with `hold`, held back instead (a caller
        about to read the table: they go in that read's round trip, before it)."""
        statements = self._aux_statements(table)
        if not hold:
            self._write_aux(statements)
            return
        for sql, params in statements:
            self.defer(sql, params)

    def _write_aux(self, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
        """Run `_aux_statements` (with any held-back writes: one round trip)."""
        if statements:
            self.pipeline(statements)

    def _aux_statements(self, *tables: str) -> list[tuple[str, tuple[Any, ...]]]:
        """The statements writing the tables' pending changes (taken off the pending): the
        puts of all of them in one upsert per COPY_CHUNK, the deletes in one statement."""
        puts: list[tuple[str, bytes, bytes]] = []
        gone: list[tuple[str, bytes]] = []
        for table in tables:
            pending = self._aux_pending.pop(table, None)
            if not pending:
                continue
            self._aux_count -= len(pending)
            for k, v in pending.items():
                if v is None:
                    gone.append((table, k))
                else:
                    puts.append((table, k, v))
        puts.sort()
        self._bulk_rows += len(puts)
        out: list[tuple[str, tuple[Any, ...]]] = []
        for i in range(0, len(puts), COPY_CHUNK):
            part = puts[i:i + COPY_CHUNK]
            out.append((_AUX_MANY, (self.space, Texts([t for t, _, _ in part]),
                                    Byteas([k for _, k, _ in part]),
                                    Byteas([v for _, _, v in part]))))
        if gone:
            out.append((_AUX_DELETE, (Texts([t for t, _ in gone]), Byteas([k for _, k in gone]),
                                      self.space)))
        return out

    def aux_put_many(self, table: str, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        self.aux(table)                         # the table name is checked
        items = dict(pairs)
        if not items:
            return
        # Checked (and copied to bytes) with C-level loops when they are all bytes already,
        # as a bulk load's hundreds of thousands of index keys are.
        if set(map(type, items)) == _BYTES and set(map(type, items.values())) == _BYTES:
            if min(map(len, items)) < 1 or max(map(len, items)) > codec.MAX_KEY:
                raise internal(f"aux key must be 1..{codec.MAX_KEY} bytes")
        else:
            for k in items:
                if not isinstance(k, (bytes, bytearray)) or not k or len(k) > codec.MAX_KEY:
                    raise internal(f"aux key must be 1..{codec.MAX_KEY} bytes")
            items = {bytes(k): bytes(v) for k, v in items.items()}
        if self.conn is None:
            used_after_end()
        # pend_aux for each, without a call per pair (a bulk load's name and forward keys)
        self._aux_pending.setdefault(table, {}).update(items)
        self._aux_count += len(items)
        self.aux_writes += 1
        self.aux_table_writes[table] = self.aux_table_writes.get(table, 0) + 1
        values = self.aux_values
        if len(values) + len(items) < LOCAL_AUX:
            values.update(((table, k), v) for k, v in items.items())
        else:
            # Not kept (a bulk load's name and forward keys are not read again: the
            # pending map, then the database, answers for them), and an older value kept
            # for one of them dropped. Emptying the cache instead threw away what the
            # caller had just prefetched (a load's document counts): each then cost a
            # statement of its own (48,709 of a 120k-item load's 48,854).
            for k in items:
                values.pop((table, k), None)
        if self.aux_last_lens.get(table):
            # Only the keys that may fall under a prefix whose last pair is cached (the
            # first byte of one): a load's name and forward keys never do, and a check of
            # every cached prefix length for each of them was a tenth of its flush.
            firsts = {p[:1] for t, p in (*self.aux_last, *self.aux_first) if t == table}
            note = self.note_aux_write
            if b"" in firsts:
                for k, v in items.items():
                    note(table, k, v)
            elif firsts:
                for k, v in items.items():
                    if k[:1] in firsts:
                        note(table, k, v)
        if self._aux_count >= COPY_CHUNK:
            self._write_aux(self._aux_statements(*self._aux_pending))

    def aux_put_new(self, table: str, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        """`aux_put_many` of keys the caller knows have no row (a bulk load's new
        documents: their forward entries, name keys, and the posting lists and document
        counts of terms that had none), written at once by one binary COPY instead of an upsert
        (~2.5x less server CPU a row, and no array parameters to build on the client). A
        key that is pending in this transaction, or a call with few keys (a command's:
        the upsert rides in its pipeline), goes through `aux_put_many`. A key that has a
        row after all is a broken promise of the caller: KIP_5001 (internal), the
        transaction aborted."""
        self.aux(table)                         # the table name is checked
        items = dict(pairs)
        pending = self._aux_pending.get(table)
        if len(items) < COPY_NEW_MIN or (pending and not pending.keys().isdisjoint(items)):
            self.aux_put_many(table, items.items())
            return
        if set(map(type, items)) != _BYTES or set(map(type, items.values())) != _BYTES \
                or min(map(len, items)) < 1 or max(map(len, items)) > codec.MAX_KEY:
            raise internal(f"aux key must be 1..{codec.MAX_KEY} bytes (and values bytes)")
        self.flush_writes()
        conn = self.conn
        if conn is None:
            used_after_end()
        self.aux_writes += 1
        values = self.aux_values
        keys = sorted(items)                    # (in key order: the index is appended to)
        if len(values) + len(items) < LOCAL_AUX:
            values.update(((table, k), v) for k, v in items.items())
        elif values:                            # (as `aux_put_many`)
            for key in [(table, k) for k in keys] if len(items) < len(values) else \
                    [key for key in values if key[0] == table and key[1] in items]:
                values.pop(key, None)
        lens = self.aux_last_lens.get(table)
        if lens:
            _note_new(self.aux_last, self.aux_first, table, keys, items)
        # The rows in COPY's binary format, spelled here: each a field count, then each
        # field's length and bytes — the space and table the same prefix for every row,
        # key and value their raw bytes (the text format's hex doubled them, and the
        # server's decoding of it was ~20% of its CPU for this COPY; the client's cost is
        # the same either way). In key order: the index is appended to.
        prefix = (_FIELDS + _U32(len(space := self.space.encode())) + space
                  + _U32(len(tbl := table.encode())) + tbl)

        def run() -> None:
            assert conn is not None
            with conn.cursor() as cur, cur.copy(_AUX_COPY_BINARY) as copy:
                copy.write(_BINARY_HEADER)
                for i in range(0, len(keys), COPY_CHUNK):
                    parts: list[bytes] = []
                    add = parts.extend
                    for k in keys[i:i + COPY_CHUNK]:
                        v = items[k]
                        add((prefix, _U32(len(k)), k, _U32(len(v)), v))
                    copy.write(b"".join(parts))
                copy.write(_BINARY_TRAILER)
        try:
            run()
        except psycopg.Error as exc:
            raise self._translate(exc) or internal(str(exc)) from None
        self._bulk_rows += len(items)



def _note_new(last: dict[tuple[str, bytes], tuple[bytes, bytes] | None],
              first: dict[tuple[str, bytes], tuple[bytes, bytes] | None], table: str,
              keys: list[bytes], items: dict[bytes, bytes]) -> None:
    """`note_aux_write` of the puts of `keys` (sorted; values in `items`) at once: only the
    greatest and the least of them under a cached prefix can become its last or first
    pair, found by bisection per cached prefix of `table` — not a call per key and per
    cached prefix length (a bulk load puts hundreds of thousands of keys)."""
    count = len(keys)
    for cache, greatest in ((last, True), (first, False)):
        for (t, p), cur in [(slot, cur) for slot, cur in cache.items() if slot[0] == table]:
            lo = bisect_left(keys, p)
            if lo == count or not keys[lo].startswith(p):
                continue                        # (none of the keys under it)
            if greatest:
                end = codec.prefix_end(p)
                k = keys[(bisect_left(keys, end, lo) if end else count) - 1]
                if cur is None or k >= cur[0]:
                    cache[(t, p)] = (k, items[k])
            else:
                k = keys[lo]
                if cur is None or k <= cur[0]:
                    cache[(t, p)] = (k, items[k])
