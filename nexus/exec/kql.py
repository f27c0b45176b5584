"""FIND: prepare (bind → plan → compile, cached per parsed command), run, shape the result.

`run_find(ctx, find, params)` returns `(result, next_cursor)` in the layout of CONTRACT §4:
solutions deduplicated on the FIND variables (first-found order unless ORDER BY), one column
per expression (a single expression → a flat list), implicit GROUP BY for aggregates, ORDER BY
with nulls last, LIMIT and an opaque CURSOR. `solutions(ctx, where, variables)` is the same
matcher for KML's `DELETE … WHERE`.

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

import base64
import hashlib
import json
from dataclasses import dataclass, replace
from typing import Any, Iterator, Mapping

from ..errors import ErrorCode, KipError
from ..plan.explain import explain_plan
from ..plan.logical import LogicalQuery, PathAtom, bind_where, unbound
from ..plan.cost import Estimator, anchored
from ..plan.physical import ConstConcept, GroupPlan, may_repeat, plan_query
from ..syntax import ast as A
from ..syntax import to_text
from . import columnar
from .env import Env, check_hop_range
from .registry import executes
from .filters import kind as value_kind
from .operators import compile_group
from .results import Aggregator, _DistinctIds, counted, order_rows


@dataclass
class Prepared:
    find: A.Find
    logical: LogicalQuery
    plan: GroupPlan
    runner: Any
    layout: list[str]
    mandatory: list
    fingerprint_params: tuple[str, ...]
    fingerprint_text: str
    repeat_key: tuple[int, ...] | None = None     # named positions, when rows may repeat
    named_idx: tuple[int, ...] = ()               # positions of the named variables
    distinct_rows: bool = False                   # rows never repeat on the named variables
    paths: tuple[tuple[int, int | None], ...] = ()     # hop ranges, checked per execution
    anchored: bool = False                        # starts from a constant (columnar.anchored)
    aggregated: bool = False                      # FIND has aggregates
    key_idx: tuple[int, ...] = ()                 # positions of the FIND variables
    no_dedup: bool = False                        # rows are already distinct on key_idx
    program: Any = None                           # columnar.GroupProgram, built on first use
    point: Any = None                             # the ConceptAtom of a point lookup plan
    chosen: Any = None                            # (snapshot, params) `auto` ran columnar


_PREPARED: dict[int, tuple[A.Find, Prepared]] = {}
_PREPARED_LIMIT = 4096


def prepare(ctx: Any, find: A.Find, params: Mapping[str, Any], *, cache: bool = True
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
        path = item.arg if isinstance(item, A.Aggregate) else item
        if path.var not in layout:
            where = "ORDER BY" if item not in find.items else "FIND"
            raise unbound(path.var, path.pos, where)
    fp_params = tuple(sorted(_param_names(replace(find, limit=None, cursor=None))))
    named_idx = tuple(i for i, v in enumerate(layout) if not v.startswith("#"))
    repeats = may_repeat(plan)
    prepared = Prepared(find, logical, plan, compile_group(plan), layout,
                        _mandatory_atoms(logical), fp_params,
                        to_text(replace(find, limit=None, cursor=None)),
                        repeat_key=named_idx if repeats else None,
                        named_idx=named_idx, distinct_rows=not repeats,
                        paths=tuple(_path_ranges(logical.root)),
                        anchored=anchored(plan), aggregated=aggregated)
    prepared.key_idx = _var_positions(layout, find.items)
    prepared.point = _point_atom(plan, find, aggregated)
    prepared.no_dedup = prepared.distinct_rows and set(prepared.key_idx) >= set(named_idx)
    if cache:
        if len(_PREPARED) >= _PREPARED_LIMIT:
            _PREPARED.clear()
        _PREPARED[id(find)] = (find, prepared)
    return prepared


def _point_atom(plan: GroupPlan, find: A.Find, aggregated: bool) -> Any:
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


def _path_ranges(group: Any) -> Iterator[tuple[int, int | None]]:
    for atom in group.atoms:
        if isinstance(atom, PathAtom):
            yield (atom.lo, atom.hi)
    for _, sub in group.nested:
        yield from _path_ranges(sub)
    for sub in group.unions:
        yield from _path_ranges(sub)


def check_hops(ctx: Any, prep: Prepared) -> None:
    """KIP_4002 for a path range over the hop cap (CONTRACT §6) — checked before anything
    runs, so that a path in a block that is never reached is refused all the same."""
    for lo, hi in prep.paths:
        check_hop_range(lo, hi, ctx.limits.max_hops)


def _mandatory_atoms(logical: LogicalQuery) -> list:
    out = []
    for atom in logical.root.atoms:
        if getattr(atom, "mandatory", False) and (
                not hasattr(atom, "is_constant") or atom.is_constant):
            out.append(atom)
    return out


def _param_names(node: Any) -> set[str]:
    from ..syntax.parser import placeholder_names
    return set(placeholder_names(node))


# --- FIND --------------------------------------------------------------------------------

@executes(A.Find)
def run_find(ctx: Any, find: A.Find, params: Mapping[str, Any] | None = None
             ) -> tuple[Any, str | None]:
    params = params or {}
    prep = prepare(ctx, find, params)
    check_hops(ctx, prep)
    env = Env(ctx, params)
    env.check_mandatory(prep.mandatory)
    limit = env.value(find.limit) if find.limit is not None else None
    offset = _decode_cursor(env.value(find.cursor), prep, params) if find.cursor else 0
    if ctx.dry_run:
        return _empty(find), None
    if prep.point is not None:
        n = env.const_concept(prep.point)
        rows: Any = [] if n is None else [(n,)]
        _row_cap(ctx, len(rows), True)
        cx = None
    else:
        cx = _columns(env, prep)
    if cx is not None:
        out = columnar.execute(env, cx, prep.program)
        if type(out) is columnar.Batch:
            return _find_batch(env, cx, prep, out, limit, offset, params)
        rows = _limited(env, out)
    elif prep.point is None:
        rows = _solutions(env, prep)
    if prep.aggregated:
        return _aggregate(env, prep, rows, limit, offset, params)
    key_idx = prep.key_idx
    stop = None if (limit is None or find.order_by) else offset + limit + 1
    if prep.no_dedup:
        # Rows are distinct on the named variables and FIND mentions all of them.
        unique = list(rows if stop is None else _take(rows, stop))
    else:
        unique = _dedup(rows, key_idx, stop)
    if find.order_by:
        unique = order_rows(env, unique, find.order_by, prep.layout, None)
    end = len(unique) if limit is None else offset + limit
    page = unique[offset:end]
    more = len(unique) > end
    columns = [_project_column(env, prep.layout, item, page) for item in find.items]
    result = columns[0] if len(columns) == 1 else columns
    return result, (_encode_cursor(end, prep, params) if more else None)


def _empty(find: A.Find) -> Any:
    """The result over no solutions (what a dry run answers, CONTRACT §2)."""
    if all(isinstance(i, A.Aggregate) for i in find.items):
        values = [0 if i.func in ("COUNT", "SUM") else None for i in find.items]
        return values[0] if len(values) == 1 else values
    return [] if len(find.items) == 1 else [[] for _ in find.items]


def _solutions(env: Env, prep: Prepared) -> Iterator[tuple]:
    """Every solution row, with the row cap and deadline enforced as rows stream."""
    return _limited(env, prep.runner(env, ()))


def _limited(env: Env, rows: Iterator[tuple]) -> Iterator[tuple]:
    limit = env.ctx.limits.max_rows
    count = 0
    for row in rows:
        count += 1
        if not count & 4095:
            env.ctx.check_deadline()
            if count > limit:
                raise env.ctx.too_many_rows()
        yield row
    if count > limit:
        raise env.ctx.too_many_rows()


def _var_positions(layout: list[str], items) -> tuple[int, ...]:
    seen: list[int] = []
    for item in items:
        path = item.arg if isinstance(item, A.Aggregate) else item
        i = layout.index(path.var)
        if i not in seen:
            seen.append(i)
    return tuple(seen)


def _take(rows: Iterator[tuple], n: int) -> Iterator[tuple]:
    for i, row in enumerate(rows):
        if i >= n:
            return
        yield row


def _dedup(rows: Iterator[tuple], key_idx: tuple[int, ...], stop: int | None) -> list[tuple]:
    seen: set = set()
    out: list[tuple] = []
    if len(key_idx) == 1:
        (k,) = key_idx
        for row in rows:
            key = row[k]
            if key not in seen:
                seen.add(key)
                out.append(row)
                if stop is not None and len(out) >= stop:
                    break
        return out
    for row in rows:
        key = tuple(row[i] for i in key_idx)
        if key not in seen:
            seen.add(key)
            out.append(row)
            if stop is not None and len(out) >= stop:
                break
    return out


def _distinct(rows: Iterator[tuple], key_idx: tuple[int, ...]) -> Iterator[tuple]:
    """Rows with distinct values at `key_idx` (the named variables), first one kept."""
    seen: set = set()
    for row in rows:
        key = tuple(row[i] for i in key_idx)
        if key not in seen:
            seen.add(key)
            yield row


def _project_column(env: Env, layout: list[str], item: A.Path, rows: list[tuple]) -> list:
    i = layout.index(item.var)
    segs = item.segments
    if not segs:
        element = env.element
        return [element(row[i]) for row in rows]
    if segs == ("name",):
        head = env.txn.known_head          # row values were read from this snapshot
        out = []
        append = out.append
        for row in rows:
            n = row[i]
            append(getattr(head(n), "name", None) if n is not None else None)
        return out
    path_value = env.path_value
    return [path_value(row[i], segs) for row in rows]


def _aggregate(env: Env, prep: Prepared, rows: Iterator[tuple], limit: int | None,
               offset: int, params: Mapping[str, Any]) -> tuple[Any, str | None]:
    agg = Aggregator(env, prep.layout, prep.find.items)
    if prep.repeat_key is not None:
        rows = _distinct(rows, prep.repeat_key)
    for row in rows:
        agg.add(row)
    return _aggregate_result(env, prep, agg, limit, offset, params)


def _aggregate_result(env: Env, prep: Prepared, agg: Aggregator, limit: int | None,
                      offset: int, params: Mapping[str, Any]) -> tuple[Any, str | None]:
    find = prep.find
    groups = agg.groups()
    if agg.only_aggregates:
        values = groups[0].values() if groups else agg.empty_values()
        return (values[0] if len(values) == 1 else values), None
    if find.order_by:
        groups = order_rows(env, groups, find.order_by, prep.layout, agg)
    end = len(groups) if limit is None else offset + limit
    page = [g.values() for g in groups[offset:end]]
    columns = [[values[j] for values in page] for j in range(len(find.items))]
    result = columns[0] if len(columns) == 1 else columns
    more = len(groups) > end
    return result, (_encode_cursor(end, prep, params) if more else None)


# --- the columnar path (see nexus.exec.columnar) -----------------------------------------

def _columns(env: Env, prep: Prepared) -> Any:
    """The snapshot's column view when this execution should run columnar, else None."""
    ctx = env.ctx
    mode = ctx.columnar or columnar.default_mode()
    if mode == "never" or (mode == "auto" and prep.anchored):
        return None
    columns = getattr(env.txn, "columns", None)
    if columns is None:
        return None
    if prep.program is None:
        prep.program = columnar.GroupProgram(prep.plan)
    if mode == "auto":
        snap = env.txn.snapshot_id()
        if snap is None:
            return None
        key = _choice_key((id(env.txn._store), snap), prep, env.params)
        if key is None or prep.chosen != key:
            if not columnar.choose(env, prep.program):
                return None
            # Remembered only when columnar won: the estimate for the same snapshot and
            # parameters can only get cheaper for columns (their arrays are cached now).
            prep.chosen = key
    return columns()


