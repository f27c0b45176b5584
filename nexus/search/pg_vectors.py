"""Vectors in the database on PostgreSQL: a pgvector table per embedder, HNSW-indexed.

Owns the table of one vector index (the n-gram one, or the semantic one) on a
`postgresql://` store, writing its rows inside the data's own write transaction, and
answering nearest-neighbour and similarity questions with SQL in the reader's snapshot.
The embedder stays in the engine: it embeds the texts, the database stores and searches
the vectors.

Why in the write transaction and not from a queue (as `vectors.VectorIndex` does beside
LMDB): several servers may share the database, and an index kept in one process is stale
as soon as another server commits. Rows written with the data are exactly as current as
the data in every snapshot of every server: a SEARCH never waits for an indexer and never
sees a vector its snapshot's data does not have.

Table `nexus_vec_<hash of the embedder's name>` (a new embedder gets a new table, so a
change of embedder never mixes vectors of two models):

    space text, id bigint, slot smallint, kind smallint, grp bigint, embedding vector(dim)
    PRIMARY KEY (space, id, slot)          — slots as in `vectors.SLOTS` (name, aliases,
                                             "name: description")
    INDEX (space, kind, grp, id)           — WITH TYPE: exact scoring over a small type
    HNSW (embedding vector_cosine_ops) WHERE space = '<space>' AND kind = 0
                                           — one partial index per space, once its
                                             concepts have INDEX_AT vectors (links have
                                             none: `vectors.doc_texts`)

Why partial HNSW indexes per space: pgvector (0.6) filters *after* the index scan, so one
index over every space would return the neighbours of all spaces and keep those of this
one, which with many spaces can be none. A partial index per space holds only
the vectors a query may return; the query names its space and kind as literals so that
the planner can match the index's predicate. A space smaller than INDEX_AT has none: its
few vectors are scored exactly (the planner reads them through the plain index and sorts),
which is both exact and fast at that size, and a database of a thousand small spaces does
not carry a thousand indexes. Leading with `space` keeps the table distributable like the
others (`pg_spaces` copies and drops its rows with the space's).

`complete` marks: a table is only trusted for a space when the vecq aux key `b"G"` lists
it (written by a rebuild, in the same transaction as its rows). Every write keeps the
tables of the embedders its server has; a write by a server that lacks one of the listed
tables removes it from the list, so that a server with that embedder rebuilds it on open
instead of trusting rows that missed a change.
"""
from __future__ import annotations

import hashlib
import logging
from typing import Any, Iterable

import msgpack
import numpy as np

from ..store.pg_names import space_index_tag
from ..store.protocol import LinkHead
from .embed import Embedder
from .text import element_doc
from .vectors import SLOTS, doc_texts

log = logging.getLogger("nexus.search")

KEY_COMPLETE = b"G"         # vecq: msgpack list of the vector tables that are complete
EF_MAX = 1000               # pgvector's bound on hnsw.ef_search
WRITE_CHUNK = 2048          # elements embedded and inserted per statement
PIPELINE_MAX = 64           # elements a write pipelines as INSERTs (more: a binary COPY)
INDEX_AT = 2000             # vectors of a space and kind past which they get an HNSW index
INDEX_CHECK = 500           # vectors written by this process between two looks at that
LOCK_TIMEOUT = "30s"        # building an index waits at most this long for a lock
BUILD_MEMORY_MAX = 1 << 20  # kB of maintenance_work_mem an HNSW build may ask for (1 GB)
# The HNSW graph's build breadth: pgvector's default ef_construction (64) made an insert —
# a command's new concept — cost 1.5-3 ms of the server's CPU at 5,000 concepts, most of a
# single write's; at 32 it is 30-65% less, and the search breadth (`ef_search`, at least
# `vectors.EXPANSION_SEARCH` = 256) keeps the neighbours the same (recall@10 against an
# exact scan 1.0 at both, bench/RESULTS.md "PostgreSQL W2: server CPU"). An index built
# before keeps its own options (pgvector reads them from the index).
HNSW_OPTIONS = "m = 16, ef_construction = 32"


def table_name(embedder: Embedder) -> str:
    return "nexus_vec_" + hashlib.sha1(embedder.name.encode()).hexdigest()[:12]


