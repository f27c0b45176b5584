"""The loader's UPSERT shape read clause by clause: one regex match per block or link.

What importers and agents send in bulk (issue 18) is one shape: `UPSERT { ... }` of CONCEPT
blocks naming `{type: T, name: N}`, each with an optional `SET ATTRIBUTES :a`, an optional
`SET PROPOSITIONS { ("pred", {type: T, name: N}) WITH METADATA :m, ... }` and an optional
`WITH METADATA :m`, where T, N and the predicate are `:placeholders` or plain strings. Read
token by token (nexus/syntax/fastparse.py), a link of that shape costs 16 tokens and as
many steps of the descent; here the whole concept head or the whole link is one match of a
compiled regex, and its nodes are built straight from the match groups.

`clause_upsert(text)` returns exactly the AST the grammar builds (positions included), or
None for anything else — a handle, an id match, a literal map, an escape in a string, a
second statement, statement metadata, a comment where the tokens would differ... — and the
token reader then reads the text (and declines in turn to the LALR parser, the only source
of errors). It never raises. tests/syntax/test_fastparse.py compares it with the grammar.

`clause_columns(text)` reads the same shape by the same matches into columns instead of
nodes (`ast.ColumnUpsert`: one entry per block and per link, what the UPSERT executor of a
load consumes, nexus/exec/upsert_columns.py), about 3-4 times faster; the tree of such a
command is built by `clause_upsert` only when something asks for it. The fast path tries it
first.
"""
from __future__ import annotations

import gc
import re
import sys
import time
from bisect import bisect_right
from functools import partial
from typing import Any, Callable

from ..errors import ErrorCode, KipError
from . import ast as A

# Blanks and comments between two tokens (the grammar's WS and COMMENT), taken whole and
# never given back, so a failed match never re-reads them and a token is never found inside a
# comment. Python's `re` has possessive quantifiers from 3.11 on; before, the same language
# and the same matches (tests/syntax/test_fastparse.py compares the two) come from
# lookaheads: each run of blanks ends where no blank follows (one split of it, no
# backtracking over its splits), each comment at its line's end, the whole at neither —
# about twice as slow on a loader's link, hence only where there is no other way.
BLANKS_POSSESSIVE = r"(?:[ \t\f\r\n]++|//[^\n]*+)*+"
BLANKS_LOOKAHEAD = r"(?:[ \t\f\r\n]+(?![ \t\f\r\n])|//[^\n]*(?![^\n]))*(?![ \t\f\r\n]|//)"
BLANKS = BLANKS_POSSESSIVE if sys.version_info >= (3, 11) else BLANKS_LOOKAHEAD
_W = BLANKS
# A value where the grammar wants a string: a placeholder (an identifier after ':', not
# followed by more word characters: `:né` is declined) or a string without escapes.
_S = r"(?::([A-Za-z_][A-Za-z0-9_]*)(?!\w)|\"([^\"\\\n\r]*)\")"
# A placeholder where the grammar wants an object (SET ATTRIBUTES, WITH METADATA).
_P = r":([A-Za-z_][A-Za-z0-9_]*)(?!\w)"
# `{type: T, name: N}`: group 1 is the '{' (empty group: its offset), then T, then N.
_MATCH = (r"()\{" + _W + r"type(?!\w)" + _W + ":" + _W + _S + _W + "," + _W
          + r"name(?!\w)" + _W + ":" + _W + _S + _W + r"\}")

_START = re.compile(_W + r"()UPSERT(?!\w)" + _W + r"\{" + _W)
# A concept block up to its SET PROPOSITIONS '{' (group 9 set) or its closing '}' (group 10).
_HEAD = re.compile(
    r"()CONCEPT(?!\w)" + _W + r"\{" + _W + _MATCH + _W
    + r"(?:SET(?!\w)" + _W + r"ATTRIBUTES(?!\w)" + _W + r"()" + _P + _W + r")?"
    + r"(?:SET(?!\w)" + _W + r"PROPOSITIONS(?!\w)" + _W + r"(\{)" + _W + r"|(\}))" + _W)
# One link of SET PROPOSITIONS, with the comma after it (the grammar's is optional).
_LINK = re.compile(
    r"()\(" + _W + r"()" + _S + _W + "," + _W + _MATCH + _W + r"\)" + _W
    + r"(?:WITH(?!\w)" + _W + r"METADATA(?!\w)" + _W + r"()" + _P + _W + r")?"
    + r",?" + _W)
