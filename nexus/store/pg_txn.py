"""The PostgreSQL backend's transactions: every protocol call as (at most) one SQL statement.

Owns the SQL of reading (`PgReadTxn`); writing is `pg_write`'s (`PgWriteTxn`), the aux
tables as a transaction sees them `pg_aux`'s, the table check `pg_check`'s. The lifecycle around them (connections, BEGIN/COMMIT, the
writer's row lock, error translation) is `pg_store`'s; the tables are `pg_schema`'s.

Scans are keyset-paged (`pg_store.pages`): a caller that stops after the first rows pays
one small query, a full scan a few large ones, and memory stays bounded. Link heads read
by a scan (a scan row is the whole head) are kept in the transaction, so `known_head` on
them costs no round trip; concept heads are also cached per store once committed.
"""
from __future__ import annotations

from types import TracebackType
from typing import Any, Iterable, Iterator, Literal, NoReturn, Sequence

import psycopg

from nexus.errors import KipError
from nexus.store import codec
from nexus.store.model import ConceptHead, Head, JsonMap, LinkHead
from nexus.store.pattern import Matcher, Pattern
from nexus.store.pg_cancel import WATCHDOG
from nexus.store.pg_aux import PREFETCH_CHUNK, PgAux, PgAuxCache
from nexus.store.pg_conn import Byteas, Int8s, PgHost, call, internal, pages, translate
from nexus.store.pg_match import WANT_WIDTH, compile_pattern
from nexus.store.protocol import AUX_TABLES

MAX_ID = (1 << 63) - 1
LOCAL_HEADS = 100_000           # heads a transaction keeps (emptied when full)
ST_CONCEPTS, ST_LINKS = "concepts", "links"

# An element's head and both its maps, in one round trip (head() keeps the maps for the
# attributes()/metadata() calls that usually follow).
_HEAD = ("SELECT type_id, name, NULL::bigint, NULL::bigint, NULL::bigint, attributes, "
         "metadata FROM nexus_concepts WHERE space = %s AND id = %s UNION ALL "
         "SELECT NULL, NULL, subject, predicate, object, attributes, metadata FROM nexus_links "
         "WHERE space = %s AND id = %s")
_MAPS = ("SELECT attributes, metadata FROM nexus_concepts WHERE space = %s AND id = %s "
         "UNION ALL SELECT attributes, metadata FROM nexus_links WHERE space = %s AND id = %s")
# The batched reads (protocol: "batched reads"): one statement for a chunk of ids.
_HEADS = ("SELECT id, type_id, name, NULL::bigint, NULL::bigint, NULL::bigint "
          "FROM nexus_concepts WHERE space = %s AND id = ANY(%b::bigint[]) UNION ALL "
          "SELECT id, NULL, NULL, subject, predicate, object FROM nexus_links "
          "WHERE space = %s AND id = ANY(%b::bigint[])")
_MAPS_OF = ("SELECT id, attributes, metadata FROM nexus_concepts WHERE space = %s AND "
            "id = ANY(%b::bigint[]) UNION ALL SELECT id, attributes, metadata FROM nexus_links "
            "WHERE space = %s AND id = ANY(%b::bigint[])")
_LINK_IDS = ("SELECT l.subject, l.predicate, l.object, l.id FROM nexus_links l JOIN "
             "unnest(%b::bigint[], %b::bigint[], %b::bigint[]) AS t(s, p, o) ON "
             "l.subject = t.s AND l.predicate = t.p AND l.object = t.o WHERE l.space = %s")
_LINK_IDS_MAPS = _LINK_IDS.replace("l.id FROM", "l.id, l.attributes, l.metadata FROM")
# concept_ids: `{type, name}` pairs, a probe of the (space, type_id, name_key) key each.
_CONCEPT_IDS = ("SELECT q.t, c.id, c.name, c.attributes, c.metadata FROM "
                "unnest(%b::bigint[], %b::bytea[]) AS q(t, k) JOIN LATERAL (SELECT id, name, "
                "attributes, metadata FROM nexus_concepts WHERE space = %s AND type_id = q.t "
                "AND name_key = q.k LIMIT 1) c ON TRUE")
