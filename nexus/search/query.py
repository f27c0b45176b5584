"""SEARCH ranking: candidates from names, BM25F postings and vectors, fused into one score.

Owns how a SEARCH is answered from the indexes (not the indexes themselves):

1. *Candidates*, each source bounded: names and aliases equal to or starting with the query
   (`lexical.names_from`); the TOP_LEXICAL best documents by BM25F over the query terms'
   whole posting lists (numpy: each list added into a dense array of sums indexed by id,
   so a common word's long list costs one vectorised step, not a sort of every list); the
   TOP_VECTOR nearest neighbours of the query's embedding (propositions have no vectors of
   their own: the links of the query's nearest concepts, their text embedded at query
   time, `_link_candidates`).
   WITH TYPE filters every source by the type/predicate id stored beside each posting; for
   a small type the vector side is exact over the type's members, for a big one the
   neighbourhood is widened in proportion to how rare the type is.
2. *Leaders*: the RESCORE best candidates by a preliminary score (the fusion below with what
   the sources already told), rescored exactly:
   `lex` = the share of the query's IDF mass the document matches, each term counted by how
   strongly (its BM25F weight against that of a one-word name), in [0, 1];
   `sim` = the n-gram Dice similarity of the query and the best of the document's name and
   aliases (the default embedder's features, without hashing noise), and for contextual
   embedders and propositions also the embedding's cosine (the better of the two).
3. *Fusion*: `0.55·lex + 0.45·sim`, lifted to a floor by name evidence — an exact name
   (case-insensitively) ≥ 0.95, an exact alias ≥ 0.90, a name or alias the query is a
   prefix of ≥ 0.70 (0.65) + 0.2·(share of it typed). 1.0 only for the name exactly as
   typed; hits under MIN_SCORE are dropped. Scores are absolute, not normalised per query,
   so a poor best hit still scores low.

Every hit is checked against the reader's own snapshot (`txn.head`), so SEARCH never
returns an element that snapshot does not hold, whatever the vector index contains.

That is `MODE "keyword"` (spec §5.2.1; CONTRACT §10: the n-gram vectors carry no meaning).
With a semantic index (`nexus.search.embed.WordLlamaEmbedder`):

* `semantic`: the nearest neighbours of the query's meaning vector among the concepts'
  "name: description" and alias vectors (`vectors.doc_texts`), each one's
  similarity raised to its name's, embedded when ranked (`_name_similarity`); the cosine is
  mapped linearly from [SEM_LO, SEM_HI] onto [0, 1] (measured on the paraphrase set of
  bench/paraphrases.json: an unrelated element's best cosine rarely passes SEM_LO, a
  paraphrase's target is usually above SEM_HI / 2), so THRESHOLD means the same for every
  query.
* `hybrid`: both rankings, fused per element as `(1 - w)·keyword + w·semantic`, where the
  semantic weight `w` is what the keyword side leaves: `1 - ` its best score, kept within
  [W_SEM_MIN, W_SEM_MAX]. A query that names something (a name, a prefix, a typo) keeps the
  keyword order; a query that only describes it is ranked by meaning. 1.0 stays reserved
  for the name exactly as typed. The keyword hits the semantic ranking did not reach get
  their semantic score from the exact cosines of their own vectors (a few dozen at most),
  so a hit's fused score does not depend on whether the approximate neighbourhood found it:
  at 100k (bench/RESULTS.md, "SEARCH at 100k") this lifted hybrid's recall@5 on typos with
  two edits from 0.61 to 0.83 and on description words from 0.40 to 0.90, where scoring a
  missing side as 0 let semantic near-misses push the named element out. Its two
  nearest-neighbour searches run narrower than the index's 256 (HYBRID_EXPANSION for the
  n-gram one, HYBRID_SEM_EXPANSION for the semantic one, which now only has to bring the
  candidates that share no word or spelling with the query).
"""
from __future__ import annotations

import heapq
from itertools import islice
from typing import Any, Callable, Protocol

import numpy as np

from . import lexical
from .lexical import REF_WEIGHT, idf
from ..store.protocol import ConceptHead
from .text import (KIND_CONCEPT, KIND_LINK, dice, end_names, grams, link_vec_text, norm_grams,
                   norm_name, tokens)
