"""The semantic vector index as an inverted file (IVF) of 4-bit codes, memory-mapped.

Owns `IVFIndex`, what `nexus.search.vectors.VectorIndex` holds for the semantic (WordLlama)
index instead of an HNSW `layered.LayeredIndex`: it answers the same subset of usearch's
interface (`len`, `add`, `remove`, `contains`, `get`, `search`, `keys`, `expansion_search`,
`save`, `remap`, `is_mapped`, `unchanged_since_saved`, `memory_usage`).

Why not HNSW: inserting 100k WordLlama vectors into an HNSW graph was most of a bulk load
with SEARCH (bench/RESULTS.md, "A vector index for bulk loads", "The semantic index as an
inverted file"), and the graph found fewer of the exact nearest neighbours of a paraphrase
than scanning a tenth of the vectors does. An inverted file needs no graph:

* **lists** — spherical k-means over a sample gives round(sqrt(N)) centroids; every vector
  belongs to its nearest centroid's list, and the saved file holds the rows grouped by
  list, so a search scores the centroids and scans the `nprobe` nearest lists (each list's
  rows converted to float32 and multiplied by the query: a list is a few hundred rows,
  which stay in cache). Over 4-bit codes a search scans a third more lists than over int8
  rows (NPROBE_CODED, NPROBE_MIN_CODED): the codes' score error then costs no recall of
  the exact neighbours (bench/RESULTS.md, "The semantic index in 4-bit codes"). Below
  FLAT_MAX vectors there are no lists: every search is an exact scan.
* **rows** — in a file with lists (layout 2, MAGIC2), each row a 4-bit code of its residual
  from its list's centroid (`ivf_codes`: 136 bytes at 256 dimensions, a score the cosine of
  the decoded row, 0.004 from the int8 row's on average); flat files (at most FLAT_MAX rows)
  and the rows in memory (the delta, an index never saved) are int8, the unit vector times
  127 (usearch's i8) with 1/|row| beside each, so a score is the exact cosine of the stored
  row. Keys are uint32 in a file when they all fit; the keys sorted (for `contains`/`get`)
  are computed when a file is mapped, not stored. A file of layout 1 (int8 rows with lists,
  written before layout 2) is read as it is, and written in layout 2 by the next save.
* **changes** — adds go to an in-memory delta, each row tagged with its nearest list (a
  search scans the delta rows of the lists it probes); removing or replacing a saved row
  hides its key (a tombstone). `save` compacts: the live rows are written grouped by list
  and `remap` maps the new file, dropping the delta. Lists are (re)trained at a save when
  the index has none and holds more than FLAT_MAX vectors, or holds RETRAIN times the
  vectors it was trained on; a save is the indexer's work or a bulk load's end
  (`service.complete_vectors`), never a write's. `is_mapped` is false while training is due
  or the delta is past DELTA_MAX, so that the indexer saves once writes pause
  (`VectorIndex.maybe_save`). An index that is never saved (a database in memory) does
  the same in place when an add finds it due (`_compact`): adds, like saves, are the
  indexer's work.
"""
from __future__ import annotations

import contextlib
import mmap
import os
from typing import Any, Callable, NamedTuple

import numpy as np

from ..store import pagemap
from ..store.bulk import trim_heap
from . import ivf_codes

MAGIC = b"NXIVF001"          # layout 1: int8 rows (flat files; files of before layout 2)
MAGIC2 = b"NXIVF002"         # layout 2: 4-bit residual codes (`ivf_codes`), files with lists
HEADER = 64                 # magic, dim, nlist, count, trained[, key bytes]; arrays aligned
FLAT_MAX = 4096             # up to this many vectors: no lists, every search scans all
RETRAIN = 2.0               # re-train the lists at a save past this × the trained size
DELTA_MAX = 8192            # delta rows + tombstones before the indexer compacts (saves)
NPROBE = 72                 # lists scanned by a search of the full breadth (expansion 256)
NPROBE_MIN = 24             # ... and at least this many for a narrower one (hybrid: 64)
NPROBE_CODED = 120          # over 4-bit codes (layout 2), lists for the full breadth ...
NPROBE_MIN_CODED = 32       # ... and at least (their scores' error: more lists, same recall)
BREADTH = 256               # the expansion that NPROBE stands for (vectors.EXPANSION_SEARCH)
KMEANS_SAMPLE = 64          # rows per list that the k-means trains on
KMEANS_ITERS = 8
_CHUNK = 16_384             # rows assigned to lists per matrix product


