"""The lexical index: names and BM25F postings in LMDB aux tables, in the data's transaction.

Owns the key layout of the `lex` and `lexdoc` aux tables, the term weights, and reading them
back. Because postings are written by `write()` inside the same write transaction as the data
they describe, the lexical index is never out of step with the graph: a reader's snapshot
sees exactly the postings of its data, and a crash loses both or neither.

Layout (`k` is the kind byte: b"c" concepts, b"p" propositions; ids are 8-byte big-endian):

    lex     b"N" k                                  → number of indexed documents
            b"d" k term                             → document frequency of term
            b"t" k term 0x00 first-id               → a block of postings (postings.py):
                                                        ids, BM25F weights, groups
            b"n" k normname 0x00 id                 → (group u32, flag u8: 0 name, 1 alias)
                                                      (links: a name's lowest ids only,
                                                      `lexical_names`)
            b"L" k normname                         → b"": LINK_NAMES or more listed
            b"q" k id                               → a pending document: a copy of its
                                                        lexdoc entry; its terms are in no
                                                        list and no df yet (SMALL_WRITE)
    lexdoc  id                                      → the element's forward entry
                                                      (`lexical_entry`: the full layout,
                                                      a link's texts alone, or MARK: a
                                                      link's texts are the graph's)

Postings are blocked (`postings.py`): a query reads a term's whole list in a few numpy
decodes. Weights are BM25F's saturated term frequency with per-field weights and length
norms (FIELDS, `lexical_terms`) over fixed reference lengths, so a document's weights
never depend on the rest of the corpus and never need rewriting; only IDF (from N and df)
is corpus-wide, and it is read at query time.
`lexdoc` is the forward index: it tells a delete which keys to remove and lets the ranker
rescore a candidate exactly. A bulk load's (and a reindex's) new postings are held
(`Deferred`) and written once per list at the end of its transaction (`finish`). The group
(type or predicate id) rides in every value so that
WITH TYPE filters without touching the graph.
"""
from __future__ import annotations

import struct
from itertools import islice
from typing import Any, Callable, Iterable, Iterator, Mapping

import msgpack
import numpy as np

from nexus.errors import KipError
from nexus.store.bulk import gc_paused

from . import postings
from .lexical_bulk import KIND_BYTES, Buffered, Deferred, finish, put_columns
from .lexical_cols import NewConcepts, NewLinks, derive
from .lexical_entry import (LINK_HEADER, MARK, BeforeView, Entry, decode, entry_bytes,
                            entry_kind, full_bytes, graph_texts, link_doc, link_texts,
                            pending_bytes, pending_copy, vcrc_of)
from .lexical_names import capped
from .lexical_terms import (FIELDS, REF_WEIGHT, SINGLES, doc_names, doc_terms, drop_caches,
                            field_terms, field_weights, idf)
from .text import F_ENDPOINT, F_PREDICATE, KIND_CONCEPT, KIND_LINK, Doc, element_doc

_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_NAMEV = struct.Struct("<IB")

END_NAMES = 100_000     # link-end names remembered by one `write` (bounded in a big one)
# A write of at most SMALL_WRITE elements leaves its new documents *pending*: their forward
# entry is also written under a `q` key, and their terms reach the posting lists only when
# the pending ids span PENDING_MAX ids or more (or a bigger write runs), all in one fold.
# A span rather than a count: a write then reads the lowest pending id of each kind (two
# cursor positionings) instead of scanning every pending key; there are at most
# PENDING_MAX pending documents (~11 W2 upserts of a concept and two links).
# An agent's UPSERT of a concept and two links then writes three small keys instead of
# rewriting the last block and the df of each of ~20 terms (each on its own LMDB page);
# readers add the pending documents' postings (`pending_postings`) to the lists and dfs.
SMALL_WRITE = 16
WRITE_READS_MAX = 256       # ids of a write whose reads `write_reads` names (see there)
PENDING_MAX = 32



