"""The binder: a FIND's WHERE (syntax AST) → a logical query of groups and atoms.

Binding resolves what the syntax leaves open, and nothing that depends on data:
* every anonymous clause becomes a hidden variable (`#1`, `#2`, ...; not a valid KIP
  identifier, so it can never clash with a user's `?name`) plus an atom, so that the planner
  sees one flat conjunction of atoms per group:
    `(?d, "treats", {type: "Symptom", name: :s})`
      → ConceptAtom(#1, type="Symptom", name=:s) ∧ LinkAtom(None, ?d, ["treats"], #1)
* scoping (spec §3.4.7, CONTRACT §5): each `NOT`/`OPTIONAL`/`UNION` body is a nested
  `Group`; OPTIONAL sees outer variables and exports its own; NOT sees outer variables and
  exports nothing; UNION sees nothing outside and exports its own; the clauses written after
  a block's last UNION run are its continuation (`Group.then`), joined with every row of the
  main branch and the UNION branches (CONTRACT §5);
* `KIP_3001` for a variable used (FIND, FILTER, ORDER BY) but bound nowhere it is visible.

Values stay `ast.Value` nodes (Literal or Param): parameters are read at execution, so one
logical/physical plan serves every execution of a prepared command.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable, Iterator

from ..errors import ErrorCode, KipError
from ..syntax import ast as A


# --- atoms -------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ConceptAtom:
    """`?var {id | type | name | type+name}` — binds or narrows `var` to concept nodes."""
    var: str
    id: A.Value | None
    type: A.Value | None
    name: A.Value | None
    mandatory: bool                  # outside OPTIONAL/NOT/UNION: no match → KIP_3002
    pos: A.Pos | None = None

    @property
    def vars(self) -> tuple[str, ...]:
        return (self.var,)

    @property
    def is_constant(self) -> bool:
        """Matches at most one node known before any row exists ({id} or {type, name})."""
        return self.id is not None or (self.type is not None and self.name is not None)


@dataclass(frozen=True, slots=True)
class LinkAtom:
    """`?link (?s, "p" | "q", ?o)` — one hop; `link` is None for an anonymous clause."""
    link: str | None
    subject: str
    predicates: tuple[A.Value, ...]
    object: str
    pos: A.Pos | None = None

    @property
    def vars(self) -> tuple[str, ...]:
        base = (self.subject, self.object)
        return base + (self.link,) if self.link else base


@dataclass(frozen=True, slots=True)
class LinkIdAtom:
    """`?link (id: "P:...")`."""
    link: str
    id: A.Value
    mandatory: bool
    pos: A.Pos | None = None

    @property
    def vars(self) -> tuple[str, ...]:
        return (self.link,)


@dataclass(frozen=True, slots=True)
class PathAtom:
    """`(?s, "p"{lo,hi}, ?o)` — distinct (s, o) pairs joined by a walk of lo..hi hops."""
    subject: str
    predicate: A.Value
    lo: int
    hi: int | None
    object: str
    pos: A.Pos | None = None

    @property
    def vars(self) -> tuple[str, ...]:
        return (self.subject, self.object)


# --- RC11 §3.4.2: predicate variables ------------------------------------------------------

@dataclass(frozen=True, slots=True)
class AnyLinkAtom:
    """`?link (?s, ?p, ?o)` — one hop over any predicate; `pred` binds the predicate name
    (held in rows as the negated symbol id, see nexus.exec.env)."""
    link: str | None
    subject: str
    pred: str
    object: str
    pos: A.Pos | None = None
    # A value (a string, or an array of strings) that a FILTER of the same block requires
    # ?p to equal (`?p == v`) or be in (`IN(?p, v)`): only those predicates are read. The
    # FILTER still runs; this only narrows what the indexes are asked for.
    narrow: A.Value | None = None

    @property
    def vars(self) -> tuple[str, ...]:
        base = (self.subject, self.object, self.pred)
        return base + (self.link,) if self.link else base


Atom = ConceptAtom | LinkAtom | LinkIdAtom | PathAtom | AnyLinkAtom


@dataclass
class Group:
    """A block of conjunctive atoms and filters, with its nested blocks in text order."""
    atoms: list[Atom] = field(default_factory=list)
    filters: list[A.Expr] = field(default_factory=list)
    nested: list[tuple[str, Group]] = field(default_factory=list)   # ("optional"|"not", …)
    unions: list[Group] = field(default_factory=list)
    kind: str = "main"                            # main | optional | not | union | then
    # The clauses written after the block's last UNION run: joined with every row the
    # block gives (main branch and UNION branches alike), seeing those rows' variables.
    then: Group | None = None

    def atom_vars(self) -> set[str]:
        return {v for a in self.atoms for v in a.vars}

    def children(self) -> list[Group]:
        """Every block directly inside this one: OPTIONAL/NOT bodies, UNION branches and
        the continuation."""
        return [sub for _, sub in self.nested] + self.unions + (
            [] if self.then is None else [self.then])

    def exported(self) -> set[str]:
        """Variables this group binds that are visible outside it."""
        out = self.atom_vars()
        for kind, sub in self.nested:
            if kind == "optional":
                out |= sub.exported()
        for sub in self.unions:
            out |= sub.exported()
        if self.then is not None:
            out |= self.then.exported()
        return out


@dataclass
class LogicalQuery:
    root: Group
    hidden: int                         # number of hidden variables created
    predicate_vars: frozenset[str] = frozenset()   # variables in a predicate position


# --- the binder --------------------------------------------------------------------------

class _Binder:
    def __init__(self) -> None:
        self.hidden = 0
        self.predicate_vars: dict[str, A.Pos | None] = {}

    def fresh(self) -> str:
        self.hidden += 1
        return f"#{self.hidden}"

    def group(self, body: Iterable[A.Pattern], kind: str,
              mandatory: bool | None = None) -> Group:
        body = tuple(body)
        split = _continuation(body)
        if split is not None:
            return self.continued(body, *split, kind=kind, mandatory=mandatory)
        g = Group(kind=kind)
        mandatory = kind == "main" if mandatory is None else mandatory
        for p in body:
            if isinstance(p, A.ConceptPattern):
                var = p.var if p.var is not None else self.fresh()
                self.concept(g, var, p.match, mandatory)
            elif isinstance(p, A.PropositionPattern):
                self.proposition(g, p.var, p.match, mandatory)
            elif isinstance(p, A.FilterPattern):
                g.filters.append(p.expr)
            elif isinstance(p, A.OptionalPattern):
                g.nested.append(("optional", self.group(p.body, "optional")))
            elif isinstance(p, A.NotPattern):
                g.nested.append(("not", self.group(p.body, "not")))
            elif isinstance(p, A.UnionPattern):
                g.unions.append(self.group(p.body, "union"))
            else:  # pragma: no cover - closed union
                raise TypeError(p)
        return g

    def continued(self, body: tuple[A.Pattern, ...], start: int, end: int, kind: str,
                  mandatory: bool | None) -> Group:
        """`… UNION {…} tail`, `body[start:end]` being the last run of UNION blocks and the
        tail (no UNION) after it: the tail is the block's continuation (`Group.then`), run
        on each combined row (CONTRACT §5: clauses after a UNION apply to the rows of every
        branch). Before the run, `before`: plain clauses become the main branch; when they
        hold a UNION continued themselves, their value is one more branch."""
        before = body[:start]
        main = kind == "main" if mandatory is None else mandatory
        if _continuation(before) is None:
            g = self.group(body[:end], kind, mandatory)
        else:
            g = Group(kind=kind)
            g.unions.append(self.group(before, "union", main))
            g.unions.extend(self.group(u.body, "union")
                            for u in body[start:end] if isinstance(u, A.UnionPattern))
        g.then = self.group(body[end:], "then", main)
        return g

    def concept(self, g: Group, var: str, m: A.ConceptMatch, mandatory: bool) -> None:
        g.atoms.append(ConceptAtom(var, m.id, m.type, m.name, mandatory, m.pos))

    def term(self, g: Group, t: A.Term, mandatory: bool) -> str:
        if isinstance(t, A.VarTerm):
            return t.name
        var = self.fresh()
        if isinstance(t, A.ConceptMatch):
            self.concept(g, var, t, mandatory)
        else:
            self.proposition(g, var, t, mandatory)
        return var

    def proposition(self, g: Group, var: str | None,
                    m: A.PropositionMatch | A.PropositionIdMatch, mandatory: bool) -> str:
        if isinstance(m, A.PropositionIdMatch):
            var = var or self.fresh()
            g.atoms.append(LinkIdAtom(var, m.id, mandatory, m.pos))
            return var
        subject = self.term(g, m.subject, mandatory)
        obj = self.term(g, m.object, mandatory)
        pred = m.predicate
        if isinstance(pred, A.PredicateVar):
            self.predicate_vars.setdefault(pred.name, pred.pos)
            g.atoms.append(AnyLinkAtom(var, subject, pred.name, obj, m.pos))
            return var or ""
        if pred.hops is not None:
            lo, hi = pred.hops
            g.atoms.append(PathAtom(subject, pred.names[0], lo, hi, obj, m.pos))
            return var or ""
        g.atoms.append(LinkAtom(var, subject, pred.names, obj, m.pos))
        return var or ""


def _continuation(body: tuple[A.Pattern, ...]) -> tuple[int, int] | None:
    """(start, end) of the last run of UNION blocks that clauses follow, or None when no
    clause follows any UNION."""
    last = max((i for i, p in enumerate(body) if isinstance(p, A.UnionPattern)), default=None)
    if last is None or last == len(body) - 1:
        return None
    start = last
    while start > 0 and isinstance(body[start - 1], A.UnionPattern):
        start -= 1
    return start, last + 1


def bind_where(where: Iterable[A.Pattern]) -> LogicalQuery:
    b = _Binder()
    root = b.group(where, "main")
    _check_filters(root, set())
    preds = frozenset(b.predicate_vars)
    if preds:
        _check_predicate_vars(root, b.predicate_vars)
        _narrow_predicate_vars(root)
    return LogicalQuery(root, b.hidden, preds)


def _narrow_predicate_vars(root: Group) -> None:
    """Give each predicate-variable clause the `narrow` value of a FILTER of its own block
    that pins the variable: `?p == "x"` / `"x" == ?p` / `?p == :param`, or
    `IN(?p, [...])` / `IN(?p, :param)`, alone or as a conjunct of `&&`."""
    stack = [root]
    while stack:
        g = stack.pop()
        stack += g.children()
        for i, atom in enumerate(g.atoms):
            if isinstance(atom, AnyLinkAtom):
                value = _pinning_value(g.filters, atom.pred)
                if value is not None:
                    g.atoms[i] = replace(atom, narrow=value)


def _pinning_value(filters: list[A.Expr], var: str) -> A.Value | None:
    conjuncts = list(filters)
    while conjuncts:
        e = conjuncts.pop(0)
        if isinstance(e, A.BoolOp) and e.op == "&&":
            conjuncts += list(e.operands)
        elif isinstance(e, A.Compare) and e.op == "==":
            for this, other in ((e.left, e.right), (e.right, e.left)):
                if _is_var(this, var) and isinstance(other, (A.Literal, A.Param)):
                    return other
        elif isinstance(e, A.Call) and e.func == "IN" and len(e.args) == 2 \
                and _is_var(e.args[0], var) \
                and isinstance(e.args[1], (A.Literal, A.Param, A.ArrayValue)):
            return e.args[1]
    return None


def _is_var(e: A.Expr, var: str) -> bool:
    return isinstance(e, A.Path) and e.var == var and not e.segments


def _check_predicate_vars(root: Group, preds: dict[str, A.Pos | None]) -> None:
    """KIP_1001 for a predicate variable also used as a node or link (it binds a string,
    RC11 §3.4.2) or read through a dot path in a FILTER."""
    stack = [root]
    while stack:
        g = stack.pop()
        for atom in g.atoms:
            element_vars = ([atom.subject, atom.object] + ([atom.link] if atom.link else [])
                            if isinstance(atom, AnyLinkAtom) else list(atom.vars))
            for v in element_vars:
                if v in preds:
                    raise predicate_var_misuse(v, atom.pos or preds[v],
                                               "an element (a subject, object or link variable)")
        for expr in g.filters:
            check_predicate_paths(expr, preds)
        stack += g.children()


def check_predicate_paths(expr: A.Expr, preds: dict[str, A.Pos | None] | frozenset[str]
                          ) -> None:
    """KIP_1001 for `?p.field` where ?p is a predicate variable (a string has no fields)."""
    for e in sub_expressions(expr):
        if isinstance(e, A.Path) and e.segments and e.var in preds:
            raise predicate_var_misuse(e.var, e.pos, f"?{e.var}.{'.'.join(e.segments)}")


def predicate_var_misuse(var: str, pos: A.Pos | None, used_as: str) -> KipError:
    return KipError(
        ErrorCode.KIP_1001,
        f"?{var} is a predicate variable (it binds the predicate name, a string) and is "
        f"also used as {used_as}",
        f"Use ?{var} itself where a string fits (FIND, FILTER(?{var} == \"treats\"), "
        f"IN(?{var}, [...]), ORDER BY ?{var}); to read the link, name it: "
        f"?link (?s, ?{var}, ?o) and use ?link.metadata.<key>.",
        line=pos.line if pos else None, column=pos.column if pos else None)


def _check_filters(g: Group, outer: set[str]) -> None:
    """KIP_3001 for a FILTER variable not visible where the FILTER stands."""
    visible = g.atom_vars() | (set() if g.kind == "union" else outer)
    for kind, sub in g.nested:
        if kind == "optional":
            visible |= sub.exported()
    for sub in g.unions:
        visible |= sub.exported()
    for expr in g.filters:
        for var, pos in expr_vars(expr):
            if var not in visible:
                raise unbound(var, pos, "FILTER")
    inner_outer = visible
    for _, sub in g.nested:
        _check_filters(sub, inner_outer)
    for sub in g.unions:
        _check_filters(sub, set())
    if g.then is not None:
        _check_filters(g.then, visible)


def sub_expressions(expr: A.Expr | A.Aggregate) -> Iterator[A.Expr | A.Aggregate]:
    """`expr` and every expression inside it (an aggregate's argument included)."""
    stack: list[A.Expr | A.Aggregate] = [expr]
    while stack:
        e = stack.pop()
        yield e
        if isinstance(e, A.Aggregate):
            stack.append(e.arg)
        elif isinstance(e, A.Compare):
            stack += [e.left, e.right]
        elif isinstance(e, A.BoolOp):
            stack += list(e.operands)
        elif isinstance(e, A.NotOp):
            stack.append(e.operand)
        elif isinstance(e, A.Call):
            stack += list(e.args)


def expr_vars(expr: A.Expr) -> list[tuple[str, A.Pos | None]]:
    """The variables an expression reads, with where (an aggregate's argument once)."""
    return [(e.var, e.pos) for e in sub_expressions(expr) if isinstance(e, A.Path)]


def unbound(var: str, pos: A.Pos | None, where: str) -> KipError:
    return KipError(
        ErrorCode.KIP_3001,
        f"Unbound variable ?{var} in {where}: no clause binds it where it is used",
        f"Bind ?{var} with a clause in WHERE, e.g. ?{var} {{type: \"...\"}} or "
        f"(?{var}, \"predicate\", ?other). Variables first bound inside NOT are not visible "
        "outside it, and UNION blocks do not see variables bound outside them.",
        line=pos.line if pos else None, column=pos.column if pos else None)
