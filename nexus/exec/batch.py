"""Solutions in columns: the `Batch` the columnar executor produces, and what the shaper
(`nexus.exec.shape`) asks of it, answered with numpy passes instead of a loop per row.

* `Batch`: aligned int64 columns of element ids, 0 for null (no element has id 0).
* `BatchSolutions` / `BatchSelection`: the shaper's `Solutions` / `Selection` over a batch —
  first-found distinct rows (`first_unique`), projected columns (`project`, every distinct
  id evaluated once), and the implicit GROUP BY of counting aggregates: groups by the key
  identities (`group_ids`), COUNT by bincount, COUNT(DISTINCT ?x) by unique (group, id)
  pairs. Their answers are the row path's (`shape.RowSolutions`), in the same order.

It owns no result shape: ORDER BY, paging, cursors and the shape of an answer are the
shaper's, for both executors.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..store.columns import TxnColumns
from ..syntax import ast as A
from .env import Env
from .rows import Row
from .results import Accumulator, Aggregator, DistinctIds, counted, hashable
from .shape import check_row_cap


class Batch:
    """Aligned int64 columns (0 = null) of `size` rows; a zero-width batch still has rows."""

    __slots__ = ("cols", "size")

    def __init__(self, cols: list[np.ndarray], size: int) -> None:
        self.cols = cols
        self.size = size

    def take(self, idx: np.ndarray) -> Batch:
        """Rows at `idx` (an index array, in its order) or where `idx` (a bool mask)."""
        if idx.dtype == np.bool_:
            size = int(np.count_nonzero(idx))
        else:
            size = len(idx)
        return Batch([c[idx] for c in self.cols], size)

    def rows(self) -> list[Row]:
        """The rows as the row path's tuples (ints, None for null)."""
        if not self.cols:
            return [()] * self.size
        return list(zip(*[as_list(c) for c in self.cols]))


def as_list(col: np.ndarray) -> list[int | None]:
    """A column as Python ints, 0 → None."""
    out: list[int | None] = col.tolist()
    if len(col) and not col.all():
        out = [x or None for x in out]
    return out


# --- the shaper's questions --------------------------------------------------------------

@dataclass(slots=True)
class BatchSolutions:
    """A finished batch of solutions (laid out as `layout`), as the shaper reads them."""
    env: Env
    cx: TxnColumns
    layout: list[str]
    batch: Batch

    def first_found(self, key_idx: tuple[int, ...] | None, stop: int | None
                    ) -> BatchSelection:
        batch = self.batch
        size = batch.size
        # The row cap counts what the row path would have read to find these rows.
        if key_idx is None:
            if stop is not None and size > stop:
                sel, pulled, exhausted = np.arange(stop), stop + 1, False
            else:
                sel, pulled, exhausted = np.arange(size), size, True
        else:
            sel = first_unique([batch.cols[i] for i in key_idx])
            if stop is not None and len(sel) >= stop:
                sel = sel[:stop]
                pulled, exhausted = int(sel[-1]) + 1, False
            else:
                pulled, exhausted = size, True
        check_row_cap(self.env.ctx, pulled, exhausted)
        return BatchSelection(self, sel)

    def aggregate(self, agg: Aggregator, repeat_key: tuple[int, ...] | None,
                  by_columns: bool) -> list[list[Any]] | None:
        """COUNT and COUNT(DISTINCT ?x) by numpy passes; other aggregates (and COUNT of a
        dot path under DISTINCT) feed the row accumulators."""
        env = self.env
        layout = self.layout
        batch = self.batch
        check_row_cap(env.ctx, batch.size, True)
        if repeat_key is not None:
            batch = batch.take(first_unique([batch.cols[i] for i in repeat_key]))
        aggs = agg.aggregates
        if not all(a.func == "COUNT" and not (a.distinct and a.arg.segments) for a in aggs):
            for row in batch.rows():
                agg.add(row)
            return None
        group, firsts = group_ids([batch.cols[i] for i in agg.key_positions], batch.size)
        n_groups = len(firsts)
        per_agg: list[list[Any]] = []
        for a in aggs:
            col = batch.cols[layout.index(a.arg.var)]
            if a.distinct:
                per_agg.append(_distinct_ids(group, col, n_groups))
            else:
                present = not_null_by_id(env, col, a.arg.segments)
                per_agg.append(np.bincount(group[present], minlength=n_groups).tolist())
        if agg.key_positions and by_columns and not any(a.distinct for a in aggs):
            columns = self._group_columns(agg.items, batch, firsts, per_agg)
            if columns is not None:
                return columns
        first_rows = batch.take(firsts).rows()
        for k in range(n_groups):
            accs: list[Accumulator] = [counted(c[k]) if type(c[k]) is int else c[k]
                                       for c in per_agg]
            agg.add_group(first_rows[k], accs)
        return None

    def _group_columns(self, items: tuple[A.FindItem, ...], batch: Batch, firsts: np.ndarray,
                       per_agg: list[list[Any]]) -> list[list[Any]] | None:
        """Phase 2 of GROUP BY column-wise, when no two identity groups have equal key
        values (then nothing merges and each identity group is a result group, in
        first-seen order). None when some would merge: the aggregator's general path."""
        values: list[list[Any]] = []
        hashed: list[list[Any]] = []
        for item in items:
            if isinstance(item, A.Aggregate):
                continue
            ids = batch.cols[self.layout.index(item.var)][firsts]
            if item.segments:
                column = project(self.env, self.cx, ids, item.segments)
                values.append(column)
                # all strings (names): the values are their own keys (one C-level pass)
                hashed.append(column if set(map(type, column)) <= {str}
                              else [hashable(v) for v in column])
            else:
                values.append(project(self.env, self.cx, ids, ()))
                hashed.append(ids.tolist())          # a bare ?x groups by identity
        distinct = len(set(hashed[0])) if len(hashed) == 1 else len(set(zip(*hashed)))
        if distinct != len(firsts):
            return None
        it_keys = iter(values)
        it_aggs = iter(per_agg)
        return [next(it_aggs) if isinstance(item, A.Aggregate) else next(it_keys)
                for item in items]


