"""Typo-tolerant candidates for keyword SEARCH: character-trigram postings of the concepts'
names and aliases (LMDB, the default "hashed-ngrams" embedder).

Owns the aux table "gram": for each distinct trigram of a normalised name or alias
(`trigrams`: the word-boundary 3-grams the keyword Dice also uses, "<qu", "qua", ..., "z>")
a blocked posting list (`postings`) of the *names* that have it. A posting's id is
`concept id * SLOTS + slot` (slot 0 the name, then the aliases, in `lexical.names` order),
its weight the number of distinct trigrams of that name, its group the concept's type id
(WITH TYPE filters on it); blocks in the narrow layout (`postings`' `pack=False`: a typo
query reads many whole lists). The key `KEY_BUILT` marks a table that covers every concept.

A small write's new names are held *pending* instead (`PENDING`: one key per concept, its
type id and names, written in the same transaction): an agent's UPSERT of one concept then
writes one key, not the last block of each of its ~15-25 trigram lists (W2, bench/RESULTS.md
"Pending gram postings"). Their postings are in no list until a later write folds them all
in (when the pending ids span PENDING_MAX ids or more, or a bigger write runs), and a query
reads them with the lists (`pending`), `check --deep` compares them with the names as it
does the lists' postings.

Why postings instead of the n-gram HNSW index it replaces: they are written in the data's
own write transaction, like the lexical postings (no background indexer, no catch-up: a
typo finds what was just written, and `check` compares them with the data), a bulk load
writes them column-wise, sorted, once per transaction (`Batch`), and they are exact: a
query's candidates are the names sharing the most trigrams with it, counted in numpy,
never a neighbourhood an approximate graph search happened to reach. Building the HNSW
index was about half of a bulk load's wall time with SEARCH (bench/RESULTS.md, "Bulk load
with SEARCH").

A query (`Bound.knn`) reads the postings of its first QUERY_GRAMS trigrams, leaving out
those in more than GRAM_CAP names unless all are, counts the trigrams each name shares with
it, keeps the POOL best names by the trigram Dice `2·shared / (|query| + |name|)` and
returns their concepts with that estimate; keyword ranking (`query.run`) then scores its
leaders exactly (the 2+3-gram Dice of `text.grams`). `similarity` is that exact score.
"""
from __future__ import annotations

import struct
from itertools import chain, islice
from typing import Any, Callable, Iterable, Iterator

import msgpack
import numpy as np

from . import lexical, postings
from .embed import Embedder
from .lexical_bulk import Buffered, Tail
from .text import KIND_CONCEPT, dice, grams, norm_grams, tokens
from ..store.protocol import ConceptHead

TABLE = "gram"
KEY_BUILT = b"\x00B"        # the table covers every concept (written by `rebuild`)
SLOTS = 8                   # a name + at most 7 aliases (text.MAX_ALIASES)
GRAM_CAP = 4096             # a trigram with more postings is common: left out (`Bound.knn`)
POOL = 64                   # names kept by the trigram estimate, best first
QUERY_GRAMS = 64            # a query's trigrams read at most (its first ones: a SEARCH text
#                             may have 4,096 characters, each list up to GRAM_CAP postings)
SMALL_BATCH = 2048          # new postings written as per-list operations below this (`Batch`)
SMALL_CONCEPTS = 64         # new concepts whose postings `Batch.write` lists in Python
PENDING = b"\x00P"          # + id (u64 BE) -> [type id, names]: a pending concept (module doc)
SMALL_WRITE = 16            # a write of at most this many new concepts leaves them pending
PENDING_MAX = 32            # pending ids spanning this many ids or more are folded in
_U64 = struct.Struct(">Q")


def trigrams(norm: str) -> list[str]:
    """The distinct word-boundary trigrams of a name normalised by `norm_name`."""
    out: dict[str, None] = {}
    for w in norm.split(" ") if norm else ():
        padded = f"<{w}>"
        for k in range(len(padded) - 2):
            out[padded[k:k + 3]] = None
    return list(out)


