"""DESCRIBE PRIMER: the identity and the domain map, ranked by graph importance, cached.

Owns what "key" means in the domain map (spec §2.5, §5.1.1; CONTRACT §8) and the cache that
keeps it cheap:

* A domain's *members* are the concepts linked to it by `belongs_to_domain` (at most
  MAX_MEMBERS of them are read). Members that are type or predicate definitions declare that
  the type/predicate belongs to the domain; the others are its instances.
* Importance of an instance member: half its PageRank in the domain's subgraph (links
  between members; a small numpy power iteration — networkx's pagerank would pull in
  scipy), half its (log) degree — PageRank alone is flat in the common
  case of a domain whose members barely link to each other. Each member's links are read up
  to MAX_LINKS per direction, so a domain costs O(MAX_MEMBERS · MAX_LINKS) at most, however
  big the graph.
* key_concept_types: types ranked by the summed importance of their instance members, plus
  log(instance count) for types defined in the domain. key_proposition_types: predicates
  ranked by how often they occur on the members' links (weighted by the member's
  importance), plus log(link count) for predicates defined in the domain.
  key_concepts: the most important instance members as `{type, name}`.

Caching: each domain's ranking is kept with the snapshot id (`ReadTxn.snapshot_id`) it was
computed from. The cache is one of the engine's commit hooks: a write invalidates only the
domains it touches — found from the touched ids' `belongs_to_domain` links and their types'
definitions, marked with the id its commit will have (`WriteTxn.commit_id`); deletes and
bulk writes invalidate everything. A ranking is reused by any reader whose domain was not
invalidated after the ranking's snapshot, so reads never recompute and a write recomputes
only what it changed.

Finding the touched domains is deferred: a write only queues its touched ids with its
commit id (`settle` finds their domains, for all queued writes at once, when DESCRIBE
PRIMER next reads the cache — in the reader's snapshot, for the writes it sees — or when
the queue holds more than QUEUE_IDS ids — in a write transaction). Looked up later, an
element's domains are a superset of those at its write: only a delete takes one away, and
a delete invalidates everything. Each domain found is marked with the newest commit id of
the writes settled together (a ranking is then recomputed a little more often, never
reused stale). A durable upsert no longer pays its own lookups (~4% of its CPU). The
elements a columnar writer created (a KIP load's UPSERT: `WriteContext.known_heads`) are
queued with what their heads say (`_Known`: members, types, predicates, new
`belongs_to_domain` targets) rather than as ids whose heads would be read back at settle.
"""
from __future__ import annotations

import heapq
import math
import threading
from collections import Counter, defaultdict
from itertools import islice
from typing import Any

import numpy as np

from .. import history
from ..store.protocol import ConceptHead, ReadTxn
from .context import ExecContext, WriteContext
from .values import definition_json

MAX_MEMBERS = 2000        # members of a domain read for ranking
MAX_LINKS = 64            # links per member and direction read for ranking
MAX_DOMAINS = 100         # domains listed in the domain map (total_domains counts all)
TOP_K = 10                # entries per key_* list
BULK_INVALIDATE = 2000    # touched ids beyond which a write invalidates every domain
QUEUE_IDS = 2000          # touched ids queued (module doc) beyond which a write settles them

CONCEPT_TYPE, PROPOSITION_TYPE = "$ConceptType", "$PropositionType"
DOMAIN, BELONGS = "Domain", "belongs_to_domain"


