"""The columnar executor: a group plan run over numpy columns of element ids.

Why: the row path (`operators`) moves every solution through a chain of Python generator
stages, ~1–4 µs per row and stage. That is the right shape for an anchored query (a few
rows, a B-tree seek each), and the wrong one for a query that touches a large part of the
graph (all drugs with their side effects, every class with its members), where the per-row
cost is the whole cost. This module runs the SAME physical plan (no second planner, no
second semantics) over a batch of columns — one int64 array per variable, aligned, 0 for
null (no element has id 0) — using the snapshot's column views (`nexus.store.columns`):

* ScanType: the type's sorted id array (crossed with the incoming rows);
* ConstConcept / LinkById: one id compared or appended;
* CheckConcept: `tid_of[col]` (and the names, `names(col)`) — process-wide arrays, valid across
  snapshots because heads are immutable;
* Expand: `searchsorted` ranges over the predicate's links sorted by subject (out) or by
  object (in), then `np.repeat`; several predicates are concatenated and stably sorted back
  into row order;
* ExpandAny (a predicate variable from a bound end): Expand over every predicate that has
  links, the predicate column holding each link's negated symbol id;
* LinkCheck: membership of (s << 32 | o) in the predicate's sorted pair keys;
* ScanLinks: the predicate's arrays crossed with the incoming rows;
* OPTIONAL / NOT: the block's plan is run over the whole batch at once with each output row
  remembering the input row it came from (`origin`); OPTIONAL is then a left join (rows
  with no match get 0s), NOT drops the origins that matched; a block that uses no outer
  variable is run once;
* FILTER: `?x.attributes.k op v` on a variable an earlier step keeps to one type reads the
  type's attribute column (`AttrColumn`) and tests each distinct value once
  (`filters.compile_attribute_test`; rows whose id the column does not hold, such as null,
  take the general test); otherwise the compiled FILTER callable (the one the row path
  uses) per row — or, when it reads a single variable, once per distinct value;
* anything else (paths, link variables, a block with UNIONs) runs the row path's compiled
  stage once per batch row, so every plan can run here.

Order is the row path's: every step keeps the incoming row order and, within a row, the
order the row path's index scan would produce (the link arrays are in index order), so
results, first-found deduplication and CURSOR pages are identical whichever executor ran.

Budgets: the deadline is checked after each step and while per-row work runs. An
intermediate batch may not exceed `MAX_BATCH` rows: a step that would produce more (a cross
product, a huge fan-out) stops the columnar run, and the rest of the plan streams through
the row path from that step on (where the row cap and the deadline apply row by row, as
without columns). A finished batch goes to the shaper as `batch.BatchSolutions`, which
applies the row cap exactly as the streaming path would have.

When to use it is decided per execution (`choose`): never in a write transaction (DELETE …
WHERE) or when the store's ids are not dense enough for arrays; otherwise by the cost
model's comparison (`nexus.plan.cost.executor_costs`) of the row path's cost (rows ×
per-step cost, seeks per row) with the columnar cost — chiefly building the link/type
arrays not yet cached for this snapshot (a key scan of the whole predicate, so after a
write a small selective query keeps the row path) plus a fixed overhead.
`Nexus.open(columnar="auto"|"always"|"never")` or `NEXUS_COLUMNAR` force it (the test
suite runs every KQL test both ways).
"""
from __future__ import annotations

import enum
import os
from typing import Any, Callable, Final, Sequence, Union

import numpy as np

from ..plan import physical as P
from ..plan.cost import Estimator, ExecutorCosts, attribute_filter, executor_costs
from ..plan.logical import expr_vars
from ..store.columns import AttrColumn, LinkColumns, TxnColumns
from .batch import Batch
from .env import Env
from .filters import Test, compile_attribute_test, compile_filter
from .operators import (Stage, compile_group, compile_step, merge_union_row, step_layouts,
                        union_map)
from .rows import Row, Rows

MAX_BATCH = 1_000_000          # rows of an intermediate batch before the run streams
MODES = ("auto", "always", "never")
_EMPTY_TAKE = np.zeros(0, dtype=np.intp)


def default_mode() -> str:
    mode = os.environ.get("NEXUS_COLUMNAR", "auto").strip().lower() or "auto"
    return mode if mode in MODES else "auto"


# --- how a step answers -----------------------------------------------------------------

def _to_col(values: list[int | None]) -> np.ndarray:
    return np.fromiter((v or 0 for v in values), dtype=np.int64, count=len(values))


