"""Concept nodes and proposition links as people read them.

- A link is its ends' names around its predicate: `Aspirin —treats→ Headache`; an end that is
  itself a link is shown in brackets, `(Aspirin —treats→ Headache) —cited_by→ Study 4`. The
  names come from the `View`'s book of elements by id (`nexus.shell.names` fills it); an end
  the book does not know is shown by its id.
- A node in a cell is `Aspirin (Drug)`.
- With ids on (`:ids on`) every name is followed by its id in brackets, and element tables
  get an `id` column; otherwise ids are left out.
- A list of nodes is a table of the columns that matter — name, type and the attributes the
  rows have (the most common first, as many as fit); a list of links is a table of the link
  and its attributes.
- One element is its title, then its attributes and metadata one key a line.
"""
from __future__ import annotations

import json
from collections import Counter
from typing import Any, Mapping

from .layout import MISSING, View, cell, clip, width_of

NODE, LINK = "ConceptNode", "PropositionLink"
ARROW_IN, ARROW_OUT = "—", "→"
MAX_ATTRIBUTE_COLUMNS = 6
_MIN_COLUMN = 12                  # a column narrower than this is not worth showing
_HIGHER_ORDER_DEPTH = 3

Book = Mapping[str, Mapping[str, Any]]


def is_element(value: Any) -> bool:
    return isinstance(value, dict) and value.get("_type") in (NODE, LINK)


def is_node(value: Any) -> bool:
    return isinstance(value, dict) and value.get("_type") == NODE


def is_link(value: Any) -> bool:
    return isinstance(value, dict) and value.get("_type") == LINK


def _with_id(text: str, el: Mapping[str, Any] | None, eid: Any, view: View) -> str:
    ident = el.get("id") if el is not None else eid
    return f"{text} [{ident}]" if view.ids and ident is not None else text


def node_label(node: Mapping[str, Any], view: View) -> str:
    """`Aspirin (Drug)`, or `Aspirin (Drug) [C:12]` with ids on."""
    return _with_id(f"{node.get('name')} ({node.get('type')})", node, None, view)


def end_text(eid: Any, view: View, depth: int = 0) -> str:
    """One end of a link: the node's name, a link in brackets, or the id when unknown."""
    el = view.names.get(eid) if isinstance(eid, str) else None
    if is_node(el):
        assert el is not None
        return _with_id(str(el.get("name")), el, eid, view)
    if is_link(el) and depth < _HIGHER_ORDER_DEPTH:
        assert el is not None
        return f"({link_text(el, view, depth + 1)})"
    return str(eid)


def link_text(link: Mapping[str, Any], view: View, depth: int = 0) -> str:
    """`Aspirin —treats→ Headache` (ends by name, ids with `view.ids`)."""
    return (f"{end_text(link.get('subject'), view, depth)} "
            f"{ARROW_IN}{link.get('predicate')}{ARROW_OUT} "
            f"{end_text(link.get('object'), view, depth)}")


def label(value: Any, view: View) -> tuple[str, str]:
    """(text, style) of a value in a table cell: elements by name, other values as JSON."""
    if is_node(value):
        return node_label(value, view), ""
    if is_link(value):
        return link_text(value, view), ""
    return cell(value)


def element_title(el: Mapping[str, Any], view: View) -> str:
    if is_link(el):
        text = link_text(el, view)
    else:
        text = f"{el.get('type')} {json.dumps(el.get('name'), ensure_ascii=False)}"
    return f"{text}  [{el.get('id')}]" if view.ids else text


def element_lines(el: Mapping[str, Any], view: View,
                  outline: Any = None) -> list[str]:
    """One node or link: a title line, then its attributes and metadata, one key a line;
    other keys (DESCRIBE's `usage`) through `outline(value, view, indent)` when given."""
    p, width = view.paint, view.width
    out = [p("header", element_title(el, view))]
    for section in ("attributes", "metadata"):
        values = el.get(section)
        if values:
            out.append(f"  {p('key', section)}:")
            for key, value in values.items():
                text, style = cell(value)
                out.append(f"    {key}: {p(style, clip(text, max(20, width - len(key) - 6)))}")
    extra = {k: v for k, v in el.items()
             if k not in ("_type", "id", "type", "name", "subject", "predicate", "object",
                          "attributes", "metadata")}
    if extra and outline is not None:
        out.extend(outline(extra, view, 2))
    return out


def attribute_keys(elements: list[Mapping[str, Any]], room: int) -> list[str]:
    """The attribute keys worth a column: the most common first (ties: first seen), as
    many as fit in `room` terminal columns (each at least as wide as a useful column)."""
    counts: Counter[str] = Counter()
    widest: dict[str, int] = {}
    for el in elements:
        for key, value in (el.get("attributes") or {}).items():
            counts[key] += 1
            widest[key] = max(widest.get(key, len(key)), width_of(cell(value)[0]))
    keys: list[str] = []
    for key in sorted(counts, key=lambda k: -counts[k]):     # stable: first seen on ties
        need = min(widest[key], _MIN_COLUMN) + 3
        if len(keys) == MAX_ATTRIBUTE_COLUMNS or need > room:
            break
        keys.append(key)
        room -= need
    return keys


def element_table(elements: list[Mapping[str, Any]], view: View
                  ) -> tuple[list[str], list[list[Any]]]:
    """(headers, rows) for a list of nodes (name, type, attributes) or links (link,
    attributes); with ids on, `id` first (and a link's ends with theirs). Mixed lists show
    the element's label."""
    links = all(is_link(el) for el in elements)
    nodes = all(is_node(el) for el in elements)
    plain = View(view.paint, view.width, view.names, False)
    if links:
        headers = ["link"]
        first = [[(link_text(el, view), "")] for el in elements]
    elif nodes:
        headers = ["name", "type"]
        first = [[(str(el.get("name")), ""), (str(el.get("type")), "")] for el in elements]
    else:
        headers = ["element"]
        first = [[label(el, plain)] for el in elements]
    if view.ids:
        headers.insert(0, "id")
        first = [[(str(el.get("id")), "")] + row for el, row in zip(elements, first)]
    used = sum(max([width_of(h)] + [width_of(row[i][0]) for row in first]) + 3
               for i, h in enumerate(headers))
    keys = attribute_keys(list(elements), view.width - used) if (links or nodes) else []
    rows = [row + [(el.get("attributes") or {}).get(k, MISSING) for k in keys]
            for el, row in zip(elements, first)]
    return headers + keys, rows