class _Writer:
    """Collects a transaction's posting changes per term, so that each term's list (and
    each counter) is rewritten once however many documents touch it."""

    def __init__(self, txn: Any, deferred: "Deferred | None" = None) -> None:
        self.txn = txn
        self.deferred = deferred
        self.lex = txn.aux("lex")
        self.fwd = txn.aux("lexdoc")
        self.ops: dict[bytes, dict[int, Any]] = {}
        self.count = [0, 0]
        # New name keys and forward entries, written by `flush` in one sorted insert per
        # table (a bulk load writes one of each per element: a checked Python call each
        # was the largest single cost of indexing a load). Each id is written at most once
        # per `write`, after any delete of its keys, so deferring the puts keeps the order.
        self.name_puts: list[tuple[bytes, bytes]] = []
        self.doc_puts: list[tuple[bytes, bytes]] = []
        # The same of new documents (keys that have no value yet: written by
        # `aux_put_new` where the store has it — PostgreSQL: by COPY).
        self.name_new: list[tuple[bytes, bytes]] = []
        self.doc_new: list[tuple[bytes, bytes]] = []
        # The postings of new documents (no entry before this write: a bulk load's), kept
        # as columns per kind — terms and weights in document order, and each document's
        # id, group and number of terms — and turned into each term's posting arrays by
        # one sort in `flush` (`_columns`), instead of a dict entry per posting.
        self.cols: tuple[tuple[list[str], list[float], list[int], list[int], list[int]],
                         ...] = tuple(([], [], [], [], []) for _ in KIND_BYTES)
        self.cleared: set[str] = set()      # link names whose keys were deleted

    def add(self, n: int, kb: bytes, group: int, terms: dict[str, float],
            names: list[str]) -> None:
        ops = self.ops
        for t, w in terms.items():
            tb = kb + t.encode()
            per = ops.get(tb)
            if per is None:
                per = ops[tb] = {}
            per[n] = (w, group)
        idb = _U64.pack(n)
        append = self.name_puts.append
        for i, nn in enumerate(names):
            if nn:
                append((b"n" + kb + nn.encode() + b"\x00" + idb,
                        _NAMEV.pack(group, 1 if i else 0)))

    def add_new(self, n: int, kind: int, group: int, terms: dict[str, float],
                names: list[str]) -> None:
        """`add` for a document that had no entry (so no postings): its postings go to the
        columns (see `cols`). Ids must come in ascending order, as `_write` gives them."""
        col = self.cols[kind]
        col[0].extend(terms)
        col[1].extend(terms.values())
        col[2].append(n)
        col[3].append(group)
        col[4].append(len(terms))
        idb = _U64.pack(n)
        kb = KIND_BYTES[kind]
        append = self.name_new.append
        for i, nn in enumerate(names):
            if nn:
                append((b"n" + kb + nn.encode() + b"\x00" + idb,
                        _NAMEV.pack(group, 1 if i else 0)))

    def _columns(self) -> dict[bytes, tuple[postings.Columns, int, int]]:
        """term key (kind byte + term) -> the new documents' postings of that term: a run
        [start, end) of a kind's columns (ids ascending in it). A term that `ops` also
        changes (a document of it updated or removed in the same write) has its new
        postings moved into `ops` instead, for `postings.apply` to do all of them."""
        out: dict[bytes, tuple[postings.Columns, int, int]] = {}
        for kind, (terms, weights, ids, groups, counts) in enumerate(self.cols):
            if not terms:
                continue
            kb = KIND_BYTES[kind]
            index: dict[str, int] = {}
            setd = index.setdefault
            codes = np.fromiter([setd(t, len(index)) for t in terms], dtype=np.int64,
                                count=len(terms))
            order = np.argsort(codes, kind="stable")    # stable: ids stay ascending
            reps = np.array(counts, dtype=np.int64)
            id_col = np.repeat(np.array(ids, dtype=np.uint64), reps)[order]
            group_col = np.repeat(np.array(groups, dtype=np.uint32), reps)[order]
            # (float64 -> float32 as `postings._arrays` rounds them: the same blocks)
            w_col = np.array(weights, dtype=np.float64).astype(np.float32)[order]
            sizes = np.bincount(codes, minlength=len(index))
            ends = np.cumsum(sizes)
            columns = postings.Columns(id_col, w_col, group_col, ends - sizes)
            ops = self.ops
            for t, end, size in zip(index, ends.tolist(), sizes.tolist()):
                start = end - size
                tb = kb + t.encode()
                per = ops.get(tb)
                if per is None:
                    out[tb] = (columns, start, end)
                    continue
                for i, w, g in zip(id_col[start:end].tolist(), w_col[start:end].tolist(),
                                   group_col[start:end].tolist()):
                    per[i] = (w, g)
        self.cols = tuple(([], [], [], [], []) for _ in KIND_BYTES)
        return out

    def remove(self, n: int, entry: Entry, keep: frozenset[str] = frozenset(),
               names: bool = True) -> None:
        """Drop `n` from the postings of its old terms, except `keep` (unchanged ones), and
        (unless `names` is False: they stay) its name keys."""
        kb = KIND_BYTES[entry.kind]
        ops = self.ops
        for t in entry.terms:
            if t in keep:
                continue
            tb = kb + t.encode()
            per = ops.get(tb)
            if per is None:
                per = ops[tb] = {}
            per.setdefault(n, None)
        if not names:
            return
        idb = _U64.pack(n)
        delete = self.lex.delete
        for nn in entry.names:
            if nn:
                delete(b"n" + kb + nn.encode() + b"\x00" + idb)
                if entry.kind == KIND_LINK:
                    self.cleared.add(nn)

    def flush(self) -> None:
        lex = self.lex
        if self.deferred is not None:
            # The new documents' postings wait for `finish` (see `Deferred`); the lists
            # of the terms `ops` changes are brought up to date now, as the df keys.
            self.deferred.take(self.cols)
            self.cols = tuple(([], [], [], [], []) for _ in KIND_BYTES)
        cols = self._columns()
        # What the loops below read, asked for at once (a round trip per read on
        # PostgreSQL, nothing on LMDB): each term's df and the last block of each list an
        # append may extend, and the document counts.
        lex.prefetch([b"d" + tb for tb in self.ops] + [b"d" + tb for tb in cols]
                     + [b"N" + KIND_BYTES[k] for k, d in enumerate(self.count) if d],
                     [b"t" + tb + b"\x00" for tb, ops in self.ops.items()
                      if None not in ops.values()] + [b"t" + tb + b"\x00" for tb in cols])
        # Keys known to have no value (`name_new`, `doc_new`, `fresh`) go in by
        # `aux_put_new` where the store has it (PostgreSQL: a COPY), else as the others.
        put_new = getattr(self.txn, "aux_put_new", None)
        apart = put_new is not None
        if self.name_puts or self.name_new or self.cleared:    # (links: `lexical_names`)
            self.name_puts, self.name_new = capped(self.txn, lex, self.name_puts,
                                                   self.name_new, self.cleared)
            self.cleared = set()
        if put_new is None:     # (LMDB: in the same sorted inserts as the others)
            put_new = self.txn.aux_put_many
            self.name_puts += self.name_new
            self.doc_puts += self.doc_new
            self.name_new, self.doc_new = [], []
        if self.name_puts:
            self.txn.aux_put_many("lex", self.name_puts)
            self.name_puts = []
        if self.doc_puts:
            self.txn.aux_put_many("lexdoc", self.doc_puts)
            self.doc_puts = []
        if self.name_new:
            put_new("lex", self.name_new)
            self.name_new = []
        if self.doc_new:
            put_new("lexdoc", self.doc_new)
            self.doc_new = []
        buf = Buffered(lex)
        fresh = Buffered(lex) if apart else buf
        for tb, ops in self.ops.items():
            key = b"d" + tb
            raw = lex.get(key)
            if raw is None and None not in ops.values():
                # A term without postings (no df key) gets its first list: no scan.
                delta = postings.create(buf, b"t" + tb + b"\x00", ops)
            else:
                delta = postings.apply(buf, b"t" + tb + b"\x00", ops)
            if delta:
                value = (_U32.unpack(raw)[0] if raw else 0) + delta
                if value > 0:
                    buf.put(key, _U32.pack(value))
                elif raw:
                    lex.delete(key)
        put_columns(lex, cols, buf, fresh)
        if buf.puts:
            self.txn.aux_put_many("lex", buf.puts.items())
        if apart and fresh.puts:
            put_new("lex", fresh.puts.items())
        for kind, delta in enumerate(self.count):
            if delta:
                key = b"N" + KIND_BYTES[kind]
                raw = lex.get(key)
                value = max(0, (_U64.unpack(raw)[0] if raw else 0) + delta)
                lex.put(key, _U64.pack(value))


