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

from lark import Token, v_args
from lark.tree import Meta

from . import ast as A
from .transform_common import (Children, Entry, Hops, Tagged, check_identifier, decode_number,
                               decode_string, entry_key, fail, meta_pos, param_name, slot,
                               split_var, token_pos, token_value)
from .transform_statements import StatementRules


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


@v_args(meta=True)
class KipTransformer(StatementRules):
    """Lark rule name → AST node. Methods receive (meta, children); the rules of the
    statements other than FIND come from `StatementRules`."""

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
        return A.Find(items, where, order_by, limit, cursor, meta_pos(meta), as_of)

    def explain_cmd(self, meta: Meta, children: Children) -> A.Explain:
        query: A.Find = children[0]
        return A.Explain(query, meta_pos(meta))

    def find_items(self, meta: Meta, children: Children) -> tuple[A.FindItem, ...]:
        return tuple(children)

    def aggregate(self, meta: Meta, children: Children) -> A.Aggregate:
        func = str(children[0])
        distinct = len(children) == 3
        arg: A.Path = children[-1]
        if distinct and func != "COUNT":
            raise fail(children[1], f"DISTINCT is only allowed in COUNT, not in {func}",
                       "Write COUNT(DISTINCT ?var).")
        return A.Aggregate(func, distinct, arg, meta_pos(meta))

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
        return A.Path(var, segments, token_pos(tok))

    def order_by(self, meta: Meta, children: Children) -> Tagged:
        return ("order_by", tuple(children), meta)

    def order_key(self, meta: Meta, children: Children) -> A.OrderKey:
        expr: A.FindItem = children[0]
        descending = len(children) == 2 and str(children[1]) == "DESC"
        return A.OrderKey(expr, descending, meta_pos(meta))

    def limit(self, meta: Meta, children: Children) -> Tagged:
        return ("limit", token_value(children[0], A.EXPECT_POSITIVE_INT, "LIMIT"), meta)

    def cursor(self, meta: Meta, children: Children) -> Tagged:
        return ("cursor", token_value(children[0], A.EXPECT_STRING, "CURSOR"), meta)

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
        return A.ConceptPattern(var, match, meta_pos(meta))

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
        return A.PropositionPattern(var, match, meta_pos(meta))

    def not_pattern(self, meta: Meta, children: Children) -> A.NotPattern:
        return A.NotPattern(tuple(children), meta_pos(meta))

    def optional_pattern(self, meta: Meta, children: Children) -> A.OptionalPattern:
        return A.OptionalPattern(tuple(children), meta_pos(meta))

    def union_pattern(self, meta: Meta, children: Children) -> A.UnionPattern:
        return A.UnionPattern(tuple(children), meta_pos(meta))

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
                              meta_pos(meta))

    def match_entry(self, meta: Meta, children: Children
                    ) -> tuple[str, A.Value, A.Pos | None]:
        return (entry_key(children[0], "concept clause key"), children[1], meta_pos(meta))

    def triple(self, meta: Meta, children: Children) -> A.PropositionMatch:
        subject: A.Term = children[0]
        predicate: A.Predicate | A.PredicateVar = children[1]
        obj: A.Term = children[2]
        return A.PropositionMatch(subject, predicate, obj, meta_pos(meta))

    def proposition_id(self, meta: Meta, children: Children) -> A.PropositionIdMatch:
        value = slot(children[1], A.EXPECT_STRING, "'id' in a proposition clause")
        return A.PropositionIdMatch(value, meta_pos(meta))

    def var_term(self, meta: Meta, children: Children) -> A.VarTerm:
        tok: Token = children[0]
        var, segments = split_var(tok)
        if segments:
            raise fail(tok, f"A subject or object is a variable, not a dot path ({tok})",
                       f"Write ?{var} here and use {tok} in FIND or FILTER.")
        return A.VarTerm(var, token_pos(tok))

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
        return A.Predicate(names, None, meta_pos(meta))

    def predicate_path(self, meta: Meta, children: Children) -> A.Predicate:
        if children[0].type == "VAR":
            raise fail(children[0], f"A predicate variable cannot carry a path range "
                       f"({children[0]}{{...}})",
                       "Path ranges {m,n} apply to literal predicates only, e.g. "
                       "(?a, \"follows\"{1,3}, ?b); a predicate variable matches one hop.")
        name = token_value(children[0], A.EXPECT_STRING, "a predicate")
        hops: Hops = children[1]
        return A.Predicate((name,), hops, meta_pos(meta))

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
        return A.FilterPattern(expr, meta_pos(meta))

    # --- FILTER expressions ---------------------------------------------------------------
    def or_op(self, meta: Meta, children: Children) -> A.BoolOp:
        return _bool("||", children, meta)

    def and_op(self, meta: Meta, children: Children) -> A.BoolOp:
        return _bool("&&", children, meta)

    def not_op(self, meta: Meta, children: Children) -> A.NotOp:
        operand: A.Expr = children[0]
        return A.NotOp(operand, meta_pos(meta))

    def compare(self, meta: Meta, children: Children) -> A.Compare:
        left: A.Expr = children[0]
        right: A.Expr = children[2]
        return A.Compare(str(children[1]), left, right, meta_pos(meta))

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
        return A.Call(func, args, meta_pos(meta))

    def param(self, meta: Meta, children: Children) -> A.Param:
        tok: Token = children[0]
        return A.Param(param_name(tok), A.EXPECT_ANY, token_pos(tok))

    # --- JSON values ----------------------------------------------------------------------
    def string(self, meta: Meta, children: Children) -> A.Literal:
        tok: Token = children[0]
        return A.Literal(decode_string(tok), token_pos(tok))

    def number(self, meta: Meta, children: Children) -> A.Literal:
        tok: Token = children[0]
        return A.Literal(decode_number(tok), token_pos(tok))

    def true(self, meta: Meta, children: Children) -> A.Literal:
        return A.Literal(True, meta_pos(meta))

    def false(self, meta: Meta, children: Children) -> A.Literal:
        return A.Literal(False, meta_pos(meta))

    def null(self, meta: Meta, children: Children) -> A.Literal:
        return A.Literal(None, meta_pos(meta))

    def json_object(self, meta: Meta, children: Children) -> A.Value:
        return _object(children, meta)

    def object_entry(self, meta: Meta, children: Children) -> Entry:
        tok: Token = children[0]
        value: A.Value = children[1]
        return (entry_key(tok, "object key"), value, tok)

    def map_object(self, meta: Meta, children: Children) -> A.Value:
        return _object(children, meta)

    def map_entry(self, meta: Meta, children: Children) -> Entry:
        tok: Token = children[0]
        value: A.Value = children[1]
        key = entry_key(tok, "key")
        check_identifier(key, tok, "an attribute or metadata key")
        return (key, value, tok)

    def json_array(self, meta: Meta, children: Children) -> A.Value:
        items: list[A.Value] = [c for c in children if c is not None]
        literals = [v for v in items if isinstance(v, A.Literal)]
        if len(literals) == len(items):
            return A.Literal([v.value for v in literals], meta_pos(meta))
        return A.ArrayValue(tuple(items), meta_pos(meta))


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
        return A.Literal(literals, meta_pos(meta))
    return A.ObjectValue(tuple(entries), meta_pos(meta))


def _bool(op: str, children: list[A.Expr], meta: Meta) -> A.BoolOp:
    operands: list[A.Expr] = []
    for c in children:
        if isinstance(c, A.BoolOp) and c.op == op:
            operands.extend(c.operands)
        else:
            operands.append(c)
    return A.BoolOp(op, tuple(operands), meta_pos(meta))


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


def _predicate_var(tok: Token) -> A.PredicateVar:
    """`?p` in the predicate position (RC11 §3.4.2): a plain variable."""
    var, segments = split_var(tok)
    if segments:
        raise fail(tok, f"A predicate variable is a plain variable, not a dot path ({tok})",
                   f"Write ?{var} in the predicate position; it binds the predicate name.")
    return A.PredicateVar(var, token_pos(tok))
