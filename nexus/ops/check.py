"""`kip check`: verify every index of a nexus against its base records; optionally repair.

Orchestrates integrity verification over the two places indexes live:

* the store's own derived tables (symbol index, concept and link indexes, statistics,
  counters) — the backend checks them itself, `GraphStore.check_tables` (for LMDB and
  memory: `nexus.store.integrity`, which also names the drift categories `REPAIRABLE` and
  `UNREPAIRABLE`);
* the search indexes kept beside the store: the lexical forward index (`lexdoc`, one entry
  per element, equal to what the element's data gives), its postings, document frequencies,
  document counts and name keys (`lex`, derived from the forward index), and the vector
  index (one vector set per element, caught up with the change queue) — through
  `nexus.search`, plus the deep posting and vector checks here.

`verify(nexus, repair=True)` rewrites what is derived from the base records: the store's
derived tables in ONE write transaction of the engine's write session, then, when the search
indexes drifted, a full `nexus.search.reindex()` (its own write transaction). Base records
are never changed.
"""
from __future__ import annotations

import struct
from collections import Counter
import time
from typing import Any, Callable, Iterator

from .. import history
from ..errors import KipError, internal_error
from ..store.integrity import EXAMPLES, REPAIRABLE, UNREPAIRABLE, Findings

# Search drift found by `nexus.search.check` (counts) and here (deep posting checks).
POSTING_CATEGORIES = ("postings_missing", "postings_orphans", "postings_wrong",
                      "postings_malformed", "doc_freq_drift", "doc_count_drift",
                      "names_missing", "names_orphans")
# ... and the vectors' content (deep): each element's vectors are those of its current text.
VECTOR_CATEGORIES = ("vector_slots_wrong", "vector_stale")
VECTOR_MIN_COSINE = 0.98    # the index stores i8-quantised vectors: equal ones score > 0.999
VECTOR_CHUNK = 2048         # elements compared per hold of the vector lock
# How long a check waits, in all, for the vector indexer to cover every committed change
# (`kip check --wait S`, KIP_CHECK_WAIT). Past it the vectors are reported as pending (not
# compared), never waited for without end: a freshly bulk-loaded database can have hours
# of embedding queued.
CATCH_UP_SECONDS = 60.0
Progress = Callable[[str, int, int], None]


# --- public entry points ----------------------------------------------------------------------

def verify(nexus: Any, *, deep: bool = True, repair: bool = False,
           examples: int = EXAMPLES, wait: float | None = None,
           progress: Progress | None = None) -> dict[str, Any]:
    """Check the store's indexes and the search indexes of `nexus` against its base records.

    Returns `{"ok", "store": {...}, "search": {...}}`: each part has `"ok"`, a count per
    drift category (0 when in step) and `"examples"` of what drifted. `deep` also recomputes
    every lexical document and checks every posting against it (slower). With `repair`, the
    derived indexes are rebuilt where they drifted and the result gains `"repaired"`:
    `{"store_fixes", "search_reindexed", "ok", "store", "search"}` — the last three from a
    fresh check after the repair (`ok` is False only when base records are damaged).

    The vector part first waits for the vector indexer, at most `wait` seconds in all
    (default `CATCH_UP_SECONDS`), calling `progress("vector catch-up", done, total)` (ids)
    while it waits. If the indexer is still working through its queue then, the vectors
    are not compared: the search part gets `"vector_pending"` (what is queued) instead of
    vector counts, and the report a `"pending"` sentence saying so (`ok` covers what was
    checked). An indexer that is stopped or failing is drift (`vector_lag`), not pending.
    Raises only KipError.
    """
    budget = _Budget(CATCH_UP_SECONDS if wait is None else max(0.0, wait), progress)
    try:
        if not repair:
            with nexus.store.read() as txn:
                store = nexus.store.check_tables(txn, examples=examples).report
                log = history.check_log(txn, examples) if deep else {"ok": True}
            search = _search_report(nexus, deep, examples, budget)
            return _combine(store, search, log)
        before_store, fixes = repair_store(nexus, examples)
        before_search = _search_report(nexus, deep, examples, budget)
        reindexed = False
        if not before_search["ok"] or fixes:
            nexus.search.reindex()
            reindexed = True
        report = _combine(before_store, before_search, {"ok": True})
        after = verify(nexus, deep=deep, examples=examples, wait=budget.left(),
                       progress=progress)
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
        found = nexus.store.check_tables(session.store_txn, examples=examples,
                                         repair=True)
    return found.report, found.fixes


