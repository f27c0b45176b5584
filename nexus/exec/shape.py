"""FIND results: from the solutions of a WHERE to the KIP answer — one shaper for both
executors (CONTRACT §4).

Owns the shape of an answer: solutions deduplicated on the FIND variables in first-found
order (unless ORDER BY), one column per FIND expression (a single expression answers a flat
list), implicit GROUP BY for aggregates, ORDER BY (nulls last, `results`), LIMIT, the opaque
CURSOR and `next_cursor`, the row cap as solutions are read, and what a dry run answers.

It does not own how solutions are held. An executor hands them over as `Solutions`: the row
path as a stream of row tuples (`RowSolutions`, below), the columnar one as numpy columns
(`nexus.exec.batch.BatchSolutions`). Each answers the few questions the shaper asks — the
first-found distinct solutions, a page of them, a projected column, the aggregates' groups
— in its own way and with the same answers, so that results, their order and their cursors
are identical whichever executor ran.
"""
from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Iterable, Iterator, Mapping, Protocol, TypeVar

from ..errors import ErrorCode, KipError
from ..syntax import ast as A
from .context import ExecContext
from .env import Env, prefetch_spec
from .rows import Row, chunks
from .results import Aggregator, order_groups, order_rows

Params = Mapping[str, Any]
Answer = tuple[Any, "str | None"]        # (result, next_cursor)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class FindShape:
    """What shaping needs to know of a prepared FIND (computed once per prepared command)."""
    find: A.Find
    layout: list[str]                       # the solution rows' variables, in order
    paths: tuple[A.Path, ...]               # what each FIND item reads
    key_idx: tuple[int, ...]                # positions of the FIND variables
    distinct: bool                          # rows are already distinct on key_idx
    aggregated: bool                        # FIND has aggregates
    repeat_key: tuple[int, ...] | None      # named positions, when rows may repeat on them
    fingerprint_params: tuple[str, ...]     # the parameters the query uses (cursors)
    fingerprint_text: str                   # the query without LIMIT and CURSOR

    def fingerprint(self, params: Params) -> str:
        """What a cursor belongs to: the query and the values of its parameters."""
        used = {k: params.get(k) for k in self.fingerprint_params}
        blob = self.fingerprint_text + "\0" + json.dumps(used, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


class Selection(Protocol):
    """Solutions picked for the answer, in answer order."""

    def __len__(self) -> int: ...

    def rows(self) -> list[Row]:
        """The solutions as row tuples (ids, None for null), for ORDER BY."""
        ...

    def page(self, start: int, end: int) -> Selection: ...

    def column(self, item: A.Path) -> list[Any]:
        """The values of a FIND expression, one per solution."""
        ...


class Solutions(Protocol):
    """The solutions of a WHERE as one executor produced them, in first-found order."""

    def first_found(self, key_idx: tuple[int, ...] | None, stop: int | None) -> Selection:
        """The solutions distinct on `key_idx` (None: they already are), first one kept, at
        most `stop` of them; the row cap applies to what reading them takes."""
        ...

    def aggregate(self, agg: Aggregator, repeat_key: tuple[int, ...] | None,
                  by_columns: bool) -> list[list[Any]] | None:
        """Feed every solution into `agg` (each once per assignment of the named variables
        at `repeat_key`, when given). Or, when `by_columns` allows it (no ORDER BY) and the
        executor can, return the answer's columns itself: one per FIND item, the groups in
        first-found order."""
        ...


# --- shaping -----------------------------------------------------------------------------

def shape_find(env: Env, shape: FindShape, sols: Solutions, limit: int | None, offset: int,
               params: Params) -> Answer:
    """The answer of a FIND over its solutions: (result, next_cursor)."""
    if shape.aggregated:
        return _shape_groups(env, shape, sols, limit, offset, params)
    find = shape.find
    # Without ORDER BY a page needs only the first solutions (one more tells whether a
    # next page exists); with it, all of them.
    if limit is None and offset == 0 and not find.order_by:
        # Every solution, in first-found order (no page to cut, no cursor to give).
        unique = sols.first_found(None if shape.distinct else shape.key_idx, None)
        paths = shape.paths
        if len(paths) == 1:
            return unique.column(paths[0]), None
        return [unique.column(path) for path in paths], None
    stop = None if (limit is None or find.order_by) else offset + limit + 1
    unique = sols.first_found(None if shape.distinct else shape.key_idx, stop)
    if find.order_by:
        unique = RowSelection(env, shape.layout, order_rows(env, unique.rows(), find.order_by,
                                                            shape.layout))
    n = len(unique)
    end = n if limit is None else offset + limit
    page = unique if offset == 0 and end >= n else unique.page(offset, end)
    columns = [page.column(path) for path in shape.paths]
    return one_or_list(columns), (encode_cursor(end, shape, params) if n > end else None)


def point_answer(env: Env, shape: FindShape, rows: list[Row]) -> Any:
    """The answer over at most one solution row, with no ORDER BY, aggregate or offset:
    what `shape_find` gives for it (one row is distinct and fits any LIMIT)."""
    layout = shape.layout
    return one_or_list([project_column(env, layout, path, rows) for path in shape.paths])


def _shape_groups(env: Env, shape: FindShape, sols: Solutions, limit: int | None,
                  offset: int, params: Params) -> Answer:
    """Implicit GROUP BY: the plain FIND expressions are the key, the aggregates are
    computed per group (`results.Aggregator`)."""
    find = shape.find
    agg = Aggregator(env, shape.layout, find.items)
    columns = sols.aggregate(agg, shape.repeat_key, not find.order_by)
    if columns is not None:
        n = len(columns[0])
        end = n if limit is None else offset + limit
        columns = [c[offset:end] for c in columns]
    else:
        groups = agg.groups()
        if agg.only_aggregates:
            return one_or_list(groups[0].values() if groups else agg.empty_values()), None
        if find.order_by:
            groups = order_groups(groups, find.order_by, shape.layout, agg)
        n = len(groups)
        end = n if limit is None else offset + limit
        page = [g.values() for g in groups[offset:end]]
        columns = [[values[j] for values in page] for j in range(len(find.items))]
    return one_or_list(columns), (encode_cursor(end, shape, params) if n > end else None)


def one_or_list(items: list[T]) -> T | list[T]:
    """One FIND expression answers its value (or column) alone, several a list of them."""
    return items[0] if len(items) == 1 else items


def empty_result(find: A.Find) -> Any:
    """The result over no solutions (what a dry run answers, CONTRACT §2)."""
    if all(isinstance(i, A.Aggregate) for i in find.items):
        return one_or_list([0 if isinstance(i, A.Aggregate) and i.func in ("COUNT", "SUM")
                            else None for i in find.items])
    return one_or_list([[] for _ in find.items])


# --- the row cap -------------------------------------------------------------------------

def limited(ctx: ExecContext, rows: Iterable[Row]) -> Iterator[Row]:
    """`rows` with the row cap and the deadline enforced as they stream (checked every
    4096 rows, and at the end)."""
    limit = ctx.limits.max_rows
    count = 0
    for row in rows:
        count += 1
        if not count & 4095:
            ctx.check_deadline()
            if count > limit:
                raise ctx.too_many_rows()
        yield row
    if count > limit:
        raise ctx.too_many_rows()


def check_row_cap(ctx: ExecContext, pulled: int, exhausted: bool) -> None:
    """The row cap exactly as `limited` applies it to a stream from which `pulled` rows
    were read (checked every 4096 rows, and at the end when the stream was exhausted) — for
    solutions that were not streamed (a batch, a point lookup)."""
    cap = ctx.limits.max_rows
    if (exhausted and pulled > cap) or (pulled // 4096) * 4096 > cap:
        raise ctx.too_many_rows()


# --- solutions as rows (the row path) ----------------------------------------------------

def distinct(rows: Iterable[Row], key_idx: tuple[int, ...]) -> Iterator[Row]:
    """Rows with distinct values at `key_idx`, the first one kept; reads no further than
    the row it yields."""
    seen: set[Any] = set()
    add = seen.add
    key_of = itemgetter(*key_idx)       # the value, or a tuple of the values, made in C
    for row in rows:
        key = key_of(row)
        if key not in seen:
            add(key)
            yield row


def first_distinct(rows: Iterable[Row], key_idx: tuple[int, ...], stop: int | None
                   ) -> list[Row]:
    """`distinct` as a list of at most `stop` rows — the same rows, read the same way. It
    runs over every solution of a plain FIND, so it is written out (a generator frame, or a
    branch per row between one key and several, costs ~10% here)."""
    seen: set[Any] = set()
    out: list[Row] = []
    if len(key_idx) == 1:
        (k,) = key_idx
        for row in rows:
            value = row[k]
            if value not in seen:
                seen.add(value)
                out.append(row)
                if stop is not None and len(out) >= stop:
                    break
        return out
    key_of = itemgetter(*key_idx)
    for row in rows:
        key = key_of(row)
        if key not in seen:
            seen.add(key)
            out.append(row)
            if stop is not None and len(out) >= stop:
                break
    return out


def first_distinct_capped(ctx: ExecContext, rows: Iterable[Row], k: int, stop: int | None
                          ) -> list[Row]:
    """`first_distinct(limited(ctx, rows), (k,), stop)` in one loop: the same rows, and
    the row cap and deadline checked at the same rows (a generator frame less per row)."""
    limit = ctx.limits.max_rows
    count = 0
    seen: set[Any] = set()
    out: list[Row] = []
    for row in rows:
        count += 1
        if not count & 4095:
            ctx.check_deadline()
            if count > limit:
                raise ctx.too_many_rows()
        value = row[k]
        if value not in seen:
            seen.add(value)
            out.append(row)
            if stop is not None and len(out) >= stop:
                return out          # not read to the end: `limited` checks no more
    if count > limit:
        raise ctx.too_many_rows()
    return out


def _take(rows: Iterable[Row], n: int) -> Iterator[Row]:
    """The first `n` rows. It reads the row after them too (so that a stream of exactly `n`
    rows is seen to end): the batch path's row cap counts the same (`stop + 1`)."""
    for i, row in enumerate(rows):
        if i >= n:
            return
        yield row


@dataclass(slots=True)
class RowSolutions:
    """The row path's solutions: row tuples, read once (a stream from the operators, the
    row cap applied as it is read — or a list, from a point lookup). `uncapped`: the
    stream's row cap is applied here, as it is read (`limited`), rather than by a stage
    of its own."""
    env: Env
    layout: list[str]
    rows: Iterable[Row]
    uncapped: bool = False

    def first_found(self, key_idx: tuple[int, ...] | None, stop: int | None
                    ) -> RowSelection:
        rows = self.rows
        if self.uncapped:
            if key_idx is not None and len(key_idx) == 1:
                return RowSelection(self.env, self.layout, first_distinct_capped(
                    self.env.ctx, rows, key_idx[0], stop))
            rows = limited(self.env.ctx, rows)
        if key_idx is None:
            picked = list(rows if stop is None else _take(rows, stop))
        else:
            picked = first_distinct(rows, key_idx, stop)
        return RowSelection(self.env, self.layout, picked)

    def aggregate(self, agg: Aggregator, repeat_key: tuple[int, ...] | None,
                  by_columns: bool) -> None:
        rows = limited(self.env.ctx, self.rows) if self.uncapped else self.rows
        if repeat_key is not None:
            rows = distinct(rows, repeat_key)
        add = agg.add
        if not agg.row_spec or not self.env.batched:
            for row in rows:
                add(row)
            return None
        for chunk in chunks(iter(rows)):
            self.env.prefetch_rows(chunk, agg.row_spec)
            for row in chunk:
                add(row)
        return None


@dataclass(slots=True)
class RowSelection:
    """Picked solutions as a list of row tuples."""
    env: Env
    layout: list[str]
    _rows: list[Row]

    def __len__(self) -> int:
        return len(self._rows)

    def rows(self) -> list[Row]:
        return self._rows

    def page(self, start: int, end: int) -> RowSelection:
        return RowSelection(self.env, self.layout, self._rows[start:end])

    def column(self, item: A.Path) -> list[Any]:
        return project_column(self.env, self.layout, item, self._rows)


def project_column(env: Env, layout: list[str], item: A.Path, rows: list[Row]) -> list[Any]:
    """The values of `?x.segments` for each row (a bare `?x`: the element's wire object)."""
    i = layout.index(item.var)
    segs = item.segments
    if not segs:
        env.prefetch([row[i] for row in rows], heads=True, attributes=True, metadata=True)
        element = env.element
        return [element(row[i]) for row in rows]
    if segs == ("name",) and env.batched:
        # row values were read from this snapshot: their heads in one batched read
        ids = [n for row in rows if (n := row[i]) is not None and n > 0]
        names = {n: getattr(h, "name", None) for n, h in zip(ids, env.txn.known_heads(ids))}
        return [names.get(n) if (n := row[i]) is not None and n > 0 else None
                for row in rows]
    if segs == ("name",):
        head = env.txn.known_head          # row values were read from this snapshot
        out: list[Any] = []
        append = out.append
        for row in rows:
            n = row[i]
            append(getattr(head(n), "name", None) if n is not None else None)
        return out
    env.prefetch_rows(rows, prefetch_spec([item], layout))
    path_value = env.path_value
    return [path_value(row[i], segs) for row in rows]


# --- cursors -----------------------------------------------------------------------------

def encode_cursor(offset: int, shape: FindShape, params: Params) -> str:
    return cursor_token({"o": offset, "f": shape.fingerprint(params)})


def decode_cursor(token: Any, shape: FindShape, params: Params) -> int:
    """The offset a CURSOR stands for; KIP_1001 when it belongs to another query (or to
    other parameter values)."""
    data = cursor_data(token, 512)
    offset = data.get("o") if data is not None else None
    if not isinstance(offset, int) or offset < 0 or data is None \
            or data.get("f") != shape.fingerprint(params):
        raise KipError(ErrorCode.KIP_1001, "Invalid CURSOR: it does not belong to this query",
                       "Pass the `next_cursor` returned by the previous page of the same query "
                       "(same WHERE, ORDER BY and parameters), or drop CURSOR to start over.")
    return offset


def cursor_token(data: dict[str, Any]) -> str:
    """An opaque CURSOR token holding `data` (compact JSON in unpadded URL-safe base64)."""
    raw = json.dumps(data, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def cursor_data(token: Any, max_length: int) -> dict[str, Any] | None:
    """What `cursor_token` put into `token`; None when it is not such a token (or is longer
    than `max_length`: a client cannot make the engine decode a large blob)."""
    if not isinstance(token, str) or len(token) > max_length:
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except ValueError:          # not base64, not UTF-8, not JSON
        return None
    return data if isinstance(data, dict) else None
