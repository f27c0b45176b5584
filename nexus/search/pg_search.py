"""The search service on a PostgreSQL store: every index in the database, none in the process.

Owns what differs from `service.SearchService` when the store is `postgresql://` and the
database has pgvector: the vector indexes (the n-gram one that keyword mode uses for typos,
and the semantic one of MODE "semantic"/"hybrid") are `pg_vectors.PgVectorTable`s written
in the data's own write transaction, and SEARCH asks them in the reader's snapshot. There
is no indexer thread, no change queue to follow, no file: several servers on one database
all read the same rows, and what one commits, the next SEARCH of any other finds.

The keyword side is the lexical index as on LMDB (`lexical`: BM25F postings, names and
aliases, the forward index) — it already lives in the database (the `nexus_aux` rows),
written in the data's transaction and read in the reader's snapshot, so it is exact across
servers; keeping it (rather than PostgreSQL's full-text search) keeps `_score` and the
ranking identical on every backend. `query` ranks and fuses exactly as on LMDB, with
`BoundVectors` answering its nearest-neighbour and similarity questions in SQL.

Chosen by `attach_search` for a PostgreSQL store whose database has (or can create) the
`vector` extension; without it the store keeps the in-process indexes of `service`.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any, Callable, Iterator

import numpy as np

from ..errors import KipError
from . import lexical, query
from .embed import make_semantic_embedder, semantic_installed
from . import pg_vectors
from .pg_vectors import (PgVectorTable, has_pgvector, read_complete, run_all,
                         write_complete)
from .service import (INSTALL_HINT, KEY_SEMANTIC, MODES, Host, Progress, SearchService,
                      _index_txn, _phase, _searchable, kip_only, rebuild_lexical)
from .text import KIND_CONCEPT, KIND_LINK
from .vectors import may_have_vectors

log = logging.getLogger("nexus.search")


def pg_service(host: Host) -> SearchService | None:
    """A `PgSearchService` for `host` when its store is PostgreSQL with pgvector."""
    store = host.store
    if type(store).__module__ != "nexus.store.pg_store":
        return None             # (and psycopg is not imported for other stores)
    from nexus.store.pg_store import PgGraphStore
    store = host.store
    if not isinstance(store, PgGraphStore):
        return None
    conn = store.connect()
    try:
        ok = has_pgvector(conn)
    finally:
        store.release(conn)
    if not ok:
        log.warning("search: the database has no pgvector (extension 'vector'); the vector "
                    "indexes are kept in this process")
        return None
    return PgSearchService(host)


class PgSearchService(SearchService):
    """`SearchService` with its vector indexes in pgvector tables (see the module doc)."""

    def __init__(self, host: Host) -> None:
        super().__init__(host)
        self.space = str(host.store.space)
        self.pg_vectors = PgVectorTable(self.embedder, self.space, "vectors")
        self.pg_semantic: PgVectorTable | None = None
        self._builds: list[threading.Thread] | None = None     # (during a bulk load)
        self._builds_lock = threading.Lock()
        self._loads = 0                 # bulk loads under way

    def tables(self) -> list[PgVectorTable]:
        return [self.pg_vectors] + ([self.pg_semantic] if self.pg_semantic else [])

    @kip_only
    def open(self, progress: Progress | None = None) -> None:
        with self.store.read() as txn:
            has_data = txn.max_id() > 0 and (txn.count_concepts() + txn.count_links()) > 0
            unindexed = has_data and not (lexical.doc_count(txn, KIND_CONCEPT)
                                          + lexical.doc_count(txn, KIND_LINK))
        self._open_semantic()
        conn = self.store.connect()
        try:
            for table in self.tables():
                table.ensure(conn)
        finally:
            self.store.release(conn)
        if unindexed:
            log.info("search: indexing an existing store")
            self.reindex(progress)
            self.opened = "rebuilt"
            return
        with self.store.read() as txn:
            complete = read_complete(txn)
        missing = [t for t in self.tables() if t.table not in complete]
        if not missing:
            self.opened = "loaded" if has_data else "empty"
            return
        with self._store_write() as txn:      # (under the space's lock: no write between)
            for table in missing:
                table.clear(txn)
                ids = list(txn.elements())
                for i in range(0, len(ids), 4096):
                    table.write(txn, ids[i:i + 4096], [])
                    if progress:
                        progress(f"{table.prefix} vectors", min(len(ids), i + 4096),
                                 len(ids))
            write_complete(txn, read_complete(txn) + [t.table for t in missing])
        self.after_commit(None)         # (a rebuilt big space gets its HNSW index now)
        self.opened = "rebuilt" if has_data else "empty"

    def _open_semantic(self) -> None:
        """As `SearchService._open_semantic`, with the semantic index a pgvector table."""
        configured = str(getattr(self.host.config, "semantic", "auto") or "auto").strip()
        with self.store.read() as txn:
            raw = txn.aux("vecq").get(KEY_SEMANTIC)
        recorded = bytes(raw).decode() if raw is not None else None
        choice = self._semantic_choice(configured, recorded)
        if choice is not None and choice != recorded:
            with self._write_txn() as w:
                w.aux("vecq").put(KEY_SEMANTIC, choice.encode())
        self.semantic_choice = choice
        if choice is None:
            self.semantic_note = ("this engine has no semantic embedder installed "
                                  f"({INSTALL_HINT} adds one)")
        elif choice == "none":
            self.semantic_note = "semantic search is turned off for this database"
        elif not semantic_installed(choice):
            self.semantic_note = (f"this database uses the semantic embedder {choice!r}, "
                                  f"which is not installed here ({INSTALL_HINT})")
        else:
            self.pg_semantic = PgVectorTable(make_semantic_embedder(choice), self.space,
                                             "semantic")
            self.semantic_note = None

    def _semantic_choice(self, configured: str, recorded: str | None) -> str | None:
        from .embed import SEMANTIC_EMBEDDERS
        if configured == "auto":
            return recorded if recorded is not None else (
                "wordllama" if semantic_installed("wordllama") else None)
        if configured == "none" or configured in SEMANTIC_EMBEDDERS:
            return configured
        from ..errors import ErrorCode
        raise KipError(ErrorCode.KIP_1001, f"Unknown semantic embedder {configured!r}",
                       "Use semantic=\"auto\" (the database's choice, else WordLlama "
                       "when installed), \"wordllama\" or \"none\".")

    @contextlib.contextmanager
    def _store_write(self) -> Iterator[Any]:
        """The store's own transaction of a write session (SQL goes to its connection)."""
        with self.host.write_session(privileged=True) as session:
            yield getattr(session, "store_txn", session.txn)

    def mode_served(self, mode: str | None) -> tuple[str, str | None]:
        if self.pg_semantic is not None:
            return mode or "hybrid", None
        return super().mode_served(mode)    # (keyword; `semantic` stays None here)

    @property
    def search_capability(self) -> dict:
        sem = self.pg_semantic
        if sem is None:
            return super().search_capability
        return {"modes": list(MODES), "default_mode": "hybrid",
                "semantic_embedder": sem.embedder.name,
                "query_expansion": getattr(sem.embedder, "expansion_name", None),
                "semantic_fallback": None}

    # --- write hooks ---------------------------------------------------------------------
    def aux_reads(self, ctx: Any) -> list[tuple[Any, ...]]:
        """What `before_commit` reads of the aux tables besides the postings, for the engine
        to ask at once with the other hooks' (`Engine.write_session`): the vector tables'
        completeness marker, and what the lexical index's write reads first (the touched
        ids' forward entries and pending keys, the first pending documents), when the
        session touched anything."""
        if not (ctx.touched or ctx.removed):
            return []
        reads: list[tuple[Any, ...]] = [("vecq", [pg_vectors.KEY_COMPLETE], [])]
        if id(ctx) not in self._stages:         # (a staged write read them already)
            reads += lexical.write_reads(_searchable(ctx), ctx.removed)
        return reads

    @kip_only
    def before_commit(self, ctx: Any) -> None:
        """Inside the write txn: the postings, and the vector rows of what changed."""
        st = self._stages.pop(id(ctx), None)
        if st is not None and st.txn is not ctx.txn:
            st = None
        if st is None and not ctx.touched and not ctx.removed:
            return
        txn = _index_txn(ctx)
        if st is None:
            changed, gone = lexical.write(txn, _searchable(ctx), ctx.removed,
                                          getattr(ctx, "moved", None))
        else:
            self._stages[id(ctx)] = st
            self.stage(ctx)
            del self._stages[id(ctx)]
            lexical.finish(txn, st.postings)    # the staged new postings
            changed, gone = st.changed, st.gone
        if not changed and not gone:
            return
        mine = [t.table for t in self.tables()]
        complete = read_complete(txn)
        if any(t not in mine for t in complete):
            # A table this server cannot keep (another embedder): no longer complete.
            write_complete(txn, [t for t in complete if t in mine])
        changed, gone = list(changed), list(gone)
        if len(changed) + len(gone) <= pg_vectors.PIPELINE_MAX:  # a command: one round trip
            run_all(txn, [s for table in self.tables()
                          for s in table.statements(txn, changed, gone)])
        else:
            for table in self.tables():
                table.write(txn, changed, gone)

    def after_commit(self, ctx: Any) -> None:
        """After a commit that wrote many vectors: build the space's HNSW indexes once it
        is big enough (`PgVectorTable.index_if_big`; outside the write: not under the
        space's lock). During a bulk load, in a thread of its own (`bulk_loading`)."""
        grown = [t for t in self.tables() if t.added >= pg_vectors.INDEX_CHECK]
        if not grown:
            return
        builds = self._builds
        if builds is not None:
            # No lock timeout: CONCURRENTLY, the build ends by waiting for the
            # transactions older than it — the load's own next batch among them, which may
            # well take longer than LOCK_TIMEOUT (a build that gave up would leave the load
            # without its index).
            build = threading.Thread(target=self._build, args=(grown, "0"), daemon=True,
                                     name="nexus-hnsw-build")
            build.start()
            builds.append(build)
            return
        self._build(grown)

    def _build(self, tables: list[PgVectorTable],
               lock_timeout: str = pg_vectors.LOCK_TIMEOUT) -> None:
        try:
            conn = self.store.connect()
        except KipError as exc:         # (logged: the index is built by a later look)
            log.warning("search: no HNSW index built (%s)", exc)
            return
        try:
            for table in tables:
                table.index_if_big(conn, lock_timeout)
        finally:
            self.store.release(conn)

    @contextlib.contextmanager
    def bulk_loading(self):
        """`with search.bulk_loading(): ...` around a bulk load. The rows of its postings
        and vectors are written in its batches' transactions; the HNSW index a batch's
        vectors call for (the concepts' batch, which comes first) is built once, after
        that batch's commit, by the server while the load's next batches (the links, which
        have no vectors) go on, on another connection — each side then keeps a core busy,
        instead of the load waiting for the build. The load returns once the build is
        done: SEARCH finds everything it loaded through the index when it returns."""
        with self._builds_lock:         # (two loads at once share the list: both wait)
            if self._builds is None:
                self._builds = []
            builds = self._builds
            self._loads += 1
        try:
            yield
        finally:
            with self._builds_lock:
                self._loads -= 1
                if not self._loads:
                    self._builds = None
                    lexical.drop_caches()   # the load's texts (`lexical_terms.LoadTexts`)
            for build in list(builds):
                build.join()

    @kip_only
    def drain(self, timeout: float | None = None) -> bool:
        return True             # nothing is queued: the rows are written with the data

    # --- queries -------------------------------------------------------------------------
    @kip_only
    def search(self, txn: Any, target: str, text: str, type_name: str | None = None,
               limit: int = 10, *, check: Callable[[], None] | None = None,
               deadline: float | None = None, mode: str = "keyword",
               threshold: float = 0.0) -> list[tuple[int, float]]:
        """As `SearchService.search`, the vectors read in `txn`'s own snapshot."""
        kind = KIND_CONCEPT if target.upper() == "CONCEPT" else KIND_LINK
        group = None
        if type_name is not None:
            group = txn.symbol_id(type_name)
            if group is None:
                return []
        sql = _sql_txn(txn)
        vectors = self.pg_vectors.bind(sql)
        sem = self.pg_semantic.bind(sql) if self.pg_semantic and mode != "keyword" else None
        if sem is None:
            hits = query.run(txn, vectors, kind, text, group, limit, check=check)
        elif mode == "semantic":
            hits = query.semantic(txn, sem, kind, text, group, limit, check=check)
        else:
            hits = query.hybrid(txn, vectors, sem, kind, text, group, limit, check=check)
        return [(n, score) for n, score in hits if score >= threshold]

    # --- maintenance ---------------------------------------------------------------------
    @kip_only
    def reindex(self, progress: Progress | None = None, chunk: int = 5000) -> dict:
        """Rebuild the lexical index and the vector tables from the data, in one write."""
        with self._store_write() as txn:
            ids = rebuild_lexical(txn, progress, chunk)
            total = len(ids)
            for table in self.tables():
                named = _phase(progress, table.prefix)
                table.clear(txn)
                for i in range(0, total, chunk):
                    table.write(txn, ids[i:i + chunk], [])
                    if named:
                        named("vectors", min(total, i + chunk), total)
            write_complete(txn, [t.table for t in self.tables()])
        report: dict[str, Any] = {"elements": total, "seq": 0}
        if self.pg_semantic is not None:
            report["semantic_embedder"] = self.pg_semantic.embedder.name
        return report

    @kip_only
    def check(self, deep: bool = False, wait: float = 0.0) -> dict:
        """Drift between the data and the indexes (all counts 0 when in step)."""
        with self.store.read() as txn:
            elements = set(txn.elements())
            indexed = set(lexical.indexed_ids(txn))
            counted = lexical.doc_count(txn, KIND_CONCEPT) + lexical.doc_count(txn, KIND_LINK)
            complete = read_complete(txn)
            report: dict[str, Any] = {
                "elements": len(elements),
                "lexical_missing": len(elements - indexed),
                "lexical_orphans": len(indexed - elements),
                "lexical_count_drift": abs(counted - len(indexed)),
            }
            for table in self.tables():
                name = "vector" if table.prefix == "vectors" else table.prefix
                have = table.ids(txn)
                report[f"{name}_missing"] = sum(
                    1 for n in may_have_vectors(txn, sorted(elements - have))
                    if self._has_texts(txn, n))
                report[f"{name}_orphans"] = len(have - elements)
                report[f"{name}_lag"] = 0 if table.table in complete else 1
            if deep:
                report["lexical_stale"] = sum(1 for n in elements & indexed
                                              if lexical.stale(txn, n))
        report["ok"] = not any(v for k, v in report.items() if k != "elements")
        return report

    def vector_indexes(self) -> list:
        return []               # no in-process index (nothing to wait for or compare)

    @kip_only
    def vector_check(self, examples: int = 5, chunk: int = 2048) -> dict[str, Any]:
        """The deep check of the vector rows against the data (what `ops.check.VectorCheck`
        does for the in-process index): for every element with vectors, its slots are
        those of its current texts (`<name>_slots_wrong`), each holding its text's
        embedding (`<name>_stale`). Elements with no vector at all are `check`'s
        `<name>_missing`."""
        counts: dict[str, int] = {}
        found: dict[str, list[str]] = {}
        compared = 0

        def problem(key: str, text: str) -> None:
            counts[key] = counts.get(key, 0) + 1
            if len(found.setdefault(key, [])) < examples:
                found[key].append(text)
        with self.store.read() as txn:
            ids = may_have_vectors(txn, txn.elements())     # (links have none)
            for table in self.tables():
                name = "vector" if table.prefix == "vectors" else table.prefix
                counts[f"{name}_slots_wrong"] = counts[f"{name}_stale"] = 0
                for i in range(0, len(ids), chunk):
                    part = ids[i:i + chunk]
                    docs = table.docs(txn, part)
                    have = table.stored(txn, part)
                    texts = [t for _, _, _, ts in docs for t in ts]
                    fresh = table.embedder.embed(texts) if texts else None
                    at = 0
                    for n, kind, _, ts in docs:
                        want = fresh[at:at + len(ts)] if fresh is not None else None
                        at += len(ts)
                        slots = have.get(n)
                        if not slots:
                            continue
                        compared += 1
                        label = f"{'C' if kind == 0 else 'P'}:{n}"
                        if sorted(slots) != list(range(len(ts))) or want is None:
                            problem(f"{name}_slots_wrong", f"{label} has vector slots "
                                    f"{sorted(slots)}, its text gives {len(ts)}")
                            continue
                        vecs = np.stack([slots[k] for k in range(len(ts))])
                        norms = np.linalg.norm(vecs, axis=1) * np.linalg.norm(want, axis=1)
                        cos = (vecs * want).sum(axis=1) / np.where(norms > 0, norms, 1.0)
                        if (cos < 0.98).any():
                            problem(f"{name}_stale", f"{label}: a vector is not its text's "
                                    f"(cosine {float(cos.min()):.3f})")
        report: dict[str, Any] = dict(counts)
        report["vectors_compared"] = compared
        if found:
            report["examples"] = found
        return report

    @kip_only
    def save(self) -> None:
        pass

    @kip_only
    def close(self, drain: bool = True) -> None:
        """(`drain`: nothing is queued here; `Nexus.detach_search` passes False.)"""
        self.vectors.release()      # (the unused in-process index: maps nothing)


def _sql_txn(txn: Any) -> Any:
    """The store transaction under `txn` (a reader may see it through a wrapper)."""
    seen = 0
    while not hasattr(txn, "rows") and seen < 4:
        inner = getattr(txn, "store_txn", None) or getattr(txn, "txn", None) \
            or getattr(txn, "inner", None)
        if inner is None:
            break
        txn, seen = inner, seen + 1
    return txn