def _combine(store: dict, search: dict, log: dict) -> dict[str, Any]:
    """The report; the version log's part (`history`) only when it was checked."""
    out = {"ok": store["ok"] and search["ok"] and log["ok"], "store": store, "search": search}
    if len(log) > 1:
        out["history"] = log
    pending = search.get("vector_pending") or search.get("semantic_pending")
    if pending:
        what = (f"rebuilding the vector index, about {pending['ids']} ids to go"
                if pending["rebuild"] else
                f"{pending['ids']} ids of {pending['changes']} committed changes queued")
        out["pending"] = (
            f"the vector indexer is still catching up ({what} after waiting "
            f"{pending['waited_seconds']:g} s): the vectors were not compared. They are "
            f"applied in the background while the database is open (a server catches up "
            f"by itself); check again later, or wait longer with `kip check --wait SECONDS`")
    if search.get("gram_unbuilt"):
        out["pending"] = "; ".join(filter(None, (out.get("pending"), (
            "the gram postings (keyword SEARCH's typo candidates) of this database, written "
            "by an earlier version, are not built yet, so they were not compared: the next "
            "open for writing (kip serve, kip load, kip check --repair, Nexus.open) builds "
            "them"))))
    if store.get("pending"):        # a recovery a full disk left unfinished (the store's)
        out["pending"] = "; ".join(filter(None, (store["pending"], out.get("pending"))))
    return out


class _Budget:
    """The seconds a check may still wait for the vector indexer, and its progress."""

    def __init__(self, seconds: float, progress: Progress | None) -> None:
        self.deadline = time.monotonic() + seconds
        self.progress = progress

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def catch_up(self, vectors: Any) -> bool:
        """Wait (within the budget) until the vectors cover every committed change;
        whether they do."""
        first = None
        while True:
            if vectors.drain(timeout=min(1.0, self.left())):
                if self.progress is not None and first:
                    self.progress("vector catch-up", first, first)
                return True
            backlog = int(vectors.backlog)
            first = backlog if first is None else max(first, backlog)
            if self.progress is not None and first:
                self.progress("vector catch-up", first - backlog, first)
            if self.left() <= 0:
                return False


def _pending(v: Any, nexus: Any, waited: float) -> dict[str, Any] | None:
    """What a vector index's indexer has still to apply, when it is alive and working on
    it (None when it has caught up, or is stopped or failing: that is drift)."""
    from ..search.vectors import read_seq
    indexer = v.indexer
    if indexer is None or not indexer.is_alive() or v.error is not None:
        return None
    with nexus.store.read() as txn:
        changes = read_seq(txn) - v.applied_seq
    if changes <= 0 and not v.needs_rebuild:
        return None
    return {"changes": max(0, changes), "ids": int(v.backlog), "rebuild": v.needs_rebuild,
            "waited_seconds": round(waited, 1)}


def _search_report(nexus: Any, deep: bool, examples: int,
                   budget: _Budget | None = None) -> dict[str, Any]:
    service = getattr(nexus, "search", None)
    if service is None:
        return {"ok": True, "available": False}
    budget = budget or _Budget(CATCH_UP_SECONDS, None)
    started = time.monotonic()
    indexes = service.vector_indexes()          # the n-gram index, the semantic one
    for index in indexes:
        budget.catch_up(index)
    # What is still pending is read before the counts: an indexer that finishes while they
    # are counted (a rebuild of a few seconds) left them counting its queue as missing.
    waits = [_pending(index, nexus, time.monotonic() - started) for index in indexes]
    report = dict(service.check(deep=deep, wait=0))
    report.pop("ok", None)
    pending = None
    for waiting, prefix in zip(waits, ("vector", "semantic")):
        if waiting is not None:
            # Not caught up: its counts say nothing yet (every queued element would count
            # as missing); report what is queued instead.
            for key in ("missing", "orphans", "lag"):
                report.pop(f"{prefix}_{key}", None)
            report[f"{prefix}_pending"] = waiting
            pending = pending or waiting
    if deep:
        with nexus.store.read() as txn:
            posting = PostingCheck(txn, examples).run()
        # (A store whose vectors are rows of its database checks them itself.)
        own = getattr(service, "vector_check", None)
        # (none of the default embedder, whose typo candidates are the gram postings that
        # `service.check` compared above: `nexus.search.gram_index`)
        vector = {} if pending is not None else own(examples) if own is not None else \
            VectorCheck(service.vectors, nexus.store, examples, budget).run() \
            if getattr(service.vectors, "build", True) else {}
        examples_found = {**posting.pop("examples", {}), **vector.pop("examples", {})}
        report.update(posting)
        report.update(vector)
        if examples_found:
            report["examples"] = examples_found
    from ..search.service import NOT_DRIFT
    report["ok"] = not any(v for k, v in report.items()
                           if k not in NOT_DRIFT and type(v) is int)
    return report


