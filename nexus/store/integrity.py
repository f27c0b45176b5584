"""Integrity of the LMDB and memory backends' tables: verify every derived table against
the base records, and optionally repair what drifted (`StoreBase.check_tables`, behind
`GraphStore.check_tables`; `nexus.ops.check` orchestrates it with the search checks).

The *base records* of a store are the element heads (`head`: id → concept {type, name} or
link (s, p, o)), their attribute and metadata maps (`attrs`, `metas`) and the symbol table
(`sym`). Everything else is *derived* and must agree with them exactly:

    symx                text → symbol id                  (one entry per symbol)
    tn, tid, name       (type, name) → id, type → ids, name → ids   (one entry per concept)
    spo, ops, pso       the three link orders            (one entry per link)
    stats               concepts, links, per type, per predicate (exact counts, no zeros)
    meta                max_id ≥ every element id, max_sym ≥ every symbol id

Each table is checked in both directions: every entry the base records imply exists
(*missing* otherwise) and every entry present is implied by a base record (*orphan*
otherwise), so a check walks the base records once and every derived table once, with point
lookups — memory stays bounded by the number of distinct types and predicates, whatever the
store's size.

Besides drift, the walk reports what no index rebuild can mend, because the base records
themselves disagree: a head or value that does not decode, a head naming an unknown symbol,
a link whose subject or object is gone (`dangling_links`), two concepts with one (type, name)
or two links with one (subject, predicate, object). Those need a human (or a restore).

A repair runs in the caller's write transaction (the engine's write session): missing
entries written, orphans and wrong entries deleted, counters and statistics set. Base
records are never changed.

Reads the raw tables below the transaction protocol on purpose (`GraphReadTxn.kv` and
`tables`, the key layout of `codec`): a check must see what the protocol's readers would
hide. Another backend (a SQL one, say) implements `check_tables` over its own tables.
"""
from __future__ import annotations

import struct
from collections import Counter
from typing import Any, Generic, Iterator

from nexus.errors import KipError
from nexus.store import codec
from nexus.store.codec import OPS, PSO, SPO, pack_n, pack_sid
from nexus.store.graph import GraphReadTxn, internal
from nexus.store.graph_write import GraphWriteTxn
from nexus.store.model import ConceptHead, LinkHead
from nexus.store.protocol import TableCheck
from nexus.store.tables import Db

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

EXAMPLES = 5       # examples kept per category

_SP4 = struct.Struct(">I")


def check_tables(txn: GraphReadTxn[Db], examples: int = EXAMPLES,
                 repair: bool = False) -> TableCheck:
    """Check the tables `txn` sees; with `repair` (`txn` is then the write transaction),
    rewrite what drifted in it. The report is the same either way."""
    check = StoreCheck(txn, examples, fix=repair)
    report = check.run()
    return TableCheck(report, check.fixes)


class Findings:
    """Counts per drift category, and the first few examples of each (the search checks
    of `nexus.ops.check` keep theirs the same way)."""

    def __init__(self, examples: int) -> None:
        self.counts: Counter[str] = Counter()
        self.examples: dict[str, list[str]] = {}
        self.keep = examples

    def problem(self, category: str, what: str, k: int = 1) -> None:
        self.counts[category] += k
        seen = self.examples.setdefault(category, [])
        if len(seen) < self.keep:
            seen.append(what)


