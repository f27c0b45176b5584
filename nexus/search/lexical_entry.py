"""The lexical index's forward entries (`lexdoc` values): their layouts, packing and decoding.

Owns what one element's forward entry holds and how it is told apart from the others
(`lexical` owns the tables and keeps them in step with the graph):

* the full layout, msgpack [kind, group, [normname...], vector-text crc, [term, w, ...]]:
  every concept's, a link's with attribute text, every link's written before the link
  layout;
* the link layout, msgpack [predicate id, predicate, subject text, object text]: a link
  whose document is its predicate and end names alone, its terms derived from those texts
  with the same function (`Entry`), so the same weights (PostgreSQL's, and LMDB's before
  MARK);
* MARK: such a link on LMDB, whose texts are derived from the graph (`Entry.of_link`);
* the derived layout, msgpack [kind, group, [normname...], vector-text crc, digest]: a
  concept's on LMDB, whose terms and weights are derived from its document (`derived_bytes`).
"""
from __future__ import annotations

import hashlib
import zlib
from typing import Any, Callable, Mapping

import msgpack

from .lexical_terms import doc_names, doc_terms, single
from ..store.protocol import LinkHead
from .text import (F_ENDPOINT, F_PREDICATE, KIND_CONCEPT, KIND_LINK, Doc, element_doc,
                   end_names)


def entry_kind(raw: bytes) -> int:
    """The kind of a forward entry, without decoding the rest (a msgpack array of 5 whose
    first item is a small int, a link's array of 4, or MARK)."""
    if raw[:1] == b"\x95" and raw[1] in (0, 1):
        return raw[1]
    if raw[:1] == LINK_HEADER or raw == MARK:
        return KIND_LINK
    kind: int = Entry(raw).kind
    return kind


# A link's forward entry, when its document is its predicate and end names alone (every
# link without attribute text): msgpack [predicate id, predicate, subject text, object
# text] — the texts its document was derived from, ~40 bytes instead of ~100 for its terms
# and weights, which are derived again from them (`Entry`) with the same function, so the
# same weights. The texts are what a delete, a rename or a merge of an end needs to know
# which postings the link has. Told apart from the full layout (an array of 5) by the
# array header.
LINK_HEADER = b"\x94"

# A link's forward entry on a store whose reads are in-process lookups (LMDB): not even its
# texts, since the graph holds them (its predicate's and its ends' names, none of which an
# element's life changes) — msgpack nil, 1 byte, where the texts took ~40 (503,834 links at
# N=100k). What the link's postings are is derived from the graph as the index last saw it:
# by a reader, from its snapshot (in step with the index); by a write, from the heads its
# session deleted or repointed (`WriteContext.before_heads`) over the graph, which the
# write has changed (`BeforeView`). PostgreSQL, where each such read is a round trip,
# keeps the texts (`LINK_HEADER`).
MARK = b"\xc0"


# A concept's forward entry on a store whose reads are in-process lookups (LMDB): the full
# layout's kind, group, names and vector-text crc, and in place of its terms and weights
# (~150 of its ~180 bytes at N=100k) an 8-byte digest of its document's fields (msgpack bin
# 8: told from the full layout's list by its type). Its terms are derived from the
# document (`doc_terms`, the same function, so the same single-float weights): by a
# reader, from its snapshot (in step with the index); by a write, from the graph as the
# index last saw it — the attributes the write overwrote or deleted
# (`WriteContext.before_attributes`) over the transaction's graph (`BeforeView`), checked
# against the digest: a write whose old document does not match refuses (RuntimeError: the
# transaction rolls back) rather than remove postings the concept never had. The names and
# crc stay: SEARCH reads a leader's names, and the gram index and the vector queue a
# rewritten concept's old ones, without deriving its document.
DIGEST_BYTES = 8


def fields_digest(doc: Doc) -> bytes:
    """The digest of what `doc`'s terms are derived from: its kind, group and fields."""
    return digest_of(doc.kind, doc.group, doc.fields)


def digest_of(kind: int, group: int, fields: list[tuple[int, str]]) -> bytes:
    """`fields_digest` of a document of `kind` and `group` with those fields."""
    text = "".join([f"\x1e{field}\x1f{text}" for field, text in fields])
    return hashlib.blake2b(f"{kind}\x1e{group}{text}".encode(),
                           digest_size=DIGEST_BYTES).digest()


def derived_bytes(doc: Doc, names: list[str], vcrc: int) -> bytes:
    """A concept's forward entry in the derived layout (`fields_digest`)."""
    return msgpack.packb([doc.kind, doc.group, names, vcrc, fields_digest(doc)],
                         use_bin_type=True)