class PrimerCache:
    """Per-domain rankings, valid from the snapshot they were computed at; an engine commit
    hook (`stage`, `before_commit`, `after_commit`) that invalidates what writes change."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rankings: dict[int, tuple[int, dict]] = {}
        self.dirty: dict[int, int] = {}
        self.all_dirty = 0
        # What the current write transaction touched so far (writes are serialized).
        self._pending: set[int] = set()
        self._pending_all = False
        self._moved = False         # it moved links: created heads may be stale
        # Committed writes whose domains are not looked up yet, in commit order, and how
        # many ids they hold (module doc): (commit id, touched ids whose heads are to be
        # read, what the heads of the others already said — `_Known`).
        self._queue: list[tuple[int, set[int], _Known | None]] = []
        self._queued = 0

    def clear(self) -> None:
        with self.lock:
            self.rankings.clear()
            self.dirty.clear()
            self.all_dirty = 0
            self._queue.clear()
            self._queued = 0

    def invalidate_all(self, seq: int) -> None:
        """Every ranking computed before snapshot `seq` is stale (a follower saw a commit
        of another process, whose touched domains it cannot know)."""
        with self.lock:
            self.all_dirty = max(self.all_dirty, seq)

    def get(self, domain: int) -> dict | None:
        with self.lock:
            hit = self.rankings.get(domain)
            if hit is None:
                return None
            seq, ranking = hit
            if seq < max(self.all_dirty, self.dirty.get(domain, 0)):
                return None
            return ranking

    def put(self, domain: int, seq: int, ranking: dict) -> None:
        with self.lock:
            old = self.rankings.get(domain)
            if old is None or old[0] <= seq:
                self.rankings[domain] = (seq, ranking)

    # --- the commit hook ---------------------------------------------------------------
    def stage(self, ctx: WriteContext) -> None:
        """Part way through a big write: remember what it touched (while that stays small)."""
        if ctx.moved:
            self._moved = True
        if ctx.removed or self._pending_all or \
                len(self._pending) + len(ctx.touched) > BULK_INVALIDATE:
            self._pending_all = True
            self._pending.clear()
        else:
            self._pending |= ctx.touched

    def before_commit(self, ctx: WriteContext) -> None:
        self.stage(ctx)
        try:
            if self._pending_all or len(self._pending) > BULK_INVALIDATE:
                self.invalidate(ctx.txn, self._pending, True, ctx.txn.commit_id())
            elif self._pending:
                known = None
                if ctx.known_heads and not self._moved:
                    known = _Known(ctx.known_heads, self._pending)
                self._enqueue(ctx.txn, self._pending, ctx.txn.commit_id(), known)
        finally:
            self._pending = set()
            self._pending_all = False
            self._moved = False

    def _enqueue(self, txn: ReadTxn, touched: set[int], seq: int,
                 known: "_Known | None" = None) -> None:
        """Queue a write's touched ids (module doc), those whose heads `known` holds
        already taken out of `touched`; past QUEUE_IDS, settle the queue in this write
        transaction, which sees every queued write. (A write that rolls back after this
        leaves an entry whose ids are not there or unchanged: it can only invalidate
        more.)"""
        with self.lock:
            self._queue.append((seq, touched, known))
            self._queued += len(touched) + (known.size if known is not None else 0)
            if self._queued > QUEUE_IDS:
                self._settle(txn, seq)

    def settle(self, txn: ReadTxn, seq: int) -> None:
        """Mark the domains of the queued writes that snapshot `seq` (of `txn`) sees —
        before a reader at that snapshot looks rankings up."""
        with self.lock:
            if self._queue and self._queue[0][0] <= seq:
                self._settle(txn, seq)

    def _settle(self, txn: ReadTxn, seq: int) -> None:
        # (self.lock held: no reader looks a ranking up until its domain is marked)
        queue = self._queue
        k = 0
        while k < len(queue) and queue[k][0] <= seq:
            k += 1
        if not k:
            return
        done, self._queue = queue[:k], queue[k:]
        self._queued -= sum(len(ids) + (known.size if known is not None else 0)
                            for _, ids, known in done)
        newest = done[-1][0]
        if newest <= self.all_dirty:
            return                          # everything was invalidated since
        touched: set[int] = set().union(*(ids for _, ids, _ in done))
        self._mark(_affected_domains(txn, touched, [kn for _, _, kn in done if kn]),
                   newest)

    def after_commit(self, ctx: WriteContext) -> None:
        pass

    def rolled_back(self, ctx: WriteContext) -> None:
        self._pending = set()
        self._pending_all = False
        self._moved = False

    def invalidate(self, txn: ReadTxn, touched: set[int], everything: bool, seq: int) -> None:
        """Inside a write txn whose commit will be snapshot `seq`: mark the domains the
        write may change (`everything`: all of them) now."""
        if everything or len(touched) > BULK_INVALIDATE:
            with self.lock:
                self.all_dirty = max(self.all_dirty, seq)
                self._queue.clear()         # (their marks would all be older)
                self._queued = 0
            return
        affected = _affected_domains(txn, touched)
        with self.lock:
            self._mark(affected, seq)

    def _mark(self, affected: set[int], seq: int) -> None:
        # (self.lock held)
        for d in affected:
            self.dirty[d] = max(self.dirty.get(d, 0), seq)
        if len(self.dirty) > 10 * MAX_DOMAINS:    # forget ancient marks
            self.all_dirty = max(self.all_dirty, seq, *self.dirty.values())
            self.dirty.clear()


class _Known:
    """What the heads of a write's created elements say for `_affected_domains`, taken
    from the columns the writer kept (`WriteContext.known_heads`) instead of reading
    each head back: the concepts and link ends (members), the types and predicates whose
    definitions matter, and the domains of new `belongs_to_domain` links or new Domain
    concepts. The ids it covers are taken out of `touched`."""

    __slots__ = ("members", "type_ids", "concepts", "links", "size")

    def __init__(self, columns: list, touched: set[int]) -> None:
        members: set[int] = set()
        type_ids: set[int] = set()
        concepts: list[tuple[Any, Any]] = []         # (ids, type_ids) columns
        links: list[tuple[Any, Any, Any]] = []       # (subjects, predicates, objects)
        size = 0
        for column in columns:
            ids = column[0]
            touched.difference_update(ids)
            size += len(ids)
            if len(column) == 2:
                members.update(ids)
                type_ids.update(column[1])
                concepts.append((ids, column[1]))
            else:
                members.update(column[1])
                members.update(column[3])
                links.append((column[1], column[2], column[3]))
        self.members, self.type_ids, self.concepts, self.links, self.size = \
            members, type_ids, concepts, links, size

    def apply(self, members: set[int], defs: set[tuple[int | None, int]], out: set[int],
              domain_t: int | None, ct: int | None, pt: int | None, bd: int) -> None:
        """Add to `_affected_domains`' sets what reading the heads would have added."""
        members |= self.members
        for t in self.type_ids:
            defs.add((ct, t))
        if domain_t in self.type_ids:
            for ids, types in self.concepts:
                out.update(n for n, t in zip(ids, types) if t == domain_t)
        for _subjects, predicates, objects in self.links:
            kinds = set(predicates)
            for p in kinds:
                defs.add((pt, p))
            if bd in kinds:
                out.update(o for p, o in zip(predicates, objects) if p == bd)