def vector_literal(vec: np.ndarray) -> str:
    """pgvector's text form of one vector."""
    return vector_literals(np.asarray(vec)[None, :])[0]


def vector_literals(vecs: np.ndarray) -> list[str]:
    """pgvector's text form of each row of `vecs`, to 6 decimals (a cosine moves by less
    than 1e-5; the text is half as long as float32's shortest form, and made faster)."""
    return [str(row) for row in np.round(np.asarray(vecs, dtype=np.float64), 6).tolist()]


def has_pgvector(conn: Any) -> bool:
    """Whether the database has the `vector` extension, creating it when it is available
    (and this role may)."""
    if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone():
        return True
    if not conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
                        ).fetchone():
        return False
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except Exception:  # noqa: BLE001 - no privilege, or created meanwhile
        return bool(conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'"
                                 ).fetchone())
    return True


def build_memory(conn: Any, table: PgVectorTable, kind: int) -> int:
    """kB of maintenance_work_mem for building the HNSW index of `table`'s `kind` in
    memory: ~2 × (the vector + its neighbour lists at m = 16) per row, at least what the
    server has set and at most BUILD_MEMORY_MAX."""
    # pg_settings gives maintenance_work_mem in its base unit, kB.
    row = conn.execute(f"SELECT count(*), (SELECT setting::bigint FROM pg_settings WHERE "
                       f"name = 'maintenance_work_mem') FROM {table.table} "
                       f"WHERE space = %s AND kind = %s", (table.space, kind)).fetchone()
    count, have = int(row[0]), int(row[1])
    need = count * 2 * (4 * int(table.embedder.dim) + 16 * 2 * 10 + 64) // 1024 + 16384
    return max(have, min(need, BUILD_MEMORY_MAX))


