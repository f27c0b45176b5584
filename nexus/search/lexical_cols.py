"""A bulk load's lexical rows derived from the columns it wrote (`derive`).

Owns the columns a bulk load hands the lexical index for a chunk of elements it created
(`NewConcepts`, `NewLinks`: ids, types or predicates, names, the links' end names,
attributes — what `bulk_import` has just written, so nothing is read back), and deriving
from them what `lexical.write` derives for each such element one document at a time:
the BM25F postings (`lexical_terms.doc_terms`' weights, the same doubles), the name keys
and the forward entries (`Derived`), byte for byte the same rows.

Why: deriving the documents one at a time (read the element back, build its document, sum
its fields' terms, pack its entry) was ~3/4 of a load's lexical cost. Here each distinct
field text (an end's name, a predicate, a type) is tokenised once for the whole load (the
load's table of counted texts, `lexical_terms.LoadTexts`: a concept's name is counted once
for its own document and its links' endpoint fields in every later chunk), and the
documents' postings are gathered from its columns by numpy index arithmetic over the
chunk; the per-document Python left is packing the forward entries. A link whose attributes have
text is not derived here (`derive` leaves it to the per-document path).

Exactness: a term in one field of a document has the weight of that field's text alone
(its occurrences added to 0.0 one by one, as `doc_terms` does); a term in several fields
has its occurrences added in field order, one rank of fields at a time over all such
documents at once — the same additions in the same order; saturation is the same float64
expression. Key layout: `lexical`'s module doc.
"""
from __future__ import annotations

import dataclasses
import struct
import zlib
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Iterable, Mapping, Sequence

import msgpack
import numpy as np

from .lexical_entry import MARK, digest_of
from .lexical_names import LINK_NAMES
from .lexical_terms import FIELDS, K1, LOAD_TEXTS, cached_norm_name, doc_names
from .text import (F_ALIAS, F_ENDPOINT, F_NAME, F_PREDICATE, F_TEXT, F_TYPE, KIND_CONCEPT,
                   KIND_LINK, Doc, attribute_text, concept_fields, concept_texts_many,
                   norm_names)

_NAMEV = struct.Struct("<IB")
_KB = (b"c", b"p")


@dataclass(frozen=True, slots=True)
class NewConcepts:
    """Concepts a bulk load created in this transaction: ids ascending."""
    ids: Sequence[int]
    type_ids: Sequence[int]
    type_names: Mapping[int, str]           # type id -> the type's name
    names: Sequence[str]
    attributes: Sequence[dict | None]
    # `texts()` once worked out: the lexical derivation and the vectors embedded ahead
    # (`ahead.Ahead.stage`) of the same chunk both read it.
    memo: list = dataclasses.field(default_factory=list, compare=False, repr=False)

    def texts(self) -> list[tuple[list[str], str, str]]:
        """`text.concept_texts` of every concept (aliases, attribute text, context), in
        `ids` order: `concept_texts_many`, worked out at the first call."""
        if not self.memo:
            self.memo.append(concept_texts_many(list(self.names), list(self.attributes)))
        got: list[tuple[list[str], str, str]] = self.memo[0]
        return got


@dataclass(frozen=True, slots=True)
class NewLinks:
    """Links a bulk load created in this transaction between concepts: ids ascending;
    `subject_names` / `object_names` are the end concepts' names (what a link's document
    shows for a concept end)."""
    ids: Sequence[int]
    subjects: Sequence[int]
    predicate_ids: Sequence[int]
    objects: Sequence[int]
    predicate_names: Mapping[int, str]      # predicate id -> its name
    subject_names: Sequence[str]
    object_names: Sequence[str]
    attributes: Sequence[dict | None] | None


@dataclass(slots=True)
class Derived:
    """The lexical rows of a chunk's new documents of one kind: per document (ids
    ascending) its id, group and number of postings; per posting (documents in order) its
    term (an index into `terms`) and its weight; the name keys and forward entries to
    write; the ids whose vector texts are new (concepts)."""
    kind: int
    ids: np.ndarray
    groups: np.ndarray
    counts: np.ndarray
    terms: list[str]
    codes: np.ndarray
    weights: np.ndarray
    names: list[tuple[bytes, bytes]]
    entries: list[tuple[bytes, bytes]]
    vectors: list[int]