def _affected_domains(txn: Any, touched: set, known: "list[_Known] | None" = None
                      ) -> set[int]:
    bd = txn.symbol_id(BELONGS)
    if bd is None:
        return set()
    domain_t = txn.symbol_id(DOMAIN)
    ct, pt = txn.symbol_id(CONCEPT_TYPE), txn.symbol_id(PROPOSITION_TYPE)
    out: set[int] = set()
    # The concepts whose domains matter: touched concepts, the ends of touched links and
    # the definitions of their types/predicates — each looked up once (a load's links
    # share their ends and predicates).
    members: set[int] = set()
    defs: set[tuple[int | None, int]] = set()
    for kn in known or ():
        kn.apply(members, defs, out, domain_t, ct, pt, bd)
    prefetch = getattr(txn, "prefetch_elements", None)
    if prefetch is not None and txn.prefers_batches():
        # (PostgreSQL: the heads of a settled queue — up to QUEUE_IDS ids of earlier
        # writes, unknown to this transaction — a statement per chunk, not one each)
        prefetch(list(touched))
    for n in touched:
        head = txn.head(n)
        if head is None:
            continue
        if type(head) is ConceptHead:
            if head.type_id == domain_t:
                out.add(n)
            members.add(n)
            defs.add((ct, head.type_id))
        else:
            if head.predicate_id == bd:
                out.add(head.object)
            members.add(head.subject)
            members.add(head.object)
            defs.add((pt, head.predicate_id))
    pairs = [(meta, txn.symbol_text(sid)) for meta, sid in defs if meta is not None]
    members.update(n for n in txn.concept_ids(pairs) if n is not None)
    if txn.prefers_batches():       # every read a round trip: all members' links at once
        for found in txn.out_links_of(list(members), bd).values():
            for _, d, _ in found[:32]:
                out.add(d)
        return out
    # Few `belongs_to_domain` links (the usual case: a handful of domains and their
    # definitions) are read in one scan; many are sought per member.
    few = list(islice(txn.links_of_predicate(bd), len(members) + 1))
    if len(few) <= len(members):
        per: dict[int, int] = {}
        for s, d, _ in few:
            if s in members and per.get(s, 0) < 32:
                per[s] = per.get(s, 0) + 1
                out.add(d)
    else:
        for n in members:
            for _, d, _ in islice(txn.out_links(n, bd), 32):
                out.add(d)
    return out