# The end of SET PROPOSITIONS and of its block.
_LINKS_END = re.compile(r"\}" + _W + r"\}" + _W)
# A block's own `WITH METADATA :m`.
_BLOCK_META = re.compile(r"WITH(?!\w)" + _W + r"METADATA(?!\w)" + _W + r"()" + _P + _W)
# The end of the statement and of the command (statement metadata, a second statement:
# declined).
_END = re.compile(r"\}" + _W + r"(?:;" + _W + r")*\Z")

# Brackets open at the deepest point of this shape: UPSERT {, CONCEPT {, PROPOSITIONS {, (, {.
_DEPTH = 5
# How many blocks are read between two looks at the clock (both fast readers).
_CLOCK_EVERY = 256
# Positions are immutable and compare by value: one object per (line, column) seen, shared
# by every command (a loader's commands repeat the same columns on the same lines).
_POS: dict[int, A.Pos] = {}
_POS_MAX = 1 << 16
_FAR = 1 << 62


def _pos(line: int, column: int) -> A.Pos:
    """The Pos of (line from 0, column from 1), shared."""
    key = (line << 24) | column if column < (1 << 24) else -1
    hit = _POS.get(key)
    if hit is None:
        hit = A.Pos(line + 1, column)
        if key >= 0:
            if len(_POS) >= _POS_MAX:
                _POS.clear()
            _POS[key] = hit
    return hit


class Lines:
    """Where a text's lines start, to turn offsets into positions as the LALR lexer counts
    them (lines split on \\n, columns in characters, both from 1): one list of newline
    offsets per text, searched per position."""

    __slots__ = ("newlines",)

    def __init__(self, text: str) -> None:
        self.newlines = [m.start() for m in re.finditer("\n", text)]

    def pos(self, offset: int) -> A.Pos:
        """The (shared) Pos of `offset`."""
        newlines = self.newlines
        line = bisect_right(newlines, offset)
        return _pos(line, offset - (newlines[line - 1] + 1 if line else 0) + 1)

    def line_of(self, offset: int) -> tuple[int, int, int]:
        """The line (from 0) of `offset`, the offset where it starts and the offset of its
        end: positions on one line are then counted without a search (`on_line`)."""
        newlines = self.newlines
        line = bisect_right(newlines, offset)
        return (line, newlines[line - 1] + 1 if line else 0,
                newlines[line] if line < len(newlines) else _FAR)

    def on_line(self, offset: int, line: tuple[int, int, int]) -> A.Pos:
        """`pos(offset)` for an offset at or after the start of `line`."""
        if offset < line[2]:
            return _pos(line[0], offset - line[1] + 1)
        return self.pos(offset)


def encodable(value: str) -> bool:
    """False for a string holding a lone surrogate, which the grammar's decode refuses (the
    fast readers then decline, and the grammar reports it)."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def out_of_time(blocks: int, deadline: float | None) -> bool:
    """True when `deadline` has passed, looked at once every `_CLOCK_EVERY` blocks read
    (the readers then decline, and the LALR parser reports the time limit)."""
    return not blocks % _CLOCK_EVERY and deadline is not None and time.monotonic() > deadline


# A Param built without the frozen dataclass's __init__ (three object.__setattr__ calls
# from Python): the slots are set through their descriptors, the same object results.
_NEW = object.__new__
_SET_NAME = A.Param.__dict__["name"].__set__
_SET_EXPECT = A.Param.__dict__["expect"].__set__
_SET_POS = A.Param.__dict__["pos"].__set__


def _param(name: str, expect: str, pos: A.Pos) -> A.Param:
    node = _NEW(A.Param)
    _SET_NAME(node, name)
    _SET_EXPECT(node, expect)
    _SET_POS(node, pos)
    return node


_CM = A.ConceptMatch.__dict__
_CM_ID, _CM_TYPE, _CM_NAME, _CM_POS = (_CM[f].__set__ for f in ("id", "type", "name", "pos"))
_SP = A.SetProposition.__dict__
_SP_PREDICATE, _SP_TARGET, _SP_METADATA, _SP_POS = (
    _SP[f].__set__ for f in ("predicate", "target", "metadata", "pos"))


def _concept_match(kind: A.Value, name: A.Value, pos: A.Pos) -> A.ConceptMatch:
    """A.ConceptMatch(None, kind, name, pos), as `_param` builds a Param."""
    node = _NEW(A.ConceptMatch)
    _CM_ID(node, None)
    _CM_TYPE(node, kind)
    _CM_NAME(node, name)
    _CM_POS(node, pos)
    return node


def _set_proposition(predicate: A.Value, target: A.Term, metadata: A.Value | None,
                     pos: A.Pos) -> A.SetProposition:
    node = _NEW(A.SetProposition)
    _SP_PREDICATE(node, predicate)
    _SP_TARGET(node, target)
    _SP_METADATA(node, metadata)
    _SP_POS(node, pos)
    return node


def clause_upsert(text: str, max_nesting: int, deadline: float | None = None
                  ) -> tuple[A.Upsert, frozenset[str]] | None:
    """The AST of an UPSERT of the loader's shape and its placeholder names, or None."""
    if max_nesting < _DEPTH:
        return None
    m = _START.match(text)
    if m is None:
        return None
    # The nodes hold no cycles: the collector, which thousands of allocations would start
    # again and again over the growing tree, is paused while they are built.
    paused = gc.isenabled()
    gc.disable()
    try:
        return _Clauses(text, deadline).command(m)
    finally:
        if paused:
            gc.enable()


