"""The write transaction that remembers what it changed (for the version log).

`RecordingTxn` wraps the store's write transaction for one write session. Before the first
change the session makes to an element it keeps the element's state — its head,
attributes and metadata: the *pre-image* — or notes that the element did not exist. Every
writer (UPSERT, DELETE, UPDATE, MERGE, REVERT, capsules, bulk import, repair) writes through
the store protocol, so wrapping the transaction sees them all, without each one knowing
about history. Reads pass straight through.

Bulk paths create fresh ids in large numbers: those are noted as created without a lookup.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

from nexus.store.protocol import AuxTable, Head, JsonMap, LinkHead, ReadTxn, WriteTxn

if TYPE_CHECKING:
    from nexus.store.columns import StoreColumns, TxnColumns
    from nexus.store.model import MapColumn


READ_METADATA_CAP = 4096     # metadata maps kept between a read and the write (see below)


@dataclass(frozen=True, slots=True)
class PreImage:
    """An element's state before a change: its head, attributes and metadata."""
    head: Head
    attributes: JsonMap
    metadata: JsonMap


def pre_image(txn: ReadTxn, n: int) -> PreImage | None:
    """The current state of `n` in `txn`, None when it does not exist."""
    head = txn.head(n)
    if head is None:
        return None
    return PreImage(head, txn.attributes(n), txn.metadata(n))


class Before:
    """What a session knew of an element before its first change: its head, and each of
    its maps once the session was about to write that map (None: never written, so
    unchanged — a metadata-only sweep reads no attributes)."""

    __slots__ = ("head", "attributes", "metadata", "attributes_now", "metadata_now", "moved",
                 "bumped")

    def __init__(self, head: Head | None) -> None:
        # None: not read — a batch writer of maps (`set_metadata_many`) does not read the
        # head of an element it leaves in place; it is read before any move or delete.
        self.head = head
        # Whether the session may have changed its head or existence (a repoint, a delete):
        # while it has not, the log takes `head` as the current head without reading it.
        self.moved = False
        self.attributes: JsonMap | None = None
        self.metadata: JsonMap | None = None
        # The maps as the session last wrote them (None: not written, or written by a path
        # that does not say — then the log reads them back at commit).
        self.attributes_now: JsonMap | None = None
        self.metadata_now: JsonMap | None = None
        # `(_version, _updated_at)` before a `bump_versions` that changed nothing else of
        # the metadata (while `metadata` is None): the pre-image of the map is the current
        # one with those two put back (`RecordingTxn.pre_metadata`), read only if needed.
        self.bumped: tuple[int, str] | None = None


