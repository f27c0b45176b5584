"""A bulk load's vectors embedded while it goes on (nexus/search/ahead.py): the index it
returns with holds the same rows as when every queued concept is read back and embedded at
the end; a concept written again later (by the load, or by another writer between its
batches) gets the vector of its last write; a load that fails leaves no vector of what it
rolled back; an embedding that fails on the worker is done again at the end.

Each test loads twice — once as the load does (`ahead`), once with the worker given nothing
(`Ahead.stage` a no-op: `fill` then reads everything back, as before) — and compares the
indexes' keys and rows. The n-gram index (`conftest.ngram_vectors`: the default embedder
with vectors, HNSW) runs everywhere; the semantic one (WordLlama, IVF) needs the extra.
"""
from __future__ import annotations

import os
import random
import signal
import time

import numpy as np
import pytest

from nexus import Nexus
from nexus.errors import KipError
from nexus.ops.bulk_import import bulk_import
from nexus.search import ahead as ahead_mod
from nexus.search import embed_proc
from nexus.search import vectors as vectors_mod
from nexus.search.embed import WordLlamaEmbedder, semantic_installed
from nexus.search.vectors import SLOTS, read_seq

needs_extra = pytest.mark.skipif(not semantic_installed(),
                                 reason="needs the semantic extra (wordllama)")

SCHEMA = ('UPSERT { CONCEPT ?t { {type: "$ConceptType", name: "Drug"} '
          'SET ATTRIBUTES {description: "d"} } '
          'CONCEPT ?p { {type: "$PropositionType", name: "treats"} } }')


def kip(nx, command, **parameters):
    response = nx.execute_kip({"command": command, "parameters": parameters})
    assert "error" not in response, response
    return response["result"]


def drug(i, description=None, aliases=None):
    attrs = {"description": description or f"a compound that lowers fever, number {i}"}
    if aliases:
        attrs["aliases"] = aliases
    return {"type": "Drug", "name": f"Oxaprozine {i}", "attributes": attrs}


def rows(index):
    """key -> row of every vector of `index` (keys sorted)."""
    ix = index.indexes[0]
    keys = np.sort(np.asarray(ix.keys, dtype=np.uint64))
    got = np.asarray(ix.get(keys)).reshape(len(keys), -1) if len(keys) else np.zeros((0, 1))
    return keys, got


def load(tmp_path, name, ahead, monkeypatch, semantic, items, links=(), between=None,
         **sizes):
    """Open a database, define the schema, stop the indexers and bulk-load `items`; return
    the nexus (open) and the rows of its building indexes."""
    with monkeypatch.context() as m:
        if not ahead:
            m.setattr(ahead_mod.Ahead, "stage", lambda self, *a, **k: None)
        nx = Nexus.open(str(tmp_path / name), durable=False,
                        semantic="wordllama" if semantic else "none")
        kip(nx, SCHEMA)
        nx.search.drain()
        for index in nx.search.vector_indexes():
            index.stop()                         # no indexer: only the load builds them
        progress = None
        if between is not None:
            progress = lambda kind, done: between(nx, kind, done)  # noqa: E731
        try:
            bulk_import(nx, items, links, progress=progress, **sizes)
        finally:
            built = [index for index in nx.search.vector_indexes() if index.build]
    with nx.store.read() as txn:
        seq = read_seq(txn)
    assert all(index.applied_seq == seq for index in nx.search.vector_indexes())
    return nx, [rows(index) for index in built]


def same(a, b):
    assert len(a) == len(b)
    for (ka, ra), (kb, rb) in zip(a, b):
        assert ka.tolist() == kb.tolist()
        assert np.array_equal(ra, rb)


def items_with_rewrites():
    """Concepts over several chunks and batches, some written again by later chunks (a
    new description, aliases added) and one twice in the same chunk."""
    items = [drug(i) for i in range(300)]
    items += [drug(7, "rewritten later in the same load"), drug(150, aliases=["OXZ-150"])]
    items += [drug(i) for i in range(300, 420)]
    items += [drug(299, "and again in the last batch", ["OXZ-299", "Oxa 299"])]
    items += [drug(400, "twice in one chunk"), drug(400, "twice in one chunk, last")]
    return items