def is_derived(raw: bytes) -> bool:
    """Whether forward entry `raw` is in the derived layout."""
    return raw[-DIGEST_BYTES - 2:-DIGEST_BYTES] == b"\xc4\x08" and raw[:1] == b"\x95" \
        and type(msgpack.unpackb(raw, raw=False)[4]) is bytes


def singles(doc: Doc) -> dict[str, float]:
    """`doc`'s terms with their weights as the full layout stores them (single floats)."""
    return {t: single(v) for t, v in doc_terms(doc).items()}


def link_texts(doc: Doc) -> tuple[str, str, str] | None:
    """(predicate, subject, object) of a link document that holds those fields alone."""
    if doc.kind != KIND_LINK or len(doc.fields) != 3:
        return None
    (fp, pred), (fs, subj), (fo, obj) = doc.fields
    if fp != F_PREDICATE or fs != F_ENDPOINT or fo != F_ENDPOINT or doc.names != [pred]:
        return None
    return pred, subj, obj


def link_doc(group: int, pred: str, subj: str, obj: str) -> Doc:
    """The document of a link with those texts (as `element_doc` makes it)."""
    return Doc(0, KIND_LINK, group, [pred],
               [(F_PREDICATE, pred), (F_ENDPOINT, subj), (F_ENDPOINT, obj)])


class Entry:
    """A decoded forward-index entry. `texts`: a link entry's (predicate, subject, object)
    in the link layout (see `LINK_HEADER`), else None. An entry in the derived layout
    takes its terms from the document `derive` gives (None: its element is gone, so no
    terms; with `strict`, refused — as is a document whose fields do not match the
    digest)."""
    __slots__ = ("kind", "group", "terms", "names", "vcrc", "texts")

    def __init__(self, raw: bytes, derive: Callable[[], Doc | None] | None = None,
                 strict: bool = False) -> None:
        if raw[:1] == LINK_HEADER:
            group, pred, subj, obj = msgpack.unpackb(raw, raw=False)
            self._texts(group, pred, subj, obj)
            return
        if raw == MARK:
            raise ValueError("a link's MARK decodes from the graph (`of_link`)")
        kind, group, names, vcrc, flat = msgpack.unpackb(raw, raw=False)
        self.kind, self.group, self.names, self.vcrc = kind, group, names, vcrc
        self.texts: tuple[str, str, str] | None = None
        if type(flat) is bytes:         # the derived layout
            if derive is None:
                raise ValueError("a concept's derived entry takes its terms from its "
                                 "document")
            doc = derive()
            if strict and (doc is None or fields_digest(doc) != flat):
                raise RuntimeError("search: the indexed text of a concept whose postings "
                                   "are to change is not in the graph nor among the "
                                   "attributes the write changed")
            self.terms: dict[Any, float] = {} if doc is None else singles(doc)
            return
        self.terms = dict(zip(flat[0::2], flat[1::2]))

    def _texts(self, group: int, pred: str, subj: str, obj: str) -> None:
        doc = link_doc(group, pred, subj, obj)
        self.kind, self.group, self.vcrc = KIND_LINK, group, 0
        self.names = doc_names(doc)
        # as stored in the full layout: single floats
        self.terms = {t: single(v) for t, v in doc_terms(doc).items()}
        self.texts = (pred, subj, obj)

    @classmethod
    def of_link(cls, txn: Any, n: int, ends: dict[int, str] | None = None
                ) -> "Entry | None":
        """The entry a MARK stands for: link `n`'s texts as `txn` shows them (None: `txn`
        has no link `n`). `ends`: as in `element_doc`."""
        got = graph_texts(txn, n, ends)
        return None if got is None else cls.of_texts(*got)

    @classmethod
    def of_texts(cls, group: int, pred: str, subj: str, obj: str) -> "Entry":
        """The entry of a link with those texts (as its link layout decodes)."""
        self = cls.__new__(cls)
        self._texts(group, pred, subj, obj)
        return self


def graph_texts(txn: Any, n: int, ends: dict[int, str] | None = None
                ) -> tuple[int, str, str, str] | None:
    """(predicate id, predicate, subject text, object text) of link `n` in `txn` (None: no
    such link): what its MARK stands for."""
    head = txn.head(n)
    if head is None or type(head) is not LinkHead:
        return None
    return (head.predicate_id, txn.symbol_text(head.predicate_id),
            *end_names(txn, head, ends))


def vcrc_of(doc: Doc) -> int:
    """The checksum of what the vector index embeds for `doc`: 0 for a link (links have
    no vectors; entries written before FORMAT 2 of the vector files carry a checksum of
    their text, which nothing reads: `stale` accepts both)."""
    if doc.kind != KIND_CONCEPT:
        return 0
    return zlib.crc32("\x1f".join(doc.vec_texts + [doc.context]).encode())


