"""One vector index kept as a memory-mapped saved file plus a small in-memory delta.

Owns `LayeredIndex`, what `nexus.search.vectors.VectorIndex` holds per kind (concepts,
propositions) instead of a bare usearch `Index`. It answers the subset of usearch's interface
that `vectors` uses (`len`, `add`, `remove`, `contains`, `get`, `search`, `keys`,
`expansion_search`, `save`), over one of two layouts:

* **mapped** — the index as last saved, *memory-mapped* read-only (usearch `view`): its pages
  are the file's, shared page cache that the kernel reads on demand and may drop, not the
  process's heap (a 100k-concept database's four indexes are ~300 MB in memory when loaded,
  almost nothing when mapped). A view cannot change (usearch crashes on `add`/`remove` of a
  view), so changes since the save live beside it: new vectors in a small in-memory usearch
  index (`delta`, same metric and quantisation, so scores are the same as in the base), and
  the base's keys that were removed or replaced in `hidden`. Every read merges the two:
  a hidden key is never returned, a delta key always is. `search` asks the base for
  `count` neighbours, and when hidden keys took some of those places asks again for twice
  as many, up to `count + len(hidden)` — what a search of one index holding exactly the live vectors
  would have found (usearch's own `remove` likewise leaves a removed node in the graph and
  filters it out of the results).
* **full** — every vector in one in-memory usearch index (no file yet, a rebuild, a bulk
  catch-up): the layout the index always had before.

The delta is bounded: past DELTA_MAX keys (delta + hidden) the index *materialises* — the
saved file is loaded into memory, the hidden keys removed and the delta's vectors added (as
the int8 vectors the delta stores: usearch takes them as they are, so nothing is quantised
twice) — and is full from then on. `save(path)` writes a full index (materialising a mapped one that changed; an
unchanged mapped one is already its file) and `remap(path)` then maps the saved file again,
freeing the in-memory copy: after every save the index is mapped, and the memory it holds
is the delta of the writes since.
"""
from __future__ import annotations

import contextlib
import mmap
from typing import Any, Callable, NamedTuple

import numpy as np
from usearch.index import Index

from ..store import pagemap
from ..store.bulk import trim_heap

DELTA_MAX = 8192        # delta + hidden keys of a mapped index before it materialises
# Whether each search of the mapped file ends by dropping its pages from this process's
# page tables (`release_pages`). An HNSW search touches nodes all over the file: with the
# kernel's fault-around (64 KB per fault) ten searches left almost the whole file resident
# in the process (~100 MB of VmRSS at N=100k: clean page cache, shared and reclaimable,
# but counted); read page by page (`pagemap`) they leave about half of the two files
# (46 of 108 MB), and more distinct searches map more. Releasing after every search keeps
# it out of VmRSS, but the
# next search maps what it touches again by minor faults: +3.3 ms CPU per hybrid SEARCH
# at N=100k (5.9 -> 9.2 ms), so it is off (bench/RESULTS.md, "File pages and the loader's
# heap").
RELEASE_AFTER_SEARCH = False


class Found(NamedTuple):
    """What `search` returns (the fields of usearch's `Matches` that `vectors` reads)."""
    keys: np.ndarray            # uint64
    distances: np.ndarray       # float32, ascending


