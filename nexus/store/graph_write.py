"""The write transaction of the graph store: the single writer's operations.

Owns what a write does to the tables: interning, id allocation, creating and deleting
elements with all their index entries, replacing attribute/metadata maps, and the bulk
path (entries built by `bulk`, inserted here table by table). Counters and statistics are
accumulated in Python and written once, just before commit; the lifecycle around it is
`base`'s.
"""
from __future__ import annotations

import struct
from itertools import repeat
from operator import itemgetter
from types import TracebackType
from typing import Callable, Iterable, Iterator, Literal, Protocol, Sequence

import numpy as np

from nexus.errors import ErrorCode, KipError
from nexus.store import bulk, codec
from nexus.store.codec import (MAX_ELEMENT_ID, OPS, PSO, SPO, SPO3, TRIPLE, decode_count,
                               pack_n, pack_sid)
from nexus.store.graph import Aux, GraphReadTxn, TxnHost, internal, used_after_end
from nexus.store.kv import DeleteFn, KvWrite, PutFn
from nexus.store.model import ConceptHead, Head, JsonMap, LinkHead, MapColumn, link_heads
from nexus.store.tables import Db
from nexus.timestamps import stamp_ms, stamp_text


class WriteHost(TxnHost[Db], Protocol[Db]):
    """What a write transaction needs from its store besides `TxnHost` (`StoreBase`
    provides it; package-internal): ending the transaction, and aborting its key-value
    transaction at once when `abort()` is called."""

    def finish_write(self, txn: GraphWriteTxn[Db], exc: BaseException | None) -> None:
        """Commit `txn` (or abort it: after an exception or `abort()`) and release the
        writer."""
        ...

    def abort_kv(self, kv: KvWrite[Db]) -> None: ...


# Links created by one create_link_columns call up to which plain puts beat the numpy
# column path (`_create_few_links`).
FEW_LINKS = 16
_U32 = 1 << 32

# Heads a write transaction decodes are kept for it (and merged into the store's cache at
# commit) up to this many: a bulk load re-reading its own elements (search indexing) must
# not hold a head per element.
NEW_HEADS_CAP = 50_000

# A repoint batch with at least this many moves onto one new end reads that end's links
# once to find the triples already taken, instead of probing the index per move.
HOLDER_SCAN = 8


