"""The planner: a logical group → an ordered pipeline of physical steps.

Rows are tuples laid out in binding order (`GroupPlan.layout` names each position), so a step
that binds new variables appends them and never copies by name. The planner is greedy:
  1. as soon as an atom's variables are all bound, it becomes a cheap check;
  2. otherwise pick the atom with the smallest estimated fan-out that touches a bound variable
     (a constant `{id}`/`{type, name}` first, then the smallest index range — counts per type
     and predicate come from the store's statistics);
  3. a FILTER runs right after the step that binds its last variable (filter push-down);
  4. OPTIONAL / NOT blocks follow the main atoms in text order (correlated sub-plans), then the
     FILTERs that need their variables; UNION branches are planned on their own.
Every step names the index it uses, so EXPLAIN can show the plan without running it. The
cardinalities come from the cost model's `Estimator` (`nexus.plan.cost`); the row factors
beside each step below are the planner's guesses of what a step keeps, which EXPLAIN shows.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol, Union

from ..syntax import ast as A
from .logical import (AnyLinkAtom, Atom, ConceptAtom, Group, LinkAtom, LinkIdAtom, LogicalQuery,
                      PathAtom, expr_vars)

class Estimator(Protocol):
    """The cardinalities the planner asks of the cost model (`nexus.plan.cost.Estimator`,
    which also walks these steps to choose the executor: the planner only receives it)."""

    def type_count(self, value: A.Value | None) -> float: ...
    def predicate_count(self, values: tuple[A.Value, ...]) -> float: ...
    def fanout(self, values: tuple[A.Value, ...]) -> float: ...
    def link_count(self) -> float: ...
    def any_fanout(self) -> float: ...


# --- physical steps ----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ConstConcept:
    """Bind `var` to the single concept of a `{id}` / `{type, name}` clause."""
    var: str
    atom: ConceptAtom
    bound: bool            # var already bound: check instead of bind


@dataclass(frozen=True, slots=True)
class ScanType:
    var: str
    type: A.Value


@dataclass(frozen=True, slots=True)
class ScanName:
    var: str
    name: A.Value
    type: A.Value | None = None


@dataclass(frozen=True, slots=True)
class CheckConcept:
    var: str
    type: A.Value | None
    name: A.Value | None


@dataclass(frozen=True, slots=True)
class Expand:
    """Follow links of `predicates` from the bound `start` ('out': start is the subject)."""
    direction: str          # out | in
    start: str
    predicates: tuple[A.Value, ...]
    end: str                # new variable (or `start` itself for a self-loop (?x, p, ?x))
    link: str | None        # new link variable, if named


@dataclass(frozen=True, slots=True)
class LinkCheck:
    """Both ends bound: look the link up by (s, p, o)."""
    subject: str
    predicates: tuple[A.Value, ...]
    object: str
    link: str | None        # new link variable, if named


@dataclass(frozen=True, slots=True)
class ScanLinks:
    """Neither end bound: every link of the predicates (pos index)."""
    subject: str
    predicates: tuple[A.Value, ...]
    object: str
    link: str | None


@dataclass(frozen=True, slots=True)
class LinkFromVar:
    """The link variable is bound: check its predicate, bind or check its ends."""
    link: str
    subject: str
    predicates: tuple[A.Value, ...]
    object: str
    bind_subject: bool
    bind_object: bool


@dataclass(frozen=True, slots=True)
class LinkById:
    var: str
    atom: LinkIdAtom
    bound: bool


@dataclass(frozen=True, slots=True)
class PathWalk:
    """Walk `predicate` lo..hi hops from the bound end ('out': from the subject)."""
    direction: str
    start: str
    predicate: A.Value
    lo: int
    hi: int | None
    end: str
    end_bound: bool


@dataclass(frozen=True, slots=True)
class PathScan:
    """Neither end bound: walk from every subject of the predicate."""
    subject: str
    predicate: A.Value
    lo: int
    hi: int | None
    object: str


@dataclass(frozen=True, slots=True)
class Filter:
    expr: A.Expr


@dataclass(frozen=True, slots=True)
class OptionalJoin:
    plan: "GroupPlan"
    exports: tuple[int, ...]        # positions in plan.layout appended to the row
    correlated: bool = True         # the block uses an outer variable


@dataclass(frozen=True, slots=True)
class AntiJoin:
    plan: "GroupPlan"
    correlated: bool = True         # False: same answer for every outer row


# --- RC11 §3.4.2: predicate variables (`pred` holds the predicate; see AnyLinkAtom) ------

@dataclass(frozen=True, slots=True)
class ExpandAny:
    """Follow the links of every predicate from the bound `start` ('out': start is the
    subject; one prefix range of the s-p-o / o-p-s index) — or of the predicate `pred`
    holds when it is already bound. Binds (or checks, when bound) `end`, binds `pred` when
    new, and the link variable, if named."""
    direction: str
    start: str
    pred: str
    pred_bound: bool
    end: str
    end_bound: bool
    link: str | None
    narrow: A.Value | None = None       # only these predicates (AnyLinkAtom.narrow)


@dataclass(frozen=True, slots=True)
class ScanAnyLinks:
    """Neither end bound: the links of the predicate `pred` holds (bound), or of every
    predicate — refused past `Limits.max_link_scan` links (KIP_4002)."""
    subject: str
    pred: str
    pred_bound: bool
    object: str
    link: str | None
    narrow: A.Value | None = None       # only these predicates: no scan of every link


@dataclass(frozen=True, slots=True)
class AnyLinkFromVar:
    """The link variable is bound: read its head, bind or check its ends and predicate."""
    link: str
    subject: str
    pred: str
    object: str
    bind_subject: bool
    bind_pred: bool
    bind_object: bool


Step = Union[ConstConcept, ScanType, ScanName, CheckConcept, Expand, LinkCheck, ScanLinks,
             LinkFromVar, LinkById, PathWalk, PathScan, Filter, OptionalJoin, AntiJoin,
             ExpandAny, ScanAnyLinks, AnyLinkFromVar]


@dataclass
class GroupPlan:
    """Steps over rows that start with `inputs` variables and end with `layout`."""
    inputs: tuple[str, ...]
    steps: list[Step]
    layout: list[str]                       # after steps (main branch)
    unions: list["GroupPlan"] = field(default_factory=list)
    out_layout: list[str] = field(default_factory=list)   # the rows the group gives
    main_empty: bool = False                # top-level group with no atoms: no main rows
    estimates: list[float] = field(default_factory=list)  # estimated rows after each step
    # The continuation (clauses after the last UNION run), run on each row laid out as
    # `union_layout` (layout + union-only variables); its out_layout is the group's.
    then: "GroupPlan | None" = None
    union_layout: list[str] = field(default_factory=list)


# --- the planner -------------------------------------------------------------------------

def binds(step: Step, layout: list[str]) -> list[str]:
    """The variables `step` adds to a row whose layout (before it) is `layout`."""
    if isinstance(step, ConstConcept) or isinstance(step, LinkById):
        return [] if step.bound else [step.var]
    if isinstance(step, (ScanType, ScanName)):
        return [step.var]
    if isinstance(step, Expand):
        new = [] if step.end in layout else [step.end]
        return new + ([step.link] if step.link else [])
    if isinstance(step, LinkCheck):
        return [step.link] if step.link else []
    if isinstance(step, ScanLinks):
        new = [step.subject] if step.subject == step.object else [step.subject, step.object]
        return new + ([step.link] if step.link else [])
    if isinstance(step, LinkFromVar):
        out = []
        if step.bind_subject:
            out.append(step.subject)
        if step.bind_object and step.object not in out:
            out.append(step.object)
        return out
    if isinstance(step, PathWalk):
        return [] if step.end_bound else [step.end]
    if isinstance(step, PathScan):
        return [step.subject] if step.subject == step.object else [step.subject, step.object]
    if isinstance(step, OptionalJoin):
        return [step.plan.out_layout[i] for i in step.exports]
    if isinstance(step, ExpandAny):
        return (([] if step.end_bound else [step.end]) + ([] if step.pred_bound else [step.pred])
                + ([step.link] if step.link else []))
    if isinstance(step, ScanAnyLinks):
        ends = [step.subject] if step.subject == step.object else [step.subject, step.object]
        return (ends + ([] if step.pred_bound else [step.pred])
                + ([step.link] if step.link else []))
    if isinstance(step, AnyLinkFromVar):
        out = [step.subject] if step.bind_subject else []
        if step.bind_object and step.object not in out:
            out.append(step.object)
        return out + ([step.pred] if step.bind_pred else [])
    return []


def plan_query(query: LogicalQuery, est: Estimator) -> GroupPlan:
    return plan_group(query.root, (), est, top=True)


def plan_group(group: Group, inputs: tuple[str, ...], est: Estimator,
               top: bool = False) -> GroupPlan:
    layout = list(inputs)
    bound = set(inputs)
    steps: list[Step] = []
    estimates: list[float] = []
    rows = 1.0
    atoms = list(group.atoms)
    main_vars = bound | group.atom_vars()
    # Split in one pass, and placed below by rebuilding the list: `f not in pushable` and
    # `pushable.remove(f)` compare filters by value, quadratic in a group's FILTERs (a
    # thousand sibling FILTERs spent 0.6 s in dataclass __eq__ here).
    pushable: list[A.Expr] = []
    late: list[A.Expr] = []
    for f in group.filters:
        (pushable if {v for v, _ in expr_vars(f)} <= main_vars else late).append(f)

    def place_filters() -> None:
        waiting = []
        for f in pushable:
            if {v for v, _ in expr_vars(f)} <= bound:
                steps.append(Filter(f))
                estimates.append(rows)
            else:
                waiting.append(f)
        pushable[:] = waiting

    def add(step: Step, new_vars: list[str], factor: float) -> None:
        nonlocal rows
        steps.append(step)
        for v in new_vars:
            if v not in bound:
                layout.append(v)
                bound.add(v)
        rows = max(rows * factor, 0.0)
        estimates.append(rows)

    place_filters()
    while atoms:
        best = min(atoms, key=lambda a: _score(a, bound, est))
        atoms.remove(best)
        step, new_vars, factor = _step_for(best, bound, est)
        add(step, new_vars, factor)
        # Cheap checks on what is now bound go before filters (which may decode values).
        for atom in [a for a in atoms if set(a.vars) <= bound]:
            atoms.remove(atom)
            step, new_vars, factor = _step_for(atom, bound, est)
            add(step, new_vars, factor)
        place_filters()

    for kind, sub in group.nested:
        sub_plan = plan_group(sub, tuple(layout), est)
        correlated = bool(group_uses(sub) & bound)
        if kind == "optional":
            exports = tuple(i for i, v in enumerate(sub_plan.out_layout)
                            if i >= len(layout) and not v.startswith("#"))
            steps.append(OptionalJoin(sub_plan, exports, correlated))
            for i in exports:
                layout.append(sub_plan.out_layout[i])
                bound.add(sub_plan.out_layout[i])
        else:
            steps.append(AntiJoin(sub_plan, correlated))
            rows *= 0.5
        estimates.append(rows)
    for f in pushable + late:
        steps.append(Filter(f))
        estimates.append(rows)

    unions = [plan_group(u, (), est) for u in group.unions]
    out_layout = list(layout)
    for u in unions:
        for v in u.out_layout:
            if v not in out_layout and not v.startswith("#"):
                out_layout.append(v)
    # A block whose only patterns are UNIONs has no main branch: its rows are the
    # branches' rows (at the top, CONTRACT §5; nested in OPTIONAL/NOT the same, so that the
    # block's identity row does not count as a match; its FILTERs, which filter the main
    # branch only, then have nothing to filter). Without UNIONs a block of FILTERs alone
    # keeps its main branch: `NOT { FILTER(...) }` tests the outer row.
    main_empty = bool(group.unions) and not group.atoms and not group.nested
    then = None if group.then is None else plan_group(group.then, tuple(out_layout), est)
    return GroupPlan(tuple(inputs), steps, layout, unions,
                     out_layout if then is None else list(then.out_layout), main_empty,
                     estimates, then, out_layout)


@dataclass(frozen=True, slots=True)
class AntiLink:
    """A NOT block that is constant clauses and one link between an outer variable and one
    of those constants (`NOT { (?x, "p", {type: T, name: N}) }`): what `anti_link` found."""
    consts: tuple[ConstConcept, ...]
    check: LinkCheck
    outer: str              # the outer variable the link tests
    anchor: ConstConcept    # the constant at the link's other end
    forward: bool           # True: the constant is the subject (the outer is the object)


def anti_link(plan: GroupPlan) -> AntiLink | None:
    """The block's AntiLink when its plan has that shape (see AntiLink), else None."""
    if plan.unions or plan.then is not None or plan.main_empty or not plan.steps:
        return None
    *consts, last = plan.steps
    if not isinstance(last, LinkCheck) or last.link is not None:
        return None
    anchors: dict[str, ConstConcept] = {}
    for c in consts:
        if not isinstance(c, ConstConcept) or c.bound:
            return None
        anchors[c.var] = c
    if last.subject in plan.inputs and last.object in anchors:
        return AntiLink(tuple(anchors.values()), last, last.subject, anchors[last.object],
                        False)
    if last.object in plan.inputs and last.subject in anchors:
        return AntiLink(tuple(anchors.values()), last, last.object, anchors[last.subject],
                        True)
    return None


