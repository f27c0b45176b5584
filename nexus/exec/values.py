"""Wire values: element ids, node/link JSON objects, and dot-path access.

The only place that knows how an element looks on the wire (CONTRACT §3): `C:<n>` and
`P:<n>:<predicate>` ids, `{"_type": "ConceptNode", ...}` / `{"_type": "PropositionLink", ...}`
objects with empty `attributes`/`metadata` left out.
"""
from __future__ import annotations

import re
from typing import Any

from ..store.protocol import ConceptHead, LinkHead, ReadTxn

_ID = re.compile(r"(C|P):([1-9][0-9]{0,18})(?::(.+))?\Z", re.S)


def parse_id(text: Any) -> tuple[str, int, str | None] | None:
    """`"C:12"` → ("C", 12, None); `"P:13:treats"` → ("P", 13, "treats"); else None."""
    if not isinstance(text, str):
        return None
    m = _ID.match(text)
    if m is None:
        return None
    kind, n, pred = m.group(1), int(m.group(2)), m.group(3)
    if (kind == "C") != (pred is None):
        return None
    return kind, n, pred


def element_id(txn: ReadTxn, head: ConceptHead | LinkHead) -> str:
    if isinstance(head, ConceptHead):
        return f"C:{head.n}"
    return f"P:{head.n}:{txn.symbol_text(head.predicate_id)}"


def id_of(txn: ReadTxn, n: int) -> str | None:
    head = txn.head(n)
    return None if head is None else element_id(txn, head)


def element_json(txn: ReadTxn, head: ConceptHead | LinkHead, *, attributes: bool = True,
                 metadata: bool = True) -> dict[str, Any]:
    """The full wire object of an element."""
    if isinstance(head, ConceptHead):
        out: dict[str, Any] = {"_type": "ConceptNode", "id": f"C:{head.n}",
                               "type": txn.symbol_text(head.type_id), "name": head.name}
    else:
        pred = txn.symbol_text(head.predicate_id)
        out = {"_type": "PropositionLink", "id": f"P:{head.n}:{pred}",
               "subject": id_of(txn, head.subject), "predicate": pred,
               "object": id_of(txn, head.object)}
    if attributes:
        attrs = txn.attributes(head.n)
        if attrs:
            out["attributes"] = attrs
    if metadata:
        meta = txn.metadata(head.n)
        if meta:
            out["metadata"] = meta
    return out


def definition_json(txn: ReadTxn, head: ConceptHead) -> dict[str, Any]:
    """`{id, type, name, attributes}` — how META shows a concept (CONTRACT §8)."""
    return {"id": f"C:{head.n}", "type": txn.symbol_text(head.type_id), "name": head.name,
            "attributes": txn.attributes(head.n)}


def path_value(txn: ReadTxn, n: int | None, segments: tuple[str, ...]) -> Any:
    """The value of `?var.seg.seg...` for element `n` (None when unbound or missing)."""
    if n is None:
        return None
    head = txn.head(n)
    if head is None:
        return None
    if not segments:
        return element_json(txn, head)
    field = segments[0]
    if field == "attributes" or field == "metadata":
        value: Any = txn.attributes(n) if field == "attributes" else txn.metadata(n)
        for key in segments[1:]:
            if not isinstance(value, dict):
                return None
            value = value.get(key)
        return value
    if field == "id":
        return element_id(txn, head)
    if isinstance(head, ConceptHead):
        if field == "type":
            return txn.symbol_text(head.type_id)
        if field == "name":
            return head.name
        return None
    if field == "predicate":
        return txn.symbol_text(head.predicate_id)
    if field == "subject":
        return id_of(txn, head.subject)
    if field == "object":
        return id_of(txn, head.object)
    return None
