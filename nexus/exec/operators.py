"""Physical operators: each plan step compiled once into a generator stage over row tuples.

A stage is `stage(env, rows) -> rows`: it reads the store only through the transaction's
protocol methods (integer ids, interned symbols) and appends the ids it binds to each row.
Values (type names, predicates, parameters) are resolved through `env` once per execution.
On a store whose calls are round trips (`ReadTxn.prefers_batches()`: PostgreSQL) the
stages that ask the store something per row run their `nexus.exec.chunked` version
instead, which asks once per chunk of rows (`_pick`). Budgets: scans and walks tick the execution's deadline; path ranges are capped by
`Limits.max_hops` and walks by `Limits.max_path_visits` (both `KIP_4002`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable

from ..plan import physical as P
from ..store.protocol import ConceptHead, LinkHead
from ..syntax import ast as A
from . import anti_link as AL
from . import chunked as C
from . import pushdown as PD
from .env import prefetch_spec
from .filters import Test, compile_filter, paths_read
from .rows import Row, Rows

if TYPE_CHECKING:
    from .env import Env

Stage = Callable[["Env", Rows], Rows]


def compile_group(plan: P.GroupPlan, push: PD.Pushdown | None = None
                  ) -> Callable[[Env, Row], Rows]:
    """A function (env, input_row) -> output rows laid out as `plan.out_layout`. `push`:
    the group's pushdown when the caller made it (`pushdown.split`, given what it reads of
    the rows), else it is made here."""
    if plan.then is not None:
        return _continued(plan)
    stages = _compile_steps(plan)
    unions = [compile_group(u) for u in plan.unions]
    union_maps = [union_map(plan, u) for u in plan.unions]
    pad = (None,) * (len(plan.out_layout) - len(plan.layout))
    n_inputs = len(plan.inputs)
    if push is None:
        push = PD.split(plan)
    rest: list[list[Stage]] = []        # the pushdown's remaining stages, made on first use

    def run_main(env: Env, row: Row) -> Rows:
        rows: Rows = iter((row,))
        matcher = env.matcher
        if push is not None and matcher is not None:
            if not rest:
                rest.append(_compile_steps(push.rest))   # (two threads: the same stages)
            rows = PD.rows(env, push, matcher)
            for stage in rest[0]:
                rows = stage(env, rows)
            return rows
        for stage in stages:
            rows = stage(env, rows)
        return rows

    if not unions:
        # The common case returns the stages' chain itself (no generator layer on top: this
        # runs once per outer row for a correlated OPTIONAL/NOT block).
        return run_main

    def run(env: Env, row: Row) -> Rows:
        if not plan.main_empty:
            rows = run_main(env, row)
            if pad:
                rows = (r + pad for r in rows)
            yield from rows
        for union, mapping in zip(unions, union_maps):
            for urow in union(env, ()):
                merged = merge_union_row(row, urow, mapping, n_inputs, len(plan.out_layout))
                if merged is not None:
                    yield merged

    return run


def compile_stream(plan: P.GroupPlan) -> Stage | None:
    """The group's steps as one stage over many input rows (the rows of `compile_group` for
    each input, concatenated: every step maps rows to rows that extend them), or None for
    a group with UNIONs or a continuation, whose rows are not such a map."""
    if plan.then is not None or plan.unions:
        return None
    stages = _compile_steps(plan)

    def run(env: Env, rows: Rows) -> Rows:
        for stage in stages:
            rows = stage(env, rows)
        return rows
    return run


def _pick(rowwise: Stage, chunked: Stage) -> Stage:
    """`chunked` on a transaction that prefers batched reads, else `rowwise`."""
    def run(env: Env, rows: Rows) -> Rows:
        return chunked(env, rows) if env.batched else rowwise(env, rows)
    return run


def _pick_block(rowwise: Stage, make_chunked: Callable[[], Stage]) -> Stage:
    """`_pick` for a stage over a nested block (OPTIONAL, NOT): the chunked version compiles
    the block a second time, so it is made only when a transaction that prefers batches
    first runs it — compiling both eagerly doubles the work at every level of nesting
    (twenty nested NOTs: 2^20 compilations)."""
    made: list[Stage] = []

    def run(env: Env, rows: Rows) -> Rows:
        if not env.batched:
            return rowwise(env, rows)
        if not made:
            made.append(make_chunked())     # two threads may both make it: the same stage
        return made[0](env, rows)
    return run


def _streams(plan: P.GroupPlan) -> bool:
    """Whether `compile_stream(plan)` gives a stage (without compiling it)."""
    return plan.then is None and not plan.unions


def _continued(plan: P.GroupPlan) -> Callable[[Env, Row], Rows]:
    """A group with a continuation: its rows (main branch and UNIONs, laid out as
    `union_layout`), each joined with the continuation's rows."""
    assert plan.then is not None
    head = compile_group(P.without_then(plan))
    then = compile_group(plan.then)

    def run(env: Env, row: Row) -> Rows:
        for combined in head(env, row):
            yield from then(env, combined)
    return run


