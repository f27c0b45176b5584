"""The semantic index's inverted file (`nexus.search.ivf`): what it returns against exact
cosines, through changes and saves, flat below FLAT_MAX and in lists above it; and the
semantic index that a database keeps in it (file, layout, rebuild of an HNSW file)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from nexus.api import Nexus
from nexus.search import ivf, service
from nexus.search.embed import HashedNgramEmbedder
from nexus.search.ivf import IVFIndex
from nexus.search.text import KIND_CONCEPT
from nexus.search.vectors import VectorIndex

DIM = 32


def _data(n: int, seed: int = 3, clusters: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """`n` rows around `clusters` random centres (so that lists mean something)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, DIM))
    x = centres[rng.integers(0, clusters, n)] + 0.4 * rng.standard_normal((n, DIM))
    return np.arange(1, n + 1, dtype=np.uint64) * 8, x.astype(np.float32)


def _exact(keys: np.ndarray, x: np.ndarray, q: np.ndarray, k: int) -> list[int]:
    """The top `k` by cosine over the rows as stored (int8: `ivf.quantise`)."""
    rows, inv = ivf.quantise(x)
    sims = (rows.astype(np.float32) @ (q / np.linalg.norm(q))) * inv
    return [int(keys[i]) for i in np.argsort(-sims, kind="stable")[:k]]


def _saved(ix: IVFIndex, path: str) -> IVFIndex:
    ix.save(path)
    ix.remap(path)
    return ix


def test_flat_below_the_threshold_is_exact_through_adds_replacements_and_removals(tmp_path):
    keys, x = _data(500)
    ix = IVFIndex(DIM)
    ix.add(keys, x)
    assert len(ix) == 500 and ix.centroids is None
    rng = np.random.default_rng(9)
    for q in rng.standard_normal((5, DIM)).astype(np.float32):
        got = ix.search(q, 10)
        assert got.keys.tolist() == _exact(keys, x, q, 10)
        assert np.all(np.diff(got.distances) >= 0)
    # Saved and mapped: the same answers, nothing left in memory.
    _saved(ix, str(tmp_path / "f.ivf"))
    assert ix.centroids is None and ix.memory_usage == 0 and ix.is_mapped
    q = x[7]
    assert ix.search(q, 1).keys.tolist() == [int(keys[7])]
    # A saved row replaced (hidden in the file, new in the delta) and one removed.
    ix.add(keys[7:8], -x[7:8])
    ix.remove(keys[8:9])
    assert len(ix) == 499
    assert not ix.contains(keys[8:9])[0] and ix.contains(keys[7:8])[0]
    assert int(keys[7]) not in ix.search(q, 20).keys.tolist()
    assert ix.search(-q, 1).keys.tolist() == [int(keys[7])]
    assert int(keys[8]) not in ix.search(x[8], 499).keys.tolist()
    np.testing.assert_allclose(ix.get(keys[7:8])[0], -x[7] / np.linalg.norm(x[7]), atol=0.02)
    # Compacted at the next save: the tombstone and the delta folded into the file.
    _saved(ix, str(tmp_path / "f.ivf"))
    assert not ix.hidden and len(ix) == 499 and set(ix.keys.tolist()) == \
        set(keys.tolist()) - {int(keys[8])}
    assert ix.search(-q, 1).keys.tolist() == [int(keys[7])]


