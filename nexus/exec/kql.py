"""FIND: prepare (bind → plan → compile, cached per parsed command), run, shape the result.

`run_find(ctx, find, params)` returns `(result, next_cursor)` in the layout of CONTRACT §4.
This module owns the pipeline around the two executors: preparing a FIND, choosing for each
execution between the row path (`operators`) and the columnar run (`columnar`, when the cost
model prefers it; for an anchored plan, when its constant proved a hub: `hubs`), and handing the solutions to the one result shaper (`shape`: dedup,
GROUP BY, ORDER BY, LIMIT, CURSOR). `solutions(ctx, where, variables)` is the same matcher
for KML's `DELETE … WHERE`. EXPLAIN (`run_explain`) shows the prepared plan.

A prepared FIND keeps its plan across executions: parameters are read at execution time, so
an agent loop that repeats a command with new values plans it once.

Solutions (decided where the spec is loose): a solution of WHERE is an assignment of values
to the variables written in it; the solutions form a set. An anonymous clause
(`{name: "Headache"}` as an end, a nested `(…)` proposition, a link matched without a link
variable, one of several predicate alternatives) only constrains: two matches that differ
only there are one solution — the same rule as paths, which yield distinct (start, end)
pairs (CONTRACT §6). So `FIND(COUNT(?d)) WHERE { (?d, "treats", {type: "Symptom"}) }`
counts drugs, not links, and the count does not depend on the plan. Plain FIND results are
unaffected (they are deduplicated on the FIND variables anyway); aggregates see each
solution once (`may_repeat` tells when the rows need that deduplication). UNION branches
are merged the same way: a row found by two branches is one solution.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Mapping, Sequence

from ..bounded import WeightedLRU
from ..errors import ErrorCode, KipError
from ..plan.cost import Estimator, anchored
from ..plan.explain import explain_plan
from ..plan.logical import (ConceptAtom, Group, LinkIdAtom, LogicalQuery, PathAtom, bind_where,
                            check_predicate_paths, predicate_var_misuse, unbound)
from ..plan.physical import ConstConcept, GroupPlan, may_repeat, plan_query
from ..syntax import ast as A
from ..syntax import to_text
from ..syntax.parser import placeholder_names
from . import columnar
from .batch import Batch, BatchSolutions
from .asof import as_of_context
from .context import ExecContext
from .env import Env, check_hop_range
from .filters import kind as value_kind
from . import pushdown
from .hubs import HUB_WORK, HubChoice
from .operators import compile_group
from .rows import Row, Rows
from .registry import executes
from .shape import (Answer, FindShape, RowSolutions, Solutions, check_row_cap, decode_cursor,
                    distinct, empty_result, limited, point_answer, shape_find)

Params = Mapping[str, Any]


@dataclass
class Prepared:
    """A FIND bound, planned and compiled: what every execution of the command reuses."""
    find: A.Find
    logical: LogicalQuery
    plan: GroupPlan
    runner: Callable[[Env, Row], Rows]            # the row path's compiled plan
    shape: FindShape
    mandatory: list[ConceptAtom | LinkIdAtom]     # constant clauses that must match
    paths: tuple[tuple[int, int | None], ...] = ()     # hop ranges, checked per execution
    anchored: bool = False                        # starts from a constant (cost.anchored)
    program: columnar.GroupProgram | None = None  # the columnar run, built on first use
    point: ConceptAtom | None = None              # the clause of a point lookup plan
    chosen: object = None                         # (snapshot, params) `auto` ran columnar
    push: pushdown.Pushdown | None = None         # the main block's pushdown (pushdown.py)
    hubs: HubChoice | None = None                 # anchored plans: when to run columnar

    @property
    def layout(self) -> list[str]:
        return self.shape.layout


# Prepared plans by parsed command, bounded by bytes (a plan weighs about what its syntax
# tree does: ~32 bytes per character of the command's text).
_PREPARED: WeightedLRU[tuple[A.Find, Prepared]] = WeightedLRU(128 << 20, 4096)


def prepare(ctx: ExecContext, find: A.Find, params: Params, *, cache: bool = True
            ) -> Prepared:
    if cache:
        hit = _PREPARED.get(id(find))
        if hit is not None and hit[0] is find:
            return hit[1]
    logical = bind_where(find.where)
    env = Env(ctx, params)
    plan = plan_query(logical, Estimator.for_planning(ctx.txn, env.value))
    layout = plan.out_layout
    aggregated = any(isinstance(i, A.Aggregate) for i in find.items)
    for key in find.order_by:
        if isinstance(key.expr, A.Aggregate) and not aggregated:
            raise KipError(ErrorCode.KIP_1001, "ORDER BY an aggregate needs aggregates in FIND",
                           "Add the aggregate to FIND, e.g. FIND(?c.name, COUNT(?d)) ... "
                           "ORDER BY COUNT(?d) DESC.",
                           line=key.pos.line if key.pos else None,
                           column=key.pos.column if key.pos else None)
    for item in list(find.items) + [k.expr for k in find.order_by]:
        path = A.item_path(item)
        if path.var not in layout:
            where = "ORDER BY" if item not in find.items else "FIND"
            raise unbound(path.var, path.pos, where)
        if logical.predicate_vars:
            check_predicate_paths(A.item_path(item), logical.predicate_vars)
    unpaged = replace(find, limit=None, cursor=None)
    named_idx = tuple(i for i, v in enumerate(layout) if not v.startswith("#"))
    repeats = may_repeat(plan)
    key_idx = _var_positions(layout, find.items)
    shape = FindShape(find, layout, tuple(A.item_path(i) for i in find.items), key_idx,
                      # rows are distinct on the named variables and FIND mentions all
                      distinct=not repeats and set(key_idx) >= set(named_idx),
                      aggregated=aggregated,
                      repeat_key=named_idx if repeats else None,
                      fingerprint_params=tuple(sorted(set(placeholder_names(unpaged)))),
                      fingerprint_text=to_text(unpaged))
    # What the result reads of the rows' elements: an element FIND returns (its head and
    # maps), the paths of the items and sort keys; an aggregate of a bare `?x` nothing.
    reads = [A.item_path(i) for i in find.items + tuple(k.expr for k in find.order_by)
             if not (isinstance(i, A.Aggregate) and not i.arg.segments)]
    push = pushdown.split(plan, reads) if plan.then is None else None
    prepared = Prepared(find, logical, plan, compile_group(plan, push), shape,
                        _mandatory_atoms(logical), paths=tuple(_path_ranges(logical.root)),
                        anchored=anchored(plan), point=_point_atom(plan, aggregated),
                        push=push)
    if cache:
        _PREPARED.put(id(find), (find, prepared), 64 * len(ctx.text or "") + 4096)
    return prepared


def _point_atom(plan: GroupPlan, aggregated: bool) -> ConceptAtom | None:
    """The clause of a plan that is one constant concept (`?c {type: :t, name: :n}` or
    `{id: :id}`) and nothing else: its only solution is that concept, or none, so the
    execution resolves the constant and skips the operator pipeline (the fixed cost of a
    point lookup is most of its latency)."""
    if plan.unions or plan.main_empty or len(plan.steps) != 1 or aggregated:
        return None
    step = plan.steps[0]
    if type(step) is not ConstConcept or step.bound or plan.out_layout != [step.var]:
        return None
    return step.atom


def _path_ranges(group: Group) -> Iterator[tuple[int, int | None]]:
    for atom in group.atoms:
        if isinstance(atom, PathAtom):
            yield (atom.lo, atom.hi)
    for _, sub in group.nested:
        yield from _path_ranges(sub)
    for sub in group.unions:
        yield from _path_ranges(sub)
    if group.then is not None:
        yield from _path_ranges(group.then)


def check_hops(ctx: ExecContext, prep: Prepared) -> None:
    """KIP_4002 for a path range over the hop cap (CONTRACT §6) — checked before anything
    runs, so that a path in a block that is never reached is refused all the same."""
    for lo, hi in prep.paths:
        check_hop_range(lo, hi, ctx.limits.max_hops)


def _mandatory_atoms(logical: LogicalQuery) -> list[ConceptAtom | LinkIdAtom]:
    out: list[ConceptAtom | LinkIdAtom] = []
    # Mandatory clauses are the main block's; after a UNION they sit in the block's
    # continuation, or in the branch that holds what came before a later UNION run.
    groups = [logical.root]
    while groups:
        group = groups.pop(0)
        for atom in group.atoms:
            if isinstance(atom, ConceptAtom) and atom.mandatory and atom.is_constant:
                out.append(atom)
            elif isinstance(atom, LinkIdAtom) and atom.mandatory:
                out.append(atom)
        groups += group.unions
        if group.then is not None:
            groups.append(group.then)
    return out


def _var_positions(layout: list[str], items: tuple[A.FindItem, ...]) -> tuple[int, ...]:
    seen: list[int] = []
    for item in items:
        i = layout.index(A.item_path(item).var)
        if i not in seen:
            seen.append(i)
    return tuple(seen)


# --- FIND --------------------------------------------------------------------------------

@executes(A.Find)
def run_find(ctx: ExecContext, find: A.Find, params: Params | None = None) -> Answer:
    params = params or {}
    if find.as_of is not None:          # the history extension: the graph as it was
        ctx = as_of_context(ctx, find.as_of, params)
    prep = prepare(ctx, find, params)
    if prep.paths:
        check_hops(ctx, prep)
    env = Env(ctx, params)
    _constants(env, prep, ctx.dry_run)
    limit = env.value(find.limit) if find.limit is not None else None
    offset = decode_cursor(env.value(find.cursor), prep.shape, params) if find.cursor else 0
    if ctx.dry_run:
        return empty_result(find), None
    if prep.point is not None and offset == 0 and not find.order_by \
            and not prep.shape.aggregated:
        # One constant concept (Q1, the commonest command): at most one solution, which is
        # its own first page — shaped directly, as shape_find would.
        n = env.const_concept(prep.point)
        rows: list[Row] = [] if n is None else [(n,)]
        check_row_cap(ctx, len(rows), True)
        return point_answer(env, prep.shape, rows), None
    return shape_find(env, prep.shape, _run(env, prep), limit, offset, params)


def _constants(env: Env, prep: Prepared, dry_run: bool) -> None:
    """Resolve the constant clauses up front (KIP_3002 for a mandatory one that matches
    nothing) — except those a pushed-down query resolves itself: it runs first, and
    checks them when it finds no row (nexus.exec.pushdown)."""
    push = prep.push if env.matcher is not None and not dry_run else None
    if push is None:
        if env.batched:
            env.prefetch_constants(prep.logical.root)
        env.check_mandatory(prep.mandatory)
        return
    env.prefetch_constants(prep.logical.root, push.constants)
    env.check_mandatory([a for a in prep.mandatory if id(a) not in push.constants])


def _run(env: Env, prep: Prepared) -> Solutions:
    """The solutions of the FIND's WHERE, from the executor this execution should use."""
    layout = prep.shape.layout
    if prep.point is not None:
        n = env.const_concept(prep.point)
        rows: list[Row] = [] if n is None else [(n,)]
        check_row_cap(env.ctx, len(rows), True)
        return RowSolutions(env, layout, rows)
    hub = _hub_key(env, prep) if prep.anchored else None
    if hub is not None and prep.hubs is not None \
            and (prep.hubs.work_of(*hub) or HUB_WORK) < HUB_WORK:
        # Measured on this snapshot, and no hub: the row path (`_columns` would say so).
        return RowSolutions(env, layout, prep.runner(env, ()), uncapped=True)
    cx = _columns(env, prep, hub)
    if cx is not None and prep.program is not None:
        out = columnar.execute(env, cx, prep.program)
        if isinstance(out, Batch):
            return BatchSolutions(env, cx, layout, out)
        return RowSolutions(env, layout, limited(env.ctx, out))
    if hub is not None and prep.hubs is not None:
        return RowSolutions(env, layout, _measured(env, _solutions(env, prep), prep.hubs,
                                                   *hub))
    return RowSolutions(env, layout, prep.runner(env, ()), uncapped=True)