# --- computing ---------------------------------------------------------------------------

def describe_primer(ctx: ExecContext) -> dict:
    """The PRIMER object of CONTRACT §8 for the context's snapshot."""
    txn = ctx.txn
    cache = ctx.primer
    seq = txn.snapshot_id()
    if seq is None:             # not a committed snapshot: nothing to share with others
        cache = None
    elif cache is not None:
        cache.settle(txn, seq)  # the writes this snapshot sees: their domains marked
    domain_t = txn.symbol_id(DOMAIN)
    domains = list(txn.concepts_of_type(domain_t)) if domain_t is not None else []
    entries = []
    for d in domains:
        ranking = cache.get(d) if cache is not None else None
        if ranking is None:
            ranking = rank_domain(txn, d)
            if cache is not None and seq is not None:
                cache.put(d, seq, ranking)
        entries.append((d, ranking))
    entries.sort(key=lambda e: (-e[1]["size"], _name(txn, e[0])))
    domain_map = []
    for d, ranking in entries[:MAX_DOMAINS]:
        desc = txn.attributes(d).get("description")
        domain_map.append({
            "name": _name(txn, d),
            "description": desc if isinstance(desc, str) else "",
            "key_concept_types": ranking["types"],
            "key_proposition_types": ranking["predicates"],
            "key_concepts": ranking["concepts"],
        })
    # SEARCH MODE capability (spec §5.2.1, CONTRACT §10): `search_modes` lists the modes
    # served as asked; `extensions.search` tells the default, the semantic embedder and
    # what "semantic" / "hybrid" fall back to without one.
    service = ctx.search
    modes: list[str] = []
    extensions = _extensions(txn)
    if service is not None:
        search = service.search_capability
        modes = search["modes"]
        extensions["search"] = {**search, "matching": service.search_modes}
    return {"identity": _identity(txn), "domain_map": domain_map,
            "total_domains": len(domains), "search_modes": modes,
            "extensions": extensions}


def _extensions(txn: ReadTxn) -> dict[str, Any]:
    """What this engine offers beyond KIP 1.x (docs/history.md)."""
    return {"history": {
        "enabled": history.is_enabled(txn),
        "statements": ['FIND … AS OF "<ISO time>" | AS OF VERSION <seq>',
                       'DESCRIBE HISTORY [{id: "C:…"} | (id: "P:…")] [LIMIT n] [CURSOR c]',
                       'REVERT COMMAND <seq> | REVERT {id: …} TO VERSION <v> '
                       'REASON "…" [FORCE]'],
    }}


def _name(txn: ReadTxn, n: int) -> str:
    """The name of a concept known to exist (a domain read from an index)."""
    head = txn.known_head(n)
    assert isinstance(head, ConceptHead)
    return head.name


def _identity(txn: Any) -> dict | None:
    person = txn.symbol_id("Person")
    n = txn.concept_id(person, "$self") if person is not None else None
    return None if n is None else definition_json(txn, txn.known_head(n))


