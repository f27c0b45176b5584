"""Differential test: the engine against a deliberately naive reference evaluator.

Random small graphs (seeded) and random KQL queries from a generator are evaluated by the
engine (through `execute_kip`, on the memory and the LMDB store) and by `Reference` below,
which is written straight from spec §3 and CONTRACT §4–§6 with nested loops over all
elements — no indexes, no planner, no engine code. The answers must be equal: as multisets
where KIP leaves the order open; sorted per ORDER BY where it does not (ties may come in any
order, so the check is "the engine's rows are sorted by the reference's comparator"); and
for LIMIT, every page followed through CURSOR adds up to the whole answer.

Semantics the reference implements (each a sentence of the spec/CONTRACT or a decision
documented in the engine's module docstrings):
* a solution assigns the *named* variables; solutions form a set (anonymous clauses and
  predicate alternatives only constrain; paths give distinct (start, end) pairs);
* main-block clauses and FILTERs are one conjunction; OPTIONAL / NOT blocks run after them
  in text order with the outer bindings visible; UNION branches are evaluated with no outer
  binding and joined with the outer row on shared names by equality; a block whose only
  patterns are UNIONs has no main branch; the clauses after a UNION run apply to the rows of
  the main branch and of every UNION before them (padded with null), those before it to the
  main branch only;
* a variable padded with null by OPTIONAL matches no clause;
* mandatory `{type, name}` / `{id}` / `(id:)` clauses of the main block that match nothing →
  KIP_3002 (checked before anything else);
* FILTER: exact-true semantics, comparisons within one JSON kind, ISO datetimes as
  instants, null equals only null;
* results deduplicated on the FIND variables' identities; aggregates over all solutions.

Every query runs under both FIND executors (the row path, and the columnar path forced on,
see nexus.exec.columnar): each answer is checked against the reference, and the two
executors' responses must be identical — rows, their order and every CURSOR page.

Pairs per run: `KQL_DIFF_PAIRS` (default 300; `NEXUS_FULL=1` 3000); seed: `KQL_DIFF_SEED` (default 20240611).
A failing pair prints the seed, the graph and the query so it can be replayed.
"""
from __future__ import annotations

import json
import os
import random
import re
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from kqlsupport import MODES, open_db

sys.path.insert(0, str(Path(__file__).parents[1] / "cases"))
from kiprun import canon  # noqa: E402  (typed JSON: 1, 1.0 and true stay apart)

PAIRS = int(os.environ.get("KQL_DIFF_PAIRS",
                           "3000" if os.environ.get("NEXUS_FULL", "") not in ("", "0") else "300"))
SEED = int(os.environ.get("KQL_DIFF_SEED", "20240611"))
QUERIES_PER_GRAPH = 12
MAX_PAGES = 6          # LIMIT pages followed through CURSOR per query

TYPES = ["A", "B", "C"]
PREDICATES = ["p", "q", "r"]
STRINGS = ["apple", "Apple", "banana", "an", "", "b"]
TIMES = ["2025-01-01T00:00:00Z", "2025-01-01T00:00:00.000Z", "2025-01-01T01:00:00+01:00",
         "2025-06-01T00:00:00Z", "2024-12-31T23:59:59Z", "not a date"]
VARS = ["a", "b", "c", "d", "e"]
LINK_VARS = ["l", "m"]


# =========================================================================================
# The random graph: a plain Python model, also written into the engine's store.
# =========================================================================================

@dataclass
class Element:
    n: int
    kind: str                       # "C" | "P"
    type: str | None = None
    name: str | None = None
    s: int | None = None
    p: str | None = None
    o: int | None = None
    attributes: dict = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)


class Graph:
    def __init__(self, rng: random.Random) -> None:
        self.elements: dict[int, Element] = {}
        n_nodes = rng.randint(10, 60)
        next_id = 1
        used_names: dict[str, set] = {t: set() for t in TYPES}
        for _ in range(n_nodes):
            t = rng.choice(TYPES)
            while True:
                name = f"k{rng.randint(0, n_nodes)}"
                if name not in used_names[t]:
                    used_names[t].add(name)
                    break
            self.elements[next_id] = Element(next_id, "C", type=t, name=name,
                                             attributes=self._attrs(rng),
                                             metadata=self._meta(rng))
            next_id += 1
        concepts = list(self.elements)
        triples: set = set()
        for _ in range(rng.randint(n_nodes, n_nodes * 3)):
            pool = list(self.elements)
            s = rng.choice(pool if rng.random() < 0.15 else concepts)
            o = rng.choice(pool if rng.random() < 0.15 else concepts)
            p = rng.choice(PREDICATES)
            if (s, p, o) in triples:
                continue
            triples.add((s, p, o))
            attrs = {"c": rng.randint(0, 3)} if rng.random() < 0.5 else {}
            self.elements[next_id] = Element(next_id, "P", s=s, p=p, o=o, attributes=attrs,
                                             metadata=self._meta(rng))
            next_id += 1

    @staticmethod
    def _attrs(rng: random.Random) -> dict:
        out: dict = {}
        if rng.random() < 0.8:
            out["v"] = rng.choice([None, -1, 0, 1, 2, 3, 5])
        if rng.random() < 0.7:
            out["s"] = rng.choice(STRINGS)
        if rng.random() < 0.5:
            out["w"] = rng.choice([0.5, 1.25, -2.5, 3.0, 10.75])
        if rng.random() < 0.4:
            out["x"] = rng.choice([True, False, 1, 0, "1", None, "true"])
        if rng.random() < 0.3:
            out["t"] = rng.choice(TIMES)
        if rng.random() < 0.3:
            out["tags"] = rng.sample(STRINGS, rng.randint(0, 3))
        return out

    @staticmethod
    def _meta(rng: random.Random) -> dict:
        return {"m": rng.choice(["x", "y", 1, None])} if rng.random() < 0.3 else {}

    def write_to(self, nx: Any) -> dict[int, int]:
        """Write the graph through the store protocol; returns model id → store id."""
        ids: dict[int, int] = {}
        with nx.store.write() as t:
            for e in sorted(self.elements.values(), key=lambda e: e.n):
                n = t.new_id()
                ids[e.n] = n
                if e.kind == "C":
                    t.create_concept(n, t.intern(e.type), e.name, e.attributes, e.metadata)
                else:
                    t.create_link(n, ids[e.s], t.intern(e.p), ids[e.o], e.attributes,
                                  e.metadata)
        return ids

    def wire_id(self, n: int) -> str:
        e = self.elements[n]
        return f"C:{n}" if e.kind == "C" else f"P:{n}:{e.p}"


