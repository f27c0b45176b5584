"""The storage protocol: what the executor may ask of a graph store, over integer ids.

This is the narrow waist between the engine (`nexus.exec`, `nexus.plan`, `nexus.search`) and
storage. Operators see only these methods; LMDB cursors, key encodings and msgpack never leak
above it. Two implementations behave identically: `LmdbGraphStore` (on disk, the default)
and `MemoryGraphStore` (tests); the same test suite runs against both.

Model
-----
* Every element (concept node or proposition link) has a positive integer id `n` drawn from
  ONE counter (CONTRACT §3): on the wire `C:<n>` / `P:<n>:<predicate>`. Ids are never reused.
* Type names and predicate names are interned as small positive integers ("symbols").
  Interning is permanent: a symbol id always denotes the same string.
* An element's *head* is immutable for its whole life:
    concept: `ConceptHead(n, type_id, name)`
    link:    `LinkHead(n, subject, predicate_id, object)`
  (subject/object are element ids: concepts or, for higher-order links, other links).
  Because heads never change and ids are never reused, implementations may cache heads
  across transactions; *existence* must still be answered by the transaction's snapshot.
* `attributes` and `metadata` are JSON-like dicts (str keys; values None/bool/int/float/str/
  list/dict) stored separately from the head and decoded only when asked for. Engine metadata
  (`_version`, `_created_at`, `_updated_at`) lives in the metadata dict like any other key;
  the store does not interpret it.

Transactions
------------
`store.read()` / `store.write()` are context managers. A read transaction sees one consistent
snapshot for its whole life and never blocks the writer. At most one write transaction exists
at a time; it commits when the `with` block exits normally and aborts (leaving the store
exactly as before) when it exits with an exception, or when `txn.abort()` was called
(dry runs). Iterators returned by a transaction are valid only inside it.

Aux tables
----------
Components that keep their own indexes inside the same transaction as the data (the lexical
search postings, capsule hashes, the audit log) use `txn.aux(table)`: a sorted bytes→bytes
map with get/put/delete/prefix scan. Table names are declared up front in
`AUX_TABLES` so that LMDB can open them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Protocol, runtime_checkable

JsonMap = dict  # dict[str, JSON value]

# Named sub-tables available through ReadTxn.aux()/WriteTxn.aux().
AUX_TABLES: tuple[str, ...] = (
    "engine",     # engine bookkeeping: schema version, capsule hashes, settings
    "lex",        # lexical search postings (nexus.search)
    "lexdoc",     # per-element lexical document stats (nexus.search)
    "vecq",       # vector-index change queue / watermark (nexus.search)
    "audit",      # request audit log (server list_logs)
)


@dataclass(frozen=True, slots=True)
class ConceptHead:
    n: int
    type_id: int
    name: str


@dataclass(frozen=True, slots=True)
class LinkHead:
    n: int
    subject: int
    predicate_id: int
    object: int


Head = ConceptHead | LinkHead


@runtime_checkable
class AuxTable(Protocol):
    def get(self, key: bytes) -> bytes | None: ...
    def scan(self, prefix: bytes = b"", *, reverse: bool = False,
             start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Pairs whose key starts with `prefix`, in key order (or reversed).
        `start`, when given, skips keys before it (after it when reversed)."""
        ...
    def put(self, key: bytes, value: bytes) -> None: ...      # write txns only
    def delete(self, key: bytes) -> bool: ...                 # write txns only
    def count(self, prefix: bytes = b"") -> int: ...


@runtime_checkable
class ReadTxn(Protocol):
    # --- symbols -------------------------------------------------------------------------
    def symbol_id(self, text: str) -> int | None:
        """The interned id of a type/predicate name, or None if never interned."""
        ...
    def symbol_text(self, sid: int) -> str: ...

    # --- elements ------------------------------------------------------------------------
    def head(self, n: int) -> Head | None:
        """The element's head if it exists in this snapshot, else None."""
        ...
    def attributes(self, n: int) -> JsonMap:
        """A fresh dict (the caller may mutate it); {} if none or absent."""
        ...
    def metadata(self, n: int) -> JsonMap: ...
    def max_id(self) -> int:
        """The highest id ever handed out (0 on an empty store)."""
        ...
    def elements(self) -> Iterator[int]:
        """Every existing element id, ascending."""
        ...

    # --- concept indexes -----------------------------------------------------------------
    def concept_id(self, type_id: int, name: str) -> int | None: ...
    def concepts_of_type(self, type_id: int) -> Iterator[int]:
        """Ids ascending."""
        ...
    def concepts_named(self, name: str) -> Iterator[int]:
        """Ids ascending (any type)."""
        ...

    # --- link indexes (each yields the link id last) -------------------------------------
    def link_id(self, subject: int, predicate_id: int, object: int) -> int | None: ...
    def out_links(self, subject: int, predicate_id: int | None = None
                  ) -> Iterator[tuple[int, int, int]]:
        """(predicate_id, object, link) for links leaving `subject` (spo order)."""
        ...
    def in_links(self, object: int, predicate_id: int | None = None
                 ) -> Iterator[tuple[int, int, int]]:
        """(predicate_id, subject, link) for links entering `object`."""
        ...
    def links_of_predicate(self, predicate_id: int) -> Iterator[tuple[int, int, int]]:
        """(subject, object, link) for every link with this predicate (pos order)."""
        ...

    # --- statistics (exact, maintained on write) -----------------------------------------
    def count_type(self, type_id: int) -> int: ...
    def count_predicate(self, predicate_id: int) -> int: ...
    def count_concepts(self) -> int: ...
    def count_links(self) -> int: ...

    # --- aux -----------------------------------------------------------------------------
    def aux(self, table: str) -> AuxTable: ...


@runtime_checkable
class WriteTxn(ReadTxn, Protocol):
    def intern(self, text: str) -> int:
        """The symbol id of `text`, interning it if new."""
        ...
    def new_id(self) -> int:
        """Advance the shared counter and return the new id."""
        ...
    def create_concept(self, n: int, type_id: int, name: str,
                       attributes: JsonMap, metadata: JsonMap) -> None:
        """Insert a concept; the caller guarantees (type_id, name) is not taken."""
        ...
    def create_link(self, n: int, subject: int, predicate_id: int, object: int,
                    attributes: JsonMap, metadata: JsonMap) -> None:
        """Insert a link; the caller guarantees (s, p, o) is not taken."""
        ...
    def set_attributes(self, n: int, attributes: JsonMap) -> None:
        """Replace the whole attribute map of an existing element."""
        ...
    def set_metadata(self, n: int, metadata: JsonMap) -> None: ...
    def delete(self, n: int) -> None:
        """Remove one element and its index entries (no cascade: the caller cascades)."""
        ...
    def abort(self) -> None:
        """Discard everything; the `with` block will then exit without committing."""
        ...


class GraphStore(Protocol):
    def read(self): ...    # -> ContextManager[ReadTxn]
    def write(self): ...   # -> ContextManager[WriteTxn]
    def close(self) -> None: ...
    @property
    def path(self) -> str | None: ...