def _solutions(env: Env, prep: Prepared) -> Rows:
    """Every solution row, with the row cap and deadline enforced as rows stream."""
    return limited(env.ctx, prep.runner(env, ()))


# --- the columnar path (see nexus.exec.columnar) -----------------------------------------

def _columns(env: Env, prep: Prepared, hub: tuple[object, object] | None) -> Any:
    """The snapshot's column view when this execution should run columnar, else None
    (`hub`: the anchored execution's `_hub_key`)."""
    ctx = env.ctx
    ticket = ctx.ticket
    budget = ticket.budget if ticket is not None else None
    mode = ctx.columnar or columnar.default_mode()
    if mode == "never" or (budget is not None and not (mode == "auto" and prep.anchored)):
        # A read under a time budget (`execute_kip_within`: `kip serve` answering on its
        # event loop) takes the row path, which checks the deadline every few thousand units
        # of work. A columnar step has no check inside it (building a predicate's arrays,
        # one numpy pass over a batch), so it could hold the loop far past the budget — but
        # for a hub whose arrays are cached and whose work is known (`nexus.exec.hubs`).
        return None
    columns = getattr(env.txn, "columns", None)
    if columns is None:
        return None
    if mode == "auto" and prep.anchored:
        return columns() if hub is not None and _hub_columnar(env, prep, hub, budget) \
            else None
    if prep.program is None:
        prep.program = columnar.GroupProgram(prep.plan)
    if mode == "auto":
        snap = env.txn.snapshot_id()
        if snap is None:
            return None
        key = _choice_key((env.txn.store_token(), snap), prep, env.params)
        if key is None or prep.chosen != key:
            if not columnar.choose(env, prep.program):
                return None
            # Remembered only when columnar won: the estimate for the same snapshot and
            # parameters can only get cheaper for columns (their arrays are cached now).
            prep.chosen = key
    return columns()