# =========================================================================================
# Queries: a small structure of our own, rendered to KQL text for the engine.
# =========================================================================================
# terms:     ("var", name) | ("concept", type, name, id) | ("prop", s_term, preds, o_term)
# patterns:  ("concept", var, type, name, id)   var may be None only as a term
#            ("link", linkvar | None, s_term, preds, o_term)
#            ("linkid", var, id)
#            ("path", s_term, pred, lo, hi, o_term)
#            ("filter", expr) | ("not", [...]) | ("optional", [...]) | ("union", [...])
# exprs:     ("path", var, segs) | ("lit", v) | ("cmp", op, l, r) | ("and", [..]) |
#            ("or", [..]) | ("neg", e) | ("call", fn, [args])

def q(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def render_term(t) -> str:
    if t[0] == "var":
        return "?" + t[1]
    if t[0] == "concept":
        return render_concept(t[1], t[2], t[3])
    return "(" + render_term(t[1]) + ", " + render_preds(t[2]) + ", " + render_term(t[3]) + ")"


def render_concept(type_, name, id_) -> str:
    parts = []
    if id_ is not None:
        parts.append(f"id: {q(id_)}")
    if type_ is not None:
        parts.append(f"type: {q(type_)}")
    if name is not None:
        parts.append(f"name: {q(name)}")
    return "{" + ", ".join(parts) + "}"


def render_preds(preds) -> str:
    return " | ".join(q(p) for p in preds)


def render_value(v) -> str:
    return json.dumps(v, ensure_ascii=False)


def render_expr(e) -> str:
    k = e[0]
    if k == "path":
        return "?" + e[1] + "".join("." + s for s in e[2])
    if k == "lit":
        return render_value(e[1])
    if k == "cmp":
        return f"{render_expr(e[2])} {e[1]} {render_expr(e[3])}"
    if k in ("and", "or"):
        op = " && " if k == "and" else " || "
        return "(" + op.join(render_expr(x) for x in e[1]) + ")"
    if k == "neg":
        return "!(" + render_expr(e[1]) + ")"
    if k == "call":
        return e[1] + "(" + ", ".join(render_expr(a) for a in e[2]) + ")"
    raise ValueError(e)


def render_patterns(ps, indent="  ") -> str:
    out = []
    for p in ps:
        k = p[0]
        if k == "concept":
            out.append(f"{indent}?{p[1]} {render_concept(p[2], p[3], p[4])}")
        elif k == "link":
            var = f"?{p[1]} " if p[1] else ""
            out.append(f"{indent}{var}({render_term(p[2])}, {render_preds(p[3])}, "
                       f"{render_term(p[4])})")
        elif k == "linkid":
            out.append(f"{indent}?{p[1]} (id: {q(p[2])})")
        elif k == "path":
            rng = f"{{{p[3]},{'' if p[4] is None else p[4]}}}" if p[3] != p[4] else f"{{{p[3]}}}"
            out.append(f"{indent}({render_term(p[1])}, {q(p[2])}{rng}, {render_term(p[5])})")
        elif k == "filter":
            out.append(f"{indent}FILTER({render_expr(p[1])})")
        else:
            word = {"not": "NOT", "optional": "OPTIONAL", "union": "UNION"}[k]
            out.append(f"{indent}{word} {{\n{render_patterns(p[1], indent + '  ')}\n{indent}}}")
    return "\n".join(out)


@dataclass
class Query:
    items: list                      # ("path", var, segs) | ("agg", func, distinct, var, segs)
    where: list
    order: list = field(default_factory=list)     # (item index, desc)
    limit: int | None = None

    def text(self) -> str:
        items = ", ".join(render_item(i) for i in self.items)
        out = f"FIND({items})\nWHERE {{\n{render_patterns(self.where)}\n}}"
        if self.order:
            out += "\nORDER BY " + ", ".join(
                render_item(self.items[i]) + (" DESC" if d else " ASC") for i, d in self.order)
        if self.limit is not None:
            out += f"\nLIMIT {self.limit}"
        return out


def render_item(item) -> str:
    if item[0] == "path":
        return render_expr(item)
    _, func, distinct, var, segs = item
    arg = "?" + var + "".join("." + s for s in segs)
    return f"{func}({'DISTINCT ' if distinct else ''}{arg})"


# --- the generator -----------------------------------------------------------------------

class Gen:
    def __init__(self, rng: random.Random, graph: Graph) -> None:
        self.rng = rng
        self.g = graph
        concepts = [e for e in graph.elements.values() if e.kind == "C"]
        links = [e for e in graph.elements.values() if e.kind == "P"]
        self.concepts = concepts
        self.links = links

    def type_(self) -> str:
        return self.rng.choice(TYPES + ["Z"]) if self.rng.random() < 0.1 else \
            self.rng.choice(TYPES)

    def pred(self) -> str:
        return "s" if self.rng.random() < 0.02 else self.rng.choice(PREDICATES)

    def type_name(self) -> tuple[str, str]:
        if self.rng.random() < 0.9:
            e = self.rng.choice(self.concepts)
            return e.type, e.name
        return self.rng.choice(TYPES), "nope"

    def concept_id(self) -> str:
        r = self.rng.random()
        if r < 0.8:
            return self.g.wire_id(self.rng.choice(self.concepts).n)
        if r < 0.9 and self.links:
            return self.g.wire_id(self.rng.choice(self.links).n)
        return "C:99999"

    def link_id(self) -> str:
        r = self.rng.random()
        if r < 0.8 and self.links:
            return self.g.wire_id(self.rng.choice(self.links).n)
        if r < 0.9 and self.links:
            e = self.rng.choice(self.links)
            return f"P:{e.n}:{'q' if e.p != 'q' else 'r'}"
        return "P:99999:p"

    def concept_match(self):
        r = self.rng.random()
        if r < 0.6:
            return (self.type_(), None, None)
        if r < 0.8:
            t, n = self.type_name()
            return (t, n, None)
        if r < 0.9:
            return (None, self.type_name()[1], None)
        return (None, None, self.concept_id())

    def term(self, scope: list[str], depth: int):
        r = self.rng.random()
        if r < 0.7 or depth > 1:
            return ("var", self.var(scope))
        if r < 0.9:
            return ("concept",) + self.concept_match()
        return ("prop", self.term(scope, depth + 1), self.preds(), self.term(scope, depth + 1))

    def var(self, scope: list[str]) -> str:
        if scope and self.rng.random() < 0.5:
            return self.rng.choice(scope)
        v = self.rng.choice(VARS)
        if v not in scope:
            scope.append(v)
        return v

    def fresh_var(self, scope: list[str]) -> str:
        free = [v for v in VARS if v not in scope]
        v = self.rng.choice(free) if free else self.rng.choice(VARS)
        if v not in scope:
            scope.append(v)
        return v

    def preds(self) -> list[str]:
        k = 1 if self.rng.random() < 0.75 else self.rng.randint(2, 3)
        return [self.pred() for _ in range(k)]

    def atom(self, scope: list[str], links: list[str]):
        r = self.rng.random()
        if r < 0.28:
            v = self.var(scope)
            return ("concept", v) + self.concept_match()
        if r < 0.68:
            lv = None
            if self.rng.random() < 0.3:
                lv = self.rng.choice(LINK_VARS)
                if lv not in links:
                    links.append(lv)
            s = self.term(scope, 0)
            o = self.term(scope, 0)
            if s == o and s[0] == "var" and self.rng.random() < 0.8:
                o = ("var", self.fresh_var(scope))
            if self.rng.random() < 0.5:
                s, o = o, s
            return ("link", lv, s, self.preds(), o)
        if r < 0.73:
            lv = self.rng.choice(LINK_VARS)
            if lv not in links:
                links.append(lv)
            return ("linkid", lv, self.link_id())
        lo = self.rng.choice([0, 0, 1, 1, 2, 2, 3])
        hi = self.rng.choice([lo, lo + 1, lo + 2, lo + 3, None])
        s = self.term(scope, 1)
        o = self.term(scope, 1)
        return ("path", s, self.pred(), lo, hi, o)

    def group(self, outer: list[str], depth: int, kind: str) -> tuple[list, list[str]]:
        """Patterns of a block, and the variables it makes visible outside (exports)."""
        scope = [] if kind == "union" else list(outer)
        links: list[str] = []
        patterns = []
        n_atoms = self.rng.randint(1, 3) if kind != "main" else self.rng.randint(1, 3)
        for i in range(n_atoms):
            if i == 0 and kind in ("not", "optional") and outer and self.rng.random() < 0.85:
                # Mostly correlated blocks: the first clause leaves from an outer variable.
                o = ("var", self.fresh_var(scope)) if self.rng.random() < 0.7 else \
                    ("concept", self.type_(), None, None)
                ends = [("var", self.rng.choice(outer)), o]
                if self.rng.random() < 0.5:
                    ends.reverse()
                patterns.append(("link", None, ends[0], self.preds(), ends[1]))
                continue
            patterns.append(self.atom(scope, links))
        own = [v for v in scope if v not in outer or kind == "union"] + links
        visible = list(dict.fromkeys(([] if kind == "union" else list(outer)) + scope + links))
        exported = list(own)
        if depth < 2:
            for _ in range(self.rng.choice([0, 0, 1, 1, 2])):
                sub_kind = self.rng.choice(["not", "optional", "union"])
                sub, sub_exports = self.group(visible, depth + 1, sub_kind)
                patterns.append((sub_kind, sub))
                if sub_kind != "not":
                    for v in sub_exports:
                        if v not in visible:
                            visible.append(v)
                        if v not in exported:
                            exported.append(v)
        for _ in range(self.rng.choice([0, 0, 0, 1, 1, 2]) if visible else 0):
            patterns.append(("filter", self.expr(visible, 0)))
        if self.rng.random() < 0.2:
            self.rng.shuffle(patterns)
            last = max((i for i, p in enumerate(patterns) if p[0] == "union"), default=None)
            if last is not None and last < len(patterns) - 1:
                # Clauses follow a UNION (CONTRACT §5): a FILTER before it could name a
                # variable bound only after it (KIP_3001); FILTERs last see everything.
                patterns = [p for p in patterns if p[0] != "filter"] + \
                    [p for p in patterns if p[0] == "filter"]
        return patterns, exported

    def operand(self, visible: list[str]):
        v = self.rng.choice(visible)
        segs = self.rng.choice([(), ("name",), ("type",), ("id",), ("attributes", "v"),
                                ("attributes", "v"), ("attributes", "v"), ("attributes", "s"),
                                ("attributes", "s"), ("attributes", "w"), ("attributes", "x"),
                                ("attributes", "t"), ("attributes", "c"), ("metadata", "m"),
                                ("predicate",), ("subject",), ("attributes", "missing"),
                                ("name",), ("type",)])
        return ("path", v, segs)

    def sample_value(self, segs: tuple):
        """A value some element really has at `segs` (so comparisons split the data)."""
        e = self.rng.choice(list(self.g.elements.values()))
        v = Reference(self.g).value(e.n, segs)
        return v if not isinstance(v, (list, dict)) else None

    def literal(self):
        return ("lit", self.rng.choice([None, True, False, 0, 1, 2, 1.25, -1, "apple", "an",
                                        "k1", "A", "p", "2025-01-01T00:00:00Z",
                                        "2025-03-01T00:00:00Z", "1", 3, "B", "k5", 0.5]))

    def expr(self, visible: list[str], depth: int):
        r = self.rng.random()
        if depth < 2 and r < 0.15:
            return (self.rng.choice(["and", "or"]),
                    [self.expr(visible, depth + 1) for _ in range(2)])
        if depth < 2 and r < 0.22:
            return ("neg", self.expr(visible, depth + 1))
        if r < 0.6:
            left = self.operand(visible)
            if self.rng.random() < 0.2:
                right = self.operand(visible)
            elif self.rng.random() < 0.6:
                right = ("lit", self.sample_value(left[2]))
            else:
                right = self.literal()
            return ("cmp", self.rng.choice(["==", "!=", "!=", "<", ">", "<=", ">=", ">="]),
                    left, right)
        fn = self.rng.choice(["IN", "IS_NULL", "IS_NOT_NULL", "CONTAINS", "STARTS_WITH",
                              "ENDS_WITH", "REGEX"])
        x = self.operand(visible)
        if fn == "IN":
            items = [self.literal()[1] for _ in range(self.rng.randint(0, 3))]
            return ("call", fn, [x, ("lit", items)])
        if fn in ("IS_NULL", "IS_NOT_NULL"):
            return ("call", fn, [x])
        if fn == "REGEX":
            args = [x, ("lit", self.rng.choice(["^a", "n$", "an", "^[Ab]", "^k[0-3]", "p"]))]
            if self.rng.random() < 0.3:
                args.append(("lit", "i"))
            return ("call", fn, args)
        return ("call", fn, [x, ("lit", self.rng.choice(["a", "an", "k", "", "A", "e"]))])

    def query(self) -> Query | None:
        where, exported = self.group([], 0, "main")
        named = [v for v in exported]
        if not named:
            return None
        items: list = []
        aggregate = self.rng.random() < 0.3
        for _ in range(self.rng.randint(1, 3)):
            items.append(self.operand(named))
        if aggregate:
            items = items[:self.rng.randint(0, 2)]
            for _ in range(self.rng.randint(1, 2)):
                func = self.rng.choice(["COUNT", "COUNT", "SUM", "AVG", "MIN", "MAX"])
                distinct = func == "COUNT" and self.rng.random() < 0.4
                _, v, segs = self.operand(named)
                if func in ("SUM", "AVG", "MIN", "MAX"):
                    segs = self.rng.choice([("attributes", "v"), ("attributes", "w"),
                                            ("attributes", "c"), ("attributes", "s"),
                                            ("attributes", "x")])
                items.append(("agg", func, distinct, v, segs))
        order = []
        if self.rng.random() < 0.35:
            for i in self.rng.sample(range(len(items)), self.rng.randint(1, len(items))):
                if items[i][0] == "path" and items[i][2] in ((), ("id",), ("subject",)):
                    continue           # ids order by text; fine but uninteresting
                order.append((i, self.rng.random() < 0.5))
        limit = self.rng.randint(1, 6) if self.rng.random() < 0.25 else None
        return Query(items, where, order, limit)


# =========================================================================================
# The reference evaluator: nested loops over every element.
# =========================================================================================

class NotFound(Exception):
    pass


class TooBig(Exception):
    pass


_MISSING = object()
ROW_LIMIT = 20_000


class Reference:
    def __init__(self, graph: Graph) -> None:
        self.g = graph
        self.elements = list(graph.elements.values())
        self.hidden = 0
        self._walks: dict = {}
        self._succ: dict = {}

    # --- WHERE ---------------------------------------------------------------------------
    def solutions(self, where: list) -> list[dict]:
        self.check_mandatory(where)
        return self.group(where, {}, "main")

    def check_mandatory(self, patterns: list) -> None:
        """Mandatory constants: {id}, {type, name} and (id:) clauses of the main block,
        also as anonymous ends (not inside NOT / OPTIONAL / UNION)."""
        def concept_ok(type_, name, id_):
            if id_ is not None:
                if self.concept_by_id(id_) is None:
                    raise NotFound(id_)
            elif type_ is not None and name is not None:
                if not any(e.kind == "C" and e.type == type_ and e.name == name
                           for e in self.elements):
                    raise NotFound(name)

        def term(t):
            if t[0] == "concept":
                concept_ok(t[1], t[2], t[3])
            elif t[0] == "prop":
                term(t[1])
                term(t[3])

        for p in patterns:
            if p[0] == "concept":
                concept_ok(p[2], p[3], p[4])
            elif p[0] == "link":
                term(p[2])
                term(p[4])
            elif p[0] == "path":
                term(p[1])
                term(p[5])
            elif p[0] == "linkid":
                if self.link_by_id(p[2]) is None:
                    raise NotFound(p[2])

    def concept_by_id(self, text: str):
        m = re.fullmatch(r"C:(\d+)", text)
        e = self.g.elements.get(int(m.group(1))) if m else None
        return e if e is not None and e.kind == "C" else None

    def link_by_id(self, text: str):
        m = re.fullmatch(r"P:(\d+):(\w+)", text)
        e = self.g.elements.get(int(m.group(1))) if m else None
        return e if e is not None and e.kind == "P" and e.p == m.group(2) else None

    def group(self, patterns: list, inputs: dict, kind: str) -> list[dict]:
        """CONTRACT §5, as a left fold: a UNION's rows are appended to the rows of what
        precedes it, and the clauses after a UNION run apply to all those rows (padded with
        null for what they do not bind)."""
        last = max((i for i, p in enumerate(patterns) if p[0] == "union"), default=None)
        if last is None:
            return self.block(patterns, inputs, kind)
        if last < len(patterns) - 1:            # clauses follow the last UNION run
            head, tail = patterns[:last + 1], patterns[last + 1:]
            rows = []
            for r in self.group(head, inputs, kind):
                rows.extend(self.block(tail, self.padded(r, head, inputs), kind))
            return self.distinct([self.padded(r, patterns, inputs) for r in rows])
        start = last
        while start > 0 and patterns[start - 1][0] == "union":
            start -= 1
        before = patterns[:start]
        if not any(p[0] == "union" for p in before):
            return self.block(patterns, inputs, kind)
        rows = self.group(before, inputs, kind)     # a continued UNION: one more branch
        rows += self.union_rows(patterns[start:], inputs)
        return self.distinct([self.padded(r, patterns, inputs) for r in rows])

    def padded(self, row: dict, patterns: list, inputs: dict) -> dict:
        row = dict(row)
        for v in self.exported(patterns, inputs):
            row.setdefault(v, None)
        return row

    def union_rows(self, unions: list, inputs: dict) -> list[dict]:
        """Each UNION branch's rows (no outer binding inside) joined with `inputs`."""
        out = []
        for u in unions:
            for urow in self.group(u[1], {}, "union"):
                merged = dict(inputs)
                ok = True
                for k, v in urow.items():
                    if k in inputs:
                        if inputs[k] != v:
                            ok = False
                            break
                    else:
                        merged[k] = v
                if ok:
                    out.append(merged)
        return out

    def block(self, patterns: list, inputs: dict, kind: str) -> list[dict]:
        """A block whose UNIONs, if any, are its last clauses (no continuation)."""
        atoms = [p for p in patterns if p[0] in ("concept", "link", "linkid", "path")]
        nested = [p for p in patterns if p[0] in ("not", "optional")]
        filters = [p[1] for p in patterns if p[0] == "filter"]
        unions = [p[1] for p in patterns if p[0] == "union"]
        exported = self.exported(patterns, inputs)
        out: list[dict] = []
        if not (unions and not atoms and not nested):
            rows = [dict(inputs)]
            for atom in atoms:
                rows = self.atom(atom, rows)
            rows = self.project(rows)          # hidden variables are existential
            for p in nested:
                rows = self.nested(p, rows, inputs)
            rows = [r for r in rows if all(self.test(f, r) for f in filters)]
            out.extend(rows)
        out += self.union_rows([p for p in patterns if p[0] == "union"], inputs)
        full = []
        for r in out:
            r = dict(r)
            for v in exported:
                r.setdefault(v, None)
            full.append(r)
        return self.distinct(full)

    def exported(self, patterns: list, inputs: dict) -> list[str]:
        """Named variables a block binds that are visible outside it."""
        out: list[str] = []

        def add(v):
            if v is not None and not v.startswith("#") and v not in inputs and v not in out:
                out.append(v)

        def term(t):
            if t[0] == "var":
                add(t[1])
            elif t[0] == "prop":
                term(t[1])
                term(t[3])

        for p in patterns:
            if p[0] == "concept":
                add(p[1])
            elif p[0] == "link":
                add(p[1])
                term(p[2])
                term(p[4])
            elif p[0] == "linkid":
                add(p[1])
            elif p[0] == "path":
                term(p[1])
                term(p[5])
            elif p[0] in ("optional", "union"):
                for v in self.exported(p[1], inputs if p[0] == "optional" else {}):
                    add(v)
        return out

    def nested(self, p, rows: list[dict], inputs: dict) -> list[dict]:
        out = []
        for row in rows:
            sub = self.group(p[1], row, p[0])
            if p[0] == "not":
                if not sub:
                    out.append(row)
            elif sub:
                out.extend(sub)
            else:
                padded = dict(row)
                for v in self.exported(p[1], row):
                    padded[v] = None
                out.append(padded)
            if len(out) > ROW_LIMIT:
                raise TooBig()
        return out

    @staticmethod
    def project(rows: list[dict]) -> list[dict]:
        return Reference.distinct([{k: v for k, v in r.items() if not k.startswith("#")}
                                   for r in rows])

    @staticmethod
    def distinct(rows: list[dict]) -> list[dict]:
        seen = set()
        out = []
        for r in rows:
            key = tuple(sorted(r.items(), key=lambda kv: kv[0]))
            if key not in seen:
                seen.add(key)
                out.append(r)
        return out

    # --- atoms (each extends every row by scanning every element) -------------------------
    def fresh(self) -> str:
        self.hidden += 1
        return f"#{self.hidden}"

    def desugar_term(self, t, extra: list) -> str:
        """A term → a variable; anonymous clauses become hidden variables plus atoms."""
        if t[0] == "var":
            return t[1]
        v = self.fresh()
        if t[0] == "concept":
            extra.append(("concept", v, t[1], t[2], t[3]))
        else:
            extra.append(("link", v, t[1], t[2], t[3]))
        return v

    def atom(self, atom, rows: list[dict]) -> list[dict]:
        kind = atom[0]
        if kind == "concept":
            _, var, type_, name, id_ = atom
            out = []
            for row in rows:
                for e in self.candidates(row, var):
                    if e is None or e.kind != "C":
                        continue
                    if type_ is not None and e.type != type_:
                        continue
                    if name is not None and e.name != name:
                        continue
                    if id_ is not None and self.g.wire_id(e.n) != id_:
                        continue
                    out.append({**row, var: e.n})
            return self.check_size(out)
        if kind == "linkid":
            _, var, id_ = atom
            target = self.link_by_id(id_)
            out = []
            for row in rows:
                for e in self.candidates(row, var):
                    if e is not None and target is not None and e.n == target.n:
                        out.append({**row, var: e.n})
            return out
        if kind == "link":
            _, lvar, s_t, preds, o_t = atom
            extra: list = []
            s = self.desugar_term(s_t, extra)
            o = self.desugar_term(o_t, extra)
            lv = lvar or self.fresh()
            out = []
            for row in rows:
                for e in self.candidates(row, lv):
                    if e is None or e.kind != "P" or e.p not in preds:
                        continue
                    r = self.bind(row, lv, e.n)
                    r = r and self.bind(r, s, e.s)
                    r = r and self.bind(r, o, e.o)
                    if r is not None:
                        out.append(r)
            out = self.check_size(out)
            for a in extra:
                out = self.atom(a, out)
            return out
        if kind == "path":
            _, s_t, pred, lo, hi, o_t = atom
            extra = []
            s = self.desugar_term(s_t, extra)
            o = self.desugar_term(o_t, extra)
            out = []
            for row in rows:
                for e in self.candidates(row, s):
                    if e is None:
                        continue
                    for end in self.walk(e.n, pred, lo, hi):
                        r = self.bind(row, s, e.n)
                        r = r and self.bind(r, o, end)
                        if r is not None:
                            out.append(r)
            out = self.check_size(out)
            for a in extra:
                out = self.atom(a, out)
            return out
        raise ValueError(atom)

    def candidates(self, row: dict, var: str):
        """The element a bound variable holds (None for null), or every element."""
        if var in row:
            n = row[var]
            return [None if n is None else self.g.elements[n]]
        return self.elements

    @staticmethod
    def bind(row: dict, var: str, value: int) -> dict | None:
        if var in row:
            return row if row[var] == value else None
        return {**row, var: value}

    def walk(self, start: int, pred: str, lo: int, hi: int | None) -> set[int]:
        """Ends of walks of lo..hi hops (hi None: any length ≥ lo) following `pred`: the
        union of the exact-k level sets for k = lo..hi (an open range stops at lo + the
        number of elements, past which no new end can appear)."""
        key = (start, pred, lo, hi)
        hit = self._walks.get(key)
        if hit is not None:
            return hit
        if hi is None:
            hi = lo + len(self.elements)
        succ = self.successors(pred)
        level = {start}
        out = set(level) if lo == 0 else set()
        for k in range(1, hi + 1):
            level = {o for x in level for o in succ.get(x, ())}
            if k >= lo:
                out |= level
            if not level:
                break
        self._walks[key] = out
        return out

    def successors(self, pred: str) -> dict[int, list[int]]:
        hit = self._succ.get(pred)
        if hit is None:
            hit = self._succ[pred] = {}
            for e in self.elements:
                if e.kind == "P" and e.p == pred:
                    hit.setdefault(e.s, []).append(e.o)
        return hit

    @staticmethod
    def check_size(rows: list) -> list:
        if len(rows) > ROW_LIMIT:
            raise TooBig()
        return rows

    # --- values --------------------------------------------------------------------------
    def value(self, n: int | None, segs: tuple) -> Any:
        if n is None:
            return None
        e = self.g.elements[n]
        if not segs:
            return self.g.wire_id(n)
        f = segs[0]
        if f in ("attributes", "metadata"):
            v: Any = e.attributes if f == "attributes" else e.metadata
            for k in segs[1:]:
                v = v.get(k) if isinstance(v, dict) else None
            return v
        if f == "id":
            return self.g.wire_id(n)
        if e.kind == "C":
            return {"type": e.type, "name": e.name}.get(f)
        if f == "predicate":
            return e.p
        if f == "subject":
            return self.g.wire_id(e.s)
        if f == "object":
            return self.g.wire_id(e.o)
        return None

    def element_json(self, n: int | None) -> Any:
        if n is None:
            return None
        e = self.g.elements[n]
        if e.kind == "C":
            out = {"_type": "ConceptNode", "id": self.g.wire_id(n), "type": e.type,
                   "name": e.name}
        else:
            out = {"_type": "PropositionLink", "id": self.g.wire_id(n),
                   "subject": self.g.wire_id(e.s), "predicate": e.p,
                   "object": self.g.wire_id(e.o)}
        if e.attributes:
            out["attributes"] = e.attributes
        if e.metadata:
            out["metadata"] = e.metadata
        return out

    def project_item(self, item, row: dict) -> Any:
        _, var, segs = item
        return self.element_json(row.get(var)) if not segs else self.value(row.get(var), segs)

    # --- FILTER --------------------------------------------------------------------------
    def test(self, expr, row: dict) -> bool:
        return self.eval(expr, row) is True

    def eval(self, e, row: dict) -> Any:
        k = e[0]
        if k == "path":
            return self.value(row.get(e[1]), e[2])
        if k == "lit":
            return e[1]
        if k == "cmp":
            a, b = self.eval(e[2], row), self.eval(e[3], row)
            return compare(e[1], a, b)
        if k == "and":
            return all(self.eval(x, row) is True for x in e[1])
        if k == "or":
            return any(self.eval(x, row) is True for x in e[1])
        if k == "neg":
            return self.eval(e[1], row) is not True
        fn, args = e[1], [self.eval(a, row) for a in e[2]]
        if fn == "IS_NULL":
            return args[0] is None
        if fn == "IS_NOT_NULL":
            return args[0] is not None
        if fn == "IN":
            return any(equal(args[0], x) for x in args[1])
        if fn == "CONTAINS":
            if isinstance(args[0], str):
                return isinstance(args[1], str) and args[1] in args[0]
            if isinstance(args[0], list):
                return any(equal(x, args[1]) for x in args[0])
            return False
        if fn in ("STARTS_WITH", "ENDS_WITH"):
            if not (isinstance(args[0], str) and isinstance(args[1], str)):
                return False
            return args[0].startswith(args[1]) if fn == "STARTS_WITH" else \
                args[0].endswith(args[1])
        if fn == "REGEX":
            if not isinstance(args[0], str):
                return False
            flags = re.I if len(args) == 3 and "i" in args[2] else 0
            return re.search(args[1], args[0], flags) is not None
        raise ValueError(fn)


def jkind(v) -> int:
    if v is None:
        return 0
    if isinstance(v, bool):
        return 1
    if isinstance(v, (int, float)):
        return 2
    if isinstance(v, str):
        return 3
    return 4


def instant(text: str):
    try:
        d = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return d if d.tzinfo else d.replace(tzinfo=timezone.utc)


def as_comparable(a, b):
    if isinstance(a, str) and isinstance(b, str):
        ia, ib = instant(a), instant(b)
        if ia is not None and ib is not None:
            return ia, ib
    return a, b


def equal(a, b) -> bool:
    if jkind(a) != jkind(b):
        return False
    a, b = as_comparable(a, b)
    return a == b


def compare(op: str, a, b) -> bool:
    if op == "==":
        return equal(a, b)
    if op == "!=":
        return not equal(a, b)
    if jkind(a) != jkind(b) or jkind(a) in (0, 4):
        return False
    a, b = as_comparable(a, b)
    return {"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op]


# --- result shaping ------------------------------------------------------------------------

def sort_key(v):
    """ORDER BY order: booleans < numbers < strings < arrays/objects; nulls handled apart."""
    return (jkind(v), json.dumps(v, sort_keys=True) if jkind(v) == 4 else v)


def row_cmp(a: list, b: list, order: list) -> int:
    for i, desc in order:
        x, y = a[i], b[i]
        if x is None or y is None:
            if x is None and y is None:
                continue
            return 1 if x is None else -1          # nulls last in both directions
        kx, ky = sort_key(x), sort_key(y)
        if kx == ky:
            continue
        less = kx < ky
        return (1 if less else -1) if desc else (-1 if less else 1)
    return 0


def group_key(v):
    """Group keys compare like FILTER ==: by kind, numbers by value (true is not 1)."""
    k = jkind(v)
    if k == 4:
        return (k, json.dumps(v, sort_keys=True))
    return (k, v)


def aggregate(func: str, distinct: bool, values: list) -> Any:
    present = [v for v in values if v is not None]
    if func == "COUNT":
        if distinct:
            return len({group_key(v) for v in present})
        return len(present)
    nums = [v for v in present if jkind(v) == 2]
    if func == "SUM":
        return sum(nums) if nums else 0
    if func == "AVG":
        return float(sum(nums)) / len(nums) if nums else None
    if not present:
        return None
    best = present[0]
    for v in present[1:]:
        if (sort_key(v) < sort_key(best)) if func == "MIN" else (sort_key(v) > sort_key(best)):
            best = v
    return best


def reference_rows(ref: Reference, query: Query, solutions: list[dict]) -> list[list]:
    """The expected rows (unordered, before ORDER BY / LIMIT)."""
    if not any(i[0] == "agg" for i in query.items):
        seen = set()
        rows = []
        vars_ = list(dict.fromkeys(i[1] for i in query.items))
        for s in solutions:
            key = tuple(s.get(v) for v in vars_)
            if key in seen:
                continue
            seen.add(key)
            rows.append([ref.project_item(i, s) for i in query.items])
        return rows
    plain = [i for i in query.items if i[0] == "path"]
    groups: dict = {}
    for s in solutions:
        key_vals = []
        for i in plain:
            if not i[2]:
                key_vals.append(("#id", s.get(i[1])))
            else:
                key_vals.append(group_key(ref.project_item(i, s)))
        groups.setdefault(tuple(key_vals), []).append(s)
    only_aggs = not plain
    if only_aggs and not groups:
        groups[()] = []
    rows = []
    for members in groups.values():
        row = []
        for i in query.items:
            if i[0] == "path":
                row.append(ref.project_item(i, members[0]))
            else:
                _, func, distinct, var, segs = i
                if segs:
                    vals = [ref.value(m.get(var), segs) for m in members]
                else:
                    vals = [m.get(var) for m in members]
                row.append(aggregate(func, distinct, vals))
        rows.append(row)
    return rows


# =========================================================================================
# The test
# =========================================================================================

def engine_rows(result: Any, n_items: int) -> list[list]:
    if n_items == 1:
        return [[v] for v in result]
    assert len(result) == n_items, result
    assert len({len(c) for c in result}) <= 1, result
    return [list(r) for r in zip(*result)]


def strip_engine_meta(v):
    if isinstance(v, list):
        return [strip_engine_meta(x) for x in v]
    if isinstance(v, dict):
        out = {k: strip_engine_meta(x) for k, x in v.items()
               if k not in ("_version", "_created_at", "_updated_at")}
        if "_type" in out and out.get("metadata") == {}:
            del out["metadata"]
        return out
    return v


def run_engine(nx, text: str) -> tuple[Any, Any]:
    response = nx.execute_kip({"command": text})
    if "error" in response:
        return "error", response["error"]
    return response, None


def check_pair(nx, ref: Reference, query: Query, solutions: list[dict] | None,
               ids: dict[int, int], label: str) -> None:
    """Both executors against the reference, and against each other (same rows in the
    same order, same pages)."""
    responses = []
    for mode in MODES:
        nx.columnar = mode
        responses.append(check_one(nx, ref, query, solutions, ids, f"{label} columnar={mode}"))
    assert responses[0] == responses[1], (
        f"\n{label}\n--- query ---\n{query.text()}\nexecutors differ:\n"
        f"  {MODES[0]}: {json.dumps(responses[0], default=str)[:1500]}\n"
        f"  {MODES[1]}: {json.dumps(responses[1], default=str)[:1500]}")


def check_one(nx, ref: Reference, query: Query, solutions: list[dict] | None,
              ids: dict[int, int], label: str) -> list:
    """`solutions` is the reference's answer (None: it expects KIP_3002). Returns the
    engine's responses (every page)."""
    # The model's ids are the store's ids (written in order into an empty store).
    assert all(k == v for k, v in ids.items())
    text = query.text()
    expected_error = "KIP_3002" if solutions is None else None
    response, error = run_engine(nx, text)
    context = f"\n{label}\n--- query ---\n{text}\n"
    if expected_error:
        assert error is not None and error["code"] == expected_error, \
            context + f"expected {expected_error}, engine: {response if error is None else error}"
        return [error["code"]]
    assert error is None, context + f"engine error {error}"
    n_items = len(query.items)
    only_aggs = all(i[0] == "agg" for i in query.items)
    expected = reference_rows(ref, query, solutions)
    result = strip_engine_meta(response["result"])
    if only_aggs:
        got = [result] if n_items == 1 else [result]
        got = [[result]] if n_items == 1 else [result]
        assert [canon(x) for x in got[0]] == [canon(x) for x in expected[0]], \
            context + f"expected {expected[0]}\nengine   {got[0]}"
        return [strip_engine_meta(response)]
    rows = engine_rows(result, n_items)
    pages = [rows]
    seen = [strip_engine_meta(response)]
    cursor = response.get("next_cursor")
    complete = True
    if query.limit is not None:
        assert len(rows) == min(query.limit, len(expected)), \
            context + f"LIMIT {query.limit}: {len(rows)} rows of {len(expected)}"
        assert (cursor is not None) == (len(expected) > query.limit), context + "next_cursor"
        while cursor is not None and len(pages) < MAX_PAGES:
            more = nx.execute_kip({"command": text + " CURSOR :c", "parameters": {"c": cursor}})
            assert "error" not in more, context + f"paging: {more}"
            seen.append(strip_engine_meta(more))
            pages.append(engine_rows(strip_engine_meta(more["result"]), n_items))
            cursor = more.get("next_cursor")
            assert len(pages[-1]) == query.limit or cursor is None, context + "short page"
        rows = [r for p in pages for r in p]
        complete = cursor is None
    else:
        assert cursor is None, context + "unexpected next_cursor"
    got, want = sorted(map(canon, rows)), sorted(map(canon, expected))
    if complete:
        assert got == want, (
            context + f"expected ({len(expected)}): {want[:20]}\n"
            f"engine   ({len(rows)}): {got[:20]}")
    else:   # the first MAX_PAGES pages: a sub-multiset of the answer
        remaining = {}
        for c in want:
            remaining[c] = remaining.get(c, 0) + 1
        for c in got:
            assert remaining.get(c, 0) > 0, context + f"engine row not expected: {c}"
            remaining[c] -= 1
    if query.order:
        for a, b in zip(rows, rows[1:]):
            assert row_cmp(a, b, query.order) <= 0, context + f"not sorted: {a} before {b}"
    return seen


def test_differential(tmp_path) -> None:
    rng = random.Random(SEED)
    pairs = skipped = 0
    graphs = 0
    while pairs < PAIRS:
        graph_seed = rng.randrange(2**32)
        grng = random.Random(graph_seed)
        graph = Graph(grng)
        stores = []
        for kind in ("memory", "lmdb"):
            nx = open_db(kind, tmp_path / f"g{graphs}" if kind == "lmdb" else None)
            stores.append((kind, nx, graph.write_to(nx)))
        graphs += 1
        try:
            made = 0
            attempts = 0
            while made < QUERIES_PER_GRAPH and attempts < QUERIES_PER_GRAPH * 4:
                attempts += 1
                query = Gen(grng, graph).query()
                if query is None:
                    continue
                ref = Reference(graph)
                try:
                    solutions = ref.solutions(query.where)
                except TooBig:
                    skipped += 1
                    continue
                except NotFound:
                    solutions = None
                for kind, nx, ids in stores:
                    check_pair(nx, ref, query, solutions, ids,
                               f"seed={SEED} graph_seed={graph_seed} store={kind}")
                made += 1
                pairs += 1
        finally:
            for _, nx, _ in stores:
                nx.close()
    assert pairs >= min(PAIRS, 500)
    assert skipped < pairs // 4, f"too many oversized queries skipped: {skipped}"
