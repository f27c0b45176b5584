"""Reshape Lark parse results into AST nodes — one method per grammar rule.

The transformer decides no semantics beyond what the grammar cannot say: it decodes JSON
literals, checks identifiers against spec §2.8.1 (`KIP_1002`), and enforces the shape rules
of each clause (which keys a concept clause may have, hop ranges, LIMIT ≥ 1, where JSON
arrays may appear in FILTER, no key twice in an object...) so that such mistakes are reported
with their position as `KIP_1001`, the same way a grammar error is. Value positions are typed
(`A.EXPECT_*`): a literal is checked here, a `:name` placeholder carries the expectation to
bind(), so both give the same error. It runs over the finished parse tree (Lark cannot pass
positions to a transformer inlined in the LALR parser) but works rule by rule: a method never
looks outside the node it builds.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any, Union

from lark import Token, Transformer, v_args
from lark.tree import Meta

from ..errors import ErrorCode, KipError
from . import ast as A

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

CONCEPT_FIELDS = ("id", "type", "name")
LINK_FIELDS = ("id", "subject", "predicate", "object")
MAP_FIELDS = ("attributes", "metadata")
PATH_FIELDS = frozenset(("id", "type", "name", "subject", "predicate", "object") + MAP_FIELDS)

FUNCTION_ARITY = {
    "IN": (2, 2),
    "IS_NULL": (1, 1),
    "IS_NOT_NULL": (1, 1),
    "CONTAINS": (2, 2),
    "STARTS_WITH": (2, 2),
    "ENDS_WITH": (2, 2),
    "REGEX": (2, 3),
}


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


def _pos(meta: Meta | None) -> A.Pos | None:
    if meta is None or getattr(meta, "empty", True):
        return None
    return A.Pos(meta.line, meta.column)


def _tpos(tok: Token) -> A.Pos | None:
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
    ok = True
    if expect == A.EXPECT_STRING:
        ok = isinstance(value, str)
    elif expect == A.EXPECT_OBJECT:
        ok = isinstance(value, dict)
    elif expect == A.EXPECT_ARRAY:
        ok = isinstance(value, list)
    elif expect == A.EXPECT_POSITIVE_INT:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    elif expect == A.EXPECT_VERSION:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    elif expect == A.EXPECT_PRIMITIVE:
        ok = not isinstance(value, (list, dict))
    elif expect == A.EXPECT_KEY:
        ok = isinstance(value, str)
        if ok:
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
        return A.Param(param_name(tok), expect, _tpos(tok))
    if tok.type == "STRING":
        lit = A.Literal(decode_string(tok), _tpos(tok))
    else:
        lit = A.Literal(decode_number(tok), _tpos(tok))
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


@v_args(meta=True)
class KipTransformer(Transformer[Token, A.Command]):
    """Lark rule name → AST node. Methods receive (meta, children)."""

    # --- top level ------------------------------------------------------------------------
    def start(self, meta: Meta, children: Children) -> A.Command:
        command: A.Command = children[0]
        return command

    # --- KQL ------------------------------------------------------------------------------
    def find_cmd(self, meta: Meta, children: Children) -> A.Find:
        items: tuple[A.FindItem, ...] = children[0]
        where: tuple[A.Pattern, ...] = children[1]
        mods: list[Tagged] = children[2:]
        order_by: tuple[A.OrderKey, ...] = ()
        limit: A.Value | None = None
        cursor: A.Value | None = None
        as_of: A.AsOf | None = None
        seen: set[str] = set()
        for tag, value, where_ in mods:
            if tag in seen:
                raise fail(where_, f"{tag.replace('_', ' ').upper()} is given twice",
                           "Give each of ORDER BY, LIMIT, CURSOR and AS OF at most once.")
            seen.add(tag)
            if tag == "order_by":
                order_by = value
            elif tag == "limit":
                limit = value
            elif tag == "as_of":
                as_of = value
            else:
                cursor = value
        return A.Find(items, where, order_by, limit, cursor, _pos(meta), as_of)

    def explain_cmd(self, meta: Meta, children: Children) -> A.Explain:
        query: A.Find = children[0]
        return A.Explain(query, _pos(meta))

    def find_items(self, meta: Meta, children: Children) -> tuple[A.FindItem, ...]:
        return tuple(children)

    def aggregate(self, meta: Meta, children: Children) -> A.Aggregate:
        func = str(children[0])
        distinct = len(children) == 3
        arg: A.Path = children[-1]
        if distinct and func != "COUNT":
            raise fail(children[1], f"DISTINCT is only allowed in COUNT, not in {func}",
                       "Write COUNT(DISTINCT ?var).")
        return A.Aggregate(func, distinct, arg, _pos(meta))

    def path(self, meta: Meta, children: Children) -> A.Path:
        tok: Token = children[0]
        var, segments = split_var(tok)
        if segments:
            head = segments[0]
            if head not in PATH_FIELDS:
                raise fail(tok, f"Unknown field '{head}' in {tok}",
                           f"Use ?{var}.id, .type, .name (concepts), .subject, .predicate, "
                           f".object (propositions), ?{var}.attributes.<key> or "
                           f"?{var}.metadata.<key>.")
            if head not in MAP_FIELDS and len(segments) > 1:
                raise fail(tok, f"Field '{head}' has no sub-fields in {tok}",
                           f"Only ?{var}.attributes.<key> and ?{var}.metadata.<key> go deeper.")
        return A.Path(var, segments, _tpos(tok))

    def order_by(self, meta: Meta, children: Children) -> Tagged:
        return ("order_by", tuple(children), meta)

    def order_key(self, meta: Meta, children: Children) -> A.OrderKey:
        expr: A.FindItem = children[0]
        descending = len(children) == 2 and str(children[1]) == "DESC"
        return A.OrderKey(expr, descending, _pos(meta))

    def limit(self, meta: Meta, children: Children) -> Tagged:
        return ("limit", token_value(children[0], A.EXPECT_POSITIVE_INT, "LIMIT"), meta)

    def cursor(self, meta: Meta, children: Children) -> Tagged:
        return ("cursor", token_value(children[0], A.EXPECT_STRING, "CURSOR"), meta)

    # --- version history (nexus extension) -------------------------------------------------
    def as_of_time(self, meta: Meta, children: Children) -> Tagged:
        point = token_value(children[0], A.EXPECT_STRING, "AS OF")
        return ("as_of", A.AsOf(point, False, _pos(meta)), meta)

    def as_of_version(self, meta: Meta, children: Children) -> Tagged:
        point = token_value(children[0], A.EXPECT_POSITIVE_INT, "AS OF VERSION")
        return ("as_of", A.AsOf(point, True, _pos(meta)), meta)

    def _element_ref(self, meta: Meta, children: Children, link: bool) -> A.ElementRef:
        key = children[0]
        if str(key) != "id":
            raise fail(meta, f"'{key}' in a history target: only id is accepted here",
                       'Name the element by its id: {id: "C:12"} or (id: "P:13:treats").')
        return A.ElementRef(token_value(children[1], A.EXPECT_STRING, "id"), link, _pos(meta))

    def concept_ref(self, meta: Meta, children: Children) -> A.ElementRef:
        return self._element_ref(meta, children, False)

    def link_ref(self, meta: Meta, children: Children) -> A.ElementRef:
        return self._element_ref(meta, children, True)

    def history_cmd(self, meta: Meta, children: Children) -> A.DescribeHistory:
        element: A.ElementRef | None = None
        rest = list(children)
        if rest and isinstance(rest[0], A.ElementRef):
            element = rest.pop(0)
        return A.DescribeHistory(element, *_pages(rest), pos=_pos(meta))

    def revert_reason(self, meta: Meta, children: Children) -> tuple[A.Value, bool]:
        return token_value(children[0], A.EXPECT_STRING, "REASON"), len(children) == 2

    def revert_cmd(self, meta: Meta, children: Children) -> A.Revert:
        reason, force = children[-1]
        if isinstance(children[0], A.ElementRef):
            version = token_value(children[1], A.EXPECT_POSITIVE_INT, "TO VERSION")
            return A.Revert(reason, element=children[0], version=version, force=force,
                            pos=_pos(meta))
        command = token_value(children[0], A.EXPECT_POSITIVE_INT, "REVERT COMMAND")
        return A.Revert(reason, command=command, force=force, pos=_pos(meta))

    def where_clause(self, meta: Meta, children: Children) -> tuple[A.Pattern, ...]:
        return tuple(children)

    def concept_pattern(self, meta: Meta, children: Children) -> A.ConceptPattern:
        var: str | None = None
        match: A.ConceptMatch = children[-1]
        if len(children) == 2:
            var, segments = split_var(children[0])
            if segments:
                raise fail(children[0], f"A clause binds a plain variable, not {children[0]}",
                           f"Write ?{var} {{...}} and use dot paths in FIND/FILTER.")
        return A.ConceptPattern(var, match, _pos(meta))

    def proposition_pattern(self, meta: Meta, children: Children) -> A.PropositionPattern:
        var: str | None = None
        match: A.PropositionMatch | A.PropositionIdMatch = children[-1]
        if len(children) == 2:
            var, segments = split_var(children[0])
            if segments:
                raise fail(children[0], f"A clause binds a plain variable, not {children[0]}",
                           f"Write ?{var} (...) and use dot paths in FIND/FILTER.")
        if var is not None and isinstance(match, A.PropositionMatch) \
                and isinstance(match.predicate, A.Predicate) and match.predicate.hops:
            raise fail(children[0], f"A path pattern cannot bind a link variable (?{var})",
                       "A {m,n} path may cross several links; drop the variable, or match "
                       "one hop to bind the link.")
        return A.PropositionPattern(var, match, _pos(meta))

    def not_pattern(self, meta: Meta, children: Children) -> A.NotPattern:
        return A.NotPattern(tuple(children), _pos(meta))

    def optional_pattern(self, meta: Meta, children: Children) -> A.OptionalPattern:
        return A.OptionalPattern(tuple(children), _pos(meta))

    def union_pattern(self, meta: Meta, children: Children) -> A.UnionPattern:
        return A.UnionPattern(tuple(children), _pos(meta))

    def concept_match(self, meta: Meta, children: Children) -> A.ConceptMatch:
        fields: dict[str, A.Value] = {}
        entries: list[tuple[str, A.Value, A.Pos | None]] = children
        for key, value, where in entries:
            if key not in CONCEPT_FIELDS:
                raise fail(where, f"Unknown key '{key}' in a concept clause: a concept clause "
                           f"takes only id, type and name",
                           "A concept clause is {id: \"C:...\"}, {type: \"T\"}, {name: \"n\"} "
                           "or {type: \"T\", name: \"n\"}; attributes are matched with "
                           "FILTER(?x.attributes.<key> == ...).")
            if key in fields:
                raise fail(where, f"Key '{key}' is given twice in a concept clause",
                           f"Give '{key}' once.")
            if fields and (key == "id" or "id" in fields):
                raise fail(where, f"A concept clause matches by id or by type/name, not both "
                           f"(found '{key}' together with "
                           f"'{'id' if key != 'id' else next(iter(fields))}')",
                           "Write {id: \"C:...\"} alone, or {type: \"T\", name: \"n\"}.")
            fields[key] = slot(value, A.EXPECT_STRING, f"'{key}' in a concept clause")
        return A.ConceptMatch(fields.get("id"), fields.get("type"), fields.get("name"),
                              _pos(meta))

    def match_entry(self, meta: Meta, children: Children
                    ) -> tuple[str, A.Value, A.Pos | None]:
        return (self._key(children[0], "concept clause key"), children[1], _pos(meta))

    def triple(self, meta: Meta, children: Children) -> A.PropositionMatch:
        subject: A.Term = children[0]
        predicate: A.Predicate | A.PredicateVar = children[1]
        obj: A.Term = children[2]
        return A.PropositionMatch(subject, predicate, obj, _pos(meta))

    def proposition_id(self, meta: Meta, children: Children) -> A.PropositionIdMatch:
        value = slot(children[1], A.EXPECT_STRING, "'id' in a proposition clause")
        return A.PropositionIdMatch(value, _pos(meta))

    def var_term(self, meta: Meta, children: Children) -> A.VarTerm:
        tok: Token = children[0]
        var, segments = split_var(tok)
        if segments:
            raise fail(tok, f"A subject or object is a variable, not a dot path ({tok})",
                       f"Write ?{var} here and use {tok} in FIND or FILTER.")
        return A.VarTerm(var, _tpos(tok))

    def predicate_alternatives(self, meta: Meta, children: Children
                               ) -> A.Predicate | A.PredicateVar:
        if len(children) == 1 and children[0].type == "VAR":
            return _predicate_var(children[0])
        for t in children:
            if t.type == "VAR":
                raise fail(t, f"A predicate variable cannot be one of several alternatives "
                           f"({t} among {len(children)})",
                           f"Alternatives are literal predicates (\"a\" | \"b\"). Bind "
                           f"{t} alone, (?s, {t}, ?o), and narrow it with "
                           f"FILTER(IN({t}, [\"a\", \"b\"])).")
        names = tuple(token_value(t, A.EXPECT_STRING, "a predicate") for t in children)
        return A.Predicate(names, None, _pos(meta))

    def predicate_path(self, meta: Meta, children: Children) -> A.Predicate:
        if children[0].type == "VAR":
            raise fail(children[0], f"A predicate variable cannot carry a path range "
                       f"({children[0]}{{...}})",
                       "Path ranges {m,n} apply to literal predicates only, e.g. "
                       "(?a, \"follows\"{1,3}, ?b); a predicate variable matches one hop.")
        name = token_value(children[0], A.EXPECT_STRING, "a predicate")
        hops: Hops = children[1]
        return A.Predicate((name,), hops, _pos(meta))

    def _hop(self, tok: Token) -> int:
        value = decode_number(tok)
        if not isinstance(value, int) or value < 0:
            raise fail(tok, f"Hop count {tok} must be a non-negative integer",
                       "Write a path range as {m,n}, {m,} or {n} with integers m ≤ n.")
        return value

    def hop_exact(self, meta: Meta, children: Children) -> Hops:
        n = self._hop(children[0])
        return (n, n)

    def hop_open(self, meta: Meta, children: Children) -> Hops:
        return (self._hop(children[0]), None)

    def hop_range(self, meta: Meta, children: Children) -> Hops:
        lo, hi = self._hop(children[0]), self._hop(children[1])
        if lo > hi:
            raise fail(children[0], f"Invalid path range {{{lo},{hi}}}: the minimum is "
                       f"greater than the maximum",
                       "Write a path range as {m,n} with m ≤ n, e.g. {1,5}.")
        return (lo, hi)

    def filter_pattern(self, meta: Meta, children: Children) -> A.FilterPattern:
        expr = _filter_operands(children[0])
        return A.FilterPattern(expr, _pos(meta))

    # --- FILTER expressions ---------------------------------------------------------------
    def or_op(self, meta: Meta, children: Children) -> A.BoolOp:
        return _bool("||", children, meta)

    def and_op(self, meta: Meta, children: Children) -> A.BoolOp:
        return _bool("&&", children, meta)

    def not_op(self, meta: Meta, children: Children) -> A.NotOp:
        operand: A.Expr = children[0]
        return A.NotOp(operand, _pos(meta))

    def compare(self, meta: Meta, children: Children) -> A.Compare:
        left: A.Expr = children[0]
        right: A.Expr = children[2]
        return A.Compare(str(children[1]), left, right, _pos(meta))

    def call(self, meta: Meta, children: Children) -> A.Call:
        func_tok: Token = children[0]
        func = str(func_tok)
        args: tuple[A.Expr, ...] = tuple(a for a in children[1:] if a is not None)
        lo, hi = FUNCTION_ARITY[func]
        if not lo <= len(args) <= hi:
            want = str(lo) if lo == hi else f"{lo} or {hi}"
            raise fail(func_tok, f"{func} takes {want} argument(s), got {len(args)}",
                       _CALL_HINT[func])
        if func == "IN":
            needle, haystack = args
            if isinstance(haystack, A.Param):
                haystack = A.Param(haystack.name, A.EXPECT_ARRAY, haystack.pos)
            elif not isinstance(haystack, (A.ArrayValue, A.Literal)) or (
                    isinstance(haystack, A.Literal) and not isinstance(haystack.value, list)):
                raise fail(func_tok, "IN needs a list of values as its second argument",
                           _CALL_HINT["IN"])
            args = (needle, haystack)
        return A.Call(func, args, _pos(meta))

    def param(self, meta: Meta, children: Children) -> A.Param:
        tok: Token = children[0]
        return A.Param(param_name(tok), A.EXPECT_ANY, _tpos(tok))

    # --- KML ------------------------------------------------------------------------------
    def upsert_cmd(self, meta: Meta, children: Children) -> A.Upsert:
        return A.Upsert(tuple(children), _pos(meta))

    def upsert_statement(self, meta: Meta, children: Children) -> A.UpsertStatement:
        blocks, metadata = _split_metadata(children)
        upsert_blocks: tuple[A.UpsertBlock, ...] = tuple(blocks)
        return A.UpsertStatement(upsert_blocks, metadata, _pos(meta))

    def concept_block(self, meta: Meta, children: Children) -> A.ConceptBlock:
        handle, rest = _handle(children)
        match: A.ConceptMatch = rest[0]
        expect, rest = _expect(rest)
        clauses, metadata = _split_metadata(rest[1:])
        if match.id is None and (match.type is None or match.name is None):
            raise fail(match.pos, "A CONCEPT block identifies its concept by "
                       "{type: ..., name: ...} or by {id: ...}",
                       "Write {type: \"Drug\", name: \"Aspirin\"} (match or create) or "
                       "{id: \"C:12\"} (match only).")
        attributes: A.Value | None = None
        propositions: tuple[A.SetProposition, ...] | None = None
        tagged: list[Tagged] = clauses
        for tag, value, where in tagged:
            if tag == "attributes":
                if attributes is not None:
                    raise fail(where, "SET ATTRIBUTES is given twice in one CONCEPT block")
                attributes = value
            else:
                if propositions is not None:
                    raise fail(where, "SET PROPOSITIONS is given twice in one CONCEPT block")
                propositions = value
        return A.ConceptBlock(handle, match, attributes, propositions, metadata, _pos(meta),
                              expect)

    def proposition_block(self, meta: Meta, children: Children) -> A.PropositionBlock:
        handle, rest = _handle(children)
        match: A.PropositionMatch | A.PropositionIdMatch = rest[0]
        expect, rest = _expect(rest)
        clauses, metadata = _split_metadata(rest[1:])
        _check_kml_term(match)
        attributes: A.Value | None = None
        tagged: list[Tagged] = clauses
        for tag, value, where in tagged:
            if tag != "attributes":
                raise fail(where, "SET PROPOSITIONS belongs in a CONCEPT block",
                           "A PROPOSITION block takes SET ATTRIBUTES and WITH METADATA.")
            if attributes is not None:
                raise fail(where, "SET ATTRIBUTES is given twice in one PROPOSITION block")
            attributes = value
        return A.PropositionBlock(handle, match, attributes, metadata, _pos(meta), expect)

    def expect_version(self, meta: Meta, children: Children) -> Tagged:
        return ("expect", token_value(children[0], A.EXPECT_VERSION, "EXPECT VERSION"), meta)

    def set_attributes(self, meta: Meta, children: Children) -> Tagged:
        return ("attributes", _map_slot(children[0], "SET ATTRIBUTES"), meta)

    def set_propositions(self, meta: Meta, children: Children) -> Tagged:
        return ("propositions", tuple(children), meta)

    def set_proposition(self, meta: Meta, children: Children) -> A.SetProposition:
        predicate = token_value(children[0], A.EXPECT_STRING, "a predicate")
        target = _check_kml_term(children[1])
        children, metadata = _split_metadata(children)
        return A.SetProposition(predicate, target, metadata, _pos(meta))

    def with_metadata(self, meta: Meta, children: Children) -> _MetadataMark:
        return _MetadataMark(_map_slot(children[0], "WITH METADATA"))

    # --- UPDATE (RC11 §4.3) ---------------------------------------------------------------
    def update_cmd(self, meta: Meta, children: Children) -> A.Update:
        target = _plain_var(children[0])
        attributes: tuple[A.UpdateEntry, ...] | None = None
        metadata: tuple[A.UpdateEntry, ...] | None = None
        rest = list(children[1:])
        limit: A.Value | None = None
        if rest and isinstance(rest[-1], tuple) and rest[-1] and rest[-1][0] == "limit":
            limit = rest.pop()[1]
        where: tuple[A.Pattern, ...] = rest.pop()
        for tag, entries, where_ in rest:
            if tag == "attributes":
                if attributes is not None:
                    raise fail(where_, "SET ATTRIBUTES is given twice in one UPDATE")
                attributes = entries
            else:
                if metadata is not None:
                    raise fail(where_, "SET METADATA is given twice in one UPDATE")
                metadata = entries
        for entry in (attributes or ()) + (metadata or ()):
            _check_update_paths(entry.value, target)
        return A.Update(target, attributes, metadata, where, limit, _pos(meta))

    def update_attributes(self, meta: Meta, children: Children) -> Tagged:
        return ("attributes", children[0], meta)

    def update_metadata(self, meta: Meta, children: Children) -> Tagged:
        return ("metadata", children[0], meta)

    def update_map(self, meta: Meta, children: Children) -> tuple[A.UpdateEntry, ...]:
        entries = tuple(c for c in children if c is not None)
        seen: set[str] = set()
        for entry in entries:
            if entry.key in seen:
                raise fail(entry.pos, f"The key '{entry.key}' is given twice in one SET",
                           "Give each key once.")
            seen.add(entry.key)
        return entries

    def update_entry(self, meta: Meta, children: Children) -> A.UpdateEntry:
        tok: Token = children[0]
        key = self._key(tok, "key")
        check_identifier(key, tok, "an attribute or metadata key")
        return A.UpdateEntry(key, children[1], _tpos(tok))

    def update_path(self, meta: Meta, children: Children) -> A.Path:
        tok: Token = children[0]
        var, segments = split_var(tok)
        return A.Path(var, tuple(segments), _tpos(tok))

    def update_call(self, meta: Meta, children: Children) -> A.UpdateCall:
        func = str(children[0])
        args = tuple(c for c in children[1:] if c is not None)
        arity = {"ADD": 2, "MUL": 2, "CLAMP": 3, "COALESCE": 2}[func]
        if len(args) != arity:
            raise fail(meta, f"{func} takes {arity} arguments, got {len(args)}",
                       "ADD(a, b), MUL(a, b), CLAMP(x, lo, hi), COALESCE(x, default).")
        return A.UpdateCall(func, args, _pos(meta))

    def delete_attributes(self, meta: Meta, children: Children) -> A.DeleteAttributes:
        keys: tuple[A.Value, ...] = children[0]
        where: tuple[A.Pattern, ...] = children[2]
        return A.DeleteAttributes(keys, _plain_var(children[1]), where, _pos(meta))

    def delete_metadata(self, meta: Meta, children: Children) -> A.DeleteMetadata:
        keys: tuple[A.Value, ...] = children[0]
        where: tuple[A.Pattern, ...] = children[2]
        return A.DeleteMetadata(keys, _plain_var(children[1]), where, _pos(meta))

    def delete_propositions(self, meta: Meta, children: Children) -> A.DeletePropositions:
        where: tuple[A.Pattern, ...] = children[1]
        return A.DeletePropositions(_plain_var(children[0]), where, _pos(meta))

    def delete_concept(self, meta: Meta, children: Children) -> A.DeleteConcept:
        where: tuple[A.Pattern, ...] = children[1]
        return A.DeleteConcept(_plain_var(children[0]), where, _pos(meta))

    def key_list(self, meta: Meta, children: Children) -> tuple[A.Value, ...]:
        keys = tuple(token_value(t, A.EXPECT_KEY, "a key to delete")
                     for t in children if t is not None)
        if not keys:
            raise fail(meta, "The list of keys to delete is empty",
                       "Name at least one key, e.g. DELETE ATTRIBUTES {\"old_id\"} FROM ?x ...")
        return keys

    # --- META -----------------------------------------------------------------------------
    def describe_primer(self, meta: Meta, children: Children) -> A.DescribePrimer:
        return A.DescribePrimer(_pos(meta))

    def describe_domains(self, meta: Meta, children: Children) -> A.DescribeDomains:
        return A.DescribeDomains(*_pages(children), pos=_pos(meta))

    def describe_concept_types(self, meta: Meta, children: Children
                               ) -> A.DescribeConceptTypes:
        return A.DescribeConceptTypes(*_pages(children), pos=_pos(meta))

    def describe_concept_type(self, meta: Meta, children: Children
                              ) -> A.DescribeConceptType:
        name = token_value(children[0], A.EXPECT_STRING, "the type name")
        return A.DescribeConceptType(name, _pos(meta))

    def describe_proposition_types(self, meta: Meta, children: Children
                                   ) -> A.DescribePropositionTypes:
        return A.DescribePropositionTypes(*_pages(children), pos=_pos(meta))

    def describe_proposition_type(self, meta: Meta, children: Children
                                  ) -> A.DescribePropositionType:
        name = token_value(children[0], A.EXPECT_STRING, "the predicate name")
        return A.DescribePropositionType(name, _pos(meta))

    def search_cmd(self, meta: Meta, children: Children) -> A.Search:
        target: str = children[0]
        term = token_value(children[1], A.EXPECT_STRING, "the search term")
        given: dict[str, A.Value] = {}
        options: list[Tagged] = children[2:]
        for tag, value, where in options:
            if tag in given:
                raise fail(where, f"{_SEARCH_OPTION[tag]} is given twice in SEARCH",
                           "Give each SEARCH option at most once.")
            given[tag] = value
        return A.Search(target, term, given.get("type"), given.get("limit"), _pos(meta),
                        mode=given.get("mode"), threshold=given.get("threshold"))

    def search_target(self, meta: Meta, children: Children) -> str:
        return str(children[0])

    def with_type(self, meta: Meta, children: Children) -> Tagged:
        return ("type", token_value(children[0], A.EXPECT_STRING, "WITH TYPE"), meta)

    # --- RC11 SEARCH options (spec §5.2) ------------------------------------------------
    def search_mode(self, meta: Meta, children: Children) -> Tagged:
        return ("mode", token_value(children[0], A.EXPECT_STRING, "MODE"), meta)

    def search_threshold(self, meta: Meta, children: Children) -> Tagged:
        return ("threshold", token_value(children[0], A.EXPECT_PRIMITIVE, "THRESHOLD"), meta)
    # --- end of RC11 SEARCH options

    # --- RC11: MERGE (spec §4.4) and EXPORT (spec §5.3) ---------------------------------
    def merge_cmd(self, meta: Meta, children: Children) -> A.Merge:
        where: tuple[A.Pattern, ...] = children[2]
        return A.Merge(_plain_var(children[0]), _plain_var(children[1]), where, _pos(meta))

    def export_cmd(self, meta: Meta, children: Children) -> A.Export:
        where: tuple[A.Pattern, ...] = children[1]
        limit, cursor = _pages(children[2:])
        return A.Export(_plain_var(children[0]), where, limit, cursor, _pos(meta))

    # --- JSON values ----------------------------------------------------------------------
    def string(self, meta: Meta, children: Children) -> A.Literal:
        tok: Token = children[0]
        return A.Literal(decode_string(tok), _tpos(tok))

    def number(self, meta: Meta, children: Children) -> A.Literal:
        tok: Token = children[0]
        return A.Literal(decode_number(tok), _tpos(tok))

    def true(self, meta: Meta, children: Children) -> A.Literal:
        return A.Literal(True, _pos(meta))

    def false(self, meta: Meta, children: Children) -> A.Literal:
        return A.Literal(False, _pos(meta))

    def null(self, meta: Meta, children: Children) -> A.Literal:
        return A.Literal(None, _pos(meta))

    def json_object(self, meta: Meta, children: Children) -> A.Value:
        return _object(children, meta)

    def object_entry(self, meta: Meta, children: Children) -> Entry:
        tok: Token = children[0]
        value: A.Value = children[1]
        return (self._key(tok, "object key"), value, tok)

    def map_object(self, meta: Meta, children: Children) -> A.Value:
        return _object(children, meta)

    def map_entry(self, meta: Meta, children: Children) -> Entry:
        tok: Token = children[0]
        value: A.Value = children[1]
        key = self._key(tok, "key")
        check_identifier(key, tok, "an attribute or metadata key")
        return (key, value, tok)

    def json_array(self, meta: Meta, children: Children) -> A.Value:
        items: list[A.Value] = [c for c in children if c is not None]
        literals = [v for v in items if isinstance(v, A.Literal)]
        if len(literals) == len(items):
            return A.Literal([v.value for v in literals], _pos(meta))
        return A.ArrayValue(tuple(items), _pos(meta))

    def _key(self, tok: Token, what: str) -> str:
        if tok.type == "STRING":
            return decode_string(tok)
        return check_identifier(str(tok), tok, what)


class _MetadataMark:
    """A WITH METADATA clause on its way to the block that owns it."""
    __slots__ = ("value",)

    def __init__(self, value: A.Value) -> None:
        self.value = value


_CALL_HINT = {
    "IN": "Write IN(?x.attributes.k, [\"a\", \"b\"]).",
    "IS_NULL": "Write IS_NULL(?x.metadata.expires_at).",
    "IS_NOT_NULL": "Write IS_NOT_NULL(?x.metadata.expires_at).",
    "CONTAINS": "Write CONTAINS(?x.name, \"text\").",
    "STARTS_WITH": "Write STARTS_WITH(?x.name, \"prefix\").",
    "ENDS_WITH": "Write ENDS_WITH(?x.name, \"suffix\").",
    "REGEX": "Write REGEX(?x.name, \"pattern\") or REGEX(?x.name, \"pattern\", \"i\").",
}


def _object(children: list[Entry | None], meta: Meta) -> A.Value:
    """`{k: v, ...}` → a Literal dict, or an ObjectValue when a placeholder is inside.

    A key given twice is an error (JSON leaves duplicates undefined; silently keeping the last
    would hide a mistake in a command that writes knowledge).
    """
    entries: list[tuple[str, A.Value]] = []
    seen: set[str] = set()
    for child in children:
        if child is None:
            continue
        key, value, tok = child
        if key in seen:
            raise fail(tok, f"Key '{key}' is given twice in one object",
                       f"Give each key once; merge the two values of '{key}'.")
        seen.add(key)
        entries.append((key, value))
    literals = {k: v.value for k, v in entries if isinstance(v, A.Literal)}
    if len(literals) == len(entries):      # no key repeats (checked above)
        return A.Literal(literals, _pos(meta))
    return A.ObjectValue(tuple(entries), _pos(meta))


def _bool(op: str, children: list[A.Expr], meta: Meta) -> A.BoolOp:
    operands: list[A.Expr] = []
    for c in children:
        if isinstance(c, A.BoolOp) and c.op == op:
            operands.extend(c.operands)
        else:
            operands.append(c)
    return A.BoolOp(op, tuple(operands), _pos(meta))


def _filter_operands(expr: A.Expr) -> A.Expr:
    """FILTER operates on primitive values (§2.7): a JSON list is an operand only as IN's
    second argument; a placeholder anywhere else must be bound to a primitive. Returns `expr`
    with such placeholders constrained (EXPECT_PRIMITIVE)."""
    if isinstance(expr, A.Param):
        return A.Param(expr.name, A.EXPECT_PRIMITIVE, expr.pos)
    if isinstance(expr, (A.ArrayValue, A.ObjectValue)) or (
            isinstance(expr, A.Literal) and isinstance(expr.value, (list, dict))):
        what = "list" if isinstance(expr, A.ArrayValue) or (
            isinstance(expr, A.Literal) and isinstance(expr.value, list)) else "object"
        raise fail(expr.pos, f"A JSON {what} can only appear in FILTER as the second "
                   f"argument of IN",
                   "FILTER compares primitive values; write IN(?x, [\"a\", \"b\"]) to test "
                   "membership.")
    if isinstance(expr, A.Compare):
        left, right = _filter_operands(expr.left), _filter_operands(expr.right)
        if left is not expr.left or right is not expr.right:
            return A.Compare(expr.op, left, right, expr.pos)
    elif isinstance(expr, A.BoolOp):
        operands = tuple(_filter_operands(o) for o in expr.operands)
        if any(a is not b for a, b in zip(operands, expr.operands)):
            return A.BoolOp(expr.op, operands, expr.pos)
    elif isinstance(expr, A.NotOp):
        operand = _filter_operands(expr.operand)
        if operand is not expr.operand:
            return A.NotOp(operand, expr.pos)
    elif isinstance(expr, A.Call):
        n = 1 if expr.func == "IN" else len(expr.args)
        args = tuple(_filter_operands(a) for a in expr.args[:n]) + expr.args[n:]
        if any(a is not b for a, b in zip(args, expr.args)):
            return A.Call(expr.func, args, expr.pos)
    return expr


def _split_metadata(children: Children) -> tuple[Children, A.Value | None]:
    if children and isinstance(children[-1], _MetadataMark):
        return children[:-1], children[-1].value
    return children, None


def _handle(children: Children) -> tuple[str | None, Children]:
    if children and isinstance(children[0], Token) and children[0].type == "VAR":
        return _plain_var(children[0]), children[1:]
    return None, children


def _plain_var(tok: Token) -> str:
    var, segments = split_var(tok)
    if segments:
        raise fail(tok, f"Expected a plain variable here, not the dot path {tok}",
                   f"Write ?{var}.")
    return var


def _check_update_paths(value: Any, target: str) -> None:
    """RC11 §4.3: update expressions read only ?target's own state."""
    if isinstance(value, A.Path):
        if value.var != target:
            raise fail(value.pos, f"?{value.var} in an UPDATE expression: only paths on the "
                       f"target ?{target} are allowed",
                       f"Each element's new value is computed from its own state: write "
                       f"?{target}.attributes.<key> or ?{target}.metadata.<key>.")
        if not value.segments or value.segments[0] not in ("attributes", "metadata") or \
                len(value.segments) < 2:
            raise fail(value.pos, f"?{value.var}{''.join('.' + s for s in value.segments)}: "
                       "an UPDATE expression reads attributes or metadata",
                       f"Write ?{target}.attributes.<key> or ?{target}.metadata.<key>.")
    elif isinstance(value, A.UpdateCall):
        for arg in value.args:
            _check_update_paths(arg, target)


