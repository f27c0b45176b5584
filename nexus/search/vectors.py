"""The vector index: usearch HNSW indexes over embedded names, persisted with a watermark.

Owns the in-memory usearch indexes (one for concepts, one for propositions), their files
beside the LMDB environment, and the bookkeeping that keeps them in step with the data:

* Every write transaction that changes searchable text takes the next *change sequence*
  number and records it in the `vecq` aux table inside the data's own transaction
  (`vecq b"S"` = the last sequence; `vecq b"q" seq` = the ids whose vectors changed).
  So the queue is exactly as durable as the data.
* After the commit, the batch is embedded and applied to the in-memory index
  (`apply_pending`), in sequence order even when commits' after-hooks race.
* `save()` writes `vectors.<kind>.usearch` and then `vectors.json` recording the sequence
  the files cover. It runs on close and periodically (after SAVE_EVERY changed vectors or
  SAVE_SECONDS), never on every commit: the queue makes that safe.
* On open, the saved files are loaded and every queued change after their sequence is
  replayed from the current data (`catch_up`); when the files are missing, foreign (another
  embedder, another database) or older than what the queue still holds, the index is
  rebuilt from the data. Queue entries the saved files cover are pruned by later writes.

Each element has up to SLOTS vectors (its name, its aliases, and for contextual embedders
"name: description"), under usearch keys `id * SLOTS + slot`; a document's similarity is its
best slot's. Readers search the in-memory index under a lock; the caller validates every hit
against its own snapshot, so a vector that is ahead of or behind a reader is harmless.
"""
from __future__ import annotations

import json
import logging
import os
import secrets
import struct
import threading
import time
from typing import Any, Callable, Iterable

import msgpack
import numpy as np
from usearch.index import Index

from ..errors import ErrorCode, KipError
from .embed import Embedder
from .text import KIND_CONCEPT, KIND_LINK, Doc

log = logging.getLogger("nexus.search")

SLOTS = 8
EXPANSION_ADD = 128
EXPANSION_SEARCH = 256
FORMAT = 1
SAVE_EVERY = 50_000          # changed vectors between periodic saves
SAVE_SECONDS = 300.0         # ... or this long after the first unsaved change
ADD_CHUNK = 2048             # vectors embedded and inserted per lock hold
PRUNE_PER_TXN = 256          # queue entries a write removes at most (bounds write cost)
_U64 = struct.Struct(">Q")
KEY_SEQ, KEY_EPOCH, KEY_PRUNED = b"S", b"E", b"P"
KIND_NAMES = ("concepts", "propositions")


def read_seq(txn: Any) -> int:
    raw = txn.aux("vecq").get(KEY_SEQ)
    return _U64.unpack(raw)[0] if raw else 0


def doc_texts(doc: Doc, embedder: Embedder) -> list[str]:
    texts = [t for t in doc.vec_texts if t][: SLOTS - (1 if embedder.contextual else 0)]
    if embedder.contextual and doc.context:
        texts.append(doc.context)
    return texts


class Batch:
    """The vector changes of one committed write: (kind, id, texts) to (re)embed, ids to drop."""
    __slots__ = ("upserts", "removes")

    def __init__(self, upserts: list[tuple[int, int, list[str]]], removes: list[int]) -> None:
        self.upserts = upserts
        self.removes = removes


