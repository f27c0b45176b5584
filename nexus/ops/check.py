"""`kip check`: verify every index of a nexus against its base records; optionally repair.

Owns integrity verification. The *base records* of a store are the element heads (`head`:
id → concept {type, name} or link (s, p, o)), their attribute and metadata maps (`attrs`,
`metas`) and the symbol table (`sym`). Everything else is *derived* and must agree with them
exactly:

    symx                text → symbol id                  (one entry per symbol)
    tn, tid, name       (type, name) → id, type → ids, name → ids   (one entry per concept)
    spo, ops, pso       the three link orders            (one entry per link)
    stats               concepts, links, per type, per predicate (exact counts, no zeros)
    meta                max_id ≥ every element id, max_sym ≥ every symbol id

plus the search indexes kept beside the store: the lexical forward index (`lexdoc`, one entry
per element, equal to what the element's data gives), its postings, document frequencies,
document counts and name keys (`lex`, derived from the forward index), and the vector index
(one vector set per element, caught up with the change queue) — the last two through
`nexus.search`.

Each index is checked in both directions: every entry the base records imply exists (*missing*
otherwise) and every entry present is implied by a base record (*orphan* otherwise), so a
check walks the base records once and every derived table once, with point lookups — memory
stays bounded by the number of distinct types and predicates, whatever the store's size.

Besides drift, the walk reports what no index rebuild can mend, because the base records
themselves disagree: a head or value that does not decode, a head naming an unknown symbol,
a link whose subject or object is gone (`dangling_links`), two concepts with one (type, name)
or two links with one (subject, predicate, object). Those need a human (or a restore).

`verify(nexus, repair=True)` rewrites what is derived from the base records: the store's
derived tables in ONE write transaction (missing entries written, orphans and wrong entries
deleted, counters and statistics set), then, when the search indexes drifted, a full
`nexus.search.reindex()` (its own write transaction). Base records are never changed.

Reaches below the store protocol on purpose (the raw tables of `nexus.store.graph` and the
key layout of `nexus.store.codec`): a check must see what the protocol's readers would hide.
"""
from __future__ import annotations

import struct
from collections import Counter
from typing import Any, Iterator

from ..errors import KipError, internal_error
from ..store import codec
from ..store.codec import OPS, PSO, SPO, pack_n, pack_sid

# Drift categories that a rebuild of the derived indexes repairs ...
REPAIRABLE = (
    "symx_missing", "symx_orphans",
    "tn_missing", "tn_orphans", "tid_missing", "tid_orphans", "name_missing", "name_orphans",
    "spo_missing", "spo_orphans", "ops_missing", "ops_orphans", "pso_missing", "pso_orphans",
    "attrs_orphans", "metas_orphans", "stats_drift", "max_id_behind", "max_sym_behind",
)
# ... and problems of the base records themselves, which it does not.
UNREPAIRABLE = (
    "heads_undecodable", "values_undecodable", "symbols_undecodable", "unknown_symbols",
    "dangling_links", "duplicate_concepts", "duplicate_links",
)
# Search drift found by `nexus.search.check` (counts) and here (deep posting checks).
POSTING_CATEGORIES = ("postings_missing", "postings_orphans", "postings_wrong",
                      "postings_malformed", "doc_freq_drift", "doc_count_drift",
                      "names_missing", "names_orphans")
# ... and the vectors' content (deep): each element's vectors are those of its current text.
VECTOR_CATEGORIES = ("vector_slots_wrong", "vector_stale")
VECTOR_MIN_COSINE = 0.98    # the index stores i8-quantised vectors: equal ones score > 0.999
VECTOR_CHUNK = 2048         # elements compared per hold of the vector lock

EXAMPLES = 5       # examples kept per category

_SP4 = struct.Struct(">I")


# --- public entry points ----------------------------------------------------------------------