LINKS = [{"predicate": "treats", "subject": {"type": "Drug", "name": f"Oxaprozine {i}"},
          "object": {"type": "Drug", "name": f"Oxaprozine {i + 1}"}} for i in range(0, 400, 3)]


@pytest.mark.parametrize("semantic", [False, pytest.param(True, marks=needs_extra)])
def test_the_rows_are_those_of_the_documents_read_back(tmp_path, monkeypatch, ngram_vectors,
                                                        semantic):
    items = items_with_rewrites()
    read_back: list[int] = []
    real_docs = vectors_mod.VectorIndex._docs

    def docs(self, txn, ids):
        ids = list(ids)
        read_back.extend(ids)
        return real_docs(self, txn, ids)
    monkeypatch.setattr(vectors_mod.VectorIndex, "_docs", docs)
    nx, got = load(tmp_path, "a", True, monkeypatch, semantic, items, LINKS,
                   batch_size=250, chunk_size=60)
    try:
        with nx.store.read() as txn:
            loaded = {txn.concept_id(txn.symbol_id("Drug"), f"Oxaprozine {i}")
                      for i in range(420)}
        assert not loaded & set(read_back)       # none read back: all embedded ahead
        assert nx.search.check(wait=0)["ok"]
    finally:
        nx.close()
    read_back.clear()
    nx, want = load(tmp_path, "b", False, monkeypatch, semantic, items, LINKS,
                    batch_size=250, chunk_size=60)
    nx.close()
    assert loaded <= set(read_back)              # (the comparison load read them back)
    assert sum(len(k) for k, _ in want) >= 420
    same(got, want)
    if semantic:        # the saved inverted file too: its rows in the same order
        a, b = (tmp_path / db / "semantic.concepts.ivf" for db in "ab")
        assert a.read_bytes() == b.read_bytes()


@needs_extra
def test_a_concept_another_writer_changes_between_batches_gets_its_last_texts(
        tmp_path, monkeypatch, ngram_vectors):
    items = [drug(i) for i in range(200)]

    def between(nx, kind, done):
        if done == 100:                          # the first batch committed
            kip(nx, 'UPSERT { CONCEPT ?d { {type: "Drug", name: "Oxaprozine 5"} '
                    'SET ATTRIBUTES {description: "changed by another writer"} } }')
    nx, got = load(tmp_path, "a", True, monkeypatch, True, items, between=between,
                   batch_size=100, chunk_size=50)
    try:
        semantic = nx.search.semantic
        with nx.store.read() as txn:
            n = txn.concept_id(txn.symbol_id("Drug"), "Oxaprozine 5")
        q, inv = semantic.embed_rows(["Oxaprozine 5: changed by another writer"])
        key = np.array([n * SLOTS], dtype=np.uint64)
        assert np.array_equal(semantic.indexes[0].get(key),
                              q.astype(np.float32) * inv[:, None])
    finally:
        nx.close()
    nx, expected = load(tmp_path, "b", False, monkeypatch, True, items, between=between,
                        batch_size=100, chunk_size=50)
    nx.close()
    same(got, expected)


@pytest.mark.parametrize("semantic", [False, pytest.param(True, marks=needs_extra)])
def test_a_failed_load_leaves_no_vector_of_what_it_rolled_back(tmp_path, ngram_vectors,
                                                                semantic):
    items = [drug(i) for i in range(230)] + [{"type": "Drug"}]     # no name: rejected
    nx = Nexus.open(str(tmp_path / "a"), durable=False,
                    semantic="wordllama" if semantic else "none")
    try:
        kip(nx, SCHEMA)
        with pytest.raises(KipError):
            bulk_import(nx, items, batch_size=200, chunk_size=50)
        assert nx.search.drain(60)               # (the indexer builds the committed batch's)
        with nx.store.read() as txn:
            drug_type = txn.symbol_id("Drug")
            kept = {txn.concept_id(drug_type, f"Oxaprozine {i}") for i in range(200)}
            assert None not in kept               # the first batch committed ...
            assert txn.concept_id(drug_type, "Oxaprozine 210") is None   # ... not the 2nd
            top = txn.max_id()
        built = [index for index in nx.search.vector_indexes() if index.build]
        assert len(built) == 1 + semantic
        for index in built:
            ids = index.ids()
            assert kept <= ids and max(ids) <= top   # none of the rolled-back chunk's ids
        assert not nx.search._ahead              # (its worker stopped, its rows dropped)
        # The next load's concepts take the ids the rolled-back ones had: their vectors
        # are their own texts' (a deep check embeds every document again and compares).
        bulk_import(nx, [drug(i, "the next load") for i in range(500, 560)], chunk_size=20)
        with nx.store.read() as txn:
            assert txn.concept_id(drug_type, "Oxaprozine 500") == top + 1
        report = nx.check(deep=True, wait=0)
        assert report["ok"] and report["search"]["vectors_compared"] >= 260, report
    finally:
        nx.close()