def _postings_of(n: int, names: list[str]) -> Iterator[tuple[str, int, int]]:
    """(trigram, posting key, weight) of every posting concept `n`'s names give (what
    `_columns` gives for many concepts at once, as columns: a bulk load's hot loop)."""
    for slot, name in enumerate(names[:SLOTS]):
        gs = trigrams(name)
        for g in gs:
            yield g, n * SLOTS + slot, len(gs)


def _prefix(gram: str) -> bytes:
    return gram.encode() + b"\0"        # (no gram holds a NUL: no list is another's prefix)


class Batch:
    """The gram postings one write transaction changes, written by `write` before it
    commits. New names (ids never indexed before) are held as columns and written sorted,
    appended to each list once; changes to indexed ones as per-list operations."""

    __slots__ = ("ops", "new", "added")

    def __init__(self) -> None:
        # The names of the concepts this transaction created, as the batch holds them (no
        # entry of theirs is read back: `indexed_names`).
        self.new: dict[int, list[str]] = {}
        self.ops: dict[str, dict[int, postings.Op]] = {}
        # The concepts `add_new` was given (id -> type id, names): a small write's pending.
        self.added: dict[int, tuple[int, list[str]]] = {}

    def __bool__(self) -> bool:
        return bool(self.added or self.ops)

    def add_new(self, n: int, group: int, names: list[str]) -> None:
        """Postings of concept `n`, which has none yet (held as given until `write`: a
        small write's go pending, no trigram derived)."""
        self.new[n] = names
        self.added[n] = (group, names)

    def change(self, n: int, group: int, old: list[str], new: list[str]) -> None:
        """Concept `n`'s postings of names `old` replaced by those of `new`."""
        for slot, name in enumerate(old[:SLOTS]):
            key = n * SLOTS + slot
            for g in trigrams(name):
                self.ops.setdefault(g, {})[key] = None
        for g, key, weight in _postings_of(n, new):
            self.ops.setdefault(g, {})[key] = (float(weight), group)

    def write(self, txn: Any, pend: bool = True) -> None:
        """Write what the batch holds into `txn` and empty it: a small write's new names
        (no other change) as pending entries (`pend`), unless that makes the pending ids
        span PENDING_MAX or more: then, as for any bigger write, the stored pending entries
        are folded into the lists with the batch's own postings."""
        if not self:
            return
        aux = txn.aux(TABLE)
        # Only ids this transaction created go pending: each is above every id pending
        # before it, so the lowest stored one (one cursor positioning) gives the span.
        low = [_U64.unpack(k[2:])[0] for k, _ in islice(aux.scan(PENDING), 1)]
        first_new = getattr(txn, "first_new_id", None)
        if (pend and self.added and not self.ops and len(self.added) <= SMALL_WRITE
                and first_new is not None and min(self.added) >= first_new()
                and max(self.added) - min([*low, *self.added]) < PENDING_MAX):
            for n, (group, names) in self.added.items():
                if names:
                    aux.put(PENDING + _U64.pack(n), msgpack.packb([group, names[:SLOTS]]))
            self.__init__()     # type: ignore[misc]
            return
        if low:
            # Fold: the pending names' postings go into their lists with this write's.
            for key, raw in list(aux.scan(PENDING)):
                group, names = msgpack.unpackb(raw)
                self.added.setdefault(_U64.unpack(key[2:])[0], (group, names))
                aux.delete(key)
        # A small write's few names: per-list operations (`postings.apply` splices a
        # block's bytes) cost less than the numpy steps per list of the columns: one KML
        # UPSERT of a concept, ~25 lists, 0.3 -> 0.1 ms (W2, bench/RESULTS.md); its
        # postings are listed in Python (`_postings_of`), a bulk load's as columns.
        rows: Any = None
        if len(self.added) <= SMALL_CONCEPTS:
            rows = [(g, key, w, group) for n, (group, names) in self.added.items()
                    for g, key, w in _postings_of(n, names)]
            codes = np.zeros(0, dtype=np.int64)
        else:
            names, codes, keys, weights, groups = _columns(self.added)
            if len(codes) < SMALL_BATCH:
                rows = zip([names[c] for c in codes.tolist()], keys.tolist(),
                           weights.tolist(), groups.tolist())
                codes = codes[:0]
        if rows is not None and (len(self.added) > SMALL_CONCEPTS or
                                 len(rows) < SMALL_BATCH):
            merged: dict[str, dict[int, postings.Op]] = {}
            for gram, key, w, t in rows:
                merged.setdefault(gram, {})[key] = (float(w), t)
            for gram, later in self.ops.items():    # (changes after the new names)
                merged.setdefault(gram, {}).update(later)
            self.ops = merged
        elif rows is not None:      # (few concepts with many names: columns after all)
            names, codes, keys, weights, groups = _columns(self.added)
        if len(codes):
            keys = keys.astype(np.uint64)
            order = np.lexsort((keys, codes))
            codes, keys = codes[order], keys[order]
            weights = weights.astype(np.float32)[order]
            groups = groups.astype(np.uint32)[order]
            bounds = np.flatnonzero(np.diff(codes)) + 1
            starts = [0, *bounds.tolist()]
            ends = [*bounds.tolist(), len(codes)]
            columns = postings.Columns(keys, weights, groups, np.asarray(starts), pack=False)
            # The lists in key order, their blocks put at once, appended: the lists there
            # are (up to MOVE_MAX keys: a first load's, the bootstrap's) taken out and
            # put back with them (`lexical_bulk.Tail`), as `lexical.finish` does. Put in
            # the trigrams' first-seen order between those, the pages LMDB inserted
            # into were split in half (a 100k load's table 0.57 full).
            tail = Tail.take(aux, b"\x01", TABLE)
            buf = Buffered(tail if tail is not None else aux)
            runs = sorted((_prefix(names[int(codes[s])]), s, e) for s, e in zip(starts, ends))
            for prefix, s, e in runs:
                if columns.append(buf, prefix, s, e) is None:
                    postings.apply(buf, prefix, {
                        int(k): (float(w), int(g))
                        for k, w, g in zip(keys[s:e], weights[s:e], groups[s:e])}, pack=False)
            if tail is not None:
                tail.write(txn, buf.puts, last=True)
            elif buf.puts:
                txn.aux_put_many(TABLE, buf.puts.items())
        for g, ops in sorted(self.ops.items()):      # (after the columns: later changes)
            postings.apply(aux, _prefix(g), ops, pack=False)
        self.__init__()     # type: ignore[misc]