@dataclass(slots=True)
class BatchSelection:
    """Picked solutions: row indexes `sel` into a batch, in answer order."""
    sols: BatchSolutions
    sel: np.ndarray

    def __len__(self) -> int:
        return len(self.sel)

    def rows(self) -> list[Row]:
        return self.sols.batch.take(self.sel).rows()

    def page(self, start: int, end: int) -> BatchSelection:
        return BatchSelection(self.sols, self.sel[start:end])

    def column(self, item: A.Path) -> list[Any]:
        sols = self.sols
        col = sols.batch.cols[sols.layout.index(item.var)][self.sel]
        return project(sols.env, sols.cx, col, item.segments)


# --- numpy passes ------------------------------------------------------------------------

def _row_keys(cols: list[np.ndarray]) -> np.ndarray:
    """One comparable key per row of `cols` (ids are below 2**31 — a predicate variable's
    negated symbol id above -2**31 — so two pack into one int64; more are compared as raw
    bytes)."""
    if len(cols) == 1:
        return cols[0]
    if len(cols) == 2:
        pairs: np.ndarray = (cols[0] << 32) | (cols[1] & 0xFFFFFFFF)
        return pairs
    stacked = np.ascontiguousarray(np.stack(cols, axis=1))
    return stacked.view(np.dtype((np.void, 8 * len(cols)))).ravel()


def first_unique(cols: list[np.ndarray]) -> np.ndarray:
    """Ascending indices of the first occurrence of each distinct row of `cols`."""
    idx: np.ndarray = np.unique(_row_keys(cols), return_index=True)[1]
    idx.sort()
    return idx


def group_ids(cols: list[np.ndarray], size: int) -> tuple[np.ndarray, np.ndarray]:
    """(group of each row, first row of each group), groups numbered in first-seen order."""
    if not cols:
        return np.zeros(size, dtype=np.intp), np.zeros(1 if size else 0, dtype=np.intp)
    if len(cols) == 1:
        runs = sorted_runs(cols[0])
        if runs is not None:
            return runs
    _, first, inv = np.unique(_row_keys(cols), return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(first), dtype=np.intp)
    rank[order] = np.arange(len(first))
    return rank[inv.ravel()], first[order]


def sorted_runs(key: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """`group_ids` of one column whose equal values are already adjacent in ascending
    order — what a type scan (ascending ids) followed by expands produces for the scanned
    variable, e.g. the class of `FIND(?cls.name, COUNT(?d))`. A linear pass instead of a
    sort; None when the column is not non-decreasing."""
    if len(key) < 2:
        return None
    change = key[1:] != key[:-1]
    if not (key[1:] >= key[:-1]).all():
        return None
    group = np.empty(len(key), dtype=np.intp)
    group[0] = 0
    np.cumsum(change, out=group[1:])
    firsts = np.flatnonzero(change) + 1
    return group, np.concatenate((np.zeros(1, dtype=np.intp), firsts.astype(np.intp)))


def _distinct_ids(group: np.ndarray, col: np.ndarray, n_groups: int) -> list[Any]:
    """COUNT(DISTINCT ?x) per group: the sorted distinct non-null ids of each group."""
    present = col != 0
    g, c = group[present], col[present]
    order = np.lexsort((c, g))
    g, c = g[order], c[order]
    keep = np.ones(len(g), dtype=bool)
    keep[1:] = (g[1:] != g[:-1]) | (c[1:] != c[:-1])
    g, c = g[keep], c[keep]
    bounds = np.searchsorted(g, np.arange(n_groups + 1)).tolist()
    return [DistinctIds(c[bounds[k]:bounds[k + 1]]) for k in range(n_groups)]


def project(env: Env, cx: TxnColumns, col: np.ndarray, segments: tuple[str, ...]
            ) -> list[Any]:
    """The values of `?x.segments` for each id of `col` (0 → None), as the row path's
    `shape.project_column` computes them; every distinct id is evaluated once."""
    if segments == ("name",):
        names: list[Any] = cx.names(col).tolist()
        return names
    uniq, inv = np.unique(col, return_inverse=True)
    if not segments:
        element = env.element
        values: list[Any] = [element(u or None) for u in uniq.tolist()]
    else:
        path_value = env.path_value
        values = [path_value(u or None, segments) for u in uniq.tolist()]
    arr = np.empty(len(values), dtype=object)
    for j, v in enumerate(values):
        arr[j] = v
    projected: list[Any] = arr[inv.ravel()].tolist()
    return projected


def not_null_by_id(env: Env, col: np.ndarray, segments: tuple[str, ...]) -> np.ndarray:
    """Whether `?x.segments` is not null, per row of `col` (evaluated per distinct id)."""
    if not segments:
        bound: np.ndarray = col != 0
        return bound
    uniq, inv = np.unique(col, return_inverse=True)
    path_value = env.path_value
    ok = np.array([path_value(u or None, segments) is not None for u in uniq.tolist()],
                  dtype=bool)
    present: np.ndarray = ok[inv.ravel()]
    return present