def verify(nexus: Any, *, deep: bool = True, repair: bool = False,
           examples: int = EXAMPLES) -> dict[str, Any]:
    """Check the store's indexes and the search indexes of `nexus` against its base records.

    Returns `{"ok", "store": {...}, "search": {...}}`: each part has `"ok"`, a count per
    drift category (0 when in step) and `"examples"` of what drifted. `deep` also recomputes
    every lexical document and checks every posting against it (slower). With `repair`, the
    derived indexes are rebuilt where they drifted and the result gains `"repaired"`:
    `{"store_fixes", "search_reindexed", "ok", "store", "search"}` — the last three from a
    fresh check after the repair (`ok` is False only when base records are damaged).
    Raises only KipError.
    """
    try:
        if not repair:
            with nexus.store.read() as txn:
                store = StoreCheck(txn, examples).run()
            search = _search_report(nexus, deep, examples)
            return _combine(store, search)
        before_store, fixes = repair_store(nexus, examples)
        before_search = _search_report(nexus, deep, examples)
        reindexed = False
        if not before_search["ok"] or fixes:
            nexus.search.reindex()
            reindexed = True
        report = _combine(before_store, before_search)
        after = verify(nexus, deep=deep, examples=examples)
        report["repaired"] = {"store_fixes": fixes, "search_reindexed": reindexed,
                              "ok": after["ok"], "store": after["store"],
                              "search": after["search"]}
        return report
    except KipError:
        raise
    except Exception as exc:  # noqa: BLE001 - a check reports; it never traces back
        raise internal_error(exc) from exc


def repair_store(nexus: Any, examples: int = EXAMPLES) -> tuple[dict[str, Any], int]:
    """Check the store's derived tables and rewrite what drifted, in one write transaction
    (under the engine's write lock, so no command interleaves). Returns (the report of what
    was found, the number of keys written or deleted)."""
    with nexus.write_session(privileged=True) as session:
        check = StoreCheck(session.txn, examples, fix=True)
        report = check.run()
    return report, check.fixes


def _combine(store: dict, search: dict) -> dict[str, Any]:
    return {"ok": store["ok"] and search["ok"], "store": store, "search": search}


def _search_report(nexus: Any, deep: bool, examples: int) -> dict[str, Any]:
    service = getattr(nexus, "search", None)
    if service is None:
        return {"ok": True, "available": False}
    report = dict(service.check(deep=deep))
    report.pop("ok", None)
    if deep:
        with nexus.store.read() as txn:
            posting = PostingCheck(txn, examples).run()
        vector = VectorCheck(service.vectors, nexus.store, examples).run()
        examples_found = {**posting.pop("examples", {}), **vector.pop("examples", {})}
        report.update(posting)
        report.update(vector)
        if examples_found:
            report["examples"] = examples_found
    report["ok"] = not any(v for k, v in report.items()
                           if k not in ("elements", "vectors_compared") and type(v) is int)
    return report


class _Findings:
    """Counts per drift category, and the first few examples of each."""

    def __init__(self, examples: int) -> None:
        self.counts: Counter = Counter()
        self.examples: dict[str, list[str]] = {}
        self.keep = examples

    def problem(self, category: str, what: str, k: int = 1) -> None:
        self.counts[category] += k
        seen = self.examples.setdefault(category, [])
        if len(seen) < self.keep:
            seen.append(what)


# --- the store ----------------------------------------------------------------------------------

