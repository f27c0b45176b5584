"""Decoded posting lists kept between reads, each checked against its blocks' bytes.

Owns the process-wide cache that `postings.read` consults for lists of at least MIN_BLOCKS
blocks: the term lists of common words, which every SEARCH over such a word reads whole
(up to POSTING_CAP postings, hundreds of blocks) and whose decode — packed blocks above all
(`postings_packed`) — was the dearest step of reading them (bench/RESULTS.md, "SEARCH at
100k: the query side profiled", s18-lexread).

An entry is `(the joined bytes of the blocks read, complete) → the decoded arrays`. A read
still scans the list's blocks (what a snapshot holds is only known by reading it), joins
their bytes and compares them with the entry's: equal bytes decode to equal arrays (a
block's layout and length are fixed by its first bytes, so the joined bytes fix the
blocks), so a hit answers exactly what decoding would, whatever the snapshot, the store or
the backend, and a list changed by a write simply misses and is decoded again. Nothing has
to be invalidated on a write, and there is no staleness to reason about.

Bounded in bytes (MAX_BYTES: arrays plus the bytes kept for the check; least recently used
lists leave first). The arrays handed out are shared between readers: read-only.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

MIN_BLOCKS = 8              # lists of fewer blocks are decoded each time (cheap, many)
# The cache's bound: decoded arrays + the blocks' bytes. 16 MB held 85 % of the hits of 402
# SEARCHes at 100k (32 MB: all of them) and keeps a serving process's growth well inside
# issue 18's memory bound (a fresh serving process ~141 MB of its 150).
MAX_BYTES = 16 << 20

Decoded = tuple[np.ndarray, np.ndarray, np.ndarray, bool]


class DecodedLists:
    """An LRU map prefix → (blocks' bytes, decoded list), bounded in bytes."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self.hits = self.misses = 0
        self._lists: OrderedDict[bytes, tuple[bytes, Decoded, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, prefix: bytes, blob: bytes, complete: bool) -> Decoded | None:
        """The decoded list at `prefix` if it was cached from exactly these bytes."""
        with self._lock:
            got = self._lists.get(prefix)
            if got is None or got[1][3] != complete or got[0] != blob:
                self.misses += 1
                return None
            self._lists.move_to_end(prefix)
            self.hits += 1
            return got[1]

    def put(self, prefix: bytes, blob: bytes, decoded: Decoded) -> Decoded:
        """Keep `decoded` (the list read from `blob`) and return it as kept: arrays that
        own their memory (a view would keep a block's buffer alive unaccounted), read-only."""
        arrays = []
        for a in decoded[:3]:
            if not a.flags.owndata:
                a = a.copy()
            a.flags.writeable = False
            arrays.append(a)
        kept: Decoded = (arrays[0], arrays[1], arrays[2], decoded[3])
        cost = len(blob) + sum(a.nbytes for a in arrays) + 200
        if cost > self.max_bytes:
            return kept
        with self._lock:
            old = self._lists.pop(prefix, None)
            if old is not None:
                self.size -= old[2]
            self._lists[prefix] = (blob, kept, cost)
            self.size += cost
            while self.size > self.max_bytes:
                _, (_, _, gone) = self._lists.popitem(last=False)
                self.size -= gone
        return kept

    def clear(self) -> None:
        with self._lock:
            self._lists.clear()
            self.size = 0


CACHE = DecodedLists()
