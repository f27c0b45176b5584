"""The background vector indexer: writes only queue vector changes; the indexer builds them
off the write path; SEARCH waits for it only while the backlog is small; drain, check and
close wait for it; and the block-append fast path of the postings is byte-identical."""
from __future__ import annotations

import random

import numpy as np
import pytest

from nexus.ops.bulk_import import bulk_import
from nexus.search import postings
from nexus.search.vectors import read_seq

# The n-gram vector index's mechanics, exercised with the default embedder's cheap vectors
# (which by default has gram postings instead: `conftest.ngram_vectors`).
pytestmark = pytest.mark.usefixtures("ngram_vectors")

SCHEMA = 'UPSERT { CONCEPT ?t { {type: "$ConceptType", name: "Drug"} SET ATTRIBUTES {description: "d"} } }'


def names(hits):
    return [h["name"] for h in hits]


def test_writes_only_queue_vectors_and_drain_builds_them(nexus, kip):
    kip(nexus, SCHEMA)
    vectors = nexus.search.vectors
    vectors.stop()                                   # no indexer: nothing is embedded
    blocks = " ".join(f'CONCEPT ?c{i} {{ {{type: "Drug", name: "Metrazolam {i}"}} }}'
                      for i in range(50))
    kip(nexus, f"UPSERT {{ {blocks} }}")
    with nexus.store.read() as txn:
        assert read_seq(txn) > vectors.applied_seq   # queued, not applied
    nexus.search.wait_backlog = 0                    # do not wait: answer from what is there
    # lexical is transactional: the exact name is found at once
    assert names(kip(nexus, 'SEARCH CONCEPT "Metrazolam 41" LIMIT 1')) == ["Metrazolam 41"]
    assert nexus.search.drain()                      # without a thread: applied inline
    report = nexus.search.check()
    assert report["ok"] and report["vector_lag"] == 0, report
    assert names(kip(nexus, 'SEARCH CONCEPT "metrazolm 41" LIMIT 1')) == ["Metrazolam 41"]


def test_a_bulk_import_returns_with_its_vectors_built(nexus, kip):
    kip(nexus, SCHEMA)
    for index in nexus.search.vector_indexes():
        index.stop()                                 # no indexer: only the load builds them
    bulk_import(nexus, [{"type": "Drug", "name": f"Oxaprozine {i}",
                         "attributes": {"description": f"loaded compound {i}"}}
                        for i in range(600)], batch_size=250, chunk_size=100)
    with nexus.store.read() as txn:
        seq = read_seq(txn)
    assert all(index.applied_seq == seq for index in nexus.search.vector_indexes())
    nexus.search.wait_backlog = 0                    # nothing to wait for anyway
    assert names(kip(nexus, 'SEARCH CONCEPT "oxaprozin 417" LIMIT 1')) == ["Oxaprozine 417"]
    report = nexus.search.check(wait=0)
    assert report["ok"] and report["vector_lag"] == 0, report


def test_a_bulk_import_returns_with_its_vectors_saved_and_mapped(disk_nexus, kip):
    """A bulk load outgrows the small in-memory delta beside the mapped file: before it
    returns, its vectors are written to the files and mapped again (not held whole in the
    process's memory until the indexer gets to it), and a crash right after the load has
    nothing to embed again on open."""
    nx = disk_nexus()
    kip(nx, SCHEMA)
    for index in nx.search.vector_indexes():
        index.stop()                                 # no indexer: only the load saves
    bulk_import(nx, [{"type": "Drug", "name": f"Oxaprozine {i}",
                      "attributes": {"description": f"loaded compound {i}"}}
                     for i in range(600)], batch_size=250, chunk_size=100)
    with nx.store.read() as txn:
        seq = read_seq(txn)
    for index in nx.search.vector_indexes():
        assert index.saved_seq == seq and not index.unsaved
        assert all(ix.is_mapped and not len(ix.delta) for ix in index.indexes)
    from nexus.search import lexical_terms         # the load's texts are not kept either
    assert not lexical_terms.FIELD_CACHE and not lexical_terms.NAME_CACHE
    nx.search.wait_backlog = 0
    assert names(kip(nx, 'SEARCH CONCEPT "oxaprozin 417" LIMIT 1')) == ["Oxaprozine 417"]


def test_search_reads_its_own_writes_through_the_indexer(nexus, kip):
    kip(nexus, SCHEMA)
    for i in range(5):
        kip(nexus, f'UPSERT {{ CONCEPT ?d {{ {{type: "Drug", name: "Zolpidemix {i}"}} }} }}')
        # a typo only the vector side can propose: found right after the write
        assert names(kip(nexus, f'SEARCH CONCEPT "zolpidmix {i}" LIMIT 1')) == \
            [f"Zolpidemix {i}"]
    assert nexus.search.vectors.indexer.is_alive()


