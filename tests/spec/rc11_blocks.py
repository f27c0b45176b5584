"""Extracting the KIP blocks of the four RC11 texts (no engine code).

What counts as a block: every fenced code block tagged ```prolog (the tag the RC11 texts use
for KIP) in KIP-SPECIFICATION, KIPSyntax, SystemInstructions and SelfInstructions. Untagged,
js, json, text and mermaid blocks are grammar sketches, tool schemas and diagrams, not KIP.
A block may hold several commands: it is cut before every line that starts (after
indentation) with a statement keyword at bracket depth 0, and a piece is kept when its first
word is a statement keyword. A piece is a READ when that word is FIND, DESCRIBE or SEARCH.
Templates are not commands and are left out: a piece holding `...`, a `<placeholder>` or an
upper-case letter standing for a number (`LIMIT N`), outside strings and `//` comments
(`"<predicate>"` is a string, and parses).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "spec"
TEXTS = ("KIP-SPECIFICATION-v1.0-RC11.md", "KIPSyntax-v1.0-RC11.md",
         "SystemInstructions-v1.0-RC11.md", "SelfInstructions-v1.0-RC11.md")
STATEMENTS = ("FIND", "UPSERT", "DELETE", "DESCRIBE", "SEARCH", "UPDATE", "MERGE", "EXPORT")
READS = frozenset(("FIND", "DESCRIBE", "SEARCH"))
_FENCE = re.compile(r"^```prolog[ \t]*\n(.*?)^```", re.S | re.M)
_TEMPLATE = re.compile(r"\.\.\.|<[A-Za-z_]|\b(?:LIMIT|CURSOR|VERSION) [A-Z]\b")
_START = re.compile(r"^[ \t]*(" + "|".join(STATEMENTS) + r")\b")


@dataclass(frozen=True)
class Block:
    """One command of a spec text: where it is, its first word, its text."""

    ident: str      # "<short file>:<line>"
    keyword: str
    text: str


def _is_template(piece: str) -> bool:
    code = re.sub(r"//[^\n]*", "", re.sub(r'"(?:[^"\\]|\\.)*"', '""', piece))
    return _TEMPLATE.search(code) is not None


def _depth_change(line: str) -> int:
    code = re.sub(r'"(?:[^"\\]|\\.)*"', '""', line.split("//", 1)[0])
    return sum(code.count(c) for c in "{([") - sum(code.count(c) for c in "})]")


def _pieces(body: str, first_line: int) -> list[tuple[int, str]]:
    pieces: list[tuple[int, list[str]]] = []
    depth = 0
    for offset, line in enumerate(body.split("\n")):
        if depth <= 0 and _START.match(line):
            pieces.append((first_line + offset, []))
            depth = 0
        if pieces:
            pieces[-1][1].append(line)
        depth += _depth_change(line)
    return [(n, "\n".join(lines).strip()) for n, lines in pieces]


def blocks() -> list[Block]:
    """Every command of the four texts, in document order (empty when ../shared is absent)."""
    found: list[Block] = []
    for name in TEXTS:
        path = SHARED / name
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        short = name.split("-v1.0")[0]
        for match in _FENCE.finditer(text):
            line = text.count("\n", 0, match.start(1)) + 1
            for number, piece in _pieces(match.group(1), line):
                if _is_template(piece):
                    continue
                keyword = piece.split(None, 1)[0].split("(", 1)[0]
                found.append(Block(f"{short}:{number}", keyword, piece))
    return found