class StoreCheck(_Findings):
    """One walk over a store transaction's tables (see the module doc). With `fix=True` the
    transaction must be a write transaction: the fixes are applied when every scan is over
    (a scan never runs over its own writes, and the report is the same as a plain check's)."""

    def __init__(self, txn: Any, examples: int = EXAMPLES, fix: bool = False) -> None:
        super().__init__(examples)
        self.txn = txn
        self.kv = txn._kv
        self.d = txn._d
        self.fix = fix
        self.fixes = 0
        self._pending: list[tuple[Any, bytes, bytes | None]] = []
        self.sids: dict[int, bytes] = {}          # symbol id → utf-8 text
        self.type_counts: Counter = Counter()
        self.pred_counts: Counter = Counter()
        self.concepts = self.links = 0
        self.max_n = 0

    # --- bookkeeping ------------------------------------------------------------------------
    def _put(self, db: Any, key: bytes, value: bytes) -> None:
        if self.fix:
            self._pending.append((db, key, value))

    def _delete(self, db: Any, key: bytes) -> None:
        if self.fix:
            self._pending.append((db, key, None))

    def _apply(self) -> None:
        """Deletes first, then puts: an entry implied by a base record but holding the wrong
        value is both an orphan (deleted) and missing (written back right)."""
        kv = self.kv
        for db, key, value in self._pending:
            if value is None:
                kv.delete(key, db=db)
        for db, key, value in self._pending:
            if value is not None:
                kv.put(key, value, db=db)
        self.fixes += len(self._pending)
        self._pending.clear()

    def _items(self, db: Any) -> Iterator[tuple[bytes, bytes]]:
        return self.kv.items_from(db, b"")

    def _get(self, db: Any, key: bytes) -> bytes | None:
        return self.kv.get(key, None, db)

    def _has(self, db: Any, key: bytes) -> bool:
        return self.kv.get(key, None, db) is not None

    # --- phases ------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        for phase in (self.symbols, self.heads, self.concept_indexes, self.link_indexes,
                      self.values, self.statistics, self.counters):
            phase()
        self._apply()
        report: dict[str, Any] = {"elements": self.concepts + self.links,
                                  "concepts": self.concepts, "links": self.links,
                                  "symbols": len(self.sids)}
        for category in REPAIRABLE + UNREPAIRABLE:
            report[category] = self.counts[category]
        report["ok"] = not any(self.counts.values())
        report["examples"] = self.examples
        return report

    def symbols(self) -> None:
        d = self.d
        for key, text in self._items(d.sym):
            try:
                sid = _SP4.unpack(key)[0]
                tkey = codec.text_key(text.decode().encode())     # valid UTF-8 only
            except (struct.error, UnicodeDecodeError):
                self.problem("symbols_undecodable", f"sym key {key.hex()}")
                continue
            self.sids[sid] = text
            if self._get(d.symx, tkey) != key:
                self.problem("symx_missing", f"symbol {sid} {text[:80]!r}")
                self._put(d.symx, tkey, key)
        for tkey, value in self._items(d.symx):
            sid = _SP4.unpack(value)[0] if len(value) == 4 else None
            text = self.sids.get(sid)
            if text is None or codec.text_key(text) != tkey:
                self.problem("symx_orphans", f"symx {tkey[:60]!r} -> {value.hex()}")
                self._delete(d.symx, tkey)

    def _sym(self, sid: int) -> str:
        text = self.sids.get(sid)
        return repr(text.decode()) if text is not None else f"<unknown symbol {sid}>"

    def heads(self) -> None:
        """Forward: every entry each head implies, in every index."""
        d = self.d
        for nk, v in self._items(d.head):
            n = int.from_bytes(nk, "big")
            self.max_n = max(self.max_n, n)
            try:
                if len(nk) != 8 or v[0] not in (codec.CONCEPT_TAG, codec.LINK_TAG):
                    raise ValueError("not a head")
                head = codec.decode_head(n, v)
            except Exception:  # noqa: BLE001 - any failure means a damaged head
                self.problem("heads_undecodable", f"head {nk.hex()}: {v[:40].hex()}")
                continue
            if v[0] == codec.CONCEPT_TAG:
                self._concept_forward(n, nk, v, head)
            else:
                self._link_forward(n, head)

    def _concept_forward(self, n: int, nk: bytes, v: bytes, head: Any) -> None:
        d, has = self.d, self._has
        self.concepts += 1
        tb = v[1:5]
        tkey = codec.text_key(v[5:])
        self.type_counts[head.type_id] += 1
        if head.type_id not in self.sids:
            self.problem("unknown_symbols", f"C:{n} has type symbol {head.type_id}")
        taken = self._get(d.tn, tb + tkey)
        if taken != nk:
            other = None if taken is None else int.from_bytes(taken, "big")
            if other is not None and self._same_identity(other, tb, v[5:]):
                self.problem("duplicate_concepts",
                             f"C:{n} and C:{other} are both {{type: {self._sym(head.type_id)}, "
                             f"name: {head.name[:80]!r}}}")
            else:
                self.problem("tn_missing", f"C:{n} {{type: {self._sym(head.type_id)}, "
                             f"name: {head.name[:80]!r}}}")
                self._put(d.tn, tb + tkey, nk)
        if not has(d.tid, tb + nk):
            self.problem("tid_missing", f"C:{n}")
            self._put(d.tid, tb + nk, b"")
        if not has(d.name, tkey + b"\x00" + nk):
            self.problem("name_missing", f"C:{n} {head.name[:80]!r}")
            self._put(d.name, tkey + b"\x00" + nk, b"")

    def _same_identity(self, other: int, tb: bytes, name_utf8: bytes) -> bool:
        v = self._get(self.d.head, pack_n(other))
        return v is not None and v[:1] == b"\x01" and v[1:5] == tb and v[5:] == name_utf8

    def _link_forward(self, n: int, head: Any) -> None:
        d, has = self.d, self._has
        self.links += 1
        s, p, o = head.subject, head.predicate_id, head.object
        self.pred_counts[p] += 1
        if p not in self.sids:
            self.problem("unknown_symbols", f"P:{n} has predicate symbol {p}")
        for end in (s, o):
            if not has(d.head, pack_n(end)):
                self.problem("dangling_links", f"P:{n}:{self._sym(p)} refers to missing "
                             f"element {end}")
        for table, key in (("spo", SPO.pack(s, p, o, n)), ("ops", OPS.pack(o, p, s, n)),
                           ("pso", PSO.pack(p, s, o, n))):
            if not has(getattr(d, table), key):
                self.problem(f"{table}_missing", f"P:{n} ({s}, {self._sym(p)}, {o})")
                self._put(getattr(d, table), key, b"")

    def _concept_head(self, n: int) -> bytes | None:
        v = self._get(self.d.head, pack_n(n))
        return v if v is not None and v[:1] == b"\x01" else None

    def concept_indexes(self) -> None:
        """Backward: every concept index entry names an existing concept that implies it."""
        d = self.d
        for key, value in self._items(d.tn):
            v = self._concept_head(int.from_bytes(value, "big")) if len(value) == 8 else None
            if v is None or key != v[1:5] + codec.text_key(v[5:]):
                self.problem("tn_orphans", f"tn {key[:60]!r} -> {value.hex()}")
                self._delete(d.tn, key)
        for key, _ in self._items(d.tid):
            v = self._concept_head(int.from_bytes(key[4:], "big")) if len(key) == 12 else None
            if v is None or v[1:5] != key[:4]:
                self.problem("tid_orphans", f"tid {key.hex()}")
                self._delete(d.tid, key)
        for key, _ in self._items(d.name):
            ok = len(key) >= 9 and key[-9] == 0     # an empty name: 9 bytes
            v = self._concept_head(int.from_bytes(key[-8:], "big")) if ok else None
            if v is None or codec.text_key(v[5:]) != key[:-9]:
                self.problem("name_orphans", f"name {key[:60]!r}")
                self._delete(d.name, key)

    def link_indexes(self) -> None:
        """Backward: every link index entry names an existing link with those ends; two
        links with one (s, p, o) are duplicates."""
        d = self.d
        for table, layout, order in (("spo", SPO, "spo"), ("ops", OPS, "ops"),
                                     ("pso", PSO, "pso")):
            db = getattr(d, table)
            previous = None
            for key, _ in self._items(db):
                try:
                    fields = dict(zip(order + "n", layout.unpack(key)))
                except struct.error:
                    fields = None
                ok = False
                if fields is not None:
                    v = self._get(d.head, pack_n(fields["n"]))
                    ok = (v is not None and v[:1] == b"\x02" and codec.LINK_HEAD.unpack(v)[1:]
                          == (fields["s"], fields["p"], fields["o"]))
                if not ok:
                    self.problem(f"{table}_orphans", f"{table} {key.hex()}")
                    self._delete(db, key)
                    continue
                if table == "spo":
                    triple = key[:20]
                    if triple == previous:
                        self.problem("duplicate_links",
                                     f"P:{fields['n']} repeats ({fields['s']}, "
                                     f"{self._sym(fields['p'])}, {fields['o']})")
                    previous = triple

    def values(self) -> None:
        """Attribute and metadata maps: each belongs to an element and decodes to a map."""
        d = self.d
        for table in ("attrs", "metas"):
            db = getattr(d, table)
            for key, value in self._items(db):
                if not self._has(d.head, key):
                    self.problem(f"{table}_orphans", f"{table} of missing element "
                                 f"{int.from_bytes(key, 'big')}")
                    self._delete(db, key)
                    continue
                try:
                    decoded = codec.decode_map(value)
                except KipError:
                    decoded = None
                if type(decoded) is not dict or any(type(k) is not str for k in decoded):
                    self.problem("values_undecodable", f"{table} of element "
                                 f"{int.from_bytes(key, 'big')}")

    def statistics(self) -> None:
        expected: dict[bytes, int] = {codec.ST_CONCEPTS: self.concepts,
                                      codec.ST_LINKS: self.links}
        for sid, k in self.type_counts.items():
            expected[codec.ST_TYPE + pack_sid(sid)] = k
        for sid, k in self.pred_counts.items():
            expected[codec.ST_PRED + pack_sid(sid)] = k
        db = self.d.stats
        seen = set()
        for key, value in self._items(db):
            seen.add(key)
            want = expected.get(key, 0)
            if int.from_bytes(value, "big") != want or len(value) != 8:
                self.problem("stats_drift", f"{_stat_label(key)}: stored "
                             f"{int.from_bytes(value, 'big')}, counted {want}")
                if want:
                    self._put(db, key, pack_n(want))
                else:
                    self._delete(db, key)
        for key, want in expected.items():
            if key not in seen and want:
                self.problem("stats_drift", f"{_stat_label(key)}: stored 0, counted {want}")
                self._put(db, key, pack_n(want))

    def counters(self) -> None:
        db = self.d.meta
        stored = int.from_bytes(self._get(db, codec.META_MAX_ID) or b"", "big")
        if stored < self.max_n:
            self.problem("max_id_behind", f"max_id {stored} < highest element id {self.max_n}")
            self._put(db, codec.META_MAX_ID, pack_n(self.max_n))
        top_sym = max(self.sids, default=0)
        stored = int.from_bytes(self._get(db, codec.META_MAX_SYM) or b"", "big")
        if stored < top_sym:
            self.problem("max_sym_behind", f"max_sym {stored} < highest symbol id {top_sym}")
            self._put(db, codec.META_MAX_SYM, pack_sid(top_sym))
        if self.fix:
            # The write transaction flushes its own counter copies at commit: keep them level
            # with what was just written (they only ever move up).
            txn = self.txn
            if hasattr(txn, "_max_id"):
                txn._max_id = txn._max_id0 = max(txn._max_id, self.max_n)
            if hasattr(txn, "_max_sym"):
                txn._max_sym = txn._max_sym0 = max(txn._max_sym, top_sym)