from .embed import Embedder

NAME_CAP = 64               # name/alias keys scanned for exact and prefix matches
POSTING_CAP = 65_536        # postings read per query term (whole blocks)
TOP_LEXICAL = 64            # best BM25F documents kept as candidates
DENSE_IDS = 1 << 22         # BM25F sums in a dense array (36 MB at most) below this id
DENSE_MIN = 1024            # ... and only for at least this many postings (_Accumulator)
TOP_VECTOR = 40             # nearest neighbours asked for
RESCORE = 24                # preliminary leaders rescored exactly (at least 2 x limit)
EXACT_GROUP = 512           # WITH TYPE: types up to this size get exact vector scoring
WIDE_KNN = 4096             # WITH TYPE: the widest approximate neighbourhood asked for
FILTER_FACTOR = 8           # WITH TYPE: how much wider the name scan looks
W_LEX, W_VEC = 0.55, 0.45
MIN_SCORE = 0.1             # below this a hit shares no more than noise with the query
SEM_LO, SEM_HI = 0.0, 0.60  # semantic: cosines mapped onto [0, 1] (see the module doc)
SEM_SAME = 0.995            # semantic: a cosine this close to 1 is the same text
W_SEM_MIN, W_SEM_MAX = 0.3, 0.9   # hybrid: the bounds of the semantic weight
HYBRID_EXPANSION = 96       # hybrid: the HNSW search breadth of its keyword ranking
HYBRID_SEM_EXPANSION = 64   # ... and of its semantic one (the inverted file: 32 lists, `ivf`)
LINK_ENDS = 16              # propositions: nearest concepts whose links are candidates
LINK_FANOUT = 256           # ... links read per such concept and direction
LINK_RANKED = 96            # ... links (nearest ends first) whose text is embedded


class VectorSource(Protocol):
    """What ranking asks of a vector index: `vectors.VectorIndex` (in the process), or
    `pg_vectors.BoundVectors` (a pgvector table read in the reader's snapshot, whose `knn`
    also takes the WITH TYPE group: `filters_groups`)."""

    embedder: Embedder

    def query_vector(self, text: str) -> np.ndarray: ...
    def knn(self, kind: int, qvec: np.ndarray, count: int, expansion: int | None = None
            ) -> dict[int, float]: ...
    def similarity(self, kind: int, qvec: np.ndarray, ids: list[int]
                   ) -> dict[int, float]: ...


