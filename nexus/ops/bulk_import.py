"""Bulk import: large sets of concepts and links, without a KIP parse per item.

Owns `bulk_import(nexus, concepts, links, batch_size=..., chunk_size=...)`, the loader for
data already in the shape of the `peers` JSONL files: a concept is `{type, name,
attributes?, metadata?}`, a link `{subject: {type, name}, predicate, object: {type, name},
attributes?, metadata?}`. Both may be any iterables (generators streaming a file are fine).

The semantics are UPSERT's, item by item, as if each were a one-block UPSERT applied in
order: define-before-use (`KIP_2001`, checked once per chunk for the chunk's distinct names),
`_`-prefixed keys refused (`KIP_2002`), `{type, name}` match-or-create, an existing element
(or one repeated in the input) shallow-merged with `_version` bumped, link ends that must
exist (`KIP_3002`), one link per (s, p, o), engine metadata, protected targets (`KIP_3004`).
Each batch of `batch_size` items is one write transaction: a failing batch leaves nothing of
itself, the batches before it stay committed.

With SEARCH attached, the lexical postings are written in the batches' transactions and the
vectors of everything loaded are built before `bulk_import` returns (`fill` of each vector
index: large embedding batches, multithreaded usearch inserts), not caught up in the
background afterwards; a failed import builds none (its committed batches' vectors are left
to the background indexer).

Memory: a transaction consumes its items `chunk_size` at a time and keeps nothing of an item
once its chunk is written (the SEARCH index is fed chunk by chunk too), so a big transaction
does not hold its whole input; what grows with the transaction is ~60 bytes per link (the
columns of the link indexes, inserted sorted at commit) and the name -> id map of the
concepts the import created.

Why it is fast: new elements go to the store's column methods (`create_concept_columns` /
`create_link_columns`: sorted, appended index writes, maps encoded a column at a time, the
engine metadata spliced in once) with consecutive ids; a chunk of only new, distinct,
well-formed items (the usual load) is checked and shaped column-wise in C-level loops
(`map`/`zip`), falling back to the item-by-item path for anything else; and existence checks
are skipped where they cannot hit — a concept whose type had no instance when the import
first met it, or a link with an end created by this import or a predicate that had no link,
can only collide with what this import itself wrote, which is tracked in memory. If another
writer commits between two batches (seen as a change of the counter or the element counts),
those shortcuts are dropped and everything is probed again.

Why one large transaction by default: a write transaction that inserts links all over the
index key space copies (and so frees) most index pages; LMDB carries the list of freed pages
through every later commit until they are reused, so many medium transactions leave single
durable commits slower afterwards (measured: W2 median 4.2 ms after a load in batches of
100k, 1.1 ms after one big transaction; see bench/RESULTS.md, and `kip compact`).
"""
from __future__ import annotations

import gc
from contextlib import nullcontext
from itertools import islice, repeat
from operator import itemgetter, methodcaller
from typing import Any, Callable, Iterable, Iterator, KeysView

from ..engine import Engine
from ..errors import ErrorCode, KipError
from ..exec import protect, writes
from ..exec.context import WriteContext
from ..exec.schema import CONCEPT_TYPE, PROPOSITION_TYPE, Schema, check_definition_name
from ..search.lexical_cols import NewConcepts, NewLinks
from ..store.bulk import gc_paused, trim_heap

DEFAULT_BATCH = 1_000_000      # items per write transaction (see the module doc)
DEFAULT_CHUNK = 50_000         # items in memory at once