class Found(NamedTuple):
    """What `search` returns (as `layered.Found`)."""
    keys: np.ndarray            # uint64
    distances: np.ndarray       # float32, ascending (1 - cosine)


def _unit(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(n > 0, n, 1.0)


def quantise(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows as int8 unit vectors × 127, and 1/|int8 row| of each (exact cosines)."""
    q = np.clip(np.rint(_unit(np.asarray(x, dtype=np.float32)) * 127.0), -127, 127
                ).astype(np.int8)
    inv = 1.0 / np.maximum(np.linalg.norm(q.astype(np.float32), axis=1), 1e-9)
    return q, inv.astype(np.float32)


def kmeans(x: np.ndarray, nlist: int, seed: int = 1) -> np.ndarray:
    """Spherical k-means centroids (unit rows, float32) of the unit rows `x`."""
    rng = np.random.default_rng(seed)
    c = x[rng.choice(len(x), nlist, replace=False)].copy()
    for _ in range(KMEANS_ITERS):
        a = assign(x, c)
        sums = list_sums(x, a, nlist)
        empty = ~np.any(sums, axis=1)
        if empty.any():                     # an empty list takes a random sample row
            sums[empty] = x[rng.choice(len(x), int(empty.sum()), replace=False)]
        c = _unit(sums)
    return np.ascontiguousarray(c, dtype=np.float32)


def list_sums(x: np.ndarray, lists: np.ndarray, nlist: int) -> np.ndarray:
    """The sum of the rows of `x` in each of `nlist` lists (`lists`: each row's), in the
    dtype of `x`: what `np.add.at(sums, lists, x)` computes, bit for bit — each list's rows
    added one by one in row order, from zero — with one numpy step per rank of a row in its
    list (a few hundred) instead of a Python-level scatter per row (`add.at` on rows was
    most of the k-means: bench/RESULTS.md, s17-w1proc)."""
    sums = np.zeros((nlist, x.shape[1]), dtype=x.dtype)
    if not len(lists):
        return sums
    order = np.argsort(lists, kind="stable")        # by list, in row order within each
    ordered = lists[order]
    starts = np.zeros(nlist + 1, dtype=np.int64)
    np.cumsum(np.bincount(lists, minlength=nlist), out=starts[1:])
    rank = np.arange(len(order)) - starts[ordered]  # a row's place in its list
    by_rank = np.argsort(rank, kind="stable")
    rank, rows, ordered = rank[by_rank], order[by_rank], ordered[by_rank]
    bounds = np.searchsorted(rank, np.arange(int(rank[-1]) + 2))
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        sums[ordered[lo:hi]] += x[rows[lo:hi]]      # (one row per list: no index repeats)
    return sums


def assign(x: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The nearest centroid (largest dot product) of every row of `x` (float32)."""
    out = np.empty(len(x), dtype=np.int32)
    for i in range(0, len(x), _CHUNK):
        out[i:i + _CHUNK] = np.argmax(x[i:i + _CHUNK] @ c.T, axis=1)
    return out


def _align(n: int) -> int:
    return (n + 63) & ~63


class IVFIndex:
    """An IVF-flat index: the saved file memory-mapped, plus the in-memory changes."""

    def __init__(self, dim: int, in_memory: bool = False) -> None:
        self.dim = dim
        # Never saved (a database in memory): `add` compacts (and trains) in place instead.
        self.in_memory = in_memory
        self.expansion_search = BREADTH
        self.path: str | None = None        # the file mapped
        self._map: mmap.mmap | None = None
        self.centroids: np.ndarray | None = None    # (nlist, dim) float32; None: flat
        self.trained = 0                    # vectors the lists were trained on
        self._starts = np.zeros(2, dtype=np.int64)  # list l: rows starts[l]:starts[l+1]
        self._keys = np.zeros(0, dtype=np.uint64)   # the saved rows' keys, by list
        self._rows = np.zeros((0, dim), dtype=np.int8)
        self._inv = np.zeros(0, dtype=np.float32)
        # Layout 2's rows instead (`coded`): 4-bit residual codes, α and step (`ivf_codes`).
        self.coded = False
        self._codes = np.zeros((0, ivf_codes.half(dim)), dtype=np.uint8)
        self._alpha = np.zeros(0, dtype=np.float32)
        self._step = np.zeros(0, dtype=np.float32)
        self._skeys = np.zeros(0, dtype=np.uint64)  # the keys sorted ...
        self._spos = np.zeros(0, dtype=np.int32)    # ... and their rows
        self.hidden: set[int] = set()       # saved keys removed or replaced since
        self._clear_delta()

    def _clear_delta(self) -> None:
        self._dn = 0
        self._dk = np.zeros(0, dtype=np.uint64)
        self._dv = np.zeros((0, self.dim), dtype=np.int8)
        self._dinv = np.zeros(0, dtype=np.float32)
        self._dl = np.zeros(0, dtype=np.int32)      # each delta row's list (-1: none yet)
        self._dpos: dict[int, int] = {}

    # --- layouts -------------------------------------------------------------------------
    @classmethod
    def mapped(cls, make: Callable[[], "IVFIndex"], path: str) -> "IVFIndex":
        """The index saved at `path`, memory-mapped (OSError/ValueError when the file is
        missing or not an IVF index of this dimension)."""
        ix = make()
        ix.remap(path)
        return ix

    def remap(self, path: str) -> None:
        """Map the file at `path` (just saved from this index) and drop the delta."""
        with open(path, "rb") as f:
            mapping = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
        try:
            head = bytes(mapping[:HEADER])
            if len(head) < HEADER or head[:8] not in (MAGIC, MAGIC2):
                raise ValueError(f"{path}: not an IVF vector index")
            coded = head[:8] == MAGIC2
            dim, nlist, count, trained, key_bytes = (int(v) for v in np.frombuffer(
                head[8:48], dtype=np.int64))
            if not coded:
                key_bytes = 8
            if dim != self.dim:
                raise ValueError(f"{path}: {dim}-d vectors, not {self.dim}")
            buf = np.frombuffer(mapping, dtype=np.uint8)
            # Pages as they are touched, not 64 KB around each: a search's lists are a few
            # pages each, and `get` reads single rows all over the file (`pagemap`).
            pagemap.read_page_by_page(buf.ctypes.data, len(buf))
            off = HEADER

            def take(dtype: Any, n: int) -> np.ndarray:
                nonlocal off
                size = np.dtype(dtype).itemsize * n
                if off + size > len(buf):
                    raise ValueError(f"{path}: truncated")
                a = buf[off:off + size].view(dtype)
                off = _align(off + size)
                return a
            cent = np.array(take(np.float32, nlist * dim).reshape(nlist, dim)) \
                if nlist else None
            starts = np.array(take(np.int64, nlist + 1 if nlist else 2))
            if key_bytes not in (4, 8) or (coded and not nlist):
                raise ValueError(f"{path}: not an IVF vector index")
            keys = take(np.uint32 if key_bytes == 4 else np.uint64, count)
            if coded:
                h = ivf_codes.half(dim)
                codes = take(np.uint8, count * h).reshape(count, h)
                alpha = take(np.float32, count)
                step = take(np.float32, count)
                spos = np.argsort(keys, kind="stable").astype(np.int32)
                skeys = keys[spos].astype(np.uint64)
            else:
                rows = take(np.int8, count * dim).reshape(count, dim)
                inv = take(np.float32, count)
                skeys = take(np.uint64, count)
                spos = take(np.int32, count)
        except ValueError:
            with contextlib.suppress(BufferError):
                mapping.close()
            raise
        self._unmap()
        self._map, self.path = mapping, path
        self.centroids, self.trained = cent, trained
        self._starts, self._keys = starts, keys
        if coded:
            self.coded = True
            self._codes, self._alpha, self._step = codes, alpha, step
        else:
            self._rows, self._inv = rows, inv
        self._skeys, self._spos = skeys, spos
        self.hidden = set()
        self._clear_delta()
        trim_heap()             # the delta just freed: give its pages back

    def _unmap(self) -> None:
        # Arrays over the mapping go first; the mapping itself is closed by its last user
        # (numpy holds a reference through the buffer), so nothing reads unmapped memory.
        self._starts = np.zeros(2, dtype=np.int64)
        self._keys = np.zeros(0, dtype=np.uint64)
        self._rows = np.zeros((0, self.dim), dtype=np.int8)
        self._inv = np.zeros(0, dtype=np.float32)
        self.coded = False
        self._codes = np.zeros((0, ivf_codes.half(self.dim)), dtype=np.uint8)
        self._alpha = np.zeros(0, dtype=np.float32)
        self._step = np.zeros(0, dtype=np.float32)
        self._skeys = np.zeros(0, dtype=np.uint64)
        self._spos = np.zeros(0, dtype=np.int32)
        self._map, self.path = None, None

    def release_pages(self) -> None:
        """Drop the mapped file's pages from this process's page tables."""
        if self._map is not None:
            with contextlib.suppress(OSError, AttributeError, ValueError):
                self._map.madvise(mmap.MADV_DONTNEED)

    @property
    def due(self) -> bool:
        """Whether the next save trains the lists (again)."""
        n = len(self)
        if self.centroids is None:
            return n > FLAT_MAX
        return n > RETRAIN * max(self.trained, 1)

    @property
    def is_mapped(self) -> bool:
        """Mapped from its file with a small delta and no training due (else the indexer
        saves once writes pause)."""
        return self._map is not None and not self.due and \
            self._dn + len(self.hidden) <= DELTA_MAX

    # --- the usearch interface `vectors` uses --------------------------------------------
    def __len__(self) -> int:
        return len(self._keys) - len(self.hidden) + self._dn

    def _saved_rows(self, keys: np.ndarray) -> np.ndarray:
        """Row of each key in the saved file, -1 where absent or hidden."""
        if not len(self._skeys):
            return np.full(len(keys), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self._skeys, keys), len(self._skeys) - 1)
        rows = np.where(self._skeys[at] == keys, self._spos[at].astype(np.int64), -1)
        if self.hidden:
            rows[self._hidden_mask(keys)] = -1
        return rows

    def contains(self, keys: np.ndarray) -> np.ndarray:
        keys = np.asarray(keys, dtype=np.uint64)
        found = self._saved_rows(keys) >= 0
        if self._dn:
            found |= np.fromiter((k in self._dpos for k in keys.tolist()), dtype=bool,
                                 count=len(keys))
        return found

    def add(self, keys: np.ndarray, vectors: np.ndarray, threads: int = 0) -> None:
        """Add (or replace) the rows of `keys` (`threads`: usearch's, unused here)."""
        keys = np.asarray(keys, dtype=np.uint64)
        self.add_rows(keys, *quantise(
            np.asarray(vectors, dtype=np.float32).reshape(len(keys), -1)))

    def add_rows(self, keys: np.ndarray, q: np.ndarray, inv: np.ndarray) -> None:
        """`add` of rows already quantised (`quantise`: a bulk load's, computed ahead)."""
        keys = np.asarray(keys, dtype=np.uint64)
        lists = np.full(len(keys), -1, dtype=np.int32) if self.centroids is None else \
            assign(q.astype(np.float32), self.centroids)
        saved = self._saved_rows(keys)
        if (saved >= 0).any():
            self.hidden.update(keys[saved >= 0].tolist())
        need = self._dn + len(keys)
        if need > len(self._dk):
            cap = max(need, 2 * len(self._dk), 1024)
            self._dk = np.resize(self._dk, cap)
            self._dinv = np.resize(self._dinv, cap)
            self._dl = np.resize(self._dl, cap)
            dv = np.zeros((cap, self.dim), dtype=np.int8)
            dv[:self._dn] = self._dv[:self._dn]
            self._dv = dv
        klist = keys.tolist()
        dpos = self._dpos
        if len(set(klist)) == len(klist) and not any(map(dpos.__contains__, klist)):
            at, end = self._dn, self._dn + len(klist)     # (all new: appended at once)
            self._dk[at:end], self._dv[at:end], self._dinv[at:end], self._dl[at:end] = \
                keys, q, inv, lists
            dpos.update(zip(klist, range(at, end)))
            self._dn = end
        else:
            for i, k in enumerate(klist):
                row = dpos.get(k)
                if row is None:
                    row = dpos[k] = self._dn
                    self._dn += 1
                self._dk[row], self._dv[row], self._dinv[row], self._dl[row] = k, q[i], \
                    inv[i], lists[i]
        if self.in_memory and (self.due or self._dn + len(self.hidden) > DELTA_MAX):
            self._compact()

    def remove(self, keys: np.ndarray) -> None:
        """Remove `keys` (each present: `contains` said so)."""
        keys = np.asarray(keys, dtype=np.uint64)
        saved = self._saved_rows(keys)
        self.hidden.update(keys[saved >= 0].tolist())
        for k in keys[saved < 0].tolist():
            at = self._dpos.pop(k, None)
            if at is None:
                continue
            last = self._dn - 1
            if at != last:          # the last row takes the removed one's place
                lk = int(self._dk[last])
                self._dk[at], self._dv[at] = self._dk[last], self._dv[last]
                self._dinv[at], self._dl[at] = self._dinv[last], self._dl[last]
                self._dpos[lk] = at
            self._dn = last

    def get(self, keys: np.ndarray) -> np.ndarray:
        """The unit vectors of `keys` (each present), float32, one row per key."""
        keys = np.asarray(keys, dtype=np.uint64)
        out = np.zeros((len(keys), self.dim), dtype=np.float32)
        saved = self._saved_rows(keys)
        here = saved >= 0
        if here.any():              # (one fancy-indexed read: hybrid scores ~50 this way)
            r = np.sort(saved[here])
            back = np.searchsorted(r, saved[here])
            out[here] = self._saved_units(r)[back]
        for i in np.flatnonzero(~here).tolist():
            at = self._dpos.get(int(keys[i]))
            if at is not None:
                out[i] = self._dv[at].astype(np.float32) * self._dinv[at]
        return out

    def _saved_units(self, r: np.ndarray) -> np.ndarray:
        """The saved rows at positions `r` (sorted) as unit vectors, float32."""
        if not self.coded:
            return self._rows[r].astype(np.float32) * self._inv[r][:, None]
        assert self.centroids is not None
        lists = np.searchsorted(self._starts, r, side="right") - 1
        return ivf_codes.decode(self._codes[r], self._alpha[r], self._step[r],
                                self.centroids[lists], self.dim)

    def _probes(self, qc: np.ndarray, count: int) -> np.ndarray:
        """The lists a search scans (`qc`: the centroids' dot products with the query):
        the nearest `nprobe` centroids (from the breadth asked), more while they hold
        fewer than `count` saved rows."""
        assert self.centroids is not None
        nlist = len(self.centroids)
        top, least = (NPROBE_CODED, NPROBE_MIN_CODED) if self.coded else (NPROBE, NPROBE_MIN)
        want = max(least, -(-top * int(self.expansion_search) // BREADTH))
        order = np.argsort(-qc, kind="stable")
        sizes = np.diff(self._starts)[order]
        enough = int(np.searchsorted(np.cumsum(sizes), count + len(self.hidden))) + 1
        return order[:min(nlist, max(want, enough))]

    def search(self, vector: np.ndarray, count: int, exact: bool = False) -> Found:
        """The `count` nearest rows (`exact`: over every row, not the probed lists)."""
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        qu = q / max(float(np.linalg.norm(q)), 1e-12)
        parts_k: list[np.ndarray] = []
        parts_s: list[np.ndarray] = []
        if len(self._keys):
            qc = None if self.centroids is None else self.centroids @ qu
            probes = None if qc is None or exact else self._probes(qc, count)
            if qc is None or (exact and not self.coded):
                spans = [(0, len(self._keys), 0.0)]
            else:
                scan = np.arange(len(qc)) if probes is None else probes
                spans = [(int(self._starts[p]), int(self._starts[p + 1]), float(qc[p]))
                         for p in scan.tolist()]
            cq = ivf_codes.Query(qu) if self.coded else None
            for a, b, pc in spans:
                # One list at a time: its rows, converted, stay in cache for the product
                # (converting all probed rows first was 3x slower).
                for lo in range(a, b, 2048):
                    hi = min(b, lo + 2048)
                    if hi <= lo:
                        continue
                    parts_k.append(self._keys[lo:hi])
                    if cq is not None:
                        parts_s.append(cq.scores(self._codes[lo:hi], self._alpha[lo:hi],
                                                 self._step[lo:hi], pc))
                    else:
                        parts_s.append((self._rows[lo:hi].astype(np.float32) @ qu)
                                       * self._inv[lo:hi])
            if self.hidden:             # (replaced rows: their new version is in the delta)
                k = np.concatenate(parts_k)
                s = np.concatenate(parts_s)
                s[self._hidden_mask(k)] = -np.inf
                parts_k, parts_s = [k], [s]
        else:
            probes = None
        if self._dn:
            n = self._dn
            pick = slice(0, n) if probes is None or exact else \
                np.flatnonzero(np.isin(self._dl[:n], probes) | (self._dl[:n] < 0))
            parts_k.append(self._dk[:n][pick])
            parts_s.append((self._dv[:n][pick].astype(np.float32) @ qu) * self._dinv[:n][pick])
        if not parts_k:
            return Found(np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.float32))
        keys = np.concatenate(parts_k)
        sims = np.concatenate(parts_s)
        top = min(count, len(keys))
        if top <= 0:
            return Found(np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.float32))
        best = np.argpartition(-sims, top - 1)[:top] if top < len(keys) else \
            np.arange(len(keys))
        best = best[np.argsort(-sims[best], kind="stable")]
        best = best[np.isfinite(sims[best])]
        return Found(keys[best].astype(np.uint64),
                     (1.0 - sims[best]).astype(np.float32))

    @property
    def keys(self) -> np.ndarray:
        mine = self._dk[:self._dn].copy()
        theirs = np.asarray(self._keys, dtype=np.uint64)
        if self.hidden:
            theirs = theirs[~self._hidden_mask(theirs)]
        return np.concatenate([mine, theirs])

    def _packed(self) -> tuple[Any, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The live rows grouped by list (trained first when `due`): centroids, trained
        count, starts, keys, int8 rows, 1/|row| (a flat file's or an unsaved index's: the
        saved rows are int8)."""
        assert not self.coded
        keep = np.ones(len(self._keys), dtype=bool)
        if self.hidden:
            keep = ~self._hidden_mask(np.asarray(self._keys))
        n_saved = len(self._keys)
        saved_lists = np.repeat(np.arange(len(self._starts) - 1, dtype=np.int32),
                                np.diff(self._starts)) if n_saved else \
            np.zeros(0, dtype=np.int32)
        d = self._dn
        keys = np.concatenate([np.asarray(self._keys)[keep], self._dk[:d]])
        rows = np.concatenate([np.asarray(self._rows)[keep], self._dv[:d]])
        inv = np.concatenate([np.asarray(self._inv)[keep], self._dinv[:d]])
        if self.due:        # (flat: no lists up to FLAT_MAX rows)
            cent = None if len(rows) <= FLAT_MAX else self._train(
                len(rows), lambda pick: self._unit_rows(rows[pick], inv[pick]))
            trained = len(keys)
        else:
            cent, trained = self.centroids, self.trained
        if cent is None:
            lists = np.zeros(len(keys), dtype=np.int32)
            nlist, starts = 0, np.array([0, len(keys)], dtype=np.int64)
        else:
            nlist = len(cent)
            if cent is self.centroids:
                lists = np.concatenate([saved_lists[keep], self._dl[:d]])
                fresh = lists < 0
                if fresh.any():
                    lists[fresh] = assign(self._unit_rows(rows[fresh], inv[fresh]), cent)
            else:
                lists = np.empty(len(keys), dtype=np.int32)
                for i in range(0, len(keys), _CHUNK):
                    lists[i:i + _CHUNK] = assign(
                        self._unit_rows(rows[i:i + _CHUNK], inv[i:i + _CHUNK]), cent)
            starts = np.zeros(nlist + 1, dtype=np.int64)
            np.cumsum(np.bincount(lists, minlength=nlist), out=starts[1:])
        order = np.argsort(lists, kind="stable")
        return cent, trained, starts, keys[order], rows[order], inv[order]

    def _coded_rows(self) -> tuple[np.ndarray, int, np.ndarray, np.ndarray, np.ndarray,
                                   np.ndarray, np.ndarray]:
        """The live rows grouped by list in 4-bit codes (trained first when `due`):
        centroids, trained count, starts, keys, codes, α, step. A saved row that is coded
        already and keeps its list keeps its code (coding a decoded row again would add
        its error again); the others are coded from their unit vectors."""
        keep = np.ones(len(self._keys), dtype=bool)
        if self.hidden:
            keep = ~self._hidden_mask(np.asarray(self._keys))
        sp = np.flatnonzero(keep)
        d = self._dn
        n_s = len(sp)
        n = n_s + d
        keys = np.concatenate([np.asarray(self._keys, dtype=np.uint64)[sp], self._dk[:d]])

        def units(idx: np.ndarray) -> np.ndarray:       # live rows idx (sorted), unit
            cut = int(np.searchsorted(idx, n_s))
            dp = idx[cut:] - n_s
            if cut == 0 and len(dp) and dp[-1] - dp[0] == len(dp) - 1:     # (a load's)
                part = slice(int(dp[0]), int(dp[-1]) + 1)
                return self._unit_rows(self._dv[part], self._dinv[part])
            return np.concatenate([self._saved_units(sp[idx[:cut]]),
                                   self._unit_rows(self._dv[dp], self._dinv[dp])])
        h = ivf_codes.half(self.dim)
        codes = np.empty((n, h), dtype=np.uint8)
        alpha = np.empty(n, dtype=np.float32)
        step = np.empty(n, dtype=np.float32)
        lists = np.empty(n, dtype=np.int32)
        todo = np.ones(n, dtype=bool)           # rows to code
        if self.due:
            cent, trained = self._train(n, units), n
            lists[:] = -1
        else:
            assert self.centroids is not None
            cent, trained = self.centroids, self.trained
            lists[:n_s] = (np.searchsorted(self._starts, sp, side="right") - 1)
            lists[n_s:] = self._dl[:d]
            if self.coded:
                codes[:n_s], alpha[:n_s], step[:n_s] = \
                    self._codes[sp], self._alpha[sp], self._step[sp]
                todo[:n_s] = False
        at = np.flatnonzero(todo)
        for i in range(0, len(at), _CHUNK):
            idx = at[i:i + _CHUNK]
            u = units(idx)
            fresh = lists[idx] < 0
            dots = None
            if fresh.all():             # (a load's rows: α is the nearest centroid's product)
                sims = u @ cent.T
                lists[idx] = np.argmax(sims, axis=1)
                dots = sims[np.arange(len(idx)), lists[idx]]
            elif fresh.any():
                lists[idx[fresh]] = assign(u[fresh], cent)
            codes[idx], alpha[idx], step[idx] = ivf_codes.encode(u, cent[lists[idx]], dots)
        starts = np.zeros(len(cent) + 1, dtype=np.int64)
        np.cumsum(np.bincount(lists, minlength=len(cent)), out=starts[1:])
        order = np.argsort(lists, kind="stable")
        return cent, trained, starts, keys[order], codes[order], alpha[order], step[order]

    def save(self, path: str) -> None:
        """Write the live rows to `path`, grouped by list (trained first when `due`): in
        4-bit codes when there are lists (layout 2), else int8 rows (layout 1)."""
        if self.centroids is not None or self.due:
            cent, trained, starts, keys, codes, alpha, step = self._coded_rows()
            wide = len(keys) and int(keys.max()) >= 1 << 32
            head = MAGIC2 + np.array([self.dim, len(cent), len(keys), trained,
                                      8 if wide else 4], dtype=np.int64).tobytes()
            self._write(path, head, [cent, starts, keys if wide else keys.astype(np.uint32),
                                     codes, alpha, step])
            return
        cent, trained, starts, keys, rows, inv = self._packed()
        spos = np.argsort(keys, kind="stable").astype(np.int32)
        head = MAGIC + np.array([self.dim, 0, len(keys), trained],
                                dtype=np.int64).tobytes()
        self._write(path, head, [starts, keys, rows, inv, keys[spos], spos])

    @staticmethod
    def _write(path: str, head: bytes, arrays: list[np.ndarray]) -> None:
        with open(path, "wb") as f:
            f.write(head.ljust(HEADER, b"\0"))
            for arr in arrays:
                b = np.ascontiguousarray(arr).tobytes()
                f.write(b)
                f.write(b"\0" * (_align(len(b)) - len(b)))
            f.flush()
            os.fsync(f.fileno())

    def _compact(self) -> None:
        """`save` and `remap` without a file (an index of a database in memory, which is
        never saved): the rows in memory, grouped by list, trained when due."""
        cent, trained, starts, keys, rows, inv = self._packed()
        spos = np.argsort(keys, kind="stable").astype(np.int32)
        self._unmap()
        self.centroids, self.trained = cent, trained
        self._starts, self._keys, self._rows, self._inv = starts, keys, rows, inv
        self._skeys, self._spos = keys[spos], spos
        self.hidden = set()
        self._clear_delta()

    def unchanged_since_saved(self, path: str) -> bool:
        return self._map is not None and self.path == path and not self.hidden \
            and not self._dn and not self.due

    @property
    def memory_usage(self) -> int:
        """Bytes of the in-memory part (the delta; the mapped file is not counted)."""
        return int(self._dk.nbytes + self._dv.nbytes + self._dinv.nbytes + self._dl.nbytes)

    # --- helpers -------------------------------------------------------------------------
    @staticmethod
    def _unit_rows(rows: np.ndarray, inv: np.ndarray) -> np.ndarray:
        return rows.astype(np.float32) * inv[:, None]

    @staticmethod
    def _train(n: int, units: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """Centroids for `n` rows: round(sqrt(n)) lists, trained on a sample of them
        (`units(positions)`: those rows as unit vectors, float32)."""
        nlist = max(1, int(round(np.sqrt(n))))
        rng = np.random.default_rng(n)
        pick = np.sort(rng.choice(n, min(n, KMEANS_SAMPLE * nlist), replace=False))
        return kmeans(units(pick), nlist, seed=n)

    def _hidden_mask(self, keys: np.ndarray) -> np.ndarray:
        return np.isin(keys, np.fromiter(self.hidden, dtype=np.uint64,
                                         count=len(self.hidden)))