def _columns(added: dict[int, tuple[int, list[str]]]
             ) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The postings of the names of `added` (id -> type id, names), as columns: (the
    trigrams in first-seen order, then per posting its trigram's index there, its key,
    weight and group), postings in concept, slot, then trigram order (`_postings_of`'s,
    all at once: a bulk load's 100k names without a Python step per posting)."""
    slots = [names[:SLOTS] for _, names in added.values()]
    per_name = [trigrams(name) for names in slots for name in names]
    keys = [n * SLOTS + slot for n, names in zip(added, slots) for slot in range(len(names))]
    lens = np.fromiter(map(len, per_name), dtype=np.int64, count=len(per_name))
    name_groups = np.repeat(np.fromiter([g for g, _ in added.values()], dtype=np.int64,
                                        count=len(added)),
                            np.fromiter(map(len, slots), dtype=np.int64, count=len(slots)))
    flat = list(chain.from_iterable(per_name))
    vocab = list(dict.fromkeys(flat))
    index = dict(zip(vocab, range(len(vocab))))
    codes = np.fromiter(map(index.__getitem__, flat), dtype=np.int64, count=len(flat))
    return (vocab, codes, np.repeat(np.array(keys, dtype=np.int64), lens),
            np.repeat(lens, lens), np.repeat(name_groups, lens))


def indexed_names(txn: Any, batch: Batch, touched: Iterable[int], removed: Iterable[int]
                  ) -> dict[int, list[str]]:
    """Before `lexical.write`: the names the gram postings (with `batch`, the write's
    own) hold for the concepts among `touched` (existing elements) and `removed` (their
    forward entries still there). An id this transaction created has only what `batch`
    holds: nothing is read for it (a bulk load's new elements)."""
    out: dict[int, list[str]] = {}
    first_new = getattr(txn, "first_new_id", None)
    fresh = first_new() if first_new is not None else 1 << 63
    new = batch.new
    for n in touched:
        if n >= fresh:
            got = new.get(n)
            if got is not None:
                out[n] = got
            continue
        if type(txn.head(n)) is ConceptHead:
            names = lexical.names(txn, n)
            if names:
                out[n] = names
    for n in removed:
        if n >= fresh:
            got = new.pop(n, None)
            if got is not None:
                out[n] = got
            continue
        e = lexical.entry(txn, n)
        if e is not None and e.kind == KIND_CONCEPT and e.names:
            out[n] = list(e.names)
    return out


def update(txn: Any, batch: Batch, changed: Iterable[int], gone: Iterable[int],
           before: dict[int, list[str]]) -> None:
    """After `lexical.write`: record in `batch` the postings of the concepts whose names
    changed (`changed`: their forward entries now current) or that went (`gone`), given
    the names they had `before`."""
    for n in changed:
        head = txn.head(n)
        if type(head) is not ConceptHead:
            continue
        new = lexical.names(txn, n)
        old = before.get(n)
        if n in batch.new:
            batch.new[n] = new
        if old is None:
            batch.add_new(n, head.type_id, new)
        elif old != new:
            if n not in batch.new and _unpend(txn, n):     # (its postings in no list)
                batch.change(n, head.type_id, [], new)
            else:
                batch.change(n, head.type_id, old, new)
    for n in gone:
        old = before.get(n)
        if old and (n in batch.new or not _unpend(txn, n)):
            batch.change(n, 0, old, [])


def _unpend(txn: Any, n: int) -> bool:
    """Delete concept `n`'s pending entry; whether it had one."""
    aux = txn.aux(TABLE)
    key = PENDING + _U64.pack(n)
    if aux.get(key) is None:
        return False
    aux.delete(key)
    return True


def pending(txn: Any) -> Iterable[tuple[int, int, list[str]]]:
    """(concept id, type id, names) of the pending concepts, in id order."""
    for key, raw in txn.aux(TABLE).scan(PENDING):
        group, names = msgpack.unpackb(raw)
        yield _U64.unpack(key[2:])[0], group, names


def clear(txn: Any) -> None:
    """Delete every key of the table."""
    aux = txn.aux(TABLE)
    keys = [k for k, _ in aux.scan()]
    for k in keys:
        aux.delete(k)


def rebuild(txn: Any, progress: Callable[[str, int, int], None] | None = None,
            chunk: int = 16_384) -> None:
    """Clear the table and write it again from the lexical forward index of `txn` (which
    must be complete: `reindex` rebuilds that first), then mark it built. `progress`
    gets ("grams", concepts done, concepts)."""
    clear(txn)
    batch = Batch()
    total = txn.count_concepts()
    done = 0
    for ids in _chunks(lexical.indexed_ids(txn), chunk):
        for n in ids:
            head = txn.head(n)
            if type(head) is ConceptHead:
                batch.add_new(n, head.type_id, lexical.names(txn, n))
                done += 1
        if progress:
            progress("grams", done, max(done, total))
    batch.write(txn, pend=False)
    if progress:
        progress("grams", done, max(done, total))
    txn.aux(TABLE).put(KEY_BUILT, b"1")


def built(txn: Any) -> bool:
    return txn.aux(TABLE).get(KEY_BUILT) is not None


def _chunks(it: Iterable[int], size: int) -> Iterable[list[int]]:
    part: list[int] = []
    for n in it:
        part.append(n)
        if len(part) == size:
            yield part
            part = []
    if part:
        yield part


def posting_ids(txn: Any) -> tuple[set[int], int]:
    """(the concept ids with postings, the number of postings): for `check`."""
    ids: set[int] = set()
    total = 0
    for key, raw in txn.aux(TABLE).scan():
        if key[:1] == b"\0":
            continue
        keys = postings.decode(raw)[0]
        total += len(keys)
        ids.update((keys // SLOTS).tolist())
    for n, _, names in pending(txn):
        ids.add(n)
        total += sum(len(trigrams(name)) for name in names)
    return ids, total


def drift(txn: Any, ids: Iterable[int]) -> tuple[int, int]:
    """(the postings that differ from what the names of the concepts among `ids` give —
    missing, extra, or of another weight or group, each counted — , the concepts
    compared): `check --deep`. An element whose head cannot be read is left to the
    store's check."""
    vocab: dict[str, int] = {}
    rows: list[tuple[int, int, int, int]] = []
    compared = 0
    for n in ids:
        try:
            head = txn.head(n)
        except Exception:  # noqa: BLE001 - damage the store's check reports
            continue
        if type(head) is not ConceptHead:
            continue
        compared += 1
        rows.extend((vocab.setdefault(g, len(vocab)), key, weight, head.type_id)
                    for g, key, weight in _postings_of(n, lexical.names(txn, n)))
    dtype = np.dtype([("g", "<i8"), ("k", "<u8"), ("w", "<f4"), ("t", "<u4")])
    want = np.array(rows, dtype=dtype)
    have: list[np.ndarray] = []
    for key, raw in txn.aux(TABLE).scan():
        if key[:1] == b"\0":
            continue
        code = vocab.setdefault(key[:-9].decode(), len(vocab))
        keys, weights, groups = postings.decode(raw)
        part = np.empty(len(keys), dtype=dtype)
        part["g"], part["k"], part["w"], part["t"] = code, keys, weights, groups
        have.append(part)
    rows = []
    for n, group, names in pending(txn):        # (as the postings they stand for)
        rows.extend((vocab.setdefault(g, len(vocab)), key, weight, group)
                    for g, key, weight in _postings_of(n, names))
    if rows:
        have.append(np.array(rows, dtype=dtype))
    both = np.concatenate([want, *have]) if have else want
    _, counts = np.unique(both, return_counts=True)
    return int((counts == 1).sum() + (counts > 2).sum()), compared


class Bound:
    """The gram index read in one reader's snapshot, as the vector source keyword ranking
    asks for (`query.VectorSource`): `knn` gives the nearest concepts by name spelling;
    `query_vector` is the embedder's (links' candidates are compared by their embedded
    text, `query._link_similarity`). `knn` ranks by the text last given to `query_vector`
    (the vector stands for it: one Bound serves one query)."""

    filters_groups = True       # `knn` takes the WITH TYPE group

    def __init__(self, txn: Any, embedder: Embedder) -> None:
        self.txn = txn
        self.embedder = embedder
        self._texts: dict[int, tuple[np.ndarray, str]] = {}

    def query_vector(self, text: str) -> np.ndarray:
        vec = self.embedder.embed([text])[0]
        self._texts[id(vec)] = (vec, text)      # (the vector kept: its id stays its own)
        return vec

    def _text(self, qvec: np.ndarray) -> str:
        got = self._texts.get(id(qvec))
        if got is None:
            raise ValueError("a query vector of another Bound")
        return got[1]

    def knn(self, kind: int, qvec: np.ndarray, count: int, expansion: int | None = None,
            group: int | None = None) -> dict[int, float]:
        """id → the trigram Dice of the best name of the `count` concepts whose names
        share the most trigrams with the query (`expansion` is the HNSW's: unused). An
        estimate of the similarity ranking computes exactly for its leaders (`query.run`:
        the 2+3-gram Dice); scoring the POOL best exactly here too cost ~0.4 ms per query
        at N=100k and found no more (bench/RESULTS.md, "Typo candidates from trigram
        postings")."""
        if kind != KIND_CONCEPT:
            return {}
        text = self._text(qvec)
        qgrams = trigrams(" ".join(tokens(text)))[:QUERY_GRAMS]
        if not qgrams:
            return {}
        aux = self.txn.aux(TABLE)
        # Counted over the query's rarer trigrams: one in more than GRAM_CAP names ("syn",
        # "ome" of the thousands of "... syndrome") tells little apart and made a long
        # name's query read and sort ~400k postings (5 ms); only when all of them are that
        # common are their first GRAM_CAP postings counted.
        parts: list[np.ndarray] = []
        sizes: list[np.ndarray] = []
        common: list[tuple[np.ndarray, np.ndarray]] = []
        extra = self._pending(set(qgrams), group)
        for g in qgrams:
            keys, weights, groups, complete = postings.read(aux, _prefix(g), GRAM_CAP)
            last = int(keys[-1]) if len(keys) else -1
            if group is not None and len(keys):
                keep = groups == group
                keys, weights = keys[keep], weights[keep]
            more = extra.get(g)
            if more:
                # A pending name's postings, where the list would hold them once folded: a
                # cut list only those among the ids it read (folded, the list counts as cut
                # once it is longer than GRAM_CAP).
                if not complete:
                    more = [kw for kw in more if kw[0] < last]
                if more:
                    complete = complete and len(keys) + len(more) <= GRAM_CAP
                    keys = np.concatenate([keys, np.fromiter(
                        (k for k, _ in more), dtype=np.uint64, count=len(more))])
                    weights = np.concatenate([weights.astype(np.float32), np.fromiter(
                        (w for _, w in more), dtype=np.float32, count=len(more))])
            if not len(keys):
                continue
            if complete:
                parts.append(keys)
                sizes.append(weights)
            else:
                common.append((keys, weights))
        if not parts:
            parts = [k for k, _ in common]
            sizes = [w for _, w in common]
        if not parts:
            return {}
        keys, at, shared = np.unique(np.concatenate(parts), return_index=True,
                                     return_counts=True)
        size = np.concatenate(sizes)[at].astype(np.float32)
        est = 2.0 * shared / (len(qgrams) + size)
        pool = max(POOL, count)
        if len(est) > pool:
            top = np.argpartition(-est, pool - 1)[:pool]
            keys, est = keys[top], est[top]
        out: dict[int, float] = {}
        for n, e in zip((keys // SLOTS).tolist(), est.tolist()):
            if e > out.get(n, -1.0):
                out[n] = e
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0]))[:count])

    def _pending(self, wanted: set[str], group: int | None
                 ) -> dict[str, list[tuple[int, int]]]:
        """gram -> (posting id, weight) of the pending names (`gram_index.pending`) for the
        query's trigrams `wanted`, of type `group` if one is given."""
        out: dict[str, list[tuple[int, int]]] = {}
        for n, t, names in pending(self.txn):
            if group is not None and t != group:
                continue
            for slot, name in enumerate(names[:SLOTS]):
                gs = trigrams(name)
                for g in wanted.intersection(gs):
                    out.setdefault(g, []).append((n * SLOTS + slot, len(gs)))
        return out

    def _exact(self, text: str, ids: list[int]) -> dict[int, float]:
        """id → the 2+3-gram Dice of `text` and the best of the concept's names."""
        qg = grams(text)
        out: dict[int, float] = {}
        for n in ids:
            best = 0.0
            for name in lexical.names(self.txn, n):
                sim = dice(qg, norm_grams(name))
                if sim > best:
                    best = sim
            out[n] = best
        return out

    def similarity(self, kind: int, qvec: np.ndarray, ids: list[int]) -> dict[int, float]:
        """Exact name similarity (as `knn`'s) of the concepts `ids` (links: none)."""
        if kind != KIND_CONCEPT or not ids:
            return {}
        return self._exact(self._text(qvec), ids)


def in_use(embedder: Embedder) -> bool:
    """Whether a database searched with `embedder` in the process (`service`; PostgreSQL
    has pg_search) takes its typo candidates from the gram postings: the default
    embedder's n-gram features."""
    return embedder.name.startswith("hashed-ngrams/")
