"""Names for ids: what the ends of the proposition links in a response are called.

A link names its ends by id (`"subject": "C:12"`); people want names (`Aspirin —treats→
Headache`). Before a response is rendered, `NameBook.lookup(result)` collects the end ids of
every link in it, takes the nodes and links the result already holds, and asks the backend
for the rest in one read-only batch (`commands`: `FIND(?n) WHERE { ?n {id: :id} }` per concept
id, `FIND(?l) WHERE { ?l (id: :id) }` per link id). A link can be the end of a higher-order
link: its own ends are looked up in a next round (at most `ROUNDS`). It works the same on a
local database and over HTTP, never writes, and an id it cannot resolve simply stays an id.

Elements seen or fetched are kept until the next write (`invalidate`), so paging through a
result does not ask again.
"""
from __future__ import annotations

from typing import Any, Iterable

from .backend import Backend

ROUNDS = 3            # higher-order links whose ends are links, and so on
MAX_IDS = 2000        # ids looked up for one response, at most
BATCH = 200           # commands per batch request
MAX_WALK = 100_000    # values looked at in one result, at most
_CACHE_LIMIT = 20_000

_FIND_CONCEPT = "FIND(?n) WHERE { ?n {id: :id} }"
_FIND_LINK = "FIND(?l) WHERE { ?l (id: :id) }"


def _elements(value: Any) -> Iterable[dict[str, Any]]:
    """The nodes and links inside a result, however nested (bounded)."""
    stack, seen = [value], 0
    while stack and seen < MAX_WALK:
        item = stack.pop()
        seen += 1
        if isinstance(item, dict):
            if item.get("_type") in ("ConceptNode", "PropositionLink"):
                yield item
            stack.extend(v for v in item.values() if isinstance(v, (dict, list)))
        elif isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, (dict, list)))


def _ends(links: Iterable[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for link in links:
        if link.get("_type") == "PropositionLink":
            out.extend(e for e in (link.get("subject"), link.get("object"))
                       if isinstance(e, str))
    return out


class NameBook:
    """Elements by id for rendering link ends, asked of a backend in batches."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.cache: dict[str, dict[str, Any]] = {}

    def invalidate(self) -> None:
        self.cache.clear()

    def lookup(self, result: Any) -> dict[str, dict[str, Any]]:
        """Every element the result holds, and the ends of its links, by id."""
        book: dict[str, dict[str, Any]] = {}
        links: list[dict[str, Any]] = []
        for el in _elements(result):
            if isinstance(el.get("id"), str):
                book.setdefault(el["id"], el)
            if el.get("_type") == "PropositionLink":
                links.append(el)
        if len(self.cache) < _CACHE_LIMIT:
            self.cache.update(book)
        wanted = _ends(links)
        for _ in range(ROUNDS):
            missing = list(dict.fromkeys(i for i in wanted if i not in book))[:MAX_IDS]
            if not missing:
                break
            found = self._fetch(missing)
            book.update(found)
            wanted = _ends(found.values())
        return book

    def _fetch(self, ids: list[str]) -> dict[str, dict[str, Any]]:
        found = {i: self.cache[i] for i in ids if i in self.cache}
        todo = [i for i in ids if i not in found]
        for start in range(0, len(todo), BATCH):
            part = todo[start:start + BATCH]
            commands = [{"command": _FIND_LINK if i.startswith("P:") else _FIND_CONCEPT,
                         "parameters": {"id": i}} for i in part]
            answers = self.backend.execute_batch(commands, readonly=True)
            if answers is None:           # the backend could not answer: ids stay ids
                break
            for ident, answer in zip(part, answers):
                result = answer.get("result") if isinstance(answer, dict) else None
                el = result[0] if isinstance(result, list) and result else None
                if isinstance(el, dict) and el.get("_type"):
                    found[ident] = el
        if len(self.cache) < _CACHE_LIMIT:
            self.cache.update(found)
        return found