BATCH_IDS = 10_000              # ids per statement of a batched read
LOCAL_MAPS = 4096               # elements whose maps a transaction keeps (emptied when full)
# prefetch_elements: the heads and maps of many elements, a primary-key probe each.
_PREFETCH_HEADS = (
    "SELECT q.n, c.type_id, c.name, NULL::bigint, NULL::bigint, NULL::bigint, c.attributes, "
    "c.metadata FROM unnest(%b::bigint[]) AS q(n) JOIN LATERAL (SELECT * FROM nexus_concepts "
    "WHERE space = %s AND id = q.n LIMIT 1) c ON TRUE UNION ALL "
    "SELECT q.n, NULL, NULL, l.subject, l.predicate, l.object, l.attributes, l.metadata "
    "FROM unnest(%b::bigint[]) AS q(n) JOIN LATERAL (SELECT * FROM nexus_links "
    "WHERE space = %s AND id = q.n LIMIT 1) l ON TRUE")


def is_id(n: object) -> bool:
    return type(n) is int and 0 < n <= MAX_ID


def _is_sid(n: object) -> bool:
    return type(n) is int and 0 <= n <= MAX_ID


def used_after_end(*args: object, **kwargs: object) -> NoReturn:
    raise internal("the transaction has ended (committed or aborted); it cannot be used "
                   "any more")


def type_key(t: int) -> str:
    return f"t:{t}"


def pred_key(p: int) -> str:
    return f"p:{p}"


