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
from typing import TYPE_CHECKING, Iterable

import numpy as np

from nexus.errors import ErrorCode, KipError
from nexus.store import bulk, codec
from nexus.store.codec import OPS, PSO, SPO, SPO3, pack_n, pack_sid
from nexus.store.graph import Aux, GraphReadTxn, _count, _dead, internal
from nexus.store.protocol import AUX_TABLES, ConceptHead, LinkHead

if TYPE_CHECKING:
    from nexus.store.base import StoreBase


# Heads a write transaction decodes are kept for it (and merged into the store's cache at
# commit) up to this many: a bulk load re-reading its own elements (search indexing) must
# not hold a head per element.
NEW_HEADS_CAP = 50_000


class GraphWriteTxn(GraphReadTxn):
    """WriteTxn: the single writer. Counters and statistics are accumulated in Python and
    written once, just before commit (`_flush`)."""

    __slots__ = ("_put", "_del", "_max_id", "_max_id0", "_max_sym", "_max_sym0", "_dstats",
                 "_new_heads", "_new_sids", "_new_stexts", "_deleted", "_aborted", "_links_todo")

    def __init__(self, store: StoreBase, kv) -> None:
        super().__init__(store, kv)
        self._put = kv.put
        self._del = kv.delete
        meta = self._d.meta
        self._max_id = self._max_id0 = _count(kv.get(codec.META_MAX_ID, None, meta))
        self._max_sym = self._max_sym0 = _count(kv.get(codec.META_MAX_SYM, None, meta))
        self._dstats: dict[bytes, int] = {}
        self._new_heads: dict[int, ConceptHead | LinkHead] = {}
        self._new_sids: dict[str, int] = {}
        self._new_stexts: dict[int, str] = {}
        self._deleted: list[int] = []
        self._aborted = False
        self._links_todo: list[tuple] = []     # bulk-created links whose ops/pso entries wait

    def __exit__(self, et, exc, tb) -> bool:
        self._store._finish_write(self, exc)
        return False

    def abort(self) -> None:
        if not self._aborted:
            self._aborted = True
            kv = self._kv
            self._kill()
            self._store._abort(kv)

    def _kill(self) -> None:
        super()._kill()
        self._put = self._del = _dead

    def _flush(self) -> None:
        """Write the pending bulk index entries, the counters and statistic deltas into the
        transaction."""
        self._flush_links()
        put, meta = self._put, self._d.meta
        if self._max_id != self._max_id0:
            put(codec.META_MAX_ID, pack_n(self._max_id), db=meta)
        if self._max_sym != self._max_sym0:
            put(codec.META_MAX_SYM, pack_sid(self._max_sym), db=meta)
        stats = self._d.stats
        for key, delta in self._dstats.items():
            if delta:
                total = _count(self._get(key, None, stats)) + delta
                if total:
                    put(key, pack_n(total), db=stats)
                else:
                    self._del(key, db=stats)

    # --- reads that must see this transaction's pending state ----------------------------
    def head(self, n: int) -> ConceptHead | LinkHead | None:
        try:
            v = self._get(pack_n(n), None, self._d.head)
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

    def commit_id(self) -> int:
        """The snapshot id readers will see once this transaction commits."""
        return self._kv.commit_id()

    # The ops and pso entries of bulk-created links are inserted just before commit; a read
    # of those indexes (or a delete, which removes their entries) inserts them first.
    def in_links(self, object: int, predicate_id: int | None = None):
        self._flush_links()
        return super().in_links(object, predicate_id)

    def links_of_predicate(self, predicate_id: int):
        self._flush_links()
        return super().links_of_predicate(predicate_id)

    def _stat(self, key: bytes) -> int:
        return super()._stat(key) + self._dstats.get(key, 0)

    def aux(self, table: str) -> Aux:
        db = self._d.aux.get(table)
        if db is None:
            raise internal(f"unknown aux table {table!r}; declared tables: {AUX_TABLES}")
        return Aux(self, db, True)

    def aux_put_many(self, table: str, pairs) -> None:
        """Aux puts of many pairs in one sorted insert (see the protocol): one C call
        instead of a checked Python call per pair, appending when every key follows the
        table's last one."""
        db = self._d.aux.get(table)
        if db is None:
            raise internal(f"unknown aux table {table!r}; declared tables: {AUX_TABLES}")
        items = sorted(dict(pairs).items())
        if not items:
            return
        if not items[0][0] or max(map(len, map(itemgetter(0), items))) > codec.MAX_KEY:
            raise internal(f"aux key must be 1..{codec.MAX_KEY} bytes")
        last = self._kv.last_key(db)
        self._kv.putmulti(db, items, last is None or items[0][0] > last, True)

    # --- symbols and ids -----------------------------------------------------------------
    def intern(self, text: str) -> int:
        sid = self.symbol_id(text)
        if sid is None:
            utf8 = codec.encode_text(text)
            sid = self._max_sym + 1
            if not self._put(codec.text_key(utf8), pack_sid(sid), overwrite=False,
                             db=self._d.symx):
                raise internal(f"symbol key collision for {text[:80]!r}")
            self._put(pack_sid(sid), utf8, db=self._d.sym)
            self._max_sym = sid
            self._new_sids[text] = sid
            self._new_stexts[sid] = text
        return sid

    def new_id(self) -> int:
        self._max_id += 1
        return self._max_id

    def reserve_ids(self, count: int) -> range:
        start = self._max_id + 1
        self._max_id += count
        return range(start, self._max_id + 1)

    def _bump(self, key: bytes, delta: int) -> None:
        d = self._dstats
        d[key] = d.get(key, 0) + delta

    def _check_id(self, n: int) -> bytes:
        if type(n) is not int or n <= 0:
            raise internal(f"element ids are positive integers, got {n!r}")
        if n > self._max_id:            # an id nobody allocated: keep the counter ahead
            self._max_id = n
        return pack_n(n)

    # --- single-element writes -----------------------------------------------------------
    def create_concept(self, n: int, type_id: int, name: str,
                       attributes: dict, metadata: dict) -> None:
        a = codec.encode_map(attributes, "attributes")
        m = codec.encode_map(metadata, "metadata")
        utf8 = codec.encode_text(name)
        tkey = codec.text_key(utf8)
        tb = pack_sid(type_id)
        nk = self._check_id(n)
        put, d = self._put, self._d
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

    def create_link(self, n: int, subject: int, predicate_id: int, object: int,
                    attributes: dict, metadata: dict) -> None:
        a = codec.encode_map(attributes, "attributes")
        m = codec.encode_map(metadata, "metadata")
        nk = self._check_id(n)
        if self.link_id(subject, predicate_id, object) is not None:
            raise KipError(ErrorCode.KIP_3003,
                           f"a proposition ({subject}, {self.symbol_text(predicate_id)!r}, "
                           f"{object}) already exists")
        put, d = self._put, self._d
        if not put(nk, codec.link_head_value(subject, predicate_id, object),
                   overwrite=False, db=d.head):
            raise internal(f"element id {n} is already in use")
        put(SPO.pack(subject, predicate_id, object, n), b"", db=d.spo)
        put(OPS.pack(object, predicate_id, subject, n), b"", db=d.ops)
        put(PSO.pack(predicate_id, subject, object, n), b"", db=d.pso)
        if a is not None:
            put(nk, a, db=d.attrs)
        if m is not None:
            put(nk, m, db=d.metas)
        self._bump(codec.ST_PRED + pack_sid(predicate_id), 1)
        self._bump(codec.ST_LINKS, 1)

    def set_attributes(self, n: int, attributes: dict) -> None:
        self._set_map(n, codec.encode_map(attributes, "attributes"), self._d.attrs)

    def set_metadata(self, n: int, metadata: dict) -> None:
        self._set_map(n, codec.encode_map(metadata, "metadata"), self._d.metas)

    def _set_map(self, n: int, value: bytes | None, db) -> None:
        try:
            nk = pack_n(n)
        except struct.error:
            nk = None
        if nk is None or self._get(nk, None, self._d.head) is None:
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
        d, dele = self._d, self._del
        v = self._get(nk, None, d.head)
        if v is None:
            return False
        h = codec.decode_head(n, v)
        if type(h) is ConceptHead:
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

    # --- bulk writes (entries built by nexus.store.bulk) -----------------------------------
    def create_concepts(self, rows: Iterable[tuple]) -> int:
        """Bulk create_concept over rows `(n, type_id, name, attributes, metadata)` (the maps
        may be None); see the protocol. Returns the number created."""
        rows = list(rows)
        if not rows:
            return 0
        try:
            ns, types, names, attrs, metas = map(list, zip(*rows))
        except ValueError:
            raise internal("bulk create_concepts: rows must be (n, type_id, name, attributes, "
                           "metadata)") from None
        return self.create_concept_columns(ns, types, names, attrs, metas)

    def create_concept_columns(self, ids, type_ids, names, attributes=None, metadata=None, *,
                               extra_metadata: dict | None = None) -> int:
        """create_concepts over columns (see the protocol)."""
        with bulk.gc_paused():
            e = bulk.concept_entries(ids, type_ids, names, attributes, metadata,
                                     extra_metadata)
            if e is None:
                return 0
            d = self._d
            self._load(d.head, e["head"], internal("bulk create: an element id is in use"))
            self._load(d.tn, e["tn"], KipError(
                ErrorCode.KIP_3003, "bulk create: a concept (type, name) is repeated in the "
                                    "batch or already exists"))
            self._load(d.tid, e["tid"], None)
            self._load(d.name, e["name"], None)
            self._load(d.attrs, e["attrs"], None)
            self._load(d.metas, e["metas"], None)
        self._max_id = max(self._max_id, e["max_id"])
        for type_id, k in e["per_type"].items():
            self._bump(codec.ST_TYPE + pack_sid(type_id), k)
        self._bump(codec.ST_CONCEPTS, e["count"])
        return e["count"]

    def create_links(self, rows: Iterable[tuple], known_new: bool = False) -> int:
        """Bulk create_link over rows `(n, subject, predicate_id, object, attributes,
        metadata)`; see the protocol. Returns the number created."""
        rows = list(rows)
        if not rows:
            return 0
        try:
            ns, ss, ps, os_, attrs, metas = map(list, zip(*rows))
        except ValueError:
            raise internal("bulk create_links: rows must be (n, subject, predicate_id, object, "
                           "attributes, metadata)") from None
        return self.create_link_columns(ns, ss, ps, os_, attrs, metas, known_new=known_new)

    def create_link_columns(self, ids, subjects, predicate_ids, objects, attributes=None,
                            metadata=None, *, known_new: bool = False,
                            extra_metadata: dict | None = None) -> int:
        """create_links over columns (see the protocol). The ops and pso entries are kept
        in memory and inserted, sorted, once for the whole transaction (`_flush_links`)."""
        with bulk.gc_paused():
            e = bulk.link_entries(ids, subjects, predicate_ids, objects, attributes, metadata,
                                  extra_metadata)
            if e is None:
                return 0
            d = self._d
            taken = e["duplicate"]
            if taken is None and not known_new and self._kv.last_key(d.spo) is not None:
                taken = next((SPO3.unpack(k[:20]) for k in e["spo"][0]
                              if self._spo_taken(k[:20])), None)
            if taken is not None:
                s, p, o = taken
                raise KipError(ErrorCode.KIP_3003,
                               f"a proposition ({s}, {self.symbol_text(p)!r}, {o}) is repeated "
                               f"in the batch or already exists")
            self._load(d.head, e["head"], internal("bulk create: an element id is in use"))
            for table in ("spo", "attrs", "metas"):
                self._load(getattr(d, table), e[table], None)
            self._links_todo.append((e["s"], e["p"], e["o"], e["n"]))
        self._max_id = max(self._max_id, e["max_id"])
        for p, k in e["per_pred"].items():
            self._bump(codec.ST_PRED + pack_sid(p), k)
        self._bump(codec.ST_LINKS, e["count"])
        return e["count"]

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
                self._load_sorted(getattr(self._d, table), keys)

    def _load_sorted(self, db, keys, chunk: int = 1 << 16) -> None:
        """Insert a sorted structured key array (bare keys) a slice at a time, so that the
        Python bytes objects of only one slice exist at once."""
        for i in range(0, len(keys), chunk):
            self._load(db, (bulk.as_bytes(keys[i:i + chunk]), None), None)

    def _spo_taken(self, spo3: bytes) -> bool:
        k = next(self._keys(self._d.spo, spo3), None)
        return k is not None and k.startswith(spo3)

    def _load(self, db, entries: tuple[list, list | None], duplicate: KipError | None) -> None:
        """Insert sorted entries (keys and their values, or bare keys with empty values),
        appending when they all follow the table's last key. A key already present or
        repeated raises `duplicate` (an internal error when None)."""
        keys, values = entries
        if not keys:
            return
        last = self._kv.last_key(db)
        append = last is None or keys[0] > last
        items = zip(keys, repeat(b"") if values is None else values)
        if self._kv.putmulti(db, items, append, False) != len(keys):
            raise duplicate or internal("bulk create: duplicate index keys")