class _Clauses(Lines):
    """One reading of a text (its positions through `Lines`)."""

    def __init__(self, text: str, deadline: float | None) -> None:
        self.text = text
        self.deadline = deadline
        super().__init__(text)
        self.params: set[str] = set()

    def string(self, m: re.Match[str], group: int, expect: str, line: tuple[int, int, int]
               ) -> A.Value | None:
        """The node of an `_S` slot whose placeholder is group `group` (its string the next
        group); None when the string holds what the grammar would refuse."""
        name = m.group(group)
        if name is not None:
            self.params.add(name)
            return _param(name, expect, self.on_line(m.start(group) - 1, line))
        raw = m.group(group + 1)
        if not encodable(raw):
            return None
        return A.Literal(raw, self.on_line(m.start(group + 1) - 1, line))

    def placeholder(self, m: re.Match[str], group: int, line: tuple[int, int, int]
                    ) -> A.Param:
        """An object placeholder: group `group` is an empty group before its ':'."""
        name = m.group(group + 1)
        self.params.add(name)
        return _param(name, A.EXPECT_OBJECT, self.on_line(m.start(group), line))

    def concept_match(self, m: re.Match[str], first: int, line: tuple[int, int, int]
                      ) -> A.ConceptMatch | None:
        """`_MATCH` whose '{' group is `first`."""
        kind = self.string(m, first + 1, A.EXPECT_STRING, line)
        name = self.string(m, first + 3, A.EXPECT_STRING, line)
        if kind is None or name is None:
            return None
        return _concept_match(kind, name, self.on_line(m.start(first), line))

    def command(self, start: re.Match[str]) -> tuple[A.Upsert, frozenset[str]] | None:
        text, at = self.text, start.end()
        head, links_end, block_meta = _HEAD.match, _LINKS_END.match, _BLOCK_META.match
        link: Callable[[str, int], re.Match[str] | None] = _LINK.match
        blocks: list[A.UpsertBlock] = []
        while True:
            m = head(text, at)
            if m is None:
                break
            line = self.line_of(m.start(1))
            match = self.concept_match(m, 2, line)
            if match is None:
                return None
            attributes = self.placeholder(m, 7, line) if m.start(7) >= 0 else None
            propositions: tuple[A.SetProposition, ...] | None = None
            at = m.end()
            if m.start(9) >= 0:
                items = []
                while True:
                    lm = link(text, at)
                    if lm is None:
                        break
                    item = self.link(lm)
                    if item is None:
                        return None
                    items.append(item)
                    at = lm.end()
                end = links_end(text, at)
                if end is None:
                    return None
                propositions = tuple(items)
                at = end.end()
            metadata = None
            mm = block_meta(text, at)
            if mm is not None:
                metadata = self.placeholder(mm, 1, line)
                at = mm.end()
            blocks.append(A.ConceptBlock(None, match, attributes, propositions, metadata,
                                         _pos(line[0], m.start(1) - line[1] + 1), None))
            if out_of_time(len(blocks), self.deadline):
                return None
        if _END.match(text, at) is None:
            return None
        pos = self.pos(start.start(1))
        statement = A.UpsertStatement(tuple(blocks), None, pos)
        return A.Upsert((statement,), pos), frozenset(self.params)

    def link(self, m: re.Match[str]) -> A.SetProposition | None:
        start = m.start(1)
        line = self.line_of(start)
        predicate = self.string(m, 3, A.EXPECT_STRING, line)
        target = self.concept_match(m, 5, line)
        if predicate is None or target is None:
            return None
        metadata = self.placeholder(m, 10, line) if m.start(10) >= 0 else None
        return _set_proposition(predicate, target, metadata, _pos(line[0], start - line[1] + 1))