class LayeredIndex:
    """A usearch index, mapped from its saved file with an in-memory delta, or in memory."""

    def __init__(self, make: Callable[[], Index]) -> None:
        self._make = make               # a fresh, empty, mutable usearch index
        self.delta: Index = make()      # full layout: every vector; mapped: the changes
        self.base: Index | None = None  # the saved file, mapped read-only (mapped layout)
        self._map: memoryview | None = None  # ... through this mapping (it must outlive base)
        self.path: str | None = None    # the file `base` maps
        self.hidden: set[int] = set()   # keys of `base` removed or replaced since
        self._expansion: int | None = None

    # --- layouts -------------------------------------------------------------------------
    @classmethod
    def mapped(cls, make: Callable[[], Index], path: str) -> "LayeredIndex":
        """The index saved at `path`, memory-mapped (raises OSError/RuntimeError/ValueError
        when the file is missing or not an index of this shape)."""
        ix = cls(make)
        ix.remap(path)
        return ix

    def remap(self, path: str) -> None:
        """Map the file at `path` (just saved from this index) and drop the in-memory copy."""
        with open(path, "rb") as f:     # (private: the kernel lets `pagemap` register it)
            mapping = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
        base = self._make()
        view = memoryview(mapping)      # (holds the mapping open while it is referenced)
        # A search reads a few hundred bytes at each of thousands of random nodes: map those
        # pages, not 64 KB around each (`pagemap`; ten hybrid SEARCHes at N=100k mapped
        # almost the whole files).
        pagemap.read_page_by_page(np.frombuffer(view, dtype=np.uint8).ctypes.data, len(view))
        base.view(view)
        # Mapping the file made usearch read every node's header (to find where each node
        # starts): drop those pages from this process's page tables — they stay in the page
        # cache, and what searches touch comes back on demand.
        with contextlib.suppress(OSError, AttributeError, ValueError):
            mapping.madvise(mmap.MADV_DONTNEED)
        if self._expansion is not None:
            base.expansion_search = self._expansion     # type: ignore[misc]  # settable in C
        self._unmap()
        self.base, self._map, self.path = base, view, path
        self.delta = self._fresh()
        self.hidden = set()
        trim_heap()             # the in-memory copy just freed: give its pages back

    def materialise(self) -> None:
        """Switch to the full layout: the saved file loaded, the changes applied to it."""
        if self.base is None:
            return
        full = self._fresh()
        assert self.path is not None
        full.load(self.path)
        if self._expansion is not None:
            full.expansion_search = self._expansion     # type: ignore[misc]
        if self.hidden:
            full.remove(np.fromiter(self.hidden, dtype=np.uint64, count=len(self.hidden)))
        if len(self.delta):
            keys = np.asarray(self.delta.keys, dtype=np.uint64)
            full.add(keys, np.asarray(self.delta.get(keys), dtype=np.int8).reshape(len(keys), -1))
        self._unmap()
        self.delta = full
        self.hidden = set()

    def release_pages(self) -> None:
        """Drop the mapped file's pages from this process's page tables (they stay in the
        page cache; what a read touches next is mapped again on demand)."""
        mapping = self._map.obj if self._map is not None else None
        if isinstance(mapping, mmap.mmap):
            with contextlib.suppress(OSError, AttributeError, ValueError):
                mapping.madvise(mmap.MADV_DONTNEED)

    def _unmap(self) -> None:
        # usearch keeps no reference to the buffer it views: the view goes first, then the
        # mapping (unmapping under a live view would crash its next read).
        self.base, self.path = None, None
        self._map = None

    def __del__(self) -> None:
        self._unmap()

    @property
    def is_mapped(self) -> bool:
        return self.base is not None

    def _fresh(self) -> Index:
        ix = self._make()
        if self._expansion is not None:
            ix.expansion_search = self._expansion       # type: ignore[misc]
        return ix

    # --- the usearch interface `vectors` uses --------------------------------------------
    @property
    def expansion_search(self) -> int:
        return int(self.delta.expansion_search)

    @expansion_search.setter
    def expansion_search(self, value: int) -> None:
        self._expansion = value
        self.delta.expansion_search = value              # type: ignore[misc]
        if self.base is not None:
            self.base.expansion_search = value           # type: ignore[misc]

    def __len__(self) -> int:
        n = len(self.delta)
        if self.base is not None:
            n += len(self.base) - len(self.hidden)
        return n

    def contains(self, keys: np.ndarray) -> np.ndarray:
        keys = np.asarray(keys, dtype=np.uint64)
        found = np.asarray(self.delta.contains(keys), dtype=bool) if len(self.delta) \
            else np.zeros(len(keys), dtype=bool)
        if self.base is not None and len(self.base):
            in_base = np.asarray(self.base.contains(keys), dtype=bool)
            if self.hidden:
                in_base &= ~self._hidden_mask(keys)
            found |= in_base
        return found

    def add(self, keys: np.ndarray, vectors: np.ndarray, threads: int = 0) -> None:
        # An add that would take the delta past DELTA_MAX materialises *first*: the saved
        # file is loaded (no graph to build) and the keys are inserted once, into the full
        # index. Materialising after the add inserted them twice — into the delta, then
        # again from it into the full index: at N=100k with SEARCH, a bulk load's fill
        # re-inserted 8,192 vectors per save, a third of the load's CPU (s10-w1vec).
        if self.base is not None and \
                len(self.delta) + len(self.hidden) + len(keys) > DELTA_MAX:
            self.materialise()
        self.delta.add(keys, vectors, threads=threads)

    def remove(self, keys: np.ndarray) -> None:
        """Remove `keys` (each present: `contains` said so)."""
        keys = np.asarray(keys, dtype=np.uint64)
        if self.base is None:
            self.delta.remove(keys)
            return
        in_delta = np.asarray(self.delta.contains(keys), dtype=bool) if len(self.delta) \
            else np.zeros(len(keys), dtype=bool)
        if in_delta.any():
            self.delta.remove(keys[in_delta])
        rest = keys[~in_delta]
        if len(rest):
            in_base = rest[np.asarray(self.base.contains(rest), dtype=bool)]
            self.hidden.update(in_base.tolist())
        if len(self.delta) + len(self.hidden) > DELTA_MAX:
            self.materialise()

    def get(self, keys: np.ndarray) -> np.ndarray:
        """The vectors of `keys` (each present), float32, one row per key (dequantised as
        usearch returns them; `vectors.similarity` normalises them anyway)."""
        keys = np.asarray(keys, dtype=np.uint64)
        if self.base is None:
            return _rows(self.delta.get(keys, dtype="f32"), len(keys))
        out = np.zeros((len(keys), self.delta.ndim), dtype=np.float32)
        in_delta = np.asarray(self.delta.contains(keys), dtype=bool) if len(self.delta) \
            else np.zeros(len(keys), dtype=bool)
        if in_delta.any():
            out[in_delta] = _rows(self.delta.get(keys[in_delta], dtype="f32"),
                                  int(in_delta.sum()))
        if (~in_delta).any():
            out[~in_delta] = _rows(self.base.get(keys[~in_delta], dtype="f32"),
                                   int((~in_delta).sum()))
        return out

    def search(self, vector: np.ndarray, count: int) -> Found:
        if self.base is None:
            m = self.delta.search(vector, count)
            return Found(np.asarray(m.keys, dtype=np.uint64),
                         np.asarray(m.distances, dtype=np.float32))
        parts_k: list[np.ndarray] = []
        parts_d: list[np.ndarray] = []
        if len(self.delta):
            m = self.delta.search(vector, min(count, len(self.delta)))
            parts_k.append(np.asarray(m.keys, dtype=np.uint64))
            parts_d.append(np.asarray(m.distances, dtype=np.float32))
        total = len(self.base)
        if total:
            k = min(count, total)
            while True:
                m = self.base.search(vector, k)
                keys = np.asarray(m.keys, dtype=np.uint64)
                dists = np.asarray(m.distances, dtype=np.float32)
                if self.hidden:
                    keep = ~self._hidden_mask(keys)
                    keys, dists = keys[keep], dists[keep]
                # Hidden keys took places: ask again for twice as many, up to enough
                # neighbours that even every hidden key among them leaves `count` live ones.
                if len(keys) >= count or k >= total or k >= count + len(self.hidden):
                    break
                k = min(total, count + len(self.hidden), 2 * k)
            parts_k.append(keys)
            parts_d.append(dists)
            if RELEASE_AFTER_SEARCH:
                self.release_pages()
        if not parts_k:
            return Found(np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.float32))
        keys = np.concatenate(parts_k)
        dists = np.concatenate(parts_d)
        order = np.argsort(dists, kind="stable")[:count]
        return Found(keys[order], dists[order])

    @property
    def keys(self) -> np.ndarray:
        mine = np.asarray(self.delta.keys, dtype=np.uint64)
        if self.base is None:
            return mine
        theirs = np.asarray(self.base.keys, dtype=np.uint64)
        if self.hidden:
            theirs = theirs[~self._hidden_mask(theirs)]
        return np.concatenate([mine, theirs])

    def save(self, path: str) -> None:
        """Write the whole index to `path` (a mapped index materialises first)."""
        self.materialise()
        self.delta.save(path)

    def unchanged_since_saved(self, path: str) -> bool:
        """Whether this is the file at `path`, mapped, with no change since (nothing to
        write)."""
        return (self.base is not None and self.path == path and not self.hidden
                and not len(self.delta))

    @property
    def memory_usage(self) -> int:
        """Bytes of the in-memory part (the mapped file is not counted)."""
        return int(self.delta.memory_usage)

    def _hidden_mask(self, keys: np.ndarray) -> np.ndarray:
        return np.isin(keys, np.fromiter(self.hidden, dtype=np.uint64,
                                         count=len(self.hidden)))


def _rows(got: Any, n: int) -> np.ndarray:
    return np.asarray(got, dtype=np.float32).reshape(n, -1)


