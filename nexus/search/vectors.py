"""The vector index: embedded names in usearch HNSW (n-gram) or IVF (semantic: `ivf`),
kept by a background indexer.

Owns the in-memory usearch index of the concepts (links have none, see below), its file
beside the LMDB environment, the indexer thread that fills it, and the bookkeeping that
keeps it in step with the data:

* Every write transaction that changes searchable text takes the next *change sequence*
  number and records it in the `vecq` aux table inside the data's own transaction
  (`vecq b"S"` = the last sequence; `vecq b"q" seq` = the ids whose vectors changed).
  So the queue is exactly as durable as the data, and a write pays only for that record.
* Embedding and HNSW insertion happen off the write path, in one indexer thread per index
  (`indexer.Indexer`): woken after each commit, it reads the queue entries after `applied_seq`,
  re-reads those elements from a current snapshot (short read transactions, a slice of ids
  at a time), embeds them and updates usearch, then advances `applied_seq`. Replaying an id
  from a newer snapshot than its entry is harmless: later entries name it again.
* Vectors are therefore *eventually consistent*: SEARCH uses the lexical index (always in
  step, transactional) plus whatever vectors are indexed. A SEARCH whose snapshot is ahead
  of the vectors waits for the indexer while the backlog is small (read-your-writes for an
  agent's own writes; `SearchService.wait_seconds`, `wait_backlog`), and otherwise answers
  at once from what is there. `drain()` waits for the indexer to catch up; `close()`,
  `reindex()` and `check()` drain first.
* `save()` writes `vectors.concepts.usearch` and then `vectors.json` recording the sequence
  the files cover. The indexer saves periodically (after SAVE_EVERY changed vectors or
  SAVE_SECONDS) and on close, never on every commit: the queue makes that safe.
* On open, the saved files are loaded and every queued change after their sequence is left
  to the indexer (`opened` = "caught-up"); when the files are missing, foreign (another
  embedder, another database) or older than what the queue still holds, the indexer
  rebuilds them from the data (`opened` = "rebuilt"). Queue entries the saved files cover
  are pruned by later writes. A crash at any point loses no vector for good.

Each concept has up to SLOTS vectors (its name, its aliases, and for contextual embedders
"name: description", each distinct text once; the semantic index's one, "name:
description", only: `doc_texts`), under usearch keys
`id * SLOTS + slot`; a document's similarity is its best slot's. Links have no vectors
(FORMAT 2; files of FORMAT 1, which had one per link, are rebuilt on open): SEARCH
PROPOSITION takes its vector candidates from the links of the query's nearest concepts and
embeds their text when ranking them (`nexus.search.query._link_candidates`). So links
are never queued either (`lexical.write` returns only concepts' ids), and there is no
propositions index: the empty `vectors.propositions.usearch` that FORMAT-2 saves wrote
beside it is removed by the next save. Readers search the in-memory index under a lock;
the caller validates every hit
against its own snapshot, so a vector that is ahead of or behind a reader is harmless.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import struct
import threading
import time
from typing import Any, Callable, ContextManager, Iterable

import msgpack
import numpy as np
from usearch.index import Index

from ..errors import ErrorCode, KipError
from .embed import Embedder
from .embed_proc import rows_of
from .ivf import IVFIndex
from .indexer import QUIET_BACKLOG, Indexer
from .layered import LayeredIndex
from ..store.protocol import ConceptHead, LinkHead
from .text import KIND_CONCEPT, Doc

log = logging.getLogger("nexus.search")

SLOTS = 8
EXPANSION_ADD = 128
EXPANSION_SEARCH = 256
FORMAT = 2                   # 2: no link vectors, no duplicate slots (1: rebuilt on open)
SAVE_EVERY = 50_000          # changed vectors between periodic saves
SAVE_SECONDS = 300.0         # ... or this long after the first unsaved change
REMAP_SECONDS = 5.0          # ... or, when an index left its mapped file, once no vector
#                              changed for this long (`layered`: saved, it is mapped again)
ADD_CHUNK = 2048             # vectors embedded and inserted per lock hold
ADD_THREADS = 2              # usearch insertion threads
FILL_CHUNK = 16_384          # ids read, embedded and inserted per step of `fill` (bulk load)
PRUNE_PER_TXN = 256          # queue entries a write removes at most (bounds write cost)
_U64 = struct.Struct(">Q")
KEY_SEQ, KEY_EPOCH, KEY_PRUNED = b"S", b"E", b"P"
KIND_NAMES = ("concepts",)      # the indexes (`indexes[KIND_CONCEPT]`) and their files
_LEGACY_FILES = ("propositions",)   # written, empty, by FORMAT-2 saves before: removed


def read_seq(txn: Any) -> int:
    raw = txn.aux("vecq").get(KEY_SEQ)
    return _U64.unpack(raw)[0] if raw else 0


def doc_texts(doc: Doc, embedder: Embedder) -> list[str]:
    """The texts an element gets a vector for, one per slot: a concept's name and aliases
    and, for contextual embedders, "name: description" — each distinct text once (a
    concept without a description, or an alias equal to its name, gave two identical
    vectors before FORMAT 2). An embedder that is `context_only` (the semantic index's
    WordLlama) gets "name: description" (the name alone without a description) and each
    alias: no vector of the bare name, which the n-gram index and the lexical one serve
    (with typos) and which crowded the paraphrases' neighbours out (bench/RESULTS.md, "One
    semantic vector per concept"), and a ranking embeds its few candidates' names
    itself (`nexus.search.query._name_similarity`). Links get none: SEARCH PROPOSITION ranks
    them from their ends' vectors and their text (`nexus.search.query._link_candidates`)."""
    if doc.kind != KIND_CONCEPT:
        return []
    if getattr(embedder, "context_only", False):
        # Aliases keep a vector each: an alias is a grounding field every mode must find
        # (KIP §5.2.2), and no description is written around it (the bench's 100k set
        # has none; agents add a few per concept).
        name = doc.vec_texts[0] if doc.vec_texts else ""
        first = [doc.context] if doc.context else []
        return list(dict.fromkeys(
            first + [t for t in doc.vec_texts[1:] if t and t != name]))[:SLOTS]
    texts = list(dict.fromkeys(t for t in doc.vec_texts if t))[
        : SLOTS - (1 if embedder.contextual else 0)]
    if embedder.contextual and doc.context and doc.context not in texts:
        texts.append(doc.context)
    return texts