class RecordingTxn:
    """A `WriteTxn` that keeps the prior state of every element it changes (module doc).

    `before` maps each changed id to what it was (`Before`; None: it did not exist before
    this session). `notes` carries what the session's commands want in the log record
    (REVERT's reason and target)."""

    def __init__(self, inner: WriteTxn) -> None:
        self.inner = inner
        self.before: dict[int, Before | None] = {}
        self.fresh: list[range] = []        # ids a bulk path created, as ranges
        self.notes: dict[str, Any] = {}
        # The element a writer last read through this transaction, and what it read (maps
        # as unshared copies): a writer reads an element, then changes it, and the prior
        # state it read is the one to keep — a sweep then decodes each element once.
        self.bulk = False       # a bulk path wrote: maps are read back at commit
        self._read_n = -1
        self._read_attributes: JsonMap | None = None
        # Metadata maps read and not yet written, by id (a batch writer — an UPDATE sweep —
        # reads a chunk of elements, then writes them in one call); bounded: a map not
        # found here is read again from the inner transaction, which still holds it.
        self._read_metadata: dict[int, JsonMap] = {}
        self._read_heads: dict[int, Head] = {}      # the same for their heads
        self._allocated: set[int] = set()           # ids from new_id, not yet created
        # The `_version` each element this session created was stored with, while the
        # session has not written its metadata since: the log's "c" change, without
        # reading the map back (`log.append`).
        self.created_versions: dict[int, Any] = {}

    def _reading(self, n: int) -> None:
        if n != self._read_n:
            self._read_n = n
            self._read_attributes = None

    def _forget(self, n: int) -> None:
        if n == self._read_n:
            self._read_n = -1
        self._read_metadata.pop(n, None)
        self._read_heads.pop(n, None)

    def _entry(self, n: int) -> Before | None:
        before = self.before
        if n in before:
            return before[n]
        if self.fresh and any(n in r for r in self.fresh):
            before[n] = None
            return None
        head = self._read_heads.pop(n, None)
        if head is None:
            head = self.inner.head(n)
        entry = before[n] = None if head is None else Before(head)
        return entry

    def _keep(self, n: int) -> None:
        self._entry(n)

    def _keep_new(self, n: int) -> None:
        """`_keep` for an id being created: one this session allocated (`new_id`) did not
        exist before it, which needs no lookup (a KIP load creates thousands per command)."""
        if n in self._allocated:
            self._allocated.discard(n)
            self.before.setdefault(n, None)
        else:
            self._keep(n)

    def _keep_attributes(self, n: int) -> None:
        entry = self._entry(n)
        if entry is not None and entry.attributes is None:
            read = self._read_attributes if n == self._read_n else None
            entry.attributes = self.inner.attributes(n) if read is None else read
        if n == self._read_n:
            self._read_attributes = None        # about to change

    def _keep_metadata(self, n: int) -> None:
        entry = self._entry(n)
        read = self._read_metadata.pop(n, None)      # about to change
        if entry is not None and entry.metadata is None:
            entry.metadata = self.pre_metadata(n, entry, read)

    def pre_metadata(self, n: int, entry: Before, read: JsonMap | None = None) -> JsonMap:
        """The metadata `n` had before the session (its entry's `metadata` not yet kept):
        `read` (a copy read before any write of it), or the stored map — with the
        `_version` / `_updated_at` a `bump_versions` replaced put back."""
        bumped = entry.bumped
        if bumped is None:
            return self.inner.metadata(n) if read is None else read
        entry.bumped = None
        meta = self.inner.metadata(n)
        meta["_version"], meta["_updated_at"] = bumped
        return meta

    def _fresh(self, ids: Sequence[int]) -> None:
        self._read_n = -1
        self._read_metadata.clear()
        self._read_heads.clear()
        self.bulk = True
        if isinstance(ids, range):
            self.fresh.append(ids)
            return
        before = self.before
        for n in ids:
            before.setdefault(n, None)

    # --- writes: remembered ------------------------------------------------------------
    def create_concept(self, n: int, type_id: int, name: str, attributes: JsonMap,
                       metadata: JsonMap) -> None:
        self._keep_new(n)
        self._forget(n)
        self._unknown_now(n)
        self.inner.create_concept(n, type_id, name, attributes, metadata)
        self.created_versions[n] = metadata.get("_version")

    def create_link(self, n: int, subject: int, predicate_id: int, object: int,
                    attributes: JsonMap, metadata: JsonMap) -> None:
        self._keep_new(n)
        self._forget(n)
        self._unknown_now(n)
        self.inner.create_link(n, subject, predicate_id, object, attributes, metadata)
        self.created_versions[n] = metadata.get("_version")

    def repoint_link(self, n: int, subject: int, object: int) -> None:
        self._keep(n)                   # the old head: the log keeps where the link was
        self._moved(n)
        self._forget(n)
        self.inner.repoint_link(n, subject, object)

    def repoint_links(self, moves: Sequence[tuple[int, int, int]],
                      heads: Sequence[LinkHead] | None = None) -> list[int | None]:
        before = self.before
        new = {n for n, _, _ in moves if n not in before}
        # `_keep` and `_moved` of each link, inline (a MERGE moves thousands): the old
        # heads, for the log to keep where the links were (the caller's, when given).
        fresh, read, head_of = self.fresh, self._read_heads, self.inner.head
        given = heads if heads is not None and len(heads) == len(moves) else None
        for i, (n, _, _) in enumerate(moves):
            if n in before:
                entry = before[n]
            elif fresh and any(n in r for r in fresh):
                entry = before[n] = None
            else:
                head = read.pop(n, None)
                if head is None:
                    head = given[i] if given is not None and given[i].n == n else head_of(n)
                entry = before[n] = None if head is None else Before(head)
            if entry is not None:
                if entry.head is None:
                    entry.head = head_of(n)
                entry.moved = True
        self._read_n = -1
        answers = self.inner.repoint_links(moves, given)
        for (n, _, _), holder in zip(moves, answers):
            if holder is not None and n in new:
                del before[n]           # a refused move changed nothing
        return answers

    def set_attributes(self, n: int, attributes: JsonMap) -> None:
        self._keep_attributes(n)
        self.inner.set_attributes(n, attributes)
        entry = self.before.get(n)
        if entry is not None and not self.bulk:
            entry.attributes_now = dict(attributes)

    def set_metadata(self, n: int, metadata: JsonMap) -> None:
        self.created_versions.pop(n, None)
        self._keep_metadata(n)
        self.inner.set_metadata(n, metadata)
        entry = self.before.get(n)
        if entry is not None and not self.bulk:
            entry.metadata_now = dict(metadata)

    def set_metadata_many(self, items: Sequence[tuple[int, JsonMap]]) -> None:
        # `_keep_metadata` per item, inline: this runs once per element of a sweep. An
        # element met for the first time gets an entry without reading its head (the
        # inner call checks that it exists; the entries are dropped if it refuses).
        before, read_metadata, heads = self.before, self._read_metadata, self._read_heads
        fresh = self.fresh
        added: list[int] = []
        created = self.created_versions
        for n, _ in items:
            if created:
                created.pop(n, None)
            if n in before:
                entry = before[n]
            elif fresh and any(n in r for r in fresh):
                entry = before[n] = None
                added.append(n)
            else:
                entry = before[n] = Before(heads.pop(n, None))
                added.append(n)
            read = read_metadata.pop(n, None)           # about to change
            if entry is not None and entry.metadata is None:
                entry.metadata = self.pre_metadata(n, entry, read)
        try:
            self.inner.set_metadata_many(items)
        except BaseException:
            for n in added:
                before.pop(n, None)
            raise
        if not self.bulk:
            # Kept as they are, not copied: a batch writer hands its maps over (the
            # protocol's `set_metadata_many`: built for the call, not changed after it).
            for n, metadata in items:
                entry = before.get(n)
                if entry is not None:
                    entry.metadata_now = metadata

    def bump_versions(self, ids: Sequence[int], now: str) -> list[tuple[int, str] | None]:
        # Each bumped element keeps what the bump replaced (`Before.bumped`) instead of its
        # whole metadata map: the log rebuilds the pre-image from it (MERGE's moved links).
        answers = self.inner.bump_versions(ids, now)
        before, created, read_metadata = self.before, self.created_versions, self._read_metadata
        for n, answer in zip(ids, answers):
            if answer is None:
                continue
            if created:
                created.pop(n, None)
            if read_metadata:
                read_metadata.pop(n, None)
            entry = before[n] if n in before else self._entry(n)   # moved: kept already
            if entry is None:
                continue                # created by the session: nothing to keep
            if entry.bumped is not None:
                # Bumped again: the map before the session, rebuilt now (the log's row
                # would name the first bump's `_version`), then compared at commit.
                entry.metadata = self.pre_metadata(n, entry)
            elif entry.metadata is None:
                entry.bumped = answer
            entry.metadata_now = None   # as bumped in the store: read back if needed
        return answers

    def delete(self, n: int) -> bool:
        self.created_versions.pop(n, None)
        self._keep_attributes(n)        # a deletion is logged with the element's whole state
        self._keep_metadata(n)
        self._forget(n)
        self._unknown_now(n)
        return self.inner.delete(n)

    def _unknown_now(self, n: int) -> None:
        entry = self.before.get(n)
        if entry is not None:
            entry.attributes_now = entry.metadata_now = None
            self._moved(n)

    def _moved(self, n: int) -> None:
        """`n` is about to move or go: its head before that is kept (read if not yet)."""
        entry = self.before.get(n)
        if entry is not None:
            if entry.head is None:
                entry.head = self.inner.head(n)
            entry.moved = True

    def create_concepts(self, rows: Iterable[tuple[int, int, str, JsonMap | None,
                                                   JsonMap | None]]) -> int:
        before = self.before
        self._read_n = -1
        self._read_metadata.clear()
        self._read_heads.clear()
        self.bulk = True

        def noted() -> Iterator[tuple[int, int, str, JsonMap | None, JsonMap | None]]:
            for row in rows:
                before.setdefault(row[0], None)
                yield row
        return self.inner.create_concepts(noted())

    def create_links(self, rows: Iterable[tuple[int, int, int, int, JsonMap | None,
                                                JsonMap | None]],
                     known_new: bool = False) -> int:
        before = self.before
        self._read_n = -1
        self._read_metadata.clear()
        self._read_heads.clear()
        self.bulk = True

        def noted() -> Iterator[tuple[int, int, int, int, JsonMap | None, JsonMap | None]]:
            for row in rows:
                before.setdefault(row[0], None)
                yield row
        return self.inner.create_links(noted(), known_new)

    def create_concept_columns(self, ids: Sequence[int], type_ids: Sequence[int],
                               names: Sequence[str],
                               attributes: "MapColumn | None" = None,
                               metadata: "MapColumn | None" = None, *,
                               extra_metadata: JsonMap | None = None) -> int:
        self._fresh(ids)
        made = self.inner.create_concept_columns(ids, type_ids, names, attributes, metadata,
                                                 extra_metadata=extra_metadata)
        self._created_with(ids, extra_metadata)
        return made

    def _created_with(self, ids: Sequence[int], extra: JsonMap | None) -> None:
        """New elements whose `_version` the engine metadata `extra` sets (an UPSERT's
        columns): the log takes it from here instead of reading each one back."""
        if extra and "_version" in extra and not isinstance(ids, range):
            self.created_versions.update(dict.fromkeys(ids, extra["_version"]))

    def create_link_columns(self, ids: Sequence[int], subjects: Sequence[int],
                            predicate_ids: Sequence[int], objects: Sequence[int],
                            attributes: "MapColumn | None" = None,
                            metadata: "MapColumn | None" = None, *, known_new: bool = False,
                            extra_metadata: JsonMap | None = None) -> int:
        self._fresh(ids)
        made = self.inner.create_link_columns(ids, subjects, predicate_ids, objects,
                                              attributes, metadata, known_new=known_new,
                                              extra_metadata=extra_metadata)
        if extra_metadata and "_version" in extra_metadata:
            self._created_with(ids, extra_metadata)
        elif len(ids) <= 16 and isinstance(metadata, list) and len(metadata) == len(ids):
            # (an UPSERT's few links; a load's many are read back, as before)
            extra = extra_metadata or {}
            for n, meta in zip(ids, metadata):
                self.created_versions[n] = extra["_version"] if "_version" in extra \
                    else (meta or {}).get("_version")
        return made

    # --- everything else: the inner transaction's ----------------------------------------
    def intern(self, text: str) -> int:
        return self.inner.intern(text)

    def new_id(self) -> int:
        n = self.inner.new_id()
        self._allocated.add(n)
        return n

    def reserve_ids(self, count: int) -> range:
        return self.inner.reserve_ids(count)

    def aux_put_many(self, table: str, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        self.inner.aux_put_many(table, pairs)

    def commit_id(self) -> int:
        return self.inner.commit_id()

    def abort(self) -> None:
        self.inner.abort()

    def symbol_id(self, text: str) -> int | None:
        return self.inner.symbol_id(text)

    def symbol_text(self, sid: int) -> str:
        return self.inner.symbol_text(sid)

    def head(self, n: int) -> Head | None:
        head = self.inner.head(n)
        if head is not None:
            heads = self._read_heads
            if len(heads) >= READ_METADATA_CAP:
                heads.clear()
            heads[n] = head
        return head

    def known_head(self, n: int) -> Head:
        return self.inner.known_head(n)

    def prefetch_elements(self, ids: Iterable[int]) -> None:
        """A hint passed on to a store that has it (PostgreSQL: read these elements and
        their links' ends at once, instead of a round trip each as they are asked for)."""
        prefetch = getattr(self.inner, "prefetch_elements", None)
        if prefetch is not None:
            prefetch(ids)

    def prefetch_aux_many(self, reads: Iterable[tuple[str, Iterable[bytes], Iterable[bytes]]]
                          ) -> None:
        """A hint passed on to a store that has it (PostgreSQL: the aux keys of several
        tables in one statement, which `aux(...).get` and reverse scans then serve)."""
        prefetch = getattr(self.inner, "prefetch_aux_many", None)
        if prefetch is not None:
            prefetch(reads)

    def attributes(self, n: int) -> JsonMap:
        attributes = self.inner.attributes(n)
        self._reading(n)
        self._read_attributes = dict(attributes)    # the caller may change its own copy
        return attributes

    def metadata(self, n: int) -> JsonMap:
        metadata = self.inner.metadata(n)
        read = self._read_metadata
        if len(read) >= READ_METADATA_CAP:
            read.clear()
        read[n] = dict(metadata)            # the caller may change its own copy
        return metadata

    def metadata_of(self, ns: Sequence[int]) -> list[JsonMap]:
        """`metadata` over many elements: the inner transaction's batched read."""
        maps = self.inner.metadata_of(ns)
        read = self._read_metadata
        if len(read) + len(ns) > READ_METADATA_CAP:
            read.clear()
        if len(ns) <= READ_METADATA_CAP:
            read.update(zip(ns, map(dict, maps)))   # the caller may change its own copies
        return maps

    # The other batched reads: the inner transaction's (a store whose calls are round trips
    # answers each in one); what they read is not a prior state the recorder keeps.
    def prefers_batches(self) -> bool:
        return self.inner.prefers_batches()

    def known_heads(self, ns: Sequence[int]) -> list[Head]:
        return self.inner.known_heads(ns)

    def attributes_of(self, ns: Sequence[int]) -> list[JsonMap]:
        """`attributes` over many elements: the last one's is kept, as the loop would."""
        maps = self.inner.attributes_of(ns)
        if maps:
            self._reading(ns[-1])
            self._read_attributes = dict(maps[-1])
        return maps

    def link_ids(self, triples: Sequence[tuple[int, int, int]]) -> list[int | None]:
        return self.inner.link_ids(triples)

    def concept_ids(self, pairs: Sequence[tuple[int, str]]) -> list[int | None]:
        return self.inner.concept_ids(pairs)

    def out_links_of(self, subjects: Sequence[int], predicate_id: int | None = None
                     ) -> dict[int, list[tuple[int, int, int]]]:
        return self.inner.out_links_of(subjects, predicate_id)

    def in_links_of(self, objects: Sequence[int], predicate_id: int | None = None
                    ) -> dict[int, list[tuple[int, int, int]]]:
        return self.inner.in_links_of(objects, predicate_id)

    def max_id(self) -> int:
        return self.inner.max_id()

    def elements(self) -> Iterator[int]:
        return self.inner.elements()

    def concept_id(self, type_id: int, name: str) -> int | None:
        return self.inner.concept_id(type_id, name)

    def concepts_of_type(self, type_id: int) -> Iterator[int]:
        return self.inner.concepts_of_type(type_id)

    def concepts_named(self, name: str) -> Iterator[int]:
        return self.inner.concepts_named(name)

    def link_id(self, subject: int, predicate_id: int, object: int) -> int | None:
        return self.inner.link_id(subject, predicate_id, object)

    def out_links(self, subject: int, predicate_id: int | None = None
                  ) -> Iterator[tuple[int, int, int]]:
        return self.inner.out_links(subject, predicate_id)

    def in_links(self, object: int, predicate_id: int | None = None
                 ) -> Iterator[tuple[int, int, int]]:
        return self.inner.in_links(object, predicate_id)

    def links_of_predicate(self, predicate_id: int) -> Iterator[tuple[int, int, int]]:
        return self.inner.links_of_predicate(predicate_id)

    def link_predicates(self) -> Iterator[int]:
        return self.inner.link_predicates()

    def count_type(self, type_id: int) -> int:
        return self.inner.count_type(type_id)

    def count_predicate(self, predicate_id: int) -> int:
        return self.inner.count_predicate(predicate_id)

    def count_concepts(self) -> int:
        return self.inner.count_concepts()

    def count_links(self) -> int:
        return self.inner.count_links()

    def aux(self, table: str) -> AuxTable:
        return self.inner.aux(table)

    def snapshot_id(self) -> int | None:
        return self.inner.snapshot_id()

    def store_token(self) -> int:
        return self.inner.store_token()

    def columns(self) -> "TxnColumns | None":
        return self.inner.columns()

    def column_cache(self) -> "StoreColumns | None":
        return self.inner.column_cache()


def _check_protocol(txn: RecordingTxn) -> WriteTxn:
    return txn          # mypy: RecordingTxn is a WriteTxn


__all__ = ["Before", "PreImage", "RecordingTxn", "pre_image"]