class PgVectorTable:
    """One vector index of one space, kept in a pgvector table (see the module doc)."""

    def __init__(self, embedder: Embedder, space: str, prefix: str = "vectors") -> None:
        self.embedder = embedder
        self.prefix = prefix
        self.space = space
        self.table = table_name(embedder)
        self.space_lit = "'" + space.replace("'", "''") + "'"
        tag = space_index_tag(space)        # (a drop of the space drops these indexes)
        # Concepts only: links have no vectors (vectors.FORMAT 2), so a propositions index
        # would stay empty. (One left by an older release is never used, and a drop of the
        # space drops it by its tag.)
        self.index_names = [f"{self.table}_{tag}_0"]
        self.added = 0          # vectors written since the last `index_if_big`
        self.indexed = False    # the concepts' HNSW index exists (nothing more to look at)

    # --- schema ----------------------------------------------------------------------------
    def ensure(self, conn: Any) -> None:
        """Create the table and its plain index where missing, and this space's HNSW indexes
        when it is big enough (`index_if_big`); on an autocommit connection (catalog races
        between servers doing it at once are retried)."""
        t = self.table
        ddl = [f"""CREATE TABLE IF NOT EXISTS {t} (
                   space text NOT NULL, id bigint NOT NULL, slot smallint NOT NULL,
                   kind smallint NOT NULL, grp bigint NOT NULL,
                   embedding vector({int(self.embedder.dim)}) NOT NULL,
                   PRIMARY KEY (space, id, slot))""",
               f"CREATE INDEX IF NOT EXISTS {t}_grp ON {t} (space, kind, grp, id)"]
        for attempt in range(3):
            try:
                for statement in ddl:
                    conn.execute(statement)
                break
            except Exception as exc:  # noqa: BLE001 - a concurrent creation: retried
                if attempt == 2 or ("already exists" not in str(exc)
                                    and "duplicate key" not in str(exc)):
                    raise
        self.index_if_big(conn)

    def index_if_big(self, conn: Any, lock_timeout: str = LOCK_TIMEOUT) -> None:
        """Give this space's concept vectors, once there are INDEX_AT or more, their partial
        HNSW index, built CONCURRENTLY (other spaces' writers are not blocked meanwhile). A
        smaller one needs none: its vectors are scored exactly, through the plain index,
        faster than an HNSW scan would find them; and a database of many small spaces
        carries no index per space (each partial index costs every insert a predicate
        check and every plan a proof). Failures are logged and retried later.
        `lock_timeout`: how long the build waits for a lock — and, CONCURRENTLY, for
        the transactions older than it to end ('0': as long as they last; a bulk load's
        build, which waits for the load's own next batch, `PgSearchService.bulk_loading`)."""
        self.added = 0
        if self.indexed:
            return
        valid = {name: ok for name, ok in conn.execute(
            "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c "
            "ON c.oid = i.indexrelid WHERE c.relname = ANY(%s)",
            (self.index_names,)).fetchall()}
        done = 0
        at = INDEX_AT
        for kind, name in enumerate(self.index_names):
            if valid.get(name):
                done += 1
                continue
            big = conn.execute(
                f"SELECT count(*) FROM (SELECT 1 FROM {self.table} WHERE space = %s "
                f"AND kind = %s LIMIT %s) AS x", (self.space, kind, at)).fetchone()
            if not big or big[0] < at:
                continue
            try:
                conn.execute(f"SET lock_timeout = '{lock_timeout}'")
                # pgvector builds the graph in memory while it fits maintenance_work_mem
                # (64 MB by default: ~50k vectors of 256 dimensions) and inserts the rest
                # one by one on disk, several times slower; give this build what its
                # vectors need (this session only; bounded).
                conn.execute(f"SET maintenance_work_mem = '{build_memory(conn, self, kind)}kB'")
                if name in valid:           # left invalid by a failed build
                    conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
                conn.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON "
                             f"{self.table} USING hnsw (embedding vector_cosine_ops) "
                             f"WITH ({HNSW_OPTIONS}) "
                             f"WHERE space = {self.space_lit} AND kind = {kind}")
                done += 1
            except Exception as exc:  # noqa: BLE001 - e.g. another server builds it now
                log.warning("search: the HNSW index %s was not built (%s); exact scoring "
                            "meanwhile", name, str(exc).splitlines()[0])
            finally:
                conn.execute("RESET lock_timeout")
                conn.execute("RESET maintenance_work_mem")
        self.indexed = done == len(self.index_names)

    # --- writes (inside the data's write transaction) --------------------------------------
    def write(self, txn: Any, changed: list[int], gone: list[int]) -> None:
        """Replace the rows of `changed` (from `txn`'s view of them) and delete those of
        `gone`, a chunk of elements at a time (a bulk load's vectors are never all held):
        per chunk one DELETE of its ids' old rows and one binary COPY of the new ones (no
        INSERT ... SELECT unnest of vector literals: printing and parsing ~1,000 decimals
        per row was most of a load's time in this table)."""
        first_new = getattr(txn, "first_new_id", None)
        fresh = first_new() if first_new is not None else None
        doomed = list(dict.fromkeys([*changed[:WRITE_CHUNK], *gone]))
        for i in range(0, max(len(changed), 1), WRITE_CHUNK):
            part = changed[i:i + WRITE_CHUNK]
            if i:
                doomed = part
            if fresh is not None:       # elements this transaction created have no rows
                doomed = [n for n in doomed if n < fresh]
            docs = self.docs(txn, part)
            if doomed:
                txn.run(f"DELETE FROM {self.table} WHERE space = %s AND id = ANY(%s)",
                        (self.space, doomed))
            self.copy(txn, docs)

    def copy(self, txn: Any, docs: list[tuple[int, int, int, list[str]]]) -> None:
        """COPY `docs`' vectors (embedded here, all at once) into the table, in binary."""
        columns = _columns(docs)
        if columns is None:
            return
        ids, slots, kinds, groups, texts = columns
        vecs = self.embedder.embed(texts)
        self.added += len(texts)
        data = copy_binary(self.space, ids, slots, kinds, groups, vecs)
        flush = getattr(txn, "flush_writes", None)      # (held-back writes go first)
        if flush is not None:
            flush()
        conn = txn.conn
        if conn is None:                    # (ended: the transaction's own error)
            txn.run("SELECT 1", ())
            return
        from nexus.store.pg_conn import call

        def go() -> None:
            with conn.cursor() as cur, cur.copy(
                    f"COPY {self.table} (space, id, slot, kind, grp, embedding) FROM STDIN "
                    f"(FORMAT BINARY)") as out:
                out.write(data)
        call(go, txn.host.where, txn.writing)

    def statements(self, txn: Any, changed: list[int], gone: list[int]
                   ) -> list[tuple[str, tuple[Any, ...]]]:
        """The statements of a command's `write` (the caller may pipeline them with
        others'): the new vectors as one upsert that rewrites a stored vector only when it
        differs (`upsert`: a re-UPSERT that keeps a concept's names touches no HNSW index —
        an index insert is most of the server's work in a single write), and one DELETE of
        the slots an element no longer has (all of those of `gone`), only for elements
        that existed before this transaction (one it created has no rows)."""
        from nexus.store.pg_conn import Int2s, Int8s     # (the postgres extra)
        first_new = getattr(txn, "first_new_id", None)
        fresh = first_new() if first_new is not None else None
        out: list[tuple[str, tuple[Any, ...]]] = []
        docs = self.docs(txn, changed)
        kept = {n: len(texts) for n, _, _, texts in docs}
        old = [n for n in dict.fromkeys([*changed, *gone]) if fresh is None or n < fresh]
        if old:
            out.append((f"DELETE FROM {self.table} AS d USING unnest(%b::bigint[], "
                        f"%b::smallint[]) AS u(i, n) WHERE d.space = %s AND d.id = u.i "
                        f"AND d.slot >= u.n",
                        (Int8s(old), Int2s([kept.get(n, 0) for n in old]), self.space)))
        for i in range(0, len(docs), WRITE_CHUNK):
            upsert = self.upsert(docs[i:i + WRITE_CHUNK])
            if upsert is not None:
                out.append(upsert)
        return out

    def docs(self, txn: Any, ids: Iterable[int]) -> list[tuple[int, int, int, list[str]]]:
        """(id, kind, group, texts) of the elements `ids` that exist in `txn` and have
        vector texts: concepts (a write passes no link, `lexical.write`; a rebuild passes
        every element, and no link's document is built)."""
        ids = list(ids)
        prefetch = getattr(txn, "prefetch_elements", None)
        if prefetch is not None:
            prefetch(ids, ends=False)       # (a concept's document needs no other element)
        out = []
        for n in ids:
            if type(txn.head(n)) is LinkHead:
                continue        # (a rebuild passes every element: links have no texts)
            doc = element_doc(txn, n)
            if doc is not None:
                texts = doc_texts(doc, self.embedder)
                if texts:
                    out.append((n, doc.kind, doc.group, texts))
        return out

    def upsert(self, docs: list[tuple[int, int, int, list[str]]]
               ) -> tuple[str, tuple[Any, ...]] | None:
        """The INSERT of `docs`' vectors (embedded here) that leaves a stored row alone when
        its vector, kind and group are the same (no new row version, so no index entry),
        or None when they have none."""
        columns = _columns(docs)
        if columns is None:
            return None
        from nexus.store.pg_conn import Int2s, Int8s, Texts     # (the postgres extra)
        ids, slots, kinds, groups, texts = columns
        vecs = self.embedder.embed(texts)
        self.added += len(texts)
        lits = vector_literals(vecs)
        t = self.table
        return (f"INSERT INTO {t} AS o (space, id, slot, kind, grp, embedding) "
                f"SELECT %s, i, s, k, g, e::vector FROM unnest(%b::bigint[], "
                f"%b::smallint[], %b::smallint[], %b::bigint[], %b::text[]) "
                f"AS u(i, s, k, g, e) ON CONFLICT (space, id, slot) DO UPDATE SET "
                f"kind = EXCLUDED.kind, grp = EXCLUDED.grp, embedding = EXCLUDED.embedding "
                f"WHERE (o.kind, o.grp, o.embedding) IS DISTINCT FROM "
                f"(EXCLUDED.kind, EXCLUDED.grp, EXCLUDED.embedding)",
                (self.space, Int8s(ids), Int2s(slots), Int2s(kinds), Int8s(groups),
                 Texts(lits)))

    def clear(self, txn: Any) -> None:
        txn.run(f"DELETE FROM {self.table} WHERE space = %s", (self.space,))

    # --- reads (in the reader's snapshot) -------------------------------------------------
    def bind(self, txn: Any) -> BoundVectors:
        return BoundVectors(self, txn)

    def count(self, txn: Any) -> int:
        row = txn.one(f"SELECT count(*) FROM {self.table} WHERE space = %s", (self.space,))
        return int(row[0]) if row else 0

    def ids(self, txn: Any) -> set[int]:
        return {int(r[0]) for r in txn.rows(
            f"SELECT DISTINCT id FROM {self.table} WHERE space = %s", (self.space,))}


    def stored(self, txn: Any, ids: list[int]) -> dict[int, dict[int, np.ndarray]]:
        """id → slot → stored vector, for the elements `ids` (a deep check)."""
        out: dict[int, dict[int, np.ndarray]] = {}
        for n, slot, vec in txn.rows(
                f"SELECT id, slot, embedding::real[] FROM {self.table} "
                f"WHERE space = %s AND id = ANY(%s) ORDER BY id, slot", (self.space, ids)):
            out.setdefault(int(n), {})[int(slot)] = np.asarray(vec, dtype=np.float32)
        return out


