"""Caches bounded by bytes, not only by entries.

An entry count does not bound memory when entries differ in size by orders of magnitude (a
parsed 60 KiB command holds about 1 MiB of syntax tree; a compiled REGEX can hold megabytes),
so every process-wide cache of nexus weighs its entries — an estimate in bytes given by the
caller — and evicts the least recently used ones past its budget (docs/limits.md, "Caches").
An entry heavier than the whole budget is simply not kept.

Thread-safe: one lock per cache around each insertion (compound `OrderedDict` operations are
not atomic across threads); a lookup is two atomic calls and takes no lock.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Generic, Hashable, TypeVar

V = TypeVar("V")


class WeightedLRU(Generic[V]):
    """A least-recently-used map whose entries weigh (estimated) bytes; the sum of the
    weights stays within `max_bytes` and the count within `max_entries`."""

    def __init__(self, max_bytes: int, max_entries: int = 1 << 20) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.bytes = 0
        self._items: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Hashable) -> V | None:
        # No lock on the hit path (it is every parse and every prepared FIND): each of the
        # two calls is one C method of OrderedDict, atomic under the GIL; only `put`'s
        # compound update needs the lock. A key evicted between them just stays evicted.
        hit = self._items.get(key)
        if hit is None:
            return None
        try:
            self._items.move_to_end(key)
        except KeyError:
            pass
        return hit[0]

    def put(self, key: Hashable, value: V, weight: int) -> None:
        """Keep `value` under `key` (weighing `weight` bytes), evicting the least recently
        used entries as needed; a value heavier than the whole budget is not kept."""
        if weight > self.max_bytes:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            self._items[key] = (value, weight)
            self.bytes += weight
            while self.bytes > self.max_bytes or len(self._items) > self.max_entries:
                _, (_, w) = self._items.popitem(last=False)
                self.bytes -= w

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.bytes = 0

    def get_or_make(self, key: Hashable, make: Callable[[], V],
                    weigh: Callable[[V], int]) -> V:
        """The cached value of `key`, or `make()` kept with weight `weigh(value)`."""
        hit = self.get(key)
        if hit is None:
            hit = make()
            self.put(key, hit, weigh(hit))
        return hit