@pytest.mark.parametrize("semantic", [False, pytest.param(True, marks=needs_extra)])
def test_a_chunk_whose_embedding_failed_is_embedded_at_the_end(tmp_path, monkeypatch,
                                                                ngram_vectors, semantic):
    items = [drug(i) for i in range(240)]
    real = vectors_mod.VectorIndex.embed_rows
    calls = []

    def flaky(self, texts):
        calls.append(len(texts))
        if len(calls) == 2:
            raise RuntimeError("the worker's embedder failed")
        return real(self, texts)
    monkeypatch.setattr(vectors_mod.VectorIndex, "embed_rows", flaky)
    nx, got = load(tmp_path, "a", True, monkeypatch, semantic, items,
                   batch_size=120, chunk_size=60)
    nx.close()
    assert len(calls) >= 2
    nx, want = load(tmp_path, "b", False, monkeypatch, semantic, items,
                    batch_size=120, chunk_size=60)
    nx.close()
    same(got, want)


@needs_extra
def test_the_grouped_embedding_gives_the_vectors_of_embed_bit_for_bit():
    """`WordLlamaEmbedder.embed_bulk` (the worker's: one tokenizer call per 4,096 texts,
    rows summed by token count) and `embed` (batches of 64, padded) agree to the bit."""
    e = WordLlamaEmbedder()
    rng = random.Random(5)
    words = ["fever", "Oxaprozine", "lowers", "the", "of", "名前", "Ünïcödé", "x", "a-b",
             "don't", "kinase", "inhibitor", "12", "β-blocker", ""]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randrange(0, 30)))
             for _ in range(5000)] + ["", "the of and", "word " * 200]
    with np.errstate(invalid="ignore"):         # (a text of no tokens: NaN in both)
        want = np.concatenate([e.embed(texts[i:i + 2048]) for i in range(0, len(texts), 2048)])
        got = e.embed_bulk(texts)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


# --- the worker process (nexus/search/embed_proc.py) ---------------------------------------
# Each test loads with the worker process (every chunk goes to it: PROCESS_MIN 1) and compares
# with the load that reads everything back. The process is a real one: its pid is recorded.

def worker_pids(monkeypatch):
    """Every chunk of a load to the worker process; the pids it started, listed."""
    monkeypatch.setattr(ahead_mod, "PROCESS_MIN", 1)
    pids: list[int] = []
    real = embed_proc.EmbedProcess._start

    def start(self):
        started = real(self)
        if started:
            pids.append(self.pid)
        return started
    monkeypatch.setattr(embed_proc.EmbedProcess, "_start", start)
    return pids


