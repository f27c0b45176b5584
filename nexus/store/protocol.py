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
  The one exception: MERGE moves the ends of a link and keeps its id
  (`WriteTxn.repoint_link`). Because heads otherwise never change and ids are never reused,
  implementations may cache heads across transactions (a moved link's head excepted);
  *existence* must still be answered by the transaction's snapshot.
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
(dry runs). Iterators returned by a transaction are valid only inside it. In a write
transaction, materialize (`list(...)`) a scan before writing to the index it walks (e.g.
collect `out_links(s)` before deleting those links): what an iterator yields after a write
to its own range is unspecified.

Errors: every method raises only `KipError`. A value that is not JSON (or an int outside the
64-bit range, or text that is not valid Unicode) is `KIP_2003`; a storage failure (disk or
map full, corruption, a closed store) is `KIP_4003`. Foreign exceptions raised inside a
`with` block by the store's backend are translated when they leave the block.

Symbols and heads may be served from process-wide caches. A `symbol_id` lookup may therefore
return an id interned by a commit newer than the caller's snapshot; that is harmless
(interning is permanent, and such an id matches nothing in the older snapshot). `head()`
always answers existence from the caller's snapshot.

Aux tables
----------
Components that keep their own indexes inside the same transaction as the data (the lexical
search postings, capsule hashes, the audit log) use `txn.aux(table)`: a sorted bytes→bytes
map with get/put/delete/prefix scan. Table names are declared up front in
`AUX_TABLES` so that LMDB can open them.

Caches and integrity
--------------------
What is derived from a snapshot (the columnar executor's arrays, its planning choices) is
keyed by `(txn.store_token(), txn.snapshot_id())`. `store.check_tables(txn, ...)` verifies
(and repairs, in the caller's write transaction) the backend's own tables: each backend
knows its layout (LMDB and memory: `nexus.store.integrity`).

The heads and the JSON map type live in `nexus.store.model` and are re-exported here.
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from typing import (TYPE_CHECKING, Any, Iterable, Iterator, NamedTuple, Protocol, Sequence,
                    runtime_checkable)

from nexus.store.model import ConceptHead, Head, JsonMap, LinkHead, MapColumn

if TYPE_CHECKING:
    from nexus.store.columns import StoreColumns, TxnColumns

__all__ = ["AUX_TABLES", "AuxTable", "ConceptHead", "GraphStore", "Head", "JsonMap",
           "LinkHead", "ReadTxn", "TableCheck", "WriteTxn"]

# Named sub-tables available through ReadTxn.aux()/WriteTxn.aux().
AUX_TABLES: tuple[str, ...] = (
    "engine",     # engine bookkeeping: schema version, capsule hashes, settings
    "lex",        # lexical search postings (nexus.search)
    "lexdoc",     # per-element lexical document stats (nexus.search)
    "vecq",       # vector-index change queue / watermark (nexus.search)
    "audit",      # request audit log (server list_logs)
    "history",    # the version log: one record per committed write (nexus.history)
    "histel",     # the version log by element
    "histnew",    # the version log's bulk-created id ranges
    "gram",       # name trigram postings: keyword SEARCH's typo candidates (nexus.search)
)
# Aux tables that journal requests instead of holding data anything is derived from (the
# audit log, flushed by `kip serve` every few hundred requests): a commit that writes only
# these may keep the `snapshot_id()` of the state before it (LMDB with its write-ahead log
# does), so that what is cached per snapshot survives the audit log's flushes.
JOURNAL_TABLES: frozenset[str] = frozenset({"audit"})


@runtime_checkable
class HeldRecovery(Protocol):
    """Optional capability of a store that can answer from commits its files do not hold
    yet: an LMDB open on a full disk whose write-ahead log could not be replayed into the
    data file keeps those records in memory (`nexus.store.kv.PendingKv`). Another process
    reading the same files (`kip serve --workers` followers) would not see them."""

    def commits_held_in_memory(self) -> int:
        """How many committed writes only this process can read (0: none)."""
        ...


@runtime_checkable
class AuxTable(Protocol):
    def get(self, key: bytes) -> bytes | None: ...
    def scan(self, prefix: bytes = b"", *, reverse: bool = False,
             start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Pairs whose key starts with `prefix`, in key order (or reversed).
        `start`, when given, skips keys before it (after it when reversed)."""
        ...
    def put(self, key: bytes, value: bytes) -> None:
        """Write txns only (else KIP_4003); keys are 1..511 bytes."""
        ...
    def delete(self, key: bytes) -> bool: ...                 # write txns only
    def count(self, prefix: bytes = b"") -> int: ...
    def prefetch(self, keys: Iterable[bytes] = (), last_under: Iterable[bytes] = ()) -> None:
        """A hint, changing no answer: `get` of `keys` and the first pair of a reverse
        `scan` of each prefix in `last_under` come next. A store whose reads are round
        trips (PostgreSQL) reads them all at once; a local one ignores it."""
        ...


@runtime_checkable
class ReadTxn(Protocol):
    # --- symbols -------------------------------------------------------------------------
    def symbol_id(self, text: str) -> int | None:
        """The interned id of a type/predicate name, or None if never interned."""
        ...
    def symbol_text(self, sid: int) -> str:
        """The text of an interned symbol; an unknown id is KIP_4003."""
        ...

    # --- elements ------------------------------------------------------------------------
    def head(self, n: int) -> Head | None:
        """The element's head if it exists in this snapshot, else None (also for values
        that cannot be ids at all). The hottest call of the executor: one B-tree lookup."""
        ...
    def known_head(self, n: int) -> Head:
        """head() for an id KNOWN to exist in this snapshot — one the caller just read from
        one of this transaction's indexes (a scan, concept_id, link_id) — so the existence
        check can be skipped: served from the process-wide cache when possible, several
        times faster than head() on a large store. Undefined for other ids."""
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
    def concept_id(self, type_id: int, name: str) -> int | None:
        """The id of the concept {type, name} (names of any length), or None."""
        ...
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
        """(predicate_id, object, link) for links leaving `subject`, in that tuple order
        (index s-p-o-n)."""
        ...
    def in_links(self, object: int, predicate_id: int | None = None
                 ) -> Iterator[tuple[int, int, int]]:
        """(predicate_id, subject, link) for links entering `object`, in that tuple order
        (index o-p-s-n)."""
        ...
    def links_of_predicate(self, predicate_id: int) -> Iterator[tuple[int, int, int]]:
        """(subject, object, link) for every link with this predicate, in that tuple order
        (index p-s-o-n)."""
        ...
    def link_predicates(self) -> Iterator[int]:
        """The predicate ids that have links, ascending (index p-s-o-n, one seek per
        predicate): with `links_of_predicate`, every link without a scan of every element
        (a predicate-variable pattern with neither end bound). A view may also yield a
        predicate whose links it hides; it never omits one that has a visible link."""
        ...

    # --- batched reads (module doc of `nexus.store.batched`) -----------------------------
    # One call for many elements, answering exactly what the one-element calls answer for
    # each (in the order given; repeated ids allowed). The executor calls them a chunk of
    # rows at a time: on PostgreSQL each is one SQL statement, on LMDB and memory a loop.
    def prefers_batches(self) -> bool:
        """True when every call costs a round trip (PostgreSQL): the executor then asks
        the batched calls a chunk of rows at a time. False when a one-element call is an
        in-process lookup (LMDB, memory), for which the row-at-a-time operators are
        fastest."""
        ...
    def known_heads(self, ns: Sequence[int]) -> list[Head]:
        """`known_head(n)` for each n (every n known to exist in this snapshot)."""
        ...
    def attributes_of(self, ns: Sequence[int]) -> list[JsonMap]:
        """`attributes(n)` for each n (fresh dicts)."""
        ...
    def metadata_of(self, ns: Sequence[int]) -> list[JsonMap]:
        """`metadata(n)` for each n (fresh dicts)."""
        ...
    def link_ids(self, triples: Sequence[tuple[int, int, int]]) -> list[int | None]:
        """`link_id(subject, predicate_id, object)` for each triple."""
        ...
    def concept_ids(self, pairs: Sequence[tuple[int, str]]) -> list[int | None]:
        """`concept_id(type_id, name)` for each pair (a command's named concepts and
        the definitions of its types and predicates, looked up at once)."""
        ...
    def out_links_of(self, subjects: Sequence[int], predicate_id: int | None = None
                     ) -> dict[int, list[tuple[int, int, int]]]:
        """subject -> `list(out_links(subject, predicate_id))` for each distinct subject
        that has such links (a subject without any is absent)."""
        ...
    def in_links_of(self, objects: Sequence[int], predicate_id: int | None = None
                    ) -> dict[int, list[tuple[int, int, int]]]:
        """object -> `list(in_links(object, predicate_id))`, as `out_links_of`."""
        ...

    # --- statistics (exact, maintained on write) -----------------------------------------
    def count_type(self, type_id: int) -> int: ...
    def count_predicate(self, predicate_id: int) -> int: ...
    def count_concepts(self) -> int: ...
    def count_links(self) -> int: ...

    # --- aux -----------------------------------------------------------------------------
    def aux(self, table: str) -> AuxTable: ...

    # --- snapshots and column views (the columnar executor) ------------------------------
    def snapshot_id(self) -> int | None:
        """An id of the committed snapshot a read transaction sees: two read transactions
        with equal ids see identical data (the `JOURNAL_TABLES` aside), and every commit
        that writes anything else changes it (LMDB's transaction id, or the id of the state
        a journal-only commit kept; the memory store's commit serial). None in a write
        transaction."""
        ...
    def store_token(self) -> int:
        """An id of the store this transaction belongs to: equal for every transaction of
        one open store, different between stores open in one process. With
        `snapshot_id()` it keys caches of what was derived from a snapshot."""
        ...
    def columns(self) -> TxnColumns | None:
        """`nexus.store.columns.TxnColumns` for this snapshot (numpy arrays of a predicate's
        links, of a type's ids; snapshot-keyed caches), or None when the transaction cannot
        be served by columns (a write transaction; ids too large for arrays)."""
        ...
    def column_cache(self) -> StoreColumns | None:
        """The store's snapshot-keyed column caches, to ask which arrays are cached
        without building a view (`cached(snapshot_id, key)`); None for a backend without
        column views."""
        ...


@runtime_checkable
class WriteTxn(ReadTxn, Protocol):
    def intern(self, text: str) -> int:
        """The symbol id of `text`, interning it if new."""
        ...
    def new_id(self) -> int:
        """Advance the shared counter and return the new id. A backend may cap its ids
        (LMDB and memory: 2**32 - 1, `codec.MAX_ELEMENT_ID`): past the cap, KIP_4002."""
        ...
    def reserve_ids(self, count: int) -> range:
        """Advance the counter by `count` and return the ids handed out (for bulk loads);
        past the backend's cap, KIP_4002 (nothing handed out)."""
        ...
    def create_concept(self, n: int, type_id: int, name: str,
                       attributes: JsonMap, metadata: JsonMap) -> None:
        """Insert a concept; the caller guarantees (type_id, name) is not taken (a taken
        pair is still caught: KIP_3003). `n` comes from new_id()/reserve_ids(); a larger
        `n` moves the counter past it. Bad values raise KIP_2003 before anything is written."""
        ...
    def create_link(self, n: int, subject: int, predicate_id: int, object: int,
                    attributes: JsonMap, metadata: JsonMap) -> None:
        """Insert a link; the caller guarantees (s, p, o) is not taken (a taken triple is
        still caught: KIP_3003). The store does not check that s and o exist."""
        ...
    def repoint_link(self, n: int, subject: int, object: int) -> None:
        """Move the ends of an existing link to (subject, object), keeping its id, predicate,
        attributes and metadata; every index follows (MERGE). A missing link is KIP_3002,
        a taken (subject, predicate, object) KIP_3003. Snapshots older than the commit
        still see the old ends."""
        ...
    def repoint_links(self, moves: Sequence[tuple[int, int, int]],
                      heads: Sequence[LinkHead] | None = None) -> list[int | None]:
        """`repoint_link(n, subject, object)` for each move, in order, in one call (MERGE
        moves all the links of a concept at once; the store sorts each index's writes).
        Answers one entry per move: None when it was made (or changed nothing), else the
        id of the link that holds its (subject, predicate, object) — a stored link not
        moved away by an earlier move of the batch, or an earlier move's link — and that
        move is not made (the caller resolves the collision). A missing link is KIP_3002
        and a link id repeated in `moves` KIP_4003, both before anything is written.
        `heads`, when given, are the moved links' current heads, one per move, as the
        caller read them in this transaction (MERGE: from the link indexes): the store
        need not read them again (one that does not hold them may still read them)."""
        ...
    def bump_versions(self, ids: Sequence[int], now: str) -> list[tuple[int, str] | None]:
        """`_version` +1 and `_updated_at` = `now` on each element's metadata, every other
        key as it is, without the caller reading the maps (MERGE's links it moved and
        changed in no other way). Answers, per id, the `_version` and `_updated_at` the
        element had — or None where this store did not bump it (its map not in a form it
        patches in place, an id repeated, a store without the fast path): the caller then
        bumps that one through `set_metadata_many`."""
        ...
    def set_attributes(self, n: int, attributes: JsonMap) -> None:
        """Replace the whole attribute map of an existing element ({} removes it).
        A missing element is KIP_3002."""
        ...
    def set_metadata(self, n: int, metadata: JsonMap) -> None: ...
    def set_metadata_many(self, items: Sequence[tuple[int, JsonMap]]) -> None:
        """`set_metadata(n, metadata)` for every pair, in one call (an UPDATE sweep): the
        maps are encoded together and inserted sorted. Every element must exist (else
        KIP_3002, nothing of the batch written); a repeated id keeps its last map. The
        maps are handed over: the caller does not change them after the call (a wrapper
        such as the version log's recorder keeps them as they are)."""
        ...
    def delete(self, n: int) -> bool:
        """Remove one element and its index entries (no cascade: the caller cascades).
        Returns False, changing nothing, when `n` does not exist."""
        ...
    def aux_put_many(self, table: str, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        """`aux(table).put(key, value)` for every pair, in one call (sorted and inserted by
        the store; when a key repeats, its last value wins) — for index builders that
        write many entries at once."""
        ...

    # --- bulk path (loading): same effects as the single calls, without per-item cost ----
    def create_concepts(self, rows: Iterable[tuple[int, int, str, JsonMap | None,
                                                   JsonMap | None]]) -> int:
        """create_concept for each row (n, type_id, name, attributes, metadata); returns
        the number created. Index entries are sorted and inserted table by table (appended
        when they follow the table's last key). Repeated or taken (type, name) pairs are
        KIP_3003 and leave the transaction half-written: let it abort."""
        ...
    def create_links(self, rows: Iterable[tuple[int, int, int, int, JsonMap | None,
                                                JsonMap | None]],
                     known_new: bool = False) -> int:
        """create_link for each row (n, subject, predicate_id, object, attributes,
        metadata); as create_concepts. Repeated or taken (s, p, o) triples are KIP_3003.
        Checking "taken" costs one index probe per row when the store already has links;
        `known_new=True` says the caller already knows none is taken (e.g. it probed with
        link_id, or an end is new) and skips it — a wrong promise corrupts the index."""
        ...
    def create_concept_columns(self, ids: Sequence[int], type_ids: Sequence[int],
                               names: Sequence[str],
                               attributes: MapColumn | None = None,
                               metadata: MapColumn | None = None, *,
                               extra_metadata: JsonMap | None = None) -> int:
        """create_concepts over columns (equal lengths; `ids` may be a `range`; a None map
        column means all empty) — no row tuples to build. `extra_metadata` is merged into
        every element's metadata (`{**metadata, **extra}`; its keys must not occur in the
        column's maps): how a loader adds the engine keys without a dict per element."""
        ...
    def create_link_columns(self, ids: Sequence[int], subjects: Sequence[int],
                            predicate_ids: Sequence[int], objects: Sequence[int],
                            attributes: MapColumn | None = None,
                            metadata: MapColumn | None = None, *, known_new: bool = False,
                            extra_metadata: JsonMap | None = None) -> int:
        """create_links over columns, as create_concept_columns. A repeated or taken
        (s, p, o) raises KIP_3003 before anything is written (the transaction is unchanged
        and may go on). The in_links / links_of_predicate entries of bulk-created links may
        be inserted only at commit (or at the transaction's next read of those indexes)."""
        ...
    def commit_id(self) -> int:
        """The `snapshot_id()` that read transactions will see once this one commits (a
        write that aborts leaves its id to the next write; one that writes only
        `JOURNAL_TABLES` may leave readers at the id before it)."""
        ...
    def abort(self) -> None:
        """Discard everything; the `with` block will then exit without committing."""
        ...


class TableCheck(NamedTuple):
    """What `GraphStore.check_tables` found: `report` holds a count per drift category
    (0 when in step), `"ok"`, the element, concept, link and symbol counts, and
    `"examples"` (category -> a few descriptions); `fixes` is how many keys a repair wrote
    or deleted (0 without repair)."""
    report: dict[str, Any]
    fixes: int


class GraphStore(Protocol):
    def read(self) -> AbstractContextManager[ReadTxn]:
        """A read transaction on the latest committed snapshot."""
        ...
    def write(self) -> AbstractContextManager[WriteTxn]:
        """Blocks while another thread writes; opening a second write transaction in the
        thread that holds one is KIP_4003 (it would deadlock)."""
        ...
    def close(self) -> None: ...
    @property
    def path(self) -> str | None: ...
    @property
    def writing(self) -> bool:
        """Whether a write transaction is open in this process now (a hint for background
        work that should wait for writes to pause: it may change at once)."""
        ...
    def check_tables(self, txn: ReadTxn, *, examples: int = 5,
                     repair: bool = False) -> TableCheck:
        """Verify the backend's own tables in `txn` (one of this store's transactions):
        every index and statistic against the base records (see
        `nexus.store.integrity` for the LMDB/memory layout and its drift categories).
        With `repair`, `txn` must be this store's write transaction: what is derived from
        the base records and drifted is rewritten in it (committed with it); base records
        are never changed. The report is the same with or without repair."""
        ...
