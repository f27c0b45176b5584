"""Path walks: the distinct ends of walks of m..n hops over one predicate, under the
query's visit budget (CONTRACT §6). Used by the row operators and by the execution
environment's memoised walks."""
from __future__ import annotations

from ..errors import ErrorCode, KipError
from ..store.protocol import ReadTxn


def walk(txn: ReadTxn, start: int, pid: int, lo: int, hi: int | None, forward: bool,
         budget: list[int]) -> frozenset[int]:
    """Distinct ends of walks of lo..hi hops (hi None: unbounded) from `start`.

    `budget[0]` counts down the nodes a query may still visit (shared by all walks of one
    execution); running out raises KIP_4002.
    """
    links = txn.out_links if forward else txn.in_links
    links_of = txn.out_links_of if forward else txn.in_links_of
    batched = txn.prefers_batches()

    def step(nodes: set[int]) -> set[int]:
        out: set[int] = set()
        if batched:         # one batched read per hop (on PostgreSQL one statement)
            for found in links_of(sorted(nodes), pid).values():
                out.update(m for _p, m, _l in found)
        else:
            for n in nodes:
                for _p, m, _l in links(n, pid):
                    out.add(m)
        budget[0] -= len(nodes) + 1
        if budget[0] < 0:
            raise KipError(ErrorCode.KIP_4002,
                           "The path walk visited more nodes than the query budget allows",
                           "Bound the path range (e.g. {1,5} instead of {1,}) or start the "
                           "path from a bound concept.")
        return out

    result: set[int] = set()
    if lo <= 1:
        # Breadth-first over distinct nodes: any node reachable by a walk of ≤ hi hops is
        # reachable by a shortest path of ≤ hi hops, so visiting each node once suffices.
        if lo == 0:
            result.add(start)
        seen: set[int] = set()
        frontier: set[int] = {start}
        depth = 0
        while frontier and (hi is None or depth < hi):
            depth += 1
            frontier = step(frontier) - seen
            seen |= frontier
            result |= frontier
        return frozenset(result)
    # lo ≥ 2: a node reached early may also be reached by a longer walk, so track the exact
    # set reachable in k hops for each k (bounded by hi ≤ max_hops, or closed under hi=None).
    frontier = {start}
    for _ in range(lo):
        frontier = step(frontier)
        if not frontier:
            return frozenset()
    result |= frontier
    if hi is None:
        pending = set(frontier)
        while pending:
            pending = step(pending) - result
            result |= pending
        return frozenset(result)
    seen_levels = {frozenset(frontier)}
    for _ in range(hi - lo):
        frontier = step(frontier)
        if not frontier:
            break
        key = frozenset(frontier)
        if key in seen_levels:      # the exact-k sets cycle: nothing new can appear
            break
        seen_levels.add(key)
        result |= frontier
    return frozenset(result)
