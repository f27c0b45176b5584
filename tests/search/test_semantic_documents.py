"""What the semantic index embeds: per concept "name: description" (the name alone without a
description) and each alias, no vector of the bare name. Names and typos are the lexical and
n-gram indexes' job, and they keep their vectors; an alias is a grounding field that every
mode must find (KIP §5.2.2); a semantic index saved by the previous layout (a vector
for the name, each alias and "name: description", under the embedder name without "/c1")
is rebuilt on open."""
from __future__ import annotations

import json

import pytest

from nexus.api import Nexus
from nexus.search import embed, gram_index, postings, query, service, vectors
from nexus.search.embed import HashedNgramEmbedder, semantic_installed
from nexus.search.text import KIND_CONCEPT, element_doc

needs_extra = pytest.mark.skipif(not semantic_installed(),
                                 reason="needs the semantic extra (wordllama)")

SCHEMA = """
UPSERT {
  CONCEPT ?d { {type: "$ConceptType", name: "Drug"} }
  CONCEPT ?s { {type: "$ConceptType", name: "Symptom"} }
  CONCEPT ?p { {type: "$PropositionType", name: "treats"} }
}
"""
DATA = """
UPSERT {
  CONCEPT ?a { {type: "Drug", name: "Aspirin"} SET ATTRIBUTES {aliases: ["ASA"],
               description: "an analgesic medicine that reduces pain and fever"} }
  CONCEPT ?z { {type: "Drug", name: "Zolpidem"} SET ATTRIBUTES {aliases: ["Ambien"],
               description: "a sedative prescribed for insomnia"} }
  CONCEPT ?h { {type: "Symptom", name: "Headache"} }
  PROPOSITION ?t { (?a, "treats", ?h) }
}
"""


class ContextOnly(HashedNgramEmbedder):
    contextual = True
    context_only = True


class Contextual(HashedNgramEmbedder):
    contextual = True


def _docs(nx):
    with nx.store.read() as txn:
        return {d.names[0]: d for d in (element_doc(txn, n) for n in txn.elements())
                if d is not None}


def test_a_context_only_embedder_gets_one_text_per_concept(disk_nexus, kip):
    nx = disk_nexus()
    kip(nx, SCHEMA)
    kip(nx, DATA)
    docs = _docs(nx)
    one = ContextOnly()
    assert vectors.doc_texts(docs["Aspirin"], one) == [
        "Aspirin: an analgesic medicine that reduces pain and fever", "ASA"]
    assert vectors.doc_texts(docs["Headache"], one) == ["Headache"]    # no description
    assert vectors.doc_texts(docs["treats"], one) == []                # a link: none
    # The other embedders keep every distinct text: the name and the aliases (and, when
    # contextual, "name: description").
    assert vectors.doc_texts(docs["Aspirin"], HashedNgramEmbedder()) == ["Aspirin", "ASA"]
    assert vectors.doc_texts(docs["Aspirin"], Contextual()) == [
        "Aspirin", "ASA", "Aspirin: an analgesic medicine that reduces pain and fever"]


def _keys(index) -> list[int]:
    return sorted(int(k) for k in index.indexes[KIND_CONCEPT].keys)


def _semantic_keys(nx) -> list[int]:
    """Slot 0 ("name: description") of every concept, slot 1 (the alias) of the drugs."""
    docs = _docs(nx)
    drugs = {docs[name].n for name in ("Aspirin", "Zolpidem")}
    return sorted([n * vectors.SLOTS for n in _concepts(nx)]
                  + [n * vectors.SLOTS + 1 for n in drugs])


def _concepts(nx) -> list[int]:
    with nx.store.read() as txn:
        return sorted(n for n in txn.elements()
                      if element_doc(txn, n).kind == KIND_CONCEPT)   # type: ignore[union-attr]


@needs_extra
def test_the_semantic_index_holds_one_vector_per_concept_and_names_still_find(
        tmp_path, kip, monkeypatch):
    monkeypatch.delenv("NEXUS_SEMANTIC", raising=False)
    nx = Nexus.open(str(tmp_path / "db"), durable=False, semantic="wordllama")
    try:
        kip(nx, SCHEMA)
        kip(nx, DATA)
        nx.search.drain()
        concepts = _concepts(nx)
        # Slot 0 of every concept, slot 1 of the aliased ones (links have none).
        assert _keys(nx.search.semantic) == _semantic_keys(nx)
        assert len(concepts) < len(_semantic_keys(nx)) < 2 * len(concepts)
        # The gram postings (the default embedder's typo candidates) still hold the name
        # and the alias of the drugs.
        ngram: set[int] = set()
        with nx.store.read() as txn:
            for key, raw in txn.aux(gram_index.TABLE).scan():
                if key[:1] != b"\0":
                    ngram.update(postings.decode(raw)[0].tolist())
            for n, _, names in gram_index.pending(txn):     # (a small write's: pending)
                ngram.update(n * gram_index.SLOTS + slot for slot in range(len(names)))
        docs = _docs(nx)
        for name in ("Aspirin", "Zolpidem"):
            n = docs[name].n
            assert {n * gram_index.SLOTS, n * gram_index.SLOTS + 1} <= ngram
        # Names, aliases and typos are still found first in the default (hybrid) mode ...
        for q, name in (("Aspirin", "Aspirin"), ("ASA", "Aspirin"), ("Ambien", "Zolpidem"),
                        ("zolpidme", "Zolpidem"), ("headach", "Headache")):
            assert kip(nx, "SEARCH CONCEPT :q LIMIT 3", q=q)[0]["name"] == name, q
        # ... and meaning in semantic mode.
        found = kip(nx, 'SEARCH CONCEPT :q WITH TYPE "Drug" MODE "semantic" LIMIT 1',
                    q="pill to help me fall asleep")
        assert found[0]["name"] == "Zolpidem"
        # An alias alone, in semantic mode too (a grounding field, KIP §5.2.2).
        for q, name in (("Ambien", "Zolpidem"), ("ASA", "Aspirin")):
            found = kip(nx, 'SEARCH CONCEPT :q MODE "semantic" LIMIT 1', q=q)
            assert found[0]["name"] == name, q
    finally:
        nx.close()