def run(txn: Any, vectors: VectorSource, kind: int, text: str, group: int | None,
        limit: int, check: Callable[[], None] | None = None,
        expansion: int | None = None) -> list[tuple[int, float]]:
    """The best `limit` (id, score) pairs for `text`, best first. `check()` (the command's
    deadline) is called between steps and every few query terms or candidates;
    `expansion` narrows the nearest-neighbour search (`VectorIndex.knn`)."""
    if check is None:
        check = _no_check
    norm = norm_name(text)
    check()
    if not norm:
        return []
    qterms = list(dict.fromkeys(tokens(text)))
    widen = FILTER_FACTOR if group is not None else 1

    # Name evidence: every name/alias equal to or starting with the query.
    floors: dict[int, float] = {}
    for n, name, flag in lexical.names_from(txn, kind, norm, NAME_CAP * widen, group):
        floor = _floor(name, norm, flag)
        if floor > floors.get(n, 0.0):
            floors[n] = floor
    check()

    # BM25F over whole posting lists (numpy); only a list longer than POSTING_CAP is cut,
    # and its term is then completed from the forward index for the leaders below.
    # The counts asked for at once, and the pending documents (`lexical`: a small
    # write's, not in the lists yet) read once for all the query's terms (a scan: a round
    # trip on PostgreSQL).
    lexical.prefetch_counts(txn, kind, qterms)
    pending = lexical.pending_postings(txn, kind)
    n_docs = max(1, lexical.doc_count(txn, kind))
    ref = REF_WEIGHT[0] if kind == KIND_CONCEPT else REF_WEIGHT[1]
    idfs: dict[str, float] = {}
    capped: list[str] = []
    dfs = [lexical.doc_freq(txn, kind, t, pending) for t in qterms]
    acc = _Accumulator(txn.max_id(), sum(dfs))
    for i, (t, df) in enumerate(zip(qterms, dfs)):
        if i % 16 == 15:
            check()
        w_idf = idfs[t] = idf(n_docs, df)
        if not df:
            continue
        ids, weights, groups, complete = lexical.term_postings(txn, kind, t, POSTING_CAP,
                                                               pending)
        if not complete:
            capped.append(t)
        if group is not None:
            keep = groups == group
            ids, weights = ids[keep], weights[keep]
        acc.add(ids, w_idf * np.minimum(1.0, weights.astype(np.float32) / ref))
    idf_total = sum(idfs.values()) or 1.0
    lex = acc.top(TOP_LEXICAL)

    check()
    qvec = vectors.query_vector(text)
    check()
    seen: dict[int, float] = {}         # links: every similarity computed (embedded) so far
    vec = _vector_candidates(txn, vectors, kind, qvec, group, max(TOP_VECTOR, 2 * limit),
                             expansion, seen)
    if group is not None and len(vec) and _unfiltered(vectors) \
            and _needs_group_check(txn, kind, group):
        vec = {n: s for n, s in vec.items() if _group_of(txn, n, kind) == group}

    def prelim(n: int) -> float:
        base = W_LEX * lex.get(n, 0.0) / idf_total + W_VEC * vec.get(n, 0.0)
        return max(base, floors.get(n, 0.0)) + 1e-3 * base

    candidates = set(floors) | set(lex) | set(vec)
    leaders = heapq.nlargest(max(RESCORE, 2 * limit), candidates, key=prelim)
    lexical.prefetch(txn, leaders)      # (their names and heads: read below, one by one)

    # Rescore the leaders: similarity (Dice of the names; cosine too for contextual
    # embedders and for links, whose vectors embed "subject predicate object"), and the
    # terms whose posting lists were cut, from the forward index.
    use_cos = vectors.embedder.contextual or kind != KIND_CONCEPT
    if use_cos:
        missing = [n for n in leaders if n not in vec]
        if missing:
            vec.update(_similarity(txn, vectors, kind, qvec, missing, seen))
    check()
    qgrams = grams(text)
    for n in leaders:
        check()
        fuzzy = 0.0
        for name in lexical.names(txn, n):
            sim = dice(qgrams, norm_grams(name))
            if sim > fuzzy:
                fuzzy = sim
        vec[n] = max(fuzzy, vec.get(n, 0.0)) if use_cos else fuzzy
    if capped:
        for n in leaders:
            e = lexical.entry(txn, n)
            if e is not None:
                lex[n] = sum(w_idf * min(1.0, e.terms.get(t, 0.0) / ref)
                             for t, w_idf in idfs.items())
    stripped = text.strip()
    scored: list[tuple[float, float, int]] = []
    for n in leaders:
        head = txn.head(n)          # vector hits may be ahead of or behind this snapshot
        if head is None or _kind_of(head) != kind:
            continue
        base = W_LEX * lex.get(n, 0.0) / idf_total + W_VEC * vec.get(n, 0.0)
        score = max(base, floors.get(n, 0.0))
        # 1.0 is kept for the name exactly as typed; anything else stays below it.
        if score >= 0.95 and _raw_name(txn, head) == stripped:
            score = 1.0
        else:
            score = min(score, 0.99)
        if score >= MIN_SCORE:
            scored.append((score, base, -n))
    best = heapq.nlargest(limit, scored)
    return [(-neg, min(1.0, round(score, 6))) for score, _, neg in best]