def union_map(plan: P.GroupPlan, union: P.GroupPlan) -> list[tuple[int, int]]:
    """(position in the union row, position in the group's combined row) per shared name."""
    layout = plan.union_layout or plan.out_layout
    return [(i, layout.index(v)) for i, v in enumerate(union.out_layout) if v in layout]


def merge_union_row(row: Row, urow: Row, mapping: list[tuple[int, int]], n_inputs: int,
                    width: int) -> Row | None:
    """A UNION row joined with the outer row of the block it is nested in: on the names
    both bind, the values must be equal (a null — an OPTIONAL miss — equals only null, so
    it matches no UNION row that binds the name, as it matches no clause)."""
    out = list(row) + [None] * (width - len(row))
    for src, dst in mapping:
        value = urow[src]
        if dst < n_inputs:
            if value != out[dst]:
                return None      # a nested UNION row that contradicts the outer bindings
            continue
        out[dst] = value
    return tuple(out)


# --- step compilation --------------------------------------------------------------------

def _compile_steps(plan: P.GroupPlan) -> list[Stage]:
    """The stages of a group plan, one per step, except that a run of consecutive FILTER
    steps becomes one stage: a chain of generator stages costs a frame per row and stage,
    and a query with a thousand sibling FILTERs would pass Python's recursion limit."""
    stages: list[Stage] = []
    tests: list[Test] = []
    paths: list[A.Path] = []
    raises = False
    steps, layouts = plan.steps, step_layouts(plan)
    absorbed: P.Step | None = None      # a CheckConcept run inside the expand before it
    for k, (step, layout) in enumerate(zip(steps, layouts)):
        if step is absorbed:
            continue
        if isinstance(step, P.Filter):
            tests.append(compile_filter(step.expr, layout))
            paths += paths_read(step.expr)
            raises = raises or AL.may_raise(step.expr)
            continue
        if tests:
            filters = _prefetching_filter(tests, paths, layout)
            shape = AL.shape_of(step, layout) if isinstance(step, P.AntiJoin) else None
            if shape is not None and not raises:
                # FILTERs then `NOT { (?x, "p", C) }`: one loop (nexus.exec.anti_link).
                fused = AL.filtered_stage(tests, shape, layout)
                stages.append(_pick(fused, _chained(filters, compile_step(step, layout))))
                tests, paths, raises = [], [], False
                continue
            stages.append(filters)
            tests, paths, raises = [], [], False
        after = steps[k + 1] if k + 1 < len(steps) else None
        if type(step) is P.Expand and type(after) is P.CheckConcept \
                and after.var == step.end != step.start:
            # `(?s, "p", ?x)` then `?x {type: …}`: the test of each end in the expand's loop
            # (the row path's commonest pair: a generator frame less per row).
            absorbed = after
            stages.append(_pick(_c_expand_checked(step, after, layout),
                                _chained(compile_step(step, layout),
                                         compile_step(after, layouts[k + 1]))))
            continue
        stages.append(_COMPILERS[type(step)](step, layout))
    if tests:
        stages.append(_prefetching_filter(tests, paths, layout))
    return stages