class _Stop(Exception):
    """A step cannot run on this batch (too many rows): stream from here."""


class _NotVector(enum.Enum):
    NOT_VECTOR = 0


# A vectorised step's answer: which incoming rows survive, in what order (an index array or
# a bool mask; None: all, as they are) and the columns it binds (None: none) — or
# _NOT_VECTOR, when it cannot run on this batch in columns (the row stage runs per row).
Take = Union[np.ndarray, None]
Result = tuple[Take, Union[list[np.ndarray], None]]
_NOT_VECTOR: Final = _NotVector.NOT_VECTOR


# --- programs: per-plan compiled state ---------------------------------------------------

class GroupProgram:
    """What the columnar run of one GroupPlan needs, compiled once per prepared query."""

    def __init__(self, plan: P.GroupPlan) -> None:
        self.plan = plan
        # One entry per step, plus the layout after the last step.
        self.layouts = step_layouts(plan)
        self._stages: dict[int, Stage] = {}
        self.subs: dict[int, GroupProgram] = {}
        self.filters: dict[int, tuple[Test, tuple[int, ...]]] = {}
        # FILTER steps read from an attribute column: step -> (type, key, value test)
        self.attr_filters: dict[int, tuple[Any, str, Callable[[Any, Env], bool]]] = {}
        for i, step in enumerate(plan.steps):
            if isinstance(step, (P.OptionalJoin, P.AntiJoin)):
                self.subs[i] = GroupProgram(step.plan)
            elif isinstance(step, P.Filter):
                layout = self.layouts[i]
                positions = tuple(sorted({layout.index(v) for v, _ in expr_vars(step.expr)
                                          if v in layout}))
                self.filters[i] = (compile_filter(step.expr, layout), positions)
                column = attribute_filter(plan, i)
                on_value = compile_attribute_test(step.expr)
                if column is not None and on_value is not None and len(positions) == 1:
                    self.attr_filters[i] = (column[1], column[2], on_value)
        self.unions = [GroupProgram(u) for u in plan.unions]
        self.union_maps = [union_map(plan, u) for u in plan.unions]
        # Clauses after the last UNION run: the row path's, on each combined row.
        self.then = None if plan.then is None else compile_group(plan.then)
        self.head = None if plan.then is None else GroupProgram(P.without_then(plan))
        # Whether every step (and every step of its blocks) has a columnar form: no step
        # would run the row path's stage per row (paths, link variables, UNIONs).
        self.vectorized: bool = not plan.unions and plan.then is None \
            and all(type(step) in _VECTOR for step in plan.steps) \
            and all(sub.vectorized for sub in self.subs.values())

    def stage(self, i: int) -> Stage:
        """The row path's stage for step i (compiled on first use)."""
        st = self._stages.get(i)
        if st is None:
            st = self._stages[i] = compile_step(self.plan.steps[i], self.layouts[i])
        return st


# --- the run -----------------------------------------------------------------------------

def execute(env: Env, cx: TxnColumns, prog: GroupProgram) -> Batch | Rows:
    """The top-level group's solutions: a Batch laid out as `plan.out_layout`, or — when a
    step had to stream — an iterator of row tuples in the same layout and order."""
    plan = prog.plan
    if prog.then is not None and prog.head is not None:
        then = prog.then
        head = execute(env, cx, prog.head)
        rows = head.rows() if isinstance(head, Batch) else head
        return (out for row in rows for out in then(env, row))
    width = len(plan.out_layout)
    parts: list[Batch | Rows] = []
    if not plan.main_empty:
        batch, _, stop = run_steps(env, cx, prog, Batch([], 1), None)
        pad = width - len(plan.layout)
        if stop is None:
            parts.append(Batch(batch.cols + [np.zeros(batch.size, np.int64)] * pad,
                               batch.size))
        else:
            parts.append(_stream(env, prog, batch, stop, (None,) * pad))
    for union, mapping in zip(prog.unions, prog.union_maps):
        got = execute(env, cx, union)           # a branch may have UNIONs of its own
        if isinstance(got, Batch):
            cols: list[np.ndarray | None] = [None] * width
            for src, dst in mapping:
                cols[dst] = got.cols[src]
            parts.append(Batch([c if c is not None else np.zeros(got.size, np.int64)
                                for c in cols], got.size))
        else:
            parts.append(_merged(got, mapping, width))
    batches = [p for p in parts if isinstance(p, Batch)]
    if len(batches) == len(parts):
        if len(batches) == 1:
            return batches[0]
        size = sum(p.size for p in batches)
        if not width:
            return Batch([], size)
        return Batch([np.concatenate([p.cols[j] for p in batches]) for j in range(width)],
                     size)
    return _chain(parts)


