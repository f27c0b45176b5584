"""The cost model: every number the engine plans with and chooses an executor by.

* `Estimator` — cardinalities from the store's statistics (exact counts per type and per
  predicate, maintained on write): how many concepts a type scan yields, how many links a
  predicate scan yields, how many links an endpoint has. The planner (`physical`) orders its
  atoms by them and writes them into the plan as EXPLAIN's estimated rows.
* `executor_costs` — what running a physical plan would cost on each executor: the row path
  (`nexus.exec.operators`, a chain of generator stages, a B-tree seek per expansion) and the
  columnar one (`nexus.exec.columnar`, numpy passes over whole-predicate arrays, which must be
  built first unless the snapshot's cache holds them). The FIND executor compares the two for
  each execution (`auto` mode); `anchored` plans are decided from what their row-path runs
  did instead (`nexus.exec.hubs`, which takes only the arrays' build cost from here).

One `Estimator` serves both: the planner builds it with a tolerant symbol lookup (an
estimate never fails a query), the executor choice with the execution's own (the values it
will run with). The walk in `executor_costs` refines the planner's guesses where an execution
knows more — a variable bound by a type scan ranges over that type, so an expansion from it
yields the predicate's links spread over the type, not over a fifth of all concepts.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

from ..store.protocol import ReadTxn
from ..syntax import ast as A
from . import physical as P

SymbolOf = Callable[[A.Value], "int | None"]

# Unit costs in microseconds, measured on the benchmark machine (N=100k, LMDB, warm):
ROW_STEP = 1.2          # a row through one generator stage
ROW_SEEK = 2.5          # a cursor positioning (Expand / LinkCheck / OPTIONAL per row)
KEY_SCAN = 0.12         # a key of an index range read into an array
KEY_SORT = 0.08         # a link re-sorted by object
COL_FIXED = 80.0        # numpy call overheads of a columnar run
COL_ROW = 0.05          # a row through one vectorised step
ATTR_GET = 2.3          # a row's attribute map read and decoded (an LMDB get + msgpack)

# Fractions of rows a step keeps, as the executor choice guesses them (the planner's own
# guesses, which EXPLAIN shows, are beside its steps in `physical`).
KEEP_CHECK_CONCEPT = 0.7
KEEP_LINK_CHECK = 0.3
KEEP_FILTER = 0.5
KEEP_NOT = 0.5
GROW_OTHER = 2.0        # a step the columnar run hands to the row path (paths, link ends)


class Estimator:
    """Cardinality guesses from store statistics, for one snapshot; `sid` resolves a type or
    predicate value (a literal or a `:param`) to its symbol id (None: never interned)."""

    __slots__ = ("txn", "sid", "concepts", "_link_pids")

    def __init__(self, txn: ReadTxn, sid: SymbolOf) -> None:
        self.txn = txn
        self.sid = sid
        self.concepts = max(1, txn.count_concepts())
        self._link_pids: list[int] | None = None

    def narrow_pids(self, value: A.Value) -> list[int]:
        """The predicates a narrowing value names (`AnyLinkAtom.narrow`): a string's, or
        none when the value is an array or unknown (an estimate, not the execution's list)."""
        sid = self.sid(value)
        return [sid] if sid else []

    def link_pids(self) -> list[int]:
        """Every predicate that has links (a predicate variable expands over them all)."""
        if self._link_pids is None:
            self._link_pids = list(self.txn.link_predicates())
        return self._link_pids

    @classmethod
    def for_planning(cls, txn: ReadTxn, resolve: Callable[[A.Value], object]) -> Estimator:
        """An estimator whose symbol lookup never fails: a value that cannot be resolved
        (a parameter of the wrong kind, say) counts as a name nobody used."""
        def sid(value: A.Value) -> int | None:
            try:
                text = resolve(value)
            except Exception:  # noqa: BLE001 - estimates never fail a query
                return None
            return txn.symbol_id(text) if isinstance(text, str) else None
        return cls(txn, sid)

    def pids(self, values: Iterable[A.Value]) -> list[int]:
        """The distinct known predicate ids of `values`, in order."""
        out: list[int] = []
        for v in values:
            sid = self.sid(v)
            if sid is not None and sid not in out:
                out.append(sid)
        return out

    def type_size(self, tid: int | None) -> float:
        """Concepts of the type with symbol id `tid` (0 for an unknown type)."""
        return float(self.txn.count_type(tid)) if tid else 0.0

    def type_count(self, value: A.Value | None) -> float:
        return self.type_size(self.sid(value)) if value is not None else 0.0

    def predicate_count(self, values: tuple[A.Value, ...]) -> float:
        """Links of the predicates `values` (each value counted as written)."""
        total = 0.0
        for v in values:
            sid = self.sid(v)
            if sid:
                total += self.txn.count_predicate(sid)
        return total

    def spread(self, count: float) -> float:
        """Links per endpoint when `count` links spread over the endpoints that have any
        (guessed as a fifth of all concepts, at least one), never below one."""
        return max(1.0, count / max(1.0, min(count, self.concepts / 5)))

    def fanout(self, values: tuple[A.Value, ...]) -> float:
        """Average links per endpoint of the predicates (0 when they have no links)."""
        count = self.predicate_count(values)
        return 0.0 if count == 0 else self.spread(count)

    def link_count(self) -> float:
        """Every link of the store (a predicate-variable clause with no end bound)."""
        return float(self.txn.count_links())

    def any_fanout(self) -> float:
        """Average links per endpoint over all predicates (a predicate-variable clause)."""
        count = self.link_count()
        return 0.0 if count == 0 else self.spread(count)


# --- choosing the executor ---------------------------------------------------------------

def anchored(plan: P.GroupPlan) -> bool:
    """Whether the plan starts from one constant element ({type, name}, {id}, (id: ...)):
    its work is bounded by that element's neighbourhood, which the row path reaches with a
    few seeks, while columns would need whole-predicate arrays. `auto` keeps such plans on
    the row path without estimating anything (the hot path of Q1–Q4-like commands) unless
    the element turned out to be a hub (`nexus.exec.hubs`).
    Decided from the plan's shape, not from its estimates: a prepared plan is cached per
    command text across executions while the graph changes."""
    if plan.unions or plan.main_empty or not plan.steps:
        return False
    first = plan.steps[0]
    return isinstance(first, (P.ConstConcept, P.LinkById)) and not first.bound


# What a FILTER compares that the columnar run can read from an attribute column.
_ROW_FREE = (A.Literal, A.Param, A.ObjectValue, A.ArrayValue)


def attribute_filter(plan: P.GroupPlan, i: int) -> tuple[str, A.Value, str] | None:
    """(variable, type, key) when step i of the plan is a FILTER comparing
    `?x.attributes.key…` with a value that is the same on every row, and an earlier step of
    the same plan keeps only concepts of one type in ?x (a type check or a type scan): the
    columnar run then reads the key from the type's attribute column
    (`nexus.store.columns.AttrColumn`) instead of each row's attribute map."""
    step = plan.steps[i]
    if not isinstance(step, P.Filter) or not isinstance(step.expr, A.Compare):
        return None
    left, right = step.expr.left, step.expr.right
    if isinstance(left, A.Path) and isinstance(right, _ROW_FREE):
        path = left
    elif isinstance(right, A.Path) and isinstance(left, _ROW_FREE):
        path = right
    else:
        return None
    if len(path.segments) < 2 or path.segments[0] != "attributes":
        return None
    for before in plan.steps[:i]:
        if isinstance(before, P.CheckConcept) and before.var == path.var \
                and before.type is not None:
            return path.var, before.type, path.segments[1]
        if isinstance(before, P.ScanType) and before.var == path.var:
            return path.var, before.type, path.segments[1]
    return None


class ExecutorCosts:
    """Estimated microseconds of one execution on each executor; `build` is the part of
    `col` that builds arrays the snapshot's cache does not hold yet."""

    __slots__ = ("row", "col", "build", "need")

    def __init__(self) -> None:
        self.row = 0.0
        self.col = COL_FIXED
        self.build = 0.0
        self.need: set[tuple[Any, ...]] = set()     # arrays the columnar run would use

    @property
    def columnar_wins(self) -> bool:
        return self.col < self.row


def executor_costs(plan: P.GroupPlan, est: Estimator,
                   cached: Callable[[tuple[Any, ...]], bool]) -> ExecutorCosts:
    """The row-path and columnar costs of running `plan` once. `cached(("L", pid))` /
    `cached(("T", tid))` / `cached(("A", tid, key))` tell whether the snapshot's column
    cache already holds a predicate's link arrays / a type's ids / an attribute column (then
    the columnar run need not build them)."""
    costs = ExecutorCosts()
    rows = _walk(plan, 1.0, {}, costs, est, cached)
    for u in plan.unions:
        rows += _walk(u, 1.0, {}, costs, est, cached)
    if plan.then is not None:         # run by the row path on each combined row
        then = executor_costs(plan.then, est, cached)
        costs.row += rows * then.row
        costs.col += rows * then.row
    return costs


def _walk(plan: P.GroupPlan, rows: float, domain: dict[str, float], costs: ExecutorCosts,
          est: Estimator, cached: Callable[[tuple[Any, ...]], bool]) -> float:
    """Add the plan's costs for `rows` input rows; returns the rows it is estimated to
    produce. `domain` maps a variable to the size of the type it ranges over (when known),
    for fan-out estimates: links of a predicate spread over that type."""
    domain = dict(domain)

    def need(key: tuple[Any, ...], keys: float, per_key: float) -> None:
        if key not in costs.need and not cached(key):
            costs.col += keys * per_key
            costs.build += keys * per_key
        costs.need.add(key)

    for i, step in enumerate(plan.steps):
        before = rows
        if isinstance(step, P.ScanType):
            tid = est.sid(step.type)
            count = est.type_size(tid)
            if tid:
                need(("T", tid), count, KEY_SCAN)
            rows = rows * count
            domain[step.var] = count
        elif isinstance(step, P.ConstConcept):
            if step.atom.type is not None:
                tid = est.sid(step.atom.type)
                domain[step.var] = est.type_size(tid) if tid else 1.0
        elif isinstance(step, P.CheckConcept):
            rows *= KEEP_CHECK_CONCEPT
        elif isinstance(step, (P.Expand, P.LinkCheck, P.ScanLinks)):
            by_object = isinstance(step, P.Expand) and step.direction == "in"
            count = 0.0
            for pid in est.pids(step.predicates):
                links = est.txn.count_predicate(pid)
                count += links
                need(("L", pid), links, KEY_SCAN + (KEY_SORT if by_object else 0.0))
            costs.row += before * ROW_SEEK
            if isinstance(step, P.Expand):
                d = domain.get(step.start)
                rows = rows * (count / d if d else est.spread(count))
            elif isinstance(step, P.LinkCheck):
                rows *= KEEP_LINK_CHECK
            else:
                rows *= count
        elif isinstance(step, P.ExpandAny) and not (step.pred_bound or step.end_bound):
            count = 0.0
            for pid in (est.link_pids() if step.narrow is None else est.narrow_pids(step.narrow)):
                links = est.txn.count_predicate(pid)
                count += links
                need(("L", pid), links, KEY_SCAN + (KEY_SORT if step.direction == "in" else 0.0))
            costs.row += before * ROW_SEEK
            d = domain.get(step.start)
            rows = rows * (count / d if d else est.spread(count))
        elif isinstance(step, P.Filter):
            column = attribute_filter(plan, i)
            tid = est.sid(column[1]) if column is not None else None
            if column is not None and tid:
                # the column is filled with the maps of the rows that reach it
                need(("A", tid, column[2]), before, ATTR_GET)
                costs.row += before * ATTR_GET
            rows *= KEEP_FILTER
        elif isinstance(step, P.OptionalJoin):
            sub_rows = _walk(step.plan, rows, domain, costs, est, cached)
            costs.row += rows * ROW_SEEK
            rows = max(rows, sub_rows)
        elif isinstance(step, P.AntiJoin):
            _walk(step.plan, rows, domain, costs, est, cached)
            costs.row += rows * ROW_SEEK
            rows *= KEEP_NOT
        else:
            rows *= GROW_OTHER
            costs.col += before * ROW_STEP          # runs the row stage per row anyway
        costs.row += (before + rows) * ROW_STEP
        costs.col += (before + rows) * COL_ROW
    return rows