def test_lists_are_trained_past_the_threshold_and_every_row_stays_findable(tmp_path):
    n = ivf.FLAT_MAX + 2000
    keys, x = _data(n)
    ix = IVFIndex(DIM)
    ix.add(keys, x)
    assert ix.due and not ix.is_mapped         # the indexer saves once writes pause
    _saved(ix, str(tmp_path / "f.ivf"))
    assert ix.centroids is not None and len(ix.centroids) == round(np.sqrt(n))
    assert ix.trained == n and not ix.due and ix.is_mapped
    # Every row is found as its own nearest neighbour (its own list is the nearest to it
    # or among the probed ones), and an exact search agrees with brute force.
    for i in range(0, n, 97):
        assert ix.search(x[i], 1).keys.tolist() == [int(keys[i])]
    # The file keeps the rows as 4-bit codes (`ivf_codes`): `get` returns each key's row as
    # the file has it, unit length and within the codes' error of the int8 row, in the order
    # asked; an exact search is brute force over those rows, and near the int8 rows' own.
    assert ix.coded
    pick = np.array([5, 3000, 17, 5, 4100])
    got = ix.get(keys[pick])
    rows, inv = ivf.quantise(x[pick])
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)
    assert (np.einsum("ij,ij->i", got, rows.astype(np.float32) * inv[:, None]) > 0.98).all()
    assert np.array_equal(got[0], got[3])
    q = np.random.default_rng(5).standard_normal(DIM).astype(np.float32)
    stored = ix.get(keys) @ (q / np.linalg.norm(q))
    best = ix.search(q, 10, exact=True)
    assert best.keys.tolist() == [int(keys[i]) for i in np.argsort(-stored, kind="stable")[:10]]
    np.testing.assert_allclose(1.0 - best.distances, np.sort(stored)[::-1][:10], atol=1e-5)
    assert len(set(best.keys.tolist()) & set(_exact(keys, x, q, 10))) >= 8
    # A count larger than the probed lists hold scans more lists (WITH TYPE widens).
    assert len(ix.search(q, n)) and len(ix.search(q, n).keys) == n
    # New rows go to their nearest list and are found; removed ones never return.
    more_keys, more = _data(300, seed=11)
    more_keys = more_keys + np.uint64(8 * n + 8)
    ix.add(more_keys, more)
    assert (ix._dl[:ix._dn] >= 0).all()
    for i in range(0, 300, 29):
        assert ix.search(more[i], 1).keys.tolist() == [int(more_keys[i])]
    ix.remove(keys[:100])
    assert not any(int(k) in set(keys[:100].tolist())
                   for k in ix.search(x[0], 200).keys.tolist())
    # Reopened from its file: the same answers.
    _saved(ix, str(tmp_path / "f.ivf"))
    again = IVFIndex.mapped(lambda: IVFIndex(DIM), str(tmp_path / "f.ivf"))
    assert len(again) == n - 100 + 300
    assert again.search(more[3], 1).keys.tolist() == [int(more_keys[3])]
    assert again.search(x[500], 5).keys.tolist() == ix.search(x[500], 5).keys.tolist()


def test_lists_are_retrained_when_the_index_outgrows_them(tmp_path):
    keys, x = _data(ivf.FLAT_MAX + 100)
    ix = IVFIndex(DIM)
    ix.add(keys, x)
    _saved(ix, str(tmp_path / "f.ivf"))
    first = ix.trained
    more_keys, more = _data(int(first * ivf.RETRAIN), seed=4)
    ix.add(more_keys + np.uint64(8 * len(keys) + 8), more)
    assert ix.due
    _saved(ix, str(tmp_path / "f.ivf"))
    assert ix.trained == len(ix) > first
    assert len(ix.centroids) == round(np.sqrt(len(ix)))   # type: ignore[arg-type]


def test_an_index_that_is_never_saved_trains_its_lists_in_place():
    """A database in memory never saves: its index compacts and trains when an add finds
    it due, and searches then scan lists, not every row."""
    n = ivf.FLAT_MAX + 1000
    keys, x = _data(n)
    ix = IVFIndex(DIM, in_memory=True)
    ix.add(keys[:ivf.FLAT_MAX], x[:ivf.FLAT_MAX])
    assert ix.centroids is None and ix.memory_usage      # flat, in the delta
    ix.add(keys[ivf.FLAT_MAX:], x[ivf.FLAT_MAX:])
    assert ix.centroids is not None and ix.trained == n and not ix.due
    assert ix._dn == 0 and len(ix) == n and ix.path is None
    for i in range(0, n, 211):
        assert ix.search(x[i], 1).keys.tolist() == [int(keys[i])]
    ix.remove(keys[:10])
    assert len(ix) == n - 10 and not ix.contains(keys[:10]).any()


def test_a_file_that_is_no_ivf_index_is_refused(tmp_path):
    path = tmp_path / "f.ivf"
    path.write_bytes(b"not an index" * 20)
    with pytest.raises(ValueError):
        IVFIndex.mapped(lambda: IVFIndex(DIM), str(path))
    ix = _saved(IVFIndex(DIM + 1), str(tmp_path / "g.ivf"))
    assert len(ix) == 0
    with pytest.raises(ValueError):
        IVFIndex.mapped(lambda: IVFIndex(DIM), str(tmp_path / "g.ivf"))