class StoreCheck(Findings, Generic[Db]):
    """One walk over a store transaction's tables (see the module doc). With `fix=True` the
    transaction must be a write transaction: the fixes are applied when every scan is over
    (a scan never runs over its own writes, and the report is the same as a plain check's)."""

    def __init__(self, txn: GraphReadTxn[Db], examples: int = EXAMPLES,
                 fix: bool = False) -> None:
        super().__init__(examples)
        self.kv = txn.kv
        self.d = txn.tables
        self.writer: GraphWriteTxn[Db] | None = None
        if fix:
            if not isinstance(txn, GraphWriteTxn):
                raise internal("a repair needs the store's write transaction")
            self.writer = txn
        self.fix = fix
        self.fixes = 0
        self._pending: list[tuple[Db, bytes, bytes | None]] = []
        self.sids: dict[int, bytes] = {}          # symbol id → utf-8 text
        self.type_counts: Counter[int] = Counter()
        self.pred_counts: Counter[int] = Counter()
        self.concepts = self.links = 0
        self.max_n = 0

    # --- bookkeeping ------------------------------------------------------------------------
    def _put(self, db: Db, key: bytes, value: bytes) -> None:
        if self.fix:
            self._pending.append((db, key, value))

    def _delete(self, db: Db, key: bytes) -> None:
        if self.fix:
            self._pending.append((db, key, None))

    def _apply(self) -> None:
        """Deletes first, then puts: an entry implied by a base record but holding the wrong
        value is both an orphan (deleted) and missing (written back right)."""
        if self.writer is None:         # a plain check: nothing is pending
            return
        kv = self.writer.kv
        for db, key, value in self._pending:
            if value is None:
                kv.delete(key, db=db)
        for db, key, value in self._pending:
            if value is not None:
                kv.put(key, value, db=db)
        self.fixes += len(self._pending)
        self._pending.clear()

    def _items(self, db: Db) -> Iterator[tuple[bytes, bytes]]:
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
            owner: int | None = _SP4.unpack(value)[0] if len(value) == 4 else None
            known = None if owner is None else self.sids.get(owner)
            if known is None or codec.text_key(known) != tkey:
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
                if len(nk) != 8 or v[0] not in codec.HEAD_TAGS:
                    raise ValueError("not a head")
                head = codec.decode_head(n, v)
            except Exception:  # noqa: BLE001 - any failure means a damaged head
                self.problem("heads_undecodable", f"head {nk.hex()}: {v[:40].hex()}")
                continue
            if isinstance(head, ConceptHead):
                self._concept_forward(n, nk, v, head)
            else:
                self._link_forward(n, head)

    def _concept_forward(self, n: int, nk: bytes, v: bytes, head: ConceptHead) -> None:
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

    def _link_forward(self, n: int, head: LinkHead) -> None:
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
        try:
            keys = (("spo", SPO.pack(s, p, o, n)), ("ops", OPS.pack(o, p, s, n)),
                    ("pso", PSO.pack(p, s, o, n)))
        except struct.error:        # an id past codec.MAX_ELEMENT_ID: no index can hold it
            self.problem("heads_undecodable", f"P:{n} ({s}, {self._sym(p)}, {o}): an id "
                         f"past the cap {codec.MAX_ELEMENT_ID}")
            return
        for table, key in keys:
            if not has(d.named(table), key):
                self.problem(f"{table}_missing", f"P:{n} ({s}, {self._sym(p)}, {o})")
                self._put(d.named(table), key, b"")

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
            db = d.named(table)
            previous = None
            for key, _ in self._items(db):
                try:
                    fields = dict(zip(order + "n", layout.unpack(key)))
                except struct.error:
                    fields = None
                ok = False
                if fields is not None:
                    v = self._get(d.head, pack_n(fields["n"]))
                    ok = v is not None and codec.link_ends(v) == (fields["s"], fields["p"],
                                                                  fields["o"])
                if fields is None or not ok:
                    self.problem(f"{table}_orphans", f"{table} {key.hex()}")
                    self._delete(db, key)
                    continue
                if table == "spo":
                    triple = key[:codec.TRIPLE]
                    if triple == previous:
                        self.problem("duplicate_links",
                                     f"P:{fields['n']} repeats ({fields['s']}, "
                                     f"{self._sym(fields['p'])}, {fields['o']})")
                    previous = triple

    def values(self) -> None:
        """Attribute and metadata maps: each belongs to an element and decodes to a map."""
        d = self.d
        for table in ("attrs", "metas"):
            db = d.named(table)
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
        if self.writer is not None:
            # The write transaction flushes its own counter copies at commit: keep them level
            # with what was just written (they only ever move up).
            self.writer.raise_counters(self.max_n, top_sym)


def _stat_label(key: bytes) -> str:
    if key == codec.ST_CONCEPTS:
        return "concept count"
    if key == codec.ST_LINKS:
        return "link count"
    kind = {codec.ST_TYPE: "type", codec.ST_PRED: "predicate"}.get(key[:1], "?")
    return f"{kind} {int.from_bytes(key[1:], 'big')} count"
