"""Term weights of the lexical index: a document's BM25F terms and weights (`doc_terms`),
its normalised names (`doc_names`), IDF, and the single-float form weights are stored in.

Owns the field weights and length norms (FIELDS), the bounded caches of field texts and
names that make deriving a document cheap when its texts recur (a link's predicate and end
names), and a bulk load's table of its counted texts by columns (`LoadTexts`, for
`lexical_cols`); `lexical` writes and reads the postings these weights go into.
"""
from __future__ import annotations

import math
import struct
import threading
from collections import Counter
from itertools import chain, repeat

import numpy as np

from .text import (F_ALIAS, F_ENDPOINT, F_NAME, F_PREDICATE, F_TEXT, F_TYPE, Doc, norm_name,
                   tokens, tokens_many)

K1 = 1.2
MAX_TOKENS_PER_FIELD = 400
# field kind → (weight, b, reference length, split camelCase). A word in the name says much
# more about what a node *is* than the same word deep in its description.
FIELDS = {
    F_NAME: (3.0, 0.5, 3.0, True),
    F_ALIAS: (2.5, 0.5, 3.0, True),
    F_TYPE: (0.5, 0.0, 1.0, True),
    F_TEXT: (1.0, 0.75, 40.0, False),
    F_PREDICATE: (2.5, 0.5, 2.0, True),
    F_ENDPOINT: (1.5, 0.5, 3.0, True),
}


def saturate(tf: float) -> float:
    return tf * (K1 + 1.0) / (tf + K1)


def _ref_weight(field: int) -> float:
    w, b, avg, _ = FIELDS[field]
    return saturate(w / (1.0 - b + b / avg))


# The weight of a term that is the whole name: a match "as strong as it gets", used to
# express a query's lexical score as a fraction in [0, 1].
REF_WEIGHT = (_ref_weight(F_NAME), _ref_weight(F_PREDICATE))


def doc_terms(doc: Doc) -> dict[str, float]:
    """term → BM25F weight in (0, K1+1) for one document."""
    tfn: dict[str, float] = {}
    get = tfn.get
    for field, text in doc.fields:
        norm, counts = field_terms(field, text)
        for t, c in counts:
            v = get(t, 0.0) + norm
            while c > 1:            # the same additions, in the same order, as one per token
                v += norm
                c -= 1
            tfn[t] = v
    return {t: saturate(v) for t, v in tfn.items()}


# Field texts recur (a link's predicate and end names, type names): their tokens and length
# norm are computed once. Bounded: emptied when full.
FIELD_CACHE: dict[tuple[int, str], tuple[float, tuple]] = {}
NAME_CACHE: dict[str, str] = {}
CACHE_LIMIT = 100_000


def field_terms(field: int, text: str) -> tuple[float, tuple]:
    """(norm, ((term, occurrences), ...)) of one field's text, terms in first-seen order."""
    key = (field, text)
    hit = FIELD_CACHE.get(key)
    if hit is None:
        w, b, avg, camel = FIELDS[field]
        size, counted = _counted(text, camel)
        norm = w / (1.0 - b + b * size / avg) if size else 0.0
        hit = (norm, counted)
        if len(FIELD_CACHE) >= CACHE_LIMIT:
            FIELD_CACHE.clear()
        FIELD_CACHE[key] = hit
    return hit


# A text's tokens counted, by text and camelCase splitting: the same name is a concept's
# name field and its links' endpoint fields (tokenised once). Bounded as the others.
COUNT_CACHE: dict[tuple[bool, str], tuple[int, tuple]] = {}


def count_text(text: str, camel: bool) -> tuple[int, tuple]:
    """(number of tokens, ((term, occurrences), ...) in first-seen order) of `text`,
    computed (not cached)."""
    toks = tokens(text, camel=camel)[:MAX_TOKENS_PER_FIELD]
    return len(toks), tuple(Counter(toks).items())      # (first-seen order)