class GraphWriteTxn(GraphReadTxn[Db]):
    """WriteTxn: the single writer. Counters and statistics are accumulated in Python and
    written once, just before commit (`flush`).

    `aborted`, `flush`, `publish`, `invalidate` and `raise_counters` are public for this
    package only: the lifecycle (`base`) and the integrity check use them."""

    __slots__ = ("_put", "_del", "_max_id", "_max_id0", "_max_sym", "_max_sym0", "_dstats",
                 "_new_heads", "_new_sids", "_new_stexts", "_deleted", "_aborted", "_links_todo",
                 "_repointed")

    kv: KvWrite[Db]
    _host: WriteHost[Db]
    _put: PutFn[Db]
    _del: DeleteFn[Db]

    def __init__(self, store: WriteHost[Db], kv: KvWrite[Db]) -> None:
        super().__init__(store, kv)
        self._put = kv.put
        self._del = kv.delete
        meta = self.tables.meta
        self._max_id = self._max_id0 = decode_count(kv.get(codec.META_MAX_ID, None, meta))
        self._max_sym = self._max_sym0 = decode_count(kv.get(codec.META_MAX_SYM, None, meta))
        self._dstats: dict[bytes, int] = {}
        self._new_heads: dict[int, Head] = {}
        self._new_sids: dict[str, int] = {}
        self._new_stexts: dict[int, str] = {}
        self._deleted: list[int] = []
        self._repointed: list[int] = []
        self._aborted = False
        # bulk-created links whose ops/pso entries wait: (s, p, o, n) column arrays
        self._links_todo: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def __enter__(self) -> GraphWriteTxn[Db]:
        return self

    def __exit__(self, et: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        self._host.finish_write(self, exc)
        return False

    def abort(self) -> None:
        if not self._aborted:
            self._aborted = True
            kv = self.kv
            self.invalidate()
            self._host.abort_kv(kv)

    @property
    def aborted(self) -> bool:
        """Whether `abort()` was called (the lifecycle then aborts instead of committing)."""
        return self._aborted

    def invalidate(self) -> None:
        """Make any further use of this transaction a KipError (on both backends alike)."""
        super().invalidate()
        self._put = self._del = used_after_end

    def flush(self) -> None:
        """Write the pending bulk index entries, the counters and statistic deltas into the
        transaction (the lifecycle calls it just before commit)."""
        self._flush_links()
        put, meta = self._put, self.tables.meta
        if self._max_id != self._max_id0:
            put(codec.META_MAX_ID, pack_n(self._max_id), db=meta)
        if self._max_sym != self._max_sym0:
            put(codec.META_MAX_SYM, pack_sid(self._max_sym), db=meta)
        stats = self.tables.stats
        for key, delta in self._dstats.items():
            if delta:
                total = decode_count(self._get(key, None, stats)) + delta
                if total:
                    put(key, pack_n(total), db=stats)
                else:
                    self._del(key, db=stats)

    def publish(self) -> None:
        """Merge what this transaction learned into the store's shared caches (the
        lifecycle calls it once the commit succeeded; an aborted write leaves no trace)."""
        heads = self._heads
        for n in self._deleted:
            heads.pop(n, None)
        new = self._new_heads
        for n in self._repointed:       # older snapshots still see the old head: not cached
            heads.pop(n, None)
            new.pop(n, None)
        if new:
            cap = self._host.cache_cap
            if len(heads) + len(new) > cap:
                heads.clear()
            if len(new) <= cap:
                heads.update(new)
        self._sids.update(self._new_sids)
        self._stexts.update(self._new_stexts)

    def raise_counters(self, max_id: int, max_sym: int) -> None:
        """The id and symbol counters were written directly (by a repair) as at least these:
        keep this transaction's copies level, so that `flush` neither lowers nor rewrites
        them (counters only ever move up)."""
        self._max_id = self._max_id0 = max(self._max_id, max_id)
        self._max_sym = self._max_sym0 = max(self._max_sym, max_sym)

    # --- reads that must see this transaction's pending state ----------------------------
    def head(self, n: int) -> Head | None:
        # A head this transaction decoded or moved is current: `delete` drops it from
        # `_new_heads` and a move replaces it there (a MERGE asks for each moved link's
        # head several times: its pre-image, the move, the version log).
        h = self._new_heads.get(n)
        if h is not None:
            return h
        try:
            v = self._get(pack_n(n), None, self.tables.head)
        except struct.error:
            return None
        if v is None:
            return None
        h = self._heads.get(n)
        if h is None:
            h = self._new_heads.get(n)
            if h is None:
                h = codec.decode_head(n, v)
                if len(self._new_heads) < NEW_HEADS_CAP:    # a cache: bounded in a big write
                    self._new_heads[n] = h
        return h

    def symbol_id(self, text: str) -> int | None:
        sid = self._new_sids.get(text)
        return sid if sid is not None else super().symbol_id(text)

    def symbol_text(self, sid: int) -> str:
        text = self._new_stexts.get(sid)
        return text if text is not None else super().symbol_text(sid)

    def max_id(self) -> int:
        return self._max_id

    def first_new_id(self) -> int:
        """The lowest id this transaction may create: an id at or above it was not in use
        when the transaction began (ids are never reused: `max_id` only grows), so the
        search index has no entry of it (`nexus.search.lexical_cols`)."""
        return self._max_id0 + 1

    def commit_id(self) -> int:
        """The snapshot id readers will see once this transaction commits."""
        return self.kv.commit_id()

    # The ops and pso entries of bulk-created links are inserted just before commit; a read
    # of those indexes (or a delete, which removes their entries) inserts them first.
    def in_links(self, object: int, predicate_id: int | None = None
                 ) -> Iterator[tuple[int, int, int]]:
        self._flush_links()
        return super().in_links(object, predicate_id)

    def links_of_predicate(self, predicate_id: int) -> Iterator[tuple[int, int, int]]:
        self._flush_links()
        return super().links_of_predicate(predicate_id)

    def link_predicates(self) -> Iterator[int]:
        self._flush_links()
        return super().link_predicates()

    def _stat(self, key: bytes) -> int:
        return super()._stat(key) + self._dstats.get(key, 0)

    def aux(self, table: str) -> WriteAux[Db]:
        return WriteAux(self, self._aux_table(table))

    def aux_put_many(self, table: str, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        """Aux puts of many pairs in one sorted insert (see the protocol): one C call
        instead of a checked Python call per pair, appending when every key follows the
        table's last one."""
        db = self._aux_table(table)
        items = sorted(dict(pairs).items())
        if not items:
            return
        if not items[0][0] or max(map(len, map(itemgetter(0), items))) > codec.MAX_KEY:
            raise internal(f"aux key must be 1..{codec.MAX_KEY} bytes")
        if len(items) <= 4:             # a version log record's few keys: plain puts
            put = self._put
            for k, v in items:
                put(k, v, db=db)
            return
        last = self.kv.last_key(db)
        self.kv.putmulti(db, items, last is None or items[0][0] > last, True)

    # --- symbols and ids -----------------------------------------------------------------
    def intern(self, text: str) -> int:
        sid = self.symbol_id(text)
        if sid is None:
            utf8 = codec.encode_text(text)
            sid = self._max_sym + 1
            if not self._put(codec.text_key(utf8), pack_sid(sid), overwrite=False,
                             db=self.tables.symx):
                raise internal(f"symbol key collision for {text[:80]!r}")
            self._put(pack_sid(sid), utf8, db=self.tables.sym)
            self._max_sym = sid
            self._new_sids[text] = sid
            self._new_stexts[sid] = text
        return sid

    def new_id(self) -> int:
        if self._max_id >= MAX_ELEMENT_ID:      # the cap of the link keys' 4-byte ids
            raise codec.id_limit_error(self._max_id + 1)
        self._max_id += 1
        return self._max_id

    def reserve_ids(self, count: int) -> range:
        start = self._max_id + 1
        if self._max_id + count > MAX_ELEMENT_ID:
            raise codec.id_limit_error(self._max_id + count)
        self._max_id += count
        return range(start, self._max_id + 1)

    def _made(self, head: Head) -> None:
        """Keep the head of an element this transaction just created: the commit's hooks
        (search, version log, PRIMER) ask for it next, and would decode it again."""
        if len(self._new_heads) < NEW_HEADS_CAP:
            self._new_heads[head.n] = head

    def _bump(self, key: bytes, delta: int) -> None:
        d = self._dstats
        d[key] = d.get(key, 0) + delta

    def _check_id(self, n: int) -> bytes:
        if type(n) is not int or n <= 0:
            raise internal(f"element ids are positive integers, got {n!r}")
        if n > MAX_ELEMENT_ID:
            raise codec.id_limit_error(n)
        if n > self._max_id:            # an id nobody allocated: keep the counter ahead
            self._max_id = n
        return pack_n(n)

    # --- single-element writes -----------------------------------------------------------
    def create_concept(self, n: int, type_id: int, name: str,
                       attributes: JsonMap, metadata: JsonMap) -> None:
        a = codec.encode_map(attributes, "attributes")
        m = codec.encode_map(metadata, "metadata")
        utf8 = codec.encode_text(name)
        tkey = codec.text_key(utf8)
        tb = pack_sid(type_id)
        nk = self._check_id(n)
        put, d = self._put, self.tables
        if not put(tb + tkey, nk, overwrite=False, db=d.tn):
            raise KipError(ErrorCode.KIP_3003,
                           f"a concept {{type: {self.symbol_text(type_id)!r}, "
                           f"name: {name[:200]!r}}} already exists")
        if not put(nk, codec.concept_head_value(tb, utf8), overwrite=False, db=d.head):
            self._del(tb + tkey, db=d.tn)
            raise internal(f"element id {n} is already in use")
        put(tb + nk, b"", db=d.tid)
        put(tkey + b"\x00" + nk, b"", db=d.name)
        if a is not None:
            put(nk, a, db=d.attrs)
        if m is not None:
            put(nk, m, db=d.metas)
        self._bump(codec.ST_TYPE + tb, 1)
        self._bump(codec.ST_CONCEPTS, 1)
        self._made(ConceptHead(n, type_id, name))

    def create_link(self, n: int, subject: int, predicate_id: int, object: int,
                    attributes: JsonMap, metadata: JsonMap) -> None:
        a = codec.encode_map(attributes, "attributes")
        m = codec.encode_map(metadata, "metadata")
        nk = self._check_id(n)
        if self.link_id(subject, predicate_id, object) is not None:
            raise KipError(ErrorCode.KIP_3003,
                           f"a proposition ({subject}, {self.symbol_text(predicate_id)!r}, "
                           f"{object}) already exists")
        put, d = self._put, self.tables
        keys = _link_keys(subject, predicate_id, object, n)
        if not put(nk, codec.link_head_value(subject, predicate_id, object),
                   overwrite=False, db=d.head):
            raise internal(f"element id {n} is already in use")
        put(keys[0], b"", db=d.spo)
        put(keys[1], b"", db=d.ops)
        put(keys[2], b"", db=d.pso)
        if a is not None:
            put(nk, a, db=d.attrs)
        if m is not None:
            put(nk, m, db=d.metas)
        self._bump(codec.ST_PRED + pack_sid(predicate_id), 1)
        self._bump(codec.ST_LINKS, 1)
        self._made(LinkHead(n, subject, predicate_id, object))

    def set_attributes(self, n: int, attributes: JsonMap) -> None:
        self._set_map(n, codec.encode_map(attributes, "attributes"), self.tables.attrs)

    def set_metadata(self, n: int, metadata: JsonMap) -> None:
        self._set_map(n, codec.encode_map(metadata, "metadata"), self.tables.metas)

    def set_metadata_many(self, items: Sequence[tuple[int, JsonMap]]) -> None:
        """set_metadata over many elements (see the protocol): every id checked and every
        map encoded (column-wise, `codec.encode_maps`) before anything is written, then one
        sorted insert; a repeated id keeps its last map."""
        get, head, metas = self._get, self.tables.head, self.tables.metas
        known = self._new_heads         # current heads (see `head`): no existence read
        keys: list[bytes] = []
        for n, _ in items:
            try:
                nk = pack_n(n)
            except struct.error:
                nk = None
            if nk is None or (n not in known and get(nk, None, head) is None):
                raise KipError(ErrorCode.KIP_3002, f"element {n!r} does not exist")
            keys.append(nk)
        final = dict(zip(keys, codec.encode_maps([m for _, m in items], "metadata")))
        puts = sorted((k, v) for k, v in final.items() if v is not None)
        for k, v in final.items():
            if v is None:
                self._del(k, db=metas)
        if puts:
            self.kv.putmulti(metas, puts, False, True)

    def bump_versions(self, ids: Sequence[int], now: str) -> list[tuple[int, str] | None]:
        """See the protocol: each stored metadata value in the engine's fixed layout gets
        its header patched (`codec.bump_compact`: no decode, no re-encode of the rest),
        then one sorted insert."""
        now_ms = stamp_ms(now)
        if now_ms is None:
            return [None] * len(ids)
        get, metas, bump = self._get, self.tables.metas, codec.bump_compact
        answers: list[tuple[int, str] | None] = []
        puts: dict[bytes, bytes] = {}
        for n in ids:
            try:
                nk = pack_n(n)
            except struct.error:
                answers.append(None)
                continue
            done = None if nk in puts else bump(get(nk, None, metas), now_ms)
            if done is None:
                answers.append(None)
                continue
            puts[nk] = done[0]
            answers.append((done[1], stamp_text(done[2])))
        if puts:
            self.kv.putmulti(metas, sorted(puts.items()), False, True)
        return answers

    def _set_map(self, n: int, value: bytes | None, db: Db) -> None:
        try:
            nk = pack_n(n)
        except struct.error:
            nk = None
        if nk is None or self._get(nk, None, self.tables.head) is None:
            raise KipError(ErrorCode.KIP_3002, f"element {n!r} does not exist")
        if value is None:
            self._del(nk, db=db)
        else:
            self._put(nk, value, db=db)

    def delete(self, n: int) -> bool:
        """Returns False (and does nothing) when `n` does not exist."""
        self._flush_links()
        try:
            nk = pack_n(n)
        except struct.error:
            return False
        d, dele = self.tables, self._del
        v = self._get(nk, None, d.head)
        if v is None:
            return False
        h = codec.decode_head(n, v)
        if isinstance(h, ConceptHead):
            tb = pack_sid(h.type_id)
            tkey = codec.text_key(v[5:])
            dele(tb + tkey, db=d.tn)
            dele(tb + nk, db=d.tid)
            dele(tkey + b"\x00" + nk, db=d.name)
            self._bump(codec.ST_TYPE + tb, -1)
            self._bump(codec.ST_CONCEPTS, -1)
        else:
            s, p, o = h.subject, h.predicate_id, h.object
            dele(SPO.pack(s, p, o, n), db=d.spo)
            dele(OPS.pack(o, p, s, n), db=d.ops)
            dele(PSO.pack(p, s, o, n), db=d.pso)
            self._bump(codec.ST_PRED + pack_sid(p), -1)
            self._bump(codec.ST_LINKS, -1)
        dele(nk, db=d.head)
        dele(nk, db=d.attrs)
        dele(nk, db=d.metas)
        self._new_heads.pop(n, None)
        self._deleted.append(n)
        return True

    def repoint_link(self, n: int, subject: int, object: int) -> None:
        """Move the ends of link `n` (MERGE): same id, predicate, attributes and metadata;
        its index entries follow. A missing link is KIP_3002; a taken (s, p, o) KIP_3003."""
        self._flush_links()
        h = self.head(n)
        if not isinstance(h, LinkHead):
            raise KipError(ErrorCode.KIP_3002, f"proposition {n!r} does not exist")
        d, nk = self.tables, pack_n(n)
        s, p, o = h.subject, h.predicate_id, h.object
        if (s, o) == (subject, object):
            return
        if self.link_id(subject, p, object) is not None:
            raise KipError(ErrorCode.KIP_3003,
                           f"a proposition ({subject}, {self.symbol_text(p)!r}, {object}) "
                           f"already exists")
        keys = _link_keys(subject, p, object, n)     # (before anything is written)
        host = self._host
        host.moved_heads.add(n)         # first: from now on no reader caches its head
        if len(host.moved_heads) > host.cache_cap:
            host.moved_heads.clear()
            host.moved_heads.add(n)
            self._heads.clear()
        self._heads.pop(n, None)
        dele, put = self._del, self._put
        dele(SPO.pack(s, p, o, n), db=d.spo)
        dele(OPS.pack(o, p, s, n), db=d.ops)
        dele(PSO.pack(p, s, o, n), db=d.pso)
        put(nk, codec.link_head_value(subject, p, object), db=d.head)
        put(keys[0], b"", db=d.spo)
        put(keys[1], b"", db=d.ops)
        put(keys[2], b"", db=d.pso)
        self._new_heads[n] = LinkHead(n, subject, p, object)
        self._repointed.append(n)

    def repoint_links(self, moves: Sequence[tuple[int, int, int]],
                      heads: Sequence[LinkHead] | None = None) -> list[int | None]:
        """repoint_link for each move `(n, subject, object)`, in order, in one call (see the
        protocol): the heads are read (unless given) and the triples checked first, then
        each index's entries are deleted and inserted sorted, one table at a time. A move
        whose triple is taken is not made: its answer is the id of the link holding that
        triple."""
        self._flush_links()
        if heads is None or len(heads) != len(moves):
            heads = link_heads(self.head, (n for n, _, _ in moves))
        if len({n for n, _, _ in moves}) != len(moves):
            raise internal("repoint_links: a link id is repeated in the batch")
        answers: list[int | None] = []
        claimed: dict[tuple[int, int, int], int] = {}     # triple -> the link now holding it
        moved: set[int] = set()
        made: list[tuple[LinkHead, int, int]] = []
        holder_of = self._holders(moves, heads)
        for (n, subject, object), h in zip(moves, heads):
            if h.n != n:
                raise internal("repoint_links: the heads given are not the moves' links")
            p = h.predicate_id
            if (h.subject, h.object) == (subject, object):
                answers.append(None)
                continue
            triple = (subject, p, object)
            holder = claimed.get(triple)
            if holder is None:
                holder = holder_of(triple)                  # the index as the batch began
                if holder is not None and holder in moved:
                    holder = None                           # moved away earlier: free
            answers.append(holder)
            if holder is None:
                claimed[triple] = n
                moved.add(n)
                made.append((h, subject, object))
        if made:
            self._write_moves(made)
        return answers

    def _holders(self, moves: Sequence[tuple[int, int, int]], heads: Sequence[LinkHead]
                 ) -> Callable[[tuple[int, int, int]], int | None]:
        """`link_id` for the batch's new triples. A MERGE moves every link onto one node:
        that node's own links, read once (one index scan each way), answer for the triples
        with it as the new end — not a probe of the index per move."""
        subjects: dict[int, int] = {}
        objects: dict[int, int] = {}
        for (_, s, o), h in zip(moves, heads):
            if s != h.subject:
                subjects[s] = subjects.get(s, 0) + 1
            elif o != h.object:
                objects[o] = objects.get(o, 0) + 1
        known: dict[tuple[int, int, int], int] = {}
        by_subject = {s for s, count in subjects.items() if count >= HOLDER_SCAN}
        by_object = {o for o, count in objects.items() if count >= HOLDER_SCAN}
        for s in by_subject:
            known.update(((s, p, o), n) for p, o, n in self.out_links(s))
        for o in by_object:
            known.update(((s, p, o), n) for p, s, n in self.in_links(o))
        link_id = self.link_id

        def holder(triple: tuple[int, int, int]) -> int | None:
            if triple[0] in by_subject or triple[2] in by_object:
                return known.get(triple)
            return link_id(*triple)
        return holder

    def _write_moves(self, made: list[tuple[LinkHead, int, int]]) -> None:
        """The index writes of repoint_links: old keys deleted, new ones inserted, sorted."""
        host = self._host
        moved_heads = host.moved_heads
        ns = [h.n for h, _, _ in made]
        moved_heads.update(ns)          # first: no reader caches these heads
        if len(moved_heads) > host.cache_cap:
            moved_heads.clear()
            moved_heads.update(ns)
            self._heads.clear()
        d, kv = self.tables, self.kv
        # The keys built column-wise by each index's own Struct (a bound C method mapped
        # over the columns: no Python frame per key); each index's deletes (one batch,
        # sorted), then its inserts (one sorted putmulti).
        ps = [h.predicate_id for h, _, _ in made]
        s0 = [h.subject for h, _, _ in made]
        o0 = [h.object for h, _, _ in made]
        s1 = [s for _, s, _ in made]
        o1 = [o for _, _, o in made]
        for db, pack, old, new in (
                (d.spo, SPO.pack, (s0, ps, o0, ns), (s1, ps, o1, ns)),
                (d.ops, OPS.pack, (o0, ps, s0, ns), (o1, ps, s1, ns)),
                (d.pso, PSO.pack, (ps, s0, o0, ns), (ps, s1, o1, ns))):
            kv.delete_many(db, sorted(map(pack, *old)))
            kv.putmulti(db, zip(sorted(map(pack, *new)), repeat(b"")), False, True)
        heads = self._heads
        for n in ns:
            heads.pop(n, None)
        self._new_heads.update(zip(ns, map(LinkHead, ns, s1, ps, o1)))
        head_items = sorted(zip(map(pack_n, ns),
                                map(codec.link_head_value, s1, ps, o1)))
        kv.putmulti(d.head, head_items, False, True)
        self._repointed.extend(ns)

    # --- bulk writes (entries built by nexus.store.bulk) -----------------------------------
    def create_concepts(self, rows: Iterable[tuple[int, int, str, JsonMap | None,
                                                   JsonMap | None]]) -> int:
        """Bulk create_concept over rows `(n, type_id, name, attributes, metadata)` (the maps
        may be None); see the protocol. Returns the number created."""
        row_list = list(rows)
        if not row_list:
            return 0
        try:
            ns, types, names, attrs, metas = map(list, zip(*row_list))
        except ValueError:
            raise internal("bulk create_concepts: rows must be (n, type_id, name, attributes, "
                           "metadata)") from None
        return self.create_concept_columns(ns, types, names, attrs, metas)

    def create_concept_columns(self, ids: Sequence[int], type_ids: Sequence[int],
                               names: Sequence[str],
                               attributes: MapColumn | None = None,
                               metadata: MapColumn | None = None, *,
                               extra_metadata: JsonMap | None = None) -> int:
        """create_concepts over columns (see the protocol)."""
        with bulk.gc_paused():
            e = bulk.concept_entries(ids, type_ids, names, attributes, metadata,
                                     extra_metadata)
            if e is None:
                return 0
            d = self.tables
            self._load(d.head, e["head"], internal("bulk create: an element id is in use"))
            self._load(d.tn, e["tn"], KipError(
                ErrorCode.KIP_3003, "bulk create: a concept (type, name) is repeated in the "
                                    "batch or already exists"))
            self._load(d.tid, e["tid"], None)
            self._load(d.name, e["name"], None)
            self._load(d.attrs, e["attrs"], None)
            self._load(d.metas, e["metas"], None)
        self._max_id = max(self._max_id, e["max_id"])
        room = NEW_HEADS_CAP - len(self._new_heads)     # as create_concept does (_made)
        if room > 0:
            heads = self._new_heads
            for n, t, name in zip(ids[:room], type_ids[:room], names[:room]):
                heads[n] = ConceptHead(n, t, name)
        for type_id, k in e["per_type"].items():
            self._bump(codec.ST_TYPE + pack_sid(type_id), k)
        self._bump(codec.ST_CONCEPTS, e["count"])
        return e["count"]

    def create_links(self, rows: Iterable[tuple[int, int, int, int, JsonMap | None,
                                                JsonMap | None]],
                     known_new: bool = False) -> int:
        """Bulk create_link over rows `(n, subject, predicate_id, object, attributes,
        metadata)`; see the protocol. Returns the number created."""
        row_list = list(rows)
        if not row_list:
            return 0
        try:
            ns, ss, ps, os_, attrs, metas = map(list, zip(*row_list))
        except ValueError:
            raise internal("bulk create_links: rows must be (n, subject, predicate_id, object, "
                           "attributes, metadata)") from None
        return self.create_link_columns(ns, ss, ps, os_, attrs, metas, known_new=known_new)

    def create_link_columns(self, ids: Sequence[int], subjects: Sequence[int],
                            predicate_ids: Sequence[int], objects: Sequence[int],
                            attributes: MapColumn | None = None,
                            metadata: MapColumn | None = None, *, known_new: bool = False,
                            extra_metadata: JsonMap | None = None) -> int:
        """create_links over columns (see the protocol). The ops and pso entries are kept
        in memory and inserted, sorted, once for the whole transaction (`_flush_links`).
        A few links (an UPSERT's) take `_create_few_links` instead."""
        if len(ids) <= FEW_LINKS:
            made = self._create_few_links(ids, subjects, predicate_ids, objects, attributes,
                                          metadata, known_new, extra_metadata)
            if made is not None:
                return made
        with bulk.gc_paused():
            e = bulk.link_entries(ids, subjects, predicate_ids, objects, attributes, metadata,
                                  extra_metadata)
            if e is None:
                return 0
            d = self.tables
            taken = e["duplicate"]
            if taken is None and not known_new and self.kv.last_key(d.spo) is not None:
                taken = next((_spo3(k) for k in e["spo"][0] if self._spo_taken(k[:TRIPLE])), None)
            if taken is not None:
                s, p, o = taken
                raise KipError(ErrorCode.KIP_3003,
                               f"a proposition ({s}, {self.symbol_text(p)!r}, {o}) is repeated "
                               f"in the batch or already exists")
            self._load(d.head, e["head"], internal("bulk create: an element id is in use"))
            self._load(d.spo, e["spo"], None)
            self._load(d.attrs, e["attrs"], None)
            self._load(d.metas, e["metas"], None)
            self._links_todo.append((e["s"], e["p"], e["o"], e["n"]))
        self._max_id = max(self._max_id, e["max_id"])
        for p, k in e["per_pred"].items():
            self._bump(codec.ST_PRED + pack_sid(p), k)
        self._bump(codec.ST_LINKS, e["count"])
        return e["count"]

    def _create_few_links(self, ids: Sequence[int], subjects: Sequence[int],
                          predicate_ids: Sequence[int], objects: Sequence[int],
                          attributes: MapColumn | None, metadata: MapColumn | None,
                          known_new: bool, extra: JsonMap | None) -> int | None:
        """create_link_columns for a handful of links with plain Python keys and puts:
        numpy's set-up costs more than the whole write of so few (a W2 upsert's two links
        spent ~15% of its command there). The same entries, counters and errors; None —
        nothing done — for any batch that is not clean (an id, end or predicate that is
        not an int in range, a repeated id or (s, p, o), a taken (s, p, o)): the column
        path then raises its own error for it."""
        count = len(ids)
        rows = list(zip(ids, subjects, predicate_ids, objects))
        if not count or len(rows) != count or len(subjects) != count or \
                len(predicate_ids) != count or len(objects) != count:
            return None
        for n, s, p, o in rows:
            if type(n) is not int or type(s) is not int or type(p) is not int or \
                    type(o) is not int or not (0 < n < _U32 and 0 < s < _U32 and
                                               0 < p < _U32 and 0 < o < _U32):
                return None
        if len({r[0] for r in rows}) != count or len({r[1:] for r in rows}) != count:
            return None
        attrs = list(attributes) if attributes is not None else None
        metas = list(metadata) if metadata is not None else None
        if attrs is not None and len(attrs) != count or metas is not None and \
                len(metas) != count:
            return None
        order = sorted(range(count), key=lambda i: rows[i][0])
        if order != list(range(count)):         # the maps are encoded in id order
            rows = [rows[i] for i in order]
            attrs = [attrs[i] for i in order] if attrs is not None else None
            metas = [metas[i] for i in order] if metas is not None else None
        keys = [pack_n(r[0]) for r in rows]
        attr_entries = bulk.map_entries(keys, attrs, "attributes")
        meta_entries = bulk.map_entries(keys, metas, "metadata", extra)
        d = self.tables
        if not known_new and self.kv.last_key(d.spo) is not None and any(
                self._spo_taken(SPO3.pack(s, p, o)) for _, s, p, o in rows):
            return None
        put = self._put
        for k, (n, s, p, o) in zip(keys, rows):
            if not put(k, codec.link_head_value(s, p, o), overwrite=False, db=d.head):
                raise internal("bulk create: an element id is in use")
        fresh = True
        for n, s, p, o in rows:
            fresh &= put(SPO.pack(s, p, o, n), b"", overwrite=False, db=d.spo)
            fresh &= put(OPS.pack(o, p, s, n), b"", overwrite=False, db=d.ops)
            fresh &= put(PSO.pack(p, s, o, n), b"", overwrite=False, db=d.pso)
        for table, (map_keys, values) in ((d.attrs, attr_entries), (d.metas, meta_entries)):
            for k, v in zip(map_keys, values):
                fresh &= put(k, v, overwrite=False, db=table)
        if not fresh:
            raise internal("bulk create: duplicate index keys")
        self._max_id = max(self._max_id, rows[-1][0])
        for n, s, p, o in rows:
            self._bump(codec.ST_PRED + pack_sid(p), 1)
            self._made(LinkHead(n, s, p, o))
        self._bump(codec.ST_LINKS, count)
        return count

    def _flush_links(self) -> None:
        """Insert the ops and pso entries of the links bulk-created so far: one sort and
        one (mostly appending) insert per index for the whole transaction instead of one
        per batch of rows."""
        todo = self._links_todo
        if not todo:
            return
        self._links_todo = []
        with bulk.gc_paused():
            cols = [np.concatenate(c) if len(c) > 1 else c[0] for c in zip(*todo)]
            del todo
            for table, keys in bulk.other_link_indexes(*cols).items():
                self._load_sorted(self.tables.named(table), keys)

    def _load_sorted(self, db: Db, keys: np.ndarray, chunk: int = 1 << 16) -> None:
        """Insert a sorted structured key array (bare keys) a slice at a time, so that the
        Python bytes objects of only one slice exist at once."""
        for i in range(0, len(keys), chunk):
            self._load(db, (bulk.as_bytes(keys[i:i + chunk]), None), None)

    def _spo_taken(self, spo3: bytes) -> bool:
        k = next(self._keys(self.tables.spo, spo3), None)
        return k is not None and k.startswith(spo3)

    def _load(self, db: Db, entries: bulk.Entries, duplicate: KipError | None) -> None:
        """Insert sorted entries (keys and their values, or bare keys with empty values),
        appending when they all follow the table's last key. A key already present or
        repeated raises `duplicate` (an internal error when None)."""
        keys, values = entries
        if not keys:
            return
        last = self.kv.last_key(db)
        append = last is None or keys[0] > last
        items = zip(keys, repeat(b"") if values is None else values)
        if self.kv.putmulti(db, items, append, False) != len(keys):
            raise duplicate or internal("bulk create: duplicate index keys")


class WriteAux(Aux[Db]):
    """AuxTable of the write transaction: the read-only one plus put and delete."""

    __slots__ = ()

    _txn: GraphWriteTxn[Db]

    def put(self, key: bytes, value: bytes) -> None:
        _check_aux_key(key)
        self._txn.kv.put(key, value, db=self._db)

    def delete(self, key: bytes) -> bool:
        _check_aux_key(key)
        return self._txn.kv.delete(key, db=self._db)


def _link_keys(s: int, p: int, o: int, n: int) -> tuple[bytes, bytes, bytes]:
    """The spo, ops and pso keys of a link; an end past the id cap (or not an id) is no
    element: KIP_3002."""
    try:
        return SPO.pack(s, p, o, n), OPS.pack(o, p, s, n), PSO.pack(p, s, o, n)
    except struct.error:
        raise KipError(ErrorCode.KIP_3002, f"a proposition ({s!r}, {p!r}, {o!r}) names an "
                                           f"element that does not exist") from None


def _spo3(key: bytes) -> tuple[int, int, int]:
    """The (s, p, o) of an spo key."""
    s, p, o = SPO3.unpack(key[:TRIPLE])
    return s, p, o


def _check_aux_key(key: bytes) -> None:
    if not key or len(key) > codec.MAX_KEY:
        raise internal(f"aux key must be 1..{codec.MAX_KEY} bytes, got {len(key)}")