def bulk_import(engine: Engine, concepts: Iterable[dict] = (), links: Iterable[dict] = (), *,
                batch_size: int = DEFAULT_BATCH, chunk_size: int = DEFAULT_CHUNK,
                privileged: bool = False,
                progress: Callable[[str, int], None] | None = None) -> dict[str, int]:
    """Load `concepts`, then `links`; returns counts of created / updated elements.

    `progress(kind, done)` is called after each committed batch (`kind` is "concepts" or
    "links", `done` the items of that kind loaded so far).
    """
    if batch_size < 1 or chunk_size < 1:
        raise KipError(ErrorCode.KIP_1001, "batch_size and chunk_size must be at least 1")
    chunk_size = min(chunk_size, batch_size)
    state = _Import(engine, privileged)
    # The vector indexer waits for the end of the import (it would compete with the load
    # for the GIL; see nexus.search.vectors.VectorIndex.pause); when the import succeeds
    # the search service then builds its vectors in this thread, in large batches, so they
    # are complete when it returns (SearchService.bulk_loading).
    search = engine.search
    with search.bulk_loading() if search is not None else nullcontext():
        for kind, items, fn in (("concepts", concepts, state.concept_batch),
                                ("links", links, state.link_batch)):
            it = iter(items)
            done = 0
            while True:
                first = list(islice(it, chunk_size))
                if not first:
                    break
                done += state.run(fn, first, it, batch_size, chunk_size)
                if progress is not None:
                    progress(kind, done)
    counts = dict(state.counts)
    del state, fn               # its name -> id map of everything created, freed now ...
    drop_caches = getattr(engine.store, "drop_caches", None)
    if drop_caches is not None:     # ... the heads its commits cached (stores that cache)
        drop_caches()
    # ... the cyclic garbage of its batches (the collector was paused through them:
    # `gc_paused`), whose small objects keep Python's arenas from being freed — N=10k: 12
    # more arenas (MB) given back — ...
    gc.collect()
    trim_heap()                 # ... and the pages the load's buffers held given back
    return counts


def _bad_item(kind: str, index: int, item: Any) -> KipError:
    shape = ("{type, name, attributes?, metadata?}" if kind == "concept" else
             "{subject: {type, name}, predicate, object: {type, name}, attributes?, "
             "metadata?}")
    return KipError(ErrorCode.KIP_1001, f"bulk import: {kind} #{index} is not {shape}: "
                    f"{str(item)[:200]}", f"Each {kind} must be an object {shape}.")


_RESERVED = methodcaller("startswith", "_")
_EMPTY: dict = {}
_META_TYPES = frozenset((CONCEPT_TYPE, PROPOSITION_TYPE))
_TYPE, _NAME, _PREDICATE = itemgetter("type"), itemgetter("name"), itemgetter("predicate")
_SUBJECT, _OBJECT = itemgetter("subject"), itemgetter("object")
# dict.get mapped with repeat(key): no bound method per item, as methodcaller makes (a
# non-dict item raises TypeError, which sends the chunk to the item-by-item path)
_ATTRS, _META = repeat("attributes"), repeat("metadata")
_MAP_TYPES = {dict, type(None)}
_SLICE = 2048       # items per slice of the fast paths' column passes (see _links_fast)


def _plain_maps(*columns: list) -> bool:
    """Whether every value is a dict (or None) without a reserved key — checked column-wise
    in C loops; on False the item-by-item path finds (and reports) the offender."""
    for column in columns:
        if not set(map(type, column)) <= _MAP_TYPES:
            return False
        try:
            if any(map(_RESERVED, set().union(*filter(None, column)))):    # distinct keys
                return False
        except (AttributeError, TypeError):         # a key that is not a string
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


class _Ids(dict):
    """type name -> {name: id} of the concepts the import created or met; a type never
    seen reads as an empty map (never stored: use setdefault to add)."""

    def __missing__(self, key: Any) -> dict:
        return _NO_IDS


_NO_IDS: dict = {}       # shared and never written to


