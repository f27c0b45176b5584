"""The value types of the store's data model: element heads and JSON maps.

A module of its own (re-exported by `nexus.store.protocol`) so that the byte layouts
(`codec`) and the column views (`columns`) can use them without importing the protocol,
which itself refers to the column views' types.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence, TypeAlias

from nexus.errors import ErrorCode, KipError

# An element's attributes or metadata: str keys, JSON values (None, bool, int, float, str,
# and lists and maps of them). Values are not typed further: they are the user's data.
JsonMap: TypeAlias = dict[str, Any]
# A column of such maps for the bulk path (None: an empty map).
MapColumn: TypeAlias = Sequence[JsonMap | None]


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


Head: TypeAlias = ConceptHead | LinkHead


def link_heads(head: Callable[[int], Head | None], ids: Iterable[int]) -> list[LinkHead]:
    """The heads of the links `ids`, read by `head` (a transaction's); KIP_3002 for an id
    that is no proposition (a batch of moves checks its links before making any)."""
    out: list[LinkHead] = []
    for n in ids:
        h = head(n)
        if not isinstance(h, LinkHead):
            raise KipError(ErrorCode.KIP_3002, f"proposition {n!r} does not exist")
        out.append(h)
    return out
