"""Solution modifiers: implicit GROUP BY with aggregates, and ORDER BY.

Aggregates (CONTRACT §4): the plain FIND expressions are the group key (by value, kind
included — `true` and `1` are different groups, `1` and `1.0` the same; a bare `?x` groups
by identity), every solution feeds the aggregates (not only distinct ones).
`COUNT(?x)` counts solutions where the value is not null, `COUNT(DISTINCT ?x)` distinct
non-null values; `SUM` ignores non-numbers (0 when there are none) and keeps integers
integral; `AVG` is a float (null when there are no numbers); `MIN`/`MAX` use the ORDER BY
order over non-null values.

ORDER BY: keys left to right, each ASC or DESC; `null` sorts last in both directions;
values of different kinds sort booleans < numbers < strings < arrays/objects.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Protocol, TypeVar

from ..syntax import ast as A
from .env import Env, prefetch_spec
from .filters import kind
from .rows import Row

T = TypeVar("T")


def sort_key(value: Any) -> tuple[int, Any]:
    k = kind(value)
    if k == 4:
        return (k, json.dumps(value, sort_keys=True, ensure_ascii=False))
    return (k, value)


def hashable(value: Any) -> Any:
    """A key under which equal values (as FILTER's `==` sees them) meet: the JSON kind goes
    into the key, so that `true` and `1` (equal in Python) stay apart while `1` and `1.0`
    (equal numbers) meet; arrays and objects compare by their canonical JSON."""
    k = kind(value)
    if k == 4:
        return (4, json.dumps(value, sort_keys=True, ensure_ascii=False))
    return (k, value)


class Accumulator(Protocol):
    """One aggregate's state for one group."""

    def add(self, v: Any) -> None:
        """Count one solution's value."""
        ...

    def result(self) -> Any: ...

    def merge(self, other: Any) -> None:
        """Take in another group's state of the same aggregate (groups with equal keys)."""
        ...


class Group:
    """One result group: its key values, its first solution, an accumulator per aggregate
    (None in the positions of the key expressions)."""

    __slots__ = ("key_values", "first_row", "accs")

    def __init__(self, key_values: list[Any], first_row: Row,
                 accs: list[Accumulator | None]) -> None:
        self.key_values = key_values
        self.first_row = first_row
        self.accs = accs

    def values(self) -> list[Any]:
        """The group's result row, one value per FIND item."""
        out: list[Any] = []
        ki = 0
        for acc in self.accs:
            if acc is None:
                out.append(self.key_values[ki])
                ki += 1
            else:
                out.append(acc.result())
        return out


class _Count:
    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0

    def add(self, v: Any) -> None:
        if v is not None:
            self.n += 1

    def result(self) -> int:
        return self.n

    def merge(self, other: "_Count") -> None:
        self.n += other.n


class _CountDistinct:
    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen: set[Any] = set()

    def add(self, v: Any) -> None:
        if v is not None:
            self.seen.add(hashable(v))

    def result(self) -> int:
        return len(self.seen)

    def merge(self, other: "_CountDistinct") -> None:
        self.seen |= other.seen


class _Sum:
    __slots__ = ("total", "n")

    def __init__(self) -> None:
        self.total: int | float = 0
        self.n = 0

    def add(self, v: Any) -> None:
        if kind(v) == 2:
            self.total += v
            self.n += 1

    def result(self) -> Any:
        return self.total

    def merge(self, other: "_Sum") -> None:
        self.total += other.total
        self.n += other.n


class _Avg(_Sum):
    __slots__ = ()

    def result(self) -> Any:
        return float(self.total) / self.n if self.n else None


class _MinMax:
    __slots__ = ("best", "best_key", "sign")

    def __init__(self, sign: int) -> None:
        self.best: Any = None
        self.best_key: Any = None
        self.sign = sign

    def add(self, v: Any) -> None:
        if v is None:
            return
        key = sort_key(v)
        if self.best_key is None or (key < self.best_key if self.sign < 0
                                     else key > self.best_key):
            self.best, self.best_key = v, key

    def result(self) -> Any:
        return self.best

    def merge(self, other: "_MinMax") -> None:
        if other.best_key is not None:
            key = other.best_key
            if self.best_key is None or (key < self.best_key if self.sign < 0
                                         else key > self.best_key):
                self.best, self.best_key = other.best, key


class DistinctIds:
    """COUNT(DISTINCT ?x) of a group computed by the columnar path: the sorted distinct
    non-null ids (a numpy array); merging two groups unites them."""
    __slots__ = ("ids",)

    def __init__(self, ids: Any) -> None:
        self.ids = ids

    def add(self, v: Any) -> None:
        if v is not None:       # (the columnar path hands over whole groups instead)
            import numpy as np
            self.ids = np.union1d(self.ids, [v])

    def result(self) -> int:
        return int(len(self.ids))

    def merge(self, other: "DistinctIds") -> None:
        import numpy as np
        self.ids = np.union1d(self.ids, other.ids)


def counted(n: int) -> _Count:
    """A COUNT accumulator that already counted `n` solutions."""
    acc = _Count()
    acc.n = n
    return acc


_ACC: dict[str, Callable[[], Accumulator]] = {
    "COUNT": _Count,
    "SUM": _Sum,
    "AVG": _Avg,
    "MIN": lambda: _MinMax(-1),
    "MAX": lambda: _MinMax(1),
}


def _new_acc(item: A.Aggregate) -> Accumulator:
    return _CountDistinct() if item.distinct else _ACC[item.func]()


class Aggregator:
    """Feeds every solution row into its group's accumulators."""

    def __init__(self, env: Env, layout: list[str], items: tuple[A.FindItem, ...]) -> None:
        self.env = env
        self.items = items
        self.only_aggregates = all(isinstance(i, A.Aggregate) for i in items)
        self._key_fns: list[tuple[A.Path, Callable[[Row], Any], int]] = []
        self._agg_fns: list[tuple[A.Aggregate, Callable[[Row], Any]]] = []
        for item in items:
            if isinstance(item, A.Aggregate):
                fn = self._value_fn(layout, item.arg)
                if item.func != "COUNT" and not item.arg.segments:
                    fn = self._named(fn)
                self._agg_fns.append((item, fn))
            else:
                self._key_fns.append((item, self._value_fn(layout, item),
                                      layout.index(item.var)))
        self._agg_calls = [fn for _, fn in self._agg_fns]
        self._id_idx = tuple(dict.fromkeys(i for _, _, i in self._key_fns))
        self._single = len(self._id_idx) == 1
        self._id_pos = self._id_idx[0] if self._single else -1
        # identities of the key variables -> (first solution, accumulators)
        self._by_ids: dict[Any, tuple[Row, list[Accumulator]]] = {}
        self._groups: list[Group] | None = None
        # What the aggregates read of each solution, and the keys of each group's first
        # solution (prefetched a chunk of rows at a time: `feed`, `groups`).
        self.row_spec = prefetch_spec([i.arg for i in items if isinstance(i, A.Aggregate)
                                       and i.arg.segments], layout)
        self._key_spec = prefetch_spec([i for i in items if not isinstance(i, A.Aggregate)],
                                       layout)

    def _value_fn(self, layout: list[str], path: A.Path) -> Callable[[Row], Any]:
        i = layout.index(path.var)
        segs = path.segments
        env = self.env
        if not segs:
            return lambda row: row[i]        # identity (COUNT(?x) counts bound solutions)
        return lambda row: env.path_value(row[i], segs)

    def _named(self, fn: Callable[[Row], Any]) -> Callable[[Row], Any]:
        """MIN/MAX/SUM/AVG of a bare predicate variable (RC11 §3.4.2) see its name (a row
        holds the negated symbol id); element identities are passed as they are."""
        env = self.env

        def value(row: Row) -> Any:
            v = fn(row)
            return env.path_value(v, ()) if v is not None and v < 0 else v
        return value

    def add(self, row: Row) -> None:
        """Phase 1: accumulate by the identities of the key variables (cheap integer keys);
        the key values are projected once per distinct identity in `groups()`."""
        ids = row[self._id_pos] if self._single else tuple(row[i] for i in self._id_idx)
        entry = self._by_ids.get(ids)
        if entry is None:
            entry = self._by_ids[ids] = (row, [_new_acc(item) for item, _ in self._agg_fns])
        for acc, fn in zip(entry[1], self._agg_calls):
            acc.add(fn(row))

    def add_group(self, first_row: Row, accs: list[Accumulator]) -> None:
        """Phase 1 done elsewhere (the columnar path): one identity group with its first
        solution row and its finished accumulators (in the order of the FIND aggregates).
        Groups must be added in first-seen order."""
        self._by_ids[len(self._by_ids)] = (first_row, accs)

    @property
    def aggregates(self) -> list[A.Aggregate]:
        """The FIND aggregates in order (the `accs` order of `add_group`)."""
        return [item for item, _ in self._agg_fns]

    @property
    def key_positions(self) -> tuple[int, ...]:
        """Layout positions whose identities form the phase-1 group key."""
        return self._id_idx

    def groups(self) -> list[Group]:
        """Phase 2: project the key values of each identity group and merge the groups
        whose values are equal (two drugs with the same name are one group)."""
        if self._groups is None:
            groups: dict[Any, tuple[list[Any], Row, list[Accumulator]]] = {}
            self.env.prefetch_rows([first for first, _ in self._by_ids.values()],
                                   self._key_spec)
            for first, accs in self._by_ids.values():
                raw = [fn(first) for _, fn, _ in self._key_fns]
                key = tuple(hashable(v) for v in raw)
                g = groups.get(key)
                if g is None:
                    groups[key] = (raw, first, accs)
                else:
                    for mine, theirs in zip(g[2], accs):
                        mine.merge(theirs)
            out = []
            for raw, first, accs in groups.values():
                it = iter(accs)
                full: list[Accumulator | None] = [
                    None if not isinstance(item, A.Aggregate) else next(it)
                    for item in self.items]
                out.append(Group(raw, first, full))
            for g_ in out:
                # A bare ?x groups by identity and projects the whole element.
                for j, (item, _, _) in enumerate(self._key_fns):
                    if not item.segments:
                        g_.key_values[j] = self.env.element(g_.key_values[j])
            self._groups = out
        return self._groups

    def empty_values(self) -> list[Any]:
        return [_new_acc(item).result() for item in self.items
                if isinstance(item, A.Aggregate)]

    def value_of(self, group: Group, expr: A.FindItem, layout: list[str]) -> Any:
        """An ORDER BY key evaluated for a group."""
        for j, item in enumerate(self.items):
            if item == expr:
                return group.values()[j]
        if isinstance(expr, A.Aggregate):
            acc = _new_acc(expr)
            # Not in FIND: fall back to the group's first solution (best effort).
            acc.add(self._value_fn(layout, expr.arg)(group.first_row))
            return acc.result()
        return self._value_fn(layout, expr)(group.first_row)


def order_rows(env: Env, rows: list[Row], keys: tuple[A.OrderKey, ...],
               layout: list[str]) -> list[Row]:
    """Solution rows sorted by the ORDER BY keys (see `_sort`)."""
    env.prefetch_rows(rows, prefetch_spec([A.item_path(k.expr) for k in keys], layout))

    def value_of(expr: A.FindItem) -> Callable[[Row], Any]:
        path = A.item_path(expr)
        i = layout.index(path.var)
        segs = path.segments
        return lambda row: env.path_value(row[i], segs)
    return _sort(rows, keys, value_of)


def order_groups(groups: list[Group], keys: tuple[A.OrderKey, ...], layout: list[str],
                 agg: Aggregator) -> list[Group]:
    """Result groups sorted by the ORDER BY keys (aggregates allowed, see `_sort`)."""
    def value_of(expr: A.FindItem) -> Callable[[Group], Any]:
        return lambda g: agg.value_of(g, expr, layout)
    return _sort(groups, keys, value_of)


def _sort(items: list[T], keys: tuple[A.OrderKey, ...],
          value_of: Callable[[A.FindItem], Callable[[T], Any]]) -> list[T]:
    """Stable multi-key sort; nulls last whatever the direction."""
    for key in reversed(keys):
        get = value_of(key.expr)
        decorated = [(get(r), r) for r in items]
        present = [d for d in decorated if d[0] is not None]
        missing = [d[1] for d in decorated if d[0] is None]
        present.sort(key=lambda d: sort_key(d[0]), reverse=key.descending)
        items = [d[1] for d in present] + missing
    return items