def gone(pid, timeout=30.0):
    """Whether process `pid` (a child of this one) has exited and been waited for within
    `timeout` seconds (a zombie is not: its parent, this process, did not wait for it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not os.path.exists(f"/proc/{pid}"):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("semantic", [False, pytest.param(True, marks=needs_extra)])
def test_the_worker_process_gives_the_rows_of_the_documents_read_back(
        tmp_path, monkeypatch, ngram_vectors, semantic):
    pids = worker_pids(monkeypatch)
    items = items_with_rewrites()
    nx, got = load(tmp_path, "a", True, monkeypatch, semantic, items, LINKS,
                   batch_size=250, chunk_size=60)
    nx.close()
    assert len(pids) == 1 + semantic             # one process per building index ...
    assert all(gone(pid) for pid in pids)        # ... stopped when the load returned
    nx, want = load(tmp_path, "b", False, monkeypatch, semantic, items, LINKS,
                    batch_size=250, chunk_size=60)
    nx.close()
    same(got, want)
    if semantic:
        a, b = (tmp_path / db / "semantic.concepts.ivf" for db in "ab")
        assert a.read_bytes() == b.read_bytes()


def test_a_failed_load_stops_its_worker_process(tmp_path, monkeypatch, ngram_vectors):
    pids = worker_pids(monkeypatch)
    items = [drug(i) for i in range(230)] + [{"type": "Drug"}]     # no name: rejected
    nx = Nexus.open(str(tmp_path / "a"), durable=False, semantic="none")
    try:
        kip(nx, SCHEMA)
        with pytest.raises(KipError):
            bulk_import(nx, items, batch_size=200, chunk_size=50)
        assert pids and all(gone(pid) for pid in pids)
        assert nx.search.drain(60)
        assert nx.check(deep=True, wait=0)["ok"]
    finally:
        nx.close()


@pytest.mark.parametrize("how", ["killed", "hung", "foreign"])
def test_a_worker_process_that_dies_hangs_or_differs_leaves_its_rows_to_fill(
        tmp_path, monkeypatch, ngram_vectors, how, caplog):
    """The worker killed after the first batch, stopped (SIGSTOP: it answers nothing, and
    the end of the load kills it after STALL), or building another embedder than the
    index's: the load completes with the same rows, embedded in process."""
    pids = worker_pids(monkeypatch)
    if how == "hung":
        monkeypatch.setattr(embed_proc, "STALL", 1.0)
    if how == "foreign":
        monkeypatch.setattr(embed_proc, "worker_spec", lambda embedder: ("hashed-ngrams", 64))
    items = [drug(i) for i in range(300)]

    def between(nx, kind, done):
        if done == 100 and how != "foreign":
            assert pids
            os.kill(pids[0], signal.SIGKILL if how == "killed" else signal.SIGSTOP)
    nx, got = load(tmp_path, "a", True, monkeypatch, False, items, between=between,
                   batch_size=100, chunk_size=50)
    try:
        assert nx.check(deep=True, wait=0)["ok"]
    finally:
        nx.close()
    assert pids and all(gone(pid) for pid in pids)
    if how == "hung":
        assert "answered nothing" in caplog.text
    elif how == "foreign":
        assert "built 'hashed-ngrams/v2/64'" in caplog.text
    nx, want = load(tmp_path, "b", False, monkeypatch, False, items, batch_size=100,
                    chunk_size=50)
    nx.close()
    same(got, want)


def test_the_jobs_a_slow_worker_process_has_not_started_are_embedded_at_the_end(
        tmp_path, monkeypatch, ngram_vectors):
    """The worker stopped after the first batch (SIGSTOP), so that it is behind when the
    load ends: `take` embeds the last jobs in process (each taken back from the worker),
    and the worker, let go on at the first of those, answers the others: the same rows."""
    pids = worker_pids(monkeypatch)
    items = [drug(i) for i in range(300)]
    here = []
    real = vectors_mod.VectorIndex.embed_rows

    def embed_rows(self, texts):
        here.append(len(texts))
        if len(here) == 1:
            os.kill(pids[0], signal.SIGCONT)
        return real(self, texts)
    monkeypatch.setattr(vectors_mod.VectorIndex, "embed_rows", embed_rows)

    def between(nx, kind, done):
        if done == 100:
            os.kill(pids[0], signal.SIGSTOP)
    nx, got = load(tmp_path, "a", True, monkeypatch, False, items, between=between,
                   batch_size=100, chunk_size=50)
    nx.close()
    assert here                                  # some taken back ...
    assert sum(here) < 300                       # ... not all: the worker answered some
    assert all(gone(pid) for pid in pids)
    nx, want = load(tmp_path, "b", False, monkeypatch, False, items, batch_size=100,
                    chunk_size=50)
    nx.close()
    same(got, want)