def rank_domain(txn: Any, domain: int) -> dict:
    """The ranking of one domain (bounded work; see the module docstring)."""
    bd = txn.symbol_id(BELONGS)
    ct, pt = txn.symbol_id(CONCEPT_TYPE), txn.symbol_id(PROPOSITION_TYPE)
    empty = {"size": 0, "types": [], "predicates": [], "concepts": []}
    if bd is None:
        return empty
    members: list[ConceptHead] = []
    for _, s, _ in islice(txn.in_links(domain, bd), MAX_MEMBERS):
        head = txn.head(s)
        if type(head) is ConceptHead:
            members.append(head)
    if not members:
        return empty
    type_score: dict[str, float] = defaultdict(float)
    pred_score: dict[str, float] = defaultdict(float)
    instances = []
    for h in members:
        if h.type_id == ct:
            type_score[h.name] += 0.5 * math.log1p(_count_type(txn, h.name)) + 0.01
        elif h.type_id == pt:
            pred_score[h.name] += 0.5 * math.log1p(_count_pred(txn, h.name)) + 0.01
        else:
            instances.append(h)
    if instances:
        index = {h.n: i for i, h in enumerate(instances)}
        edges: list[tuple[int, int]] = []
        degree: dict[int, int] = {}
        preds: dict[int, Counter] = {}
        for h in instances:
            c: Counter = Counter()
            deg = 0
            for p, o, _ in islice(txn.out_links(h.n), MAX_LINKS):
                if p == bd:
                    continue
                deg += 1
                c[p] += 1
                j = index.get(o)
                if j is not None and o != h.n:
                    edges.append((index[h.n], j))
            for p, _, _ in islice(txn.in_links(h.n), MAX_LINKS):
                deg += 1
                c[p] += 1
            degree[h.n] = deg
            preds[h.n] = c
        importance = _importance(instances, edges, degree)
        for h in instances:
            imp = importance[h.n]
            type_score[txn.symbol_text(h.type_id)] += imp
            for p, cnt in preds[h.n].items():
                pred_score[txn.symbol_text(p)] += imp * math.log1p(cnt)
        top = heapq.nlargest(TOP_K, instances, key=lambda h: (importance[h.n], -h.n))
        concepts = [{"type": txn.symbol_text(h.type_id), "name": h.name} for h in top]
    else:
        concepts = []
    return {"size": len(members), "types": _top(type_score), "predicates": _top(pred_score),
            "concepts": concepts}


def pagerank(size: int, edges: list[tuple[int, int]], alpha: float = 0.85,
             iterations: int = 60, tol: float = 1e-6) -> np.ndarray:
    """PageRank of nodes 0..size-1 over directed `edges` (dangling mass spread evenly)."""
    if size == 0:
        return np.zeros(0)
    rank = np.full(size, 1.0 / size)
    if not edges:
        return rank
    src = np.fromiter((a for a, _ in edges), dtype=np.int64, count=len(edges))
    dst = np.fromiter((b for _, b in edges), dtype=np.int64, count=len(edges))
    out_deg = np.bincount(src, minlength=size).astype(float)
    dangling = out_deg == 0
    for _ in range(iterations):
        share = np.where(dangling, 0.0, rank / np.where(dangling, 1.0, out_deg))
        new = np.bincount(dst, weights=share[src], minlength=size)
        new = alpha * (new + rank[dangling].sum() / size) + (1.0 - alpha) / size
        if np.abs(new - rank).sum() < tol:
            return new
        rank = new
    return rank


def _importance(instances: list[ConceptHead], edges: list[tuple[int, int]],
                degree: dict[int, int]) -> dict[int, float]:
    pr = pagerank(len(instances), edges)
    top_pr = float(pr.max()) or 1.0
    top_deg = math.log1p(max(degree.values(), default=0)) or 1.0
    return {h.n: 0.5 * float(pr[i]) / top_pr + 0.5 * math.log1p(degree.get(h.n, 0)) / top_deg
            for i, h in enumerate(instances)}


def _top(scores: dict[str, float]) -> list[str]:
    return [name for name, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_K]]


def _count_type(txn: Any, name: str) -> int:
    tid = txn.symbol_id(name)
    return txn.count_type(tid) if tid is not None else 0


def _count_pred(txn: Any, name: str) -> int:
    pid = txn.symbol_id(name)
    return txn.count_predicate(pid) if pid is not None else 0