def write(txn: Any, touched: Iterable[int], removed: Iterable[int],
          moved: Mapping[int, tuple[str, str]] | None = None,
          deferred: Deferred | None = None,
          known: Iterable[NewConcepts | NewLinks] = (),
          before: Mapping[int, Any] | None = None,
          before_attributes: Mapping[int, Any] | None = None) -> tuple[list[int], list[int]]:
    """Bring the postings of `touched` and `removed` element ids up to date in `txn`.

    Returns the ids whose vector texts changed (to embed) and the ids whose vectors
    must go: concepts only (links have no vectors: `vectors.doc_texts`). A rewrite that
    changes nothing searchable (a metadata-only update) costs one forward-index read and
    writes nothing.

    `moved` names touched links whose only searchable change since their documents were
    written is an end moved to another element (MERGE): id → (the endpoint text of the old
    end, of the new one). Their new entries are computed from the stored ones (`_moved`)
    instead of being derived again; the result is the same bytes.

    `deferred`: the new documents' postings are held there instead of written (see
    `Deferred`); the caller writes them with `finish` before the transaction commits.
    With it, the new elements `known` describes (a bulk load's columns) are derived from
    those columns (`lexical_cols`): the same rows, not read back one at a time.

    `before`: the heads the write deleted or repointed, as they were when this index last
    saw them (`WriteContext.before_heads`); a link whose entry is MARK has the postings of
    its texts in that graph (`lexical_entry.BeforeView`). A write that deletes or repoints
    a MARKed link without naming its old head is refused (RuntimeError: the store is left
    unchanged) rather than leave postings no entry accounts for. `before_attributes`: the
    attributes the write overwrote or deleted, likewise (`WriteContext.before_attributes`):
    a concept whose entry is in the derived layout had the postings of its document in
    that graph, which must match the entry's digest (else RuntimeError, as above).
    """
    with gc_paused():       # many short-lived objects, no cycles: no collection walks the heap
        return _write(txn, touched, removed, moved or {}, deferred, known, before or {},
                      before_attributes or {})


