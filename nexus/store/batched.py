"""The batched reads of the storage protocol, answered one element at a time.

`ReadTxn` has, beside its one-element reads, calls that take many elements at once
(`known_heads`, `attributes_of`, `metadata_of`, `link_ids`, `concept_ids`, `out_links_of`,
`in_links_of`):
the executor's operators call them a chunk of rows at a time, so that a backend for which
every call is a round trip (PostgreSQL: one SQL statement per call) answers a query in a
number of statements that does not grow with the rows. A backend for which a call is a
B-tree lookup in process (LMDB, memory) or a view of the past (history's `AsOfTxn`)
inherits `LoopBatches`: each batched call is the loop over its one-element call, with the
same answers and the same side effects. (History's recording transaction passes each
batched call through to the transaction it wraps.)
"""
from __future__ import annotations

from typing import Iterator, Protocol, Sequence

from nexus.store.model import Head, JsonMap


class _Single(Protocol):
    """The one-element reads the loops are made of (a subset of `ReadTxn`)."""

    def known_head(self, n: int) -> Head: ...
    def attributes(self, n: int) -> JsonMap: ...
    def metadata(self, n: int) -> JsonMap: ...
    def link_id(self, subject: int, predicate_id: int, object: int) -> int | None: ...
    def concept_id(self, type_id: int, name: str) -> int | None: ...
    def out_links(self, subject: int, predicate_id: int | None = None
                  ) -> Iterator[tuple[int, int, int]]: ...
    def in_links(self, object: int, predicate_id: int | None = None
                 ) -> Iterator[tuple[int, int, int]]: ...


class LoopBatches:
    """`ReadTxn`'s batched calls as loops over its one-element calls (see the module doc)."""

    __slots__ = ()

    def prefers_batches(self) -> bool:
        return False

    def known_heads(self: _Single, ns: Sequence[int]) -> list[Head]:
        head = self.known_head
        return [head(n) for n in ns]

    def attributes_of(self: _Single, ns: Sequence[int]) -> list[JsonMap]:
        read = self.attributes
        return [read(n) for n in ns]

    def metadata_of(self: _Single, ns: Sequence[int]) -> list[JsonMap]:
        read = self.metadata
        return [read(n) for n in ns]

    def link_ids(self: _Single, triples: Sequence[tuple[int, int, int]]) -> list[int | None]:
        link_id = self.link_id
        return [link_id(s, p, o) for s, p, o in triples]

    def concept_ids(self: _Single, pairs: Sequence[tuple[int, str]]) -> list[int | None]:
        concept_id = self.concept_id
        return [concept_id(t, name) for t, name in pairs]

    def out_links_of(self: _Single, subjects: Sequence[int], predicate_id: int | None = None
                     ) -> dict[int, list[tuple[int, int, int]]]:
        links = self.out_links
        out: dict[int, list[tuple[int, int, int]]] = {}
        for s in subjects:
            if s not in out:
                found = list(links(s, predicate_id))
                if found:
                    out[s] = found
        return out

    def in_links_of(self: _Single, objects: Sequence[int], predicate_id: int | None = None
                    ) -> dict[int, list[tuple[int, int, int]]]:
        links = self.in_links
        out: dict[int, list[tuple[int, int, int]]] = {}
        for o in objects:
            if o not in out:
                found = list(links(o, predicate_id))
                if found:
                    out[o] = found
        return out
