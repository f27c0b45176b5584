"""A graph dumped canonically, ids aside — to compare two databases that should hold the same
knowledge (tests/cli: `kip export` → `kip load`; tests/kml: EXPORT pages → a fresh database).
Standard library and the store protocol only; imported as `canonical` by putting this folder
on sys.path (the suite runs with --import-mode=importlib), like tests/serving.py.
"""
from __future__ import annotations

import json
from typing import Any

from nexus.store.protocol import ConceptHead


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def canonical_graph(nx: Any) -> dict[str, str]:
    """Every element of the open nexus `nx` by identity — concepts by (type, name), links by
    (subject identity, predicate, object identity), recursively — with its attributes and
    its metadata minus engine `_` keys, as canonical JSON (so 1 and 1.0 differ)."""
    with nx.store.read() as txn:
        memo: dict[int, Any] = {}

        def ident(n: int) -> Any:
            if n not in memo:
                head = txn.head(n)
                if type(head) is ConceptHead:
                    memo[n] = ("C", txn.symbol_text(head.type_id), head.name)
                else:
                    memo[n] = ("L", ident(head.subject), txn.symbol_text(head.predicate_id),
                               ident(head.object))
            return memo[n]

        out = {}
        for n in txn.elements():
            meta = {k: v for k, v in txn.metadata(n).items() if not k.startswith("_")}
            out[_canon(ident(n))] = _canon({"attributes": txn.attributes(n),
                                            "metadata": meta})
        return out
