"""A bulk load's vectors embedded while it goes on (`Ahead`), on a second core.

Owns, for one vector index that builds vectors (`VectorIndex.build`: the semantic index,
and the n-gram one of another embedder), the vectors of the concepts that a bulk load's
chunks created or changed, embedded by a worker process (`embed_proc.EmbedProcess`,
started by the first chunk of PROCESS_MIN texts; a worker thread for smaller chunks, or
when the process cannot be used) chunk by chunk while the load writes its next chunks, and
handed to the index when the load ends (`VectorIndex.fill(ahead)`), which then reads back
and embeds only what they do not cover.

Why: the end of a load used to read every queued concept's document back (one read
transaction per 16k ids) and embed all of them in the loading thread, after the last
commit: ~1/5 of a W1 load with SEARCH at N=100k (bench/RESULTS.md, "Bulk load with
SEARCH"). A chunk's new concepts come with their texts (`lexical_cols.NewConcepts`, the
columns the load wrote), so the embedding can overlap the load on the machine's other
core: in a process, since a thread's GIL hand-offs with the loading thread ate most of that
overlap on a busy machine (`embed_proc`).

Guarantees (the same as without it):

* **only committed vectors** — the worker computes arrays; nothing enters an index before
  `fill`, after the load's commits. A chunk of a write that rolls back is forgotten
  (`rolled_back`).
* **the same vectors** — a concept's texts are `vectors.doc_texts` of the document its
  columns describe (`text.concept_texts`, what `element_doc` builds from the stored
  element); the worker computes the index's own rows (`embed_proc.rows_of`, what
  `VectorIndex.embed_rows` computes; the process with an embedder of the same name).
* **as of the commit** — a job's rows are used only for the ids whose latest queue entry
  is the sequence its write transaction recorded (`recorded`): an id that a later write
  queued again (another writer between the load's batches) is read back as before. An id
  written again by a later chunk of the load after its texts were taken is forgotten here
  and read back too, whatever the lexical index decided about it (`stage`).
* **durability** — unchanged: the queue entries are written in the data's transactions as
  before, so a crash before `fill` saved the index leaves them to the next open's indexer.

A job that failed (the embedder raised, the process died, stalled or could not start)
covers nothing: its ids are read back and embedded by `fill` as before, which reports a
failure as it always did. The process never outlives the load (`close`) or its parent.
"""
from __future__ import annotations

import itertools
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from .embed_proc import PROCESS_MIN, EmbedProcess
from .lexical_cols import NewConcepts
from .text import KIND_CONCEPT, Doc, element_doc
from .vectors import FILL_CHUNK, SLOTS, doc_texts
from ..store.bulk import trim_heap
from ..store.protocol import ConceptHead

log = logging.getLogger("nexus.search")


_TAKEN: Future = Future()     # a job's rows once handed over (freed)
_TAKEN.cancel()


class _Job:
    """The rows one stage handed the worker: per row its element id and key; `rows` the
    index's prepared vectors (`VectorIndex.embed_rows`) once computed; `texts` (a job of
    the worker process) kept until then, for `take` to embed here if the worker is behind."""
    __slots__ = ("ctx", "seq", "ids", "keys", "rows", "texts")

    def __init__(self, ctx: int, ids: np.ndarray, keys: np.ndarray, rows: Future,
                 texts: list[str] | None) -> None:
        self.ctx = ctx
        self.seq = 0                # the write's queue sequence, once recorded
        self.ids = ids
        self.keys = keys
        self.rows = rows
        self.texts = texts
        if texts is not None:
            rows.add_done_callback(self._done)

    def _done(self, _: Future) -> None:
        self.texts = None


