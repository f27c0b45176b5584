"""When an anchored FIND runs columnar: rent or buy, per prepared plan and snapshot.

An anchored plan (one that starts from a constant element, `nexus.plan.cost.anchored`)
usually touches a few rows, which the row path reaches with a few B-tree seeks; the columnar
run would first build whole-predicate arrays (and attribute columns) for the snapshot. But
the constant may be a hub — a symptom half the drugs treat — whose thousands of rows cost
the row path a few µs each, execution after execution, where columns, once built, answer in a
fraction of that. The statistics cannot tell a hub from an ordinary element (they know
average degrees), so the choice is made from what executions did:

* every execution of an anchored plan first runs on the row path, which counts its work
  (`Env.work`: rows scanned, links followed); the count is remembered per parameter values
  for the current snapshot;
* parameter values whose row-path run did at least `HUB_WORK` units are a hub: when the
  snapshot's cache already holds every array the columnar run needs, it runs columnar;
  when not, the row path runs (rent) and its work is added to what this plan has spent on
  hubs on this snapshot — once that spend reaches the estimated cost of building the
  arrays (`ExecutorCosts.build`), the columnar run builds them (buy), and the later hub
  executions on the snapshot find them cached. So a hub never costs more than about twice
  what the better choice in hindsight would have (the classic rent-or-buy bound), and an
  element under `HUB_WORK` keeps the row path.

A write changes the snapshot: the counts and the spend start over, as the arrays do. The
memo is per process and per prepared plan; a wrong or raced memo only picks the other
executor, whose answers are the same.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Hashable

HUB_WORK = 256          # row-path work units from which an anchored execution is a hub
WORK_COST = 2.5         # µs of row-path time per work unit (Q3 Headache: 5,882 units, ~14 ms)
_MAX_KEYS = 4096        # parameter values remembered per snapshot


class HubChoice:
    """The memo of one prepared anchored plan (see module doc)."""

    __slots__ = ("snap", "work", "spent", "needs", "_lock")

    def __init__(self) -> None:
        self.snap: Hashable = None
        self.work: dict[Hashable, int] = {}
        self.spent = 0.0
        # parameter values -> (the arrays their columnar run reads, their build cost in µs
        # when first estimated on this snapshot): estimated once per snapshot
        self.needs: dict[Hashable, tuple[frozenset[tuple[Any, ...]], float]] = {}
        self._lock = threading.Lock()

    def _at(self, snap: Hashable) -> None:
        if snap != self.snap:
            self.snap, self.work, self.spent, self.needs = snap, {}, 0.0, {}

    def runs_columnar(self, snap: Hashable, key: Hashable,
                      estimate: Callable[[], tuple[frozenset[tuple[Any, ...]], float]],
                      cached: Callable[[tuple[Any, ...]], bool]) -> bool:
        """Whether an execution with these parameter values runs columnar: a hub whose
        arrays are all `cached`, or whose arrays the hubs' row-path runs have paid for
        (`estimate()`: the arrays and their build cost, asked once per snapshot)."""
        if (self.work_of(snap, key) or 0) < HUB_WORK:
            return False
        got = self.needs.get(key) if self.snap == snap else None
        if got is None:
            got = estimate()
            with self._lock:
                self._at(snap)
                if len(self.needs) >= _MAX_KEYS:
                    self.needs.clear()
                self.needs[key] = got
        need, build = got
        return all(cached(k) for k in need) or self.paid_for(snap, build)

    def work_of(self, snap: Hashable, key: Hashable) -> int | None:
        """The work of the last complete row-path run with these parameter values on this
        snapshot (None: none yet). Without the lock: a read that races a reset only gives
        None or the previous snapshot's count, which picks an executor, not an answer."""
        work = self.work
        return work.get(key) if self.snap == snap else None

    def paid_for(self, snap: Hashable, build: float) -> bool:
        """Whether the hubs' row-path runs on this snapshot have spent `build` µs."""
        with self._lock:
            self._at(snap)
            return self.spent >= build

    def ran_rows(self, snap: Hashable, key: Hashable, work: int) -> None:
        """Record a complete row-path run with these parameter values."""
        with self._lock:
            self._at(snap)
            if len(self.work) >= _MAX_KEYS:
                self.work.clear()
            self.work[key] = work
            if work >= HUB_WORK:
                self.spent += work * WORK_COST