def _chained(first: Stage, then: Stage) -> Stage:
    def run(env: Env, rows: Rows) -> Rows:
        return then(env, first(env, rows))
    return run


def _prefetching_filter(tests: list[Test], paths: list[A.Path], layout: list[str]) -> Stage:
    """The FILTER stage; what its tests read of the rows' elements prefetched a chunk at a
    time when the store prefers batches."""
    rowwise = _filter_stage(tests)
    spec = prefetch_spec(paths, layout)
    return _pick(rowwise, C.prefetching(rowwise, spec)) if spec else rowwise


def compile_step(step: P.Step, layout: list[str]) -> Stage:
    """The stage of one step, given the row layout it sees (`step_layouts`)."""
    return _COMPILERS[type(step)](step, layout)


def step_layouts(plan: P.GroupPlan) -> list[list[str]]:
    """The row layout each step sees (inputs plus what the earlier steps bound), for all
    steps in one pass; the last entry is the layout after the last step."""
    layout = list(plan.inputs)
    layouts = [list(layout)]
    for step in plan.steps:
        layout.extend(P.binds(step, layout))
        layouts.append(list(layout))
    return layouts


def _c_const_concept(step: P.ConstConcept, layout: list[str]) -> Stage:
    atom = step.atom
    if step.bound:
        i = layout.index(step.var)

        def check(env: Env, rows: Rows) -> Rows:
            n = env.const_concept(atom)
            if n is None:
                return
            for row in rows:
                if row[i] == n:
                    yield row
        return check

    def bind(env: Env, rows: Rows) -> Rows:
        n = env.const_concept(atom)
        if n is None:
            return
        for row in rows:
            yield row + (n,)
    return bind


def _c_scan_type(step: P.ScanType, layout: list[str]) -> Stage:
    def scan(env: Env, rows: Rows) -> Rows:
        tid = env.sid(step.type)
        if tid is None:
            return
        scan_type = env.txn.concepts_of_type
        tick = env.tick
        for row in rows:
            k = 0
            for n in scan_type(tid):
                k += 1
                if not k & 1023:
                    tick(1024)
                yield row + (n,)
            tick((k & 1023) + 1)
    return scan


def _c_scan_name(step: P.ScanName, layout: list[str]) -> Stage:
    def scan(env: Env, rows: Rows) -> Rows:
        name = env.value(step.name)
        if not isinstance(name, str):
            return
        tid = env.sid(step.type) if step.type is not None else None
        if step.type is not None and tid is None:
            return
        ids = list(env.txn.concepts_named(name))
        if tid is not None:
            head = env.txn.known_head
            ids = [n for n in ids if isinstance(h := head(n), ConceptHead) and h.type_id == tid]
        tick = env.tick
        work = len(ids) + 1
        for row in rows:
            tick(work)
            for n in ids:
                yield row + (n,)
    return scan


def _c_check_concept(step: P.CheckConcept, layout: list[str]) -> Stage:
    i = layout.index(step.var)

    def check(env: Env, rows: Rows) -> Rows:
        tid = env.sid(step.type) if step.type is not None else None
        if step.type is not None and tid is None:
            return
        name = env.value(step.name) if step.name is not None else None
        head = env.txn.known_head          # row values were read from this snapshot
        for row in rows:
            n = row[i]
            h = head(n) if n is not None else None     # None: an OPTIONAL that matched nothing
            if type(h) is not ConceptHead:
                continue
            if tid is not None and h.type_id != tid:
                continue
            if name is not None and h.name != name:
                continue
            yield row
    return check