def test_the_semantic_index_is_an_inverted_file_and_an_hnsw_one_is_rebuilt(
        tmp_path, kip, monkeypatch):
    """A database's semantic index lives in `semantic.concepts.ivf`; one saved as HNSW
    (before this layout) is not taken for it: rebuilt on open, and its file removed."""
    monkeypatch.delenv("NEXUS_SEMANTIC", raising=False)
    monkeypatch.setattr(service, "make_semantic_embedder", lambda spec: HashedNgramEmbedder())
    monkeypatch.setattr(service, "semantic_installed", lambda *a: True)
    db = str(tmp_path / "db")
    nx = Nexus.open(db, durable=False, semantic="wordllama")
    try:
        kip(nx, 'UPSERT { CONCEPT ?d { {type: "$ConceptType", name: "Drug"} } }')
        kip(nx, 'UPSERT { CONCEPT ?a { {type: "Drug", name: "Aspirin"} } '
                'CONCEPT ?b { {type: "Drug", name: "Ibuprofen"} } }')
        nx.search.drain()
        sem = nx.search.semantic
        assert isinstance(sem.indexes[KIND_CONCEPT], IVFIndex)
        assert not isinstance(nx.search.vectors.indexes[KIND_CONCEPT], IVFIndex)
        count = len(sem.indexes[KIND_CONCEPT])
    finally:
        nx.close()
    assert os.path.exists(os.path.join(db, "semantic.concepts.ivf"))
    with open(os.path.join(db, "semantic.json")) as f:
        assert json.load(f)["layout"] == "ivf"
    # The same database as an HNSW layout left it: its watermark without a layout.
    hnsw = VectorIndex(HashedNgramEmbedder(), db, prefix="other")
    assert hnsw.layout == "hnsw"
    with open(os.path.join(db, "semantic.json")) as f:
        meta = json.load(f)
    del meta["layout"]
    with open(os.path.join(db, "semantic.json"), "w") as f:
        json.dump(meta, f)
    with open(os.path.join(db, "semantic.concepts.usearch"), "wb") as f:
        f.write(b"an HNSW file")
    nx = Nexus.open(db, durable=False, semantic="wordllama")
    try:
        assert nx.search.semantic.needs_rebuild or nx.search.semantic.applied_seq
        nx.search.drain()
        assert len(nx.search.semantic.indexes[KIND_CONCEPT]) == count
        hits = kip(nx, 'SEARCH CONCEPT "Aspirin" MODE "semantic" LIMIT 1')
        assert hits[0]["name"] == "Aspirin"
        nx.search.semantic.save()
    finally:
        nx.close()
    assert not os.path.exists(os.path.join(db, "semantic.concepts.usearch"))
    with open(os.path.join(db, "semantic.json")) as f:
        assert json.load(f)["layout"] == "ivf"


def old_kmeans(x, nlist, seed=1):
    """`ivf.kmeans` as it was, with `np.add.at` for the lists' sums (the reference)."""
    rng = np.random.default_rng(seed)
    c = x[rng.choice(len(x), nlist, replace=False)].copy()
    for _ in range(ivf.KMEANS_ITERS):
        a = ivf.assign(x, c)
        sums = np.zeros_like(c)
        np.add.at(sums, a, x)
        empty = ~np.any(sums, axis=1)
        if empty.any():
            sums[empty] = x[rng.choice(len(x), int(empty.sum()), replace=False)]
        c = ivf._unit(sums)
    return np.ascontiguousarray(c, dtype=np.float32)


def test_the_lists_sums_are_those_of_add_at_bit_for_bit():
    """`list_sums` adds each list's rows in row order, as `np.add.at` does: the same float32
    bits (a different order of additions would round differently), with lists of one row,
    many rows, and none."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((5000, 64)).astype(np.float32) * 3
    lists = np.minimum(rng.geometric(0.05, 5000) - 1, 49).astype(np.int32)
    lists[lists == 7] = 8                               # list 7: empty
    want = np.zeros((50, 64), dtype=np.float32)
    np.add.at(want, lists, x)
    got = ivf.list_sums(x, lists, 50)
    assert got.dtype == np.float32 and got.tobytes() == want.tobytes()
    assert not got[7].any() and np.bincount(lists).max() > 100
    assert ivf.list_sums(x[:0], lists[:0], 3).tobytes() == bytes(3 * 64 * 4)


def test_the_k_means_gives_the_centroids_of_before_bit_for_bit():
    rng = np.random.default_rng(9)
    centres = rng.standard_normal((40, 32)).astype(np.float32)
    x = ivf._unit(centres[rng.integers(0, 40, 4000)]
                  + 0.6 * rng.standard_normal((4000, 32)).astype(np.float32)).astype(np.float32)
    assert ivf.kmeans(x, 60, seed=3).tobytes() == old_kmeans(x, 60, seed=3).tobytes()
