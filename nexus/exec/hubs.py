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

A read under a time budget (`execute_kip_within`: `kip serve` answering on its event loop)
never buys: a columnar step has no deadline check inside it, and building a predicate's
arrays could hold the loop far past the budget. It runs columnar only when every array it
needs is cached already (built by an unbudgeted run) and its row-path work, as measured, is
at most `BUDGET_WORK` units per second of budget — the columnar pass over cached arrays costs
~0.05 µs a unit (Q2 on the 100k bench's "Headache": 2,157 rows, ~0.2 ms columnar against ~1.5
ms on the row path), so such a run stays inside its budget with room to spare.

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
# Row-path work units a budgeted read may run columnar with, per second of its budget (a
# unit costs ~0.05 µs columnar over cached arrays: 10**7 keeps such a run at ~half its budget)
BUDGET_WORK = 10_000_000


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
                      cached: Callable[[tuple[Any, ...]], bool],
                      budget: float | None = None) -> bool:
        """Whether an execution with these parameter values runs columnar: a hub whose
        arrays are all `cached`, or whose arrays the hubs' row-path runs have paid for
        (`estimate()`: the arrays and their build cost, asked once per snapshot). Under a
        time `budget` (seconds): only a hub whose arrays are all cached and whose work fits
        the budget (module doc)."""
        work = self.work_of(snap, key) or 0
        if work < HUB_WORK or (budget is not None and work > budget * BUDGET_WORK):
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
        if all(cached(k) for k in need):
            return True
        return budget is None and self.paid_for(snap, build)

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
