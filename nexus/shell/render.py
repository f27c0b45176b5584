"""KIP responses → lines of text for people: tables, elements, one-line counts, errors.

`render(command, response, view)` picks a layout from the shape of the result and, where
the shape alone is ambiguous, from the command: FIND's column headers are its expressions
(parsed with the engine's own parser), and the leading word tells DESCRIBE and SEARCH apart.
A command the parser does not know yet (a statement newer than this grammar) still renders:
the result's shape is enough. Returns a `Rendered`: the lines and a short summary ("3 rows")
for the footer. Nothing here prints or talks to a backend.

Layouts: FIND → an aligned table (one column per expression; nodes and links by name,
nested values folded to compact JSON and clipped); one column of nodes or links → a table of
the columns that matter (`nexus.shell.people`); one element → its title, attributes and
metadata. KML → one line of counts (UPSERT, DELETE, RC11's UPDATE and MERGE); EXPORT → the
capsule text; DESCRIBE → names in columns, a table of domains, or an outline; SEARCH (any
MODE) → hits with scores; EXPLAIN → the plan text; errors → code, name and message wrapped
on word boundaries, position, the snippet with its caret under the column, and the hint.
A `hint` beside a result (SEARCH served in another mode) is shown below it.
"""
from __future__ import annotations

import json
from typing import Any

from .. import language as syntax
from ..errors import KipError
from ..language import ast as A
from .entry import first_word
from .layout import (Painter, Rendered, View, cell, clip, columns, compact_json, plural, table,
                     window, wrap)
from .people import element_lines, element_table, element_title, is_element, is_link, label



# --- entry point ---------------------------------------------------------------------------

def render(command: str, response: dict[str, Any], view: View | None = None) -> Rendered:
    view = view or View()
    if "error" in response:
        return Rendered(render_error(response["error"], view.paint, view.width), ok=False)
    result = response.get("result")
    try:
        shown = _render_result(command, result, view)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError):
        shown = Rendered(pretty_json(result).splitlines())  # a shape we did not expect
    note = response.get("hint")
    if isinstance(note, str) and note:
        shown.lines.extend(view.paint("dim", line)
                           for line in wrap(note, view.width, "note: ", "      "))
    return shown


def _parse(command: str) -> A.Command | None:
    try:
        return syntax.parse(command).command
    except KipError:
        return None


def result_kind(result: Any) -> str | None:
    """The kind of a write or EXPORT result, from its keys alone: `upsert`, `delete`,
    `update`, `merge`, `export`; None for anything else."""
    if not isinstance(result, dict) or not result:
        return None
    keys = set(result)
    if {"updated", "matched"} <= keys:
        return "update"
    if "merged" in keys and keys & {"links_repointed", "links_deduplicated",
                                    "attributes_filled"}:
        return "merge"
    if isinstance(result.get("capsule"), str):
        return "export"
    if "upsert_concept_nodes" in keys or "upsert_proposition_links" in keys:
        return "upsert"
    if all(k.startswith(("deleted_", "updated_")) for k in keys):
        return "delete"
    return None


def _render_result(command: str, result: Any, view: View) -> Rendered:
    cmd = _parse(command)
    word = first_word(command)
    p = view.paint
    if isinstance(cmd, A.Find):
        return render_find(cmd, result, view)
    if isinstance(cmd, A.Explain) or word == "EXPLAIN":
        text = result.get("text") if isinstance(result, dict) else None
        return Rendered(str(text).splitlines() if text else pretty_json(result).splitlines())
    kind = result_kind(result)
    if kind == "export":
        return render_export(result, view)
    if kind is not None:
        return Rendered([p("ok", kml_line(kind, result))])
    if word == "DESCRIBE" and isinstance(result, list):
        if all(isinstance(x, str) for x in result):
            noun = "predicate" if "PROPOSITION" in command.upper() else "type"
            return Rendered(columns([str(x) for x in result], view.width),
                            plural(len(result), noun))
        if all(is_element(x) for x in result):
            return render_domains(result, view)
    if word == "SEARCH" and isinstance(result, list):
        return render_search(result, view)
    if is_element(result):
        return Rendered(element_lines(result, view, outline))
    if isinstance(result, list) and result and all(is_element(x) for x in result):
        headers, rows = element_table(result, view)
        return Rendered(table(headers, rows, p, view.width), plural(len(rows), "row"))
    if isinstance(result, (dict, list)):
        return Rendered(outline(result, view))
    text, style = cell(result)
    return Rendered([p(style, text)])


def pretty_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2)


# --- FIND ----------------------------------------------------------------------------------

