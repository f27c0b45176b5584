"""A bulk load's vectors are inserted once (nexus/search/layered.py, vectors.py): an add
that would take a mapped index's delta past its bound loads the saved file first and
inserts the new vectors into it, instead of inserting them into the delta and again from
it; and the indexer does not save (and so map the file again) while a bulk load is
filling the index beside it — the load saves once, when its vectors are complete."""
from __future__ import annotations

import os

import numpy as np
from usearch.index import Index

from nexus.search import layered, vectors
from nexus.search.embed import HashedNgramEmbedder
from nexus.search.layered import LayeredIndex
from nexus.search.vectors import VectorIndex


class CountingIndex(Index):
    """A usearch index that counts the vectors inserted into it."""
    inserted = 0

    def add(self, keys, vectors, **kw):                # type: ignore[override]
        CountingIndex.inserted += len(keys)
        return super().add(keys, vectors, **kw)


def _make():
    return CountingIndex(ndim=16, metric="cos", dtype="i8", connectivity=16,
                         expansion_add=128, expansion_search=256)


def _vectors(n, seed=3):
    v = np.random.default_rng(seed).normal(size=(n, 16)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_an_add_past_the_delta_bound_inserts_each_vector_once(tmp_path, monkeypatch):
    monkeypatch.setattr(layered, "DELTA_MAX", 50)
    vecs = _vectors(200)
    path = str(tmp_path / "ix.usearch")
    full = LayeredIndex(_make)
    full.add(np.arange(100, dtype=np.uint64), vecs[:100])
    full.save(path)
    ix = LayeredIndex.mapped(_make, path)
    ix.add(np.arange(100, 120, dtype=np.uint64), vecs[100:120])      # within the bound
    assert ix.is_mapped
    CountingIndex.inserted = 0
    ix.add(np.arange(120, 200, dtype=np.uint64), vecs[120:200])      # past it
    assert not ix.is_mapped
    # The 20 vectors of the delta move into the loaded file's index, the 80 new ones are
    # inserted once (not into the delta first and then moved too).
    assert CountingIndex.inserted == 20 + 80
    assert len(ix) == 200 and set(ix.keys.tolist()) == set(range(200))
    for k in (5, 110, 199):
        assert ix.search(vecs[k], 1).keys[0] == k


def test_the_indexer_does_not_save_while_a_bulk_load_fills(tmp_path):
    v = VectorIndex(HashedNgramEmbedder(), str(tmp_path))
    v.indexes[0].add(np.arange(3, dtype=np.uint64) * vectors.SLOTS,
                     HashedNgramEmbedder().embed(["aspirin", "ibuprofen", "naproxen"]))
    v.unsaved = vectors.SAVE_EVERY              # due for a periodic save
    v.pause()
    v.maybe_save()
    assert not os.listdir(tmp_path)            # the load saves when it ends, not meanwhile
    v.resume()
    v.maybe_save()
    assert sorted(os.listdir(tmp_path)) == ["vectors.concepts.usearch", "vectors.json"]
