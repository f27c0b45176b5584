"""Bulk import: large sets of concepts and links, without a KIP parse per item.

Owns `bulk_import(nexus, concepts, links, batch_size=...)`, the loader for data already in
the shape of the `peers` JSONL files: a concept is `{type, name, attributes?, metadata?}`, a
link `{subject: {type, name}, predicate, object: {type, name}, attributes?, metadata?}`.

The semantics are UPSERT's, item by item, as if each were a one-block UPSERT applied in
order: define-before-use (`KIP_2001`, checked once per batch for the batch's distinct names),
`_`-prefixed keys refused (`KIP_2002`), `{type, name}` match-or-create, an existing element
(or one repeated in the input) shallow-merged with `_version` bumped, link ends that must
exist (`KIP_3002`), one link per (s, p, o), engine metadata, protected targets (`KIP_3004`).
Each batch is one write transaction: a failing batch leaves nothing of itself, the batches
before it stay committed.

Why it is fast: new elements go to the store's bulk methods (`create_concepts` /
`create_links`: sorted, appended index writes) with ids reserved in one step; a batch of
only new, distinct, well-formed items (the usual load) is checked and shaped column-wise in
C-level loops (`map`/`zip`), falling back to the item-by-item path for anything else; and
existence checks are skipped where they cannot hit — a concept whose type had no instance
when the import first met it, or a link with an end created by this import or a predicate
that had no link, can only collide with what this import itself wrote, which is tracked in
memory. If another writer commits between two batches (seen as a change of the counter or
the element counts), those shortcuts are dropped and everything is probed again.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from operator import itemgetter, methodcaller
from typing import Any, Callable, Iterable, Iterator

from ..errors import ErrorCode, KipError
from . import protect, writes
from .context import ExecContext
from .schema import Schema

# Large batches, because every write transaction that inserts links all over the index key
# space copies (and so frees) most index pages; LMDB then carries the freed-page list through
# every later commit until it is reused, which made single durable UPSERTs ~4x slower after
# a load in batches of 100k (measured: W2 median 4.2 ms → 1.1 ms once compacted). A batch of
# 1M items costs ~100 MB more peak memory than 100k.
DEFAULT_BATCH = 1_000_000


def bulk_import(nexus: Any, concepts: Iterable[dict] = (), links: Iterable[dict] = (), *,
                batch_size: int = DEFAULT_BATCH, privileged: bool = False,
                progress: Callable[[str, int], None] | None = None) -> dict[str, int]:
    """Load `concepts`, then `links`; returns counts of created / updated elements.

    `progress(kind, done)` is called after each committed batch (`kind` is "concepts" or
    "links", `done` the items of that kind loaded so far).
    """
    if batch_size < 1:
        raise KipError(ErrorCode.KIP_1001, "batch_size must be at least 1")
    state = _Import(nexus, privileged)
    done = 0
    for chunk in _chunks(concepts, batch_size):
        state.run(state.concept_batch, chunk)
        done += len(chunk)
        if progress is not None:
            progress("concepts", done)
    done = 0
    for chunk in _chunks(links, batch_size):
        state.run(state.link_batch, chunk)
        done += len(chunk)
        if progress is not None:
            progress("links", done)
    return dict(state.counts)


def _chunks(items: Iterable[dict], size: int) -> Iterator[list]:
    chunk: list = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _bad_item(kind: str, index: int, item: Any) -> KipError:
    shape = ("{type, name, attributes?, metadata?}" if kind == "concept" else
             "{subject: {type, name}, predicate, object: {type, name}, attributes?, "
             "metadata?}")
    return KipError(ErrorCode.KIP_1001, f"bulk import: {kind} #{index} is not {shape}: "
                    f"{str(item)[:200]}", f"Each {kind} must be an object {shape}.")


_RESERVED = methodcaller("startswith", "_")
_EMPTY: dict = {}
_TYPE, _NAME, _PREDICATE = itemgetter("type"), itemgetter("name"), itemgetter("predicate")
_SUBJECT, _OBJECT = itemgetter("subject"), itemgetter("object")
_ATTRS, _META = methodcaller("get", "attributes"), methodcaller("get", "metadata")
_MAP_TYPES = {dict, type(None)}


def _plain_maps(*columns: list) -> bool:
    """Whether every value is a dict (or None) without a reserved key — checked column-wise
    in C loops; on False the item-by-item path finds (and reports) the offender."""
    for column in columns:
        if not set(map(type, column)) <= _MAP_TYPES:
            return False
        if any(map(_RESERVED, set().union(*filter(None, column)))):    # distinct keys
            return False
    return True


def _check_map(value: Any, where: str) -> dict:
    """An item's attributes/metadata: a dict without engine keys (values are checked by the
    store when it encodes them)."""
    if type(value) is not dict:
        if value is None:
            return _EMPTY
        raise KipError(ErrorCode.KIP_2003, f"{where} must be an object, got "
                       f"{type(value).__name__}")
    if any(map(_RESERVED, value)):
        writes.check_keys(value, where)
    return value


@contextmanager
def _gc_paused() -> Iterator[None]:
    # A batch allocates hundreds of thousands of dicts and tuples, none in a cycle; letting
    # the collector run meanwhile only rescans them (and the caller's data) again and again.
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class _Import:
    """State kept across the batches of one import (what it created, what it may skip)."""

    def __init__(self, nexus: Any, privileged: bool) -> None:
        self.nexus = nexus
        self.privileged = privileged
        self.start_max: int | None = None       # max id before the import's first write
        # (type, name) -> id of concepts this import created or found: no probe next time.
        self.ids: dict[tuple[str, str], int] = {}
        self.fresh: dict[str, bool] = {}        # type name -> had no instance at first sight
        self.fresh_pred: dict[int, bool] = {}   # predicate id -> had no link at first sight
        self.linked: set[int] = set()           # subjects given links by earlier batches
        self.seen: tuple | None = None          # store state when our last batch committed
        self.counts = {"concepts_created": 0, "concepts_updated": 0,
                       "propositions_created": 0, "propositions_updated": 0, "batches": 0}

    def run(self, fn: Callable[[ExecContext, list], None], chunk: list) -> None:
        nexus = self.nexus
        with nexus._write_lock:
            with nexus.store.write() as txn:
                ctx = ExecContext.start(txn, nexus.config.limits, engine=nexus,
                                        privileged=self.privileged)
                self._sync(txn)
                with _gc_paused():
                    fn(ctx, chunk)
                nexus._before_commit(ctx)
                self.seen = self._state(txn)
        nexus._after_commit(ctx)
        self.counts["batches"] += 1

    @staticmethod
    def _state(txn: Any) -> tuple[int, int, int]:
        return txn.max_id(), txn.count_concepts(), txn.count_links()

    def _sync(self, txn: Any) -> None:
        """Drop what the fast paths assume when another writer committed between our
        batches (a creation moves max_id, a deletion the counts): from then on, probe."""
        if self.start_max is None or self._state(txn) != self.seen:
            if self.start_max is not None:
                self.ids.clear()
                self.linked.clear()
                self.fresh = dict.fromkeys(self.fresh, False)
                self.fresh_pred = dict.fromkeys(self.fresh_pred, False)
            self.start_max = txn.max_id()

    # --- concepts -----------------------------------------------------------------------
    def concept_batch(self, ctx: ExecContext, chunk: list) -> None:
        txn, schema, now = ctx.txn, Schema(ctx.txn), ctx.now
        try:
            type_names = {item["type"] for item in chunk}
        except (TypeError, KeyError):
            i = next(i for i, x in enumerate(chunk) if type(x) is not dict or "type" not in x)
            raise _bad_item("concept", i, chunk[i]) from None
        tids = {}
        for t in type_names:
            if type(t) is not str:
                raise KipError(ErrorCode.KIP_1001, f"bulk import: a concept type must be a "
                               f"string, got {t!r}")
            tids[t] = schema.concept_type(t)
            if t not in self.fresh:
                self.fresh[t] = txn.count_type(tids[t]) == 0
        engine = {"_version": 1, "_created_at": now, "_updated_at": now}
        if self._concepts_fast(ctx, chunk, type_names, tids, engine):
            return
        ids, fresh = self.ids, self.fresh
        pending: dict[tuple[str, str], list] = {}   # new in this batch: [type, name, a, m]
        updated = 0
        for i, item in enumerate(chunk):
            try:
                t, name = item["type"], item["name"]
                attrs = _check_map(item.get("attributes"), "attributes")
                meta = _check_map(item.get("metadata"), "metadata")
            except (TypeError, KeyError, AttributeError):
                raise _bad_item("concept", i, item) from None
            if type(name) is not str:
                raise _bad_item("concept", i, item)
            key = (t, name)
            row = pending.get(key)
            if row is not None:             # repeated in this batch: merge, one more write
                row[2] = {**row[2], **attrs}
                row[3] = writes.bump({**row[3], **meta}, now)
                continue
            n = ids.get(key)
            if n is None and not fresh[t]:
                n = txn.concept_id(tids[t], name)
            if n is None:
                pending[key] = [t, name, attrs, {**meta, **engine}]
                continue
            if not self.privileged:
                protect.check_write(ctx, txn.head(n), attrs)
            writes.update(ctx, n, attrs, meta)
            updated += 1
        if pending:
            new = txn.reserve_ids(len(pending))
            rows = [(n, tids[t], name, a, m) for n, (t, name, a, m) in zip(new, pending.values())]
            txn.create_concepts(rows)
            ids.update(zip(pending, new))
            ctx.touched.update(new)
        self.counts["concepts_created"] += len(pending)
        self.counts["concepts_updated"] += updated

    # --- links --------------------------------------------------------------------------
    def link_batch(self, ctx: ExecContext, chunk: list) -> None:
        txn, schema, now = ctx.txn, Schema(ctx.txn), ctx.now
        try:
            pnames = {item["predicate"] for item in chunk}
        except (TypeError, KeyError):
            i = next(i for i, x in enumerate(chunk)
                     if type(x) is not dict or "predicate" not in x)
            raise _bad_item("link", i, chunk[i]) from None
        pids = {}
        for p in pnames:
            if type(p) is not str:
                raise KipError(ErrorCode.KIP_1001, f"bulk import: a predicate must be a "
                               f"string, got {p!r}")
            pids[p] = pid = schema.predicate(p)
            if pid not in self.fresh_pred:
                self.fresh_pred[pid] = txn.count_predicate(pid) == 0
        engine = {"_version": 1, "_created_at": now, "_updated_at": now}
        if self._links_fast(ctx, chunk, pids, engine):
            return
        ids, start_max, linked, fresh = self.ids, self.start_max, self.linked, self.fresh_pred
        pending: dict[tuple[int, int, int], list] = {}   # new (s, p, o) -> [a, m]
        updated = 0
        endpoint, get_id, link_id = self._endpoint, ids.get, txn.link_id
        for i, item in enumerate(chunk):
            try:
                su, ob = item["subject"], item["object"]
                s = get_id((su["type"], su["name"])) or endpoint(schema, su)
                o = get_id((ob["type"], ob["name"])) or endpoint(schema, ob)
                p = pids[item["predicate"]]
                attrs = item.get("attributes")
                if attrs is not None:
                    attrs = _check_map(attrs, "attributes")
                meta = _check_map(item.get("metadata"), "metadata")
            except (TypeError, KeyError, AttributeError):
                raise _bad_item("link", i, item) from None
            key = (s, p, o)
            row = pending.get(key)
            if row is not None:
                if attrs:
                    row[0] = {**row[0], **attrs} if row[0] else attrs
                row[1] = writes.bump({**row[1], **meta}, now)
                continue
            # A link with an end this import created, or with a predicate that had no link
            # when the import began, can exist only if an earlier batch of the import wrote
            # it — and then its subject is in `linked`.
            if (s > start_max or o > start_max or fresh[p]) and s not in linked:
                n = None
            else:
                n = link_id(s, p, o)
            if n is None:
                pending[key] = [attrs, {**meta, **engine}]
                continue
            if not self.privileged:
                protect.check_write(ctx, txn.head(n), attrs)
            writes.update(ctx, n, attrs, meta)
            updated += 1
        if pending:
            new = txn.reserve_ids(len(pending))
            # Every row was checked above (in the store, or known to be new): no probe.
            txn.create_links([(n, s, p, o, a, m) for n, ((s, p, o), (a, m))
                              in zip(new, pending.items())], known_new=True)
            linked.update(s for s, _, _ in pending)
            ctx.touched.update(new)
        self.counts["propositions_created"] += len(pending)
        self.counts["propositions_updated"] += updated

    # --- fast paths: a batch of only new, distinct, well-formed items -----------------------
    # The common case of a load (fresh types and predicates, no repeats) handled with
    # column-wise C-level loops (map/zip over the batch) instead of one bytecode loop per
    # item. Anything else — a repeat, an existing element, a missing link end, a malformed or
    # reserved map — returns False and the item-by-item path above handles the whole batch.
    def _concepts_fast(self, ctx: ExecContext, chunk: list, type_names: set, tids: dict,
                       engine: dict) -> bool:
        try:
            types = list(map(_TYPE, chunk))
            names = list(map(_NAME, chunk))
            attrs = list(map(_ATTRS, chunk))
            metas = list(map(_META, chunk))
        except (TypeError, KeyError, AttributeError):
            return False
        keys = list(zip(types, names))
        if (set(map(type, names)) != {str} or len(set(keys)) != len(keys)
                or not self.ids.keys().isdisjoint(keys) or not _plain_maps(attrs, metas)):
            return False
        txn = ctx.txn
        old = {t for t in type_names if not self.fresh[t]}
        if old:     # types that had instances before the import: probe those items only
            concept_id = txn.concept_id
            if any(concept_id(tids[t], name) is not None for t, name in keys if t in old):
                return False
        new = txn.reserve_ids(len(chunk))
        txn.create_concepts(zip(new, map(tids.__getitem__, types), names, attrs,
                                [{**(m or _EMPTY), **engine} for m in metas]))
        self.ids.update(zip(keys, new))
        ctx.touched.update(new)
        self.counts["concepts_created"] += len(chunk)
        return True

    def _links_fast(self, ctx: ExecContext, chunk: list, pids: dict, engine: dict) -> bool:
        get = self.ids.get
        try:
            subjects = list(map(_SUBJECT, chunk))
            objects = list(map(_OBJECT, chunk))
            ss = list(map(get, zip(map(_TYPE, subjects), map(_NAME, subjects))))
            os_ = list(map(get, zip(map(_TYPE, objects), map(_NAME, objects))))
            ps = list(map(pids.__getitem__, map(_PREDICATE, chunk)))
            attrs = list(map(_ATTRS, chunk))
            metas = list(map(_META, chunk))
        except (TypeError, KeyError, AttributeError):
            return False
        if None in ss or None in os_:        # an end this import has not met: resolve it
            return False
        keys = list(zip(ss, ps, os_))
        if len(set(keys)) != len(keys) or not _plain_maps(attrs, metas):
            return False
        txn = ctx.txn
        # Which links could exist already (see the item-by-item path): probe only those.
        fresh, start = self.fresh_pred, self.start_max
        seen = self.linked.intersection(ss)
        if seen or not all(fresh[p] for p in set(ps)):
            link_id = txn.link_id
            if any(link_id(s, p, o) is not None for s, p, o in keys
                   if s in seen or not (s > start or o > start or fresh[p])):
                return False
        new = txn.reserve_ids(len(chunk))
        txn.create_links(zip(new, ss, ps, os_, attrs,
                             [{**(m or _EMPTY), **engine} for m in metas]), known_new=True)
        self.linked.update(ss)
        ctx.touched.update(new)
        self.counts["propositions_created"] += len(chunk)
        return True

    def _endpoint(self, schema: Schema, ref: dict) -> int:
        """A link end not created by this import: it must already exist."""
        t, name = ref["type"], ref["name"]
        if type(t) is not str or type(name) is not str:
            raise TypeError
        sid = schema.existing_type(t)
        n = None if sid is None else schema.txn.concept_id(sid, name)
        if n is not None:
            self.ids[(t, name)] = n
        else:
            raise KipError(ErrorCode.KIP_3002,
                           f"bulk import: the link end {{type: {t!r}, name: {name!r}}} does "
                           f"not exist", "Load (or create) the concepts before the links "
                           "that connect them.")
        return n