def test_bulk_loaded_items_are_found_once_drained(nexus, kip):
    kip(nexus, SCHEMA)
    bulk_import(nexus, [{"type": "Drug", "name": f"Compound {i}",
                         "attributes": {"description": f"batch compound {i}"}}
                        for i in range(3000)], batch_size=1000, chunk_size=400)
    assert nexus.search.drain(timeout=120)
    assert names(kip(nexus, 'SEARCH CONCEPT "Compund 2999" LIMIT 1')) == ["Compound 2999"]
    assert nexus.search.check()["ok"]


def test_close_drains_and_saves_everything(disk_nexus, kip):
    nx = disk_nexus()
    kip(nx, SCHEMA)
    bulk_import(nx, [{"type": "Drug", "name": f"Ketorolax {i}"} for i in range(800)])
    with nx.store.read() as txn:
        seq = read_seq(txn)
    nx.close()
    assert nx.search.vectors.saved_seq == seq
    nx = disk_nexus()
    assert nx.search.opened == "loaded"              # nothing left to replay
    assert names(kip(nx, 'SEARCH CONCEPT "ketorolx 512" LIMIT 1')) == ["Ketorolax 512"]


def test_catch_up_after_the_process_stops_without_close(disk_nexus, kip):
    nx = disk_nexus()
    kip(nx, SCHEMA)
    nx.search.save()
    nx.search.vectors.stop()                         # queued, never applied nor saved
    kip(nx, "UPSERT { " + " ".join(                  # (a bulk load saves its own vectors)
        f'CONCEPT ?c{i} {{ {{type: "Drug", name: "Oxaprozine {i}"}} }}' for i in range(300))
        + " }")
    nx.store.close()                                 # "crash": no search.close()
    nx._closed = True
    nx = disk_nexus()
    assert nx.search.opened == "caught-up"
    assert names(kip(nx, 'SEARCH CONCEPT "oxaprozne 123" LIMIT 1')) == ["Oxaprozine 123"]
    assert nx.search.check()["ok"]


def test_postings_append_fast_path_is_byte_identical():
    rng = random.Random(1)
    for _ in range(500):
        c = rng.randint(0, 127)
        k = rng.randint(1, 128 - c)
        ids = sorted(rng.sample(range(1, 10**6), c + k))
        w = [rng.random() * 2.2 for _ in ids]
        g = [rng.randint(0, 2**32 - 1) for _ in ids]
        raw = postings.encode(np.asarray(ids[:c], dtype=np.uint64),
                              np.asarray(w[:c], dtype=np.float32),
                              np.asarray(g[:c], dtype=np.uint32))
        ops = {n: (a, b) for n, a, b in zip(ids[c:], w[c:], g[c:])}
        want = postings.encode(np.asarray(ids, dtype=np.uint64),
                               np.asarray(w, dtype=np.float32), np.asarray(g, dtype=np.uint32))
        assert postings._spliced(raw, c, ids[c:], ops) == want


def test_the_indexer_waits_while_a_bulk_load_runs_and_catches_up_after(nexus, kip):
    kip(nexus, SCHEMA)
    vectors = nexus.search.vectors
    applied = []

    def concepts():
        for i in range(1200):
            if i == 1000:           # two batches committed by now: nothing applied yet
                applied.append(vectors.applied_seq)
            yield {"type": "Drug", "name": f"Oxaprozinol {i}"}
    # The schema's own vectors first: otherwise the indexer may still be applying them when
    # `before` is read, and they would count as applied during the load.
    assert nexus.search.drain(timeout=120)
    before = vectors.applied_seq
    bulk_import(nexus, concepts(), batch_size=400, chunk_size=200)
    assert applied == [before]
    # During the load SEARCH did not wait for vectors; once it ends the indexer catches up.
    assert nexus.search.drain(timeout=120)
    assert names(kip(nexus, 'SEARCH CONCEPT "oxaprozinl 1100" LIMIT 1')) == \
        ["Oxaprozinol 1100"]
    report = nexus.search.check()
    assert report["ok"] and report["vector_lag"] == 0, report
    assert vectors.paused == 0


def test_a_failing_bulk_load_does_not_leave_the_indexer_paused(nexus, kip):
    kip(nexus, SCHEMA)
    try:
        bulk_import(nexus, [{"type": "Drug", "name": "fine"}, {"type": "Nope", "name": "x"}])
    except Exception:  # noqa: BLE001 - KIP_2001: the type is not defined
        pass
    assert nexus.search.vectors.paused == 0
    kip(nexus, 'UPSERT { CONCEPT ?d { {type: "Drug", name: "Sumatriptanol"} } }')
    assert names(kip(nexus, 'SEARCH CONCEPT "sumatriptnol" LIMIT 1')) == ["Sumatriptanol"]
