"""A pattern group's leading steps as ONE store query (issue 22: queries run in the database).

A store may offer the optional capability of `nexus.store.pattern` (PostgreSQL does: one SQL
statement; LMDB and memory do not). For a group with no input row (a FIND's main block, a
UNION branch) `split` takes the longest run of leading steps it can express there — concept
clauses, link clauses with constant predicates, NOT and OPTIONAL blocks made of the same —
with the FILTERs among them moved after the run (a FILTER keeps or drops a row by what is
already bound, so it gives the same rows in the same order there). On a transaction with
the capability the group then runs as: the store's rows, then the moved FILTERs and the
steps after the run (`Pushdown.rest`), compiled as usual; anywhere else it runs as it
always did. FILTERs are evaluated here, not in SQL (the store keeps attributes in the
engine's own encoding, which SQL cannot read): what they and the FIND read of the rows'
elements comes in the same statement (`Want`), so evaluating them costs no round trip.

What stops the run (and so runs as today, a chunk of rows per statement): predicate
variables, paths `{m,n}`, a link variable bound before its clause, `(id: ...)`, a NOT or
OPTIONAL block holding a FILTER, a UNION or anything of the same list; `explain` says which.
A run of constant clauses alone is not pushed down (they are resolved before the query
runs, so it would add a statement).
"""
from __future__ import annotations

from dataclasses import dataclass
import time
from typing import TYPE_CHECKING, Any, Iterable

from ..errors import KipError
from ..plan import physical as P
from ..plan.logical import ConceptAtom
from ..store import pattern as S
from ..syntax import ast as A
from .filters import paths_read
from .rows import Rows

if TYPE_CHECKING:
    from .env import Env

_SIMPLE = (P.ConstConcept, P.ScanType, P.ScanName, P.CheckConcept, P.Expand, P.LinkCheck,
           P.ScanLinks)
_NAMES = {P.LinkFromVar: "a link variable bound before its clause",
          P.LinkById: "a proposition by id", P.PathWalk: "a path {m,n}",
          P.PathScan: "a path {m,n}", P.ExpandAny: "a predicate variable",
          P.ScanAnyLinks: "a predicate variable", P.AnyLinkFromVar: "a predicate variable"}


@dataclass(frozen=True)
class Pushdown:
    steps: tuple[P.Step, ...]       # the pushed-down steps (no FILTER among them)
    layout: tuple[str, ...]         # the row layout after them: the store's row
    rest: P.GroupPlan               # the moved FILTERs and the remaining steps
    reads: tuple[A.Path, ...]       # what the FILTERs and the caller read of the rows
    stopped: str | None             # what ended the run (None: every step is pushed down)
    # The `{type, name}` clauses of the pushed-down steps (nested blocks' too): the query
    # resolves them itself. `deferred`: the mandatory ones among them, whose KIP_3002 is
    # checked only when the query finds no row (a row proves they exist).
    constants: frozenset[int] = frozenset()     # their id()s
    deferred: tuple[ConceptAtom, ...] = ()


def split(plan: P.GroupPlan, reads: Iterable[A.Path] = ()) -> Pushdown | None:
    """The group's pushdown, or None when nothing worth a statement can be pushed down
    (see the module doc)."""
    if plan.inputs:
        return None
    taken: list[P.Step] = []
    filters: list[P.Step] = []
    stopped = None
    i = 0
    for i, step in enumerate(plan.steps):
        if isinstance(step, P.Filter):
            filters.append(step)
            continue
        why = _refusal(step)
        if why is not None:
            stopped = why
            break
        taken.append(step)
    else:
        i = len(plan.steps)
    if all(isinstance(s, P.ConstConcept) for s in taken):
        return None
    layout: list[str] = []
    for step in taken:
        layout += [v for v in P.binds(step, layout) if v not in layout]
    paths = [p for f in filters if isinstance(f, P.Filter) for p in paths_read(f.expr)]
    rest = P.GroupPlan(tuple(layout), filters + list(plan.steps[i:]), list(plan.layout),
                       out_layout=list(plan.layout), estimates=[])
    consts = [s.atom for s in _walk(taken) if isinstance(s, P.ConstConcept) and s.atom.id is None]
    return Pushdown(tuple(taken), tuple(layout), rest, tuple(paths) + tuple(reads), stopped,
                    frozenset(id(a) for a in consts), tuple(a for a in consts if a.mandatory))


def _walk(steps: Iterable[P.Step]) -> Iterable[P.Step]:
    for step in steps:
        yield step
        if isinstance(step, (P.AntiJoin, P.OptionalJoin)):
            yield from _walk(step.plan.steps)


def _refusal(step: P.Step) -> str | None:
    """Why `step` cannot be pushed down (None: it can)."""
    if isinstance(step, _SIMPLE):
        return None
    if isinstance(step, (P.AntiJoin, P.OptionalJoin)):
        kind = "NOT" if isinstance(step, P.AntiJoin) else "OPTIONAL"
        sub = step.plan
        if sub.unions or sub.then is not None or sub.main_empty:
            return f"a UNION in {kind}"
        for inner in sub.steps:
            if isinstance(inner, P.Filter):
                return f"a FILTER in {kind}"
            why = _refusal(inner)
            if why is not None:
                return f"{why} in {kind}"
        return None
    return _NAMES.get(type(step), type(step).__name__)


