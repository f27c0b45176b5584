"""AST → canonical KIP text. `parse(to_text(ast)).command == ast` for every command.

Canonical form: keywords uppercase, one clause per line inside blocks (two-space indent),
JSON with bare keys where the key is an identifier, strings JSON-escaped (non-ASCII kept),
floats keep their decimal point so they re-parse as floats. Used by `EXPLAIN`, `kip export`
and the shell; round-tripping is tested on every spec example.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any, Callable

from . import ast as A

_BARE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_JSON_WORDS = {"true", "false", "null"}


def to_text(node: A.Command) -> str:
    return _Printer().command(node)


def expr_text(node: A.Expr | A.Aggregate) -> str:
    """A value, expression or aggregate node as KIP text (`:name` placeholders as written)."""
    return _PRINTER.expr(node)


def value_text(value: Any) -> str:
    """A plain Python JSON value as KIP/JSON text."""
    return _json(value)


def _json(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise ValueError("NaN/Infinity cannot be written as KIP JSON")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_json(v) for v in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{_key(k)}: {_json(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def _key(key: str) -> str:
    if _BARE_KEY.match(key) and key not in _JSON_WORDS:
        return key
    return json.dumps(key, ensure_ascii=False)


class _Printer:
    def __init__(self) -> None:
        self.indent = 0

    # --- values ---------------------------------------------------------------------------
    def value(self, v: A.Value) -> str:
        if isinstance(v, A.Literal):
            return _json(v.value)
        if isinstance(v, A.Param):
            return f":{v.name}"
        if isinstance(v, A.ObjectValue):
            return "{ " + ", ".join(f"{_key(k)}: {self.value(x)}" for k, x in v.entries) + " }"
        if isinstance(v, A.ArrayValue):
            return "[" + ", ".join(self.value(x) for x in v.items) + "]"
        raise TypeError(f"not a value node: {v!r}")

    # --- expressions ----------------------------------------------------------------------
    def expr(self, e: A.Expr | A.Aggregate, parent_prec: int = 0) -> str:
        if isinstance(e, A.Path):
            return "?" + ".".join((e.var,) + e.segments)
        if isinstance(e, A.Aggregate):
            return f"{e.func}({'DISTINCT ' if e.distinct else ''}{self.expr(e.arg)})"
        if isinstance(e, (A.Literal, A.Param, A.ObjectValue, A.ArrayValue)):
            return self.value(e)
        if isinstance(e, A.Compare):
            text = f"{self.expr(e.left, 4)} {e.op} {self.expr(e.right, 4)}"
            return f"({text})" if parent_prec >= 4 else text
        if isinstance(e, A.BoolOp):
            prec = 1 if e.op == "||" else 2
            text = f" {e.op} ".join(self.expr(o, prec) for o in e.operands)
            return f"({text})" if parent_prec >= prec else text
        if isinstance(e, A.NotOp):
            # `!` binds looser than a comparison (`!a == b` is `!(a == b)`), so a negation
            # that is itself compared needs parentheses.
            inner = self.expr(e.operand)
            atomic = isinstance(e.operand, (A.Path, A.Literal, A.Param, A.Call, A.NotOp))
            text = "!" + (inner if atomic else f"({inner})")
            return f"({text})" if parent_prec >= 4 else text
        if isinstance(e, A.Call):
            return f"{e.func}(" + ", ".join(self.expr(a) for a in e.args) + ")"
        raise TypeError(f"not an expression node: {e!r}")

    # --- patterns -------------------------------------------------------------------------
    def concept_match(self, m: A.ConceptMatch) -> str:
        parts = [f"{k}: {self.value(v)}" for k, v in
                 (("id", m.id), ("type", m.type), ("name", m.name)) if v is not None]
        return "{" + ", ".join(parts) + "}"

    def predicate(self, p: A.Predicate | A.PredicateVar) -> str:
        if isinstance(p, A.PredicateVar):
            return f"?{p.name}"
        names = " | ".join(self.value(n) for n in p.names)
        if p.hops is None:
            return names
        lo, hi = p.hops
        if hi is None:
            return f"{names}{{{lo},}}"
        if lo == hi:
            return f"{names}{{{lo}}}"
        return f"{names}{{{lo},{hi}}}"

    def term(self, t: A.Term) -> str:
        if isinstance(t, A.VarTerm):
            return f"?{t.name}"
        if isinstance(t, A.ConceptMatch):
            return self.concept_match(t)
        if isinstance(t, A.PropositionMatch):
            return (f"({self.term(t.subject)}, {self.predicate(t.predicate)}, "
                    f"{self.term(t.object)})")
        if isinstance(t, A.PropositionIdMatch):
            return f"(id: {self.value(t.id)})"
        raise TypeError(f"not a term: {t!r}")

    def patterns(self, body: tuple[A.Pattern, ...]) -> str:
        if not body:
            return "{ }"
        self.indent += 1
        pad = "  " * self.indent
        lines = [pad + self.pattern(p) for p in body]
        self.indent -= 1
        return "{\n" + "\n".join(lines) + "\n" + "  " * self.indent + "}"

    def pattern(self, p: A.Pattern) -> str:
        if isinstance(p, A.ConceptPattern):
            var = f"?{p.var} " if p.var else ""
            return var + self.concept_match(p.match)
        if isinstance(p, A.PropositionPattern):
            var = f"?{p.var} " if p.var else ""
            return var + self.term(p.match)
        if isinstance(p, A.FilterPattern):
            return f"FILTER({self.expr(p.expr)})"
        if isinstance(p, A.NotPattern):
            return "NOT " + self.patterns(p.body)
        if isinstance(p, A.OptionalPattern):
            return "OPTIONAL " + self.patterns(p.body)
        if isinstance(p, A.UnionPattern):
            return "UNION " + self.patterns(p.body)
        raise TypeError(f"not a pattern: {p!r}")

    # --- commands -------------------------------------------------------------------------
    def command(self, c: A.Command) -> str:
        method: Callable[[A.Command], str] | None = getattr(
            self, "cmd_" + type(c).__name__, None)
        if method is None:
            raise TypeError(f"not a command node: {c!r}")
        return method(c)

    def cmd_Find(self, c: A.Find) -> str:
        items = ", ".join(self.expr(i) for i in c.items)
        out = [f"FIND({items})", "WHERE " + self.patterns(c.where)]
        if c.order_by:
            keys = ", ".join(self.expr(k.expr) + (" DESC" if k.descending else " ASC")
                             for k in c.order_by)
            out.append(f"ORDER BY {keys}")
        if c.limit is not None:
            out.append(f"LIMIT {self.value(c.limit)}")
        if c.cursor is not None:
            out.append(f"CURSOR {self.value(c.cursor)}")
        if c.as_of is not None:
            out.append(self.as_of(c.as_of))
        return "\n".join(out)

    # --- UPDATE (RC11 §4.3) -------------------------------------------------------------------
    def update_value(self, v: Any) -> str:
        if isinstance(v, A.UpdateCall):
            return f"{v.func}({', '.join(self.update_value(a) for a in v.args)})"
        if isinstance(v, A.Path):
            return "?" + ".".join((v.var, *v.segments))
        return self.value(v)

    def cmd_Update(self, c: A.Update) -> str:
        out = [f"UPDATE ?{c.target}"]
        for label, entries in (("ATTRIBUTES", c.attributes), ("METADATA", c.metadata)):
            if entries is not None:
                body = ", ".join(f"{_key(e.key)}: {self.update_value(e.value)}"
                                 for e in entries)
                out.append(f"SET {label} {{ {body} }}")
        out.append("WHERE " + self.patterns(c.where))
        if c.limit is not None:
            out.append(f"LIMIT {self.value(c.limit)}")
        return "\n".join(out)

    # --- version history (nexus extension) ---------------------------------------------------
    def as_of(self, a: A.AsOf) -> str:
        return f"AS OF {'VERSION ' if a.version else ''}{self.value(a.point)}"

    def element_ref(self, e: A.ElementRef) -> str:
        return (f"(id: {self.value(e.id)})" if e.link else f"{{id: {self.value(e.id)}}}")

    def cmd_DescribeHistory(self, c: A.DescribeHistory) -> str:
        head = "DESCRIBE HISTORY"
        if c.element is not None:
            head += " " + self.element_ref(c.element)
        return self._pages(head, c)

    def cmd_Revert(self, c: A.Revert) -> str:
        if c.element is not None and c.version is not None:
            out = f"REVERT {self.element_ref(c.element)} TO VERSION {self.value(c.version)}"
        else:
            assert c.command is not None
            out = f"REVERT COMMAND {self.value(c.command)}"
        out += f" REASON {self.value(c.reason)}"
        return out + (" FORCE" if c.force else "")

    def cmd_Explain(self, c: A.Explain) -> str:
        return "EXPLAIN " + self.cmd_Find(c.query)

    def cmd_Upsert(self, c: A.Upsert) -> str:
        return "\n\n".join(self.upsert_statement(s) for s in c.statements)

    cmd_ColumnUpsert = cmd_Upsert       # (an Upsert read as columns: the same command)

    def upsert_statement(self, s: A.UpsertStatement) -> str:
        out = ["UPSERT {"]
        for block in s.blocks:
            out.append(self.block(block))
        out.append("}")
        if s.metadata is not None:
            out.append(f"WITH METADATA {self.value(s.metadata)}")
        return "\n".join(out)

    def block(self, b: A.UpsertBlock) -> str:
        handle = f" ?{b.handle}" if b.handle else ""
        if isinstance(b, A.ConceptBlock):
            lines = [f"  CONCEPT{handle} {{", f"    {self.concept_match(b.match)}"]
        else:
            lines = [f"  PROPOSITION{handle} {{", f"    {self.term(b.match)}"]
        if b.expect is not None:
            lines.append(f"    EXPECT VERSION {self.value(b.expect)}")
        if b.attributes is not None:
            lines.append(f"    SET ATTRIBUTES {self.value(b.attributes)}")
        if isinstance(b, A.ConceptBlock) and b.propositions is not None:
            lines.append("    SET PROPOSITIONS {")
            for sp in b.propositions:
                entry = f"      ({self.value(sp.predicate)}, {self.term(sp.target)})"
                if sp.metadata is not None:
                    entry += f" WITH METADATA {self.value(sp.metadata)}"
                lines.append(entry)
            lines.append("    }")
        closing = "  }"
        if b.metadata is not None:
            closing += f" WITH METADATA {self.value(b.metadata)}"
        lines.append(closing)
        return "\n".join(lines)

    def _keys(self, keys: tuple[A.Value, ...]) -> str:
        return "{" + ", ".join(self.value(k) for k in keys) + "}"

    def cmd_DeleteAttributes(self, c: A.DeleteAttributes) -> str:
        return (f"DELETE ATTRIBUTES {self._keys(c.keys)} FROM ?{c.target}\n"
                f"WHERE {self.patterns(c.where)}")

    def cmd_DeleteMetadata(self, c: A.DeleteMetadata) -> str:
        return (f"DELETE METADATA {self._keys(c.keys)} FROM ?{c.target}\n"
                f"WHERE {self.patterns(c.where)}")

    def cmd_DeletePropositions(self, c: A.DeletePropositions) -> str:
        return f"DELETE PROPOSITIONS ?{c.target}\nWHERE {self.patterns(c.where)}"

    def cmd_DeleteConcept(self, c: A.DeleteConcept) -> str:
        return f"DELETE CONCEPT ?{c.target} DETACH\nWHERE {self.patterns(c.where)}"

    def _pages(self, head: str, c: Any) -> str:
        out = head
        if c.limit is not None:
            out += f" LIMIT {self.value(c.limit)}"
        if c.cursor is not None:
            out += f" CURSOR {self.value(c.cursor)}"
        return out

    def cmd_DescribePrimer(self, c: A.DescribePrimer) -> str:
        return "DESCRIBE PRIMER"

    def cmd_DescribeDomains(self, c: A.DescribeDomains) -> str:
        return self._pages("DESCRIBE DOMAINS", c)

    def cmd_DescribeConceptTypes(self, c: A.DescribeConceptTypes) -> str:
        return self._pages("DESCRIBE CONCEPT TYPES", c)

    def cmd_DescribeConceptType(self, c: A.DescribeConceptType) -> str:
        return f"DESCRIBE CONCEPT TYPE {self.value(c.name)}"

    def cmd_DescribePropositionTypes(self, c: A.DescribePropositionTypes) -> str:
        return self._pages("DESCRIBE PROPOSITION TYPES", c)

    def cmd_DescribePropositionType(self, c: A.DescribePropositionType) -> str:
        return f"DESCRIBE PROPOSITION TYPE {self.value(c.name)}"

    def cmd_Search(self, c: A.Search) -> str:
        out = f"SEARCH {c.target} {self.value(c.term)}"
        if c.type is not None:
            out += f" WITH TYPE {self.value(c.type)}"
        # RC11 (spec §5.2): MODE and THRESHOLD, printed before LIMIT as the spec writes them.
        if c.mode is not None:
            out += f" MODE {self.value(c.mode)}"
        if c.threshold is not None:
            out += f" THRESHOLD {self.value(c.threshold)}"
        if c.limit is not None:
            out += f" LIMIT {self.value(c.limit)}"
        return out

    # --- RC11: MERGE (spec §4.4) and EXPORT (spec §5.3) ---------------------------------
    def cmd_Merge(self, c: A.Merge) -> str:
        return f"MERGE CONCEPT ?{c.source} INTO ?{c.target}\nWHERE {self.patterns(c.where)}"

    def cmd_Export(self, c: A.Export) -> str:
        return self._pages(f"EXPORT ?{c.target}\nWHERE {self.patterns(c.where)}", c)


_PRINTER = _Printer()      # stateless between calls of expr()
