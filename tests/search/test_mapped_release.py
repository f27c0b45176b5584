"""Releasing a mapped index's pages (`LayeredIndex.release_pages`, and after every search
when `layered.RELEASE_AFTER_SEARCH` is on) changes no answer: the file's pages come back
on demand, before and after changes to the delta, and a full (unmapped) index ignores it."""
from __future__ import annotations

import numpy as np
import pytest
from usearch.index import Index

from nexus.search import layered
from nexus.search.layered import LayeredIndex


def _make(dim=16):
    return lambda: Index(ndim=dim, metric="cos", dtype="i8", connectivity=16,
                         expansion_add=128, expansion_search=256)


def _vectors(n, dim=16, seed=3):
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _answers(ix, queries):
    return [(ix.search(q, 10).keys.tolist(), ix.get(np.array([5], dtype=np.uint64)).tolist())
            for q in queries]


@pytest.mark.parametrize("after_search", [False, True])
def test_released_pages_change_no_answer(tmp_path, monkeypatch, after_search):
    vecs = _vectors(600)
    path = str(tmp_path / "ix.usearch")
    full = LayeredIndex(_make())
    full.add(np.arange(500, dtype=np.uint64), vecs[:500])
    full.release_pages()                    # not mapped: nothing to release
    full.save(path)
    ix = LayeredIndex.mapped(_make(), path)
    queries = _vectors(20, seed=9)
    before = _answers(ix, queries)
    monkeypatch.setattr(layered, "RELEASE_AFTER_SEARCH", after_search)
    ix.release_pages()
    assert _answers(ix, queries) == before
    assert _answers(ix, queries) == before  # (pages released again by each search)
    ix.remove(np.arange(0, 500, 9, dtype=np.uint64))
    ix.add(np.arange(500, 600, dtype=np.uint64), vecs[500:])
    changed = _answers(ix, queries)
    ix.release_pages()
    assert ix.is_mapped and _answers(ix, queries) == changed
