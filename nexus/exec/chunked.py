"""The row operators that ask the store a chunk of rows at a time (issue 22, PostgreSQL).

A stage of `nexus.exec.operators` asks the store about one row at a time: an in-process
lookup on LMDB and memory, but a round trip (one SQL statement) per row on PostgreSQL.
For a transaction whose `prefers_batches()` is true, the operators run the stages built
here instead: each takes its input a chunk of rows at a time (`rows.chunks`) and asks once
per chunk through the protocol's batched reads (`known_heads`, `attributes_of`,
`link_ids`, `out_links_of`...), so that a query's statements do not grow with its rows.
Their output is the row-at-a-time stages' output, in the same order.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable

from ..plan import physical as P
from .rows import Row, Rows, chunks

if TYPE_CHECKING:
    from .env import Env, PrefetchSpec

Stage = Callable[["Env", Rows], Rows]
Links = dict[int, list[tuple[int, int, int]]]


def prefetching(rowwise: Stage, spec: PrefetchSpec) -> Stage:
    """`rowwise` over each chunk after reading, in one batched call per kind, what it will
    ask of the chunk's elements (heads, attributes, metadata: `Env.prefetch_rows`)."""
    def run(env: Env, rows: Rows) -> Rows:
        for chunk in chunks(rows):
            env.prefetch_rows(chunk, spec)
            yield from rowwise(env, iter(chunk))
    return run


def _links(env: Env, direction: str) -> Callable[[list[int], int | None], Links]:
    return env.txn.out_links_of if direction == "out" else env.txn.in_links_of


def expand(step: P.Expand, layout: list[str]) -> Stage:
    i = layout.index(step.start)
    with_link = step.link is not None

    def run(env: Env, rows: Rows) -> Rows:
        pids = env.pids(step.predicates)
        if not pids:
            return
        links_of = _links(env, step.direction)
        tick = env.tick
        for chunk in chunks(rows):
            starts = [s for row in chunk if (s := row[i]) is not None]
            found = [links_of(starts, pid) for pid in pids] if starts else []
            tick(len(chunk) + sum(len(v) for by in found for v in by.values()))
            for row in chunk:
                start = row[i]
                if start is None:
                    continue
                for by in found:
                    for _, end, link in by.get(start, ()):
                        yield row + (end, link) if with_link else row + (end,)
    return run


def link_check(step: P.LinkCheck, layout: list[str]) -> Stage:
    si, oi = layout.index(step.subject), layout.index(step.object)
    with_link = step.link is not None

    def run(env: Env, rows: Rows) -> Rows:
        pids = env.pids(step.predicates)
        if not pids:
            return
        link_ids = env.txn.link_ids
        for chunk in chunks(rows):
            probes = [(s, pid, o) for row in chunk
                      if (s := row[si]) is not None and (o := row[oi]) is not None
                      for pid in pids]
            found = iter(link_ids(probes))
            for row in chunk:
                if row[si] is None or row[oi] is None:
                    continue
                links = [next(found) for _ in pids]
                for link in links:
                    if link is not None:
                        yield row + (link,) if with_link else row
                        if not with_link:
                            break
    return run


def one_hop_optional(ex: P.Expand, i: int, with_link: bool, nulls: Row) -> Stage:
    """`OPTIONAL { (?x, "p", ?y) }` with ?x bound and ?y new (see the row version,
    `operators._one_hop_optional`)."""
    def run(env: Env, rows: Rows) -> Rows:
        pids = env.pids(ex.predicates)
        links_of = _links(env, ex.direction)
        tick = env.tick
        for chunk in chunks(rows):
            starts = [s for row in chunk if (s := row[i]) is not None]
            found = [links_of(starts, pid) for pid in pids] if starts else []
            tick(len(chunk) + sum(len(v) for by in found for v in by.values()))
            for row in chunk:
                start = row[i]
                matched = False
                if start is not None:
                    for by in found:
                        for _, end, link in by.get(start, ()):
                            matched = True
                            yield row + ((end, link) if with_link else (end,))
                if not matched:
                    yield row + nulls
    return run


def optional_block(stream: Stage, width: int, exports: tuple[int, ...], nulls: Row
                   ) -> Stage:
    """A correlated OPTIONAL block (`stream`: its steps over many rows,
    `operators.compile_stream`) run over a chunk of distinct outer rows at once; its rows
    are grouped by the outer row they extend (their first `width` values), in order."""
    def run(env: Env, rows: Rows) -> Rows:
        tick = env.tick
        for chunk in chunks(rows):
            tick(len(chunk))
            tails: dict[Row, list[Row]] = {row: [] for row in chunk}
            for sub_row in stream(env, iter(list(tails))):
                tails[sub_row[:width]].append(tuple(sub_row[k] for k in exports))
            for row in chunk:
                found = tails[row]
                if not found:
                    yield row + nulls
                for tail in found:
                    yield row + tail
    return run


def anti_block(stream: Stage, width: int) -> Stage:
    """A correlated NOT block over a chunk of distinct outer rows at once: a row survives
    when no row of the block extends it."""
    def run(env: Env, rows: Rows) -> Rows:
        tick = env.tick
        for chunk in chunks(rows):
            tick(len(chunk))
            matched = {sub_row[:width] for sub_row in stream(env, iter(dict.fromkeys(chunk)))}
            for row in chunk:
                if row not in matched:
                    yield row
    return run


def expand_any(step: P.ExpandAny, layout: list[str]) -> Stage:
    """A link pattern with a predicate variable from a bound end (RC11 §3.4.2; see the row
    version, `operators._c_expand_any`): one batched read per predicate the chunk needs."""
    i = layout.index(step.start)
    pi = layout.index(step.pred) if step.pred_bound else None
    ei = layout.index(step.end) if step.end_bound else None
    new_pred = pi is None
    with_link = step.link is not None

    def run(env: Env, rows: Rows) -> Rows:
        links_of = _links(env, step.direction)
        tick = env.tick
        only = env.narrow_pids(step.narrow) if step.narrow is not None else None
        for chunk in chunks(rows):
            wanted: dict[int | None, list[int]] = {}
            for row in chunk:
                start = row[i]
                if start is None:
                    continue
                if pi is not None:
                    p = row[pi]
                    if p is not None:
                        wanted.setdefault(-p, []).append(start)
                elif only is not None:
                    for pid in only:
                        wanted.setdefault(pid, []).append(start)
                else:
                    wanted.setdefault(None, []).append(start)
            by_pid = {pid: links_of(starts, pid) for pid, starts in wanted.items()}
            k = len(chunk)
            for row in chunk:
                start = row[i]
                if start is None:
                    continue
                if pi is not None:
                    p = row[pi]
                    if p is None:
                        continue
                    found: Iterable[tuple[int, int, int]] = by_pid[-p].get(start, ())
                elif only is not None:
                    found = (t for pid in only for t in by_pid[pid].get(start, ()))
                else:
                    found = by_pid[None].get(start, ())
                want = row[ei] if ei is not None else None
                for pid, end, link in found:
                    k += 1
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
            tick(k)
    return run