def _merged(rows: Rows, mapping: list[tuple[int, int]], width: int) -> Rows:
    """A UNION branch's streamed rows laid out as the group's (`merge_union_row`)."""
    return (r for urow in rows if (r := merge_union_row((), urow, mapping, 0, width))
            is not None)


def _chain(parts: list[Batch | Rows]) -> Rows:
    for p in parts:
        if isinstance(p, Batch):
            yield from p.rows()
        else:
            yield from p


def _stream(env: Env, prog: GroupProgram, batch: Batch, start: int, pad: Row) -> Rows:
    """The rest of the plan, from step `start`, through the row path's stages."""
    rows: Rows = iter(batch.rows())
    for i in range(start, len(prog.plan.steps)):
        rows = prog.stage(i)(env, rows)
    if pad:
        rows = (r + pad for r in rows)
    return rows


def run_steps(env: Env, cx: TxnColumns, prog: GroupProgram, batch: Batch,
              origin: np.ndarray | None) -> tuple[Batch, np.ndarray | None, int | None]:
    """Run the plan's steps over `batch` (laid out as the plan's inputs). Returns the
    batch, the origin of each row (when tracked) and the index of the step the run stopped
    at (None when it ran to the end)."""
    steps = prog.plan.steps
    check = env.ctx.check_deadline
    for i, step in enumerate(steps):
        if batch.size == 0:
            break
        fn = _VECTOR.get(type(step))
        try:
            got = fn(env, cx, prog, i, step, batch) if fn is not None else _NOT_VECTOR
            res = _per_row(env, prog, i, batch) if got is _NOT_VECTOR else got
        except _Stop:
            return batch, origin, i
        take, new = res
        if take is not None:
            batch = batch.take(take)
            if origin is not None:
                origin = origin[take]
        if new:
            batch = Batch(batch.cols + new, batch.size)
        check()
    width = len(prog.plan.layout)
    if len(batch.cols) < width:
        # No rows (a step emptied the batch): later steps produce none either — their
        # constants are resolved lazily by the row path too, and mandatory ones were
        # checked before the run — so only the columns are completed.
        batch = Batch(batch.cols + [np.zeros(0, np.int64)] * (width - len(batch.cols)), 0)
    return batch, origin, None


def _cap(total: int) -> None:
    if total > MAX_BATCH:
        raise _Stop()


def _empty() -> Result:
    return _EMPTY_TAKE, None


# --- vectorised steps: each returns (take, new columns) ----------------------------------

def _v_const_concept(env: Env, cx: TxnColumns, prog: GroupProgram, i: int,
                     step: P.ConstConcept, batch: Batch) -> Result | _NotVector:
    n = env.const_concept(step.atom)
    if step.bound:
        if n is None:
            return _empty()
        col = batch.cols[prog.layouts[i].index(step.var)]
        return col == n, None
    if n is None:
        return _empty()
    return None, [np.full(batch.size, n, dtype=np.int64)]


def _v_link_by_id(env: Env, cx: TxnColumns, prog: GroupProgram, i: int,
                  step: P.LinkById, batch: Batch) -> Result | _NotVector:
    n = env.const_link(step.atom)
    if n is None:
        return _empty()
    if step.bound:
        col = batch.cols[prog.layouts[i].index(step.var)]
        return col == n, None
    return None, [np.full(batch.size, n, dtype=np.int64)]


def _cross(batch: Batch, cols: list[np.ndarray]) -> Result:
    """Every incoming row followed by every row of `cols` (row-major)."""
    k = len(cols[0]) if cols else 0
    _cap(batch.size * k)
    if batch.size == 1:
        return np.zeros(k, dtype=np.intp), list(cols)
    take = np.repeat(np.arange(batch.size), k)
    return take, [np.tile(c, batch.size) for c in cols]


def _v_scan_type(env: Env, cx: TxnColumns, prog: GroupProgram, i: int,
                 step: P.ScanType, batch: Batch) -> Result | _NotVector:
    tid = env.sid(step.type)
    if tid is None:
        return _empty()
    return _cross(batch, [cx.type_ids(tid)])