class _Accumulator:
    """Per-document sums of BM25F contributions, one posting list at a time. When the lists
    hold at least DENSE_MIN postings in all and up to DENSE_IDS element ids, a dense array
    indexed by id, plus the ids touched so far (a list holds each id once, so adding it is
    a few numpy steps over that list: no sort or merge of the lists); otherwise the lists
    are kept and summed by `np.unique` — past DENSE_IDS to bound memory, and below
    DENSE_MIN because zeroing and touching two arrays the size of the whole id range
    (0.1–0.2 ms at 160k ids) costs more than sorting a thousand ids (measured crossover
    ~1,000 postings). Most queries' words are rare (the paraphrase queries at 100k: a
    median of 2 postings in all), so the sparse way is the usual one."""

    def __init__(self, top_id: int, postings: int | None = None) -> None:
        dense = top_id < DENSE_IDS and (postings is None or postings >= DENSE_MIN)
        self.sums = np.zeros(top_id + 1 if dense else 0, dtype=np.float64)
        self.seen = np.zeros(top_id + 1 if dense else 0, dtype=bool)
        self.dense = dense
        self.top_id = top_id
        self.parts: list[np.ndarray] = []       # dense: the new ids of each list
        self.scores: list[np.ndarray] = []      # sparse: the scores of each list

    def add(self, ids: np.ndarray, scores: np.ndarray) -> None:
        """Add `scores` to documents `ids` (unique)."""
        if not len(ids):
            return
        if not self.dense:
            if ids[-1] > self.top_id:       # (an id past the snapshot's top: not there)
                keep = ids <= self.top_id
                ids, scores = ids[keep], scores[keep]
            self.parts.append(ids)
            self.scores.append(scores)
            return
        if ids[-1] < len(self.sums):        # (ids ascending: all of them within)
            at = ids.astype(np.intp)
        else:                               # (the same)
            keep = ids < len(self.sums)
            at, scores = ids[keep].astype(np.intp), scores[keep]
        # one pass (add.at) rather than `sums[at] += scores`'s gather, add and scatter:
        # the same sums, the ids of one list being distinct (~2x faster on a long list)
        np.add.at(self.sums, at, scores)
        new = at[~self.seen[at]]
        self.seen[new] = True
        self.parts.append(new)

    def top(self, k: int) -> dict[int, float]:
        """The k best documents scored: id → sum."""
        if not self.parts:
            return {}
        if self.dense:
            ids = np.concatenate(self.parts) if len(self.parts) > 1 else self.parts[0]
            sums = self.sums[ids]
        else:
            ids, inverse = np.unique(np.concatenate(self.parts), return_inverse=True)
            sums = np.bincount(inverse, weights=np.concatenate(self.scores))
        if len(sums) > k:
            # The k best; among documents tied at the k-th sum, the lowest ids (so that
            # the choice never depends on the order the lists were read in).
            kth = np.partition(sums, len(sums) - k)[len(sums) - k]
            above = sums > kth
            tied = np.sort(ids[sums == kth])[:k - int(above.sum())]
            ids = np.concatenate([ids[above], tied])
            sums = np.concatenate([sums[above], np.full(len(tied), kth)])
        return dict(zip(ids.tolist(), sums.tolist()))


def _no_check() -> None:
    pass


def _kind_of(head: Any) -> int:
    return KIND_CONCEPT if type(head) is ConceptHead else KIND_LINK


def _unfiltered(vectors: VectorSource) -> bool:
    """Whether `vectors`' neighbours of a WITH TYPE search may be of other types."""
    return not getattr(vectors, "filters_groups", False)


def _needs_group_check(txn: Any, kind: int, group: int) -> bool:
    size = txn.count_type(group) if kind == KIND_CONCEPT else txn.count_predicate(group)
    return size > EXACT_GROUP


def _group_of(txn: Any, n: int, kind: int) -> int | None:
    head = txn.head(n)
    if head is None:
        return None
    if type(head) is ConceptHead:
        return head.type_id if kind == KIND_CONCEPT else None
    return head.predicate_id if kind == KIND_LINK else None


def _floor(name: str, norm: str, flag: int) -> float:
    """The least score name evidence guarantees (flag 0: the name, 1: an alias)."""
    if name == norm:
        return 0.95 if flag == 0 else 0.90
    share = len(norm) / max(1, len(name))
    return (0.70 if flag == 0 else 0.65) + 0.2 * share


def _raw_name(txn: Any, head: Any) -> str:
    return head.name if type(head) is ConceptHead else txn.symbol_text(head.predicate_id)


