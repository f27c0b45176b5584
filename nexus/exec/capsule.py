"""Capsule text: chosen elements of one snapshot as idempotent KIP `UPSERT` statements.

The one writer of exported knowledge, shared by the `EXPORT` statement (spec §5.3,
`nexus.exec.export`) and `kip export` (`nexus.ops.export`). It owns how elements print and
in which order; *which* elements is the caller's choice.

* A concept is a `CONCEPT ?cN { {type, name} SET ATTRIBUTES {...} } WITH METADATA {...}`
  block; a link a `PROPOSITION ?pN { (subject, "predicate", object) ... }` block. An end
  written earlier in the same statement is its local handle; any other end is referenced
  structurally — a concept as `{type: "T", name: "n"}`, a link as a nested
  `(s, "p", o)` clause — since ids are not portable. Importing then requires those to
  exist (`KIP_3002` otherwise).
* Engine metadata (`_version`, `_created_at`, `_updated_at`, `_merged_from`, any `_` key)
  is never written: the importing engine keeps its own books.
* Left out (`is_core`): the protected Genesis core — the definitions of `$ConceptType`,
  `$PropositionType`, `Domain`, `belongs_to_domain`, the `CoreSchema` domain and their links
  to it: every KIP nexus has them and KML may not rewrite them — and, of the actors `$self`
  / `$system`, the protected `core_directives` and the deployment's principal `id`.
* Order (`order`): concept types, predicates, domains, other concepts, then links with every
  link after the links it refers to (MERGE can make a link refer to a newer one), so a
  definition precedes its use and a capsule applied in order never refers forward.
"""
from __future__ import annotations

from typing import Any, Iterable

from ..store.protocol import ConceptHead, LinkHead
from ..syntax import value_text
from .protect import ACTOR_PROTECTED_ATTRIBUTE as ACTOR_PROTECTED
from .protect import ACTORS, CORE_NODES

SELF_ID = "id"          # set from configuration at creation: identity, not memory
IDENT_CACHE = 200_000


class CapsuleWriter:
    """Classification, ordering and printing of elements in one read transaction."""

    def __init__(self, txn: Any) -> None:
        self.txn = txn
        self._sym: dict[int, str] = {}
        self._ident: dict[int, str] = {}

    def sym(self, sid: int) -> str:
        text = self._sym.get(sid)
        if text is None:
            text = self._sym[sid] = self.txn.symbol_text(sid)
        return text

    def key(self, head: ConceptHead) -> tuple[str, str]:
        return self.sym(head.type_id), head.name

    def is_core(self, head: Any) -> bool:
        if type(head) is ConceptHead:
            return self.key(head) in CORE_NODES
        if self.sym(head.predicate_id) != "belongs_to_domain":
            return False
        s, o = self.txn.known_head(head.subject), self.txn.known_head(head.object)
        return (type(s) is ConceptHead and self.key(s) in CORE_NODES
                and type(o) is ConceptHead and self.key(o) == ("Domain", "CoreSchema"))

    # --- order ------------------------------------------------------------------------------
    def order(self, elements: Iterable[int]) -> tuple[list[int], list[int]]:
        """(concepts, links) of `elements` in capsule order (module doc)."""
        concepts: list[int] = []
        links: list[int] = []
        known_head = self.txn.known_head
        for n in elements:
            (concepts if type(known_head(n)) is ConceptHead else links).append(n)
        rank = {"$ConceptType": 0, "$PropositionType": 1, "Domain": 2}
        concepts.sort(key=lambda n: (rank.get(self.sym(known_head(n).type_id), 3), n))
        return concepts, self._links_in_order(links)

    def _links_in_order(self, links: list[int]) -> list[int]:
        """Ascending ids, except that a link comes after the chosen links it refers to."""
        chosen = set(links)
        done: set[int] = set()
        out: list[int] = []
        known_head = self.txn.known_head
        for first in sorted(links):
            stack = [(first, False)]
            while stack:
                n, expanded = stack.pop()
                if n in done:
                    continue
                if expanded:
                    done.add(n)
                    out.append(n)
                    continue
                stack.append((n, True))
                head = known_head(n)
                for end in (head.object, head.subject):
                    if end in chosen and end not in done and end != n:
                        stack.append((end, False))
        return out

    # --- printing ---------------------------------------------------------------------------
    def ident(self, n: int) -> str:
        """`{type, name}` of a concept, `(s, "p", o)` of a link (recursively)."""
        text = self._ident.get(n)
        if text is not None:
            return text
        head = self.txn.known_head(n)
        if type(head) is ConceptHead:
            t, name = self.key(head)
            text = f"{{type: {value_text(t)}, name: {value_text(name)}}}"
        else:
            text = (f"({self.ident(head.subject)}, {value_text(self.sym(head.predicate_id))}, "
                    f"{self.ident(head.object)})")
        if len(self._ident) < IDENT_CACHE:
            self._ident[n] = text
        return text

    def statement(self, concepts: list[int], links: list[int]) -> str:
        """One `UPSERT { ... }` of these elements (in this order), handles inside it."""
        handles: dict[int, str] = {}
        parts = ["UPSERT {\n"]
        for i, n in enumerate(concepts, 1):
            handles[n] = f"?c{i}"
            parts.append(self.concept_block(n, handles[n]))
        for i, n in enumerate(links, 1):
            head = self.txn.known_head(n)
            assert type(head) is LinkHead
            s = handles.get(head.subject) or self.ident(head.subject)
            o = handles.get(head.object) or self.ident(head.object)
            handles[n] = f"?p{i}"
            clause = f"({s}, {value_text(self.sym(head.predicate_id))}, {o})"
            parts.append(f"  PROPOSITION {handles[n]} {{\n    {clause}\n"
                         + self._tail(n, self.txn.attributes(n)))
        parts.append("}\n")
        return "".join(parts)

    def concept_block(self, n: int, handle: str) -> str:
        head = self.txn.known_head(n)
        attributes = self.txn.attributes(n)
        if self.key(head) in ACTORS:
            attributes.pop(ACTOR_PROTECTED, None)
            attributes.pop(SELF_ID, None)     # the deployment's principal (Config.self_id)
        return f"  CONCEPT {handle} {{\n    {self.ident(n)}\n" + self._tail(n, attributes)

    def _tail(self, n: int, attributes: dict) -> str:
        out = ""
        if attributes:
            out += f"    SET ATTRIBUTES {value_text(attributes)}\n"
        metadata = {k: v for k, v in self.txn.metadata(n).items() if not k.startswith("_")}
        out += "  }"
        if metadata:
            out += f" WITH METADATA {value_text(metadata)}"
        return out + "\n"
