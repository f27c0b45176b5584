"""What one SEARCH reads and embeds: the pending documents of a small write once per query
(however many words it has: each read of them is a scan, a round trip on PostgreSQL), and
each candidate link's text at most once per query and embedder (links have no vectors of
their own: their texts are embedded when they are ranked), with the same ranking."""
from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from nexus.search import query
from nexus.search.text import KIND_CONCEPT, KIND_LINK


class _CountingAux:
    def __init__(self, aux: Any, scans: Counter) -> None:
        self._aux = aux
        self._scans = scans

    def scan(self, prefix: bytes = b"", **kw: Any):
        self._scans[prefix[:1]] += 1
        return self._aux.scan(prefix, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._aux, name)


class _CountingTxn:
    """A read transaction that counts the scans of the `lex` aux table by key kind."""

    def __init__(self, txn: Any) -> None:
        self._txn = txn
        self.scans: Counter = Counter()

    def aux(self, table: str) -> Any:
        aux = self._txn.aux(table)
        return _CountingAux(aux, self.scans) if table == "lex" else aux

    def __getattr__(self, name: str) -> Any:
        return getattr(self._txn, name)


class _CountingEmbedder:
    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.texts: Counter = Counter()

    def embed(self, texts: list[str]) -> Any:
        self.texts.update(texts)
        return self._inner.embed(texts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _CountingVectors:
    """A vector source whose embedder counts the texts it embeds (the query's own vector
    is not counted: it comes from `query_vector`)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.embedder = _CountingEmbedder(inner.embedder)

    def query_vector(self, text: str) -> Any:
        return self._inner.query_vector(text)

    def knn(self, *args: Any, **kw: Any) -> Any:
        return self._inner.knn(*args, **kw)

    def similarity(self, *args: Any, **kw: Any) -> Any:
        return self._inner.similarity(*args, **kw)

    def __getattr__(self, name: str) -> Any:      # (e.g. `filters_groups`)
        return getattr(self._inner, name)


def test_the_pending_documents_are_read_once_per_query(nexus, kip):
    kip(nexus, 'UPSERT { CONCEPT ?t { {type: "$ConceptType", name: "Drug"} } }')
    for name in ("Aspirin", "Ibuprofen", "Paracetamol"):        # small writes: pending
        kip(nexus, f'UPSERT {{ CONCEPT ?d {{ {{type: "Drug", name: "{name}"}} '
                   f'SET ATTRIBUTES {{description: "{name} relieves pain and fever"}} }} }}')
    text = "pain fever relieves aspirin ibuprofen paracetamol headache"
    with nexus.store.read() as txn:
        counting = _CountingTxn(txn)
        hits = query.run(counting, nexus.search.keyword_source(counting), KIND_CONCEPT,
                         text, None, 5)
        assert hits == query.run(txn, nexus.search.keyword_source(txn), KIND_CONCEPT, text,
                                 None, 5)
    assert len(hits) == 3
    assert counting.scans[b"q"] == 1, counting.scans


@pytest.mark.parametrize("mode", ["keyword", "semantic", "hybrid"])
@pytest.mark.parametrize("text", ["works for Cobalt Media Group",
                                  "treats Hereditary Thyroid Stenosis",
                                  "Dololovir Hereditary Thyroid Stenosis", "Dololovr stenosis"])
def test_a_link_text_is_embedded_at_most_once_per_query_and_embedder(corpus, mode, text):
    nx, _ = corpus
    with nx.store.read() as txn:
        vectors = nx.search.keyword_source(txn)
        first, second = _CountingVectors(vectors), _CountingVectors(vectors)
        if mode == "keyword":
            hits = query.run(txn, first, KIND_LINK, text, None, 10)
            plain = query.run(txn, vectors, KIND_LINK, text, None, 10)
        elif mode == "semantic":
            hits = query.semantic(txn, first, KIND_LINK, text, None, 10)
            plain = query.semantic(txn, vectors, KIND_LINK, text, None, 10)
        else:       # (the n-gram index in both roles: two embedders, counted apart)
            hits = query.hybrid(txn, first, second, KIND_LINK, text, None, 10)
            plain = query.hybrid(txn, vectors, vectors, KIND_LINK, text, None, 10)
    assert hits == plain and hits
    for source in (first, second):
        repeated = {t: c for t, c in source.embedder.texts.items() if c > 1}
        assert not repeated, repeated
    assert first.embedder.texts                 # (link texts were embedded at all)