def derive(txn: Any, fwd: Any, known: Iterable[NewConcepts | NewLinks], order: list[int],
           skip: set[int], mark: bool = False) -> tuple[list[int], list[Derived]]:
    """The documents of `order` (sorted ids `lexical.write` is to derive) that `known`
    describes, derived here: (the ids left to derive one at a time, the rows derived).
    An id in `skip` (removed, or moved, by the same write), one with a forward entry, or a
    link with attribute text is left. `mark`: a link's forward entry is MARK
    (`lexical_entry`), not its texts, and a concept's in the derived layout, not its terms."""
    wanted = set(order)
    first_new = getattr(txn, "first_new_id", None)
    fresh = first_new() if first_new is not None else None
    out: list[Derived] = []
    for cols in known:
        ids = list(cols.ids)
        if wanted.issuperset(ids) and skip.isdisjoint(ids):     # (a load's chunk)
            take = list(range(len(ids)))
        else:
            take = [i for i, n in enumerate(ids) if n in wanted and n not in skip]
        if fresh is None or (take and ids[take[0]] < fresh):
            # (a store that cannot tell which ids are new: the entries are read)
            known_absent = fresh if fresh is not None else 1 << 63
            take = [i for i in take if ids[i] >= known_absent
                    or fwd.get(ids[i].to_bytes(8, "big")) is None]
        if isinstance(cols, NewLinks) and cols.attributes is not None:
            attrs = cols.attributes
            take = [i for i in take if not attribute_text(attrs[i] or {})]
        if not take:
            continue
        got = _concepts(cols, take, mark) if isinstance(cols, NewConcepts) else \
            _links(cols, take, mark)
        out.append(got)
    if not out:
        return order, out
    done = np.unique(np.concatenate([d.ids for d in out]))
    if len(done) == len(wanted):        # (all of `order`: what is derived is among it)
        return [], out
    left = set(done.tolist())
    return [n for n in order if n not in left], out


def _id_bytes(ids: np.ndarray) -> list[bytes]:
    raw = ids.astype(">u8").tobytes()
    return [raw[i:i + 8] for i in range(0, len(raw), 8)]


def _concepts(cols: NewConcepts, take: list[int], mark: bool = False) -> Derived:
    ids = [cols.ids[i] for i in take]
    names = [cols.names[i] for i in take]
    groups = [cols.type_ids[i] for i in take]
    every = cols.texts()
    texts = every if len(take) == len(every) else [every[i] for i in take]
    fts: dict[tuple[int, str], int] = {}
    setd = fts.setdefault
    name_slot = [setd((F_NAME, nm), len(fts)) for nm in names]
    widest = max(len(t[0]) for t in texts)
    alias_slots = [[setd((F_ALIAS, t[0][k]), len(fts)) if k < len(t[0]) else -1
                    for t in texts] for k in range(widest)]
    type_slot = [setd((F_TYPE, cols.type_names[g]), len(fts)) for g in groups]
    text_slot = [setd((F_TEXT, t[1]), len(fts)) if t[1] else -1 for t in texts]
    slots = [name_slot, *alias_slots, type_slot, text_slot]
    terms, codes, weights, counts = _postings(slots, list(fts), len(ids))
    id_arr = np.array(ids, dtype=np.uint64)
    # per posting its term and weight, interleaved: a document's `flat` is one slice
    flat_all: list[Any] = [None] * (0 if mark else 2 * len(codes))
    if not mark:        # (the derived layout holds no terms)
        flat_all[0::2] = map(terms.__getitem__, codes.tolist())
        flat_all[1::2] = weights.tolist()
    pack = msgpack.Packer(use_bin_type=True, use_single_float=True).pack
    entries: list[tuple[bytes, bytes]] = []
    name_rows: list[tuple[bytes, bytes]] = []
    at = 0
    for n, idb, name, norm, (aliases, text, context), group, k in zip(
            ids, _id_bytes(id_arr), names, norm_names(names), texts, groups,
            counts.tolist()):
        flat = flat_all[at:at + 2 * k]
        at += 2 * k
        # (`doc_names`: of a name alone, its normal form even when empty)
        nms = doc_names(Doc(n, KIND_CONCEPT, group, [name] + aliases)) if aliases else \
            [norm]
        vcrc = zlib.crc32("\x1f".join([name] + aliases + [context]).encode())
        if mark:        # the derived layout: a digest of the fields (`lexical_entry`)
            fields = concept_fields(name, aliases, cols.type_names[group], text)
            entries.append((idb, pack([KIND_CONCEPT, group, nms, vcrc,
                                       digest_of(KIND_CONCEPT, group, fields)])))
        else:
            entries.append((idb, pack([KIND_CONCEPT, group, nms, vcrc, flat])))
        for i, nn in enumerate(nms):
            if nn:
                name_rows.append((b"nc" + nn.encode() + b"\x00" + idb,
                                  _NAMEV.pack(group, 1 if i else 0)))
    return Derived(KIND_CONCEPT, id_arr, np.array(groups, dtype=np.uint32), counts,
                   terms, codes, weights, name_rows, entries, ids)