def _choice_key(snap: tuple, prep: Prepared, params: Mapping[str, Any]) -> Any:
    """What `columnar.choose` depends on besides the cache: the store and its snapshot, and
    the values of the parameters the command uses (None when one is not hashable: no memo).
    A stale hit (a new store at a freed address) could only pick the other executor, whose
    answers are the same."""
    key = (snap, tuple(params.get(k) for k in prep.fingerprint_params))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _row_cap(ctx: Any, pulled: int, exhausted: bool) -> None:
    """The row cap exactly as `_limited` applies it to a stream from which `pulled` rows
    were read (checked every 4096 rows, and at the end when the stream was exhausted)."""
    cap = ctx.limits.max_rows
    if (exhausted and pulled > cap) or (pulled // 4096) * 4096 > cap:
        raise ctx.too_many_rows()


def _find_batch(env: Env, cx: Any, prep: Prepared, batch: columnar.Batch, limit: int | None,
                offset: int, params: Mapping[str, Any]) -> tuple[Any, str | None]:
    """run_find's shaping over a finished batch: the same answers, column by column."""
    import numpy as np
    find = prep.find
    layout = prep.layout
    if prep.aggregated:
        _row_cap(env.ctx, batch.size, True)
        return _aggregate_batch(env, cx, prep, batch, limit, offset, params)
    key_idx = prep.key_idx
    stop = None if (limit is None or find.order_by) else offset + limit + 1
    size = batch.size
    if prep.no_dedup:
        if stop is not None and size > stop:
            sel, pulled, exhausted = np.arange(stop), stop + 1, False
        else:
            sel, pulled, exhausted = np.arange(size), size, True
    else:
        sel = columnar.first_unique([batch.cols[i] for i in key_idx])
        if stop is not None and len(sel) >= stop:
            sel = sel[:stop]
            pulled, exhausted = int(sel[-1]) + 1, False
        else:
            pulled, exhausted = size, True
    _row_cap(env.ctx, pulled, exhausted)
    if find.order_by:
        unique = order_rows(env, batch.take(sel).rows(), find.order_by, layout, None)
        end = len(unique) if limit is None else offset + limit
        page = unique[offset:end]
        columns = [_project_column(env, layout, item, page) for item in find.items]
        more = len(unique) > end
    else:
        end = len(sel) if limit is None else offset + limit
        page_idx = sel[offset:end]
        more = len(sel) > end
        columns = [columnar.project(env, cx, batch.cols[layout.index(item.var)][page_idx],
                                    item.segments) for item in find.items]
    result = columns[0] if len(columns) == 1 else columns
    return result, (_encode_cursor(end, prep, params) if more else None)


def _aggregate_batch(env: Env, cx: Any, prep: Prepared, batch: columnar.Batch,
                     limit: int | None,
                     offset: int, params: Mapping[str, Any]) -> tuple[Any, str | None]:
    """Implicit GROUP BY over a batch: groups by the key identities (np.unique), COUNT by
    bincount, COUNT(DISTINCT ?x) by unique (group, id) pairs; other aggregates feed the
    row accumulators. Phase 2 (key values, merging equal keys, ORDER BY) is the row path's."""
    import numpy as np
    layout = prep.layout
    agg = Aggregator(env, layout, prep.find.items)
    if prep.repeat_key is not None:
        batch = batch.take(columnar.first_unique([batch.cols[i] for i in prep.repeat_key]))
    aggs = agg.aggregates
    if not all(a.func == "COUNT" and not (a.distinct and a.arg.segments) for a in aggs):
        for row in batch.rows():
            agg.add(row)
        return _aggregate_result(env, prep, agg, limit, offset, params)
    group, firsts = columnar.group_ids([batch.cols[i] for i in agg.key_positions], batch.size)
    n_groups = len(firsts)
    per_agg = []
    for a in aggs:
        col = batch.cols[layout.index(a.arg.var)]
        if a.distinct:
            present = col != 0
            g, c = group[present], col[present]
            order = np.lexsort((c, g))
            g, c = g[order], c[order]
            keep = np.ones(len(g), dtype=bool)
            keep[1:] = (g[1:] != g[:-1]) | (c[1:] != c[:-1])
            g, c = g[keep], c[keep]
            bounds = np.searchsorted(g, np.arange(n_groups + 1)).tolist()
            per_agg.append([_DistinctIds(c[bounds[k]:bounds[k + 1]])
                            for k in range(n_groups)])
        else:
            present = columnar.not_null_by_id(env, col, a.arg.segments)
            per_agg.append(np.bincount(group[present], minlength=n_groups).tolist())
    if agg.key_positions and not prep.find.order_by and not any(a.distinct for a in aggs):
        done = _groups_by_columns(env, cx, prep, batch, firsts, per_agg, limit, offset,
                                  params)
        if done is not None:
            return done
    first_rows = batch.take(firsts).rows()
    for k in range(n_groups):
        agg.add_group(first_rows[k], [counted(accs[k]) if type(accs[k]) is int else accs[k]
                                      for accs in per_agg])
    return _aggregate_result(env, prep, agg, limit, offset, params)


def _groups_by_columns(env: Env, cx: Any, prep: Prepared, batch: columnar.Batch, firsts: Any,
                       per_agg: list, limit: int | None, offset: int,
                       params: Mapping[str, Any]) -> tuple[Any, str | None] | None:
    """Phase 2 of GROUP BY column-wise, when no two identity groups have equal key values
    (then nothing merges and each identity group is a result group, in first-seen order).
    None when some would merge: the caller takes the general path."""
    from .results import _hashable
    layout = prep.layout
    items = prep.find.items
    values: list = []
    hashed: list = []
    for item in items:
        if isinstance(item, A.Aggregate):
            continue
        ids = batch.cols[layout.index(item.var)][firsts]
        if item.segments:
            column = columnar.project(env, cx, ids, item.segments)
            values.append(column)
            # all strings (names): the values are their own keys (one C-level pass)
            hashed.append(column if set(map(type, column)) <= {str}
                          else [_hashable(v) for v in column])
        else:
            values.append(columnar.project(env, cx, ids, ()))
            hashed.append(ids.tolist())          # a bare ?x groups by identity
    n_groups = len(firsts)
    distinct = len(set(hashed[0])) if len(hashed) == 1 else len(set(zip(*hashed)))
    if distinct != n_groups:
        return None
    it_keys = iter(values)
    it_aggs = iter(per_agg)
    columns = [next(it_aggs) if isinstance(item, A.Aggregate) else next(it_keys)
               for item in items]
    end = n_groups if limit is None else offset + limit
    columns = [c[offset:end] for c in columns]
    result = columns[0] if len(columns) == 1 else columns
    return result, (_encode_cursor(end, prep, params) if n_groups > end else None)


# --- cursors -----------------------------------------------------------------------------

def _fingerprint(prep: Prepared, params: Mapping[str, Any]) -> str:
    used = {k: params.get(k) for k in prep.fingerprint_params}
    blob = prep.fingerprint_text + "\0" + json.dumps(used, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _encode_cursor(offset: int, prep: Prepared, params: Mapping[str, Any]) -> str:
    raw = json.dumps({"o": offset, "f": _fingerprint(prep, params)}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_cursor(token: Any, prep: Prepared, params: Mapping[str, Any]) -> int:
    bad = KipError(ErrorCode.KIP_1001, "Invalid CURSOR: it does not belong to this query",
                   "Pass the `next_cursor` returned by the previous page of the same query "
                   "(same WHERE, ORDER BY and parameters), or drop CURSOR to start over.")
    if not isinstance(token, str) or len(token) > 512:
        raise bad
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        offset = data["o"]
        fp = data["f"]
    except (ValueError, KeyError, TypeError):
        raise bad from None
    if not isinstance(offset, int) or offset < 0 or fp != _fingerprint(prep, params):
        raise bad
    return offset


# --- EXPLAIN -----------------------------------------------------------------------------

def run_explain(ctx: Any, explain: A.Explain, params: Mapping[str, Any] | None = None
                ) -> dict[str, Any]:
    params = params or {}
    prep = prepare(ctx, explain.query, params, cache=False)
    return explain_plan(prep.plan, explain.query)


@executes(A.Explain)
def _execute_explain(ctx: Any, explain: A.Explain, params: Mapping[str, Any]
                     ) -> tuple[Any, str | None]:
    return run_explain(ctx, explain, params), None


# --- the matcher for DELETE … WHERE ------------------------------------------------------

def solutions(ctx: Any, where: tuple[A.Pattern, ...], variables: list[str],
              params: Mapping[str, Any] | None = None) -> Iterator[tuple]:
    """Distinct tuples of element ids (or None) for `variables`, over the WHERE solutions.

    Raises KIP_3001 for a variable bound nowhere, KIP_3002 for a mandatory `{id}` /
    `{type, name}` / `(id:)` clause that matches nothing.
    """
    items = tuple(A.Path(v) for v in variables)
    find = A.Find(items, tuple(where))
    params = params or {}
    prep = prepare(ctx, find, params, cache=False)
    env = Env(ctx, params)
    env.check_mandatory(prep.mandatory)
    key_idx = tuple(prep.layout.index(v) for v in variables)
    seen: set = set()
    for row in _solutions(env, prep):
        key = tuple(row[i] for i in key_idx)
        if key not in seen:
            seen.add(key)
            yield key


__all__ = ["run_find", "run_explain", "solutions", "prepare", "value_kind"]
