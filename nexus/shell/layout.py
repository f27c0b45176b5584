"""Text layout for the terminal: colour, cells, aligned tables, columns, word wrapping.

Pure functions over strings and terminal widths (East Asian wide characters count two
columns); what to show is `nexus.shell.render`'s and `nexus.shell.people`'s.
"""
from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field
from typing import Any, Mapping

from prompt_toolkit.utils import get_cwidth

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
class View:
    """How to show a response: colours, width, the names of elements by id (for link ends,
    see `nexus.shell.names`) and whether ids are shown (`:ids on`)."""
    paint: Painter = field(default_factory=lambda: Painter(False))
    width: int = 100
    names: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    ids: bool = False


@dataclass
class Rendered:
    lines: list[str] = field(default_factory=list)
    summary: str = ""          # "3 rows", "1 concept" ... ("" when nothing to say)
    ok: bool = True


class _Missing:
    """A table cell with nothing in it (an attribute the element does not have): blank, and
    no reason for a numeric column not to be right-aligned."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


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


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


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
    """An aligned table in the style of psql; numeric columns are right-aligned. A cell may
    be a value or an already formatted `(text, style)` pair."""
    ncols = len(headers)
    cells = [[v if isinstance(v, tuple) else ("", "") if v is MISSING else cell(v)
              for v in row] for row in rows]
    natural = [width_of(h) for h in headers]
    for row in cells:
        for i, (text, _) in enumerate(row):
            natural[i] = max(natural[i], width_of(text))
    cap = fit_level(natural, width - 3 * (ncols - 1) - 2)
    cells = [[(clip(t, cap), s) for t, s in row] for row in cells]
    widths = [min(w, max(cap, width_of(h))) for w, h in zip(natural, headers)]
    numeric = [bool(rows) and all(isinstance(r[i], (int, float)) and not isinstance(r[i], bool)
                                  or r[i] is None or r[i] is MISSING for r in rows)
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


def wrap(text: str, width: int, first: str = "", rest: str = "") -> list[str]:
    """`text` wrapped on word boundaries to `width` columns after the prefix `first` (then
    `rest`); a word longer than a line stays whole rather than being cut in two."""
    wrapper = textwrap.TextWrapper(width=max(20, width), initial_indent=first,
                                   subsequent_indent=rest, break_long_words=False,
                                   break_on_hyphens=False)
    out: list[str] = []
    for i, paragraph in enumerate(text.split("\n")):
        lines = wrapper.wrap(paragraph) or [first if not i else rest]
        out.extend(lines)
        wrapper.initial_indent = rest
    return out


def window(line: str, caret: int, width: int) -> tuple[str, int]:
    """A part of `line` at most `width` columns wide that shows character `caret`, and the
    terminal column of that character in it (so that a caret line can be drawn under it)."""
    if width_of(line) <= width:
        return line, width_of(line[:caret])
    start = max(0, caret - width // 2)
    text = line[start:]
    prefix = "…" if start else ""
    shown = prefix + text
    if width_of(shown) > width:
        shown = clip(shown, width)
    return shown, width_of(prefix + line[start:caret])