class _Import:
    """State kept across the batches of one import (what it created, what it may skip)."""

    def __init__(self, engine: Engine, privileged: bool) -> None:
        self.engine = engine
        self.privileged = privileged
        self.start_max: int | None = None       # max id before the import's first write
        # type -> name -> id of concepts this import created or found: no probe next time.
        self.ids = _Ids()
        self.fresh: dict[str, bool] = {}        # type name -> had no instance at first sight
        self.fresh_pred: dict[int, bool] = {}   # predicate id -> had no link at first sight
        self.linked: set[int] = set()           # subjects given links by earlier chunks
        self.seen: tuple | None = None          # store state when our last batch committed
        self.counts = {"concepts_created": 0, "concepts_updated": 0,
                       "propositions_created": 0, "propositions_updated": 0, "batches": 0}

    def run(self, fn: Callable[[WriteContext, list, int], None], first: list,
            rest: Iterator, batch_size: int, chunk_size: int) -> int:
        """One batch = one write transaction over `first` and then up to `batch_size` items
        of `rest`, a chunk at a time; returns the number of items consumed."""
        done = 0
        # A batch allocates hundreds of thousands of dicts and tuples, none in a cycle:
        # letting the collector run meanwhile only rescans them again and again.
        with gc_paused(), self.engine.write_session(privileged=self.privileged) as session:
            ctx, txn = session.ctx, session.txn
            self._sync(txn)
            chunk = first
            while chunk:
                fn(ctx, chunk, done)
                done += len(chunk)
                del chunk
                session.stage()             # index this chunk's elements for SEARCH now
                if done >= batch_size:
                    break
                chunk = list(islice(rest, min(chunk_size, batch_size - done)))
            self.seen = self._state(txn)
        self.counts["batches"] += 1
        return done

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
    def concept_batch(self, ctx: WriteContext, chunk: list, base: int = 0) -> None:
        txn, schema, now = ctx.txn, Schema(ctx.txn), ctx.now
        try:
            # first-appearance order, not a set's: types are interned in this order, and
            # symbol ids must not depend on the process's hash seed (PYTHONHASHSEED)
            type_names = dict.fromkeys(map(_TYPE, chunk)).keys()
        except (TypeError, KeyError):
            i = next(i for i, x in enumerate(chunk) if type(x) is not dict or "type" not in x)
            raise _bad_item("concept", base + i, chunk[i]) from None
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
        pending: dict[tuple[str, str], list] = {}   # new in this chunk: [type, name, a, m]
        updated = 0
        for i, item in enumerate(chunk):
            try:
                t, name = item["type"], item["name"]
                attrs = _check_map(item.get("attributes"), "attributes")
                meta = _check_map(item.get("metadata"), "metadata")
            except (TypeError, KeyError, AttributeError):
                raise _bad_item("concept", base + i, item) from None
            if type(name) is not str:
                raise _bad_item("concept", base + i, item)
            key = (t, name)
            row = pending.get(key)
            if row is not None:             # repeated in this chunk: merge, one more write
                row[2] = {**row[2], **attrs}
                row[3] = writes.bump({**row[3], **meta}, now)
                continue
            n = ids[t].get(name)
            if n is None and not fresh[t]:
                n = txn.concept_id(tids[t], name)
            if n is None:
                if not name.strip() or t in _META_TYPES:
                    check_definition_name(t, name)
                pending[key] = [t, name, attrs, {**meta, **engine}]
                continue
            if not self.privileged:
                protect.check_write(ctx, txn.head(n), attrs)
            writes.update(ctx, n, attrs, meta)
            updated += 1
        if pending:
            start = txn.max_id() + 1
            new = range(start, start + len(pending))
            rows = list(pending.values())
            txn.create_concept_columns(new, [tids[r[0]] for r in rows], [r[1] for r in rows],
                                       [r[2] for r in rows], [r[3] for r in rows])
            for (t, name), n in zip(pending, new):
                ids.setdefault(t, {})[name] = n
            ctx.touched.update(new)
        self.counts["concepts_created"] += len(pending)
        self.counts["concepts_updated"] += updated

    # --- links --------------------------------------------------------------------------
    def link_batch(self, ctx: WriteContext, chunk: list, base: int = 0) -> None:
        txn, schema, now = ctx.txn, Schema(ctx.txn), ctx.now
        columns = self._link_columns(chunk)
        try:
            pnames = (columns[3].keys() if columns is not None else             # as
                      dict.fromkeys(map(_PREDICATE, chunk)).keys())         # type_names
        except (TypeError, KeyError):           # (or a predicate that cannot be hashed)
            i = next(i for i, x in enumerate(chunk) if type(x) is not dict
                     or type(x.get("predicate")) is not str)
            raise _bad_item("link", base + i, chunk[i]) from None
        pids = {}
        for p in pnames:
            if type(p) is not str:
                raise KipError(ErrorCode.KIP_1001, f"bulk import: a predicate must be a "
                               f"string, got {p!r}")
            pids[p] = pid = schema.predicate(p)
            if pid not in self.fresh_pred:
                self.fresh_pred[pid] = txn.count_predicate(pid) == 0
        engine = {"_version": 1, "_created_at": now, "_updated_at": now}
        if columns is not None and self._links_fast(ctx, columns, pids, engine):
            return
        ids, start_max, linked, fresh = self.ids, self.start_max, self.linked, self.fresh_pred
        assert start_max is not None        # set by _sync when the batch began
        pending: dict[tuple[int, int, int], list] = {}   # new (s, p, o) -> [a, m]
        updated = 0
        endpoint, link_id = self._endpoint, txn.link_id
        for i, item in enumerate(chunk):
            try:
                su, ob = item["subject"], item["object"]
                s = ids[su["type"]].get(su["name"]) or endpoint(schema, su)
                o = ids[ob["type"]].get(ob["name"]) or endpoint(schema, ob)
                p = pids[item["predicate"]]
                attrs = item.get("attributes")
                if attrs is not None:
                    attrs = _check_map(attrs, "attributes")
                meta = _check_map(item.get("metadata"), "metadata")
            except (TypeError, KeyError, AttributeError):
                raise _bad_item("link", base + i, item) from None
            key = (s, p, o)
            row = pending.get(key)
            if row is not None:
                if attrs:
                    row[0] = {**row[0], **attrs} if row[0] else attrs
                row[1] = writes.bump({**row[1], **meta}, now)
                continue
            # A link with an end this import created, or with a predicate that had no link
            # when the import began, can exist only if an earlier chunk of the import wrote
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
            start = txn.max_id() + 1
            new = range(start, start + len(pending))
            spo, rows = list(pending), list(pending.values())
            # Every row was checked above (in the store, or known to be new): no probe.
            txn.create_link_columns(new, [k[0] for k in spo], [k[1] for k in spo],
                                    [k[2] for k in spo], [r[0] for r in rows],
                                    [r[1] for r in rows], known_new=True)
            linked.update(k[0] for k in spo)
            ctx.touched.update(new)
        self.counts["propositions_created"] += len(pending)
        self.counts["propositions_updated"] += updated

    # --- fast paths: a chunk of only new, distinct, well-formed items -----------------------
    # The common case of a load (fresh types and predicates, no repeats) handled with
    # column-wise C-level loops (map/zip over the chunk) instead of one bytecode loop per
    # item. Anything else — a repeat, an existing element, a missing link end, a malformed or
    # reserved map — returns False and the item-by-item path above handles the whole chunk.
    def _concepts_fast(self, ctx: WriteContext, chunk: list, type_names: KeysView[str],
                       tids: dict,
                       engine: dict) -> bool:
        types: list[Any] = []
        names: list[Any] = []
        attrs: list[Any] = []
        metas: list[Any] = []
        try:
            for i in range(0, len(chunk), _SLICE):      # a slice at a time: see _links_fast
                part = chunk[i:i + _SLICE]
                types += map(_TYPE, part)
                nm = list(map(_NAME, part))
                a = list(map(dict.get, part, _ATTRS))
                m = list(map(dict.get, part, _META))
                if set(map(type, nm)) != {str} or not _plain_maps(a, m) or \
                        not all(map(str.strip, nm)):    # (blank: check_definition_name's)
                    return False
                names += nm
                attrs += a
                metas += m
        except (TypeError, KeyError, AttributeError):
            return False
        if not type_names.isdisjoint(_META_TYPES):
            return False            # names the slow path checks (check_definition_name)
        txn = ctx.txn
        single = len(type_names) == 1
        by_type = {t: names for t in type_names} if single else {
            t: [n for tt, n in zip(types, names) if tt == t] for t in type_names}
        for t, tnames in by_type.items():
            if len(set(tnames)) != len(tnames):            # a repeat: merge item by item
                return False
            known = self.ids[t]
            if known and not known.keys().isdisjoint(tnames):
                return False
            if not self.fresh[t]:      # a type with instances before the import: probe
                tid = tids[t]       # (one batched read: a statement on PostgreSQL)
                if any(n is not None for n in txn.concept_ids([(tid, name)
                                                                for name in tnames])):
                    return False
        start = txn.max_id() + 1
        new = range(start, start + len(chunk))
        type_ids = [tids[types[0]]] * len(chunk) if single else list(map(tids.__getitem__,
                                                                           types))
        txn.create_concept_columns(new, type_ids, names, attrs, metas, extra_metadata=engine)
        # (the search index derives their documents from these columns: none read back)
        ctx.new_docs.append(NewConcepts(new, type_ids, {tids[t]: t for t in type_names},
                                        names, attrs))
        ids = self.ids
        if single:
            ids.setdefault(types[0], {}).update(zip(names, new))
        else:
            for t in type_names:
                ids.setdefault(t, {})
            for t, name, n in zip(types, names, new):
                ids[t][name] = n
        ctx.touched.update(new)
        self.counts["concepts_created"] += len(chunk)
        return True

    def _link_columns(self, chunk: list) -> tuple[list, list, list, dict, list, list, list,
                                                  list] | None:
        """The columns of a chunk of links whose ends this import has all met and whose maps
        are plain (else None): subject ids, object ids, predicate codes (an index into the
        predicate names, kept in first-appearance order), the names, attributes, metadata,
        and the subjects' and objects' names.
        The passes run a slice at a time: each pass reads every item's dicts again, and a
        slice's dicts stay in the CPU's caches between its passes where a whole chunk's
        (tens of MB) do not (N=100k: ~25% of these passes' time)."""
        by_type = self.ids.__getitem__
        get = dict.get
        ss: list[Any] = []          # ids, or None for an end this import has not met
        os_: list[Any] = []
        codes: list[int] = []
        pindex: dict[Any, int] = {}     # predicate name -> its code, in order of appearance
        attrs: list[Any] = []
        metas: list[Any] = []
        sn: list[Any] = []
        on: list[Any] = []
        try:
            for i in range(0, len(chunk), _SLICE):
                part = chunk[i:i + _SLICE]
                subjects = list(map(_SUBJECT, part))
                objects = list(map(_OBJECT, part))
                sn1, on1 = list(map(_NAME, subjects)), list(map(_NAME, objects))
                ss += map(get, map(by_type, map(_TYPE, subjects)), sn1)
                os_ += map(get, map(by_type, map(_TYPE, objects)), on1)
                sn += sn1
                on += on1
                pn = list(map(_PREDICATE, part))
                for p in dict.fromkeys(pn):
                    if p not in pindex:
                        pindex[p] = len(pindex)
                codes += map(pindex.__getitem__, pn)
                a = list(map(dict.get, part, _ATTRS))
                m = list(map(dict.get, part, _META))
                if not _plain_maps(a, m):
                    return None
                attrs += a
                metas += m
        except (TypeError, KeyError, AttributeError):
            return None
        if None in ss or None in os_:        # an end this import has not met: resolve it
            return None
        return ss, os_, codes, pindex, attrs, metas, sn, on

    def _links_fast(self, ctx: WriteContext, columns: tuple[list, list, list, dict, list, list,
                                                            list, list],
                    pids: dict, engine: dict) -> bool:
        ss, os_, codes, pindex, attrs, metas, sn, on = columns
        ps = list(map([pids[p] for p in pindex].__getitem__, codes))
        txn = ctx.txn
        # Which links could exist already (see the item-by-item path): probe only those.
        fresh, start_max = self.fresh_pred, self.start_max
        assert start_max is not None
        seen = self.linked.intersection(ss)
        if seen or not all(fresh[p] for p in set(ps)):
            probe = [(s, p, o) for s, p, o in zip(ss, ps, os_)
                     if s in seen or not (s > start_max or o > start_max or fresh[p])]
            # (one batched read: a statement per chunk on PostgreSQL, a loop elsewhere)
            if probe and any(n is not None for n in txn.link_ids(probe)):
                return False
        start = txn.max_id() + 1
        new = range(start, start + len(ss))
        try:
            txn.create_link_columns(new, ss, ps, os_, attrs if any(attrs) else None, metas,
                                    known_new=True, extra_metadata=engine)
        except KipError as err:
            if err.code is ErrorCode.KIP_3003:      # a repeat in the chunk (nothing written)
                return False
            raise
        self.linked.update(ss)
        ctx.touched.update(new)
        # (their ends are concepts: a link's document shows an end's name)
        ctx.new_docs.append(NewLinks(new, ss, ps, os_, {pids[p]: p for p in pindex}, sn, on,
                                     attrs if any(attrs) else None))
        self.counts["propositions_created"] += len(ss)
        return True

    def _endpoint(self, schema: Schema, ref: dict) -> int:
        """A link end not created by this import: it must already exist."""
        t, name = ref["type"], ref["name"]
        if type(t) is not str or type(name) is not str:
            raise TypeError
        sid = schema.existing_type(t)
        n = None if sid is None else schema.txn.concept_id(sid, name)
        if n is not None:
            self.ids.setdefault(t, {})[name] = n
        else:
            raise KipError(ErrorCode.KIP_3002,
                           f"bulk import: the link end {{type: {t!r}, name: {name!r}}} does "
                           f"not exist", "Load (or create) the concepts before the links "
                           "that connect them.")
        return n