class VectorIndex:
    def __init__(self, embedder: Embedder, directory: str | None) -> None:
        self.embedder = embedder
        self.dir = directory
        self.lock = threading.RLock()          # guards the usearch indexes and counters
        self.apply_lock = threading.Lock()     # one applier of batches at a time
        self.indexes = [self._new(), self._new()]
        self.applied_seq = 0      # every committed batch <= this is in memory
        self.saved_seq = 0        # the files on disk cover every batch <= this
        self.epoch = b""
        self.pending: dict[int, Batch] = {}
        self.unsaved = 0
        self.first_unsaved = 0.0

    def _new(self) -> Index:
        # Measured on 212k name vectors of the 100k-concept bench graph (typo queries, is
        # the target among the 40 neighbours; exact search: 0.995): expansion_add 48 builds
        # twice as fast but its graph strands typo'd queries in the wrong region (0.88 even
        # with a wide search beam); 128 gives 0.955 at beam 96 and 0.99 at beam 256
        # (0.65 ms). i8 quantisation costs no recall on these vectors and searches fastest.
        return Index(ndim=self.embedder.dim, metric="cos", dtype="i8", connectivity=16,
                     expansion_add=EXPANSION_ADD, expansion_search=EXPANSION_SEARCH)

    def _paths(self) -> tuple[list[str], str]:
        assert self.dir is not None
        return ([os.path.join(self.dir, f"vectors.{k}.usearch") for k in KIND_NAMES],
                os.path.join(self.dir, "vectors.json"))

    # --- write path ----------------------------------------------------------------------
    def record(self, txn: Any, changed: list[Doc], gone: list[int]) -> int:
        """Inside the write txn: take the next sequence, queue the changed ids, prune what
        the saved files cover. Returns the sequence (the batch is held until after_commit)."""
        vq = txn.aux("vecq")
        seq = read_seq(txn) + 1
        vq.put(KEY_SEQ, _U64.pack(seq))
        if changed or gone:
            vq.put(b"q" + _U64.pack(seq),
                   msgpack.packb([[d.n for d in changed], list(gone)]))
        upto = self.saved_seq if self.dir is not None else self.applied_seq
        raw = vq.get(KEY_PRUNED)
        pruned = _U64.unpack(raw)[0] if raw else 0
        if upto > pruned:
            last = pruned
            for key, _ in list(_take(vq.scan(b"q"), PRUNE_PER_TXN)):
                s = _U64.unpack(key[1:])[0]
                if s > upto:
                    break
                vq.delete(key)
                last = s
            if last > pruned:
                vq.put(KEY_PRUNED, _U64.pack(last))
        texts = [(d.kind, d.n, doc_texts(d, self.embedder)) for d in changed]
        with self.lock:
            self.pending[seq] = Batch(texts, list(gone))
        return seq

    def apply_pending(self, upto: int) -> None:
        """After a commit: apply every held batch up to `upto`, in sequence order.

        One applier at a time (`apply_lock`), so batches land in order even when commits'
        after-hooks race. Readers are held off (`lock`) only while usearch is mutated, a
        chunk at a time: embedding runs unlocked, and a bulk batch does not stall SEARCH."""
        with self.apply_lock:
            with self.lock:
                ready = sorted(s for s in self.pending if s <= upto)
                batches = [self.pending.pop(s) for s in ready]
            for batch in batches:
                self._apply(batch)
            if ready:
                with self.lock:
                    self.applied_seq = max(self.applied_seq, ready[-1])

    def _apply(self, batch: Batch) -> None:
        ids = batch.removes + [n for _, n, _ in batch.upserts]
        if ids:
            self._drop(ids)
        if batch.upserts:
            self._add(batch.upserts)

    def _drop(self, ids: Iterable[int]) -> None:
        keys = (np.fromiter(ids, dtype=np.uint64)[:, None] * SLOTS
                + np.arange(SLOTS, dtype=np.uint64)[None, :]).ravel()
        with self.lock:
            for ix in self.indexes:
                if len(ix):
                    present = keys[np.asarray(ix.contains(keys), dtype=bool)]
                    if len(present):
                        ix.remove(present)
            self._dirty(len(keys) // SLOTS)

    def _add(self, upserts: list[tuple[int, int, list[str]]]) -> None:
        for kind in (KIND_CONCEPT, KIND_LINK):
            keys: list[int] = []
            texts: list[str] = []
            for k, n, ts in upserts:
                if k == kind:
                    for slot, t in enumerate(ts):
                        keys.append(n * SLOTS + slot)
                        texts.append(t)
            for i in range(0, len(keys), ADD_CHUNK):
                vecs = self.embedder.embed(texts[i:i + ADD_CHUNK])
                chunk = np.asarray(keys[i:i + ADD_CHUNK], dtype=np.uint64)
                with self.lock:
                    self.indexes[kind].add(chunk, vecs, threads=2)
                    self._dirty(len(chunk))

    def _dirty(self, count: int) -> None:
        if not self.unsaved:
            self.first_unsaved = time.monotonic()
        self.unsaved += count

    def maybe_save(self) -> None:
        if self.dir is None or not self.unsaved:
            return
        if self.unsaved >= SAVE_EVERY or time.monotonic() - self.first_unsaved > SAVE_SECONDS:
            self.save()

    # --- persistence ---------------------------------------------------------------------
    def save(self) -> None:
        """Write both indexes, then the watermark (an index newer than its watermark is
        harmless: replaying a change twice gives the same vectors)."""
        if self.dir is None:
            return
        files, meta_path = self._paths()
        with self.lock:
            try:
                for ix, path in zip(self.indexes, files):
                    ix.save(path + ".tmp")
                    os.replace(path + ".tmp", path)
                meta = {"format": FORMAT, "embedder": self.embedder.name,
                        "dim": self.embedder.dim, "seq": self.applied_seq,
                        "epoch": self.epoch.hex()}
                with open(meta_path + ".tmp", "w") as f:
                    json.dump(meta, f)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(meta_path + ".tmp", meta_path)
            except (OSError, RuntimeError) as exc:
                raise KipError(ErrorCode.KIP_4003, f"cannot save the vector index: {exc}",
                               "Check free disk space and permissions beside the store; "
                               "`kip reindex` rebuilds the index.") from None
            self.saved_seq = self.applied_seq
            self.unsaved = 0

    def open(self, store: Any, progress: Callable | None = None) -> str:
        """Load the saved files and catch up from the queue, or rebuild. Returns what it did:
        "empty", "loaded", "caught-up" or "rebuilt"."""
        self.ensure_epoch(store)
        with store.read() as txn:
            seq = read_seq(txn)
            has_data = txn.max_id() > 0
            meta = self._load(txn, seq) if self.dir is not None else None
            if meta is not None:
                todo = self._queued_since(txn, meta)
                if todo is not None:
                    self.saved_seq = meta
                    if todo:
                        self._replay(txn, todo)
                    self.applied_seq = seq
                    return "caught-up" if todo else "loaded"
            if not has_data:
                self.applied_seq = seq
                return "empty"
            self.rebuild(txn, progress)
            self.applied_seq = seq
        if self.dir is not None:
            self.save()
        return "rebuilt"

    def ensure_epoch(self, store: Any) -> None:
        """Read (or create) the random id of this database that saved files must carry, so
        that files beside a replaced or restored database are never taken for its own."""
        with store.read() as txn:
            raw = txn.aux("vecq").get(KEY_EPOCH)
        if raw is None:
            with store.write() as w:
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
                    or meta.get("dim") != self.embedder.dim
                    or meta.get("epoch") != self.epoch.hex()
                    or not isinstance(meta.get("seq"), int) or meta["seq"] > seq):
                return None
            loaded = []
            for path in files:
                ix = self._new()
                ix.load(path)
                ix.expansion_search = EXPANSION_SEARCH
                loaded.append(ix)
        except (OSError, ValueError, RuntimeError) as exc:
            if os.path.exists(meta_path):
                log.warning("vector index files unusable (%s); rebuilding", exc)
            return None
        self.indexes = loaded
        return meta["seq"]

    def _queued_since(self, txn: Any, saved: int) -> list[int] | None:
        """Ids changed after `saved`, or None when the queue no longer reaches back there."""
        vq = txn.aux("vecq")
        raw = vq.get(KEY_PRUNED)
        if raw and _U64.unpack(raw)[0] > saved:
            return None
        ids: set[int] = set()
        for key, value in vq.scan(b"q", start=b"q" + _U64.pack(saved + 1)):
            touched, gone = msgpack.unpackb(value)
            ids.update(touched)
            ids.update(gone)
        return sorted(ids)

    def _replay(self, txn: Any, ids: list[int]) -> None:
        from .text import element_doc
        with self.lock:
            self._drop(ids)
            upserts = []
            for n in ids:
                doc = element_doc(txn, n)
                if doc is not None:
                    upserts.append((doc.kind, n, doc_texts(doc, self.embedder)))
            self._add(upserts)

    def rebuild(self, txn: Any, progress: Callable | None = None, chunk: int = 4096) -> None:
        """Re-embed every element of `txn`'s snapshot into fresh indexes."""
        from .text import element_doc
        fresh = [self._new(), self._new()]
        total = txn.count_concepts() + txn.count_links()
        done = 0
        batch: list[tuple[int, int, list[str]]] = []

        def flush() -> None:
            for kind in (KIND_CONCEPT, KIND_LINK):
                keys, texts = [], []
                for k, n, ts in batch:
                    if k == kind:
                        for slot, t in enumerate(ts):
                            keys.append(n * SLOTS + slot)
                            texts.append(t)
                if keys:
                    fresh[kind].add(np.asarray(keys, dtype=np.uint64),
                                    self.embedder.embed(texts), threads=2)
            batch.clear()

        for n in txn.elements():
            doc = element_doc(txn, n)
            if doc is not None:
                batch.append((doc.kind, n, doc_texts(doc, self.embedder)))
            done += 1
            if len(batch) >= chunk:
                flush()
                if progress:
                    progress("vectors", done, total)
        flush()
        if progress:
            progress("vectors", done, total)
        with self.lock:
            self.indexes = fresh
            self.pending.clear()
            self._dirty(1)

    # --- read path -----------------------------------------------------------------------
    def query_vector(self, text: str) -> np.ndarray:
        return self.embedder.embed([text])[0]

    def knn(self, kind: int, qvec: np.ndarray, count: int) -> dict[int, float]:
        """id → similarity in [0, 1] of the nearest documents (best slot per id)."""
        ix = self.indexes[kind]
        with self.lock:
            if not len(ix):
                return {}
            m = ix.search(qvec, min(count, len(ix)))
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
        if not ids:
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

    def ids(self, kind: int) -> set[int]:
        with self.lock:
            keys = np.asarray(self.indexes[kind].keys, dtype=np.uint64)
        return set((keys // SLOTS).tolist())


def _take(it, n):
    for i, x in enumerate(it):
        if i >= n:
            return
        yield x
