"""The building blocks of the transformer (nexus/syntax/transformer.py and its statement
rules, nexus/syntax/transform_statements.py): what a rule method receives, positions, errors
carrying them (`PositionedError`, raised by `fail`), identifiers (spec §2.8.1, `KIP_1002`),
JSON literals, and value positions typed by `A.EXPECT_*` (a literal is checked here, a
`:name` placeholder carries the expectation to bind()).
"""
from __future__ import annotations

import json
import math
import re
from typing import Any, Union

from lark import Token
from lark.tree import Meta

from ..errors import ErrorCode, KipError
from . import ast as A

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


# What a transformer method receives: the children Lark built for the rule, already
# transformed (AST nodes, tokens, the tagged tuples below). Their types are fixed by the
# grammar, not by Python, so each method states what it unpacks where it unpacks it.
Children = list[Any]
# A clause on its way to the node that owns it: (tag, value, where it was written).
Tagged = tuple[str, Any, Meta]
# An object entry: (key, value, the key's token) — the token positions a duplicate key.
Entry = tuple[str, A.Value, Token]
Hops = tuple[int, Union[int, None]]
# Anything an error can point at.
Where = Union[A.Pos, Token, Meta, None]



class PositionedError(Exception):
    """A KipError raised inside the transformer; parse() attaches the text snippet."""

    def __init__(self, error: KipError) -> None:
        super().__init__(error.message)
        self.error = error


def fail(where: Where, message: str, hint: str | None = None,
         code: ErrorCode = ErrorCode.KIP_1001) -> PositionedError:
    line, column = _line_col(where)
    return PositionedError(KipError(code, message, hint, line=line, column=column))


def _line_col(where: Where) -> tuple[int | None, int | None]:
    if isinstance(where, (A.Pos, Token)):
        return where.line, where.column
    if where is not None and not getattr(where, "empty", True):
        return where.line, where.column
    return None, None


def meta_pos(meta: Meta | None) -> A.Pos | None:
    if meta is None or getattr(meta, "empty", True):
        return None
    return A.Pos(meta.line, meta.column)


def token_pos(tok: Token) -> A.Pos | None:
    # The lexer positions every token it makes (a token without a line is not ours).
    if tok.line is None or tok.column is None:
        return None
    return A.Pos(tok.line, tok.column)


def check_identifier(text: str, where: Where, what: str) -> str:
    if not IDENTIFIER.match(text):
        raise fail(
            where,
            f"Invalid identifier '{text}' in {what}: identifiers must start with a letter or "
            f"underscore, followed by letters, digits or underscores.",
            "Identifiers must match regex [a-zA-Z_][a-zA-Z0-9_]* (e.g. ?side_effect, "
            "risk_level).",
            code=ErrorCode.KIP_1002,
        )
    return text


def safe_text(text: str) -> str:
    """`text` made safe to put in an error message: lone surrogates (which no JSON encoder
    can write) become U+FFFD."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def decode_string(tok: Token) -> str:
    """A JSON string token → str; invalid escapes and lone surrogates are syntax errors."""
    raw = str(tok)
    try:
        text: str = json.loads(raw, strict=False)
    except ValueError as exc:
        raise fail(tok, f"Invalid string literal {safe_text(_clip(raw))}: "
                   f"{exc.args[0].split(':')[0]}",
                   "Strings are JSON strings: escape quotes and backslashes as \\\" and "
                   "\\\\, unicode as \\uXXXX.") from None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise fail(tok, "Invalid string literal: it contains an unpaired surrogate escape",
                   "Encode characters outside the BMP as a \\uD8xx\\uDCxx pair, or write "
                   "them directly.") from None
    return text


def decode_number(tok: Token) -> int | float:
    """A JSON number token → int (no '.', 'e' or 'E') or float, as JSON writes them."""
    raw = str(tok)
    if any(c in raw for c in ".eE"):
        value = float(raw)
        if math.isinf(value):
            raise fail(tok, f"Number {_clip(raw)} is out of range", "Use a finite number.")
        return value
    try:
        return int(raw)
    except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
        raise fail(tok, f"Number {_clip(raw)} has too many digits ({len(raw)})",
                   "Write a number of at most a few hundred digits, or pass it as a "
                   "string.") from None


def _clip(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[:width] + "..."


def check_expect(value: Any, expect: str, where: Where, what: str) -> None:
    """Raise KIP_1001 unless a literal `value` suits a position that needs `expect`."""
    ok = A.suits(expect, value)
    if ok and expect == A.EXPECT_KEY:
        check_identifier(value, where, what)
    if not ok:
        raise fail(where, f"{what} must be {A.article(expect)}, got "
                   f"{_clip(json.dumps(value, ensure_ascii=False), 60)}",
                   _EXPECT_HINT.get(expect))


_EXPECT_HINT = {
    A.EXPECT_POSITIVE_INT: "LIMIT takes an integer of at least 1.",
    A.EXPECT_STRING: "Write a JSON string here, e.g. \"Drug\".",
    A.EXPECT_OBJECT: "Write a JSON object here, e.g. { key: \"value\" }.",
    A.EXPECT_ARRAY: "Write a JSON array here, e.g. [\"a\", \"b\"].",
    A.EXPECT_KEY: "Name the key as a JSON string, e.g. {\"old_id\"}.",
    A.EXPECT_PRIMITIVE: "FILTER compares strings, numbers, booleans and null; use "
                        "IN(?x, [...]) to test membership in a list.",
}


def slot(value: A.Value, expect: str, what: str) -> A.Value:
    """Constrain a value position: literals are checked now, placeholders at bind()."""
    if isinstance(value, A.Param):
        return A.Param(value.name, expect, value.pos)
    if isinstance(value, A.Literal):
        check_expect(value.value, expect, value.pos, what)
        return value
    kind_ok = {
        A.EXPECT_ANY: True,
        A.EXPECT_OBJECT: isinstance(value, A.ObjectValue),
        A.EXPECT_ARRAY: isinstance(value, A.ArrayValue),
    }.get(expect, False)
    if not kind_ok:
        raise fail(value.pos, f"{what} must be {A.article(expect)}", _EXPECT_HINT.get(expect))
    return value


def token_value(tok: Token, expect: str, what: str) -> A.Value:
    """A raw STRING / NUMBER / PARAM token in a constrained position → Value."""
    if tok.type == "PARAM":
        return A.Param(param_name(tok), expect, token_pos(tok))
    if tok.type == "STRING":
        lit = A.Literal(decode_string(tok), token_pos(tok))
    else:
        lit = A.Literal(decode_number(tok), token_pos(tok))
    return slot(lit, expect, what)


def param_name(tok: Token) -> str:
    return check_identifier(str(tok)[1:], tok, "parameter name")


def split_var(tok: Token) -> tuple[str, tuple[str, ...]]:
    """`?drug.attributes.risk_level` → ("drug", ("attributes", "risk_level"))."""
    parts = str(tok)[1:].split(".")
    check_identifier(parts[0], tok, "variable name")
    for seg in parts[1:]:
        check_identifier(seg, tok, f"dot path {tok}")
    return parts[0], tuple(parts[1:])




def entry_key(tok: Token, what: str) -> str:
    """An object or clause key: a JSON string (as written) or a bare identifier."""
    if tok.type == "STRING":
        return decode_string(tok)
    return check_identifier(str(tok), tok, what)
