"""A fast path for the parser: UPSERT commands read by hand, or declined.

Big UPSERT commands (loaders, importers, an agent writing many links at once) are the
commands whose text changes every time and is too long for the parse cache, and the LALR
parser, its tree and the transformer cost about 1 ms per link on them. `fast_upsert(text)`
reads the common shape of such a command — UPSERT statements of CONCEPT and PROPOSITION
blocks, SET ATTRIBUTES, SET PROPOSITIONS, WITH METADATA, EXPECT VERSION, JSON values and
`:name` placeholders — with one regex tokenizer and recursive descent, and returns exactly
the AST the grammar and the transformer build (positions included).

It never reports an error: anything it does not fully recognise, or that the transformer
would refuse (a duplicate key, a bad identifier, a value of the wrong kind, too deep a
nesting, ...), makes it return None, and the caller hands the text to the LALR parser, which
stays the only source of syntax errors, messages, positions and hints. Where the grammar is
subtle it declines rather than guesses. Anything else than UPSERT is declined at once.
tests/syntax/test_fastparse.py checks it against the LALR parser on the test corpora, the
spec, the bundled capsules and random texts (equal AST or decline).
"""
from __future__ import annotations

import json
import math
import re
from itertools import accumulate, repeat
from operator import add
from . import ast as A
from .fastclause import (BLANKS, Lines, clause_columns, clause_upsert, encodable,
                         out_of_time)
from .transform_common import IDENTIFIER

# One token per match, after the blanks and comments before it (WS and COMMENT, ignored by
# the grammar). The token patterns are the grammar's own (nexus/grammar/kip.lark): STRING,
# NUMBER, VAR, PARAM and IDENT (`\w+`, which also covers the keywords and true/false/null);
# any other character is a token of its own (punctuation, or one the grammar has none for).
# A ':' before a digit is not taken for a placeholder: `{a:1}` is a key, ':' and a number (a
# placeholder's name never starts with a digit: the LALR parser refuses `:1` where a value
# goes, and so do we). The prefix is taken whole (fastclause.BLANKS): a blank or a comment
# is never re-read.
_TOKEN = re.compile(r"""
    (""" + BLANKS + r""")
    (
      [{}()\[\],;]
    | :(?![0-9])\w+
    | -?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?
    | \w+
    | "[^"\\\n\r]*(?:\\[^\n\r][^"\\\n\r]*)*"
    | \?\w+(?:\.\w+)*
    | [^ \t\f\r\n]
    )""", re.VERBOSE)