class Ahead:
    """The vectors of a bulk load's concepts for one index, embedded by a worker process
    (`embed_proc`; a thread for small chunks, or when the process is not available)."""

    def __init__(self, index: Any) -> None:
        self.index = index
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="nexus-embed")
        self._proc = EmbedProcess(index.embedder, index.layout == "ivf", FILL_CHUNK)
        self._lock = threading.Lock()
        self._jobs: list[_Job] = []
        # id -> the job holding its current texts (one of `_jobs`); an id written again
        # after that is absent (read back by `fill`).
        self._holder: dict[int, _Job] = {}

    # --- the write hooks (the writing thread, inside its transaction) ---------------------
    def stage(self, ctx: Any, txn: Any, written: Iterable[int], changed: Sequence[int],
              new_docs: Iterable[Any]) -> None:
        """A stage of write `ctx` (`SearchService.stage`): forget the ids `written` again
        (touched or removed), then hand the worker the texts of `changed` (the ids whose
        vectors must be rebuilt), taken from the chunk's columns (`NewConcepts`) or, for
        the few ids they do not describe, from the element as `txn` holds it now."""
        with self._lock:
            holder = self._holder
            if holder:
                for n in holder.keys() & set(written):
                    del holder[n]
                for n in changed:
                    holder.pop(n, None)
        if not changed:
            return
        cols: dict[int, tuple[NewConcepts, int]] = {}
        for part in new_docs:
            if isinstance(part, NewConcepts):
                cols.update(zip(part.ids, zip(itertools.repeat(part), itertools.count())))
        embedder = self.index.embedder
        # (the semantic index's embedder: a concept without aliases has one text, its
        # context — what `doc_texts` gives it — so no `Doc` is built for it)
        context_only = bool(getattr(embedder, "context_only", False))
        slots = SLOTS
        ids: list[int] = []
        keys: list[int] = []
        texts: list[str] = []
        for n in changed:
            at = cols.get(n)
            doc: Doc | None
            if at is not None:
                part, i = at
                # (each part's texts worked out once, shared with the lexical derivation:
                # `NewConcepts.texts`, the same values as `concept_texts` of each)
                aliases, _, context = part.texts()[i]
                if context_only and not aliases:
                    if context:
                        ids.append(n)
                        keys.append(n * slots)
                        texts.append(context)
                    continue
                name = part.names[i]
                doc = Doc(n, KIND_CONCEPT, part.type_ids[i], [name] + aliases,
                          vec_texts=[name] + aliases, context=context)
            else:
                doc = _read_doc(txn, n)
                if doc is None:
                    continue        # (fill reads it back: it skips it there too)
            for slot, t in enumerate(doc_texts(doc, embedder)):
                ids.append(n)
                keys.append(n * slots + slot)
                texts.append(t)
        if not texts:
            return
        rows = None
        if len(texts) >= PROCESS_MIN or self._proc.proc is not None:
            rows = self._proc.submit(texts)
        kept = texts if rows is not None else None
        if rows is None:
            rows = self._pool.submit(self._embed, texts)
        job = _Job(id(ctx), np.asarray(ids, dtype=np.int64),
                   np.asarray(keys, dtype=np.uint64), rows, kept)
        with self._lock:
            self._jobs.append(job)
            for n in ids:
                self._holder[n] = job

    def _embed(self, texts: list[str]) -> Any:
        """(the worker) The rows of `texts`; then the pages its buffers held given back:
        freed in this thread's malloc arena, they stayed resident (+~150 MB of peak RSS
        at N=100k)."""
        try:
            return self.index.embed_rows(texts)
        finally:
            del texts
            trim_heap()

    def recorded(self, ctx: Any, seq: int) -> None:
        """Write `ctx` queued its changes under `seq` (inside its transaction)."""
        me = id(ctx)
        with self._lock:
            for job in self._jobs:
                if job.ctx == me and not job.seq:
                    job.seq = seq

    def rolled_back(self, ctx: Any) -> None:
        """Write `ctx` was rolled back: what it staged is forgotten."""
        me = id(ctx)
        with self._lock:
            self._forget([job for job in self._jobs if job.ctx == me])

    def committed(self, ctx: Any) -> None:
        """Write `ctx` committed: its jobs are no longer its (a later write may reuse the
        context's id)."""
        me = id(ctx)
        with self._lock:
            for job in self._jobs:
                if job.ctx == me:
                    job.ctx = 0

    def _forget(self, jobs: list[_Job]) -> None:
        if not jobs:
            return
        drop = set(map(id, jobs))
        self._jobs = [job for job in self._jobs if id(job) not in drop]
        holder = self._holder
        for job in jobs:
            job.rows.cancel()
            for n in job.ids.tolist():
                if holder.get(n) is job:
                    del holder[n]

    # --- the end of the load ---------------------------------------------------------------
    def take(self, latest: dict[int, int]) -> "Held":
        """For `fill`, whose queue names each id of `latest` last under the sequence it
        maps to: the rows this holds of those ids as of that sequence (`Held`). Every
        committed job is handed over at most once."""
        with self._lock:
            jobs = [job for job in self._jobs if job.seq and not job.ctx]
            taken = set(map(id, jobs))
            self._jobs = [job for job in self._jobs if id(job) not in taken]
            # (`_holder` keeps naming the jobs taken: harmless, none is handed over again)
            held = self._holder.get
        covered: set[int] = set()
        keys: list[np.ndarray] = []
        rows: list[Any] = []
        for job, got in zip(jobs, self._results(jobs)):
            job.rows, job.texts = _TAKEN, None
            if got is None:
                continue
            ids = job.ids.tolist()
            seq = job.seq
            with self._lock:
                keep = [i for i, n in enumerate(ids)
                        if held(n) is job and latest.get(n) == seq]
            if keep:
                covered.update(ids[i] for i in keep)
                at = np.asarray(keep, dtype=np.intp) if len(keep) < len(ids) else None
                keys.append(job.keys if at is None else job.keys[at])
                rows.append(got if at is None else _rows_at(got, at))
        return Held(covered, keys, rows)

    def _results(self, jobs: list[_Job]) -> list[Any]:
        """The rows of each of `jobs` (None: its embedding failed; `fill` embeds its ids).
        While the worker process is behind — the first job not done — the last jobs it has
        not started (it takes them in order) are embedded here instead, from the end, so
        that both cores finish the load's embedding (on a busy machine the worker can
        trail the load by seconds)."""
        out: list[Any] = [None] * len(jobs)
        lo, hi = 0, len(jobs)
        while lo < hi:
            first, last = jobs[lo], jobs[hi - 1]
            texts = last.texts
            if hi - lo > 1 and not first.rows.done() and not last.rows.done() and \
                    texts is not None and self._proc.withdraw(last.rows):
                hi -= 1
                out[hi] = self._here(texts)
                continue
            at = lo if first.rows.done() or not last.rows.done() else hi - 1
            try:
                out[at] = self._proc.result(jobs[at].rows)
            except Exception:  # noqa: BLE001 - read back and embedded by `fill` instead
                log.warning("search: embedding a bulk load's chunk ahead failed; its "
                            "vectors are built at the end", exc_info=True)
            if at == lo:
                lo += 1
            else:
                hi -= 1
        return out

    def _here(self, texts: list[str]) -> Any:
        """A job's rows embedded in this thread (None: failed; `fill` embeds its ids)."""
        try:
            return self.index.embed_rows(texts)
        except Exception:  # noqa: BLE001 - read back and embedded by `fill` instead
            log.warning("search: embedding a bulk load's chunk failed; its vectors are "
                        "built at the end", exc_info=True)
            return None

    def close(self) -> None:
        """Stop the workers (what they still compute is dropped)."""
        with self._lock:
            self._forget(list(self._jobs))
        self._proc.close()
        self._pool.shutdown(wait=True, cancel_futures=True)


