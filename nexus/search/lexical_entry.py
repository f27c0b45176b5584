"""The lexical index's forward entries (`lexdoc` values): their layouts, packing and decoding.

Owns what one element's forward entry holds and how it is told apart from the others
(`lexical` owns the tables and keeps them in step with the graph):

* the full layout, msgpack [kind, group, [normname...], vector-text crc, [term, w, ...]]:
  every concept's, a link's with attribute text, every link's written before the link
  layout;
* the link layout, msgpack [predicate id, predicate, subject text, object text]: a link
  whose document is its predicate and end names alone, its terms derived from those texts
  with the same function (`Entry`), so the same weights.
"""
from __future__ import annotations

import zlib
from typing import Any

import msgpack

from .lexical_terms import doc_names, doc_terms, single
from .text import F_ENDPOINT, F_PREDICATE, KIND_CONCEPT, KIND_LINK, Doc


def entry_kind(raw: bytes) -> int:
    """The kind of a forward entry, without decoding the rest (a msgpack array of 5 whose
    first item is a small int, or a link's array of 4)."""
    if raw[:1] == b"\x95" and raw[1] in (0, 1):
        return raw[1]
    if raw[:1] == LINK_HEADER:
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
    in the link layout (see `LINK_HEADER`), else None."""
    __slots__ = ("kind", "group", "terms", "names", "vcrc", "texts")

    def __init__(self, raw: bytes) -> None:
        if raw[:1] == LINK_HEADER:
            group, pred, subj, obj = msgpack.unpackb(raw, raw=False)
            doc = link_doc(group, pred, subj, obj)
            self.kind, self.group, self.vcrc = KIND_LINK, group, 0
            self.names = doc_names(doc)
            # as stored in the full layout: single floats
            self.terms: dict[Any, float] = {t: single(v) for t, v in doc_terms(doc).items()}
            self.texts: tuple[str, str, str] | None = (pred, subj, obj)
            return
        kind, group, names, vcrc, flat = msgpack.unpackb(raw, raw=False)
        self.kind, self.group, self.names, self.vcrc = kind, group, names, vcrc
        self.terms = dict(zip(flat[0::2], flat[1::2]))
        self.texts = None


def vcrc_of(doc: Doc) -> int:
    """The checksum of what the vector index embeds for `doc`: 0 for a link (links have
    no vectors; entries written before FORMAT 2 of the vector files carry a checksum of
    their text, which nothing reads: `stale` accepts both)."""
    if doc.kind != KIND_CONCEPT:
        return 0
    return zlib.crc32("\x1f".join(doc.vec_texts + [doc.context]).encode())


def entry_bytes(doc: Doc, terms: dict[str, float], names: list[str],
                 vcrc: int | None = None) -> bytes:
    texts = link_texts(doc)
    if texts is not None:
        return msgpack.packb([doc.group, *texts], use_bin_type=True)
    return full_bytes(doc, terms, names, vcrc)


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