def _stat_label(key: bytes) -> str:
    if key == codec.ST_CONCEPTS:
        return "concept count"
    if key == codec.ST_LINKS:
        return "link count"
    kind = {codec.ST_TYPE: "type", codec.ST_PRED: "predicate"}.get(key[:1], "?")
    return f"{kind} {int.from_bytes(key[1:], 'big')} count"


# --- the lexical postings ------------------------------------------------------------------------

class PostingCheck(_Findings):
    """The `lex` table against the `lexdoc` forward index it is derived from: every
    (term, document) posting with its weight and group, the document frequencies, the
    document counts per kind and the name keys (layout: `nexus.search.lexical`). Whether
    each forward entry matches its element's data is `nexus.search.check(deep=True)`'s."""

    def __init__(self, txn: Any, examples: int = EXAMPLES) -> None:
        super().__init__(examples)
        self.txn = txn

    def run(self) -> dict[str, Any]:
        import numpy as np

        from ..search import lexical, postings
        lex = self.txn.aux("lex")
        expected: dict[bytes, dict[int, tuple[float, int]]] = {}   # kind+term → postings
        names: dict[bytes, bytes] = {}
        docs = dict.fromkeys(lexical.KIND_BYTES, 0)
        for key, raw in self.txn.aux("lexdoc").scan():
            n = int.from_bytes(key, "big")
            try:
                entry = lexical.Entry(raw)
                kb = lexical.KIND_BYTES[entry.kind]
            except Exception:  # noqa: BLE001 - a damaged forward entry
                self.problem("postings_malformed", f"lexdoc entry of {n} does not decode")
                continue
            docs[kb] += 1
            for term, weight in entry.terms.items():
                expected.setdefault(kb + term.encode(), {})[n] = (
                    float(np.float16(weight)), entry.group)
            for i, nn in enumerate(entry.names):
                if nn:
                    names[b"n" + kb + nn.encode() + b"\x00" + key] = \
                        struct.pack("<IB", entry.group, 1 if i else 0)
        found: Counter = Counter()          # kind+term → postings that match a document
        dfs: dict[bytes, int] = {}
        stored_docs: dict[bytes, int] = {}
        for key, value in lex.scan():
            tag = key[:1]
            if tag == b"t":
                self._block(key, value, expected, found, postings)
            elif tag == b"d" and len(value) == 4:
                dfs[key[1:]] = struct.unpack(">I", value)[0]
            elif tag == b"N" and len(value) == 8:
                stored_docs[key[1:]] = struct.unpack(">Q", value)[0]
            elif tag == b"n":
                if names.pop(key, None) != value:
                    self.problem("names_orphans", f"name key {key[:60]!r}")
            else:
                self.problem("postings_malformed", f"lex key {key[:40]!r}")
        for term, per in expected.items():
            missing = len(per) - found[term]
            if missing > 0:
                self.problem("postings_missing", f"{missing} postings of {term[:60]!r}",
                             missing)
        for term in expected.keys() | dfs.keys():
            want, got = len(expected.get(term, ())), dfs.get(term, 0)
            if want != got:
                self.problem("doc_freq_drift", f"df of {term[:60]!r}: {got}, postings {want}")
        for kb in docs.keys() | stored_docs.keys():
            if docs.get(kb, 0) != stored_docs.get(kb, 0):
                self.problem("doc_count_drift", f"N{kb!r}: {stored_docs.get(kb, 0)}, "
                             f"forward entries {docs.get(kb, 0)}")
        for key in names:
            self.problem("names_missing", f"name key {key[:60]!r}")
        report: dict[str, Any] = {c: self.counts[c] for c in POSTING_CATEGORIES}
        if self.examples:
            report["examples"] = self.examples
        return report

    def _block(self, key: bytes, value: bytes, expected: dict, found: Counter,
               postings: Any) -> None:
        term, sep, first = key[1:-9], key[-9:-8], key[-8:]
        if sep != b"\x00" or len(key) < 11:
            self.problem("postings_malformed", f"posting key {key[:60]!r}")
            return
        try:
            ids, weights, groups = (a.tolist() for a in postings.decode(value))
        except Exception:  # noqa: BLE001 - a damaged block
            self.problem("postings_malformed", f"block {key[:60]!r} does not decode")
            return
        if not ids or ids[0] != int.from_bytes(first, "big") or ids != sorted(set(ids)):
            self.problem("postings_malformed", f"block {key[:60]!r}: ids not sorted, unique "
                         f"and starting at the key's id")
        per = expected.get(term, {})
        for n, w, g in zip(ids, weights, groups):
            want = per.get(n)
            if want is None:
                self.problem("postings_orphans", f"{term[:60]!r} -> {n}")
                continue
            found[term] += 1
            if want != (float(w), g):
                self.problem("postings_wrong", f"{term[:60]!r} -> {n}: ({w}, {g}), "
                             f"expected {want}")