def may_have_vectors(txn: Any, ids: Iterable[int]) -> list[int]:
    """The ids of `ids` that may have vectors: every one but the links (a head read each;
    no document is built). What a check compares with the vectors, so that it never builds
    the documents of the links — 5/6 of the elements of a typical graph — to learn that
    they have no vector text. A head that cannot be read is kept: its damage then shows
    where its texts are read, as before."""
    out: list[int] = []
    head = txn.head
    prefetch = getattr(txn, "prefetch_elements", None)     # (PostgreSQL: a statement
    ids = list(ids)                                         #  per chunk, not per id)
    for i in range(0, len(ids), FILL_CHUNK):
        part = ids[i:i + FILL_CHUNK]
        if prefetch is not None:
            prefetch(part, ends=False)
        for n in part:
            try:
                if type(head(n)) is LinkHead:
                    continue
            except Exception:  # noqa: BLE001 - a damaged record is reported, not raised
                pass
            out.append(n)
    return out


class VectorIndex:
    def __init__(self, embedder: Embedder, directory: str | None,
                 prefix: str = "vectors", build: bool = True) -> None:
        self.embedder = embedder
        # The semantic index is an inverted file (`ivf`: built in seconds by a bulk load,
        # better recall on paraphrases), the n-gram one HNSW (bench/RESULTS.md).
        self.layout = "ivf" if prefix == "semantic" else "hnsw"
        # False: the queue only, no vectors (the default embedder: `gram_index`); a save
        # writes the watermark alone, removing an older file.
        self.build = build
        self.dir = directory
        self.prefix = prefix      # file names: "<prefix>.concepts.usearch", "<prefix>.json"
        # Another index that reads the same queue (the semantic one): `record` prunes only
        # the entries both have saved. Set by the search service.
        self.follower: VectorIndex | None = None
        self.lock = threading.RLock()          # guards the usearch indexes and counters
        self.progress = threading.Condition(self.lock)   # notified when applied_seq moves
        self.indexes = [self._new()]
        self.applied_seq = 0      # every committed change <= this is in memory
        self.saved_seq = 0        # the files on disk cover every change <= this
        self.epoch = b""
        self.backlog = 0          # ids queued by commits and not applied yet (approximate)
        self.needs_rebuild = False
        self.unsaved = 0
        self.first_unsaved = 0.0
        self.last_change = 0.0
        self.store: Any = None
        self.indexer: Indexer | None = None
        self.error: BaseException | None = None   # the indexer's last failure (logged)
        self.paused = 0           # > 0 while bulk loads run (see pause())
        self.saving = True        # False: never write the files (a `kip check` process)
        self.waiters = 0          # readers waiting in wait() (the indexer then starts at once)
        self._pause_lock = threading.Lock()
        # One catch-up at a time: the indexer's, or a bulk load's `fill` in its own thread.
        self._catching = threading.Lock()

    def _new(self) -> Any:
        """A fresh, empty index of one kind (in memory until saved; see `layered`)."""
        if self.layout == "ivf":
            return IVFIndex(self.embedder.dim, self.dir is None)
        return LayeredIndex(self._usearch)

    def fresh_index(self) -> Any:
        """A new, empty index of the kind this one holds (for measurements: bench/)."""
        return self._new()

    def _usearch(self) -> Index:
        # Measured on 212k name vectors of the 100k-concept bench graph (typo queries, is
        # the target among the 40 neighbours; exact search: 0.995): expansion_add 48 builds
        # twice as fast but its graph strands typo'd queries in the wrong region (0.88 even
        # with a wide search beam); 128 gives 0.955 at beam 96 and 0.99 at beam 256
        # (0.65 ms). i8 quantisation costs no recall on these vectors and searches fastest.
        return Index(ndim=self.embedder.dim, metric="cos", dtype="i8", connectivity=16,
                     expansion_add=EXPANSION_ADD, expansion_search=EXPANSION_SEARCH)

    def _paths(self) -> tuple[list[str], str]:
        assert self.dir is not None
        ext = "usearch" if self.layout == "hnsw" else self.layout
        return ([os.path.join(self.dir, f"{self.prefix}.{k}.{ext}") for k in KIND_NAMES],
                os.path.join(self.dir, f"{self.prefix}.json"))

    # --- write path (inside the data's write transaction) --------------------------------
    def record(self, txn: Any, changed: Iterable[int], gone: Iterable[int]) -> int:
        """Inside the write txn: take the next sequence, queue the changed ids, prune what
        the saved files cover. Returns the sequence."""
        vq = txn.aux("vecq")
        vq.prefetch([KEY_SEQ, KEY_PRUNED])      # (both read below: one round trip)
        seq = read_seq(txn) + 1
        vq.put(KEY_SEQ, _U64.pack(seq))
        changed, gone = list(changed), list(gone)
        if changed or gone:
            vq.put(b"q" + _U64.pack(seq), msgpack.packb([changed, gone]))
        upto = self.saved_seq if self.dir is not None else self.applied_seq
        if self.follower is not None:
            f = self.follower
            upto = min(upto, f.saved_seq if f.dir is not None else f.applied_seq)
        raw = vq.get(KEY_PRUNED)
        pruned = _U64.unpack(raw)[0] if raw else 0
        if upto > pruned:
            # Entries up to `upto` are covered by the saved files: drop at most
            # PRUNE_PER_TXN of them (bounded write cost); when none is left, the mark moves
            # to `upto` so that later writes do not look again.
            doomed: list[int] = []
            last = upto
            for key, _ in vq.scan(b"q"):
                s = _U64.unpack(key[1:])[0]
                if s > upto:
                    break
                if len(doomed) == PRUNE_PER_TXN:
                    last = doomed[-1]
                    break
                doomed.append(s)
            for s in doomed:
                vq.delete(b"q" + _U64.pack(s))
            vq.put(KEY_PRUNED, _U64.pack(last))
        return seq

    def committed(self, count: int) -> None:
        """After a commit that queued `count` ids: wake the indexer."""
        self.backlog += count           # approximate: no lock (the indexer may hold it)
        if self.indexer is not None:
            self.indexer.committed(self.backlog >= QUIET_BACKLOG)

    def pause(self) -> None:
        """Hold the indexer back (a bulk load is running): nestable, undone by `resume`.

        Why: the load's write thread and the indexer share the GIL, and every LMDB read
        releases it (py-lmdb pre-faults the value's page unlocked), so each read of the
        load's search indexing waited for the indexer's next switch: the same load took
        ~1.4x longer wall time with the indexer running beside it (10k peers graph, 2
        cores). Paused, the indexer catches up after the load, in large batches; SEARCH
        meanwhile answers from the lexical index and the vectors indexed so far, without
        waiting for them."""
        with self._pause_lock:
            self.paused += 1

    def resume(self) -> None:
        with self._pause_lock:
            self.paused = max(0, self.paused - 1)
            if self.paused:
                return
        if self.indexer is not None:
            self.indexer.wake()

    # --- the indexer's work --------------------------------------------------------------
    def start(self, store: Any) -> None:
        """Start the indexer thread over `store` (after open())."""
        self.store = store
        if self.indexer is None:
            self.indexer = Indexer(self)
            self.indexer.start()
            self.indexer.wake()

    def catch_up(self, chunk: int = ADD_CHUNK) -> bool:
        """Apply every change committed so far (the indexer's job; also callable directly).
        Returns whether there was anything to do."""
        with self._catching:
            return self._catch_up(chunk)

    def fill(self, ahead: Any = None) -> bool:
        """Apply every committed change now, in the caller's thread, in large steps: what a
        bulk load does before it returns (while the indexer is paused), so that its vectors
        are complete when it ends instead of caught up in the background. Each step reads
        FILL_CHUNK ids in one read transaction; their texts are embedded and inserted
        ADD_CHUNK at a time, as the indexer does. `ahead` (`ahead.Ahead`): the vectors the
        load's chunks had embedded meanwhile; only the ids it does not cover are read back
        and embedded here. Returns whether there was anything to do."""
        if self.store is None:          # not opened: nothing is queued for it
            return False
        with self._catching:
            return self._catch_up(FILL_CHUNK, ahead if self.build else None)

    def _catch_up(self, chunk: int, ahead: Any = None) -> bool:
        store = self.store
        if not self.build:              # the queue is only marked applied
            with store.read() as txn:
                seq = read_seq(txn)
            with self.progress:
                moved = seq > self.applied_seq or self.needs_rebuild
                self.applied_seq = max(self.applied_seq, seq)
                self.backlog = 0
                self.needs_rebuild = False
                if moved:
                    self._dirty(1)
                self.progress.notify_all()
            return moved
        upserts: list[tuple[int, int, list[str]]] | None = None
        latest: dict[int, int] | None = None     # (with `ahead`) id -> its last sequence
        with store.read() as txn:
            txn.aux("vecq").prefetch([KEY_SEQ, KEY_PRUNED])     # (both read: one round trip)
            seq = read_seq(txn)
            if self.needs_rebuild:
                ids: list[int] | None = None
                top = txn.max_id()
            else:
                if seq <= self.applied_seq:
                    return False
                latest = {} if ahead is not None else None
                ids = self._queued_since(txn, self.applied_seq, latest)
                if ids is None:             # the queue no longer reaches back: rebuild
                    self.needs_rebuild = True
                    top = txn.max_id()
                elif len(ids) <= chunk and not latest:  # the usual small catch-up: read
                    upserts = self._docs(txn, ids)      # in this snapshot
        if latest and ids is not None:
            # The rows a bulk load's chunks had embedded for the queue of this snapshot
            # (`ahead`: not those of ids queued again since); the rest read back (in later
            # snapshots: harmless, as for any catch-up) and embedded here. Slice by slice
            # as below, each slice's rows inserted in key order: the same index.
            held = ahead.take(latest)
            for part, keys, rows in held.slices(ids, chunk):
                rest = [n for n in part if n not in held.covered]
                if rest:
                    with store.read() as txn:
                        keys, rows = held.merged(keys, rows, self._docs(txn, rest), self)
                self._drop(part)
                self._add_rows(keys, rows)
                with self.lock:
                    self.backlog = max(0, self.backlog - len(part))
            ids = []
        if upserts is not None:
            assert ids is not None
            me = threading.current_thread()
            if isinstance(me, Indexer) and (self.paused or me is not self.indexer):
                return False
            self._drop(ids)
            self._add(upserts)
            with self.lock:
                self.backlog = max(0, self.backlog - len(ids))
        elif ids is None:
            self._rebuild_from(store, top, None)
            with self.lock:
                self.needs_rebuild = False
        else:
            for i in range(0, len(ids), chunk):
                me = threading.current_thread()
                if isinstance(me, Indexer) and (self.paused or me is not self.indexer):
                    return False        # paused or stopped part way: resumed from
                    #                     applied_seq later
                part = ids[i:i + chunk]
                with store.read() as txn:
                    upserts = self._docs(txn, part)
                self._drop(part)
                self._add(upserts)
                with self.lock:
                    self.backlog = max(0, self.backlog - len(part))
        with self.progress:
            self.applied_seq = max(self.applied_seq, seq)
            if ids is None:
                self.backlog = 0
            self.progress.notify_all()
        return True

    def _docs(self, txn: Any, ids: Iterable[int]) -> list[tuple[int, int, list[str]]]:
        from .text import element_doc
        ids = list(ids)
        # A store whose reads are round trips (PostgreSQL) reads the elements and their
        # links' ends in two statements, instead of a few statements per element.
        prefetch = getattr(txn, "prefetch_elements", None)
        if prefetch is not None:
            prefetch(ids)
        out = []
        for n in ids:
            try:
                if type(txn.head(n)) is not ConceptHead:
                    continue        # (absent, or a link: links have no vectors, doc_texts)
                doc = element_doc(txn, n)
            except Exception:  # noqa: BLE001 - a damaged record must not stall the queue
                # Skipped: it has no vector, which `kip check` reports (vector_missing)
                # beside the damaged record itself; retrying it would block every later change.
                log.warning("vector indexer: element %d cannot be read; skipped", n,
                            exc_info=True)
                continue
            if doc is not None:
                out.append((doc.kind, n, doc_texts(doc, self.embedder)))
        return out

    def wait(self, seq: int, timeout: float | None) -> bool:
        """Wait until every change up to `seq` is applied (at most `timeout` seconds, None:
        no limit). Returns whether it is."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.progress:
            if self.applied_seq >= seq and not self.needs_rebuild:
                return True
            self.waiters += 1
            try:
                if self.indexer is not None:
                    self.indexer.wake()     # someone waits: no quiet period
                while self.applied_seq < seq or self.needs_rebuild:
                    if self.indexer is None or not self.indexer.is_alive() or self.paused:
                        return False
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self.progress.wait(left if left is None or left < 1.0 else 1.0)
                return True
            finally:
                self.waiters -= 1

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until the vectors cover every committed change (reindex, check, close)."""
        if self.store is None:
            return True
        with self.store.read() as txn:
            seq = read_seq(txn)
        if self.applied_seq >= seq and not self.needs_rebuild:
            return True
        if self.indexer is None or not self.indexer.is_alive():
            self.catch_up()                 # no thread (stopped): do it here
            return True
        self.indexer.wake()
        return self.wait(seq, timeout)

    def stop(self) -> None:
        """Stop the indexer thread (after draining, when `close()` asks)."""
        indexer, self.indexer = self.indexer, None
        if indexer is not None:
            indexer.stop()

    def release(self) -> None:
        """Free the in-memory indexes (after `stop` and `save`, when the database closes):
        a usearch index that holds any vector keeps a 16 MB arena mapped, and a closed
        database may stay reachable (reference cycles) until the cyclic GC runs — many
        spaces opened and closed in one server must not keep those arenas. Empty
        replacements map nothing."""
        with self.lock:
            self.indexes = [self._new()]
            self.needs_rebuild = True       # nothing in memory is usable any more

    def _drop(self, ids: Iterable[int]) -> None:
        keys = (np.fromiter(ids, dtype=np.uint64)[:, None] * SLOTS
                + np.arange(SLOTS, dtype=np.uint64)[None, :]).ravel()
        if not len(keys):
            return
        with self.lock:
            for ix in self.indexes:
                if len(ix):
                    present = keys[np.asarray(ix.contains(keys), dtype=bool)]
                    if len(present):
                        ix.remove(present)
                        self._dirty(len(present))

    def _add(self, upserts: list[tuple[int, int, list[str]]], indexes: list | None = None
             ) -> None:
        """Embed and insert the texts of `upserts` ((kind, id, texts): concepts' only)."""
        target = (self.indexes if indexes is None else indexes)[KIND_CONCEPT]
        keys: list[int] = []
        texts: list[str] = []
        for kind, n, ts in upserts:
            if kind == KIND_CONCEPT:
                for slot, t in enumerate(ts):
                    keys.append(n * SLOTS + slot)
                    texts.append(t)
        for i in range(0, len(keys), ADD_CHUNK):
            vecs = self.embedder.embed(texts[i:i + ADD_CHUNK])
            chunk = np.asarray(keys[i:i + ADD_CHUNK], dtype=np.uint64)
            with self.lock:
                target.add(chunk, vecs, threads=ADD_THREADS)
                self._dirty(len(chunk))

    def embed_rows(self, texts: list[str]) -> Any:
        """`texts`' vectors as this index stores them (`_add_rows`): `embed_proc.rows_of`,
        FILL_CHUNK at a time (also what a bulk load's worker process computes: `ahead`)."""
        return rows_of(self.embedder, texts, self.layout == "ivf", FILL_CHUNK)

    def _add_rows(self, keys: np.ndarray, rows: Any) -> None:
        """Insert `embed_rows`' rows under `keys`, ADD_CHUNK at a time."""
        for i in range(0, len(keys), ADD_CHUNK):
            part = slice(i, i + ADD_CHUNK)
            with self.lock:
                target = self.indexes[KIND_CONCEPT]
                if self.layout == "ivf":
                    target.add_rows(keys[part], rows[0][part], rows[1][part])
                else:
                    target.add(keys[part], rows[part], threads=ADD_THREADS)
                self._dirty(len(keys[part]))

    def _dirty(self, count: int) -> None:
        now = time.monotonic()
        if not self.unsaved:
            self.first_unsaved = now
        self.unsaved += count
        self.last_change = now

    def maybe_save(self) -> None:
        """The indexer's periodic save. Not while a bulk load runs (`paused`): its `fill`
        inserts into the index while the indexer idles beside it, and a save there mapped
        the file again, so the fill's next adds went to a small delta that then
        materialised — loading the file back — every SAVE_EVERY vectors (at N=100k, a
        third of the load's CPU). The load saves once when its vectors are complete
        (`service.complete_vectors`); until then the durable queue covers them."""
        if self.dir is None or not self.unsaved or self.paused:
            return
        now = time.monotonic()
        if self.unsaved >= SAVE_EVERY or now - self.first_unsaved > SAVE_SECONDS or (
                now - self.last_change > REMAP_SECONDS
                and not all(ix.is_mapped for ix in self.indexes)):
            self.save()

    # --- persistence ---------------------------------------------------------------------
    def save(self) -> None:
        """Write both indexes, then the watermark (an index newer than its watermark is
        harmless: replaying a change twice gives the same vectors)."""
        if self.dir is None or not self.saving:
            return
        files, meta_path = self._paths()
        with self.lock:
            if self.needs_rebuild:          # the in-memory indexes are not usable yet
                return
            try:
                for ix, path in zip(self.indexes, files):
                    if not self.build:
                        with contextlib.suppress(FileNotFoundError):
                            os.remove(path)
                        continue
                    if ix.unchanged_since_saved(path):
                        continue                # mapped from that file: nothing to write
                    ix.save(path + ".tmp")
                    os.replace(path + ".tmp", path)
                meta = {"format": FORMAT, "embedder": self.embedder.name,
                        "dim": self.embedder.dim, "seq": self.applied_seq,
                        "layout": self.layout,
                        "epoch": self.epoch.hex()}
                with open(meta_path + ".tmp", "w") as f:
                    json.dump(meta, f)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(meta_path + ".tmp", meta_path)
                for legacy in _LEGACY_FILES + (("concepts",) if self.layout == "ivf" else ()):
                    with contextlib.suppress(FileNotFoundError):   # (after the watermark;
                        os.remove(os.path.join(self.dir,   # an HNSW file before IVF)
                                               f"{self.prefix}.{legacy}.usearch"))
            except (OSError, RuntimeError) as exc:
                for path in [*files, meta_path]:        # no half-written file stays
                    with contextlib.suppress(OSError):
                        os.remove(path + ".tmp")
                raise KipError(ErrorCode.KIP_4003, f"cannot save the vector index: {exc}",
                               "Check free disk space and permissions beside the store; "
                               "`kip reindex` rebuilds the index.") from None
            self.saved_seq = self.applied_seq
            self.unsaved = 0
            if self.build:
                self._remap(files)

    def _remap(self, files: list[str]) -> None:
        """After a save: map each index from the file just written, freeing its in-memory
        copy (`layered`); one that cannot be mapped stays in memory, as it was."""
        for ix, path in zip(self.indexes, files):
            if ix.unchanged_since_saved(path):
                continue
            try:
                ix.remap(path)
            except (OSError, RuntimeError, ValueError) as exc:
                log.warning("vector index %s not memory-mapped (%s); kept in memory",
                            path, exc)

    def open(self, store: Any, write: Callable[[], ContextManager[Any]],
             progress: Callable | None = None) -> str:
        """Load the saved files, leaving the changes queued after them (or a rebuild) to the
        indexer. Returns what it found: "empty", "loaded", "caught-up" (changes to replay)
        or "rebuilt" (to rebuild)."""
        self.ensure_epoch(store, write)
        self.store = store
        with store.read() as txn:
            seq = read_seq(txn)
            has_data = txn.max_id() > 0
            meta = self._load(txn, seq) if self.dir is not None else None
            if meta is not None:
                todo = self._queued_since(txn, meta)
                if todo is not None:
                    self.saved_seq = self.applied_seq = meta
                    self.backlog = len(todo)
                    return "caught-up" if todo else "loaded"
            if not has_data:
                self.applied_seq = seq
                return "empty"
            top = txn.max_id()
        with self.lock:
            self.indexes = [self._new()]
            self.applied_seq = seq
            self.needs_rebuild = True
            self.backlog = top
        return "rebuilt"

    def ensure_epoch(self, store: Any, write: Callable[[], ContextManager[Any]]) -> None:
        """Read (or create) the random id of this database that saved files must carry, so
        that files beside a replaced or restored database are never taken for its own."""
        with store.read() as txn:
            raw = txn.aux("vecq").get(KEY_EPOCH)
        if raw is None:
            with write() as w:        # the engine's write session (one write path)
                raw = w.aux("vecq").get(KEY_EPOCH)
                if raw is None:
                    raw = secrets.token_bytes(16)
                    w.aux("vecq").put(KEY_EPOCH, raw)
        self.epoch = raw

    def _load(self, txn: Any, seq: int) -> int | None:
        """The sequence covered by usable saved files (loaded into memory), or None."""
        files, meta_path = self._paths()
        try:
            with open(meta_path) as f:
                meta = json.load(f)
            if (meta.get("format") != FORMAT or meta.get("embedder") != self.embedder.name
                    or meta.get("layout", "hnsw") != self.layout
                    or meta.get("dim") != self.embedder.dim
                    or meta.get("epoch") != self.epoch.hex()
                    or not isinstance(meta.get("seq"), int) or meta["seq"] > seq):
                return None
            loaded = []
            for path in files if self.build else ():
                # Memory-mapped, not read into the heap (`layered`: changes go to a delta).
                ix = IVFIndex.mapped(self._new, path) if self.layout == "ivf" else \
                    LayeredIndex.mapped(self._usearch, path)
                ix.expansion_search = EXPANSION_SEARCH
                loaded.append(ix)
        except (OSError, ValueError, RuntimeError) as exc:
            if os.path.exists(meta_path):
                log.warning("vector index files unusable (%s); rebuilding", exc)
            return None
        if self.build:
            self.indexes = loaded
        return meta["seq"]

    def _queued_since(self, txn: Any, saved: int, latest: dict[int, int] | None = None
                      ) -> list[int] | None:
        """Ids changed after `saved`, or None when the queue no longer reaches back there
        (`latest`, when given, gets each id's last sequence)."""
        vq = txn.aux("vecq")
        raw = vq.get(KEY_PRUNED)
        if raw and _U64.unpack(raw)[0] > saved:
            return None
        ids: set[int] = set()
        for key, value in vq.scan(b"q", start=b"q" + _U64.pack(saved + 1)):
            touched, gone = msgpack.unpackb(value)
            ids.update(touched)
            ids.update(gone)
            if latest is not None:
                at = _U64.unpack(key[1:])[0]
                latest.update(dict.fromkeys(touched, at))
                latest.update(dict.fromkeys(gone, at))
        return sorted(ids)

    def rebuild(self, txn: Any, progress: Callable | None = None, chunk: int = 4096) -> None:
        """Re-embed every element of `txn`'s snapshot into fresh indexes (reindex)."""
        self._rebuild_from(self.store, txn.max_id(), progress, txn=txn, chunk=chunk,
                           total=txn.count_concepts() + txn.count_links())

    def _rebuild_from(self, store: Any, top: int, progress: Callable | None, txn: Any = None,
                      chunk: int = 4096, total: int = 0) -> None:
        """Fresh indexes over the elements with ids 1..top, read `chunk` ids at a time (from
        `txn`, or from a short read transaction of `store` per slice), then swapped in."""
        fresh = [self._new()]
        done = 0
        for lo in range(1, top + 1, chunk) if self.build else ():
            part = range(lo, min(top, lo + chunk - 1) + 1)
            with contextlib.nullcontext(txn) if txn is not None else store.read() as t:
                upserts = self._docs(t, part)
                # (progress counts elements; links are read but get no vectors)
                done += sum(1 for n in part if t.head(n) is not None) if progress else 0
            self._add(upserts, fresh)
            if progress:
                progress("vectors", done, max(total, done))
        with self.lock:
            self.indexes = fresh
            self._dirty(1)
        if progress:
            progress("vectors", done, max(total, done))

    # --- read path -----------------------------------------------------------------------
    def query_vector(self, text: str) -> np.ndarray:
        """The query's vector (an embedder may embed queries apart: `embed_query`)."""
        embed_query = getattr(self.embedder, "embed_query", None)
        if embed_query is not None:
            return np.asarray(embed_query(text), dtype=np.float32)
        return self.embedder.embed([text])[0]

    def knn(self, kind: int, qvec: np.ndarray, count: int, expansion: int | None = None
            ) -> dict[int, float]:
        """id → similarity in [0, 1] of the nearest documents (best slot per id), searched
        with the index's EXPANSION_SEARCH or, when given, `expansion` (a narrower search:
        faster, and more likely to miss a near neighbour)."""
        if kind != KIND_CONCEPT:
            return {}                   # links have no vectors
        ix = self.indexes[kind]
        with self.lock:
            if not len(ix):
                return {}
            if expansion is None:
                m = ix.search(qvec, min(count, len(ix)))
            else:
                ix.expansion_search = expansion
                try:
                    m = ix.search(qvec, min(count, len(ix)))
                finally:
                    ix.expansion_search = EXPANSION_SEARCH
            keys, dists = m.keys, m.distances
        out: dict[int, float] = {}
        for key, dist in zip(keys.tolist(), dists.tolist()):
            n = key // SLOTS
            sim = 1.0 - dist
            if sim > out.get(n, -1.0):
                out[n] = sim
        return {n: min(1.0, max(0.0, s)) for n, s in out.items()}

    def similarity(self, kind: int, qvec: np.ndarray, ids: list[int]) -> dict[int, float]:
        """Exact similarity of `qvec` to each id's best slot (ids without vectors: absent)."""
        if not ids or kind != KIND_CONCEPT:
            return {}
        keys = (np.asarray(ids, dtype=np.uint64)[:, None] * SLOTS
                + np.arange(SLOTS, dtype=np.uint64)[None, :]).ravel()
        ix = self.indexes[kind]
        with self.lock:
            if not len(ix):
                return {}
            present = keys[np.asarray(ix.contains(keys), dtype=bool)]
            if not len(present):
                return {}
            vecs = ix.get(present)
        vecs = np.asarray(vecs, dtype=np.float32).reshape(len(present), -1)
        norms = np.linalg.norm(vecs, axis=1)
        sims = vecs @ qvec / np.where(norms > 0, norms, 1.0)
        out: dict[int, float] = {}
        for key, sim in zip((present // SLOTS).tolist(), sims.tolist()):
            if sim > out.get(key, -1.0):
                out[key] = sim
        return {n: min(1.0, max(0.0, s)) for n, s in out.items()}

    def ids(self, kind: int = KIND_CONCEPT) -> set[int]:
        """The ids with vectors (of `kind`: links have none)."""
        if kind != KIND_CONCEPT:
            return set()
        with self.lock:
            keys = np.asarray(self.indexes[kind].keys, dtype=np.uint64)
        return set((keys // SLOTS).tolist())