class BoundVectors:
    """A `PgVectorTable` read in one transaction's snapshot: what `query` asks of a vector
    index (`query.VectorSource`), each question one SQL statement."""

    filters_groups = True       # knn takes the WITH TYPE group and filters in SQL

    def __init__(self, table: PgVectorTable, txn: Any) -> None:
        self.table = table
        self.txn = txn
        self.embedder = table.embedder

    def query_vector(self, text: str) -> np.ndarray:
        embed_query = getattr(self.embedder, "embed_query", None)
        if embed_query is not None:
            return np.asarray(embed_query(text), dtype=np.float32)
        return self.embedder.embed([text])[0]

    def knn(self, kind: int, qvec: np.ndarray, count: int, expansion: int | None = None,
            group: int | None = None) -> dict[int, float]:
        """id → similarity in [0, 1] of the `count` nearest vectors (best slot per id): one
        statement, `ORDER BY embedding <=> q LIMIT count` over this space's HNSW index, the
        WITH TYPE group (if any) filtered in the same statement — the planner then picks
        the HNSW scan for a common group and the (space, kind, grp) index with an exact
        sort for a rare one."""
        from .vectors import EXPANSION_SEARCH
        t = self.table
        ef = min(EF_MAX, max(count, expansion or EXPANSION_SEARCH))
        where = f"space = {t.space_lit} AND kind = {int(kind)}"
        params: list[Any] = [vector_literal(qvec)]
        if group is not None:
            where += " AND grp = %s"
            params.append(group)
        params.append(count)
        rows = self._with_ef(
            ef, f"SELECT id, embedding <=> q.v FROM {t.table}, (SELECT %s::vector AS v) AS q "
            f"WHERE {where} ORDER BY embedding <=> q.v LIMIT %s", params)
        return _best(rows)

    def _with_ef(self, ef: int, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
        """Rows of `sql` with the HNSW search breadth `ef` for this transaction: the setting
        and the query pipelined (one round trip)."""
        from nexus.store.pg_conn import call
        txn = self.txn
        conn = txn.conn
        if conn is None:                # (ended: the transaction's own error)
            return txn.rows(sql, params)
        setting = ("SELECT set_config('hnsw.ef_search', %s, true)", (str(ef),))
        pipeline = getattr(txn, "pipeline", None)   # (a write's: its held-back writes first)
        if pipeline is not None:
            return list(pipeline([setting, (sql, params)])[1])

        def go() -> list[tuple[Any, ...]]:
            with conn.pipeline():
                conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(ef),))
                cur = conn.execute(sql, params)
            return cur.fetchall()
        return call(go, txn.host.where, txn.writing)

    def similarity(self, kind: int, qvec: np.ndarray, ids: list[int]) -> dict[int, float]:
        """Exact similarity of `qvec` to each id's best slot (ids without vectors: absent)."""
        if not ids:
            return {}
        t = self.table
        rows = self.txn.rows(
            f"SELECT id, min(embedding <=> %s::vector) FROM {t.table} "
            f"WHERE space = %s AND kind = %s AND id = ANY(%s) GROUP BY id",
            (vector_literal(qvec), t.space, kind, list(ids)))
        return _best(rows)