def _c_expand(step: P.Expand, layout: list[str]) -> Stage:
    i = layout.index(step.start)
    with_link = step.link is not None

    def expand(env: Env, rows: Rows) -> Rows:
        pids = env.pids(step.predicates)
        if not pids:
            return
        links = env.txn.out_links if step.direction == "out" else env.txn.in_links
        tick = env.tick
        for row in rows:
            start = row[i]
            if start is None:
                continue
            k = 0
            for pid in pids:
                if with_link:
                    for _, end, link in links(start, pid):
                        k += 1
                        if not k & 1023:
                            tick(1024)
                        yield row + (end, link)
                else:
                    for _, end, _link in links(start, pid):
                        k += 1
                        if not k & 1023:
                            tick(1024)
                        yield row + (end,)
            tick((k & 1023) + 1)
    return expand


def _c_expand_checked(step: P.Expand, check: P.CheckConcept, layout: list[str]) -> Stage:
    """`_c_expand` then `_c_check_concept` of its new end variable, as one stage: the same
    rows, reads and work ticks (the check's values are read first, as the chain's outer
    stage reads them before it pulls a row)."""
    i = layout.index(step.start)
    with_link = step.link is not None

    def expand(env: Env, rows: Rows) -> Rows:
        tid = env.sid(check.type) if check.type is not None else None
        if check.type is not None and tid is None:
            return
        name = env.value(check.name) if check.name is not None else None
        pids = env.pids(step.predicates)
        if not pids:
            return
        txn = env.txn
        links = txn.out_links if step.direction == "out" else txn.in_links
        head = txn.known_head          # the ends were read from this snapshot
        tick = env.tick
        for row in rows:
            start = row[i]
            if start is None:
                continue
            k = 0
            for pid in pids:
                for _, end, link in links(start, pid):
                    k += 1
                    if not k & 1023:
                        tick(1024)
                    h = head(end)
                    if type(h) is not ConceptHead or (tid is not None and h.type_id != tid) \
                            or (name is not None and h.name != name):
                        continue
                    yield row + (end, link) if with_link else row + (end,)
            tick((k & 1023) + 1)
    return expand


def _c_link_check(step: P.LinkCheck, layout: list[str]) -> Stage:
    si, oi = layout.index(step.subject), layout.index(step.object)
    with_link = step.link is not None

    def check(env: Env, rows: Rows) -> Rows:
        pids = env.pids(step.predicates)
        if not pids:
            return
        link_id = env.txn.link_id
        for row in rows:
            s, o = row[si], row[oi]
            if s is None or o is None:
                continue
            for pid in pids:
                link = link_id(s, pid, o)
                if link is not None:
                    yield row + (link,) if with_link else row
                    if not with_link:
                        break
    return check


def _c_scan_links(step: P.ScanLinks, layout: list[str]) -> Stage:
    same = step.subject == step.object
    with_link = step.link is not None

    def scan(env: Env, rows: Rows) -> Rows:
        pids = env.pids(step.predicates)
        scan_links = env.txn.links_of_predicate
        tick = env.tick
        for row in rows:
            k = 0
            for pid in pids:
                for s, o, link in scan_links(pid):
                    k += 1
                    if not k & 1023:
                        tick(1024)
                    if same:
                        if s != o:
                            continue
                        out = row + (s,)
                    else:
                        out = row + (s, o)
                    yield out + (link,) if with_link else out
            tick((k & 1023) + 1)
    return scan


def _c_link_from_var(step: P.LinkFromVar, layout: list[str]) -> Stage:
    li = layout.index(step.link)
    si = None if step.bind_subject else layout.index(step.subject)
    oi = None if step.bind_object else layout.index(step.object)
    same_new = step.bind_subject and step.bind_object and step.subject == step.object

    def bind(env: Env, rows: Rows) -> Rows:
        pids = set(env.pids(step.predicates))
        head = env.txn.known_head
        for row in rows:
            n = row[li]
            h = head(n) if n is not None else None
            if type(h) is not LinkHead or h.predicate_id not in pids:
                continue
            if si is not None and row[si] != h.subject:
                continue
            if oi is not None and row[oi] != h.object:
                continue
            if same_new:
                if h.subject == h.object:
                    yield row + (h.subject,)
                continue
            out = row
            if step.bind_subject:
                out = out + (h.subject,)
            if step.bind_object:
                out = out + (h.object,)
            yield out
    return bind