class _Embedder:
    """A stand-in embedder (no model): what `doc_texts` reads of one."""
    name = "stand-in"
    dim = 4
    contextual = True

    def __init__(self, context_only: bool) -> None:
        self.context_only = context_only


class _Index:
    """A stand-in vector index: records the texts each job is embedded from."""
    layout = "hnsw"

    def __init__(self, context_only: bool) -> None:
        self.embedder = _Embedder(context_only)
        self.texts: list[list[str]] = []

    def embed_rows(self, texts):
        self.texts.append(list(texts))
        return np.zeros((len(texts), 4), dtype=np.float32)


@pytest.mark.parametrize("context_only", [True, False])
def test_a_chunk_hands_the_worker_the_texts_doc_texts_gives_each_concept(context_only):
    # KIP §5.2.2: aliases are grounding fields (a vector each); a concept's vector texts
    # are those of its document, whatever shortcut the load takes for the common shape.
    from nexus.search.lexical_cols import NewConcepts
    from nexus.search.text import KIND_CONCEPT, Doc, concept_texts

    attrs = [None, {}, {"description": "lowers fever"},
             {"aliases": ["Oxa", "Oxa 3"], "description": "an NSAID"},
             {"aliases": ["Name 4"]}, {"description": ""}, {"aliases": "Single"},
             {"formula": "C2H6O", "description": "a solvent", "risk": 3},
             {"synonyms": ["Same", "Same"], "description": "x" * 5000}, None]
    names = [f"Name {i}" for i in range(len(attrs) - 1)] + [""]
    ids = list(range(100, 100 + len(attrs)))
    index = _Index(context_only)
    ahead = ahead_mod.Ahead(index)
    try:
        ahead.stage(object(), None, [], ids,
                    [NewConcepts(ids, [1] * len(ids), {1: "Drug"}, names, attrs)])
        want_keys, want_texts = [], []
        for n, name, a in zip(ids, names, attrs):
            aliases, _, context = concept_texts(name, a or {})
            doc = Doc(n, KIND_CONCEPT, 1, [name] + aliases, vec_texts=[name] + aliases,
                      context=context)
            for slot, t in enumerate(vectors_mod.doc_texts(doc, index.embedder)):
                want_keys.append(n * SLOTS + slot)
                want_texts.append(t)
        (job,) = ahead._jobs
        job.rows.result()
        assert index.texts == [want_texts]
        assert job.keys.tolist() == want_keys
        assert len(set(job.ids.tolist())) < len(ids)    # (the empty name has no text)
    finally:
        ahead.close()


def test_a_chunks_concept_texts_are_worked_out_once():
    from nexus.search import lexical_cols
    from nexus.search.text import concept_texts

    calls = []
    real = lexical_cols.concept_texts_many

    def counted(names, attrs):
        calls.append(len(names))
        return real(names, attrs)
    cols = lexical_cols.NewConcepts([1, 2], [1, 1], {1: "Drug"}, ["A", "B"],
                                    [{"description": "d"}, {"aliases": ["b"]}])
    try:
        lexical_cols.concept_texts_many = counted
        first, again = cols.texts(), cols.texts()
    finally:
        lexical_cols.concept_texts_many = real
    assert calls == [2]
    assert first is again
    assert first == [concept_texts("A", {"description": "d"}),
                     concept_texts("B", {"aliases": ["b"]})]


@pytest.mark.parametrize("shuffled", [False, True])
def test_the_rows_held_are_in_key_order_with_their_keys(shuffled):
    rng = np.random.default_rng(4)
    keys = np.sort(rng.choice(10_000, 300, replace=False)).astype(np.uint64)
    q = rng.integers(-127, 128, (300, 8)).astype(np.int8)
    inv = rng.random(300).astype(np.float32)
    parts = [slice(0, 100), slice(100, 220), slice(220, 300)]
    if shuffled:
        parts = parts[::-1]
    held = ahead_mod.Held(set(), [keys[p] for p in parts], [(q[p], inv[p]) for p in parts])
    assert held.keys.tolist() == keys.tolist()
    assert held.rows[0].tobytes() == q.tobytes()
    assert held.rows[1].tobytes() == inv.tobytes()