def _columns(docs: list[tuple[int, int, int, list[str]]]
             ) -> tuple[list[int], list[int], list[int], list[int], list[str]] | None:
    """`docs` as columns, a row per text (id, slot, kind, group, text); None if no text."""
    ids: list[int] = []
    slots: list[int] = []
    kinds: list[int] = []
    groups: list[int] = []
    texts: list[str] = []
    for n, kind, group, ts in docs:
        for slot, text in enumerate(ts):
            ids.append(n)
            slots.append(slot)
            kinds.append(kind)
            groups.append(group)
            texts.append(text)
    return (ids, slots, kinds, groups, texts) if texts else None


_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)      # signature, flags 0, no extension
_COPY_TRAILER = b"\xff\xff"


def copy_binary(space: str, ids: list[int], slots: list[int], kinds: list[int],
                groups: list[int], vecs: np.ndarray) -> bytes:
    """The rows (space, id, slot, kind, grp, embedding) in PostgreSQL's binary COPY format,
    built as one numpy record array: every field has a fixed length here (the space is the
    same in every row), so a row is a packed big-endian record — field count, then each
    field's length and value; a `vector` is pgvector's binary form (int16 dim, int16 0, dim
    float4)."""
    vecs = np.asarray(vecs, dtype=np.float32)
    count, dim = vecs.shape
    sp = space.encode()
    row = np.dtype([("nf", ">i2"), ("l0", ">i4"), ("space", f"S{len(sp)}"),
                    ("l1", ">i4"), ("id", ">i8"), ("l2", ">i4"), ("slot", ">i2"),
                    ("l3", ">i4"), ("kind", ">i2"), ("l4", ">i4"), ("grp", ">i8"),
                    ("l5", ">i4"), ("dim", ">i2"), ("unused", ">i2"),
                    ("vec", ">f4", (dim,))])
    out = np.empty(count, dtype=row)
    out["nf"] = 6
    out["l0"] = len(sp)
    out["space"] = sp
    out["l1"] = out["l4"] = 8
    out["l2"] = out["l3"] = 2
    out["l5"] = 4 + 4 * dim
    out["id"] = ids
    out["slot"] = slots
    out["kind"] = kinds
    out["grp"] = groups
    out["dim"] = dim
    out["unused"] = 0
    out["vec"] = vecs
    return b"".join((_COPY_HEADER, out.tobytes(), _COPY_TRAILER))