def _write(txn: Any, touched: Iterable[int], removed: Iterable[int],
           moved: Mapping[int, tuple[str, str]], deferred: Deferred | None = None,
           known: Iterable[NewConcepts | NewLinks] = (),
           before: Mapping[int, Any] = {}, before_attributes: Mapping[int, Any] = {}
           ) -> tuple[list[int], list[int]]:
    removed = list(removed)
    # A plain link's entry is MARK, a concept's derived (no terms), where the store's
    # reads are in-process lookups.
    mark = not txn.prefers_batches()
    view = BeforeView(txn, before, before_attributes)
    ends: dict[int, str] = {}           # link end -> its name (this snapshot's, no writes)

    def old_texts(n: int) -> tuple[int, str, str, str]:
        """What MARKed link `n`'s postings were derived from: its texts in the graph as
        the index last saw it."""
        if len(ends) > END_NAMES:
            ends.clear()
        got = graph_texts(view, n, ends)
        if got is None:
            raise RuntimeError(f"search: the link {n} whose postings are to change is "
                               "not in the graph nor among the heads the write changed")
        return got

    def old_entry(n: int, raw: bytes) -> Entry:
        """The stored entry `raw` of `n`, decoded (a MARK or a derived entry: from the
        graph it was written from)."""
        if raw == MARK:
            return Entry.of_texts(*old_texts(n))
        return Entry(raw, lambda: element_doc(view, n), strict=True)

    order = sorted(touched)
    if deferred and deferred.touches(order + removed):
        finish(txn, deferred)           # a held document changes: the lists first
    w = _Writer(txn, deferred)
    fwd = w.fwd
    lex = w.lex
    changed: list[int] = []
    gone: list[int] = []
    # The pending documents (see PENDING_MAX) this write knows of: id -> kind. Their
    # postings are not in the lists, so a change to one rewrites its entry and pending
    # key, never a list. Only the documents it writes are looked up (`is_pend`); the
    # lowest pending id of each kind tells whether a fold is due.
    pend: dict[int, int] = {}
    lowest = [_U64.unpack(k[2:])[0]
              for kb in KIND_BYTES for k, _ in islice(lex.scan(b"q" + kb), 1)]
    any_pending = bool(lowest)

    def is_pend(n: int, raw: bytes | None) -> bool:
        """Whether `n` (forward entry `raw`) is pending."""
        if n in pend:
            return True
        if raw is None or not any_pending:      # a pending document has an entry
            return False
        kind = entry_kind(raw)
        if lex.get(b"q" + KIND_BYTES[kind] + _U64.pack(n)) is None:
            return False
        pend[n] = kind
        return True

    def unpend(n: int, kind: int) -> None:
        del pend[n]
        lex.delete(b"q" + KIND_BYTES[kind] + _U64.pack(n))

    def forget(n: int, key: bytes, raw: bytes | None) -> None:
        """Drop an element that is no longer there (or no longer a document)."""
        if raw is not None:
            entry = old_entry(n, raw)
            if is_pend(n, raw):
                unpend(n, pend[n])
                w.remove(n, entry, frozenset(entry.terms))      # its name keys only
            else:
                w.remove(n, entry)
            w.count[entry.kind] -= 1
            fwd.delete(key)
            if entry.kind == KIND_CONCEPT:
                gone.append(n)

    # A small write (an agent's UPSERT) leaves its new documents pending instead of
    # appending to the posting list of each of their terms.
    small = len(order) + len(removed) <= SMALL_WRITE
    derived: list = []
    if known and deferred is not None and not small:
        order, derived = derive(txn, fwd, known, order, set(removed).union(moved), mark)
    fwd.prefetch([_U64.pack(n) for n in removed] + [_U64.pack(n) for n in order])
    prefetch = getattr(txn, "prefetch_elements", None)     # (PostgreSQL: see its doc)
    if prefetch is not None:
        prefetch(order)
        if any_pending:         # `is_pend`'s reads, at once (one round trip)
            lex.prefetch([b"q" + kb + _U64.pack(n) for n in removed + order
                          for kb in KIND_BYTES])
    for n in removed:
        key = _U64.pack(n)
        forget(n, key, fwd.get(key))
    plans: dict[tuple[str, str], _Move] = {}    # a MERGE moves its links the same way
    for n in order:
        if len(ends) > END_NAMES:
            ends.clear()
        key = _U64.pack(n)
        raw = fwd.get(key)
        texts = moved.get(n) if moved else None
        if texts is not None and raw is not None and not is_pend(n, raw):
            plan = plans.get(texts)
            if plan is None:
                plan = plans[texts] = _Move(w, texts)
            if _moved(plan, n, raw, old_texts, mark):
                continue
        doc = element_doc(txn, n, ends)
        if doc is None:
            forget(n, key, raw)
            continue
        terms = doc_terms(doc)
        names = all_names = doc_names(doc)
        vcrc = vcrc_of(doc)
        new = entry_bytes(doc, terms, names, vcrc, mark)
        old = None
        if raw == new:
            if raw != MARK or n not in before:
                continue                # (a MARKed link's texts change with its head only)
            old = old_entry(n, raw)
            if old.texts == link_texts(doc):
                continue
        was_pending = is_pend(n, raw)
        pending = small or was_pending
        if raw is not None:
            old = old_entry(n, raw) if old is None else old
            same_names = old.kind == doc.kind and old.group == doc.group and old.names == names
            if was_pending:
                # Its postings were never written: none to remove (names may be).
                unpend(n, old.kind)
                w.remove(n, old, frozenset(old.terms), not same_names)
            else:
                # Terms whose posting stays the same (a repointed link keeps its
                # predicate's and its other end's terms) are neither removed nor re-added:
                # each costs a rewrite of that term's postings list.
                keep = _unchanged(old, doc, terms)
                w.remove(n, old, keep, not same_names)
                if keep:
                    terms = {t: v for t, v in terms.items() if t not in keep}
                pending = False
            w.count[old.kind] -= 1
            vec_changed = doc.kind == KIND_CONCEPT and old.vcrc != vcrc
            if same_names:
                names = []
        else:
            vec_changed = doc.kind == KIND_CONCEPT
        if pending:
            pend[n] = doc.kind
            # (the pending copy holds a MARKed link's texts: readers take its postings
            # from it, as the fold does)
            lex.put(b"q" + KIND_BYTES[doc.kind] + key,
                    pending_bytes(doc, new, terms, all_names, vcrc))
            w.add(n, KIND_BYTES[doc.kind], doc.group, {}, names)
        elif raw is None:
            w.add_new(n, doc.kind, doc.group, terms, names)
        else:
            w.add(n, KIND_BYTES[doc.kind], doc.group, terms, names)
        w.count[doc.kind] += 1
        (w.doc_new if raw is None else w.doc_puts).append((key, new))
        if vec_changed:
            changed.append(n)
    for d in derived:                   # (deferred: `derived` is empty without it)
        deferred.take_derived(d)        # type: ignore[union-attr]
        w.count[d.kind] += len(d.ids)
        w.name_new += d.names
        w.doc_new += d.entries
        changed += d.vectors
    if derived:
        changed.sort()
    # Fold when the pending ids (those stored before this write, bounded below by
    # `lowest`, and this write's) span PENDING_MAX ids or more, or a bigger write runs.
    # The stored ones are read only now, once (their entries as pending, this write's
    # changes included: it deleted the keys of those it unpended).
    low = min(lowest + list(pend)) if lowest or pend else 0
    if (pend and max(pend) - low >= PENDING_MAX) or ((pend or any_pending) and not small):
        # Fold: the pending documents' postings go into their lists, all at once (each
        # term's list rewritten once for up to PENDING_MAX documents).
        for qkey, praw in sorted(lex.scan(b"q"), key=lambda kv: kv[0][2:]):
            n = _U64.unpack(qkey[2:])[0]
            entry = Entry(praw)
            w.add(n, qkey[1:2], entry.group, entry.terms, [])
            lex.delete(qkey)
    w.flush()
    return changed, gone