def expression_text(item: A.FindItem) -> str:
    """A FIND expression as written: `?d.name`, `COUNT(DISTINCT ?d)`."""
    if isinstance(item, A.Aggregate):
        return f"{item.func}({'DISTINCT ' if item.distinct else ''}{expression_text(item.arg)})"
    return "?" + ".".join((item.var,) + tuple(item.segments))


def find_rows(cmd: A.Find, result: Any) -> tuple[list[str], list[list[Any]]]:
    """The FIND result as (headers, rows), undoing the column layout of CONTRACT §4."""
    headers = [expression_text(item) for item in cmd.items]
    if all(isinstance(item, A.Aggregate) for item in cmd.items):
        return headers, [[result] if len(headers) == 1 else list(result)]
    if len(headers) == 1:
        return headers, [[v] for v in result]
    columns_ = list(result)
    if len(columns_) != len(headers):
        raise ValueError("column count")
    return headers, [list(row) for row in zip(*columns_)]


def render_find(cmd: A.Find, result: Any, view: View) -> Rendered:
    headers, rows = find_rows(cmd, result)
    summary = plural(len(rows), "row")
    if len(headers) == 1:
        values = [row[0] for row in rows]
        if len(values) == 1 and is_element(values[0]):
            return Rendered(element_lines(values[0], view, outline), summary)
        if values and all(is_element(v) for v in values):
            headers, rows = element_table(values, view)
            return Rendered(table(headers, rows, view.paint, view.width), summary)
    rows = [[label(v, view) if is_element(v) else v for v in row] for row in rows]
    return Rendered(table(headers, rows, view.paint, view.width), summary)


# --- outlines, DESCRIBE, SEARCH, EXPORT -----------------------------------------------------

def outline(value: Any, view: View, indent: int = 0) -> list[str]:
    """A readable indented view of nested dicts and lists (DESCRIBE PRIMER, TYPE...)."""
    p, width = view.paint, view.width
    pad = " " * indent
    out: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            out.extend(_outline_entry(f"{pad}{p('key', str(key))}:", item, view, indent))
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict) and item and not is_element(item):
                sub = outline(item, view, indent + 2)     # "- key: value" then the rest
                out.append(f"{pad}- {sub[0][indent + 2:]}")
                out.extend(sub[1:])
            else:
                out.extend(_outline_entry(f"{pad}-", item, view, indent))
    else:
        text, style = cell(value)
        out.append(pad + p(style, clip(text, max(20, width - indent))))
    return out


def _outline_entry(head: str, item: Any, view: View, indent: int) -> list[str]:
    p, width = view.paint, view.width
    if is_element(item):
        return [f"{head} {element_title(item, view)}"]
    if isinstance(item, dict) and item:
        return [head] + outline(item, view, indent + 2)
    if isinstance(item, list) and item and any(isinstance(x, (dict, list)) for x in item):
        return [head] + outline(item, view, indent + 2)
    if isinstance(item, list):
        text = ", ".join(cell(x)[0] for x in item) if item else "[]"
        return [f"{head} {clip(text, max(20, width - indent - 20))}"]
    text, style = cell(item)
    return [f"{head} {p(style, clip(text, max(20, width - indent - 20)))}"]


def render_domains(result: list[Any], view: View) -> Rendered:
    rows = [[d.get("name"), (d.get("attributes") or {}).get("description")] for d in result]
    headers = ["name", "description"]
    if view.ids:
        headers.insert(1, "id")
        rows = [[r[0], d.get("id"), r[1]] for r, d in zip(rows, result)]
    return Rendered(table(headers, rows, view.paint, view.width),
                    plural(len(rows), "domain"))


def render_search(result: list[Any], view: View) -> Rendered:
    """Hits best first: score, then type and name (or the link); the same for every MODE."""
    rows: list[list[Any]] = []
    links = bool(result) and all(is_link(h) for h in result)
    for hit in result:
        score = (hit.get("metadata") or {}).get("_score")
        score = f"{score:.3f}" if isinstance(score, float) else score
        if links:
            row: list[Any] = [score, label(hit, View(view.paint, view.width, view.names))]
        else:
            row = [score, hit.get("type"), hit.get("name")]
        rows.append(([score, hit.get("id")] + row[1:]) if view.ids else row)
    headers = ["score", "link"] if links else ["score", "type", "name"]
    if view.ids:
        headers.insert(1, "id")
    return Rendered(table(headers, rows, view.paint, view.width), plural(len(rows), "hit"))


def render_export(result: dict[str, Any], view: View) -> Rendered:
    """EXPORT: the capsule text as it is (to copy or save), its counts in the footer."""
    lines = str(result.get("capsule") or "").rstrip("\n").splitlines()
    parts = [plural(result[k], k[:-1]) for k in ("concepts", "propositions")
             if isinstance(result.get(k), int)]
    return Rendered(lines, ", ".join(parts))