def _vector_candidates(txn: Any, vectors: VectorSource, kind: int, qvec, group: int | None,
                       count: int, expansion: int | None = None,
                       seen: dict[int, float] | None = None) -> dict[int, float]:
    """id → similarity of the `count` nearest elements (`seen`: see `_link_similarity`)."""
    if kind == KIND_LINK:
        return _link_candidates(txn, vectors, qvec, group, count, expansion, seen)
    if group is None:
        return vectors.knn(kind, qvec, count, expansion)
    if getattr(vectors, "filters_groups", False):     # the group filtered where they are
        return vectors.knn(kind, qvec, count, expansion, group=group)  # type: ignore[call-arg]
    size = txn.count_type(group)
    if size == 0:
        return {}
    if size <= EXACT_GROUP:
        sims = vectors.similarity(kind, qvec, list(txn.concepts_of_type(group)))
        return dict(heapq.nlargest(count, sims.items(), key=lambda kv: kv[1]))
    # A big type: widen the approximate neighbourhood in proportion to how rare the type
    # is; hits of other types are dropped when rescoring.
    total = max(1, txn.count_concepts())
    wide = min(WIDE_KNN, max(count, int(count * total / size * 2)))
    return vectors.knn(kind, qvec, wide, expansion)


# --- propositions: no vectors of their own ---------------------------------------------------
# A link's vector text is "subject predicate object" (`text.link_vec_text`): the lexical
# index already has its words, and its ends have vectors of their own. So links are not in
# the vector indexes (they were 5/6 of the vectors of a typical graph: most of the HNSW
# build time of a load and of the index files); their vector candidates come from the
# query's nearest *concepts* — the links at those ends, ranked by how near their ends are —
# and their similarity is computed from their text when they are ranked (a few dozen
# embeddings per query, the same vectors the index held).

def _link_candidates(txn: Any, vectors: VectorSource, qvec: np.ndarray, group: int | None,
                     count: int, expansion: int | None, seen: dict[int, float] | None = None
                     ) -> dict[int, float]:
    """id → similarity of the links nearest the query: the links of its nearest concepts
    (at most LINK_FANOUT per end and direction), the LINK_RANKED with the nearest ends
    (sum of both ends' similarities) embedded and compared; WITH TYPE: only that
    predicate's links (all of them, when it has at most EXACT_GROUP)."""
    if group is not None and txn.count_predicate(group) <= EXACT_GROUP:
        members = [link for _, _, link in txn.links_of_predicate(group)]
        sims = _link_similarity(txn, vectors, qvec, members, seen)
        return dict(heapq.nlargest(count, sims.items(), key=lambda kv: kv[1]))
    ends = vectors.knn(KIND_CONCEPT, qvec, max(TOP_VECTOR, count), expansion)
    for n, sim in _name_similarity(txn, vectors, KIND_CONCEPT, qvec, list(ends)).items():
        if sim > ends[n]:
            ends[n] = sim
    near: dict[int, float] = {}
    for end, sim in heapq.nlargest(LINK_ENDS, ends.items(), key=lambda kv: kv[1]):
        for _, other, link in islice(txn.out_links(end, group), LINK_FANOUT):
            near[link] = sim + ends.get(other, 0.0)
        for _, other, link in islice(txn.in_links(end, group), LINK_FANOUT):
            near[link] = sim + ends.get(other, 0.0)
    ranked = heapq.nlargest(LINK_RANKED, near, key=lambda n: (near[n], -n))
    sims = _link_similarity(txn, vectors, qvec, ranked, seen)
    return dict(heapq.nlargest(count, sims.items(), key=lambda kv: kv[1]))


def _similarity(txn: Any, vectors: VectorSource, kind: int, qvec: np.ndarray,
                ids: list[int], seen: dict[int, float] | None = None) -> dict[int, float]:
    """Exact similarity of `qvec` to each id's best vector (links: from their text;
    `seen` as in `_link_similarity`)."""
    if kind == KIND_LINK:
        return _link_similarity(txn, vectors, qvec, ids, seen)
    return vectors.similarity(kind, qvec, ids)