class _Move:
    """What moving a link end from an element shown as `texts[0]` to one shown as
    `texts[1]` does (a MERGE moves all of its links the same way)."""

    __slots__ = ("w", "texts", "same", "out", "into", "_pers", "pack", "clash")

    def __init__(self, w: _Writer, texts: tuple[str, str]) -> None:
        self.w = w
        self.texts = texts
        self.same = texts[0] == texts[1]
        # the old and the new end's field terms with their weights, where no other field
        # of the link has them (`field_weights`)
        self.out = field_weights(texts[0])
        self.into = field_weights(texts[1])
        self._pers: tuple[list[dict[int, Any]], list[tuple[float, dict[int, Any]]]] | None = None
        # one packer for the ~900 entries (`packb` makes one a call; the same bytes)
        self.pack = msgpack.Packer(use_bin_type=True).pack
        self.clash: dict[str, bool] = {}    # predicate text -> shares a term with an end

    def shares(self, field: int, text: str) -> bool:
        """Whether a term of `text` in `field` is among the old or the new end's terms."""
        out, into = self.out, self.into
        for t, _ in field_terms(field, text)[1]:
            if t in out or t in into:
                return True
        return False

    def postings(self) -> tuple[list[dict[int, Any]], list[tuple[float, dict[int, Any]]]]:
        """The writer's per-term op maps: the old end's terms the new one lacks (to
        delete), and the new end's terms whose weight differs from the old end's (to set).
        Made on first use: an empty op map must not reach `flush`."""
        if self._pers is None:
            ops, kb = self.w.ops, KIND_BYTES[KIND_LINK]
            out, into = self.out, self.into
            gone = [ops.setdefault(kb + t.encode(), {}) for t in out if t not in into]
            added = [(v, ops.setdefault(kb + t.encode(), {})) for t, v in into.items()
                     if out.get(t) != v]
            self._pers = (gone, added)
        return self._pers