def run_all(txn: Any, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
    """Run `statements` in `txn`, pipelined (one round trip); in a write transaction that
    holds writes back (`pg_pipeline`), held back too: they need no answer, and go with its
    next statement or its COMMIT."""
    if not statements:
        return
    defer = getattr(txn, "defer", None)
    if defer is not None:
        for sql, params in statements:
            defer(sql, params)
        return
    conn = txn.conn
    if conn is None or len(statements) == 1:
        for sql, params in statements:
            txn.run(sql, params)
        return
    from nexus.store.pg_conn import call

    def go() -> None:
        with conn.pipeline():
            for sql, params in statements:
                conn.execute(sql, params)
    call(go, txn.host.where, txn.writing)


def _best(rows: list[tuple[Any, ...]]) -> dict[int, float]:
    out: dict[int, float] = {}
    for n, dist in rows:
        sim = 1.0 - float(dist)
        if sim > out.get(n, -1.0):
            out[n] = sim
    return {int(n): min(1.0, max(0.0, s)) for n, s in out.items()}


def read_complete(txn: Any) -> list[str]:
    raw = txn.aux("vecq").get(KEY_COMPLETE)
    return list(msgpack.unpackb(bytes(raw))) if raw is not None else []


def write_complete(txn: Any, tables: list[str]) -> None:
    txn.aux("vecq").put(KEY_COMPLETE, msgpack.packb(sorted(set(tables))))


__all__ = ["PgVectorTable", "BoundVectors", "has_pgvector", "table_name", "SLOTS"]