def _map_slot(value: A.Value, what: str) -> A.Value:
    # Keys of a written map were checked by map_entry (with their own position); a
    # placeholder's keys are checked by bind().
    return slot(value, A.EXPECT_OBJECT, what)


def _predicate_var(tok: Token) -> A.PredicateVar:
    """`?p` in the predicate position (RC11 §3.4.2): a plain variable."""
    var, segments = split_var(tok)
    if segments:
        raise fail(tok, f"A predicate variable is a plain variable, not a dot path ({tok})",
                   f"Write ?{var} in the predicate position; it binds the predicate name.")
    return A.PredicateVar(var, _tpos(tok))


def _check_kml_term(term: A.Term) -> A.Term:
    """KML references name one element: {type, name} or {id}, one predicate, no paths."""
    if isinstance(term, A.ConceptMatch):
        if term.id is None and (term.type is None or term.name is None):
            raise fail(term.pos, "A concept referenced in KML needs {type: ..., name: ...} "
                       "or {id: ...}",
                       "KML links to exactly one existing concept; write both its type and "
                       "its name, or its id.")
    elif isinstance(term, A.PropositionMatch):
        predicate = term.predicate
        if isinstance(predicate, A.PredicateVar):
            raise fail(predicate.pos, f"A proposition in KML names its predicate, not a "
                       f"variable (?{predicate.name})",
                       "Write the predicate as a string, e.g. (?a, \"treats\", ?b); "
                       "predicate variables are for FIND, UPDATE, DELETE and EXPORT patterns.")
        if predicate.hops is not None or len(predicate.names) != 1:
            raise fail(predicate.pos, "A proposition in KML names exactly one predicate",
                       "Path ranges {m,n} and alternatives \"a\" | \"b\" are only allowed "
                       "in FIND.")
        _check_kml_term(term.subject)
        _check_kml_term(term.object)
    return term


def _expect(rest: list[Any]) -> tuple[A.Value | None, list[Any]]:
    """The EXPECT VERSION guard right after a block's identity clause, if any."""
    if len(rest) > 1 and isinstance(rest[1], tuple) and rest[1][0] == "expect":
        return rest[1][1], [rest[0], *rest[2:]]
    return None, rest


def _pages(children: list[Tagged]) -> tuple[A.Value | None, A.Value | None]:
    limit: A.Value | None = None
    cursor: A.Value | None = None
    for tag, value, where in children:
        if (tag == "limit" and limit is not None) or (tag == "cursor" and cursor is not None):
            raise fail(where, f"{tag.upper()} is given twice")
        if tag == "limit":
            limit = value
        else:
            cursor = value
    return limit, cursor


# --- RC11 SEARCH options (spec §5.2): how each option is named in messages ---------------
_SEARCH_OPTION = {"type": "WITH TYPE", "limit": "LIMIT", "mode": "MODE",
                  "threshold": "THRESHOLD"}