def _moved(plan: _Move, n: int, raw: bytes,
           old_texts: Callable[[int], tuple[int, str, str, str]], mark: bool) -> bool:
    """Rewrite the entry and postings of link `n` whose end moved as `plan` says, from its
    stored entry `raw` in the link layout (`LINK_HEADER`) or MARK (its texts from the graph
    before the move: `old_texts`): its texts with the old end's replaced by the new one's,
    and the postings of the terms that change. Returns whether it did; not (derive it in
    full) for an entry in the full layout, or when neither end shows the old text."""
    if plan.same:
        return True                     # the same document (e.g. a higher-order end)
    if raw == MARK:
        group, pred, subj, obj = old_texts(n)
    elif raw[:1] == LINK_HEADER:
        group, pred, subj, obj = msgpack.unpackb(raw, raw=False)
    else:
        return False
    value = MARK if mark else None
    old_text, new_text = plan.texts
    if subj != old_text and obj != old_text:
        return False
    texts = (pred, new_text if subj == old_text else subj,
             new_text if obj == old_text else obj)
    if (subj == old_text) != (obj == old_text):
        # One end moved, and neither end's terms are in the fields that stay: the change
        # is the end field's alone (the weights of a term in two fields would need both).
        clash = plan.clash.get(pred)
        if clash is None:
            clash = plan.clash[pred] = plan.shares(F_PREDICATE, pred)
        if not clash and not plan.shares(F_ENDPOINT, obj if subj == old_text else subj):
            gone, added = plan.postings()
            for per in gone:
                per.setdefault(n, None)
            for v, per in added:
                per[n] = (v, group)
            plan.w.doc_puts.append((_U64.pack(n), value or plan.pack([group, *texts])))
            return True
    old = Entry.of_texts(group, pred, subj, obj)
    doc = link_doc(group, *texts)
    terms = doc_terms(doc)
    keep = _unchanged(old, doc, terms)
    w = plan.w
    w.remove(n, old, keep, False)
    w.add(n, KIND_BYTES[KIND_LINK], group, {t: v for t, v in terms.items() if t not in keep},
          [])
    w.doc_puts.append((_U64.pack(n), value or plan.pack([group, *texts])))
    return True


def _unchanged(old: Entry, doc: Doc, terms: dict[str, float]) -> frozenset[str]:
    """The terms whose stored posting (weight as a single float, group) would not change."""
    if old.kind != doc.kind or old.group != doc.group:
        return frozenset()
    before = old.terms
    single = SINGLES.get
    return frozenset(t for t, v in terms.items()
                     if t in before and before[t] == (single(v) or single(v)))


