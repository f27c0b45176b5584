"""The value types of the store's data model: element heads and JSON maps.

A module of its own (re-exported by `nexus.store.protocol`) so that the byte layouts
(`codec`) and the column views (`columns`) can use them without importing the protocol,
which itself refers to the column views' types.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence, TypeAlias

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