# --- the lexical postings ------------------------------------------------------------------------

class PostingCheck(Findings):
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
        from ..search.lexical_names import LINK_NAMES
        from ..search.text import KIND_LINK, element_doc
        lex = self.txn.aux("lex")
        expected: dict[bytes, dict[int, tuple[float, int]]] = {}   # kind+term → postings
        names: dict[bytes, bytes] = {}
        link_names: dict[bytes, list[bytes]] = {}   # a link name's key prefix -> its ids
        docs = dict.fromkeys(lexical.KIND_BYTES, 0)
        # Pending documents (`lexical.SMALL_WRITE`): a copy of their forward entry under a
        # `q` key, and no postings in the lists nor in the dfs yet.
        pending = {key[2:]: raw for key, raw in lex.scan(b"q")}
        ends: dict[int, str] = {}       # (a MARKed link's end names, read once each)
        for key, raw in self.txn.aux("lexdoc").scan():
            n = int.from_bytes(key, "big")
            try:
                if raw == lexical.MARK:     # a link's texts, as the graph gives them
                    if len(ends) > 100_000:
                        ends.clear()
                    marked = lexical.Entry.of_link(self.txn, n, ends)
                    if marked is None:
                        raise ValueError("no such link")
                    entry = marked
                else:   # (a concept's derived entry: its terms from its document,
                    #       which must be there and match the entry's digest)
                    entry = lexical.Entry(raw, lambda: element_doc(self.txn, n),
                                          strict=True)
                kb = lexical.KIND_BYTES[entry.kind]
            except Exception:  # noqa: BLE001 - a damaged forward entry
                self.problem("postings_malformed", f"lexdoc entry of {n} does not decode")
                continue
            docs[kb] += 1
            copy = pending.pop(key, None)
            if copy is not None:
                if copy != lexical.pending_copy(raw, entry):
                    self.problem("postings_wrong", f"pending entry of {n} differs from lexdoc")
            for term, weight in (entry.terms.items() if copy is None else ()):
                expected.setdefault(kb + term.encode(), {})[n] = (
                    float(np.float16(weight)), entry.group)
            for i, nn in enumerate(entry.names):
                if nn:
                    name_key = b"n" + kb + nn.encode() + b"\x00" + key
                    names[name_key] = struct.pack("<IB", entry.group, 1 if i else 0)
                    if entry.kind == KIND_LINK:
                        link_names.setdefault(name_key[:-8], []).append(key)
        found: Counter = Counter()          # kind+term → postings that match a document
        marks: list[bytes] = []             # link names marked as LINK_NAMES or more listed
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
            elif tag == b"q":
                pass                        # pending documents: compared above
            elif tag == b"L" and not value:
                marks.append(b"n" + key[1:] + b"\x00")     # a link name's prefix
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
        # A link name's keys list a prefix of its links in id order, at least LINK_NAMES
        # long or all of them (`lexical_names`): the keys past the last one listed are
        # not missing.
        found_names: dict[bytes, int] = {}   # a link name's key prefix -> keys found
        for prefix, ids in link_names.items():
            ids.sort()
            listed = [i for i, idb in enumerate(ids) if prefix + idb not in names]
            upto = max(min(LINK_NAMES, len(ids)), listed[-1] + 1 if listed else 0)
            for idb in ids[upto:]:
                names.pop(prefix + idb, None)
            found_names[prefix] = len(listed)
        for prefix in marks:
            if found_names.get(prefix, 0) < LINK_NAMES:
                self.problem("names_orphans", f"mark of {prefix[:60]!r}: fewer listed")
        for key in names:
            self.problem("names_missing", f"name key {key[:60]!r}")
        for key in pending:
            self.problem("postings_orphans",
                         f"pending document {key.hex()} has no lexdoc entry")
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