def _counted(text: str, camel: bool) -> tuple[int, tuple]:
    """(number of tokens, ((term, occurrences), ...) in first-seen order) of `text`."""
    key = (camel, text)
    hit = COUNT_CACHE.get(key)
    if hit is None:
        hit = count_text(text, camel)
        if len(COUNT_CACHE) >= CACHE_LIMIT:
            COUNT_CACHE.clear()
        COUNT_CACHE[key] = hit
    return hit


def cached_norm_name(name: str) -> str:
    nn = NAME_CACHE.get(name)
    if nn is None:
        nn = norm_name(name)
        if len(NAME_CACHE) >= CACHE_LIMIT:
            NAME_CACHE.clear()
        NAME_CACHE[name] = nn
    return nn


def drop_caches() -> None:
    """Empty the caches of field terms and names. Each holds up to
    CACHE_LIMIT entries of its texts (~1 KB an entry with its terms): a bulk load of 100k
    concepts fills them with texts that will not recur soon, and the process kept ~100 MB
    of them after the load (`SearchService.bulk_loading` calls this when a load ends)."""
    FIELD_CACHE.clear()
    COUNT_CACHE.clear()
    NAME_CACHE.clear()
    FIELD_WEIGHTS.clear()
    with LOAD_TEXTS.lock:
        LOAD_TEXTS.clear()


def doc_names(doc: Doc) -> list[str]:
    out: list[str] = []
    for name in doc.names:
        nn = cached_norm_name(name)
        if nn and nn not in out:
            out.append(nn)
        elif not out:
            out.append(nn)      # keep index 0 = the name, even when it normalises to ""
    return out


def idf(n_docs: int, df: int) -> float:
    return math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))


_F32 = struct.Struct("<f")


SINGLES: dict[float, float] = {}       # weight -> as stored (a single float); weights recur


def single(v: float) -> float:
    s = SINGLES.get(v)
    if s is None:
        if len(SINGLES) >= CACHE_LIMIT:
            SINGLES.clear()
        s = SINGLES[v] = _F32.unpack(_F32.pack(v))[0]
    return s


FIELD_WEIGHTS: dict[str, dict[str, float]] = {}


def field_weights(text: str) -> dict[str, float]:
    """The stored weights (single floats) of an endpoint field's terms, as `doc_terms`
    computes them for a document where no other field has those terms."""
    hit = FIELD_WEIGHTS.get(text)
    if hit is None:
        norm, counts = field_terms(F_ENDPOINT, text)
        hit = {}
        for t, c in counts:
            v = 0.0 + norm
            while c > 1:
                v += norm
                c -= 1
            hit[t] = single(saturate(v))
        if len(FIELD_WEIGHTS) >= CACHE_LIMIT:
            FIELD_WEIGHTS.clear()
        FIELD_WEIGHTS[text] = hit
    return hit


