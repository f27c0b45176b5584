"""KIP responses → lines of text for people: tables, compact elements, one-line counts, errors.

`render(command, response, painter, width)` picks a layout from the command (parsed with the
engine's own parser, so FIND headers are the FIND expressions) and from the shape of the result, and returns a `Rendered`: the lines, and a
short summary ("3 rows") for the footer. Nothing here prints or talks to a backend.

Layouts: FIND → an aligned table (one column per FIND expression; nested values folded to
compact one-line JSON and clipped), or a compact element view when the answer is one node or
link; KML → one line of counts; DESCRIBE → a list of names in columns, a table of domains, or
an outline; SEARCH → a table of hits with scores; EXPLAIN → the plan text; errors → code,
name, message, position, the snippet with its caret, and the hint.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from prompt_toolkit.utils import get_cwidth

from .. import language as syntax
from ..errors import KipError
from ..language import ast as A

_ANSI = {
    "header": "1", "dim": "2", "null": "2", "error": "1;31", "caret": "1;31",
    "hint": "33", "ok": "32", "number": "36", "key": "34", "warn": "33",
}


class Painter:
    """Wraps text in ANSI colour codes when colour is on; otherwise returns it unchanged."""

    def __init__(self, color: bool) -> None:
        self.color = color

    def __call__(self, style: str, text: str) -> str:
        code = _ANSI.get(style)
        if not (self.color and code and text):
            return text
        return f"\x1b[{code}m{text}\x1b[0m"


@dataclass
class Rendered:
    lines: list[str] = field(default_factory=list)
    summary: str = ""          # "3 rows", "1 concept" ... ("" when nothing to say)
    ok: bool = True


def width_of(text: str) -> int:
    return get_cwidth(text)


def clip(text: str, width: int) -> str:
    """`text` cut to `width` terminal columns, ending in '…' when cut."""
    if width_of(text) <= width:
        return text
    out, used = [], 0
    for ch in text:
        w = get_cwidth(ch)
        if used + w > width - 1:
            break
        out.append(ch)
        used += w
    return "".join(out) + "…"


def compact_json(value: Any) -> str:
    if isinstance(value, dict) and value.get("_type") in ("ConceptNode", "PropositionLink"):
        value = {k: v for k, v in value.items() if k != "_type"}
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def cell(value: Any) -> tuple[str, str]:
    """(text, style) of one value in a table cell or outline."""
    if value is None:
        return "null", "null"
    if isinstance(value, bool):
        return ("true" if value else "false"), "number"
    if isinstance(value, (int, float)):
        return json.dumps(value), "number"
    if isinstance(value, str):
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t"), ""
    return compact_json(value), ""


def is_element(value: Any) -> bool:
    return isinstance(value, dict) and value.get("_type") in ("ConceptNode", "PropositionLink")


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


# --- entry point ---------------------------------------------------------------------------

def render(command: str, response: dict[str, Any], p: Painter, width: int = 100) -> Rendered:
    if "error" in response:
        return Rendered(render_error(response["error"], p, width), ok=False)
    result = response.get("result")
    parsed = _parse(command)
    try:
        return _render_result(parsed, result, p, width)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError):
        return Rendered(pretty_json(result).splitlines())  # a shape we did not expect


def _parse(command: str) -> A.Command | None:
    try:
        return syntax.parse(command).command
    except KipError:
        return None


def _render_result(cmd: A.Command | None, result: Any, p: Painter, width: int) -> Rendered:
    if isinstance(cmd, A.Find):
        return render_find(cmd, result, p, width)
    if isinstance(cmd, A.Explain):
        text = result.get("text") if isinstance(result, dict) else None
        return Rendered(str(text).splitlines() if text else pretty_json(result).splitlines())
    if isinstance(cmd, (A.Upsert, A.DeleteAttributes, A.DeleteMetadata, A.DeletePropositions,
                        A.DeleteConcept)):
        return Rendered([p("ok", kml_line(cmd, result))])
    if isinstance(cmd, (A.DescribeConceptTypes, A.DescribePropositionTypes)) and \
            isinstance(result, list):
        noun = "type" if isinstance(cmd, A.DescribeConceptTypes) else "predicate"
        return Rendered(columns([str(x) for x in result], width), plural(len(result), noun))
    if isinstance(cmd, A.DescribeDomains) and isinstance(result, list):
        return render_domains(result, p, width)
    if isinstance(cmd, A.Search) and isinstance(result, list):
        return render_search(result, p, width)
    if is_element(result):
        return Rendered(element_lines(result, p, width))
    if isinstance(result, (dict, list)):
        return Rendered(outline(result, p, width))
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


def render_find(cmd: A.Find, result: Any, p: Painter, width: int) -> Rendered:
    headers, rows = find_rows(cmd, result)
    summary = plural(len(rows), "row")
    if len(rows) == 1 and len(headers) == 1 and is_element(rows[0][0]):
        return Rendered(element_lines(rows[0][0], p, width), summary)
    return Rendered(table(headers, rows, p, width), summary)


def fit_level(widths: list[int], budget: int, minimum: int = 10) -> int:
    """The largest cap L (>= minimum) with sum(min(w, L)) <= budget: wide columns shrink
    first, narrow ones keep their natural width."""
    lo, hi = minimum, max(widths + [minimum])
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(min(w, mid) for w in widths) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def table(headers: list[str], rows: list[list[Any]], p: Painter, width: int) -> list[str]:
    """An aligned table in the style of psql; numeric columns are right-aligned."""
    ncols = len(headers)
    cells = [[cell(v) for v in row] for row in rows]
    natural = [width_of(h) for h in headers]
    for row in cells:
        for i, (text, _) in enumerate(row):
            natural[i] = max(natural[i], width_of(text))
    cap = fit_level(natural, width - 3 * (ncols - 1) - 2)
    cells = [[(clip(t, cap), s) for t, s in row] for row in cells]
    widths = [min(w, max(cap, width_of(h))) for w, h in zip(natural, headers)]
    numeric = [bool(rows) and all(isinstance(r[i], (int, float)) and not isinstance(r[i], bool)
                                  or r[i] is None for r in rows)
               for i in range(ncols)]

    def pad(text: str, i: int) -> str:
        room = widths[i] - width_of(text)
        return " " * room + text if numeric[i] else text + " " * room

    out = [" " + " | ".join(p("header", pad(h, i)) for i, h in enumerate(headers)).rstrip()]
    out.append("-" + "-+-".join("-" * w for w in widths) + "-")
    for row in cells:
        out.append((" " + " | ".join(p(s, pad(t, i)) if s else pad(t, i)
                                     for i, (t, s) in enumerate(row))).rstrip())
    return out


# --- elements, outlines --------------------------------------------------------------------

def element_title(el: dict[str, Any]) -> str:
    if el.get("_type") == "PropositionLink":
        return f"{el.get('id')}  {el.get('subject')} -[{el.get('predicate')}]-> {el.get('object')}"
    return f"{el.get('id')}  {el.get('type')} {json.dumps(el.get('name'), ensure_ascii=False)}"


def element_lines(el: dict[str, Any], p: Painter, width: int) -> list[str]:
    """One node or link: a title line, then its attributes and metadata, one key a line."""
    out = [p("header", element_title(el))]
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
    if extra:
        out.extend(outline(extra, p, width, indent=2))
    return out


def outline(value: Any, p: Painter, width: int, indent: int = 0) -> list[str]:
    """A readable indented view of nested dicts and lists (DESCRIBE PRIMER, TYPE...)."""
    pad = " " * indent
    out: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            out.extend(_outline_entry(f"{pad}{p('key', str(key))}:", item, p, width, indent))
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict) and item and not is_element(item):
                sub = outline(item, p, width, indent + 2)     # "- key: value" then the rest
                out.append(f"{pad}- {sub[0][indent + 2:]}")
                out.extend(sub[1:])
            else:
                out.extend(_outline_entry(f"{pad}-", item, p, width, indent))
    else:
        text, style = cell(value)
        out.append(pad + p(style, clip(text, max(20, width - indent))))
    return out


def _outline_entry(head: str, item: Any, p: Painter, width: int, indent: int) -> list[str]:
    if is_element(item):
        return [f"{head} {element_title(item)}"]
    if isinstance(item, dict) and item:
        return [head] + outline(item, p, width, indent + 2)
    if isinstance(item, list) and item and any(isinstance(x, (dict, list)) for x in item):
        return [head] + outline(item, p, width, indent + 2)
    if isinstance(item, list):
        text = ", ".join(cell(x)[0] for x in item) if item else "[]"
        return [f"{head} {clip(text, max(20, width - indent - 20))}"]
    text, style = cell(item)
    return [f"{head} {p(style, clip(text, max(20, width - indent - 20)))}"]


def columns(names: list[str], width: int) -> list[str]:
    """Names laid out in columns, like `ls`."""
    if not names:
        return []
    colw = max(width_of(n) for n in names) + 2
    per_line = max(1, width // colw)
    nrows = -(-len(names) // per_line)
    lines = []
    for r in range(nrows):
        row = names[r::nrows]
        lines.append("".join(n + " " * (colw - width_of(n)) for n in row).rstrip())
    return lines


def render_domains(result: list[Any], p: Painter, width: int) -> Rendered:
    rows = [[d.get("name"), d.get("id"), (d.get("attributes") or {}).get("description")]
            for d in result]
    return Rendered(table(["name", "id", "description"], rows, p, width),
                    plural(len(rows), "domain"))


def render_search(result: list[Any], p: Painter, width: int) -> Rendered:
    rows = []
    links = bool(result) and all(h.get("_type") == "PropositionLink" for h in result)
    for hit in result:
        score = (hit.get("metadata") or {}).get("_score")
        score = f"{score:.3f}" if isinstance(score, float) else score
        if hit.get("_type") == "PropositionLink":
            what = f"{hit.get('subject')} -[{hit.get('predicate')}]-> {hit.get('object')}"
            rows.append([score, hit.get("id"), hit.get("predicate"), what])
        else:
            rows.append([score, hit.get("id"), hit.get("type"), hit.get("name")])
    headers = ["score", "id", "predicate", "link"] if links else ["score", "id", "type", "name"]
    return Rendered(table(headers, rows, p, width), plural(len(rows), "hit"))


# --- KML -----------------------------------------------------------------------------------

def _ids(ids: list[Any], shown: int = 4) -> str:
    head = ", ".join(str(i) for i in ids[:shown])
    return head + (f", … (+{len(ids) - shown})" if len(ids) > shown else "")


def kml_line(cmd: A.Command | None, result: Any) -> str:
    """One line of counts: `UPSERT: 2 concepts (C:4, C:5), 1 proposition (P:6:knows)`."""
    if not isinstance(result, dict):
        return f"OK {compact_json(result)}"
    if "upsert_concept_nodes" in result or "upsert_proposition_links" in result:
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
    """Code and name, message, where, the snippet with its caret, and the hint."""
    if not isinstance(err, dict):
        return [p("error", f"error: {err}")]
    code, name = err.get("code", "?"), err.get("name", "")
    out = [f"{p('error', f'{code} {name}'.strip())}: {err.get('message', '')}"]
    data = err.get("data")
    if not isinstance(data, dict):
        data = {}
    if "file_line" in data:
        out.append(p("dim", f"  in the command starting at line {data['file_line']} of the file"))
    if data.get("line") is not None:
        out.append(p("dim", f"  at line {data['line']}, column {data.get('column')}:"))
    snippet = data.get("snippet")
    if isinstance(snippet, str) and snippet:
        lines = snippet.split("\n")
        for i, line in enumerate(lines):
            caret = i == len(lines) - 1 and line.strip() == "^"
            out.append("    " + (p("caret", line) if caret else line))
    if err.get("hint"):
        out.append(f"  {p('hint', 'hint:')} {err['hint']}")
    return out