def _read_doc(txn: Any, n: int) -> Doc | None:
    """A concept's document as `txn` holds it (None: not a concept, absent or unreadable:
    `fill` reads it back and decides, as before)."""
    try:
        if type(txn.head(n)) is not ConceptHead:
            return None
        return element_doc(txn, n)
    except Exception:  # noqa: BLE001 - a damaged record: left to `fill`, which logs it
        return None


def _rows_at(rows: Any, at: Any) -> Any:
    """`rows` (`VectorIndex.embed_rows`: an array, or an IVF's (int8 rows, inverse norms))
    at the positions or slice `at`."""
    return tuple(r[at] for r in rows) if isinstance(rows, tuple) else rows[at]


def _joined(parts: list[Any]) -> Any:
    if isinstance(parts[0], tuple):
        return tuple(np.concatenate(p) for p in zip(*parts))
    return np.concatenate(parts)


class Held:
    """What `Ahead.take` hands `fill`: the ids it covers, their keys (ascending) and rows."""

    def __init__(self, covered: set[int], keys: list[np.ndarray], rows: list[Any]) -> None:
        self.covered = covered
        if keys:
            k = np.concatenate(keys)
            joined = _joined(rows)
            if len(k) > 1 and not bool((k[1:] >= k[:-1]).all()):
                order = np.argsort(k, kind="stable")
                k, joined = k[order], _rows_at(joined, order)
            # (a load's chunks come in id order: their keys are then ascending already,
            # and the rows, ~25 MB at N=100k, are not gathered again)
            self.keys, self.rows = k, joined
        else:
            self.keys, self.rows = np.zeros(0, dtype=np.uint64), None

    def slices(self, ids: list[int], chunk: int) -> Iterator[tuple[list[int], Any, Any]]:
        """`ids` (sorted) `chunk` at a time, each slice with the keys and rows held of its
        ids (the keys of ids lo..hi are the range [lo * SLOTS, (hi + 1) * SLOTS))."""
        for i in range(0, len(ids), chunk):
            part = ids[i:i + chunk]
            lo, hi = np.searchsorted(self.keys, [part[0] * SLOTS, (part[-1] + 1) * SLOTS])
            if self.rows is None or lo == hi:
                yield part, self.keys[:0], None
            else:
                yield part, self.keys[lo:hi], _rows_at(self.rows, slice(lo, hi))

    @staticmethod
    def merged(keys: np.ndarray, rows: Any, upserts: list[tuple[int, int, list[str]]],
               index: Any) -> tuple[np.ndarray, Any]:
        """`keys`/`rows` with those of `upserts` ((kind, id, texts) read back: embedded
        now), in key order."""
        more = [(n * SLOTS + slot, t) for kind, n, texts in upserts if kind == KIND_CONCEPT
                for slot, t in enumerate(texts)]
        if not more:
            return keys, rows
        new_keys = np.array([k for k, _ in more], dtype=np.uint64)
        new_rows = index.embed_rows([t for _, t in more])
        if rows is None:
            return new_keys, new_rows
        k = np.concatenate([keys, new_keys])
        order = np.argsort(k, kind="stable")
        return k[order], _rows_at(_joined([rows, new_rows]), order)