class PgReadTxn(PgAuxCache):
    """ReadTxn over one REPEATABLE READ snapshot; also its own context manager."""

    writing = False
    link_maps = False       # link_ids also reads (and keeps) the links' maps

    def __init__(self, host: PgHost, conn: psycopg.Connection[Any]) -> None:
        super().__init__()
        self.host = host
        self.conn: psycopg.Connection[Any] | None = conn
        self.space = host.space
        self.heads: dict[int, Head] = {}
        # The raw maps (attributes, metadata) of elements read in this snapshot (the aux
        # values read: `PgAuxCache`). Write transactions keep them in step with their own
        # writes.
        self.maps: dict[int, tuple[bytes | None, bytes | None]] = {}
        self.maps_cap = LOCAL_MAPS

    # --- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> PgReadTxn:
        return self

    def __exit__(self, et: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                self.host.end(conn, commit=False)
            except Exception as end_exc:  # noqa: BLE001 - e.g. the connection died
                if exc is None:
                    raise (self._translate(end_exc) or internal(str(end_exc))) from None
        if exc is not None and not isinstance(exc, KipError):
            err = self._translate(exc)
            if err is not None:
                raise err from exc
        return False

    def _translate(self, exc: BaseException) -> KipError | None:
        """The KipError for a database exception (None for any other)."""
        return translate(exc, self.host.where, writing=self.writing)

    def rows(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """All rows of one statement (KipError on any failure)."""
        conn = self.conn
        if conn is None:
            used_after_end()
        return call(lambda: conn.execute(sql, params).fetchall(), self.host.where,
                    self.writing)

    def run(self, sql: str, params: Sequence[Any]) -> int:
        """Execute one statement that returns no rows; its row count."""
        conn = self.conn
        if conn is None:
            used_after_end()
        return call(lambda: conn.execute(sql, params).rowcount, self.host.where, self.writing)

    def one(self, sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
        rows = self.rows(sql, params)
        return rows[0] if rows else None

    def paged(self, select: str, where: str, order: Sequence[str], params: Sequence[Any]
              ) -> Iterator[tuple[Any, ...]]:
        """Rows of `SELECT select FROM ... WHERE where ORDER BY order`, keyset-paged on the
        order columns (which the select lists first, in that order)."""
        cols = ", ".join(order)
        marks = ", ".join(["%s"] * len(order))
        first = f"SELECT {select} WHERE {where} ORDER BY {cols} LIMIT %s"
        later = (f"SELECT {select} WHERE {where} AND ({cols}) > ({marks}) "
                 f"ORDER BY {cols} LIMIT %s")
        k = len(order)

        def fetch(after: tuple[Any, ...] | None, limit: int) -> list[tuple[Any, ...]]:
            if after is None:
                return self.rows(first, (*params, limit))
            return self.rows(later, (*params, *after, limit))
        return pages(fetch, lambda row: tuple(row[:k]))

    def _keep(self, h: Head) -> None:
        heads = self.heads
        if len(heads) >= LOCAL_HEADS:
            heads.clear()
        heads[h.n] = h

    # --- symbols -------------------------------------------------------------------------
    def symbol_id(self, text: str) -> int | None:
        sid = self.host.symbol_ids.get(text)
        if sid is not None:
            return sid
        try:
            utf8 = codec.encode_text(text)
        except KipError:
            return None
        row = self.one("SELECT id, text FROM nexus_symbols WHERE space = %s AND tkey = %s",
                       (self.space, codec.text_key(utf8)))
        if row is None or bytes(row[1]) != utf8:
            return None
        self.host.symbol_ids[text] = row[0]
        return int(row[0])

    def symbol_text(self, sid: int) -> str:
        text = self.host.symbol_texts.get(sid)
        if text is not None:
            return text
        row = (self.one("SELECT text FROM nexus_symbols WHERE space = %s AND id = %s",
                        (self.space, sid)) if _is_sid(sid) else None)
        if row is None:
            raise internal(f"unknown symbol id {sid!r}")
        text = bytes(row[0]).decode()
        self.host.symbol_texts[sid] = text
        return text

    # --- elements ------------------------------------------------------------------------
    def head(self, n: int) -> Head | None:
        h = self.heads.get(n)
        if h is not None:
            return h
        if not is_id(n):
            return None
        row = self.one(_HEAD, (self.space, n, self.space, n))
        if row is None:
            return None
        self._keep_maps(n, row[5], row[6])
        if row[1] is not None:
            h = ConceptHead(n, row[0], bytes(row[1]).decode())
        else:
            h = LinkHead(n, row[2], row[3], row[4])
        self._keep(h)
        return h

    def prefetch_elements(self, ids: Iterable[int], ends: bool = True) -> None:
        """Read the heads and maps of the elements `ids` not known yet (and, with `ends`,
        the heads of their links' ends) at once, a statement per PREFETCH_CHUNK: a hint
        for a caller about to read them one by one (the vector indexer), whose `head` and
        `attributes` then need no round trip."""
        want: list[int] = []
        link_ends: list[int] = []
        heads = self.heads
        for n in dict.fromkeys(ids):
            h = heads.get(n)
            if h is None:
                if is_id(n):
                    want.append(n)
            elif ends and type(h) is LinkHead:
                link_ends += (h.subject, h.object)
        for i in range(0, len(want), PREFETCH_CHUNK):
            part = want[i:i + PREFETCH_CHUNK]
            for n, t, name, s, p, o, a, m in self.rows(
                    _PREFETCH_HEADS, (Int8s(part), self.space, Int8s(part), self.space)):
                self._keep_maps(n, a, m)
                if name is not None:
                    self._keep(ConceptHead(n, t, bytes(name).decode()))
                else:
                    self._keep(LinkHead(n, s, p, o))
                    link_ends += (s, o)
        if ends and link_ends:
            self.prefetch_elements(link_ends, ends=False)

    def known_head(self, n: int) -> Head:
        h = self.heads.get(n) or self.host.concept_heads.get(n)
        if h is not None:
            return h
        h = self.head(n)
        if h is None:
            raise internal(f"element {n} does not exist in this snapshot")
        if isinstance(h, ConceptHead) and not self.writing:
            self.host.cache_heads({n: h})
        return h

    def _keep_maps(self, n: int, a: Any, m: Any) -> None:
        maps = self.maps
        if len(maps) >= self.maps_cap:
            maps.clear()
        maps[n] = (None if a is None else bytes(a), None if m is None else bytes(m))

    def _map(self, n: int, which: int) -> JsonMap:
        if not is_id(n):
            return {}
        pair = self.maps.get(n)
        if pair is None:
            row = self.one(_MAPS, (self.space, n, self.space, n))
            if row is None:
                return {}
            self._keep_maps(n, row[0], row[1])
            pair = self.maps[n]
        raw = pair[which]
        return {} if raw is None else codec.decode_map(raw)

    def attributes(self, n: int) -> JsonMap:
        return self._map(n, 0)

    def metadata(self, n: int) -> JsonMap:
        return self._map(n, 1)

    def max_id(self) -> int:
        row = self.one("SELECT max_id FROM nexus_meta WHERE space = %s", (self.space,))
        return 0 if row is None else int(row[0])

    def elements(self) -> Iterator[int]:
        select = ("id FROM (SELECT id FROM nexus_concepts WHERE space = %s UNION ALL "
                  "SELECT id FROM nexus_links WHERE space = %s) e")
        return (r[0] for r in self.paged(select, "TRUE", ["id"], (self.space, self.space)))

    # --- batched reads (one statement per BATCH_IDS ids) ---------------------------------
    def prefers_batches(self) -> bool:
        return True

    def known_heads(self, ns: Sequence[int]) -> list[Head]:
        heads, shared = self.heads, self.host.concept_heads
        found: dict[int, Head] = {}
        for n in ns:
            h = heads.get(n) or shared.get(n)
            if h is not None:
                found[n] = h
        missing = [n for n in dict.fromkeys(ns) if n not in found and is_id(n)]
        fresh: dict[int, ConceptHead] = {}
        for part in _chunks(missing):
            for n, t, name, s, p, o in self.rows(_HEADS, (self.space, Int8s(part), self.space,
                                                          Int8s(part))):
                if name is not None:
                    h = fresh[n] = ConceptHead(n, t, bytes(name).decode())
                else:
                    h = LinkHead(n, s, p, o)
                found[n] = h
                self._keep(h)
        if fresh and not self.writing:
            self.host.cache_heads(fresh)
        out = []
        for n in ns:
            h = found.get(n)
            if h is None:
                raise internal(f"element {n!r} does not exist in this snapshot")
            out.append(h)
        return out

    def _maps_of(self, ns: Sequence[int], which: int) -> list[JsonMap]:
        maps = self.maps
        raw: dict[int, bytes | None] = {}
        missing = []
        for n in ns:
            pair = maps.get(n)
            if pair is not None:
                raw[n] = pair[which]
            elif n not in raw and is_id(n):
                raw[n] = None
                missing.append(n)
        for part in _chunks(missing):
            for n, a, m in self.rows(_MAPS_OF, (self.space, Int8s(part), self.space,
                                                Int8s(part))):
                self._keep_maps(n, a, m)
                value = a if which == 0 else m
                raw[n] = None if value is None else bytes(value)
        decode = codec.decode_map
        return [{} if (v := raw.get(n)) is None else decode(v) for n in ns]

    def attributes_of(self, ns: Sequence[int]) -> list[JsonMap]:
        return self._maps_of(ns, 0)

    def metadata_of(self, ns: Sequence[int]) -> list[JsonMap]:
        return self._maps_of(ns, 1)

    def link_ids(self, triples: Sequence[tuple[int, int, int]]) -> list[int | None]:
        wanted = list(dict.fromkeys(t for t in triples if is_id(t[0]) and _is_sid(t[1])
                                    and is_id(t[2])))
        found: dict[tuple[int, int, int], int] = {}
        maps = self.link_maps
        sql = _LINK_IDS_MAPS if maps else _LINK_IDS
        for start in range(0, len(wanted), BATCH_IDS):
            part = wanted[start:start + BATCH_IDS]
            cols = (Int8s([t[0] for t in part]), Int8s([t[1] for t in part]),
                    Int8s([t[2] for t in part]))
            for row in self.rows(sql, (*cols, self.space)):
                s, p, o, n = row[:4]
                found[(s, p, o)] = n
                self._keep(LinkHead(n, s, p, o))
                if maps:
                    self._keep_maps(n, row[4], row[5])
        return [found.get(t) for t in triples]

    def concept_ids(self, pairs: Sequence[tuple[int, str]]) -> list[int | None]:
        found = self._concept_ids_of(pairs)
        return [found.get(pair) if type(pair[1]) is str else None for pair in pairs]

    def _concept_ids_of(self, pairs: Iterable[tuple[int, str]]
                        ) -> dict[tuple[int, str], int | None]:
        """The concepts `{type_id, name}` of `pairs` (valid ones; absent: None), a
        statement per BATCH_IDS pairs; their heads and maps kept, as `concept_id` does."""
        wanted: dict[tuple[int, bytes], tuple[int, str]] = {}
        for t, name in pairs:
            if not _is_sid(t) or type(name) is not str:
                continue
            try:
                utf8 = codec.encode_text(name)
            except KipError:
                continue
            wanted[(t, codec.text_key(utf8))] = (t, name)
        found: dict[tuple[int, str], int | None] = dict.fromkeys(wanted.values())
        keys = list(wanted)
        for start in range(0, len(keys), BATCH_IDS):
            part = keys[start:start + BATCH_IDS]
            rows = self.rows(_CONCEPT_IDS, (Int8s([t for t, _ in part]),
                                            Byteas([k for _, k in part]), self.space))
            by_name = {(t, bytes(name)): (n, a, m) for t, n, name, a, m in rows}
            for t, k in part:
                pair = wanted[(t, k)]
                hit = by_name.get((t, codec.encode_text(pair[1])))
                if hit is not None:
                    n, a, m = hit
                    found[pair] = n
                    self._keep(ConceptHead(n, t, pair[1]))
                    self._keep_maps(n, a, m)
        return found

    def out_links_of(self, subjects: Sequence[int], predicate_id: int | None = None
                     ) -> dict[int, list[tuple[int, int, int]]]:
        return self._ends_of(subjects, predicate_id, "subject", "object", out=True)

    def in_links_of(self, objects: Sequence[int], predicate_id: int | None = None
                    ) -> dict[int, list[tuple[int, int, int]]]:
        return self._ends_of(objects, predicate_id, "object", "subject", out=False)

    def _ends_of(self, ns: Sequence[int], p: int | None, end: str, other: str, out: bool
                 ) -> dict[int, list[tuple[int, int, int]]]:
        result: dict[int, list[tuple[int, int, int]]] = {}
        if p is not None and not _is_sid(p):
            return result
        wanted = sorted({n for n in ns if is_id(n)})
        where = f"space = %s AND {end} = ANY(%b::bigint[])"
        if p is not None:
            where += " AND predicate = %s"
        sql = (f"SELECT {end}, predicate, {other}, id FROM nexus_links WHERE {where} "
               f"ORDER BY {end}, predicate, {other}, id")
        keep = self._keep
        for part in _chunks(wanted):
            ids = Int8s(part)
            params: tuple[Any, ...] = (self.space, ids) if p is None else (self.space, ids, p)
            for n, q, m, k in self.rows(sql, params):
                keep(LinkHead(k, n, q, m) if out else LinkHead(k, m, q, n))
                found = result.get(n)
                if found is None:
                    found = result[n] = []
                found.append((q, m, k))
        return result

    # --- a pattern group as one statement (nexus.store.pattern) ---------------------------
    def pattern_matcher(self) -> Matcher | None:
        """`match_pattern` in a read transaction; None in a write transaction (its own
        writes are partly pending in the process until commit)."""
        return None if self.writing else self.match_pattern

    def match_pattern(self, pattern: Pattern) -> list[tuple[int | None, ...]]:
        """The rows of `pattern` (pg_match: one statement), in the operators' order; the
        heads and maps it wants are kept, as a scan's are, for the reads that follow."""
        conn = self.conn
        if conn is None:
            used_after_end()
        sql, params = compile_pattern(self.space, pattern)
        # One statement runs until it ends: past the command's deadline it is cancelled
        # (pg_cancel: from a watchdog thread, no statement of its own).
        armed = None if pattern.timeout is None else WATCHDOG.arm(pattern.timeout, conn.cancel)
        try:
            rows = call(lambda: conn.execute(sql, params).fetchall(), self.host.where, False)
        finally:
            if armed is not None:
                WATCHDOG.disarm(armed)
        k = len(pattern.columns)
        if not pattern.wants:
            return rows if k else [()] * len(rows)
        at = [(pattern.columns.index(w.col), k + j * WANT_WIDTH, w.maps)
              for j, w in enumerate(pattern.wants)]
        fresh: dict[int, ConceptHead] = {}
        keep, keep_maps = self._keep, self._keep_maps
        for row in rows:
            for i, base, maps in at:
                n = row[i]
                if n is None or n in fresh:
                    continue
                t, name, s, p, o, a, m = row[base:base + WANT_WIDTH]
                h: Head
                if name is not None:
                    h = fresh[n] = ConceptHead(n, t, bytes(name).decode())
                elif s is not None:
                    h = LinkHead(n, s, p, o)
                else:
                    continue
                keep(h)
                if maps:
                    keep_maps(n, a, m)
        if fresh:
            self.host.cache_heads(fresh)
        return [row[:k] for row in rows]

    # --- concept indexes -----------------------------------------------------------------
    def concept_id(self, type_id: int, name: str) -> int | None:
        if not _is_sid(type_id):
            return None
        try:
            utf8 = codec.encode_text(name)
        except KipError:
            return None
        row = self.one("SELECT id, name, attributes, metadata FROM nexus_concepts WHERE "
                       "space = %s AND type_id = %s AND name_key = %s",
                       (self.space, type_id, codec.text_key(utf8)))
        if row is None or bytes(row[1]) != utf8:
            return None
        n: int = row[0]
        self._keep(ConceptHead(n, type_id, name))
        self._keep_maps(n, row[2], row[3])      # (usually asked for next)
        return n

    def concepts_of_type(self, type_id: int) -> Iterator[int]:
        if not _is_sid(type_id):
            return iter(())
        rows = self.paged("id, name FROM nexus_concepts", "space = %s AND type_id = %s",
                          ["id"], (self.space, type_id))
        return self._typed(rows, type_id)

    def _typed(self, rows: Iterator[tuple[Any, ...]], t: int) -> Iterator[int]:
        keep = self._keep
        for n, name in rows:
            keep(ConceptHead(n, t, bytes(name).decode()))     # (the name is usually asked)
            yield n

    def concepts_named(self, name: str) -> Iterator[int]:
        try:
            utf8 = codec.encode_text(name)
        except KipError:
            return iter(())
        rows = self.paged("id, type_id FROM nexus_concepts",
                          "space = %s AND name_key = %s AND name = %s", ["id"],
                          (self.space, codec.text_key(utf8), utf8))
        return self._named(rows, name)

    def _named(self, rows: Iterator[tuple[Any, ...]], name: str) -> Iterator[int]:
        for n, t in rows:
            self._keep(ConceptHead(n, t, name))
            yield n

    # --- link indexes --------------------------------------------------------------------
    def link_id(self, subject: int, predicate_id: int, object: int) -> int | None:
        if not (is_id(subject) and _is_sid(predicate_id) and is_id(object)):
            return None
        row = self.one("SELECT id FROM nexus_links WHERE space = %s AND subject = %s AND "
                       "predicate = %s AND object = %s",
                       (self.space, subject, predicate_id, object))
        if row is None:
            return None
        n: int = row[0]
        self._keep(LinkHead(n, subject, predicate_id, object))
        return n

    def out_links(self, subject: int, predicate_id: int | None = None
                  ) -> Iterator[tuple[int, int, int]]:
        return self._ends(subject, predicate_id, "subject", "object", out=True)

    def in_links(self, object: int, predicate_id: int | None = None
                 ) -> Iterator[tuple[int, int, int]]:
        return self._ends(object, predicate_id, "object", "subject", out=False)

    def _ends(self, n: int, p: int | None, end: str, other: str, out: bool
              ) -> Iterator[tuple[int, int, int]]:
        if not is_id(n) or (p is not None and not _is_sid(p)):
            return iter(())
        where = f"space = %s AND {end} = %s"
        params: tuple[Any, ...] = (self.space, n)
        if p is not None:
            where += " AND predicate = %s"
            params += (p,)
        rows = self.paged(f"predicate, {other}, id FROM nexus_links", where,
                          ["predicate", other, "id"], params)
        return self._link_rows(rows, n, out)

    def _link_rows(self, rows: Iterator[tuple[Any, ...]], n: int, out: bool
                   ) -> Iterator[tuple[int, int, int]]:
        keep = self._keep
        for p, m, k in rows:
            keep(LinkHead(k, n, p, m) if out else LinkHead(k, m, p, n))
            yield p, m, k

    def links_of_predicate(self, predicate_id: int) -> Iterator[tuple[int, int, int]]:
        if not _is_sid(predicate_id):
            return iter(())
        rows = self.paged("subject, object, id FROM nexus_links",
                          "space = %s AND predicate = %s", ["subject", "object", "id"],
                          (self.space, predicate_id))
        return self._pred_rows(rows, predicate_id)

    def _pred_rows(self, rows: Iterator[tuple[Any, ...]], p: int
                   ) -> Iterator[tuple[int, int, int]]:
        keep = self._keep
        for s, o, k in rows:
            keep(LinkHead(k, s, p, o))
            yield s, o, k

    def link_predicates(self) -> Iterator[int]:
        found = {int(key[2:]): n for key, n in self.rows(
            "SELECT key, n FROM nexus_stats WHERE space = %s AND key LIKE 'p:%%'",
            (self.space,))}
        for key, delta in self.pending_stats().items():
            if key.startswith("p:"):
                p = int(key[2:])
                found[p] = found.get(p, 0) + delta
        return iter(sorted(p for p, n in found.items() if n > 0))

    # --- statistics ----------------------------------------------------------------------
    def pending_stats(self) -> dict[str, int]:
        """Statistic deltas not yet written (a write transaction's)."""
        return {}

    def _stat(self, key: str) -> int:
        row = self.one("SELECT n FROM nexus_stats WHERE space = %s AND key = %s",
                       (self.space, key))
        return (0 if row is None else int(row[0])) + self.pending_stats().get(key, 0)

    def count_type(self, type_id: int) -> int:
        return self._stat(type_key(type_id)) if _is_sid(type_id) else 0

    def count_predicate(self, predicate_id: int) -> int:
        return self._stat(pred_key(predicate_id)) if _is_sid(predicate_id) else 0

    def count_concepts(self) -> int:
        return self._stat(ST_CONCEPTS)

    def count_links(self) -> int:
        return self._stat(ST_LINKS)

    # --- aux -----------------------------------------------------------------------------
    def aux(self, table: str) -> PgAux:
        if table not in AUX_TABLES:
            raise internal(f"unknown aux table {table!r}; declared tables: {AUX_TABLES}")
        return PgAux(self, table)

    # --- snapshots and columns -----------------------------------------------------------
    def snapshot_id(self) -> int | None:
        """None: another server sharing the database commits without this process knowing,
        so nothing may be cached by snapshot here (module doc of `pg_store`)."""
        return None

    def store_token(self) -> int:
        return self.host.token

    def columns(self) -> None:
        return None

    def column_cache(self) -> None:
        return None


def _chunks(ids: list[int]) -> Iterator[list[int]]:
    """`ids` in slices of at most BATCH_IDS (none for no ids)."""
    for start in range(0, len(ids), BATCH_IDS):
        yield ids[start:start + BATCH_IDS]
