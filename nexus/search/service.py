"""The search service: the indexes kept beside the store, and their lifecycle.

Owns the commit hooks the engine's write session calls around every write (`stage` part way
through a big one, `before_commit` inside the write transaction, `after_commit` after it),
opening/closing the indexes, `search`, `reindex` and `check`. It composes `lexical`
(postings in the data's transaction), `gram_index` (the default embedder's typo candidates:
trigram postings, in the data's transaction too) and `vectors` (usearch, caught up from a
queue: the semantic index, and the n-gram one of any other embedder).

The service is below the engine: it is given its `Host` (the engine, seen through a small
protocol) and writes only through the host's write session, like everything else.

Everything public raises only `KipError`. For the CLI: `reindex(progress)` calls
`progress(phase, done, total)` with phases "clear", "lexical", "vectors"; `check(deep)`
returns drift counts and `"ok"` (deep also recomputes every forward entry: slower).
`opened` tells what opening found: "empty", "loaded", "caught-up" (queued changes the
indexer replays) or "rebuilt" (the indexer rebuilds the vectors; a store without lexical
postings is reindexed at open).

Write cost: the lexical postings are written in the data's transaction (`before_commit`, or
chunk by chunk for a bulk load through `stage`); the vectors are only queued there and built
by the background indexer (`indexer.Indexer`). SEARCH is therefore exact on names and words
at once, and eventually consistent on vectors: a SEARCH whose snapshot is ahead of the
vector index waits up to `wait_seconds` for the indexer when at most `wait_backlog` ids are
queued (so an agent finds what it just wrote, typos included), and otherwise answers from the
lexical index and the vectors indexed so far. `drain()` waits for the indexer; `reindex`,
`check` and `close` drain first. A bulk load builds its own vectors before it returns
(`bulk_loading`, `complete_vectors`; embedded meanwhile by a worker thread from its chunks'
own texts, `ahead`): nothing of it is left to catch up.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import threading
import time
from typing import Any, Callable, ContextManager, Iterator, Protocol, Sequence

from ..errors import ErrorCode, KipError, internal_error
from . import gram_index, lexical, query
from .ahead import Ahead
from .embed import (SEMANTIC_EMBEDDERS, make_embedder, make_semantic_embedder,
                    semantic_installed)
from .text import KIND_CONCEPT, KIND_LINK, element_doc
from .vectors import VectorIndex, doc_texts, may_have_vectors, read_seq

log = logging.getLogger("nexus.search")

Progress = Callable[[str, int, int], None]   # (phase, done, total)
WAIT_SECONDS = 2.0          # SEARCH waits at most this long for the vectors of its snapshot
WAIT_BACKLOG = 20_000       # ... and only when at most this many ids are waiting
CHECK_DRAIN_SECONDS = 60.0  # `check` waits at most this long for the vector indexer
CLOSE_DRAIN_SECONDS = 300.0  # ... and `close` (a bulk load's backlog can take minutes)
MODES_BASE = ["exact_name", "name_prefix", "alias", "keyword_bm25",
              "fuzzy_typo_tolerant_vector"]
MODES = ("keyword", "semantic", "hybrid")     # SEARCH ... MODE (spec §5.2.1)
KEY_SEMANTIC = b"M"         # vecq: the semantic embedder this database chose ("none": none)
INSTALL_HINT = "pip install 'nexus-kip[semantic]'"
# The counts of a search check that are not drift: what it looked at, and a gram table not
# built yet (a database of an earlier version: `nexus.ops.check` adds a pending note).
NOT_DRIFT = frozenset({"elements", "vectors_compared", "grams_compared", "gram_unbuilt"})


class Host(Protocol):
    """What the search service needs of the engine that owns it."""

    @property
    def store(self) -> Any: ...
    @property
    def config(self) -> Any: ...
    def write_session(self, *, privileged: bool = False) -> ContextManager[Any]: ...


def kip_only(fn):
    """Let only KipError out of a public entry point."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except KipError:
            raise
        except Exception as exc:  # noqa: BLE001 - boundary of the search service
            log.exception("search index failure")
            raise internal_error(exc) from exc
    return wrapper