def clear(txn: Any, progress: Callable[[int], None] | None = None) -> None:
    """Remove every key of both tables (reindex)."""
    for table in ("lex", "lexdoc"):
        aux = txn.aux(table)
        keys = [k for k, _ in aux.scan()]
        for i, k in enumerate(keys):
            aux.delete(k)
            if progress and i % 50_000 == 0:
                progress(i)


# --- reading ----------------------------------------------------------------------------

def doc_count(txn: Any, kind: int) -> int:
    raw = txn.aux("lex").get(b"N" + KIND_BYTES[kind])
    return _U64.unpack(raw)[0] if raw else 0


def prefetch_counts(txn: Any, kind: int, terms: Iterable[str]) -> None:
    """Ask for the document count of `kind` and the df of each of `terms` at once (one
    round trip on PostgreSQL instead of one per term; nothing on LMDB)."""
    kb = KIND_BYTES[kind]
    txn.aux("lex").prefetch([b"N" + kb] + [b"d" + kb + t.encode() for t in terms])


def doc_freq(txn: Any, kind: int, term: str,
             pending: Mapping[str, list[tuple[int, float, int]]] | None = None) -> int:
    """The number of documents of `kind` with `term`, the pending ones included
    (`pending`: `pending_postings(txn, kind)`, read once by a caller asking for several
    terms; read here when not given)."""
    raw = txn.aux("lex").get(b"d" + KIND_BYTES[kind] + term.encode())
    if pending is None:
        pending = pending_postings(txn, kind)
    return (_U32.unpack(raw)[0] if raw else 0) + len(pending.get(term, ()))


def term_postings(txn: Any, kind: int, term: str, cap: int,
                  pending: Mapping[str, list[tuple[int, float, int]]] | None = None):
    """(ids, weights, groups, complete) of `term`'s postings (at most about `cap`), the
    pending documents' included (`pending`: as in `doc_freq`)."""
    ids, weights, groups, complete = postings.read(
        txn.aux("lex"), b"t" + KIND_BYTES[kind] + term.encode() + b"\x00", cap)
    if pending is None:
        pending = pending_postings(txn, kind)
    extra = pending.get(term)
    if not extra:
        return ids, weights, groups, complete
    if not complete:                # a cut list: only the pending ids within what was read
        extra = [p for p in extra if p[0] < int(ids[-1])]
        if not extra:
            return ids, weights, groups, complete
    ids = np.concatenate([ids, np.array([p[0] for p in extra], dtype=np.uint64)])
    weights = np.concatenate([weights, np.array([p[1] for p in extra], dtype=np.float32)
                              .astype(np.float16)])
    groups = np.concatenate([groups, np.array([p[2] for p in extra], dtype=np.uint32)])
    order = np.argsort(ids, kind="stable")
    return ids[order], weights[order], groups[order], complete


_PENDING: dict[tuple, dict[str, list[tuple[int, float, int]]]] = {}
_NO_PENDING: dict[str, list[tuple[int, float, int]]] = {}


def pending_postings(txn: Any, kind: int) -> dict[str, list[tuple[int, float, int]]]:
    """term -> [(id, weight, group)] of the pending documents of `kind` (at most about
    PENDING_MAX: one short scan; decoded once per distinct pending set)."""
    pairs = tuple(txn.aux("lex").scan(b"q" + KIND_BYTES[kind]))
    if not pairs:
        return _NO_PENDING
    got = _PENDING.get(pairs)
    if got is None:
        got = {}
        for key, raw in pairs:
            n = _U64.unpack(key[2:])[0]
            e = Entry(raw)
            for t, v in e.terms.items():
                got.setdefault(t, []).append((n, v, e.group))
        if len(_PENDING) >= 64:
            _PENDING.clear()
        _PENDING[pairs] = got
    return got


def names_from(txn: Any, kind: int, norm: str, cap: int, group: int | None = None
               ) -> Iterator[tuple[int, str, int]]:
    """(id, normalised name, flag) of names/aliases starting with `norm` (exact ones first),
    at most `cap` scanned; flag 0 = the name, 1 = an alias."""
    prefix = b"n" + KIND_BYTES[kind] + norm.encode()
    for key, value in islice(txn.aux("lex").scan(prefix), cap):
        g, flag = _NAMEV.unpack(value)
        if group is None or g == group:
            yield _U64.unpack(key[-8:])[0], key[2:-9].decode(), flag


def entry(txn: Any, n: int) -> Entry | None:
    """`n`'s forward entry, decoded (None: none; a MARK whose link `txn` does not have —
    a write's transaction that removed it — decodes as a link without terms)."""
    raw = txn.aux("lexdoc").get(_U64.pack(n))
    if raw is None:
        return None
    return decode(txn, n, raw)


