"""The in-memory graph store: the same graph logic over sorted in-memory tables.

Owns the committed-version bookkeeping of the memory backend (which version readers pin,
when a commit may change tables in place); the overlay mechanics are `nexus.store.kv`'s and
the graph logic is `graph`/`graph_write`/`base`'s, so this store behaves exactly like the LMDB one:
readers see a stable snapshot and never block the writer, one writer at a time, abort
restores exactly. Nothing is persisted; `path` is None.
"""
from __future__ import annotations

import threading
from typing import Callable

from nexus.store import codec
from nexus.store.base import StoreBase
from nexus.store.kv import (KvRead, KvWrite, MemReadKv, MemVersion, MemWriteKv, Table,
                            apply_overlay, sorted_map)
from nexus.store.protocol import AUX_TABLES
from nexus.store.tables import AUX_PREFIX, CORE_TABLES, Tables


class MemoryGraphStore(StoreBase[str]):
    """GraphStore held in memory (tests, scratch graphs)."""

    def __init__(self, *, head_cache_size: int | None = None,
                 head_cache_mb: float | None = None) -> None:
        names = list(CORE_TABLES) + [AUX_PREFIX + name for name in AUX_TABLES]
        tables: dict[str, Table] = {name: sorted_map() for name in names}
        tables["meta"][codec.META_FORMAT] = codec.FORMAT_TAG
        self._version = MemVersion(tables)
        self._state = threading.Lock()      # guards _version and reader counts
        handles = {name: name for name in CORE_TABLES}
        aux = {name: AUX_PREFIX + name for name in AUX_TABLES}
        super().__init__(Tables(handles, aux), head_cache_size, head_cache_mb)

    @property
    def path(self) -> None:
        return None

    # --- backend hooks -------------------------------------------------------------------
    def _begin_read(self) -> tuple[KvRead[str], Callable[[], None]]:
        with self._state:
            version = self._version
            version.readers += 1
        ended: list[bool] = []

        def end() -> None:
            if not ended:               # idempotent: a txn is ended once
                ended.append(True)
                with self._state:
                    version.readers -= 1
        return MemReadKv(version), end

    def _begin_write(self) -> KvWrite[str]:
        return MemWriteKv(self._version)

    def _commit(self, kv: KvWrite[str]) -> None:
        assert isinstance(kv, MemWriteKv)   # the kv of _begin_write
        with self._state:
            serial = self._version.serial + 1
            self._version = apply_overlay(self._version, kv.overlay)
            # Every commit gets a new serial (the snapshot id of later readers), also when
            # the overlay was applied in place (no reader pinned the version).
            self._version.serial = serial

    def _abort(self, kv: KvWrite[str]) -> None:
        assert isinstance(kv, MemWriteKv)   # the kv of _begin_write
        kv.overlay.clear()

    def dump(self) -> dict[str, list[tuple[bytes, bytes]]]:
        """Every table's (key, value) pairs in key order (for tests and debugging)."""
        with self._state:
            return {name: list(t.items()) for name, t in self._version.tables.items()}
