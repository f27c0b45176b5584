"""The PostgreSQL backend's write transaction (its table check: `pg_check`).

Owns what a write does to the tables: interning, id allocation from the space's meta row
(locked by `pg_store` for the whole transaction, so ids are unique across every server on
the database), creating and deleting elements, replacing maps, bulk loads through COPY, and
writing the counters and statistic deltas once, just before commit (its aux-table writes:
`pg_aux_write`). A taken (type, name)
or (subject, predicate, object) is found with `INSERT ... ON CONFLICT DO NOTHING`, so the
transaction stays usable after KIP_3003 (a failed statement would abort it in PostgreSQL).
"""
from __future__ import annotations

import logging
from collections import Counter
from types import TracebackType
from typing import Any, Iterable, Literal, Sequence

import psycopg

from nexus.errors import ErrorCode, KipError
from nexus.store import codec, pg_schema
from nexus.store.model import ConceptHead, Head, JsonMap, LinkHead, MapColumn, link_heads
from nexus.store.pg_aux_write import AUX_WRITES, PgAuxWriter
from nexus.store.pg_conn import MISSING, Byteas, Int8s, PgHost, Texts, call, internal
from nexus.store.pg_txn import MAX_ID, ST_CONCEPTS, ST_LINKS, is_id, pred_key, type_key

log = logging.getLogger(__name__)
NEW_HEADS_CAP = 50_000          # concept heads a write remembers to publish at commit
WRITE_MAPS = 100_000            # element maps a write transaction keeps (emptied when full)
DEFER_ROWS = 64                 # new links a write sends as a held-back INSERT (more: COPY)
ANALYZE_AFTER = 10_000          # rows a bulk write adds before its commit refreshes statistics

_INSERT_CONCEPT = (
    "INSERT INTO nexus_concepts (space, id, type_id, name, name_key, attributes, metadata) "
    "SELECT %s, %s, %s, %s, %s, %s, %s WHERE NOT EXISTS "
    "(SELECT 1 FROM nexus_links WHERE space = %s AND id = %s) "
    "ON CONFLICT DO NOTHING RETURNING id")
_INSERT_LINK = (
    "INSERT INTO nexus_links (space, id, subject, predicate, object, attributes, metadata) "
    "SELECT %s, %s, %s, %s, %s, %s, %s WHERE NOT EXISTS "
    "(SELECT 1 FROM nexus_concepts WHERE space = %s AND id = %s) "
    "ON CONFLICT DO NOTHING RETURNING id")
_INSERT_LINKS = (
    "INSERT INTO nexus_links (space, id, subject, predicate, object, attributes, metadata) "
    "SELECT %s, * FROM unnest(%b::bigint[], %b::bigint[], %b::bigint[], %b::bigint[], "
    "%b::bytea[], %b::bytea[]) ON CONFLICT DO NOTHING RETURNING id")
_SET_MAP = ("WITH c AS (UPDATE nexus_concepts SET {col} = %s WHERE space = %s AND id = %s "
            "RETURNING 1), l AS (UPDATE nexus_links SET {col} = %s WHERE space = %s AND "
            "id = %s RETURNING 1) SELECT (SELECT count(*) FROM c) + (SELECT count(*) FROM l)")
# set_metadata_many: which of the ids exist, then every map written in one statement.
_EXISTING = ("SELECT id FROM nexus_concepts WHERE space = %s AND id = ANY(%s) UNION ALL "
             "SELECT id FROM nexus_links WHERE space = %s AND id = ANY(%s)")
_SET_METADATA_MANY = (
    "WITH v AS (SELECT * FROM unnest(%b::bigint[], %b::bytea[]) AS v(id, m)), "
    "c AS (UPDATE nexus_concepts t SET metadata = v.m FROM v WHERE t.space = %s "
    "AND t.id = v.id RETURNING 1), l AS (UPDATE nexus_links t SET metadata = v.m FROM v "
    "WHERE t.space = %s AND t.id = v.id RETURNING 1) "
    "SELECT (SELECT count(*) FROM c) + (SELECT count(*) FROM l)")
_DELETE = ("WITH c AS (DELETE FROM nexus_concepts WHERE space = %s AND id = %s "
           "RETURNING type_id), l AS (DELETE FROM nexus_links WHERE space = %s AND id = %s "
           "RETURNING predicate, subject, object) SELECT 'c', type_id, NULL::bigint, NULL::bigint "
           "FROM c UNION ALL SELECT 'l', predicate, subject, object FROM l")