def _links(cols: NewLinks, take: list[int], mark: bool = False) -> Derived:
    idx = np.array(take, dtype=np.int64)
    ids = np.asarray(cols.ids, dtype=np.uint64)[idx] if not isinstance(cols.ids, range) \
        else np.arange(cols.ids.start, cols.ids.stop, dtype=np.uint64)[idx]
    pids = np.asarray(cols.predicate_ids, dtype=np.int64)[idx]
    ends = np.concatenate([np.asarray(cols.subjects, dtype=np.int64)[idx],
                           np.asarray(cols.objects, dtype=np.int64)[idx]])
    if len(take) == len(cols.subject_names):        # (all of them: `take` is a range)
        end_names = [*cols.subject_names, *cols.object_names]
    else:
        end_names = [cols.subject_names[i] for i in take] + \
            [cols.object_names[i] for i in take]
    # field texts: the predicates (their names), then the distinct ends (their names)
    upids, pinv = np.unique(pids, return_inverse=True)
    pnames = [cols.predicate_names[p] for p in upids.tolist()]
    uends, first, einv = np.unique(ends, return_index=True, return_inverse=True)
    fts = [(F_PREDICATE, p) for p in pnames] + \
        [(F_ENDPOINT, end_names[i]) for i in first.tolist()]
    # (two ends with the same name are two field texts with the same terms: harmless)
    count = len(take)
    eslot = einv.astype(np.int64) + len(pnames)
    slots = [pinv.astype(np.int64), eslot[:count], eslot[count:]]
    terms, codes, weights, counts = _postings(slots, fts, count)
    idbs = _id_bytes(ids)
    groups = pids.tolist()
    if mark:
        entries = [(idb, MARK) for idb in idbs]
    else:
        pack = msgpack.Packer(use_bin_type=True).pack
        pl = [pnames[i] for i in pinv.tolist()]
        sn, on = end_names[:count], end_names[count:]
        entries = list(zip(idbs, map(pack, map(list, zip(groups, pl, sn, on)))))
    # a link's names: its predicate's (`doc_names` of [predicate]), flag 0; of each name
    # only the chunk's first LINK_NAMES links (`lexical_names`: a load's ids are above
    # every listed one, so no later one of the chunk can be listed)
    norms = [cached_norm_name(name) for name in pnames]
    nn_codes = dict.fromkeys(norms)
    nn_index = dict(zip(nn_codes, range(len(nn_codes))))
    code = np.array([nn_index[nn] for nn in norms], dtype=np.int64)[pinv]
    name_rows = []
    for nn, c in nn_index.items():
        if not nn:
            continue
        head = b"np" + nn.encode() + b"\x00"
        for i in np.flatnonzero(code == c)[:LINK_NAMES].tolist():
            name_rows.append((head + idbs[i], _NAMEV.pack(groups[i], 0)))
    return Derived(KIND_LINK, ids, pids.astype(np.uint32), counts, terms, codes, weights,
                   name_rows, entries, [])