def without_then(plan: GroupPlan) -> GroupPlan:
    """The plan of a group's rows before its continuation (laid out as `union_layout`)."""
    return replace(plan, then=None, out_layout=list(plan.union_layout))


def group_uses(group: Group) -> set[str]:
    """Every variable a block mentions where outer bindings are visible to it (its clauses,
    FILTERs and nested OPTIONAL/NOT blocks), plus what its UNION branches export (their
    rows are joined with the outer row on those names)."""
    out = group.atom_vars()
    for f in group.filters:
        out |= {v for v, _ in expr_vars(f)}
    for _, sub in group.nested:
        out |= group_uses(sub)
    for sub in group.unions:
        out |= sub.exported()
    if group.then is not None:
        out |= group_uses(group.then)
    return out


def may_repeat(plan: GroupPlan) -> bool:
    """Whether `plan` may yield two rows that assign the same values to every named
    variable (they then differ only in hidden variables of anonymous clauses, or come from
    different UNION branches / predicate alternatives). A solution is an assignment of the
    named variables (see nexus.exec.kql), so aggregates must deduplicate such rows."""
    if plan.unions or plan.then is not None:
        return True
    if any(v.startswith("#") for v in plan.layout[len(plan.inputs):]):
        return True
    for step in plan.steps:
        if isinstance(step, (Expand, ScanLinks)) and step.link is None \
                and len(step.predicates) > 1:
            return True
        if isinstance(step, OptionalJoin) and may_repeat(step.plan):
            return True
    return False


