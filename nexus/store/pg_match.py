"""A `nexus.store.pattern.Pattern` as ONE SQL statement on the PostgreSQL tables.

Every step becomes a join over the tables' indexes (`pg_schema`): a concept step a probe of
`nexus_concepts` by id, by (type_id, id) or by (type_id, name_key); a link step a range of
`nexus_links` by (subject, predicate), (object, predicate) — the s-p-o and o-p-s indexes —
or (predicate) for a scan; a link test an `EXISTS`; a NOT block a `NOT EXISTS`; an OPTIONAL
block a `LEFT JOIN LATERAL`. The `ORDER BY` reproduces the operators' row order (the
pattern module's doc); the heads and maps the caller wants come in the same rows.
Everything the caller gives is a bound parameter: the statement's text depends only on the
pattern's shape.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nexus.errors import KipError
from nexus.store import codec
from nexus.store.pattern import (NOTHING, ConceptStep, LinkStep, NotBlock, OptionalBlock,
                                 Pattern, Step)

# Per wanted column, the row carries these seven values after the pattern's columns.
WANT_WIDTH = 7      # type_id, name, subject, predicate, object, attributes, metadata


@dataclass
class _Block:
    """The FROM items, conditions and order keys of one block (the main one or a nested
    one), in the order its steps add them."""
    joins: list[str] = field(default_factory=list)
    where: list[str] = field(default_factory=list)
    order: list[str] = field(default_factory=list)


class _Builder:
    def __init__(self, space: str) -> None:
        self.space = space
        self.params: dict[str, Any] = {}
        self.n = 0
        self.cols: dict[int, str] = {}          # column -> SQL expression
        self.concepts: dict[int, str] = {}      # column -> alias of its nexus_concepts row
        self.depth = 0                          # blocks nested around the step compiled

    def alias(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def p(self, value: Any, cast: str = "") -> str:
        """A bound parameter, by name (a nested block's text lands in the statement after
        joins compiled later; `cast`: its SQL type, for arrays and nulls)."""
        name = f"p{len(self.params)}"
        self.params[name] = value
        return f"%({name})s{cast}"

    def block(self, steps: tuple[Step, ...]) -> _Block:
        out = _Block()
        for step in steps:
            if type(step) is ConceptStep:
                self.concept(step, out)
            elif type(step) is LinkStep:
                self.link(step, out)
            elif type(step) is NotBlock:
                sub = self.nested(step.steps)
                out.where.append(f"NOT EXISTS ({self.select('1', sub, ordered=False)})")
            elif type(step) is OptionalBlock:
                self.optional(step, out)
            else:  # pragma: no cover - the Step union is closed
                raise TypeError(step)
        return out

    def nested(self, steps: tuple[Step, ...]) -> _Block:
        self.depth += 1
        try:
            return self.block(steps)
        finally:
            self.depth -= 1

    def select(self, what: str, block: _Block, ordered: bool) -> str:
        sql = f"SELECT {what} FROM (VALUES (1)) AS s{self.alias('')}(x)"
        if block.joins:
            sql += " " + " ".join(block.joins)
        if block.where:
            sql += " WHERE " + " AND ".join(block.where)
        if ordered and block.order:
            sql += " ORDER BY " + ", ".join(block.order)
        return sql

    def concept(self, step: ConceptStep, out: _Block) -> None:
        c = self.alias("c")
        on = [f"{c}.space = {self.p(self.space)}"]
        if step.new:
            self.cols[step.col] = f"{c}.id"
        else:
            on.append(f"{c}.id = {self.cols[step.col]}")
        if not self.depth:      # (a nested block's rows are not in scope outside it)
            self.concepts[step.col] = c     # the column's concept row, for its wants
        if step.id is not None:
            on.append(f"{c}.id = {self.p(step.id, '::bigint')}")
        if step.type_id is not None:
            on.append(f"{c}.type_id = {self.p(step.type_id, '::bigint')}")
        if step.name is not None:
            try:
                utf8 = codec.encode_text(step.name)
            except KipError:            # not a name any concept has
                utf8 = None
            if utf8 is None:
                on.append(f"{c}.type_id = {self.p(NOTHING, '::bigint')}")
            else:
                on.append(f"{c}.name_key = {self.p(codec.text_key(utf8), '::bytea')}")
                on.append(f"{c}.name = {self.p(utf8, '::bytea')}")
        out.joins.append(f"JOIN nexus_concepts {c} ON " + " AND ".join(on))
        if step.new and step.id is None:
            out.order.append(f"{c}.id")

    def link(self, step: LinkStep, out: _Block) -> None:
        l = self.alias("l")
        preds = list(step.predicates)
        on = [f"{l}.space = {self.p(self.space)}"]
        if len(preds) == 1:
            on.append(f"{l}.predicate = {self.p(preds[0], '::bigint')}")
        else:
            on.append(f"{l}.predicate = ANY({self.p(preds, '::bigint[]')})")
        same = step.subject == step.object
        for col, new, end in ((step.subject, step.new_subject, "subject"),
                              (step.object, step.new_object, "object")):
            if not new:
                on.append(f"{l}.{end} = {self.cols[col]}")
        if same and step.new_subject and step.new_object:
            on.append(f"{l}.subject = {l}.object")
        binds = step.new_subject or step.new_object or step.link is not None
        if not binds:       # a test: at most one row (EXISTS)
            sub = f"SELECT 1 FROM nexus_links {l} WHERE " + " AND ".join(on)
            out.where.append(f"EXISTS ({sub})")
            return
        out.joins.append(f"JOIN nexus_links {l} ON " + " AND ".join(on))
        if len(preds) > 1:
            out.order.append(f"array_position({self.p(preds, '::bigint[]')}, {l}.predicate)")
        if step.new_subject:
            self.cols[step.subject] = f"{l}.subject"
            out.order.append(f"{l}.subject")
        if step.new_object and not (same and step.new_subject):
            self.cols[step.object] = f"{l}.object"
            out.order.append(f"{l}.object")
        if step.link is not None:
            self.cols[step.link] = f"{l}.id"
        out.order.append(f"{l}.id")

    def optional(self, step: OptionalBlock, out: _Block) -> None:
        o = self.alias("o")
        sub = self.nested(step.steps)
        what = [f"{self.cols[col]} AS x{col}" for col in step.exports]
        what += [f"{key} AS k{i}" for i, key in enumerate(sub.order)]
        out.joins.append(f"LEFT JOIN LATERAL ({self.select(', '.join(what) or '1', sub, False)}"
                         f") {o} ON TRUE")
        for col in step.exports:
            self.cols[col] = f"{o}.x{col}"
        out.order += [f"{o}.k{i}" for i in range(len(sub.order))]


def compile_pattern(space: str, pattern: Pattern) -> tuple[str, dict[str, Any]]:
    """The statement and its parameters: each row is the pattern's columns, then
    WANT_WIDTH values per want (NULL where not wanted or not that kind of element)."""
    b = _Builder(space)
    main = b.block(pattern.steps)
    what = [b.cols[col] for col in pattern.columns]
    for want in pattern.wants:
        expr = b.cols[want.col]
        c = b.concepts.get(want.col)
        if c is not None:       # bound by a concept step: its row is at hand
            maps = [f"{c}.attributes", f"{c}.metadata"] if want.maps else ["NULL", "NULL"]
            what += [f"{c}.type_id", f"{c}.name", "NULL", "NULL", "NULL", *maps]
            continue
        hc, hl = b.alias("hc"), b.alias("hl")
        main.joins.append(f"LEFT JOIN nexus_concepts {hc} ON {hc}.space = "
                          f"{b.p(space)} AND {hc}.id = {expr}")
        main.joins.append(f"LEFT JOIN nexus_links {hl} ON {hl}.space = "
                          f"{b.p(space)} AND {hl}.id = {expr}")
        maps = ([f"COALESCE({hc}.attributes, {hl}.attributes)",
                 f"COALESCE({hc}.metadata, {hl}.metadata)"] if want.maps else ["NULL", "NULL"])
        what += [f"{hc}.type_id", f"{hc}.name", f"{hl}.subject", f"{hl}.predicate",
                 f"{hl}.object", *maps]
    sql = b.select(", ".join(what) or "1", main, ordered=True)
    if pattern.limit is not None:
        sql += f" LIMIT {b.p(pattern.limit, '::bigint')}"
    return sql, b.params


__all__ = ["WANT_WIDTH", "compile_pattern"]