def _hub_key(env: Env, prep: Prepared) -> tuple[object, object] | None:
    """(snapshot, parameter values) of an anchored execution that may run columnar (`auto`,
    a snapshot, a plan every step of which has a columnar form), else None."""
    program = prep.program
    if program is None:
        program = prep.program = columnar.GroupProgram(prep.plan)
    if not program.vectorized or (env.ctx.columnar or columnar.default_mode()) != "auto":
        return None
    snap = env.txn.snapshot_id()
    if snap is None or getattr(env.txn, "columns", None) is None:
        return None
    values = tuple(map(env.params.get, prep.shape.fingerprint_params))
    try:
        hash(values)
    except TypeError:                   # a parameter value that is not hashable: no memo
        return None
    if prep.hubs is None:
        prep.hubs = HubChoice()
    return (env.txn.store_token(), snap), values


def _hub_columnar(env: Env, prep: Prepared, key: tuple[object, object],
                  budget: float | None) -> bool:
    """Whether this anchored execution runs columnar (`nexus.exec.hubs`: a hub whose arrays
    are cached, or whose row-path runs have paid for building them; under a time `budget`,
    only the former, and only a hub whose work fits the budget)."""
    program, hubs = prep.program, prep.hubs
    if hubs is None or program is None:
        return False

    def estimate() -> tuple[frozenset[tuple[Any, ...]], float]:
        assert program is not None
        costs = columnar.costs(env, program)
        return frozenset(costs.need), costs.build
    return hubs.runs_columnar(key[0], key[1], estimate, columnar.cached_probe(env.txn),
                              budget)