def _c_link_by_id(step: P.LinkById, layout: list[str]) -> Stage:
    atom = step.atom
    if step.bound:
        i = layout.index(step.var)

        def check(env: Env, rows: Rows) -> Rows:
            n = env.const_link(atom)
            for row in rows:
                if n is not None and row[i] == n:
                    yield row
        return check

    def bind(env: Env, rows: Rows) -> Rows:
        n = env.const_link(atom)
        if n is None:
            return
        for row in rows:
            yield row + (n,)
    return bind


def _c_path_walk(step: P.PathWalk, layout: list[str]) -> Stage:
    si = layout.index(step.start)
    ei = layout.index(step.end) if step.end_bound else None
    forward = step.direction == "out"

    def walk(env: Env, rows: Rows) -> Rows:
        pid = env.path_pid(step.predicate, step.lo, step.hi)
        for row in rows:
            start = row[si]
            if start is None:
                continue
            ends = env.walk(start, pid, step.lo, step.hi, forward)
            if ei is not None:
                if row[ei] in ends:
                    yield row
            else:
                for end in ends:
                    yield row + (end,)
    return walk


def _c_path_scan(step: P.PathScan, layout: list[str]) -> Stage:
    same = step.subject == step.object

    def scan(env: Env, rows: Rows) -> Rows:
        pid = env.path_pid(step.predicate, step.lo, step.hi)
        starts = env.path_starts(pid, step.lo)
        for row in rows:
            for start in starts:
                ends = env.walk(start, pid, step.lo, step.hi, True)
                if same:
                    if start in ends:
                        yield row + (start,)
                    continue
                for end in ends:
                    yield row + (start, end)
    return scan


def _c_filter(step: P.Filter, layout: list[str]) -> Stage:
    return _prefetching_filter([compile_filter(step.expr, layout)], paths_read(step.expr),
                               layout)


def _filter_stage(tests: list[Test]) -> Stage:
    """Keeps the rows every test accepts (a FILTER keeps a row only when its expression is
    true: false, null and errors drop it)."""
    if len(tests) == 1:
        test = tests[0]

        def run(env: Env, rows: Rows) -> Rows:
            for row in rows:
                if test(row, env) is True:
                    yield row
        return run

    def run_all(env: Env, rows: Rows) -> Rows:
        for row in rows:
            for test in tests:
                if test(row, env) is not True:
                    break
            else:
                yield row
    return run_all


def _c_optional(step: P.OptionalJoin, layout: list[str]) -> Stage:
    sub = compile_group(step.plan)
    exports = step.exports
    nulls = (None,) * len(exports)
    correlated = step.correlated
    fast = _one_hop_optional(step)
    if fast is not None:
        return fast
    rowwise = _optional_rows(sub, exports, nulls, correlated)
    if not (correlated and _streams(step.plan)):
        return rowwise

    def chunked() -> Stage:
        stream = compile_stream(step.plan)
        assert stream is not None
        return C.optional_block(stream, len(step.plan.inputs), exports, nulls)
    return _pick_block(rowwise, chunked)


def _optional_rows(sub: Callable[[Env, Row], Rows], exports: tuple[int, ...], nulls: Row,
                   correlated: bool) -> Stage:
    def run(env: Env, rows: Rows) -> Rows:
        tick = env.tick
        tails = None            # an uncorrelated block's rows, computed once
        for row in rows:
            tick()
            if not correlated:
                if tails is None:
                    tails = [tuple(r[i] for i in exports) for r in sub(env, row)] or [nulls]
                for tail in tails:
                    yield row + tail
                continue
            matched = False
            for sub_row in sub(env, row):
                matched = True
                yield row + tuple(sub_row[i] for i in exports)
            if not matched:
                yield row + nulls
    return run