# --- the same shape as columns (ast.ColumnUpsert) ----------------------------------------

def clause_columns(text: str, max_nesting: int, deadline: float | None = None
                   ) -> tuple[A.ColumnUpsert, frozenset[str]] | None:
    """The loader's shape read by the same matches as `clause_upsert`, into columns (one
    entry per block and per link: `ast.UpsertColumns`) instead of a node per value; None
    wherever `clause_upsert` would decline (and for a statement without blocks). The
    command's `statements` are built by `clause_upsert` when asked for, and are then the
    AST the grammar builds (tests/syntax/test_fastparse.py holds the three equal)."""
    if max_nesting < _DEPTH:
        return None
    start = _START.match(text)
    if start is None:
        return None
    head, links_end, block_meta = _HEAD.match, _LINKS_END.match, _BLOCK_META.match
    # (a scanner matches at its position and moves past the match: the links in a row)
    scanner = _LINK.scanner  # type: ignore[attr-defined]
    types: list[A.Slot] = []
    names: list[A.Slot] = []
    attributes: list[str | None] = []
    metadata: list[str | None] = []
    ends: list[int] = []
    predicates: list[A.Slot] = []
    target_types: list[A.Slot] = []
    target_names: list[A.Slot] = []
    link_metadata: list[str | None] = []
    literals = False                    # a string literal among the slots
    at = start.end()
    while True:
        m = head(text, at)
        if m is None:
            break
        # (groups from 0: 2/3 the type's placeholder or string, 4/5 the name's, 7 SET
        # ATTRIBUTES' placeholder, 8 the '{' of SET PROPOSITIONS)
        g = m.groups()
        t, n = g[2], g[4]
        if t is None or n is None:
            literals = True
            t, n = _slot(g[2], g[3]), _slot(g[4], g[5])
            if t is None or n is None:
                return None
        types.append(t)
        names.append(n)
        attributes.append(g[7])
        at = m.end()
        if g[8] is not None:
            last = None
            for last in iter(scanner(text, at).match, None):
                # (2/3 the predicate, 5/6 the target's type, 7/8 its name, 10 metadata)
                lg = last.groups()
                p, t, n = lg[2], lg[5], lg[7]
                if p is None or t is None or n is None:
                    literals = True
                    p, t, n = _slot(lg[2], lg[3]), _slot(lg[5], lg[6]), _slot(lg[7], lg[8])
                    if p is None or t is None or n is None:
                        return None
                predicates.append(p)
                target_types.append(t)
                target_names.append(n)
                link_metadata.append(lg[10])
            if last is not None:
                at = last.end()
            end = links_end(text, at)
            if end is None:
                return None
            at = end.end()
        mm = block_meta(text, at)
        if mm is not None:
            metadata.append(mm.group(2))
            at = mm.end()
        else:
            metadata.append(None)
        ends.append(len(predicates))
        if out_of_time(len(types), deadline):
            return None
    if not types or _END.match(text, at) is None:
        return None
    params: set[Any] = set(types)
    params.update(names, predicates, target_types, target_names, attributes, metadata,
                  link_metadata)
    params.discard(None)
    if literals:
        params = {p for p in params if type(p) is str}
    columns = A.UpsertColumns(tuple(types), tuple(names), tuple(attributes), tuple(metadata),
                              tuple(ends), tuple(predicates), tuple(target_types),
                              tuple(target_names), tuple(link_metadata))
    offset = start.start(1)
    line = text.count("\n", 0, offset)
    pos = _pos(line, offset - (text.rfind("\n", 0, offset) + 1) + 1)
    return (A.ColumnUpsert(columns, pos, partial(_statements, text, max_nesting)),
            frozenset(params))


def _slot(name: str | None, raw: str | None) -> A.Slot | None:
    """The slot of an `_S` value: its placeholder's name, or its string as a 1-tuple
    (None when the grammar would refuse the string)."""
    if name is not None:
        return name
    assert raw is not None
    return (raw,) if encodable(raw) else None


def _statements(text: str, max_nesting: int) -> tuple[A.UpsertStatement, ...]:
    """The AST of a text `clause_columns` read (the clause reader takes what it took)."""
    read = clause_upsert(text, max_nesting)
    if read is None:        # (cannot happen: the same matches; a KIP error, not a crash)
        raise KipError(ErrorCode.KIP_4003, "the UPSERT read as columns could not be read "
                       "as a tree", "Report this command: it is a defect of the parser.")
    return read[0].statements