# Appended to the text so that the last match is this token, never a failed one (findall
# would retry inside the blanks and comments the failed match skipped). A NUL in the text is
# a character the grammar has no token for: kind "x".
_END = "\x00"
# A token's kind: a one-character token by itself (ASCII; punctuation is its own kind), a
# longer one by its first character; _kind looks at the rest ("x": no token of the grammar).
_ONE = {c: "w" for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_"}
_ONE.update({c: "n" for c in "0123456789"})
_ONE.update({c: c for c in "{}()[],;:"})
_MULTI = dict(_ONE)
_MULTI.update({c: "n" for c in "-0123456789"})
_MULTI.update({'"': "s", "?": "v", ":": "p"})
_DEPTH = {"{": 1, "(": 1, "[": 1, "}": -1, ")": -1, "]": -1}
_WORD = re.compile(r"\w")


def _kind(tok: str) -> str:
    r"""Non-ASCII words (IDENT is `\w+`: the parser declines them where it checks an
    identifier) and characters the grammar has no token for."""
    return "w" if _WORD.match(tok) else "x"


# The text must start (after blanks and comments) with the word UPSERT; else decline now.
_UPSERT_START = re.compile(BLANKS + r"UPSERT(?!\w)")

_CONCEPT_FIELDS = frozenset(("id", "type", "name"))
_WORD_LITERALS = {"true": True, "false": False, "null": None}


class _Decline(Exception):
    """Not recognised here: the LALR parser reads this text."""


_DECLINE = _Decline()


# Texts past this size go to the LALR parser: tokenizing is one C call that cannot look at
# the deadline (~0.25 µs a character here), so this bounds how far it can overshoot; the big
# UPSERTs of a KIP load are ~100k characters.
MAX_CHARS = 1 << 20


def fast_upsert(text: str, max_nesting: int, deadline: float | None = None
                ) -> tuple[A.Upsert, frozenset[str]] | None:
    """The AST of an UPSERT command and its placeholder names, or None (declined)."""
    if len(text) > MAX_CHARS or not _UPSERT_START.match(text):
        return None
    # The loader's shape, a match per block or link, read as columns (an ast.ColumnUpsert,
    # its tree built when asked for) or, if not, as a tree (nexus/syntax/fastclause.py);
    # any other text token by token.
    columns = clause_columns(text, max_nesting, deadline)
    if columns is not None:
        return columns
    read = clause_upsert(text, max_nesting, deadline)
    if read is not None:
        return read
    try:
        tokens = _tokenize(text, max_nesting)
        if tokens is None:
            return None
        return _Reader(text, *tokens, deadline).command()
    except _Decline:
        return None


def _tokenize(text: str, max_nesting: int
              ) -> tuple[list[str], list[str], list[int]] | None:
    """Token kinds (a punctuation character is its own kind; "$" ends the list), texts and
    end offsets; None when brackets nest deeper than the parser's budget allows (the LALR
    parser reports it). Runs in C but for a dict lookup per token."""
    blanks, tokens = zip(*_TOKEN.findall(text + _END))
    texts = list(tokens)
    texts[-1] = ""
    one, multi = _ONE.get, _MULTI.get
    kinds = [(multi(t[0]) if len(t) > 1 else one(t)) or _kind(t) for t in texts[:-1]]
    kinds.append("$")
    if max(accumulate(map(_DEPTH.get, kinds, repeat(0))), default=0) > max_nesting:
        return None
    ends = list(accumulate(map(add, map(len, blanks), map(len, texts))))
    return kinds, texts, ends


def _string(raw: str) -> str:
    """A STRING token → str, as transform_common.decode_string; declines where it fails."""
    if "\\" in raw:
        try:
            value: str = json.loads(raw, strict=False)
        except ValueError:
            raise _DECLINE from None
    else:
        value = raw[1:-1]
    if not encodable(value):
        raise _DECLINE
    return value


def _number(raw: str) -> int | float:
    """A NUMBER token → int or float, as transform_common.decode_number; declines where it
    fails (out of range, too many digits)."""
    if "." in raw or "e" in raw or "E" in raw:
        value = float(raw)
        if math.isinf(value):
            raise _DECLINE
        return value
    try:
        return int(raw)
    except ValueError:
        raise _DECLINE from None


def _identifier(name: str) -> str:
    if not IDENTIFIER.match(name):
        raise _DECLINE
    return name


class _Reader:
    """Recursive descent over the token lists; `i` is the next token. Each method reads one
    grammar rule and builds what the transformer builds for it."""

    def __init__(self, text: str, kinds: list[str], texts: list[str], ends: list[int],
                 deadline: float | None) -> None:
        self.kinds = kinds
        self.texts = texts
        self.ends = ends
        self.i = 0
        self.deadline = deadline
        self.params: set[str] = set()
        self.lines = Lines(text)

    # --- tokens and positions --------------------------------------------------------------
    def pos(self, index: int) -> A.Pos:
        """Line and column of token `index`, counted as the LALR lexer counts them (lines
        split on \\n, columns in characters, both from 1)."""
        return self.lines.pos(self.ends[index] - len(self.texts[index]))

    def item_closes(self, close: str) -> bool:
        """After an item of a `{…}` or `[…]` list: True at its `close` (a trailing comma
        allowed, as the grammar does), False after the comma before the next item; anything
        else declines. Leaves `i` on the `close` or on the next item."""
        kinds = self.kinds
        if kinds[self.i] == ",":
            self.i += 1
            return kinds[self.i] == close
        if kinds[self.i] == close:
            return True
        raise _DECLINE

    def expect(self, kind: str) -> int:
        i = self.i
        if self.kinds[i] != kind:
            raise _DECLINE
        self.i = i + 1
        return i

    def word(self, word: str) -> int:
        i = self.i
        if self.kinds[i] != "w" or self.texts[i] != word:
            raise _DECLINE
        self.i = i + 1
        return i

    def colon(self) -> None:
        """The ':' after a key. `{a:true}` is lexed here as the placeholder `:true`; the LALR
        lexer, which expects only ':' there, reads ':' then the value `true` (or false, null;
        any other word there is an error: declined)."""
        i = self.i
        kind = self.kinds[i]
        if kind == ":":
            self.i = i + 1
            return
        if kind != "p" or self.texts[i][1:] not in _WORD_LITERALS:
            raise _DECLINE
        self.kinds[i] = "w"
        self.texts[i] = self.texts[i][1:]

    def at_word(self, word: str) -> bool:
        return self.kinds[self.i] == "w" and self.texts[self.i] == word

    def param(self, index: int, expect: str) -> A.Param:
        name = _identifier(self.texts[index][1:])
        self.params.add(name)
        return A.Param(name, expect, self.pos(index))

    def plain_var(self, index: int) -> str:
        return _identifier(self.texts[index][1:])   # a dot path has a '.': declined here

    # --- statements ------------------------------------------------------------------------
    def command(self) -> tuple[A.Upsert, frozenset[str]]:
        statements = [self.statement()]
        while self.at_word("UPSERT"):
            statements.append(self.statement())
        while self.kinds[self.i] == ";":
            self.i += 1
        if self.kinds[self.i] != "$":
            raise _DECLINE
        return A.Upsert(tuple(statements), self.pos(0)), frozenset(self.params)

    def statement(self) -> A.UpsertStatement:
        start = self.word("UPSERT")
        self.expect("{")
        blocks: list[A.UpsertBlock] = []
        kinds, texts = self.kinds, self.texts
        while kinds[self.i] == "w":
            word = texts[self.i]
            if word == "CONCEPT":
                blocks.append(self.concept_block())
            elif word == "PROPOSITION":
                blocks.append(self.proposition_block())
            else:
                raise _DECLINE
            if out_of_time(len(blocks), self.deadline):
                raise _DECLINE
        self.expect("}")
        return A.UpsertStatement(tuple(blocks), self.metadata(), self.pos(start))

    def metadata(self) -> A.Value | None:
        """An optional `WITH METADATA map`."""
        if not self.at_word("WITH"):
            return None
        self.i += 1
        self.word("METADATA")
        return self.map_value()

    def handle(self) -> str | None:
        if self.kinds[self.i] != "v":
            return None
        self.i += 1
        return self.plain_var(self.i - 1)

    def expect_version(self) -> A.Value | None:
        if not self.at_word("EXPECT"):
            return None
        self.i += 1
        self.word("VERSION")
        i = self.i
        self.i += 1
        if self.kinds[i] == "p":
            return self.param(i, A.EXPECT_VERSION)
        if self.kinds[i] != "n":
            raise _DECLINE
        value = _number(self.texts[i])
        if not isinstance(value, int) or value < 0:
            raise _DECLINE
        return A.Literal(value, self.pos(i))

    def concept_block(self) -> A.ConceptBlock:
        start = self.i
        self.i += 1                                  # CONCEPT
        handle = self.handle()
        self.expect("{")
        match = self.concept_match()
        expect = self.expect_version()
        attributes: A.Value | None = None
        propositions: tuple[A.SetProposition, ...] | None = None
        while self.at_word("SET"):
            self.i += 1
            if self.at_word("ATTRIBUTES") and attributes is None:
                self.i += 1
                attributes = self.map_value()
            elif self.at_word("PROPOSITIONS") and propositions is None:
                self.i += 1
                propositions = self.set_propositions()
            else:
                raise _DECLINE
        self.expect("}")
        metadata = self.metadata()
        return A.ConceptBlock(handle, match, attributes, propositions, metadata,
                              self.pos(start), expect)

    def proposition_block(self) -> A.PropositionBlock:
        start = self.i
        self.i += 1                                  # PROPOSITION
        handle = self.handle()
        self.expect("{")
        match = self.proposition_match()
        expect = self.expect_version()
        attributes: A.Value | None = None
        if self.at_word("SET"):
            self.i += 1
            self.word("ATTRIBUTES")
            attributes = self.map_value()
        self.expect("}")
        metadata = self.metadata()
        return A.PropositionBlock(handle, match, attributes, metadata, self.pos(start), expect)

    def set_propositions(self) -> tuple[A.SetProposition, ...]:
        self.expect("{")
        out: list[A.SetProposition] = []
        kinds = self.kinds
        while kinds[self.i] == "(":
            out.append(self.set_proposition())
            if kinds[self.i] == ",":
                self.i += 1
        self.expect("}")
        return tuple(out)

    def set_proposition(self) -> A.SetProposition:
        start = self.i
        self.i += 1                                  # (
        predicate = self.string_slot()
        self.expect(",")
        target = self.term()
        self.expect(")")
        return A.SetProposition(predicate, target, self.metadata(), self.pos(start))

    # --- clauses ---------------------------------------------------------------------------
    def string_slot(self) -> A.Value:
        """A STRING or a placeholder where a string is needed (type, name, id, predicate);
        anything else there is an error or another shape: declined."""
        i = self.i
        kind = self.kinds[i]
        self.i = i + 1
        if kind == "s":
            return A.Literal(_string(self.texts[i]), self.pos(i))
        if kind == "p":
            return self.param(i, A.EXPECT_STRING)
        raise _DECLINE

    def concept_match(self) -> A.ConceptMatch:
        """`{type: ..., name: ...}` or `{id: ...}`, complete (KML names one concept)."""
        start = self.expect("{")
        fields: dict[str, A.Value] = {}
        while True:
            key = self.key()
            if key not in _CONCEPT_FIELDS or key in fields:
                raise _DECLINE
            self.colon()
            fields[key] = self.string_slot()
            if self.item_closes("}"):
                break
        self.i += 1
        concept_id = fields.get("id")
        if concept_id is not None:
            if len(fields) != 1:
                raise _DECLINE
        elif len(fields) != 2:
            raise _DECLINE
        return A.ConceptMatch(concept_id, fields.get("type"), fields.get("name"),
                              self.pos(start))

    def proposition_match(self) -> A.PropositionMatch | A.PropositionIdMatch:
        start = self.expect("(")
        if self.at_word("id"):
            self.i += 1
            self.colon()
            value = self.string_slot()
            self.expect(")")
            return A.PropositionIdMatch(value, self.pos(start))
        first = self.i
        subject = self.term()
        self.expect(",")
        at = self.i
        predicate = A.Predicate((self.string_slot(),), None, self.pos(at))
        self.expect(",")
        obj = self.term()
        self.expect(")")
        return A.PropositionMatch(subject, predicate, obj, self.pos(first))

    def term(self) -> A.Term:
        kind = self.kinds[self.i]
        if kind == "v":
            self.i += 1
            return A.VarTerm(self.plain_var(self.i - 1), self.pos(self.i - 1))
        if kind == "{":
            return self.concept_match()
        if kind == "(":
            return self.proposition_match()
        raise _DECLINE

    def key(self) -> str:
        """An object key: a JSON string or a bare identifier."""
        i = self.i
        kind = self.kinds[i]
        self.i = i + 1
        if kind == "w":
            return _identifier(self.texts[i])
        if kind == "s":
            return _string(self.texts[i])
        raise _DECLINE

    # --- values ----------------------------------------------------------------------------
    def map_value(self) -> A.Value:
        """An attribute or metadata map: `{...}` with identifier keys, or a placeholder."""
        i = self.i
        kind = self.kinds[i]
        if kind == "p":
            self.i = i + 1
            return self.param(i, A.EXPECT_OBJECT)
        if kind == "{":
            return self.object(True)
        raise _DECLINE

    def object(self, identifier_keys: bool) -> A.Value:
        """`{k: v, ...}`: a Literal dict, or an ObjectValue when a placeholder is inside."""
        start = self.i
        self.i += 1
        entries: list[tuple[str, A.Value]] = []
        seen: set[str] = set()
        kinds = self.kinds
        if kinds[self.i] != "}":
            while True:
                key = self.key()
                if key in seen or (identifier_keys and not IDENTIFIER.match(key)):
                    raise _DECLINE
                seen.add(key)
                self.colon()
                entries.append((key, self.value()))
                if self.item_closes("}"):
                    break
        self.i += 1
        if all(type(v) is A.Literal for _, v in entries):
            return A.Literal({k: v.value for k, v in entries},  # type: ignore[union-attr]
                             self.pos(start))
        return A.ObjectValue(tuple(entries), self.pos(start))

    def array(self) -> A.Value:
        start = self.i
        self.i += 1
        items: list[A.Value] = []
        kinds = self.kinds
        if kinds[self.i] != "]":
            while True:
                items.append(self.value())
                if self.item_closes("]"):
                    break
        self.i += 1
        if all(type(v) is A.Literal for v in items):
            return A.Literal([v.value for v in items], self.pos(start))  # type: ignore[union-attr]
        return A.ArrayValue(tuple(items), self.pos(start))

    def value(self) -> A.Value:
        i = self.i
        kind = self.kinds[i]
        if kind == "s":
            self.i = i + 1
            return A.Literal(_string(self.texts[i]), self.pos(i))
        if kind == "p":
            self.i = i + 1
            return self.param(i, A.EXPECT_ANY)
        if kind == "n":
            self.i = i + 1
            return A.Literal(_number(self.texts[i]), self.pos(i))
        if kind == "{":
            return self.object(False)
        if kind == "[":
            return self.array()
        if kind == "w" and self.texts[i] in _WORD_LITERALS:
            self.i = i + 1
            return A.Literal(_WORD_LITERALS[self.texts[i]], self.pos(i))
        raise _DECLINE