def _link_similarity(txn: Any, vectors: VectorSource, qvec: np.ndarray, ids: list[int],
                     seen: dict[int, float] | None = None) -> dict[int, float]:
    """Cosine of `qvec` and each link's text ("subject predicate object", what its vector
    embedded when links had vectors) embedded now, in [0, 1]; ids that are no link of this
    snapshot are absent. `seen` (one query's, for one embedder and `qvec`) holds the
    similarities computed before, which are taken from it, and gets the new ones: a link
    text is embedded at most once per query and embedder, however many steps rank it."""
    out: dict[int, float] = {}
    todo: list[int] = []
    for n in dict.fromkeys(ids):
        if seen is not None and n in seen:
            out[n] = seen[n]
        else:
            todo.append(n)
    if not todo:
        return out
    prefetch = getattr(txn, "prefetch_elements", None)
    if prefetch is not None:        # (PostgreSQL: the links and their ends, at once)
        prefetch(todo)
    ends: dict[int, str] = {}
    preds: dict[int, str] = {}
    texts: list[str] = []
    owners: list[int] = []
    for n in todo:
        head = txn.head(n)
        if head is None or type(head) is ConceptHead:
            continue
        pred = preds.get(head.predicate_id)
        if pred is None:
            pred = preds[head.predicate_id] = txn.symbol_text(head.predicate_id)
        text = link_vec_text(pred, *end_names(txn, head, ends))
        if text:
            texts.append(text)
            owners.append(n)
    if texts:
        vecs = np.asarray(vectors.embedder.embed(texts), dtype=np.float32)
        q = np.asarray(qvec, dtype=np.float32)
        norms = np.linalg.norm(vecs, axis=1) * (float(np.linalg.norm(q)) or 1.0)
        sims = vecs @ q / np.where(norms > 0, norms, 1.0)
        for n, sim in zip(owners, sims.tolist()):
            out[n] = min(1.0, max(0.0, sim))
    if seen is not None:
        seen.update((n, out[n]) for n in owners)
    return out


# --- MODE "semantic" and "hybrid" ----------------------------------------------------------

def semantic(txn: Any, vectors: VectorSource, kind: int, text: str, group: int | None,
             limit: int, check: Callable[[], None] | None = None,
             expansion: int | None = None) -> list[tuple[int, float]]:
    """MODE "semantic": the best `limit` (id, score) by meaning alone, best first."""
    if check is None:
        check = _no_check
    if not norm_name(text):
        return []
    check()
    return _semantic_ranked(txn, vectors, kind, vectors.query_vector(text), group, limit,
                            check, expansion, names=True)


def _semantic_ranked(txn: Any, vectors: VectorSource, kind: int, qvec: np.ndarray,
                     group: int | None, limit: int, check: Callable[[], None],
                     expansion: int | None, seen: dict[int, float] | None = None,
                     names: bool = False) -> list[tuple[int, float]]:
    """`names`: each candidate's similarity is raised to its name's (`_name_similarity`:
    MODE "semantic"; hybrid does it for its keyword hits instead)."""
    cand = _vector_candidates(txn, vectors, kind, qvec, group, max(TOP_VECTOR, 2 * limit),
                              expansion, seen)
    if group is not None and len(cand) and _unfiltered(vectors) \
            and _needs_group_check(txn, kind, group):
        cand = {n: s for n, s in cand.items() if _group_of(txn, n, kind) == group}
    check()
    if names:
        for n, sim in _name_similarity(txn, vectors, kind, qvec, list(cand)).items():
            if sim > cand[n]:
                cand[n] = sim
    out: list[tuple[int, float]] = []
    # Best first (the score grows with the cosine), so only the hits returned are checked
    # against the snapshot.
    ranked = sorted(cand.items(), key=lambda kv: (-kv[1], kv[0]))
    heads = getattr(txn, "prefetch_elements", None)
    if heads is not None:               # (PostgreSQL: the heads checked below, at once)
        heads([n for n, _ in ranked[:2 * limit]], ends=False)
    for n, cos in ranked:
        score = _semantic_score(cos)
        if score < MIN_SCORE or len(out) == limit:
            break
        head = txn.head(n)
        if head is None or _kind_of(head) != kind:
            continue
        out.append((n, round(score, 6)))
    return out