# --- KML -----------------------------------------------------------------------------------

def _ids(ids: list[Any], shown: int = 4) -> str:
    head = ", ".join(str(i) for i in ids[:shown])
    return head + (f", … (+{len(ids) - shown})" if len(ids) > shown else "")


def _count(value: Any, noun: str, verb: str) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{plural(value, noun)} {verb}"
    return None


def kml_line(kind: str, result: dict[str, Any]) -> str:
    """One line of counts, e.g. `UPSERT: 2 concepts (C:4, C:5), 1 proposition (P:6:knows)`,
    `UPDATE: 5 matched, 3 updated`, `MERGE: 1 concept merged, 4 links repointed …`."""
    if kind == "upsert":
        parts = []
        for key, noun in (("upsert_concept_nodes", "concept"),
                          ("upsert_proposition_links", "proposition")):
            ids = list(result.get(key) or ())
            if ids:     # links made by SET PROPOSITIONS are not listed (CONTRACT §7)
                parts.append(f"{plural(len(ids), noun)} ({_ids(ids)})")
        blocks = result.get("blocks")
        tail = f" in {plural(blocks, 'statement')}" if isinstance(blocks, int) and blocks > 1 \
            else ""
        return "UPSERT: " + (", ".join(parts) or "done") + tail
    if kind == "update":
        return (f"UPDATE: {result.get('matched')} matched, "
                f"{result.get('updated')} updated")
    if kind == "merge":
        merged = result.get("merged")
        parts = [_count(merged, "concept", "merged")
                 or f"merged {merged if isinstance(merged, str) else compact_json(merged)}"]
        for key, noun, verb in (("links_repointed", "link", "repointed"),
                                ("links_deduplicated", "duplicate link", "dropped"),
                                ("attributes_filled", "attribute", "filled")):
            text = _count(result.get(key), noun, verb)
            if text:
                parts.append(text)
        return "MERGE: " + ", ".join(parts)
    parts = []
    for key, value in result.items():
        verb, _, noun = key.partition("_")
        if isinstance(value, int) and noun:
            noun = noun[:-1] if noun.endswith("s") else noun
            parts.append(f"{plural(value, noun)} {verb}")
        else:
            parts.append(f"{key}: {compact_json(value)}")
    return "DELETE: " + (", ".join(parts) if parts else "done")


# --- errors --------------------------------------------------------------------------------

def render_error(err: Any, p: Painter, width: int = 100) -> list[str]:
    """Code and name, the message wrapped on word boundaries, where, the snippet with its
    caret under the column (the snippet is never wrapped: a long line is shown as a window
    around the caret), and the hint (wrapped)."""
    if not isinstance(err, dict):
        return [p("error", f"error: {err}")]
    head = f"{err.get('code', '?')} {err.get('name', '')}".strip()
    glued = head.replace(" ", "\x00")           # the head is never broken across lines
    out = wrap(f"{glued}: {err.get('message', '')}", width, "", "  ")
    out[0] = p("error", head) + out[0][len(glued):]
    data = err.get("data")
    if not isinstance(data, dict):
        data = {}
    if "file_line" in data:
        out.append(p("dim", f"  in the command starting at line {data['file_line']} of the file"))
    if data.get("line") is not None:
        out.append(p("dim", f"  at line {data['line']}, column {data.get('column')}:"))
    snippet = data.get("snippet")
    if isinstance(snippet, str) and snippet:
        out.extend(snippet_lines(snippet, p, width - 4))
    if err.get("hint"):
        hint = wrap(f"hint:\x00{err['hint']}", width, "  ", "        ")
        out.extend(line.replace("hint:\x00", p("hint", "hint:") + " ", 1) for line in hint)
    return out


def snippet_lines(snippet: str, p: Painter, width: int) -> list[str]:
    """The offending line and a caret under the column, indented by four; a line wider
    than `width` becomes a window around the caret, and the caret follows it (wide
    characters before it counted as two columns)."""
    lines = snippet.split("\n")
    if len(lines) >= 2 and lines[-1].strip() == "^":
        caret = len(lines[-1]) - len(lines[-1].lstrip(" "))
        source, column = window(lines[-2], caret, max(20, width))
        shown = [clip(line, max(20, width)) for line in lines[:-2]]
        shown += [source, " " * column + "^"]
        return ["    " + (p("caret", s) if i == len(shown) - 1 else s)
                for i, s in enumerate(shown)]
    return ["    " + clip(line, max(20, width)) for line in lines]