class _Previous(embed.WordLlamaEmbedder):
    """The semantic embedder as it was: the name, each alias and "name: description"."""
    context_only = False

    def __init__(self) -> None:
        super().__init__()
        self.name = "wordllama/l2_supercat/256/sw1"


@needs_extra
def test_a_semantic_index_saved_by_the_previous_layout_is_rebuilt_on_open(
        tmp_path, kip, monkeypatch):
    monkeypatch.delenv("NEXUS_SEMANTIC", raising=False)
    db = tmp_path / "db"
    with monkeypatch.context() as m:
        m.setattr(service, "make_semantic_embedder", lambda spec: _Previous())
        nx = Nexus.open(str(db), durable=False, semantic="wordllama")
        kip(nx, SCHEMA)
        kip(nx, DATA)
        nx.search.drain()
        concepts = _concepts(nx)
        old_keys = _keys(nx.search.semantic)
        nx.close()
    assert len(old_keys) > len(concepts)            # names, aliases and contexts
    assert json.loads((db / "semantic.json").read_text())["embedder"] == \
        "wordllama/l2_supercat/256/sw1"

    nx = Nexus.open(str(db), durable=False, semantic="wordllama")
    try:
        assert nx.search.opened in ("loaded", "caught-up")      # (the n-gram index's)
        nx.search.drain()
        assert _keys(nx.search.semantic) == _semantic_keys(nx)
        found = kip(nx, 'SEARCH CONCEPT :q WITH TYPE "Drug" MODE "semantic" LIMIT 1',
                    q="pill to help me fall asleep")
        assert found[0]["name"] == "Zolpidem"
        assert nx.check(deep=True)["ok"]
    finally:
        nx.close()
    meta = json.loads((db / "semantic.json").read_text())
    assert meta["embedder"] == embed.WordLlamaEmbedder().name
    assert meta["embedder"].endswith("/c1")
    nx = Nexus.open(str(db), durable=False, semantic="wordllama")
    try:
        assert _keys(nx.search.semantic) == _semantic_keys(nx)
    finally:
        nx.close()


def _with_quinamiparin(kip) -> Nexus:
    """An in-memory nexus with the semantic index, DATA and a drug whose name no WordNet
    entry expands."""
    nx = Nexus.open(None, semantic="wordllama")
    kip(nx, SCHEMA)
    kip(nx, DATA)
    kip(nx, 'UPSERT { CONCEPT ?q { {type: "Drug", name: "Quinamiparin"} SET ATTRIBUTES '
            '{description: "an anticoagulant given after surgery"} } }')
    return nx


@needs_extra
def test_hybrid_scores_its_keyword_hits_names_with_the_semantic_embedder(kip, monkeypatch):
    """The index holds "name: description" only; hybrid embeds its keyword hits' names
    when it ranks them (what the name slot gave: a mistyped name stays near its own
    concept), and does so only for such an index."""
    monkeypatch.delenv("NEXUS_SEMANTIC", raising=False)
    nx = _with_quinamiparin(kip)
    try:
        nx.search.drain()
        s = nx.search
        with nx.store.read() as txn:
            n = next(n for n in txn.elements()
                     if getattr(txn.head(n), "name", None) == "Quinamiparin")
            qvec = s.semantic.embedder.embed(["Quinamiparin"])[0]
            context = s.semantic.similarity(KIND_CONCEPT, qvec, [n])[n]
            name = query._name_similarity(txn, s.semantic, KIND_CONCEPT, qvec, [n])[n]
            assert context < 0.99 < name                 # the name, not its context
            assert query._name_similarity(txn, s.vectors, KIND_CONCEPT, qvec, [n]) == {}
            typo = s.semantic.query_vector("Quinamiprain")
            assert query._name_similarity(txn, s.semantic, KIND_CONCEPT, typo, [n])[n] > \
                s.semantic.similarity(KIND_CONCEPT, typo, [n])[n]
        found = kip(nx, 'SEARCH CONCEPT "Quinamiprain" LIMIT 3')
        assert found[0]["name"] == "Quinamiparin"
    finally:
        nx.close()


@needs_extra
def test_semantic_mode_scores_its_candidates_names(kip, monkeypatch):
    """MODE "semantic" embeds its nearest concepts' names too: a name typed exactly (one
    WordNet does not expand) is the same meaning vector, 1.0, though the index holds only
    "name: description"."""
    monkeypatch.delenv("NEXUS_SEMANTIC", raising=False)
    nx = _with_quinamiparin(kip)
    try:
        found = kip(nx, 'SEARCH CONCEPT "Quinamiparin" MODE "semantic" LIMIT 3')
        assert found[0]["name"] == "Quinamiparin"
        assert found[0]["metadata"]["_score"] == 1.0
    finally:
        nx.close()
