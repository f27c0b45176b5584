"""The search service: the indexes kept beside the store, and their lifecycle.

Owns the hooks the engine calls around every write (`before_commit` inside the write
transaction, `after_commit` after it), opening/closing the indexes, `search`, `reindex`
and `check`. It composes `lexical` (postings in the data's transaction), `vectors` (usearch,
caught up from a queue) and the PRIMER cache (`nexus.primer`), which is invalidated from the
same hooks because it is derived from the same writes.

Everything public raises only `KipError`. For the CLI: `reindex(progress)` calls
`progress(phase, done, total)` with phases "clear", "lexical", "vectors"; `check(deep)`
returns drift counts and `"ok"` (deep also recomputes every forward entry: slower).
`opened` tells what opening did: "empty", "loaded", "caught-up" or "rebuilt".
"""
from __future__ import annotations

import functools
import logging
from typing import Any, Callable

from ..errors import KipError, internal_error
from . import lexical, query
from .embed import make_embedder
from .text import KIND_CONCEPT, KIND_LINK
from .vectors import VectorIndex, read_seq

log = logging.getLogger("nexus.search")

Progress = Callable[[str, int, int], None]   # (phase, done, total)
MODES_BASE = ["exact_name", "name_prefix", "alias", "keyword_bm25",
              "fuzzy_typo_tolerant_vector"]


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

    def __init__(self, nexus: Any) -> None:
        from ..primer import PrimerCache
        self.nexus = nexus
        self.store = nexus.store
        self.embedder = make_embedder(getattr(nexus.config, "embedder", None))
        self.vectors = VectorIndex(self.embedder, self.store.path)
        self.primer = PrimerCache()
        self.opened = "empty"

    @kip_only
    def open(self, progress: Progress | None = None) -> None:
        with self.store.read() as txn:
            has_data = txn.max_id() > 0 and (txn.count_concepts() + txn.count_links()) > 0
            unindexed = has_data and not (lexical.doc_count(txn, KIND_CONCEPT)
                                          + lexical.doc_count(txn, KIND_LINK))
        if unindexed:
            # A store written before search existed (or loaded without the hooks).
            log.info("search: indexing an existing store")
            self.vectors.ensure_epoch(self.store)
            self.reindex(progress)
            self.opened = "rebuilt"
            return
        self.opened = self.vectors.open(self.store, progress)

    @property
    def search_modes(self) -> list[str]:
        modes = list(MODES_BASE)
        if self.embedder.contextual:
            modes.append("semantic_vector")
        return modes

    # --- write hooks ---------------------------------------------------------------------
    @kip_only
    def before_commit(self, ctx: Any) -> None:
        """Inside the write txn: postings, the vector queue and the PRIMER invalidation."""
        if not ctx.touched and not ctx.removed:
            return
        changed, gone = lexical.write(ctx.txn, ctx.touched, ctx.removed)
        seq = self.vectors.record(ctx.txn, changed, gone)
        ctx.search_seq = seq
        self.primer.invalidate(ctx.txn, ctx.touched, ctx.removed, seq)

    def after_commit(self, ctx: Any) -> None:
        seq = getattr(ctx, "search_seq", None)
        if seq is None:
            return
        try:
            self.vectors.apply_pending(seq)
            self.vectors.maybe_save()
        except Exception:  # noqa: BLE001 - the commit is done; the queue still holds it
            log.exception("vector index update failed; it will catch up on reopen")

    # --- queries -------------------------------------------------------------------------
    @kip_only
    def search(self, txn: Any, target: str, text: str, type_name: str | None = None,
               limit: int = 10) -> list[tuple[int, float]]:
        """(id, score) of the best matches in `txn`'s snapshot; [] for an unknown type."""
        kind = KIND_CONCEPT if target.upper() == "CONCEPT" else KIND_LINK
        group = None
        if type_name is not None:
            group = txn.symbol_id(type_name)
            if group is None:
                return []
        return query.run(txn, self.vectors, kind, text, group, limit)

    # --- maintenance ---------------------------------------------------------------------
    @kip_only
    def reindex(self, progress: Progress | None = None, chunk: int = 5000) -> dict:
        """Rebuild the lexical and vector indexes from the data (`kip reindex`)."""
        lock = getattr(self.nexus, "_write_lock", None)
        if lock is not None:
            lock.acquire()
        try:
            with self.store.write() as txn:
                if progress:
                    progress("clear", 0, 1)
                lexical.clear(txn)
                ids = list(txn.elements())
                total = len(ids)
                for i in range(0, total, chunk):
                    lexical.write(txn, ids[i:i + chunk], ())
                    if progress:
                        progress("lexical", min(total, i + chunk), total)
                if progress and not total:
                    progress("lexical", 0, 0)
                self.vectors.rebuild(txn, progress)
                seq = self.vectors.record(txn, [], [])
            self.vectors.apply_pending(seq)
            self.primer.clear()
            self.vectors.save()
        finally:
            if lock is not None:
                lock.release()
        return {"elements": total, "seq": seq}

    @kip_only
    def check(self, deep: bool = False) -> dict:
        """Drift between the data and the indexes (all counts 0 when in step)."""
        with self.vectors.lock, self.store.read() as txn:
            elements = set(txn.elements())
            indexed = set(lexical.indexed_ids(txn))
            counted = lexical.doc_count(txn, KIND_CONCEPT) + lexical.doc_count(txn, KIND_LINK)
            vec_ids = self.vectors.ids(KIND_CONCEPT) | self.vectors.ids(KIND_LINK)
            seq = read_seq(txn)
            report = {
                "elements": len(elements),
                "lexical_missing": len(elements - indexed),
                "lexical_orphans": len(indexed - elements),
                "lexical_count_drift": abs(counted - len(indexed)),
                "vector_missing": len(elements - vec_ids),
                "vector_orphans": len(vec_ids - elements),
                "vector_lag": max(0, seq - self.vectors.applied_seq),
            }
            if deep:
                report["lexical_stale"] = sum(1 for n in elements & indexed
                                              if lexical.stale(txn, n))
        report["ok"] = not any(v for k, v in report.items() if k != "elements")
        return report

    @kip_only
    def save(self) -> None:
        self.vectors.save()

    @kip_only
    def close(self) -> None:
        with self.vectors.lock:
            if self.vectors.applied_seq > self.vectors.saved_seq or self.vectors.unsaved:
                self.vectors.save()


def attach_search(nexus: Any) -> SearchService:
    """Create the search service of `nexus`, open (catch up / rebuild) its indexes."""
    service = SearchService(nexus)
    service.open()
    nexus.search = service
    return service