def explain(push: Pushdown | None) -> dict[str, Any]:
    """What EXPLAIN shows of the main block's pushdown, on a store with the capability:
    how many of its steps (counting nested blocks as one) run as one query, how many
    FILTERs run on its rows, and what ended the run (the steps from there on run as the
    plan shows, a chunk of rows per statement)."""
    if push is None:
        return {"steps": 0, "stopped_at": "nothing but constant clauses (or a UNION "
                "continuation) to push down"}
    out: dict[str, Any] = {"steps": len(push.steps), "filters_after": sum(
        isinstance(s, P.Filter) for s in push.rest.steps)}
    if push.stopped is not None:
        out["stopped_at"] = push.stopped
    return out


def explain_text(push: dict[str, Any]) -> str:
    line = f"pushdown: the first {push['steps']} step(s) as one query"
    if push.get("filters_after"):
        line += f", then {push['filters_after']} FILTER(s) on its rows"
    if "stopped_at" in push:
        line += f"; stopped at {push['stopped_at']}"
    return line


# --- run time ----------------------------------------------------------------------------

def rows(env: Env, push: Pushdown, matcher: S.Matcher) -> Rows:
    """The store's rows for the pushed-down steps, laid out as `push.layout`."""
    cols = {v: i for i, v in enumerate(push.layout)}
    fresh = [len(cols)]
    steps = _translate(env, push.steps, cols, fresh)
    wants: dict[int, list[bool]] = {}
    for path in push.reads:
        col = cols.get(path.var)
        if col is None:
            continue
        want = wants.setdefault(col, [False, False])
        if not path.segments or path.segments[0] in ("attributes", "metadata"):
            want[1] = True
        want[0] = True
    # Rows that are the solutions themselves (nothing runs after the query) are read up to
    # one past the row cap: enough for the cap's KIP_4002, and memory stays bounded.
    cap = None if push.rest.steps else env.ctx.limits.max_rows + 1
    ctx = env.ctx
    pattern = S.Pattern(steps, tuple(range(len(push.layout))),
                        tuple(S.Want(c, h, m) for c, (h, m) in wants.items()), cap,
                        ctx.deadline - time.monotonic())
    try:
        found = matcher(pattern)
    except KipError:
        ctx.check_deadline()        # cancelled at the deadline: the command's KIP_4001
        raise
    if not found and push.deferred:
        env.check_mandatory(push.deferred)      # KIP_3002 for one that does not exist
    env.tick(len(found) + 1)
    return iter(found)


def _translate(env: Env, steps: Iterable[P.Step], cols: dict[str, int], fresh: list[int]
               ) -> tuple[S.Step, ...]:
    def col(var: str) -> int:
        c = cols.get(var)
        if c is None:
            c = cols[var] = fresh[0]
            fresh[0] += 1
        return c

    def tid(v: A.Value | None) -> int | None:
        if v is None:
            return None
        sid = env.sid(v)
        return S.NOTHING if sid is None else sid

    def name(v: A.Value | None) -> tuple[str | None, bool]:
        if v is None:
            return None, True
        text = env.value(v)
        return (text, True) if isinstance(text, str) else (None, False)

    out: list[S.Step] = []
    for step in steps:
        if isinstance(step, P.ConstConcept):
            atom = step.atom
            known, n = env.known_concept(atom)
            if not known and atom.id is None:       # {type, name}: resolved in the query
                text, ok = name(atom.name)
                out.append(S.ConceptStep(col(step.var), not step.bound,
                                         type_id=tid(atom.type) if ok else S.NOTHING,
                                         name=text))
                continue
            if not known:
                n = env.const_concept(atom)
            out.append(S.ConceptStep(col(step.var), not step.bound,
                                     id=S.NOTHING if n is None else n))
        elif isinstance(step, (P.ScanType, P.ScanName, P.CheckConcept)):
            text, ok = name(getattr(step, "name", None))
            t = tid(step.type) if ok else S.NOTHING
            out.append(S.ConceptStep(col(step.var), not isinstance(step, P.CheckConcept),
                                     type_id=t, name=text))
        elif isinstance(step, P.Expand):
            pids = tuple(env.pids(step.predicates))
            link = col(step.link) if step.link else None
            start = col(step.start)
            end = col(step.end)
            if step.direction == "out":
                out.append(S.LinkStep(start, end, pids, False, True, link))
            else:
                out.append(S.LinkStep(end, start, pids, True, False, link))
        elif isinstance(step, P.LinkCheck):
            out.append(S.LinkStep(col(step.subject), col(step.object),
                                  tuple(env.pids(step.predicates)), False, False,
                                  col(step.link) if step.link else None))
        elif isinstance(step, P.ScanLinks):
            s, o = col(step.subject), col(step.object)
            out.append(S.LinkStep(s, o, tuple(env.pids(step.predicates)), True, True,
                                  col(step.link) if step.link else None))
        elif isinstance(step, P.AntiJoin):
            out.append(S.NotBlock(_translate(env, step.plan.steps, cols, fresh)))
        elif isinstance(step, P.OptionalJoin):
            sub = step.plan
            inner = _translate(env, sub.steps, cols, fresh)
            out.append(S.OptionalBlock(inner, tuple(cols[sub.out_layout[i]]
                                                    for i in step.exports)))
        else:  # pragma: no cover - split takes no other step
            raise TypeError(step)
    return tuple(out)


__all__ = ["Pushdown", "explain", "explain_text", "rows", "split"]
