"""`NOT { (?x, "p", C) }` on the row path: the anti join against one constant's neighbours.

The block (`nexus.plan.physical.AntiLink`: constant clauses and one link between an outer
variable and one of those constants, either direction, no link variable) drops the outer
rows whose ?x is linked to C. The general NOT stage runs the block's sub-plan per row — a
B-tree probe each. That is right for a few rows; for many rows (the candidates of a hub)
one range read of C's links and a set membership per row is. Which is unknown until the
rows come, so `Probe` adapts: from PROBES_BEFORE_SCAN probes on, each time the probes
double it reads on in C's links, up to SCAN_PER_PROBE links per probe so far (one C-level
pass), and once they are all read the rest of the rows are tested against the set. A link
read costs about a third of a probe (measured at N=100k), so the work stays within ~3x of
the cheaper of the two, whatever C's degree and however many rows come.

When FILTERs come right before the NOT (the planner places FILTERs as soon as their
variables are bound, NOT blocks after the clauses), `filtered_stage` runs both in one loop,
in the written order — FILTER, then the probe — until the neighbour set is complete, and
the set membership FIRST after that: a set lookup costs less than any FILTER that reads a
value, so the FILTERs then see only the rows the NOT keeps. Few rows (an ordinary symptom)
never complete the set and run exactly as written; a hub's rows do.

Same answers as the block's sub-plan: a row is dropped iff the link exists; a null outer
value (an OPTIONAL that matched nothing) or a constant that resolves to nothing drops none.
"""
from __future__ import annotations

import itertools
import operator
from typing import TYPE_CHECKING, Callable, Iterator

from ..plan import physical as P
from ..syntax import ast as A
from .rows import Row, Rows

if TYPE_CHECKING:
    from .env import Env
    from .filters import Test

Stage = Callable[["Env", Rows], Rows]

PROBES_BEFORE_SCAN = 16
SCAN_PER_PROBE = 8
_END = operator.itemgetter(1)          # (predicate, end, link) -> end


class Probe:
    """One execution's test of the block: `keep(x)` for the outer value x (not None)."""

    __slots__ = ("c", "pids", "forward", "link_id", "links", "members", "partial",
                 "scanner", "probes", "scanned", "tick", "empty")

    def __init__(self, env: Env, shape: P.AntiLink) -> None:
        ns = [env.const_concept(c.atom) for c in shape.consts]   # as the block's steps would
        c = env.const_concept(shape.anchor.atom)
        self.c: int = c if c is not None else 0
        self.pids = env.pids(shape.check.predicates)
        # The block matches nothing: every row is kept (an empty set, never probed).
        self.empty = c is None or not self.pids or any(n is None for n in ns)
        self.forward = shape.forward
        self.link_id = env.txn.link_id
        self.links = env.txn.out_links if shape.forward else env.txn.in_links
        self.members: set[int] | None = set() if self.empty else None
        self.partial: set[int] = set()
        self.scanner: Iterator[int] | None = None
        self.probes = self.scanned = 0
        self.tick = env.tick

    def keep(self, x: int) -> bool:
        """Whether the row with outer value x survives (probe, or the set when complete)."""
        if self.members is not None:
            return x not in self.members
        c, link_id = self.c, self.link_id
        hit = False
        for pid in self.pids:
            if (link_id(c, pid, x) if self.forward else link_id(x, pid, c)) is not None:
                hit = True
                break
        probes = self.probes = self.probes + 1
        if probes >= PROBES_BEFORE_SCAN and not probes & (probes - 1):
            self._read_on(probes)
        return not hit

    def _read_on(self, probes: int) -> None:
        if self.scanner is None:
            c, links = self.c, self.links
            self.scanner = itertools.chain.from_iterable(
                map(_END, links(c, pid)) for pid in self.pids)
        want = SCAN_PER_PROBE * probes - self.scanned
        got = list(itertools.islice(self.scanner, want))
        self.scanned += len(got)
        self.partial.update(got)
        self.tick(len(got))
        if len(got) < want:
            self.members = self.partial


def shape_of(step: P.AntiJoin, layout: list[str]) -> P.AntiLink | None:
    """The step's AntiLink shape when this module can run it on rows laid out as `layout`."""
    shape = P.anti_link(step.plan) if step.correlated else None
    return shape if shape is not None and shape.outer in layout else None


def stage(shape: P.AntiLink, layout: list[str]) -> Stage:
    """The NOT alone."""
    return filtered_stage([], shape, layout)


def filtered_stage(tests: list[Test], shape: P.AntiLink, layout: list[str]) -> Stage:
    """The FILTERs (`tests`, all must be exactly true) and then the NOT, in one loop; the
    NOT's set goes first once it is complete (see the module doc)."""
    i = layout.index(shape.outer)
    test = tests[0] if len(tests) == 1 else None

    def passes(row: Row, env: Env) -> bool:
        if not tests:
            return True
        if test is not None:
            return test(row, env) is True
        for t in tests:
            if t(row, env) is not True:
                return False
        return True

    def run(env: Env, rows: Rows) -> Rows:
        probe: Probe | None = None
        tick = env.tick
        for row in rows:
            tick()
            x = row[i]
            if probe is not None and probe.members is not None:
                if x is not None and x in probe.members:
                    continue
                if passes(row, env):
                    yield row
                continue
            if not passes(row, env):
                continue
            if x is None:
                yield row
                continue
            if probe is None:
                probe = Probe(env, shape)
            if probe.keep(x):
                yield row
    return run


def may_raise(e: A.Expr) -> bool:
    """Whether a FILTER expression may raise on a row (REGEX: a bad pattern, a timeout) —
    `filtered_stage` must then keep the written order for every row."""
    if isinstance(e, A.Call):
        return e.func == "REGEX" or any(may_raise(a) for a in e.args)
    if isinstance(e, A.Compare):
        return may_raise(e.left) or may_raise(e.right)
    if isinstance(e, A.BoolOp):
        return any(may_raise(o) for o in e.operands)
    if isinstance(e, A.NotOp):
        return may_raise(e.operand)
    return False