class LoadTexts:
    """The counted field texts of one bulk load, by columns (`lexical_cols`): each distinct
    (camelCase splitting, text) a row — its number of tokens and its (term, occurrences)
    pairs, terms as codes into `terms` —, so that a text met in several chunks of a load
    (a concept's name is its links' endpoint text) is tokenised once and its postings are
    gathered with numpy. Not a bounded cache emptied when full: it lives for the load
    (`drop_caches` empties it when the load ends; past ROWS_MAX texts it starts over).

    A chunk's new texts are counted together (`tokens_many`, their terms coded and counted
    with numpy) and appended to arrays that grow in place (`_Column`: capacity doubled when
    full), which a chunk reads as views (`arrays`): no Python object per term occurrence,
    and no copy of the whole table per chunk that adds texts (which, joined anew each time,
    made a 100k load's derivation grow with the square of its size)."""

    ROWS_MAX = 2_000_000

    __slots__ = ("lock", "rows", "terms", "term_index", "size", "_starts", "_sizes",
                 "_codes", "_reps")

    def __init__(self) -> None:
        # held by a reader from its first row to its `arrays` (two loads' writes, or a
        # load's end, at once); `clear` makes new lists, so what a reader took stays whole
        self.lock = threading.Lock()
        self.clear()

    def __len__(self) -> int:
        return self.size

    def clear(self) -> None:
        self.rows: tuple[dict[str, int], dict[str, int]] = ({}, {})    # by camel
        self.terms: list[str] = []
        self.term_index: dict[str, int] = {}
        self.size = 0                           # rows
        # per row its first pair (and one past the last row's pairs) and its token count;
        # per pair its term code and occurrences
        self._starts = _Column(np.zeros(1, dtype=np.int64))
        self._sizes = _Column()
        self._codes = _Column()
        self._reps = _Column()

    def reserve(self, n: int) -> None:
        """Make room for `n` more texts (before taking the rows of a chunk's texts)."""
        if self.size + n > self.ROWS_MAX:
            self.clear()

    def rows_of(self, camel: bool, texts: list[str]) -> list[int]:
        """The rows of `texts` (each counted, and added, when it is new to the load)."""
        rows = self.rows[camel]
        out = list(map(rows.get, texts, repeat(-1, len(texts))))
        if -1 in out:
            self._add(camel, list(dict.fromkeys(
                [t for t, r in zip(texts, out) if r < 0])))
            out = list(map(rows.__getitem__, texts))
        return out

    def _add(self, camel: bool, texts: list[str]) -> None:
        """Count `texts` (distinct, none in the table yet) into new rows: `count_text` of
        each, its pairs in the same (first-seen) order."""
        toks = tokens_many(texts, camel)
        cap = MAX_TOKENS_PER_FIELD
        sizes = np.fromiter(map(len, toks), dtype=np.int64, count=len(toks))
        if len(sizes) and sizes.max() > cap:
            for i in np.flatnonzero(sizes > cap).tolist():
                toks[i] = toks[i][:cap]
            np.minimum(sizes, cap, out=sizes)
        flat = list(chain.from_iterable(toks))
        index = self.term_index
        new = set(flat).difference(index)
        if new:
            # (sorted: the codes do not depend on the order of a set)
            self.terms.extend(sorted(new))
            index.update(zip(self.terms[len(index):], range(len(index), len(self.terms))))
        codes = np.fromiter(map(index.__getitem__, flat), dtype=np.int64, count=len(flat))
        # (text, term) pairs: the distinct ones, each with its occurrences, ordered by
        # text, then by the position of the term's first token in it
        span = max(len(index), 1)
        key = np.repeat(np.arange(len(texts), dtype=np.int64), sizes) * span + codes
        uniq, first, reps = np.unique(key, return_index=True, return_counts=True)
        order = np.argsort(first, kind="stable")
        uniq = uniq[order]
        text_of = uniq // span
        self._codes.append(uniq - text_of * span)
        self._reps.append(reps[order].astype(np.int64))
        lens = np.bincount(text_of, minlength=len(texts)).astype(np.int64)
        self._starts.append(int(self._starts.view()[-1]) + np.cumsum(lens))
        self._sizes.append(sizes)
        self.rows[camel].update(zip(texts, range(self.size, self.size + len(texts))))
        self.size += len(texts)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(starts: row -> its first pair, n rows + 1; sizes; codes; reps), as arrays:
        views of what the table holds now (a later `_add` writes past their ends only)."""
        return (self._starts.view(), self._sizes.view(), self._codes.view(),
                self._reps.view())


class _Column:
    """An int64 array appended to in place: `view` is its filled part. Growing copies it
    into twice the room, so appending n values costs O(n) over the column's life; a view
    taken before stays valid (its values are never written again)."""

    __slots__ = ("data", "used")

    def __init__(self, start: np.ndarray | None = None) -> None:
        self.data = start if start is not None else np.zeros(0, dtype=np.int64)
        self.used = len(self.data)

    def append(self, values: np.ndarray) -> None:
        end = self.used + len(values)
        if end > len(self.data):
            grown = np.empty(max(end, 2 * len(self.data), 1024), dtype=np.int64)
            grown[:self.used] = self.data[:self.used]
            self.data = grown
        self.data[self.used:end] = values
        self.used = end

    def view(self) -> np.ndarray:
        return self.data[:self.used]


LOAD_TEXTS = LoadTexts()