def _name_similarity(txn: Any, vectors: VectorSource, kind: int, qvec: np.ndarray,
                     ids: list[int]) -> dict[int, float]:
    """For an index of one "name: description" vector per concept (`context_only`,
    `vectors.doc_texts`): the cosine of `qvec` and each concept's name of `ids`, embedded
    now — the name slot such an index no longer holds, for the few dozen candidates a
    ranking scores (hybrid's keyword hits, MODE "semantic"'s nearest concepts, the link
    ends SEARCH PROPOSITION starts from: ~0.2 ms of WordLlama for 20–40 names). Without it
    a mistyped name's own concept lost to neighbours whose descriptions happened to be
    nearer: at 100k, hybrid's recall@5 on names with two typos fell 0.86 → 0.65
    (bench/RESULTS.md, "One semantic vector per concept"). Ids that are no concept of
    this snapshot are absent; so is everything for another index."""
    if kind != KIND_CONCEPT or not ids or not getattr(vectors.embedder, "context_only",
                                                      False):
        return {}
    prefetch = getattr(txn, "prefetch_elements", None)
    if prefetch is not None:        # (PostgreSQL: the heads read below, at once)
        prefetch(ids, ends=False)
    owners: list[int] = []
    texts: list[str] = []
    for n in ids:
        head = txn.head(n)
        if type(head) is ConceptHead and head.name:
            owners.append(n)
            texts.append(head.name)
    if not texts:
        return {}
    vecs = np.asarray(vectors.embedder.embed(texts), dtype=np.float32)
    q = np.asarray(qvec, dtype=np.float32)
    norms = np.linalg.norm(vecs, axis=1) * (float(np.linalg.norm(q)) or 1.0)
    cos = vecs @ q / np.where(norms > 0, norms, 1.0)
    return {n: min(1.0, max(0.0, c)) for n, c in zip(owners, cos.tolist())}


def _semantic_score(cos: float) -> float:
    """A cosine of the semantic index as a score: 1.0 only for the same meaning vector (a
    concept without a description: its name as typed, give or take the int8 rounding of the
    index, or a candidate's name embedded by `_name_similarity`); anything else is mapped
    from [SEM_LO, SEM_HI] onto [0, 0.99], as in keyword mode."""
    if cos >= SEM_SAME:
        return 1.0
    return min(0.99, max(0.0, (cos - SEM_LO) / (SEM_HI - SEM_LO)))


def hybrid(txn: Any, lexical_vectors: VectorSource, semantic_vectors: VectorSource, kind: int,
           text: str, group: int | None, limit: int,
           check: Callable[[], None] | None = None) -> list[tuple[int, float]]:
    """MODE "hybrid": keyword and semantic rankings fused (see the module doc)."""
    if check is None:
        check = _no_check
    kw = dict(run(txn, lexical_vectors, kind, text, group, limit, check, HYBRID_EXPANSION))
    if not norm_name(text):
        return []
    qvec = semantic_vectors.query_vector(text)
    seen: dict[int, float] = {}         # links: the semantic similarities computed so far
    sm = dict(_semantic_ranked(txn, semantic_vectors, kind, qvec, group, limit, check,
                               HYBRID_SEM_EXPANSION, seen))
    # The keyword hits the semantic ranking did not return get their own semantic score
    # (exact cosines of their few vectors): a hit's fused score then never depends on
    # whether the approximate neighbourhood happened to reach it.
    missing = [n for n in kw if n not in sm]
    if missing:
        for n, cos in _similarity(txn, semantic_vectors, kind, qvec, missing, seen).items():
            sm[n] = round(_semantic_score(cos), 6)
    # ... and their names' (an index of "name: description" vectors alone holds none).
    for n, cos in _name_similarity(txn, semantic_vectors, kind, qvec, list(kw)).items():
        score = round(_semantic_score(cos), 6)
        if score > sm.get(n, 0.0):
            sm[n] = score
    w = min(W_SEM_MAX, max(W_SEM_MIN, 1.0 - max(kw.values(), default=0.0)))
    scored: list[tuple[float, int]] = []
    for n in kw.keys() | sm.keys():
        k, s = kw.get(n, 0.0), sm.get(n, 0.0)
        score = 1.0 if k >= 1.0 else min(0.99, (1.0 - w) * k + w * s)
        if score >= MIN_SCORE:
            scored.append((score, -n))
    return [(-neg, round(score, 6)) for score, neg in heapq.nlargest(limit, scored)]
