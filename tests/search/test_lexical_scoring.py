"""The lexical (BM25F) side of keyword SEARCH computes the same ranking however it reads.

Keyword mode (CONTRACT §10) ranks by BM25F over the query terms' posting lists. The ways of
reading and summing them cheaply must not change what SEARCH returns:

* posting blocks are decoded in bulk (full blocks as one record array) — the postings read
  are those stored, in id order, whatever mix of full and partial blocks updates left;
* the per-document sums live in a dense array indexed by id; the bounded-memory fallback
  used past DENSE_IDS element ids (sorting the lists' ids together) ranks the same.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

from nexus.search import postings, query


class _Aux:
    """An aux table in a dict (sorted scans), enough for the postings module."""

    def __init__(self) -> None:
        self.d: dict[bytes, bytes] = {}

    def put(self, k: bytes, v: bytes) -> None:
        self.d[k] = v

    def get(self, k: bytes) -> bytes | None:
        return self.d.get(k)

    def delete(self, k: bytes) -> None:
        self.d.pop(k, None)

    def scan(self, prefix: bytes, reverse: bool = False, start: bytes | None = None):
        keys = sorted(k for k in self.d if k.startswith(prefix))
        if start is not None:
            keys = [k for k in keys if (k <= start if reverse else k >= start)]
        if reverse:
            keys.reverse()
        return [(k, self.d[k]) for k in keys]


def test_bulk_decoding_reads_back_every_stored_posting_in_id_order():
    aux = _Aux()
    r = random.Random(5)
    ids = sorted(r.sample(range(1, 200_000), 3000))
    stored = {n: (round(r.random(), 2), n % 7) for n in ids}
    postings.create(aux, b"t", dict(stored))
    # updates split blocks: a delete inside, an insert between, an append at the end
    postings.apply(aux, b"t", {ids[500]: None})
    del stored[ids[500]]
    between = next(n for n in range(ids[10] + 1, ids[11]) if n not in stored) \
        if ids[11] - ids[10] > 1 else None
    if between is not None:
        postings.apply(aux, b"t", {between: (0.5, 3)})
        stored[between] = (0.5, 3)
    postings.apply(aux, b"t", {300_000: (0.25, 1)})
    stored[300_000] = (0.25, 1)
    sizes = {len(raw) for _, raw in aux.scan(b"t")}
    assert len(sizes) > 1           # both full and partial blocks are present

    got_ids, weights, groups, complete = postings.read(aux, b"t", 10**9)
    assert complete and got_ids.tolist() == sorted(stored)
    assert groups.tolist() == [stored[n][1] for n in sorted(stored)]
    assert np.allclose(weights.astype(np.float32), [stored[n][0] for n in sorted(stored)],
                       atol=1e-3)

    cut_ids, _, _, cut_complete = postings.read(aux, b"t", 1000)
    assert not cut_complete and cut_ids.tolist() == sorted(stored)[:len(cut_ids)]
    assert 1000 <= len(cut_ids) < len(stored)


def _queries(concepts, count=60, seed=11):
    """Multi-word queries of description words (common and rare ones mixed)."""
    r = random.Random(seed)
    out = []
    for c in r.sample(concepts, count):
        words = c["attributes"]["description"].split()
        out.append(" ".join(r.sample(words, min(4, len(words)))))
    return out


def _rankings(nx, texts):
    nx.search.drain()       # the n-gram vectors of the bulk load are built in the background
    with nx.store.read() as txn:
        return [nx.search.search(txn, "CONCEPT", t, limit=10, mode="keyword") for t in texts]


@pytest.mark.parametrize("text", ["engine", "red blood pressure drug", "Metformin"])
def test_the_bounded_memory_accumulator_ranks_like_the_dense_one(corpus, monkeypatch, text):
    nx, concepts = corpus
    texts = [text] + _queries(concepts, 20)
    dense = _rankings(nx, texts)
    assert any(dense)
    monkeypatch.setattr(query, "DENSE_IDS", 0)
    assert _rankings(nx, texts) == dense