def _postings(slots: list[Any], fts: list[tuple[int, str]], docs: int
              ) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """(terms in sorted order, per posting its term's index and weight — documents in
    order, a document's terms sorted —, per document its number of postings) of `docs`
    documents whose fields, in field order, are the field texts `slots[k][d]` of `fts`
    (-1: document d has no k-th field)."""
    table = LOAD_TEXTS
    field_of = np.fromiter(map(itemgetter(0), fts), dtype=np.int64, count=len(fts))
    kinds = np.unique(field_of).tolist()
    rows = np.zeros(len(fts), dtype=np.int64)
    with table.lock:
        table.reserve(len(fts))
        for camel in (False, True):
            at = np.flatnonzero(np.isin(field_of,
                                        [f for f in kinds if FIELDS[f][3] == camel]))
            if len(at):
                rows[at] = table.rows_of(camel, [fts[i][1] for i in at.tolist()])
        starts, sizes, all_codes, all_reps = table.arrays()
        all_terms = table.terms
    first_pair = starts[rows]
    lens = starts[rows + 1] - first_pair
    off = np.zeros(len(fts) + 1, dtype=np.int64)
    np.cumsum(lens, out=off[1:])
    total_pairs = int(off[-1])
    pair = np.repeat(first_pair - off[:-1], lens) + np.arange(total_pairs, dtype=np.int64)
    e_code = all_codes[pair]
    reps = all_reps[pair]
    # a field text's length norm: `field_terms`' float64 expression, over the array
    size = sizes[rows].astype(np.float64)
    ft_norm = np.zeros(len(fts), dtype=np.float64)
    for field in kinds:
        w, b, avg, _ = FIELDS[field]
        at = np.flatnonzero((field_of == field) & (size > 0))
        ft_norm[at] = w / (1.0 - b + b * size[at] / avg)
    norms = np.repeat(ft_norm, lens)
    # a term's weight in one field: its occurrences added to 0.0 one at a time, as
    # `doc_terms` adds them (0.0 + norm is norm)
    vals = norms.copy()
    for j in range(1, int(reps.max()) if len(reps) else 0):
        more = reps > j
        vals[more] += norms[more]
    # the chunk's terms: the codes used (a mark per code of the table: no sort), ranked
    # by their strings
    seen = np.zeros(len(all_terms), dtype=bool)
    seen[e_code] = True
    used = np.flatnonzero(seen)
    words = list(map(all_terms.__getitem__, used.tolist()))
    by_word = sorted(range(len(words)), key=words.__getitem__)
    terms = [words[i] for i in by_word]
    rank = np.empty(len(all_terms), dtype=np.int64)
    rank[used[np.array(by_word, dtype=np.int64)]] = np.arange(len(used), dtype=np.int64)
    term_of = rank[e_code]
    p_doc, p_entry, p_slot = [], [], []
    for k, column in enumerate(slots):
        ft = np.asarray(column, dtype=np.int64)
        has = np.flatnonzero(ft >= 0)
        ft = ft[has]
        n = lens[ft]
        total = int(n.sum())
        if not total:
            continue
        starts_k = np.repeat(off[ft] - (np.cumsum(n) - n), n)
        p_entry.append(starts_k + np.arange(total, dtype=np.int64))
        p_doc.append(np.repeat(has, n))
        p_slot.append(np.full(total, k, dtype=np.int64))
    if not p_doc:
        return terms, np.zeros(0, np.int32), np.zeros(0, np.float64), \
            np.zeros(docs, np.int64)
    doc = np.concatenate(p_doc)
    entry = np.concatenate(p_entry)
    slot = np.concatenate(p_slot)
    term = term_of[entry]
    # by document, term, then field order (one key: a (document, term, field) is unique)
    order = np.argsort((doc * len(terms) + term) * len(slots) + slot)
    doc, term, entry = doc[order], term[order], entry[order]
    first = np.ones(len(doc), dtype=bool)
    first[1:] = (doc[1:] != doc[:-1]) | (term[1:] != term[:-1])
    group = np.cumsum(first) - 1
    acc = vals[entry[first]]
    if not first.all():
        # A term in several fields of a document: its later fields' occurrences added
        # to what the earlier ones summed, one addition at a time, in field order.
        starts_at = np.flatnonzero(first)
        pos = np.arange(len(doc)) - starts_at[group]    # rank of the field in its group
        for r in range(1, int(pos.max()) + 1):
            sel = np.flatnonzero(pos == r)
            g, e = group[sel], entry[sel]
            for j in range(int(reps[e].max())):
                live = reps[e] > j
                acc[g[live]] += norms[e[live]]
    weights = acc * (K1 + 1.0) / (acc + K1)         # `saturate`, over the array
    counts = np.bincount(doc[first], minlength=docs).astype(np.int64)
    return terms, term[first].astype(np.int32), weights, counts


__all__ = ["NewConcepts", "NewLinks", "Derived", "derive"]