# --- the vectors ----------------------------------------------------------------------------------

class VectorCheck(_Findings):
    """The vector index's content against the data (deep only): for every element, the
    slots it has in its kind's usearch index are exactly those of its current vector texts
    (name and aliases, `nexus.search.vectors.doc_texts`; `vector_slots_wrong` otherwise),
    and each slot holds the embedding of that text (`vector_stale` otherwise) — so a vector
    left behind by a lost or replayed change is found, not only a missing one.

    Compares a snapshot with the index only while the index covers exactly that snapshot
    (its applied change sequence equals the snapshot's), holding the vector lock per chunk
    so the indexer cannot move in between; a chunk that finds the index behind or ahead
    waits for the indexer and retries. Elements whose vectors are missing altogether are
    `nexus.search.check`'s `vector_missing`, and not counted again here."""

    def __init__(self, vectors: Any, store: Any, examples: int = EXAMPLES) -> None:
        super().__init__(examples)
        self.vectors = vectors
        self.store = store
        self.compared = 0

    def run(self) -> dict[str, Any]:
        with self.store.read() as txn:
            ids = list(txn.elements())
        for i in range(0, len(ids), VECTOR_CHUNK):
            self._chunk(ids[i:i + VECTOR_CHUNK])
        report: dict[str, Any] = {c: self.counts[c] for c in VECTOR_CATEGORIES}
        report["vectors_compared"] = self.compared
        if self.examples:
            report["examples"] = self.examples
        return report

    def _chunk(self, ids: list[int], attempts: int = 3) -> None:
        import numpy as np

        from ..search.text import element_doc
        from ..search.vectors import SLOTS, doc_texts, read_seq
        v = self.vectors
        for attempt in range(attempts):
            with v.lock, self.store.read() as txn:
                if read_seq(txn) != v.applied_seq or v.needs_rebuild:
                    in_step = False
                else:
                    in_step = True
                    wanted = []            # (kind, id, texts)
                    for n in ids:
                        doc = element_doc(txn, n)
                        if doc is not None:
                            wanted.append((doc.kind, n, doc_texts(doc, v.embedder)))
                    stored = []
                    for kind, n, texts in wanted:
                        ix = v.indexes[kind]
                        keys = np.arange(SLOTS, dtype=np.uint64) + np.uint64(n * SLOTS)
                        present = keys[np.asarray(ix.contains(keys), dtype=bool)] \
                            if len(ix) else keys[:0]
                        vecs = np.asarray(ix.get(present), dtype=np.float32).reshape(
                            len(present), -1) if len(present) else None
                        stored.append(((present - np.uint64(n * SLOTS)).tolist(), vecs))
            if in_step:
                break
            v.drain(timeout=30)
        else:
            self.problem("vector_stale", f"the vector index did not settle on a snapshot "
                         f"for {len(ids)} elements", len(ids))
            return
        texts = [t for _, _, ts in wanted for t in ts]
        fresh = v.embedder.embed(texts) if texts else None
        at = 0
        for (kind, n, ts), (slots, vecs) in zip(wanted, stored):
            want = fresh[at:at + len(ts)] if ts else None
            at += len(ts)
            if not slots:
                continue                    # no vector at all: vector_missing
            self.compared += 1
            if slots != list(range(len(ts))):
                self.problem("vector_slots_wrong", f"{'C' if kind == 0 else 'P'}:{n} has "
                             f"vector slots {slots}, its text gives {len(ts)}")
                continue
            norms = np.linalg.norm(vecs, axis=1) * np.linalg.norm(want, axis=1)
            cosine = (vecs * want).sum(axis=1) / np.where(norms > 0, norms, 1.0)
            if (cosine < VECTOR_MIN_COSINE).any():
                self.problem("vector_stale", f"{'C' if kind == 0 else 'P'}:{n}: a vector is "
                             f"not its text's (cosine {float(cosine.min()):.3f}): "
                             f"{[t[:60] for t in ts]}")


def format_problems(report: dict[str, Any]) -> Iterator[str]:
    """One line per drift category with a nonzero count (for humans)."""
    for part in ("store", "search"):
        for key, value in report.get(part, {}).items():
            if isinstance(value, int) and not isinstance(value, bool) and value and \
                    key not in ("elements", "concepts", "links", "symbols", "seq",
                                "vectors_compared"):
                yield f"{part}.{key}: {value}"


__all__ = ["verify", "repair_store", "StoreCheck", "PostingCheck", "VectorCheck",
           "format_problems", "REPAIRABLE", "UNREPAIRABLE"]