def prefetch(txn: Any, ids: list[int]) -> None:
    """Read the forward entries of `ids` at once, and their heads where the store reads
    in batches (PostgreSQL: two statements instead of two per id; nothing elsewhere)."""
    if not ids:
        return
    txn.aux("lexdoc").prefetch([_U64.pack(n) for n in ids])
    heads = getattr(txn, "prefetch_elements", None)
    if heads is not None:
        heads(ids, ends=False)


def write_reads(touched: Iterable[int], removed: Iterable[int]
                ) -> list[tuple[str, list[bytes], list[bytes], list[bytes]]]:
    """What `write(txn, touched, removed)` starts by reading of the aux tables, for a store
    that reads in batches to ask ahead with other reads (PostgreSQL: `prefetch_aux_many`,
    one statement): the forward entries of the ids, their pending keys, the document
    counts (all a small write, which leaves its documents pending, reads of the postings
    when it flushes), and the first pending document of each kind. As (table, keys,
    last_under, first_under); nothing for a write of more than WRITE_READS_MAX ids (it
    reads its own, in chunks)."""
    ids = sorted(set(touched).union(removed))
    if len(ids) > WRITE_READS_MAX:
        return []
    packed = [_U64.pack(n) for n in ids]
    return [("lexdoc", packed, [], []),
            ("lex", [b"q" + kb + k for k in packed for kb in KIND_BYTES]
             + [b"N" + kb for kb in KIND_BYTES], [], [b"q" + kb for kb in KIND_BYTES])]


def names(txn: Any, n: int) -> list[str]:
    """The normalised name and aliases of `n` ([] if not indexed), without decoding the
    terms (they come last in the entry for this reason)."""
    raw = txn.aux("lexdoc").get(_U64.pack(n))
    if raw is None:
        return []
    if raw[:1] == LINK_HEADER:         # the predicate's name
        pred = msgpack.unpackb(raw, raw=False)[1]
        return doc_names(Doc(n, KIND_LINK, 0, [pred]))
    if raw == MARK:
        head = txn.head(n)
        if head is None:
            return []
        return doc_names(Doc(n, KIND_LINK, 0, [txn.symbol_text(head.predicate_id)]))
    # (a buffer of the entry's size: the default 1 MiB one was mapped and unmapped per
    # call, ~20 us of a W2 upsert's gram update)
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=len(raw))
    unpacker.feed(raw)
    unpacker.read_array_header()
    unpacker.skip()
    unpacker.skip()
    return unpacker.unpack()


def indexed_ids(txn: Any) -> Iterator[int]:
    """Ids in the forward index, ascending."""
    for key, _ in txn.aux("lexdoc").scan():
        yield _U64.unpack(key)[0]


def stale(txn: Any, n: int) -> bool:
    """Whether the forward entry of existing element `n` differs from what it should be (an
    element whose record cannot be decoded has no document it should have: stale, so a
    deep check reports it beside the store's undecodable value instead of failing)."""
    try:
        doc = element_doc(txn, n)
    except KipError:
        return True
    raw = txn.aux("lexdoc").get(_U64.pack(n))
    if doc is None or raw is None:
        return (doc is None) != (raw is None)
    if raw == MARK:     # derived from the graph: a link with no other field, both ends there
        head = txn.head(n)
        return link_texts(doc) is None or txn.head(head.subject) is None or \
            txn.head(head.object) is None
    terms, names = doc_terms(doc), doc_names(doc)
    if raw == entry_bytes(doc, terms, names) or raw == entry_bytes(doc, terms, names,
                                                                   mark=True):
        return False    # (either layout of a concept's entry is good: `lexical_entry`)
    if doc.kind != KIND_LINK or raw[:1] == LINK_HEADER:
        return True
    # A link's entry written before the link layout is in the full layout (as good: it
    # has the same terms, weights and names), and one written before FORMAT 2 of the
    # vector files has its text's checksum where 0 is written now (`vcrc_of`): as good,
    # since nothing reads it.
    try:
        vcrc = msgpack.unpackb(raw, raw=False)[3]
    except Exception:  # noqa: BLE001 - a damaged entry is stale
        return True
    return not isinstance(vcrc, int) or raw != full_bytes(doc, terms, names, vcrc)


__all__ = ["write", "write_reads", "Deferred", "finish", "clear", "doc_count", "doc_freq",
           "term_postings", "pending_postings", "prefetch_counts", "names_from", "entry",
           "indexed_ids", "stale", "idf", "REF_WEIGHT", "KIND_CONCEPT", "Entry", "FIELDS",
           "doc_terms", "doc_names", "drop_caches", "decode", "pending_copy", "MARK"]