_CONCEPTS_BY_KEY = ("SELECT c.id, c.name FROM unnest(%b::bytea[]) AS q(k) JOIN LATERAL "
                    "(SELECT id, name FROM nexus_concepts WHERE space = %s AND type_id = %s "
                    "AND name_key = q.k LIMIT 1) c ON TRUE")
_FLUSH = ("WITH m AS (UPDATE nexus_meta SET max_id = %s, max_sym = %s WHERE space = %s "
          "RETURNING 1) INSERT INTO nexus_stats (space, key, n) "
          "SELECT %s, k, d FROM unnest(%b::text[], %b::bigint[]) AS t(k, d) "
          "ON CONFLICT (space, key) DO UPDATE SET n = nexus_stats.n + EXCLUDED.n")
# The commit's writes folded into _FLUSH as data-modifying CTEs (`_folded`): statements of
# these kinds only (a WITH cannot nest one that modifies).
_FOLDABLE = ("INSERT ", "DELETE ", "UPDATE ")
_AUX_WRITES = AUX_WRITES
_TAKEN = ("SELECT l.subject, l.predicate, l.object FROM nexus_links l JOIN "
          "unnest(%b::bigint[], %b::bigint[], %b::bigint[]) AS t(s, p, o) "
          "ON l.subject = t.s AND l.predicate = t.p AND l.object = t.o "
          "WHERE l.space = %s LIMIT 1")


