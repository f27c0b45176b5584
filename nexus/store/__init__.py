"""Graph storage: the protocol the engine talks to and its two implementations.

`open_store(path)` opens (creating if needed) an LMDB store in the directory `path`, or an
in-memory store when `path` is None. Everything above this package sees only the protocol
(`nexus.store.protocol`); key layouts, LMDB and msgpack stay inside.
"""
from __future__ import annotations

from nexus.store.lmdb_store import LmdbGraphStore
from nexus.store.memory_store import MemoryGraphStore
from nexus.store.protocol import (AUX_TABLES, AuxTable, ConceptHead, GraphStore, Head,
                                  LinkHead, ReadTxn, WriteTxn)

__all__ = ["open_store", "LmdbGraphStore", "MemoryGraphStore", "AUX_TABLES", "AuxTable",
           "ConceptHead", "GraphStore", "Head", "LinkHead", "ReadTxn", "WriteTxn"]


def open_store(path: str | None, **options) -> LmdbGraphStore | MemoryGraphStore:
    """An LMDB store at `path` (options: map_size, durable, max_readers, head_cache_size),
    or a memory store when `path` is None (option: head_cache_size)."""
    if path is None:
        return MemoryGraphStore(**options)
    return LmdbGraphStore(path, **options)