def _score(atom: Atom, bound: set[str], est: Estimator) -> tuple[int, float]:
    """(tier, estimated fan-out): checks first, then constants, then anything connected to
    a bound variable, then scans."""
    vars_ = set(atom.vars)
    if vars_ <= bound:
        return (0, 0.0)
    if isinstance(atom, ConceptAtom):
        if atom.is_constant:
            return (1, 1.0)
        if atom.name is not None:
            return (2, 2.0)
        return (4, est.type_count(atom.type))
    if isinstance(atom, LinkIdAtom):
        return (1, 1.0)
    if isinstance(atom, LinkAtom):
        if atom.link and atom.link in bound:
            return (1, 1.0)
        if atom.subject in bound or atom.object in bound:
            return (3, est.fanout(atom.predicates))
        return (4, est.predicate_count(atom.predicates))
    if isinstance(atom, AnyLinkAtom):
        if atom.link and atom.link in bound:
            return (1, 1.0)
        narrow = 0.5 if atom.pred in bound or atom.narrow is not None else 1.0
        if atom.subject in bound or atom.object in bound:
            return (3, est.any_fanout() * narrow)
        return (4, est.link_count() * narrow)
    if isinstance(atom, PathAtom):
        hops = atom.hi if atom.hi is not None else 8
        if atom.subject in bound or atom.object in bound:
            return (3, est.fanout((atom.predicate,)) ** max(1, min(hops, 3)))
        return (4, est.predicate_count((atom.predicate,)) * hops)
    raise TypeError(atom)  # pragma: no cover