def _one_hop_optional(step: P.OptionalJoin) -> Stage | None:
    """`OPTIONAL { (?x, "p", ?y) }` with ?x bound and ?y new (the common shape): the same
    left join, without setting up a sub-plan per outer row."""
    plan = step.plan
    if plan.unions or len(plan.steps) != 1 or not isinstance(plan.steps[0], P.Expand):
        return None
    ex = plan.steps[0]
    if ex.end in plan.inputs or ex.start not in plan.inputs:
        return None
    i = plan.inputs.index(ex.start)
    width = len(plan.inputs)
    new = ([ex.end] if ex.end not in plan.inputs else []) + ([ex.link] if ex.link else [])
    if [plan.out_layout[k] for k in step.exports] != [v for v in new if not v.startswith("#")] \
            or any(v.startswith("#") for v in new) or len(plan.out_layout) != width + len(new):
        return None
    with_link = ex.link is not None
    nulls = (None,) * len(new)

    def run(env: Env, rows: Rows) -> Rows:
        pids = env.pids(ex.predicates)
        links = env.txn.out_links if ex.direction == "out" else env.txn.in_links
        tick = env.tick
        one = len(pids) == 1
        for row in rows:
            start = row[i]
            matched = False
            k = 1
            if start is not None:
                if one:
                    found = links(start, pids[0])
                else:
                    found = (t for pid in pids for t in links(start, pid))
                for _, end, link in found:
                    matched = True
                    k += 1
                    yield row + ((end, link) if with_link else (end,))
            if not matched:
                yield row + nulls
            tick(k)
    return _pick(run, C.one_hop_optional(ex, i, with_link, nulls))


def _c_anti(step: P.AntiJoin, layout: list[str]) -> Stage:
    shape = AL.shape_of(step, layout)
    rowwise = AL.stage(shape, layout) if shape is not None else _anti_rows(step)
    if not (step.correlated and _streams(step.plan)):
        return rowwise

    def chunked() -> Stage:
        stream = compile_stream(step.plan)
        assert stream is not None
        return C.anti_block(stream, len(step.plan.inputs))
    return _pick_block(rowwise, chunked)


def _anti_rows(step: P.AntiJoin) -> Stage:
    sub = compile_group(step.plan)
    correlated = step.correlated

    def run(env: Env, rows: Rows) -> Rows:
        tick = env.tick
        if not correlated:
            # The block sees no outer variable: it removes every row or none (CONTRACT §5).
            rows = iter(rows)
            first = next(rows, None)
            if first is None:
                return
            for _ in sub(env, first):
                return
            yield first
            yield from rows
            return
        for row in rows:
            tick()
            for _ in sub(env, row):
                break
            else:
                yield row
    return run


# --- RC11 §3.4.2: predicate variables ------------------------------------------------------
# A predicate variable's row value is its symbol id negated (element ids are positive, 0 is
# null in columns): unification and deduplication compare integers, and `Env.path_value` /
# `Env.element` turn it into the predicate name.

def _c_expand_any(step: P.ExpandAny, layout: list[str]) -> Stage:
    i = layout.index(step.start)
    pi = layout.index(step.pred) if step.pred_bound else None
    ei = layout.index(step.end) if step.end_bound else None
    new_pred = pi is None
    with_link = step.link is not None

    def expand(env: Env, rows: Rows) -> Rows:
        links = env.txn.out_links if step.direction == "out" else env.txn.in_links
        tick = env.tick
        only = env.narrow_pids(step.narrow) if step.narrow is not None else None
        for row in rows:
            start = row[i]
            if start is None:
                continue
            if pi is not None:
                p = row[pi]
                if p is None:
                    continue
                found: Iterable[tuple[int, int, int]] = links(start, -p)
            elif only is not None:
                found = (t for pid in only for t in links(start, pid))
            else:
                found = links(start)
            want = row[ei] if ei is not None else None
            k = 0
            for pid, end, link in found:
                k += 1
                if not k & 1023:
                    tick(1024)
                if ei is not None:
                    if end != want:
                        continue
                    tail: Row = ()
                else:
                    tail = (end,)
                if new_pred:
                    tail += (-pid,)
                if with_link:
                    tail += (link,)
                yield row + tail
            tick((k & 1023) + 1)
    return expand