def entry_bytes(doc: Doc, terms: dict[str, float], names: list[str],
                vcrc: int | None = None, mark: bool = False) -> bytes:
    """`doc`'s forward entry: a link's MARK (with `mark`) or texts when its document is
    those texts alone, a concept's derived layout (with `mark`), else the full layout."""
    texts = link_texts(doc)
    if texts is not None:
        return MARK if mark else texts_bytes(doc.group, texts)
    if mark and doc.kind == KIND_CONCEPT:
        return derived_bytes(doc, names, vcrc_of(doc) if vcrc is None else vcrc)
    return full_bytes(doc, terms, names, vcrc)


def texts_bytes(group: int, texts: tuple[str, str, str]) -> bytes:
    """A link's entry in the link layout (`LINK_HEADER`)."""
    return msgpack.packb([group, *texts], use_bin_type=True)


def full_bytes(doc: Doc, terms: dict[str, float], names: list[str],
               vcrc: int | None = None) -> bytes:
    """A forward entry in the full layout (every concept's; a link's with attribute
    text; every link's before the link layout)."""
    flat: list[Any] = []
    for t in sorted(terms):
        flat.append(t)
        flat.append(terms[t])
    if vcrc is None:
        vcrc = vcrc_of(doc)
    return pack(doc.kind, doc.group, names, vcrc, flat)


def pack(kind: int, group: int, names: list[str], vcrc: int, flat: list[Any]) -> bytes:
    # Single floats: 5 bytes a weight, and the same bytes for the same document every time
    # (write() skips documents whose entry is unchanged).
    return msgpack.packb([kind, group, names, vcrc, flat], use_bin_type=True,
                         use_single_float=True)


class BeforeView:
    """The graph as the lexical index last saw it, inside a write that changed it: the
    heads the write deleted or repointed, and the attributes it overwrote or deleted, over
    the transaction's own (for `Entry.of_link`: names and predicates never change, so an
    id's endpoint text is the same in both; for a concept's derived entry, `element_doc`)."""

    __slots__ = ("txn", "heads", "attrs")

    def __init__(self, txn: Any, heads: Mapping[int, Any],
                 attrs: Mapping[int, Any] | None = None) -> None:
        self.txn = txn
        self.heads = heads
        self.attrs = attrs or {}

    def head(self, n: int) -> Any:
        head = self.heads.get(n)
        return self.txn.head(n) if head is None else head

    def attributes(self, n: int) -> Any:
        got = self.attrs.get(n)
        return self.txn.attributes(n) if got is None else got

    def symbol_text(self, sid: int) -> str:
        text: str = self.txn.symbol_text(sid)
        return text


def decode(txn: Any, n: int, raw: bytes, ends: dict[int, str] | None = None) -> Entry:
    """The forward entry `raw` of `n` in `txn`'s snapshot, decoded (a MARK or a derived
    entry: from the graph, which a reader's snapshot has in step with it; one whose
    element `txn` does not have — a write's transaction that removed it — without
    terms)."""
    if raw != MARK:
        return Entry(raw, lambda: element_doc(txn, n, ends))
    got = Entry.of_link(txn, n, ends)
    return Entry.of_texts(0, "", "", "") if got is None else got


def pending_copy(raw: bytes, got: Entry) -> bytes:
    """What the pending copy (`q` key) of the document with forward entry `raw` (decoded:
    `got`) holds: the entry, a MARKed link's texts, or a derived entry's full layout."""
    if raw == MARK:
        return raw if got.texts is None else texts_bytes(got.group, got.texts)
    if got.kind != KIND_CONCEPT or not is_derived(raw):
        return raw
    flat: list[Any] = []
    for t in sorted(got.terms):
        flat.append(t)
        flat.append(got.terms[t])
    return pack(got.kind, got.group, got.names, got.vcrc, flat)


def pending_bytes(doc: Doc, new: bytes, terms: dict[str, float], names: list[str],
                  vcrc: int) -> bytes:
    """The pending copy (`q` key) of `doc`, whose forward entry is `new` (its `terms`,
    `names`, `vcrc`): the entry, a MARKed link's texts, or a derived entry's full layout
    (readers take a pending document's postings from its copy)."""
    if new == MARK:
        texts = link_texts(doc)
        return new if texts is None else texts_bytes(doc.group, texts)
    if doc.kind == KIND_CONCEPT:      # (a full entry's own bytes)
        return full_bytes(doc, terms, names, vcrc)
    return new