def _step_for(atom: Atom, bound: set[str], est: Estimator) -> tuple[Step, list[str], float]:
    if isinstance(atom, ConceptAtom):
        var = atom.var
        if atom.is_constant:
            return ConstConcept(var, atom, var in bound), [var], 1.0 if var not in bound else 0.9
        if var in bound:
            return CheckConcept(var, atom.type, atom.name), [], 0.5
        if atom.name is not None:
            return ScanName(var, atom.name, atom.type), [var], 2.0
        if atom.type is None:  # pragma: no cover - a clause has an id, a type or a name
            raise TypeError(atom)
        return ScanType(var, atom.type), [var], max(est.type_count(atom.type), 0.0)
    if isinstance(atom, LinkIdAtom):
        return LinkById(atom.link, atom, atom.link in bound), [atom.link], 1.0
    if isinstance(atom, LinkAtom):
        s, o, link = atom.subject, atom.object, atom.link
        if link and link in bound:
            return (LinkFromVar(link, s, atom.predicates, o, s not in bound, o not in bound),
                    [s, o], 1.0)
        if s in bound and o in bound:
            return LinkCheck(s, atom.predicates, o, link), [link] if link else [], 0.3
        fan = est.fanout(atom.predicates)
        if s in bound:
            return Expand("out", s, atom.predicates, o, link), [o] + ([link] if link else []), fan
        if o in bound:
            return Expand("in", o, atom.predicates, s, link), [s] + ([link] if link else []), fan
        new = [s] if s == o else [s, o]
        return (ScanLinks(s, atom.predicates, o, link), new + ([link] if link else []),
                est.predicate_count(atom.predicates))
    if isinstance(atom, AnyLinkAtom):
        return _any_link_step(atom, bound, est)
    if isinstance(atom, PathAtom):
        s, o = atom.subject, atom.object
        fan = est.fanout((atom.predicate,)) * 2
        if s in bound:
            return (PathWalk("out", s, atom.predicate, atom.lo, atom.hi, o, o in bound),
                    [o], fan)
        if o in bound:
            return (PathWalk("in", o, atom.predicate, atom.lo, atom.hi, s, s in bound),
                    [s], fan)
        new = [s] if s == o else [s, o]
        return (PathScan(s, atom.predicate, atom.lo, atom.hi, o), new,
                est.predicate_count((atom.predicate,)) * 2)
    raise TypeError(atom)  # pragma: no cover


def _any_link_step(atom: AnyLinkAtom, bound: set[str], est: Estimator
                   ) -> tuple[Step, list[str], float]:
    """A predicate-variable clause on the link indexes: from a bound end (or the bound
    link) it never scans more than that element's links; only a clause with nothing bound
    scans the link table (capped at execution)."""
    s, o, p, link = atom.subject, atom.object, atom.pred, atom.link
    tail = [link] if link else []
    if link and link in bound:
        return (AnyLinkFromVar(link, s, p, o, s not in bound, p not in bound, o not in bound),
                [s, o, p], 1.0)
    narrowed = p in bound or atom.narrow is not None
    narrow = None if p in bound else atom.narrow
    fan = est.any_fanout() * (0.5 if narrowed else 1.0)
    if s in bound:
        return (ExpandAny("out", s, p, p in bound, o, o in bound, link, narrow),
                [o, p] + tail, fan * (0.3 if o in bound else 1.0))
    if o in bound:
        return ExpandAny("in", o, p, p in bound, s, False, link, narrow), [s, p] + tail, fan
    ends = [s] if s == o else [s, o]
    return (ScanAnyLinks(s, p, p in bound, o, link, narrow), ends + [p] + tail,
            est.link_count() * (0.5 if narrowed else 1.0))