def _v_check_concept(env: Env, cx: TxnColumns, prog: GroupProgram, i: int,
                     step: P.CheckConcept, batch: Batch) -> Result | _NotVector:
    tid = None
    if step.type is not None:
        tid = env.sid(step.type)
        if tid is None:
            return _empty()
    name = env.value(step.name) if step.name is not None else None
    col = batch.cols[prog.layouts[i].index(step.var)]
    t = cx.type_of(col)
    mask = (t == tid) if tid is not None else (t > 0)
    if name is not None:
        if not isinstance(name, str):
            return _empty()
        sel = np.flatnonzero(mask)
        mask[sel] = cx.names(col[sel]) == name
    return mask, None


def _ranges(lo: np.ndarray, counts: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray]:
    """(row index, position) of every element of the ranges [lo[r], lo[r] + counts[r])."""
    take = np.repeat(np.arange(len(lo)), counts)
    offsets = np.cumsum(counts) - counts
    pos = np.arange(total) + np.repeat(lo - offsets, counts)
    return take, pos


def _merge_parts(parts: Sequence[tuple[np.ndarray, ...]]) -> Result:
    """Concatenate per-predicate (take, cols...) parts and restore row order (stable)."""
    if len(parts) == 1:
        take, *cols = parts[0]
        return take, cols
    take = np.concatenate([p[0] for p in parts])
    order = np.argsort(take, kind="stable")
    cols = [np.concatenate([p[j] for p in parts])[order] for j in range(1, len(parts[0]))]
    return take[order], cols


def _v_expand(env: Env, cx: TxnColumns, prog: GroupProgram, i: int,
              step: P.Expand, batch: Batch) -> Result | _NotVector:
    layout = prog.layouts[i]
    if step.end in layout or (step.link is not None and (step.link in layout
                                                        or step.link == step.end)):
        return _NOT_VECTOR
    pids = env.pids(step.predicates)
    if not pids:
        return _empty()
    col = batch.cols[layout.index(step.start)]
    with_link = step.link is not None
    parts = []
    total = 0
    for pid in pids:
        links = cx.links(pid)
        if step.direction == "out":
            keys, ends, ns = links.s, links.o, links.n
        else:
            keys, ends, ns = links.by_object()
        lo, counts = links.ranges(keys, col)
        k = int(counts.sum())
        total += k
        _cap(total)
        take, pos = _ranges(lo, counts, k)
        parts.append((take, ends[pos], ns[pos]) if with_link else (take, ends[pos]))
    return _merge_parts(parts)


def _v_expand_any(env: Env, cx: TxnColumns, prog: GroupProgram, i: int,
                  step: P.ExpandAny, batch: Batch) -> Result | _NotVector:
    """A predicate variable from a bound end (RC11 §3.4.2): `_v_expand` over every
    predicate that has links, binding the predicate column (its negated symbol id) — in the
    row path's order (per row: predicate ascending, then the index order). A bound
    predicate or end, or a link variable already bound, runs the row stage."""
    layout = prog.layouts[i]
    if step.pred_bound or step.end_bound or (step.link is not None and step.link in layout):
        return _NOT_VECTOR
    col = batch.cols[layout.index(step.start)]
    with_link = step.link is not None
    parts = []
    total = 0
    pids = (env.narrow_pids(step.narrow) if step.narrow is not None
            else env.link_predicate_ids())
    for pid in pids:
        links = cx.links(pid)
        if step.direction == "out":
            keys, ends, ns = links.s, links.o, links.n
        else:
            keys, ends, ns = links.by_object()
        lo, counts = links.ranges(keys, col)
        k = int(counts.sum())
        if not k:
            continue
        total += k
        _cap(total)
        take, pos = _ranges(lo, counts, k)
        pred = np.full(k, -pid, dtype=np.int64)
        parts.append((take, ends[pos], pred, ns[pos]) if with_link else (take, ends[pos], pred))
    if not parts:
        return _empty()
    return _merge_parts(parts)