class SearchService:
    """`nexus.search`: hybrid lexical + vector search over one store."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.store = host.store
        self.embedder = make_embedder(getattr(host.config, "embedder", None))
        # The default embedder's typo candidates come from the gram postings (written with
        # the data, `gram_index`); its VectorIndex then keeps the change queue alone (the
        # semantic index follows it). Other embedders keep their vectors there.
        self.grams = gram_index.in_use(self.embedder)
        self.vectors = VectorIndex(self.embedder, self.store.path, build=not self.grams)
        # A process that must write nothing (`kip check`) keeps its catch-up in memory.
        self.vectors.saving = bool(getattr(host.config, "save_vectors", True))
        # The semantic index (MODE "semantic"/"hybrid"): a second vector index over the same
        # change queue, with the database's semantic embedder; None when it has none, and
        # then `semantic_note` says why (the hint of a SEARCH that asked for it).
        self.semantic: VectorIndex | None = None
        self.semantic_choice: str | None = None
        self.semantic_note: str | None = None
        self.opened = "empty"
        self.closed = False     # `close` frees the vectors: then it answers no SEARCH
        self.wait_seconds = WAIT_SECONDS
        self.wait_backlog = WAIT_BACKLOG
        # Per write transaction (keyed by its context; writes are serialised): what `stage`
        # indexed so far, and how many ids a committed write queued for the indexer.
        self._stages: dict[int, _Stage] = {}
        self._queued: dict[int, int] = {}
        # While bulk loads run (`bulk_loading`): their vectors embedded on another thread.
        self._ahead: list[Ahead] = []
        self._loads = 0
        self._ahead_lock = threading.Lock()

    @kip_only
    def open(self, progress: Progress | None = None) -> None:
        with self.store.read() as txn:
            has_data = txn.max_id() > 0 and (txn.count_concepts() + txn.count_links()) > 0
            unindexed = has_data and not (lexical.doc_count(txn, KIND_CONCEPT)
                                          + lexical.doc_count(txn, KIND_LINK))
        if unindexed:
            # A store written before search existed (or loaded without the hooks).
            log.info("search: indexing an existing store")
            self.vectors.ensure_epoch(self.store, self._write_txn)
            self.vectors.store = self.store
            self.reindex(progress)
            self.opened = "rebuilt"
        else:
            self.opened = self.vectors.open(self.store, self._write_txn, progress)
            if self.grams:
                self._ensure_grams()
        self._open_semantic()
        self.vectors.start(self.store)
        if self.semantic is not None:
            self.semantic.start(self.store)

    def _ensure_grams(self) -> None:
        """Build the gram postings of a database written before they existed (or mark an
        empty one's as built), in one write transaction."""
        with self.store.read() as txn:
            if gram_index.built(txn) or not self.vectors.saving:
                return          # (a process that must write nothing: `check` reports it)
            has_data = txn.max_id() > 0
        if has_data:
            log.info("search: building the gram postings")
        with self._write_txn() as w:
            if not gram_index.built(w):
                gram_index.rebuild(w)
        if has_data and self.vectors.saved_seq:
            # Files of the previous code: the watermark saved alone removes the n-gram
            # vector file, which nothing reads now.
            self.vectors.save()

    # --- the semantic embedder, chosen per database --------------------------------------
    def _open_semantic(self) -> None:
        """Choose the semantic embedder (config `semantic`, or what the database recorded),
        record the choice in the database, and open its index (rebuilt in the background
        when its saved files are another embedder's or missing)."""
        configured = str(getattr(self.host.config, "semantic", "auto") or "auto").strip()
        with self.store.read() as txn:
            raw = txn.aux("vecq").get(KEY_SEMANTIC)
        recorded = bytes(raw).decode() if raw is not None else None
        if configured == "auto":
            choice = recorded if recorded is not None else (
                "wordllama" if semantic_installed("wordllama") else None)
        elif configured == "none" or configured in SEMANTIC_EMBEDDERS:
            choice = configured
        else:
            raise KipError(ErrorCode.KIP_1001, f"Unknown semantic embedder {configured!r}",
                           "Use semantic=\"auto\" (the database's choice, else WordLlama "
                           "when installed), \"wordllama\" or \"none\".")
        if choice is not None and choice != recorded:
            with self._write_txn() as w:
                w.aux("vecq").put(KEY_SEMANTIC, choice.encode())
        self.semantic_choice = choice
        if choice is None:
            self.semantic_note = ("this engine has no semantic embedder installed "
                                  f"({INSTALL_HINT} adds one)")
            return
        if choice == "none":
            self.semantic_note = "semantic search is turned off for this database"
            return
        if not semantic_installed(choice):
            self.semantic_note = (f"this database uses the semantic embedder {choice!r}, "
                                  f"which is not installed here ({INSTALL_HINT})")
            return
        index = VectorIndex(make_semantic_embedder(choice), self.store.path,
                            prefix="semantic")
        index.saving = self.vectors.saving
        index.open(self.store, self._write_txn)
        self.vectors.follower = index
        self.semantic = index
        self.semantic_note = None

    def mode_served(self, mode: str | None) -> tuple[str, str | None]:
        """The mode a SEARCH asking for `mode` (None: omitted) is served in, and the hint
        to return when that is not what it asked for (spec §5.2.1: no semantic capability
        means every mode is served as keyword)."""
        if self.semantic is not None:
            return mode or "hybrid", None
        if mode is None or mode == "keyword":
            return "keyword", None
        return "keyword", (f'MODE "{mode}" was served as "keyword": '
                           f"{self.semantic_note}. Keyword mode matches names, aliases, "
                           "words and typos, not meaning: search with the words the "
                           "element's name or description would use.")

    def vector_indexes(self) -> list[VectorIndex]:
        """The n-gram vector index, then the semantic one when the database has it."""
        return [self.vectors] + ([self.semantic] if self.semantic is not None else [])

    @contextlib.contextmanager
    def _write_txn(self) -> Iterator[Any]:
        """A write transaction of the host's write session (the one write path)."""
        with self.host.write_session(privileged=True) as session:
            yield session.txn

    @property
    def search_modes(self) -> list[str]:
        modes = list(MODES_BASE)
        if self.embedder.contextual:
            modes.append("semantic_vector")
        return modes

    @property
    def search_capability(self) -> dict:
        """What DESCRIBE PRIMER tells about SEARCH MODE (spec §5.2.1): the modes served,
        the default, the semantic embedder, and what "semantic" falls back to."""
        if self.semantic is not None:
            return {"modes": list(MODES), "default_mode": "hybrid",
                    "semantic_embedder": self.semantic.embedder.name,
                    "query_expansion": getattr(self.semantic.embedder, "expansion_name",
                                               None),
                    "semantic_fallback": None}
        return {"modes": ["keyword"], "default_mode": "keyword", "semantic_embedder": None,
                "query_expansion": None,
                "semantic_fallback": f'"semantic" and "hybrid" are served as "keyword": '
                                     f"{self.semantic_note}"}

    # --- write hooks ---------------------------------------------------------------------
    @kip_only
    def stage(self, ctx: Any) -> None:
        """Inside the write txn, part way: index what `ctx` touched and removed so far (a
        bulk load stages after each chunk, and the write session then forgets those ids, so
        that a big transaction never holds all its ids and documents at once).
        `before_commit` finishes the job."""
        st = self._stages.get(id(ctx))
        if st is None or st.txn is not ctx.txn:     # (a stale one: its txn was aborted)
            st = self._stages[id(ctx)] = _Stage(ctx.txn)
        if not ctx.touched and not ctx.removed:
            return
        txn = _index_txn(ctx)
        touched = _searchable(ctx)
        before = (gram_index.indexed_names(txn, st.grams, touched, ctx.removed)
                  if self.grams else {})
        changed, gone = lexical.write(txn, touched, ctx.removed,
                                      getattr(ctx, "moved", None), st.postings,
                                      getattr(ctx, "new_docs", ()),
                                      getattr(ctx, "before_heads", None),
                                      getattr(ctx, "before_attributes", None))
        if self.grams:
            gram_index.update(txn, st.grams, changed, gone, before)
        st.changed.extend(changed)
        st.gone.extend(gone)
        for ahead in self._ahead:       # (a bulk load: its vectors embedded meanwhile)
            ahead.stage(ctx, txn, itertools.chain(ctx.touched, ctx.removed), changed,
                        getattr(ctx, "new_docs", ()))

    @kip_only
    def before_commit(self, ctx: Any) -> None:
        """Inside the write txn: the postings and the vector queue."""
        st = self._stages.pop(id(ctx), None)
        if st is not None and st.txn is not ctx.txn:
            st = None
        if st is None and not ctx.touched and not ctx.removed:
            return
        txn = _index_txn(ctx)
        if st is None:          # one KML command: no copies of its (small) sets
            touched = _searchable(ctx)
            batch = gram_index.Batch()
            before = (gram_index.indexed_names(txn, batch, touched, ctx.removed)
                      if self.grams else {})
            # An UPSERT run as columns says what it created: unless the write is small
            # (its documents left pending), they are derived from those columns and their
            # postings written once per list, as a bulk load's chunk's.
            known = getattr(ctx, "new_docs", ())
            if known and len(touched) + len(ctx.removed) <= lexical.SMALL_WRITE:
                known = ()
            held = lexical.Deferred() if known else None
            changed, gone = lexical.write(txn, touched, ctx.removed,
                                          getattr(ctx, "moved", None), held, known,
                                          before=getattr(ctx, "before_heads", None),
                                          before_attributes=getattr(
                                              ctx, "before_attributes", None))
            if held is not None:
                lexical.finish(txn, held, move_tail=False)
            if self.grams and (changed or gone):
                gram_index.update(txn, batch, changed, gone, before)
                batch.write(txn)
        else:
            self._stages[id(ctx)] = st
            self.stage(ctx)
            del self._stages[id(ctx)]
            lexical.finish(txn, st.postings)   # the staged new postings
            st.grams.write(txn)
            changed, gone = st.changed, st.gone
        if not changed and not gone:
            return
        seq = self.vectors.record(ctx.txn, changed, gone)
        for ahead in self._ahead:
            ahead.recorded(ctx, seq)
        if len(self._queued) > 64:      # left by aborted transactions: forget them
            self._queued.clear()
        self._queued[id(ctx)] = len(changed) + len(gone)

    def after_commit(self, ctx: Any) -> None:
        for ahead in self._ahead:
            ahead.committed(ctx)
        queued = self._queued.pop(id(ctx), None)
        if queued is not None:
            for index in self.vector_indexes():
                index.committed(queued)

    def rolled_back(self, ctx: Any) -> None:
        """The write was rolled back: forget what it staged and queued."""
        self._stages.pop(id(ctx), None)
        self._queued.pop(id(ctx), None)
        for ahead in self._ahead:
            ahead.rolled_back(ctx)

    @contextlib.contextmanager
    def bulk_loading(self):
        """`with search.bulk_loading(): ...` around a bulk load: the vector indexer waits
        until it ends (see `VectorIndex.pause`); the lexical index is written as usual, and
        when the load ends without an error its vectors are built before it returns
        (`complete_vectors`), so that SEARCH finds everything it loaded at once."""
        for index in self.vector_indexes():
            index.pause()
        with self._ahead_lock:
            if not self._loads:         # (the first of concurrent loads: `Ahead` per index)
                self._ahead = [Ahead(index) for index in self.vector_indexes()
                               if index.build]
            self._loads += 1
        try:
            yield
            complete_vectors(self.vector_indexes(), self._ahead)
        finally:
            with self._ahead_lock:
                self._loads -= 1
                done, self._ahead = (self._ahead, []) if not self._loads else ([], self._ahead)
            for ahead in done:
                ahead.close()
            lexical.drop_caches()       # the load's texts (they would stay: ~100 MB at 100k)
            for index in self.vector_indexes():
                drop = getattr(index.embedder, "drop_caches", None)
                if drop is not None:    # ... and the words the embedder cached
                    drop()
                index.resume()

    @kip_only
    def drain(self, timeout: float | None = None) -> bool:
        """Wait until the vector indexes cover every committed write (None: no limit)."""
        return all([index.drain(timeout) for index in self.vector_indexes()])

    # --- queries -------------------------------------------------------------------------
    @kip_only
    def search(self, txn: Any, target: str, text: str, type_name: str | None = None,
               limit: int = 10, *, check: Callable[[], None] | None = None,
               deadline: float | None = None, mode: str = "keyword",
               threshold: float = 0.0) -> list[tuple[int, float]]:
        """(id, score) of the best matches in `txn`'s snapshot; [] for an unknown type.
        `mode` is the mode served (see `mode_served`); hits scoring under `threshold` are
        dropped. `check()` raises when the command's deadline (`deadline`, a
        `time.monotonic()` value) has passed: it is called between the steps of the
        ranking."""
        if self.closed:
            # Its vector indexes were freed: answering from the lexical index alone would
            # silently drop every typo and every meaning match.
            raise KipError(ErrorCode.KIP_4003, "this search index was closed",
                           "Detaching search closes it; Nexus.attach_search() opens a new "
                           "one (a closed service cannot be put back).")
        kind = KIND_CONCEPT if target.upper() == "CONCEPT" else KIND_LINK
        group = None
        if type_name is not None:
            group = txn.symbol_id(type_name)
            if group is None:
                return []
        sem = self.semantic if mode != "keyword" else None
        seq = read_seq(txn)
        ngram = self.keyword_source(txn)
        waits = [self.vectors] if mode != "semantic" and not self.grams else []
        for v in waits + ([sem] if sem else []):
            if (v.applied_seq < seq or v.needs_rebuild) and v.backlog <= self.wait_backlog:
                wait = self.wait_seconds            # read-your-writes for small backlogs
                if deadline is not None:
                    wait = max(0.0, min(wait, deadline - time.monotonic()))
                v.wait(seq, wait)
        if sem is None:
            hits = query.run(txn, ngram, kind, text, group, limit, check=check)
        elif mode == "semantic":
            hits = query.semantic(txn, sem, kind, text, group, limit, check=check)
        else:
            hits = query.hybrid(txn, ngram, sem, kind, text, group, limit, check=check)
        return [(n, score) for n, score in hits if score >= threshold]

    def keyword_source(self, txn: Any) -> query.VectorSource:
        """Where keyword ranking in `txn`'s snapshot takes its typo candidates from: the
        gram postings (the default embedder), else the n-gram vector index."""
        return gram_index.Bound(txn, self.embedder) if self.grams else self.vectors

    # --- maintenance ---------------------------------------------------------------------
    @kip_only
    def reindex(self, progress: Progress | None = None, chunk: int = 5000) -> dict:
        """Rebuild the lexical and vector indexes from the data (`kip reindex`)."""
        with self.host.write_session(privileged=True) as session:
            # Drained under the session's write lock: no write queues a change meanwhile.
            for index in self.vector_indexes():
                index.drain()
            txn = session.txn
            total = len(rebuild_lexical(txn, progress, chunk))
            if self.grams:
                gram_index.rebuild(txn, progress)
            for index in self.vector_indexes():
                if index.build:
                    index.rebuild(txn, _phase(progress, index.prefix))
            seq = self.vectors.record(txn, [], [])
        for index in self.vector_indexes():
            with index.progress:
                index.applied_seq = max(index.applied_seq, seq)
                index.needs_rebuild = False
                index.progress.notify_all()
            index.save()
        report: dict[str, Any] = {"elements": total, "seq": seq}
        if self.semantic is not None:
            report["semantic_embedder"] = self.semantic.embedder.name
        return report

    @kip_only
    def check(self, deep: bool = False, wait: float = CHECK_DRAIN_SECONDS) -> dict:
        """Drift between the data and the indexes (all counts 0 when in step); waits for
        the vector indexer to catch up first (at most `wait` seconds)."""
        # Bounded: a stalled indexer must show up as `vector_lag`, not hang the check.
        deadline = time.monotonic() + wait
        for index in self.vector_indexes():
            index.drain(timeout=max(0.0, deadline - time.monotonic()))
        with self.vectors.lock, self.store.read() as txn:
            elements = set(txn.elements())
            indexed = set(lexical.indexed_ids(txn))
            counted = lexical.doc_count(txn, KIND_CONCEPT) + lexical.doc_count(txn, KIND_LINK)
            seq = read_seq(txn)
            if self.grams:      # no n-gram vectors: the gram postings in their place
                vec_ids, with_grams = self._check_grams(txn, elements, deep)
                no_vec = elements - vec_ids
                bare = set(may_have_vectors(txn, sorted(no_vec)))
                with_grams["vector_lag"] = max(0, seq - self.vectors.applied_seq)
            else:
                vec_ids = self.vectors.ids()
                # The elements without vectors that should have some: not the links (their
                # heads say so: `may_have_vectors`), nor an element with no text to embed
                # (a concept named "" without aliases, which older versions accepted).
                no_vec = elements - vec_ids
                bare = set(may_have_vectors(txn, sorted(no_vec)))
                unvectored = [n for n in bare if self._has_texts(txn, n)]
            report = {
                "elements": len(elements),
                "lexical_missing": len(elements - indexed),
                "lexical_orphans": len(indexed - elements),
                "lexical_count_drift": abs(counted - len(indexed)),
            }
            if self.grams:
                report.update(with_grams)
            else:
                report.update({"vector_missing": len(unvectored),
                               "vector_orphans": len(vec_ids - elements),
                               "vector_lag": max(0, seq - self.vectors.applied_seq)})
            sem = self.semantic
            if sem is not None:     # the semantic index (MODE "semantic"/"hybrid")
                sem_ids = sem.ids()
                no_sem = elements - sem_ids     # (the same links: their heads read once)
                sem_bare = (bare & no_sem).union(
                    may_have_vectors(txn, sorted(no_sem - no_vec)))
                report["semantic_missing"] = sum(1 for n in sem_bare
                                                 if self._has_texts(txn, n))
                report["semantic_orphans"] = len(sem_ids - elements)
                report["semantic_lag"] = max(0, seq - sem.applied_seq)
            if deep:
                report["lexical_stale"] = sum(1 for n in elements & indexed
                                              if lexical.stale(txn, n))
        report["ok"] = not any(v for k, v in report.items() if k not in NOT_DRIFT)
        return report

    def _check_grams(self, txn: Any, elements: set[int], deep: bool
                     ) -> tuple[set[int], dict[str, int]]:
        """(the concepts with gram postings, the drift counts of the gram index, under the
        n-gram vectors' names): `vector_missing` = concepts with a name that have none,
        `vector_orphans` = postings of no element, `gram_unbuilt` = the table was never
        built (a database of the previous code opened by a process that writes nothing: not
        drift, nothing compared; `nexus.ops.check` adds a note);
        deep: `gram_postings_wrong`, the postings that differ from what the names give
        (`gram_index.drift`), and `grams_compared`, the concepts compared."""
        if not gram_index.built(txn):
            # Not drift: a database of the previous code, whose postings the next open for
            # writing builds (`_ensure_grams`); there is nothing to compare yet.
            return set(), {"vector_missing": 0, "vector_orphans": 0, "gram_unbuilt": 1}
        ids, _ = gram_index.posting_ids(txn)
        # (not the links, and a damaged head counts as missing: `may_have_vectors`)
        missing = [n for n in may_have_vectors(txn, sorted(elements - ids))
                   if any(lexical.names(txn, n))]
        out = {"vector_missing": len(missing), "vector_orphans": len(ids - elements),
               "gram_unbuilt": 0}
        if deep:
            wrong, compared = gram_index.drift(txn, may_have_vectors(txn, sorted(elements)))
            out["gram_postings_wrong"] = wrong
            out["grams_compared"] = compared
        return ids, out

    def _has_texts(self, txn: Any, n: int) -> bool:
        """Whether element `n` has a text the vector index embeds (unreadable: yes, so
        that the damage shows)."""
        try:
            doc = element_doc(txn, n)
        except Exception:  # noqa: BLE001 - a damaged record is reported, not raised
            return True
        return doc is None or bool(doc_texts(doc, self.embedder))

    @kip_only
    def save(self) -> None:
        """Drain the vector queue, then save the vector index files."""
        for index in self.vector_indexes():
            index.drain()
            index.save()

    @kip_only
    def close(self, drain: bool = True) -> None:
        """Drain the vector queue (unless `drain` is false), stop the indexer and save the
        vector index. Not draining loses nothing: what the indexer has not applied stays in
        the durable queue, and the next open applies it."""
        self.closed = True
        for index in self.vector_indexes():
            try:
                # Bounded, so a failing indexer cannot hang shutdown; whatever is not
                # applied stays in the durable queue and is applied after the next open.
                # (Nothing to wait for when the files are not saved: a check's process.)
                if drain:
                    index.drain(timeout=CLOSE_DRAIN_SECONDS if index.saving else 0)
            finally:
                index.stop()
            try:
                with index.lock:
                    if index.applied_seq > index.saved_seq or index.unsaved:
                        try:
                            index.save()
                        except KipError as exc:
                            # (e.g. a full disk) The saved files and the durable queue
                            # still cover every change: the next open replays what was
                            # not saved.
                            log.warning("the vector index was not saved at close: %s",
                                        exc.message)
            finally:
                index.release()


class _Stage:
    """What the `stage` calls of one write transaction indexed so far."""
    __slots__ = ("txn", "changed", "gone", "postings", "grams")

    def __init__(self, txn: Any) -> None:
        self.txn = txn
        # The new documents' postings, written once at the end (`lexical.Deferred`)
        self.postings = lexical.Deferred()
        self.changed: list[int] = []       # ids whose vectors must be (re)built
        self.gone: list[int] = []          # ids whose vectors must go
        self.grams = gram_index.Batch()    # the gram postings, written once at the end


def complete_vectors(indexes: list[VectorIndex], ahead: Sequence[Ahead] = ()) -> None:
    """Build the vectors of every committed change now, in the caller's thread (the end
    of a bulk load, its indexer paused): embedded in large batches and inserted with one
    multithreaded usearch `add` per batch (`VectorIndex.fill`; the semantic index's
    inverted file takes them into its delta and trains its lists when saved, `ivf`). A
    failure here leaves the changes queued, as they were: the indexer applies them after
    the load, as it always did, so the load itself (committed) does not fail for it.

    Then each index that changed is saved, before the load returns: a load's vectors are in
    an index held whole in memory (it outgrew the small in-memory delta beside the mapped
    file, `layered`), and saving writes it and maps the file again, freeing that copy
    (~100 MB at N=100k when the semantic index was HNSW; the indexer would do the same once
    the vectors stayed unchanged for `vectors.REMAP_SECONDS`, so the process held it
    meanwhile) — and a crash after the load no longer means embedding everything again on
    open."""
    held = {id(a.index): a for a in ahead}
    for index in indexes:
        try:
            changed = index.fill(held.get(id(index)))
        except Exception:  # noqa: BLE001 - the durable queue still holds every change
            log.exception("search: building a bulk load's vectors failed; the background "
                          "indexer will apply them")
            continue
        if changed:
            try:
                index.save()
            except KipError as exc:     # (the files stay as they were; retried later)
                log.warning("search: saving a bulk load's vectors failed (%s); the indexer "
                            "saves them later", exc.message)


def rebuild_lexical(txn: Any, progress: Progress | None, chunk: int) -> list[int]:
    """Clear the lexical index and write it again from every element of `txn`, `chunk`
    elements at a time (the first part of `reindex`, on every backend); the ids written."""
    if progress:
        progress("clear", 0, 1)
    lexical.clear(txn)
    ids = list(txn.elements())
    total = len(ids)
    held = lexical.Deferred()       # each list written once, at the end
    for i in range(0, total, chunk):
        lexical.write(txn, ids[i:i + chunk], (), deferred=held)
        if progress:
            progress("lexical", min(total, i + chunk), total)
    lexical.finish(txn, held)
    if progress and not total:
        progress("lexical", 0, 0)
    return ids


def _phase(progress: Progress | None, prefix: str) -> Progress | None:
    """`progress` with the semantic index's phase named apart ("semantic vectors")."""
    if progress is None or prefix == "vectors":
        return progress
    return lambda phase, done, total: progress(f"{prefix} {phase}", done, total)


def attach_search(host: Host) -> SearchService:
    """Create the search service of `host` (the engine), open its indexes and start the
    indexer; the engine then registers it as a commit hook."""
    service = SearchService(host)
    service.open()
    return service


def _index_txn(ctx: Any) -> Any:
    """The transaction the lexical index is written in: the store's own (reads need not
    pass through the version log's recorder: the index changes no element)."""
    return getattr(ctx, "store_txn", ctx.txn)


def _searchable(ctx: Any) -> Any:
    """The touched ids whose searchable text may have changed: writes of metadata alone
    (an UPDATE decay sweep) change no document, so they are not re-derived."""
    unsearched = getattr(ctx, "unsearched", None)
    return ctx.touched - unsearched if unsearched else ctx.touched