class VectorCheck(Findings):
    """The vector index's content against the data (deep only): for every concept (links
    have no vectors), the slots it has in the usearch index are exactly those of its
    current vector texts (name, aliases and "name: description",
    `nexus.search.vectors.doc_texts`; `vector_slots_wrong` otherwise),
    and each slot holds the embedding of that text (`vector_stale` otherwise) — so a vector
    left behind by a lost or replayed change is found, not only a missing one.

    Compares a snapshot with the index only while the index covers exactly that snapshot
    (its applied change sequence equals the snapshot's), holding the vector lock per chunk
    so the indexer cannot move in between; a chunk that finds the index behind or ahead
    waits for the indexer and retries. Elements whose vectors are missing altogether are
    `nexus.search.check`'s `vector_missing`, and not counted again here."""

    def __init__(self, vectors: Any, store: Any, examples: int = EXAMPLES,
                 budget: _Budget | None = None) -> None:
        super().__init__(examples)
        self.vectors = vectors
        self.store = store
        self.compared = 0
        self.budget = budget or _Budget(CATCH_UP_SECONDS, None)

    def run(self) -> dict[str, Any]:
        from ..search.vectors import may_have_vectors
        with self.store.read() as txn:
            # Links have no vectors: their documents are never built here (nor under the
            # vector lock, which the indexer and every SEARCH wait for).
            ids = may_have_vectors(txn, txn.elements())
        for i in range(0, len(ids), VECTOR_CHUNK):
            self._chunk(ids[i:i + VECTOR_CHUNK])
        report: dict[str, Any] = {c: self.counts[c] for c in VECTOR_CATEGORIES}
        report["vectors_compared"] = self.compared
        if self.examples:
            report["examples"] = self.examples
        return report

    def _chunk(self, ids: list[int], attempts: int = 3) -> None:
        import numpy as np

        from ..search.text import KIND_CONCEPT, element_doc
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
                        try:
                            doc = element_doc(txn, n)
                        except KipError:    # undecodable: the store check's damage
                            continue
                        if doc is not None and doc.kind == KIND_CONCEPT:
                            wanted.append((doc.kind, n, doc_texts(doc, v.embedder)))
                    stored = []
                    ix = v.indexes[KIND_CONCEPT]
                    for kind, n, texts in wanted:
                        keys = np.arange(SLOTS, dtype=np.uint64) + np.uint64(n * SLOTS)
                        present = keys[np.asarray(ix.contains(keys), dtype=bool)] \
                            if len(ix) else keys[:0]
                        vecs = np.asarray(ix.get(present), dtype=np.float32).reshape(
                            len(present), -1) if len(present) else None
                        stored.append(((present - np.uint64(n * SLOTS)).tolist(), vecs))
            if in_step:
                break
            v.drain(timeout=min(30.0, self.budget.left()))
        else:
            self.problem("vector_stale", f"the vector index did not settle on a snapshot "
                         f"for {len(ids)} elements", len(ids))
            return
        texts = [t for _, _, ts in wanted for t in ts]
        fresh = v.embedder.embed(texts) if texts else None
        at = 0
        for (kind, n, ts), (slots, vecs) in zip(wanted, stored):
            want = fresh[at:at + len(ts)] if ts and fresh is not None else None
            at += len(ts)
            if not slots:
                continue                    # no vector at all: vector_missing
            self.compared += 1
            if slots != list(range(len(ts))):
                self.problem("vector_slots_wrong", f"{'C' if kind == 0 else 'P'}:{n} has "
                             f"vector slots {slots}, its text gives {len(ts)}")
                continue
            # slots == range(len(ts)) and slots non-empty: both sides have vectors
            assert vecs is not None and want is not None
            norms = np.linalg.norm(vecs, axis=1) * np.linalg.norm(want, axis=1)
            cosine = (vecs * want).sum(axis=1) / np.where(norms > 0, norms, 1.0)
            if (cosine < VECTOR_MIN_COSINE).any():
                self.problem("vector_stale", f"{'C' if kind == 0 else 'P'}:{n}: a vector is "
                             f"not its text's (cosine {float(cosine.min()):.3f}): "
                             f"{[t[:60] for t in ts]}")


def format_problems(report: dict[str, Any]) -> Iterator[str]:
    """One line per drift category with a nonzero count (for humans)."""
    from ..search.service import NOT_DRIFT
    for part in ("store", "search", "history"):
        for key, value in report.get(part, {}).items():
            if isinstance(value, int) and not isinstance(value, bool) and value and \
                    key not in NOT_DRIFT and key not in ("concepts", "links", "symbols", "seq"):
                yield f"{part}.{key}: {value}"


__all__ = ["verify", "repair_store", "PostingCheck", "VectorCheck", "format_problems",
           "REPAIRABLE", "UNREPAIRABLE"]
