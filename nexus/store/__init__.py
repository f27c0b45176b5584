"""Graph storage: the protocol the engine talks to, its backends, and the backend registry.

`open_store(location)` opens (creating if needed) the store a location names: a plain path
is an LMDB store in that directory; a URL picks a registered backend by its scheme —
`lmdb:///abs/path` (or `lmdb://rel/path`), `memory://` (a fresh in-memory store). A new
backend registers its scheme with `register_backend` and implements the protocol of
`nexus.store.protocol`; the storage and language test suites run over every registered
backend. Everything above this package sees only the protocol; key layouts, LMDB and
msgpack stay inside.
"""
from __future__ import annotations

import os
import re
from typing import Any, Callable

from nexus.errors import ErrorCode, KipError
from nexus.store.lmdb_store import LmdbGraphStore
from nexus.store.memory_store import MemoryGraphStore
from nexus.store.protocol import (AUX_TABLES, AuxTable, ConceptHead, GraphStore, Head,
                                  JsonMap, LinkHead, ReadTxn, TableCheck, WriteTxn)

__all__ = ["open_store", "register_backend", "backends", "split_location", "LmdbGraphStore",
           "MemoryGraphStore", "AUX_TABLES", "AuxTable", "ConceptHead", "GraphStore", "Head",
           "JsonMap", "LinkHead", "ReadTxn", "TableCheck", "WriteTxn"]

# scheme -> opener(rest_of_location, **options) -> store. Openers ignore options they do not
# know (e.g. `durable` for the memory store).
Opener = Callable[..., GraphStore]
_BACKENDS: dict[str, Opener] = {}
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://")


def register_backend(scheme: str, opener: Opener) -> None:
    """Make `scheme://...` locations open with `opener(rest, **options)`."""
    _BACKENDS[scheme.lower()] = opener


def backends() -> tuple[str, ...]:
    """The registered schemes."""
    return tuple(_BACKENDS)


def split_location(location: str | os.PathLike[str]) -> tuple[str, str]:
    """(scheme, rest) of a location; a plain path is ("lmdb", path)."""
    text = os.fspath(location)
    m = _SCHEME.match(text)
    if m is None:
        return "lmdb", text
    return m.group(1).lower(), text[m.end():]


def open_store(location: str | os.PathLike[str] | None, **options: Any) -> GraphStore:
    """The store at `location` (see the module doc); `None` is `memory://`. Options:
    `durable` (LMDB: fsync each commit), `wal` (LMDB: durable through a write-ahead log,
    `nexus.store.wal`; other backends ignore it), and backend-specific ones (`map_size`,
    `head_cache_size`...)."""
    if location is None:
        location = "memory://"
    scheme, rest = split_location(location)
    opener = _BACKENDS.get(scheme)
    if opener is None:
        raise KipError(ErrorCode.KIP_4003, f"no storage backend for {scheme}:// locations",
                       f"Known schemes: {', '.join(sorted(_BACKENDS))}; a plain directory "
                       f"path opens an LMDB store.")
    return opener(rest, **options)


def _open_lmdb(path: str, **options: Any) -> LmdbGraphStore:
    if not path:
        raise KipError(ErrorCode.KIP_4003, "an lmdb:// location needs a directory path",
                       "Write lmdb:///absolute/path or give the directory path itself.")
    return LmdbGraphStore(path, **options)


def _open_memory(rest: str, *, durable: bool = True, wal: bool = False,
                 **options: Any) -> MemoryGraphStore:
    if rest.strip("/"):
        raise KipError(ErrorCode.KIP_4003, f"memory:// takes no path (got {rest!r})",
                       "Write memory:// for a fresh in-memory store.")
    return MemoryGraphStore(**options)


register_backend("lmdb", _open_lmdb)
register_backend("memory", _open_memory)


def _open_postgresql(rest: str, *, wal: bool = False, **options: Any) -> GraphStore:
    """`postgresql://user[:password]@host[:port]/dbname[?space=NAME&...]`: the PostgreSQL
    backend (`nexus.store.pg_store`), which needs the `postgres` extra (psycopg)."""
    try:
        from nexus.store.pg_store import PgGraphStore
    except ImportError as exc:
        raise KipError(ErrorCode.KIP_4003, f"the postgresql:// backend needs psycopg, which "
                       f"is not installed ({exc.name})",
                       "pip install 'nexus-kip[postgres]'") from None
    return PgGraphStore(rest, **options)


register_backend("postgresql", _open_postgresql)