class PgWriteTxn(PgAuxWriter):
    """WriteTxn: the space's single writer (see the module doc)."""

    writing = True
    link_maps = True        # a command reads a link it names, then writes it

    def __init__(self, host: PgHost, conn: psycopg.Connection[Any], *, pooled: bool) -> None:
        super().__init__(host, conn)
        # BEGIN and the space's lock (which reads the counters) are held back: they go
        # with the transaction's first statement (`start`). Until that round trip is
        # back, `_started` is False and the counters unknown; `_retry` may replace a
        # pooled connection that died while idle then.
        self._started = False
        self._retry = pooled
        self._serial = self._mid = self._mid0 = self._msym = self._msym0 = 0
        self.defer(pg_schema.BEGIN_WRITE, ())
        self.defer(host.lock_space, (self.space,), self._locked)
        self._dstats: Counter[str] = Counter()
        self._new_sids: dict[str, int] = {}
        self._new_stexts: dict[int, str] = {}
        self._new_concepts: dict[int, ConceptHead] = {}
        self._deleted: list[int] = []
        self._aborted = False
        self._concept_ids: dict[tuple[int, str], int | None] = {}
        # `link_id` answers remembered for the transaction (this writer holds the space's
        # lock: only its own writes change them, and they update them), and whether every
        # link it created is among them — then a triple with an end created here and not
        # among them does not exist, with no round trip (a command's new concept's links).
        self._link_ids: dict[tuple[int, int, int], int | None] = {}
        self._links_whole = True
        # The maps of elements this transaction creates are kept (the search index reads
        # them back before commit): as many as heads.
        self.maps_cap = WRITE_MAPS

    # --- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> PgWriteTxn:
        return self

    def _locked(self, rows: Any) -> None:
        """The check of the held-back lock statement: the counters it read."""
        if not rows:
            raise KipError(ErrorCode.KIP_4003, f"the space {self.space!r} has no meta row in "
                           f"{self.host.where.shown}", "Reopen the store (it creates the row).")
        serial, max_id, max_sym = (int(v) for v in rows[0][:3])
        self._serial = serial
        self._mid = self._mid0 = max_id
        self._msym = self._msym0 = max_sym
        self._started = True

    def start(self) -> None:
        """Send the held-back BEGIN and lock now (with any held-back writes) if they have
        not gone yet: what reads the counters needs them."""
        if not self._started:
            self.flush_writes()

    def reconnect(self) -> psycopg.Connection[Any] | None:
        """After the first round trip failed for the connection (see `PgPipelined`): a
        new connection in place of a pooled one that died while idle — nothing had run on
        it, so the round trip may be sent again; None otherwise (the error stands)."""
        old = self.conn
        if not self._retry or self._started or (
                old is not None and not old.closed and not old.broken):
            return None     # (a live connection's error: a lock or statement timeout)
        self._retry = False
        self.conn = None
        if old is not None:
            self.host.discard(old)
        self.conn = self.host.connect()
        return self.conn

    @property
    def serial(self) -> int:
        self.start()
        return self._serial

    @property
    def _max_id(self) -> int:
        self.start()
        return self._mid

    @_max_id.setter
    def _max_id(self, value: int) -> None:
        self._mid = value

    @property
    def _max_id0(self) -> int:
        self.start()
        return self._mid0

    @property
    def _max_sym(self) -> int:
        self.start()
        return self._msym

    @_max_sym.setter
    def _max_sym(self, value: int) -> None:
        self._msym = value

    def __exit__(self, et: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        conn, self.conn = self.conn, None
        host = self.host
        try:
            if conn is None:                    # abort() ended it already
                pass
            elif exc is not None or self._aborted:
                self.drop_writes()
                if not self._end_unused(conn):
                    host.end(conn, commit=False)
            else:
                self.conn = conn
                try:
                    self._commit(conn)
                except BaseException:
                    self.conn = None
                    host.end(conn, commit=False)
                    raise
                host.publish(self._new_sids, self._new_stexts, self._new_concepts)
                host.forget(self._deleted)
        finally:
            host.writer_done()
        if exc is not None and not isinstance(exc, KipError):
            err = self._translate(exc)
            if err is not None:
                raise err from exc
        return False

    def abort(self) -> None:
        if not self._aborted:
            self._aborted = True
            self.drop_writes()
            conn, self.conn = self.conn, None
            if conn is not None:
                if not self._end_unused(conn):
                    self.host.end(conn, commit=False)

    def _end_unused(self, conn: psycopg.Connection[Any]) -> bool:
        """Give back a connection on which the transaction never began (its BEGIN was
        still held back: nothing to roll back, no round trip); False if it began."""
        if self._started or conn.closed or conn.broken or (
                conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE):
            return False
        self.host.release(conn)
        return True

    @property
    def aborted(self) -> bool:
        return self._aborted

    def _commit(self, conn: psycopg.Connection[Any]) -> None:
        """Write the pending aux changes, the counters and statistic deltas, and COMMIT, all
        pipelined (one round trip, with the held-back writes that need no check; those that
        do are sent and checked first: `unchecked_writes`);
        the connection goes back to the pool."""
        held = self.unchecked_writes()
        writes = held + self._aux_statements(*self._aux_pending)
        stats = [(k, d) for k, d in self._dstats.items() if d]
        statements = _folded(writes, (_FLUSH, (
            self._max_id, self._max_sym, self.space, self.space,
            Texts([k for k, _ in stats]), Int8s([d for _, d in stats]))), len(held))

        def run() -> None:
            with conn.pipeline():
                for sql, params in statements:
                    conn.execute(sql, params)
                conn.execute("COMMIT")
        call(run, self.host.where, True)
        self.conn = None
        if self._bulk_rows >= ANALYZE_AFTER:
            _analyze(conn)
        self.host.release(conn)

    def commit_id(self) -> int:
        return self.serial

    def max_sym(self) -> int:
        """The highest symbol id handed out so far (package-internal: the table check)."""
        return self._max_sym

    def repair(self, drift: list[str], actual: dict[str, int], stored: dict[str, int],
               max_el: int, max_sym: int) -> int:
        """Set the drifted statistics (through the pending deltas) and raise the counters
        (package-internal: the table check). Returns the number of fixes."""
        for k in drift:
            self._dstats[k] += actual.get(k, 0) - stored.get(k, 0)
        fixes = len(drift)
        if self._max_id < max_el:
            self._max_id = max_el
            fixes += 1
        if self._max_sym < max_sym:
            self._max_sym = max_sym
            fixes += 1
        return fixes

    def max_id(self) -> int:
        return self._max_id

    def first_new_id(self) -> int:
        """The lowest id this transaction may create: an id at or above it was not in use
        when the transaction began (the search tables need not delete rows of it)."""
        return self._max_id0 + 1

    def pending_stats(self) -> dict[str, int]:
        return self._dstats

    def _bump(self, key: str, delta: int) -> None:
        self._dstats[key] += delta

    # --- symbols and ids -------------------------------------------------------------------
    def symbol_id(self, text: str) -> int | None:
        sid = self._new_sids.get(text)
        return sid if sid is not None else super().symbol_id(text)

    def symbol_text(self, sid: int) -> str:
        text = self._new_stexts.get(sid)
        return text if text is not None else super().symbol_text(sid)

    def intern(self, text: str) -> int:
        sid = self.symbol_id(text)
        if sid is None:
            utf8 = codec.encode_text(text)
            sid = self._max_sym + 1
            if not self.rows("INSERT INTO nexus_symbols (space, id, text, tkey) "
                             "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING id",
                             (self.space, sid, utf8, codec.text_key(utf8))):
                raise internal(f"symbol key collision for {text[:80]!r}")
            self._max_sym = sid
            self._new_sids[text] = sid
            self._new_stexts[sid] = text
        return sid

    def new_id(self) -> int:
        self._max_id += 1
        return self._max_id

    def reserve_ids(self, count: int) -> range:
        start = self._max_id + 1
        self._max_id += count
        return range(start, self._max_id + 1)

    def _check_id(self, n: int) -> None:
        if not is_id(n):
            raise internal(f"element ids are positive 64-bit integers, got {n!r}")
        if n > self._max_id:
            self._max_id = n

    def _remember(self, h: Head) -> None:
        self._keep(h)
        if isinstance(h, ConceptHead) and len(self._new_concepts) < NEW_HEADS_CAP:
            self._new_concepts[h.n] = h

    def concept_id(self, type_id: int, name: str) -> int | None:
        """As the read transaction's, remembered for the transaction (a command asks for its
        types' and predicates' definitions several times; this writer holds the space's
        lock, so only its own writes change the answers, and they update or drop them)."""
        key = (type_id, name)
        known = self._concept_ids.get(key, MISSING)
        if known is not MISSING:
            return known        # type: ignore[return-value]  # (int | None when found)
        n = super().concept_id(type_id, name)
        if len(self._concept_ids) >= NEW_HEADS_CAP:
            self._concept_ids.clear()
        self._concept_ids[key] = n
        return n

    def concept_ids(self, pairs: Sequence[tuple[int, str]]) -> list[int | None]:
        """As the read transaction's, through (and into) what `concept_id` remembers."""
        memo = self._concept_ids
        named = [pair for pair in pairs if type(pair[1]) is str]
        known = {pair: memo[pair] for pair in named if pair in memo}
        todo = [pair for pair in named if pair not in known]
        if todo:
            found = self._concept_ids_of(todo)
            if len(memo) + len(found) >= NEW_HEADS_CAP:
                memo.clear()
            memo.update(found)
            known.update(found)
        return [known.get(pair) if type(pair[1]) is str else None for pair in pairs]

    def link_id(self, subject: int, predicate_id: int, object: int) -> int | None:
        return self.link_ids(((subject, predicate_id, object),))[0]

    def _known_absent(self, t: tuple[int, int, int]) -> bool:
        """Whether the transaction knows, without asking, that no link holds triple `t`."""
        if t in self._link_ids:
            return self._link_ids[t] is None
        new_from = self._max_id0 if self._links_whole else MAX_ID
        return type(t[0]) is int and type(t[2]) is int and (t[0] > new_from or t[2] > new_from)

    def link_ids(self, triples: Sequence[tuple[int, int, int]]) -> list[int | None]:
        """As the read transaction's, through (and into) what the transaction remembers."""
        memo = self._link_ids
        known: dict[tuple[int, int, int], int | None] = {}
        todo = []
        new_from = self._max_id0 if self._links_whole else MAX_ID
        for t in triples:
            if t in memo:
                known[t] = memo[t]
            elif type(t[0]) is int and type(t[2]) is int and \
                    (t[0] > new_from or t[2] > new_from):
                known[t] = None         # an end created here: every such link is in memo
            else:
                todo.append(t)
        if todo:
            found = super().link_ids(todo)
            if len(memo) + len(todo) >= NEW_HEADS_CAP:
                memo.clear()
                self._links_whole = False
            for t, n in zip(todo, found):
                memo[t] = known[t] = n
        return [known[t] for t in triples]

    def _link_moved(self, old: tuple[int, int, int] | None, new: tuple[int, int, int] | None,
                    n: int) -> None:
        """Keep the remembered `link_id` answers in step: link `n` left `old`, took `new`."""
        memo = self._link_ids
        if old is not None:
            memo[old] = None
        if new is not None:
            if len(memo) >= NEW_HEADS_CAP:
                memo.clear()
                self._links_whole = False
            memo[new] = n

    # --- single-element writes -------------------------------------------------------------
    def create_concept(self, n: int, type_id: int, name: str,
                       attributes: JsonMap, metadata: JsonMap) -> None:
        a = codec.encode_map(attributes, "attributes")
        m = codec.encode_map(metadata, "metadata")
        utf8 = codec.encode_text(name)
        self._check_id(n)
        sp = self.space
        params = (sp, n, type_id, utf8, codec.text_key(utf8), a, m, sp, n)

        def check(rows: list[Any]) -> None:
            if not rows:
                if self.concept_id(type_id, name) is not None:
                    raise KipError(ErrorCode.KIP_3003,
                                   f"a concept {{type: {self.symbol_text(type_id)!r}, "
                                   f"name: {name[:200]!r}}} already exists")
                raise internal(f"element id {n} is already in use")
        if self._concept_ids.get((type_id, name), MISSING) is None and n > self._max_id0:
            self.defer(_INSERT_CONCEPT, params, check)  # (known absent, a new id: it takes)
        else:
            check(self.rows(_INSERT_CONCEPT, params))
        self._remember(ConceptHead(n, type_id, name))
        self._keep_maps(n, a, m)
        self._concept_ids[(type_id, name)] = n
        self._bump(type_key(type_id), 1)
        self._bump(ST_CONCEPTS, 1)

    def create_link(self, n: int, subject: int, predicate_id: int, object: int,
                    attributes: JsonMap, metadata: JsonMap) -> None:
        a = codec.encode_map(attributes, "attributes")
        m = codec.encode_map(metadata, "metadata")
        self._check_id(n)
        if not (is_id(subject) and is_id(object)):
            raise internal(f"link ends must be element ids, got {subject!r}, {object!r}")
        sp = self.space
        params = (sp, n, subject, predicate_id, object, a, m, sp, n)

        def check(rows: list[Any]) -> None:
            if not rows:
                if self.link_id(subject, predicate_id, object) is not None:
                    raise KipError(ErrorCode.KIP_3003,
                                   f"a proposition ({subject}, "
                                   f"{self.symbol_text(predicate_id)!r}, {object}) "
                                   f"already exists")
                raise internal(f"element id {n} is already in use")
        if n > self._max_id0 and self._known_absent((subject, predicate_id, object)):
            self.defer(_INSERT_LINK, params, check)
        else:
            check(self.rows(_INSERT_LINK, params))
        self._keep(LinkHead(n, subject, predicate_id, object))
        self._link_moved(None, (subject, predicate_id, object), n)
        self._keep_maps(n, a, m)
        self._bump(pred_key(predicate_id), 1)
        self._bump(ST_LINKS, 1)

    def set_attributes(self, n: int, attributes: JsonMap) -> None:
        self._set_map(n, codec.encode_map(attributes, "attributes"), "attributes")

    def set_metadata(self, n: int, metadata: JsonMap) -> None:
        self._set_map(n, codec.encode_map(metadata, "metadata"), "metadata")

    def bump_versions(self, ids: Sequence[int], now: str) -> list[tuple[int, str] | None]:
        """See the protocol: not patched in place here (the caller's `set_metadata_many`
        is one statement for all of them)."""
        return [None] * len(ids)

    def set_metadata_many(self, items: Sequence[tuple[int, JsonMap]]) -> None:
        """set_metadata over many elements (see the protocol): every map encoded and every id
        checked before anything is written (a missing one is KIP_3002), then one statement;
        a repeated id keeps its last map."""
        final: dict[int, bytes | None] = {}
        for n, metadata in items:
            if not is_id(n):
                raise KipError(ErrorCode.KIP_3002, f"element {n!r} does not exist")
            final[n] = codec.encode_map(metadata, "metadata")
        if not final:
            return
        ids, sp = list(final), self.space
        found = {row[0] for row in self.rows(_EXISTING, (sp, ids, sp, ids))}
        for n in ids:
            if n not in found:
                raise KipError(ErrorCode.KIP_3002, f"element {n!r} does not exist")
        self.one(_SET_METADATA_MANY, (Int8s(ids), Byteas([final[n] for n in ids]), sp, sp))
        for n in ids:
            self.maps.pop(n, None)

    def _set_map(self, n: int, value: bytes | None, col: str) -> None:
        sp = self.space

        def check(rows: list[Any] | None) -> None:
            if not rows or not rows[0][0]:
                raise KipError(ErrorCode.KIP_3002, f"element {n!r} does not exist")
        if not is_id(n):
            check(None)
        params = (value, sp, n, value, sp, n)
        if n in self.heads:     # (it exists: this writer read or made it, and holds the lock)
            self.defer(_SET_MAP.format(col=col), params, check)
        else:
            check(self.rows(_SET_MAP.format(col=col), params))
        pair = self.maps.get(n)
        if pair is not None:            # (the search index reads it back before commit)
            self.maps[n] = (value, pair[1]) if col == "attributes" else (pair[0], value)

    def delete(self, n: int) -> bool:
        if not is_id(n):
            return False
        row = self.one(_DELETE, (self.space, n, self.space, n))
        if row is None:
            return False
        kind, sym, subject, object = row
        if kind == "l":
            self._link_moved((subject, sym, object), None, n)
        if kind == "c":
            self._concept_ids.clear()
            self._bump(type_key(sym), -1)
            self._bump(ST_CONCEPTS, -1)
        else:
            self._bump(pred_key(sym), -1)
            self._bump(ST_LINKS, -1)
        self.heads.pop(n, None)
        self.maps.pop(n, None)
        self._new_concepts.pop(n, None)
        self._deleted.append(n)
        return True

    def repoint_link(self, n: int, subject: int, object: int) -> None:
        h = self.head(n)
        if not isinstance(h, LinkHead):
            raise KipError(ErrorCode.KIP_3002, f"proposition {n!r} does not exist")
        if (h.subject, h.object) == (subject, object):
            return
        p = h.predicate_id
        if self.link_id(subject, p, object) is not None:
            raise KipError(ErrorCode.KIP_3003,
                           f"a proposition ({subject}, {self.symbol_text(p)!r}, {object}) "
                           f"already exists")
        self.run("UPDATE nexus_links SET subject = %s, object = %s WHERE space = %s AND "
                 "id = %s", (subject, object, self.space, n))
        self._keep(LinkHead(n, subject, p, object))
        self._link_moved((h.subject, p, h.object), (subject, p, object), n)

    def repoint_links(self, moves: Sequence[tuple[int, int, int]],
                      heads: Sequence[LinkHead] | None = None) -> list[int | None]:
        """repoint_link for each move `(n, subject, object)`, in order (see the protocol;
        `heads` is not used: this store's `head` is served by its prefetched rows):
        the heads are read and the batch checked first, then the moves are made one
        statement each, in batch order — so a triple freed by an earlier move is free for
        a later one, and the unique (s, p, o) index never sees two holders."""
        read = link_heads(self.head, (n for n, _, _ in moves))
        if len({n for n, _, _ in moves}) != len(moves):
            raise internal("repoint_links: a link id is repeated in the batch")
        answers: list[int | None] = []
        claimed: dict[tuple[int, int, int], int] = {}     # triple -> the link now holding it
        for (n, subject, object), h in zip(moves, read):
            if (h.subject, h.object) == (subject, object):
                answers.append(None)
                continue
            triple = (subject, h.predicate_id, object)
            # The table as the earlier moves left it: a link moved away no longer holds it.
            holder = claimed.get(triple)
            if holder is None:
                holder = self.link_id(*triple)
            answers.append(holder)
            if holder is None:
                claimed[triple] = n
                self.run("UPDATE nexus_links SET subject = %s, object = %s WHERE space = %s "
                         "AND id = %s", (subject, object, self.space, n))
                self._keep(LinkHead(n, subject, h.predicate_id, object))
                self._link_moved((h.subject, h.predicate_id, h.object), triple, n)
        return answers

    # --- bulk path -------------------------------------------------------------------------
    def create_concepts(self, rows: Iterable[tuple[int, int, str, JsonMap | None,
                                                   JsonMap | None]]) -> int:
        row_list = list(rows)
        if not row_list:
            return 0
        try:
            ns, types, names, attrs, metas = map(list, zip(*row_list))
        except ValueError:
            raise internal("bulk create_concepts: rows must be (n, type_id, name, attributes, "
                           "metadata)") from None
        return self.create_concept_columns(ns, types, names, attrs, metas)

    def create_links(self, rows: Iterable[tuple[int, int, int, int, JsonMap | None,
                                                JsonMap | None]],
                     known_new: bool = False) -> int:
        row_list = list(rows)
        if not row_list:
            return 0
        try:
            ns, ss, ps, os_, attrs, metas = map(list, zip(*row_list))
        except ValueError:
            raise internal("bulk create_links: rows must be (n, subject, predicate_id, object, "
                           "attributes, metadata)") from None
        return self.create_link_columns(ns, ss, ps, os_, attrs, metas, known_new=known_new)

    def _maps(self, count: int, attributes: MapColumn | None, metadata: MapColumn | None,
              extra: JsonMap | None) -> tuple[list[bytes | None], list[bytes | None]]:
        for col in (attributes, metadata):
            if col is not None and len(col) != count:
                raise internal("bulk create: columns of different lengths")
        a: list[bytes | None] = (codec.encode_maps(attributes, "attributes")
                                 if attributes is not None else [None] * count)
        if metadata is None and not extra:
            m: list[bytes | None] = [None] * count
        else:
            m = codec.encode_maps(metadata if metadata is not None else [None] * count,
                                  "metadata", extra)
        return a, m

    def create_concept_columns(self, ids: Sequence[int], type_ids: Sequence[int],
                               names: Sequence[str],
                               attributes: MapColumn | None = None,
                               metadata: MapColumn | None = None, *,
                               extra_metadata: JsonMap | None = None) -> int:
        count = len(ids)
        if len(type_ids) != count or len(names) != count:
            raise internal("bulk create: columns of different lengths")
        if not count:
            return 0
        a, m = self._maps(count, attributes, metadata, extra_metadata)
        utf8 = [codec.encode_text(name) for name in names]
        keys = [codec.text_key(u) for u in utf8]
        for n in ids:
            self._check_id(n)
        if len(set(zip(type_ids, keys))) != count:
            raise KipError(ErrorCode.KIP_3003, "bulk create: a concept (type, name) is "
                           "repeated in the batch")
        sp = self.space
        rows = zip(repeat_(sp, count), ids, type_ids, utf8, keys, a, m)
        self._copy("COPY nexus_concepts (space, id, type_id, name, name_key, attributes, "
                   "metadata) FROM STDIN",
                   ["text", "int8", "int8", "bytea", "bytea", "bytea", "bytea"], rows,
                   KipError(ErrorCode.KIP_3003, "bulk create: a concept (type, name) already "
                            "exists"))
        memo = self._concept_ids
        if len(memo) + count >= NEW_HEADS_CAP:
            memo.clear()
        for n, t, name, a1, m1 in zip(ids, type_ids, names, a, m):
            self._remember(ConceptHead(n, t, name))
            self._keep_maps(n, a1, m1)
            memo[(t, name)] = n
        for t, k in Counter(type_ids).items():
            self._bump(type_key(t), k)
        self._bump(ST_CONCEPTS, count)
        return count

    def create_link_columns(self, ids: Sequence[int], subjects: Sequence[int],
                            predicate_ids: Sequence[int], objects: Sequence[int],
                            attributes: MapColumn | None = None,
                            metadata: MapColumn | None = None, *, known_new: bool = False,
                            extra_metadata: JsonMap | None = None) -> int:
        count = len(ids)
        if not (len(subjects) == len(predicate_ids) == len(objects) == count):
            raise internal("bulk create: columns of different lengths")
        if not count:
            return 0
        a, m = self._maps(count, attributes, metadata, extra_metadata)
        for n in ids:
            self._check_id(n)
        ss, ps, os_ = list(map(int, subjects)), list(map(int, predicate_ids)), \
            list(map(int, objects))
        triples = list(zip(ss, ps, os_))
        taken: tuple[Any, ...] | None = None
        if len(set(triples)) != count:
            seen: set[tuple[int, int, int]] = set()
            for t in triples:
                if t in seen:
                    taken = t
                    break
                seen.add(t)
        if taken is None and not known_new:
            taken = self.one(_TAKEN, (Int8s(ss), Int8s(ps), Int8s(os_), self.space))
        if taken is not None:
            s, p, o = taken
            raise KipError(ErrorCode.KIP_3003,
                           f"a proposition ({s}, {self.symbol_text(p)!r}, {o}) is repeated "
                           f"in the batch or already exists")
        sp = self.space
        repeated = KipError(ErrorCode.KIP_3003, "bulk create: a proposition (subject, "
                            "predicate, object) already exists")
        nids = list(map(int, ids))
        if count <= DEFER_ROWS and min(nids) > self._max_id0 and (
                known_new or all(map(self._known_absent, triples))):
            # A command's few new links: one INSERT, held back (pg_pipeline), not a COPY.
            def check(rows: list[Any]) -> None:
                if len(rows) != count:
                    raise repeated
            self.defer(_INSERT_LINKS, (sp, Int8s(nids), Int8s(ss), Int8s(ps), Int8s(os_),
                                       Byteas(a), Byteas(m)), check)
        else:
            self._copy("COPY nexus_links (space, id, subject, predicate, object, attributes, "
                       "metadata) FROM STDIN",
                       ["text", "int8", "int8", "int8", "int8", "bytea", "bytea"],
                       zip(repeat_(sp, count), nids, ss, ps, os_, a, m), repeated)
        keep, keep_maps = self._keep, self._keep_maps
        memo = self._link_ids
        if len(memo) + count >= NEW_HEADS_CAP:
            memo.clear()
            self._links_whole = False
        # The memo learns every triple written (it stays whole: a link with an end created
        # in this transaction is still known to be absent unless it is in the memo).
        for n, s1, p1, o1, a1, m1 in zip(ids, ss, ps, os_, a, m):
            keep(LinkHead(int(n), s1, p1, o1))
            keep_maps(int(n), a1, m1)
            if len(memo) < NEW_HEADS_CAP:     # (always, while the memo is whole)
                memo[(s1, p1, o1)] = int(n)
        for p, k in Counter(ps).items():
            self._bump(pred_key(p), k)
        self._bump(ST_LINKS, count)
        return count

    def _copy(self, sql: str, types: list[str], rows: Iterable[tuple[Any, ...]],
              duplicate: KipError) -> None:
        """COPY the rows in; a duplicate key is `duplicate` (KIP_4003 when it is the id: an
        element id in use); the transaction must then abort (PostgreSQL aborted it). Text
        format: the binary one measured no cheaper here, client or server (bench.pg
        --load-only), and text COPY is what every PostgreSQL-compatible store takes."""
        self.flush_writes()
        conn = self.conn
        if conn is None:
            internal("the transaction has ended")

        def run() -> None:
            assert conn is not None
            with conn.cursor() as cur, cur.copy(sql) as copy:
                copy.set_types(types)
                for row in rows:
                    copy.write_row(row)
                    self._bulk_rows += 1
        try:
            run()
        except psycopg.errors.UniqueViolation as exc:
            if (exc.diag.constraint_name or "").endswith("_pkey"):
                raise internal("bulk create: an element id is in use") from None
            raise duplicate from None
        except psycopg.Error as exc:
            raise self._translate(exc) or internal(str(exc)) from None


def _analyze(conn: psycopg.Connection[Any]) -> None:
    """Refresh the planner's statistics after a bulk write (autovacuum would, a minute or
    so later; until then the planner takes the grown tables for empty and may scan a whole
    space's aux rows for one key). Best effort: a database that refuses it stays as it was."""
    try:
        conn.execute("ANALYZE nexus_concepts, nexus_links, nexus_aux")
    except psycopg.Error:
        log.warning("ANALYZE after a bulk write failed", exc_info=True)


def repeat_(value: Any, count: int) -> list[Any]:
    return [value] * count


def _folded(writes: list[tuple[str, Any]], flush: tuple[str, Any], held: int
            ) -> list[tuple[str, Any]]:
    """The commit's statements: `writes` (the vector rows, the aux upserts and deletes) and
    `flush` (the counters and statistics, a WITH statement) as one statement, each write a
    data-modifying CTE of it — one statement to plan, bind and send instead of several.
    Safe because no two of them touch the same row (a statement must not modify a row
    twice): the aux puts and deletes are of different keys (one pending value per key),
    the vector upserts and deletes of different (id, slot) rows (a delete takes the slots
    at and above the ones the upsert writes), the counters and statistics other tables.
    A write of another shape keeps its own statement, and so does each write when the
    first `held` (the held-back ones) include aux writes, which the commit's own aux
    statements might write again."""
    sql, params = flush
    if not writes or not all(w[0].startswith(_FOLDABLE) for w in writes) or any(
            w[0] in _AUX_WRITES for w in writes[:held]):
        return [*writes, flush]
    ctes = ", ".join(f"w{i} AS ({w[0]})" for i, w in enumerate(writes))
    folded = [p for w in writes for p in w[1]]
    return [(f"WITH {ctes}, {sql[len('WITH '):]}", (*folded, *params))]