def _c_scan_any_links(step: P.ScanAnyLinks, layout: list[str]) -> Stage:
    pi = layout.index(step.pred) if step.pred_bound else None
    same = step.subject == step.object
    with_link = step.link is not None

    def scan(env: Env, rows: Rows) -> Rows:
        scan_links = env.txn.links_of_predicate
        tick = env.tick
        only = env.narrow_pids(step.narrow) if step.narrow is not None else None
        for row in rows:
            if pi is not None:
                p = row[pi]
                if p is None:
                    continue
                pids = [-p]
            elif only is not None:
                pids = only
            else:
                pids = env.all_link_predicates()
            k = 0
            for pid in pids:
                for s, o, link in scan_links(pid):
                    k += 1
                    if not k & 1023:
                        tick(1024)
                    if same:
                        if s != o:
                            continue
                        out = row + (s,)
                    else:
                        out = row + (s, o)
                    if pi is None:
                        out += (-pid,)
                    yield out + (link,) if with_link else out
            tick((k & 1023) + 1)
    return scan


def _c_any_link_from_var(step: P.AnyLinkFromVar, layout: list[str]) -> Stage:
    li = layout.index(step.link)
    si = None if step.bind_subject else layout.index(step.subject)
    oi = None if step.bind_object else layout.index(step.object)
    pi = None if step.bind_pred else layout.index(step.pred)
    same_new = step.bind_subject and step.bind_object and step.subject == step.object

    def bind(env: Env, rows: Rows) -> Rows:
        head = env.txn.known_head
        for row in rows:
            n = row[li]
            h = head(n) if n is not None and n > 0 else None
            if type(h) is not LinkHead:
                continue
            if pi is not None and row[pi] != -h.predicate_id:
                continue
            if si is not None and row[si] != h.subject:
                continue
            if oi is not None and row[oi] != h.object:
                continue
            out = row
            if same_new:
                if h.subject != h.object:
                    continue
                out = out + (h.subject,)
            else:
                if step.bind_subject:
                    out = out + (h.subject,)
                if step.bind_object:
                    out = out + (h.object,)
            yield out + (-h.predicate_id,) if step.bind_pred else out
    return bind


Compiler = Callable[[Any, list[str]], Stage]


def _or_chunked(rowwise: Compiler, chunked: Compiler) -> Compiler:
    def compile(step: Any, layout: list[str]) -> Stage:
        return _pick(rowwise(step, layout), chunked(step, layout))
    return compile


def _heads_first(rowwise: Compiler, var: Callable[[Any], str]) -> Compiler:
    """`rowwise`, its variable's heads prefetched a chunk at a time (batching stores)."""
    def compile(step: Any, layout: list[str]) -> Stage:
        stage = rowwise(step, layout)
        return _pick(stage, C.prefetching(stage, [(layout.index(var(step)), True, False,
                                                   False)]))
    return compile


# Dispatch by the step's class (each compiler takes that class of step).
_COMPILERS: dict[type, Compiler] = {
    P.ConstConcept: _c_const_concept,
    P.ScanType: _c_scan_type,
    P.ScanName: _c_scan_name,
    P.CheckConcept: _heads_first(_c_check_concept, lambda s: s.var),
    P.Expand: _or_chunked(_c_expand, C.expand),
    P.LinkCheck: _or_chunked(_c_link_check, C.link_check),
    P.ScanLinks: _c_scan_links,
    P.LinkFromVar: _heads_first(_c_link_from_var, lambda s: s.link),
    P.LinkById: _c_link_by_id,
    P.PathWalk: _c_path_walk,
    P.PathScan: _c_path_scan,
    P.Filter: _c_filter,
    P.OptionalJoin: _c_optional,
    P.AntiJoin: _c_anti,
    P.ExpandAny: _or_chunked(_c_expand_any, C.expand_any),
    P.ScanAnyLinks: _c_scan_any_links,
    P.AnyLinkFromVar: _heads_first(_c_any_link_from_var, lambda s: s.link),
}