def _pair_lookup(links: LinkColumns, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(found mask, link id where found) of the pair keys `q` in one predicate."""
    keys = links.pair_keys()
    if not len(keys):
        return np.zeros(len(q), dtype=bool), np.zeros(len(q), dtype=np.int64)
    idx = np.minimum(np.searchsorted(keys, q), len(keys) - 1)
    return keys[idx] == q, links.n[idx]


def _v_link_check(env: Env, cx: TxnColumns, prog: GroupProgram, i: int,
                  step: P.LinkCheck, batch: Batch) -> Result | _NotVector:
    layout = prog.layouts[i]
    if step.link is not None and step.link in layout:
        return _NOT_VECTOR
    pids = env.pids(step.predicates)
    if not pids:
        return _empty()
    s = batch.cols[layout.index(step.subject)]
    o = batch.cols[layout.index(step.object)]
    q = (s << 32) | o
    null = (s == 0) | (o == 0)
    if step.link is None:
        mask = np.zeros(batch.size, dtype=bool)
        for pid in pids:
            mask |= _pair_lookup(cx.links(pid), q)[0]
        return mask & ~null, None
    parts = []
    for pid in pids:
        found, link = _pair_lookup(cx.links(pid), q)
        found &= ~null
        idx = np.flatnonzero(found)
        parts.append((idx, link[idx]))
    if len(parts) == 1:
        idx, link = parts[0]
        return idx, [link]
    return _merge_parts(parts)


def _v_scan_links(env: Env, cx: TxnColumns, prog: GroupProgram, i: int,
                  step: P.ScanLinks, batch: Batch) -> Result | _NotVector:
    layout = prog.layouts[i]
    if step.subject in layout or step.object in layout or (
            step.link is not None and step.link in layout):
        return _NOT_VECTOR
    pids = env.pids(step.predicates)
    if not pids:
        return _empty()
    arrays = [cx.links(pid) for pid in pids]
    s = np.concatenate([a.s for a in arrays])
    o = np.concatenate([a.o for a in arrays])
    n = np.concatenate([a.n for a in arrays])
    if step.subject == step.object:
        keep = s == o
        cols = [s[keep]] + ([n[keep]] if step.link else [])
    else:
        cols = [s, o] + ([n] if step.link else [])
    return _cross(batch, cols)


def _v_filter(env: Env, cx: TxnColumns, prog: GroupProgram, i: int,
              step: P.Filter, batch: Batch) -> Result | _NotVector:
    test, positions = prog.filters[i]
    width = len(prog.layouts[i])
    tick = env.tick
    on_attr = prog.attr_filters.get(i)
    if on_attr is not None:
        tid = env.sid(on_attr[0])
        if tid:
            return _attr_filter(env, cx, cx.attribute(tid, on_attr[1]), on_attr[2], test,
                                positions[0], width, batch)
    if not positions:
        keep = test((None,) * width, env) is True
        return (None if keep else _EMPTY_TAKE), None
    if len(positions) == 1:
        p = positions[0]
        uniq, inv = np.unique(batch.cols[p], return_inverse=True)
        blank = [None] * width
        ok = []
        for u in uniq.tolist():
            blank[p] = u or None
            ok.append(test(tuple(blank), env) is True)
            tick()
        return np.array(ok, dtype=bool)[inv], None
    out = []
    for row in batch.rows():
        out.append(test(row, env) is True)
        tick()
    return np.array(out, dtype=bool), None


def _attr_filter(env: Env, cx: TxnColumns, column: AttrColumn,
                 on_value: Callable[[Any, Env], bool], test: Test, p: int, width: int,
                 batch: Batch) -> Result:
    """The FILTER through an attribute column: the test once per distinct value code among
    the rows; the rows whose id the column does not hold (null, another type) per id."""
    ids = batch.cols[p]
    codes = cx.attribute_codes(column, ids)
    keep = np.zeros(len(ids), dtype=bool)
    held = codes >= 0
    present = np.unique(codes[held])
    values = column.values
    ok = np.zeros(len(values), dtype=bool)
    for c in present.tolist():
        ok[c] = on_value(values[c], env)
    env.tick(len(present) + 1)
    keep[held] = ok[codes[held]]
    if not held.all():
        blank: list[Any] = [None] * width
        for r in np.flatnonzero(~held).tolist():
            blank[p] = int(ids[r]) or None
            keep[r] = test(tuple(blank), env) is True
            env.tick()
    return keep, None


def _sub_run(env: Env, cx: TxnColumns, prog: GroupProgram, i: int, batch: Batch,
             correlated: bool) -> tuple[Batch, np.ndarray] | _NotVector:
    """Run the block of step i over the batch (or, uncorrelated, over its first row):
    (sub-batch, origin) or _NOT_VECTOR when the block cannot be run in columns here."""
    sub = prog.subs[i]
    if sub.plan.unions or sub.plan.main_empty:
        return _NOT_VECTOR
    inp = batch if correlated else batch.take(np.zeros(1, dtype=np.intp))
    res, origin, stop = run_steps(env, cx, sub, inp, np.arange(inp.size))
    if stop is not None or origin is None:      # (an origin given is an origin returned)
        return _NOT_VECTOR
    return res, origin


def _v_optional(env: Env, cx: TxnColumns, prog: GroupProgram, i: int,
                step: P.OptionalJoin, batch: Batch) -> Result | _NotVector:
    got = _sub_run(env, cx, prog, i, batch, step.correlated)
    if got is _NOT_VECTOR:
        return got
    res, origin = got
    exports = [res.cols[j] for j in step.exports]
    m = batch.size
    if not step.correlated:
        if res.size == 0:
            return None, [np.zeros(m, np.int64) for _ in exports]
        return _cross(batch, exports)
    counts = np.bincount(origin, minlength=m)
    out_counts = np.maximum(counts, 1)
    total = int(out_counts.sum())
    _cap(total)
    if total == res.size:                   # every row matched: the block's rows as they are
        return origin, exports
    take = np.repeat(np.arange(m), out_counts)
    matched = np.repeat(counts > 0, out_counts)
    new = []
    for c in exports:
        full = np.zeros(total, np.int64)
        full[matched] = c
        new.append(full)
    return take, new


def _v_anti(env: Env, cx: TxnColumns, prog: GroupProgram, i: int,
            step: P.AntiJoin, batch: Batch) -> Result | _NotVector:
    got = _sub_run(env, cx, prog, i, batch, step.correlated)
    if got is _NOT_VECTOR:
        return got
    res, origin = got
    if not step.correlated:
        return (_EMPTY_TAKE if res.size else None), None
    hit = np.zeros(batch.size, dtype=bool)
    hit[origin] = True
    return ~hit, None


def _per_row(env: Env, prog: GroupProgram, i: int, batch: Batch) -> Result:
    """The row path's stage for step i, run once per batch row."""
    stage = prog.stage(i)
    base = len(prog.layouts[i])
    take: list[int] = []
    tails: list[Row] = []
    for r, row in enumerate(batch.rows()):
        for out in stage(env, iter((row,))):
            take.append(r)
            tails.append(out[base:])
        if len(take) > MAX_BATCH:
            raise _Stop()
    width = len(tails[0]) if tails else _new_width(prog, i)
    new = [_to_col([t[j] for t in tails]) for j in range(width)]
    return np.array(take, dtype=np.intp), new


def _new_width(prog: GroupProgram, i: int) -> int:
    after = prog.layouts[i + 1] if i + 1 < len(prog.plan.steps) else prog.plan.layout
    return len(after) - len(prog.layouts[i])


# Dispatch by the step's class (each function takes that class of step).
_VECTOR: dict[type, Callable[..., Result | _NotVector]] = {
    P.ConstConcept: _v_const_concept,
    P.LinkById: _v_link_by_id,
    P.ScanType: _v_scan_type,
    P.CheckConcept: _v_check_concept,
    P.Expand: _v_expand,
    P.LinkCheck: _v_link_check,
    P.ScanLinks: _v_scan_links,
    P.Filter: _v_filter,
    P.OptionalJoin: _v_optional,
    P.AntiJoin: _v_anti,
    P.ExpandAny: _v_expand_any,
}


# --- choosing the executor ---------------------------------------------------------------

def choose(env: Env, prog: GroupProgram) -> bool:
    """Whether the columnar run is expected to be cheaper for this execution: the cost
    model's comparison (`nexus.plan.cost`), with the values this execution runs with and the
    arrays the snapshot's column cache already holds."""
    return costs(env, prog).columnar_wins


def costs(env: Env, prog: GroupProgram) -> ExecutorCosts:
    """The cost model's estimates for this execution (`nexus.plan.cost.executor_costs`)."""
    est = Estimator(env.txn, env.sid)
    return executor_costs(prog.plan, est, _CachedProbe(env.txn).has)


def cached_probe(txn: Any) -> Callable[[tuple[Any, ...]], bool]:
    """`has(key)`: whether the snapshot's column cache holds the array `key` now."""
    return _CachedProbe(txn).has


class _CachedProbe:
    """Which arrays the snapshot's cache already holds (without building a view)."""

    def __init__(self, txn: Any) -> None:
        self.snap = txn.snapshot_id()
        self.cache = txn.column_cache() if self.snap is not None else None

    def has(self, key: tuple[Any, ...]) -> bool:
        return self.cache is not None and self.cache.cached(self.snap, key)