def _measured(env: Env, rows: Rows, hubs: HubChoice, snap: object, key: object) -> Rows:
    """`rows` as they are; once they are all read, the run's work goes to `hubs`."""
    start = env.work
    yield from rows
    hubs.ran_rows(snap, key, env.work - start)


def _choice_key(snap: tuple[int, int], prep: Prepared, params: Params) -> object:
    """What `columnar.choose` depends on besides the cache: the store and its snapshot, and
    the values of the parameters the command uses (None when one is not hashable: no memo).
    A stale hit (a new store at a freed address) could only pick the other executor, whose
    answers are the same."""
    key = (snap, tuple(params.get(k) for k in prep.shape.fingerprint_params))
    try:
        hash(key)
    except TypeError:
        return None
    return key


# --- EXPLAIN -----------------------------------------------------------------------------

def run_explain(ctx: ExecContext, explain: A.Explain, params: Params | None = None
                ) -> dict[str, Any]:
    params = params or {}
    prep = prepare(ctx, explain.query, params, cache=False)
    out = explain_plan(prep.plan, explain.query)
    if Env(ctx, params).matcher is not None:    # a store that runs a group as one query
        push = pushdown.explain(prep.push)
        out["pushdown"] = push
        out["text"] += "\n" + pushdown.explain_text(push)
    return out


@executes(A.Explain)
def _execute_explain(ctx: ExecContext, explain: A.Explain, params: Params) -> Answer:
    return run_explain(ctx, explain, params), None


# --- the matcher for DELETE … WHERE ------------------------------------------------------

def solutions(ctx: ExecContext, where: tuple[A.Pattern, ...], variables: Sequence[str],
              params: Params | None = None) -> Iterator[Row]:
    """Distinct tuples of element ids (or None) for `variables`, over the WHERE solutions.

    Raises KIP_3001 for a variable bound nowhere, KIP_3002 for a mandatory `{id}` /
    `{type, name}` / `(id:)` clause that matches nothing.
    """
    items = tuple(A.Path(v) for v in variables)
    find = A.Find(items, tuple(where))
    params = params or {}
    prep = prepare(ctx, find, params, cache=False)
    for v in variables:
        if v in prep.logical.predicate_vars:
            raise predicate_var_misuse(v, None, "the statement's target (an element)")
    env = Env(ctx, params)
    _constants(env, prep, dry_run=ctx.dry_run)
    key_idx = tuple(prep.layout.index(v) for v in variables)
    for row in distinct(_solutions(env, prep), key_idx):
        yield tuple([row[i] for i in key_idx])


__all__ = ["run_find", "run_explain", "solutions", "prepare", "value_kind"]
