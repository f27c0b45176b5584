"""What gets a vector (FORMAT 2): each concept's distinct texts once, no link; and a database
saved by the previous layout (FORMAT 1: a vector per link, a second identical vector for a
concept without a description) is rebuilt on open and answers SEARCH PROPOSITION as before."""
from __future__ import annotations

import json

import numpy as np

from nexus.search import vectors
from nexus.search.embed import HashedNgramEmbedder
from nexus.search.text import KIND_CONCEPT, KIND_LINK, element_doc, link_vec_text

SCHEMA = """
UPSERT {
  CONCEPT ?d { {type: "$ConceptType", name: "Drug"} }
  CONCEPT ?s { {type: "$ConceptType", name: "Symptom"} }
  CONCEPT ?p { {type: "$PropositionType", name: "treats"} }
}
"""
DATA = """
UPSERT {
  CONCEPT ?a { {type: "Drug", name: "Aspirin"} SET ATTRIBUTES {aliases: ["Aspirin", "ASA"]} }
  CONCEPT ?i { {type: "Drug", name: "Ibuprofen"} SET ATTRIBUTES {description: "an NSAID"} }
  CONCEPT ?h { {type: "Symptom", name: "Headache"} }
  CONCEPT ?f { {type: "Symptom", name: "Fever"} }
  PROPOSITION ?t1 { (?a, "treats", ?h) }
  PROPOSITION ?t2 { (?i, "treats", ?f) }
}
"""


class Contextual(HashedNgramEmbedder):
    contextual = True


def test_each_distinct_text_of_a_concept_has_one_vector_and_links_have_none(disk_nexus, kip):
    nx = disk_nexus()
    kip(nx, SCHEMA)
    kip(nx, DATA)
    with nx.store.read() as txn:
        docs = {d.names[0]: d for d in map(lambda n: element_doc(txn, n), txn.elements())
                if d is not None}
    ctx = Contextual()
    assert vectors.doc_texts(docs["Aspirin"], ctx) == ["Aspirin", "ASA"]   # no 2nd "Aspirin"
    assert vectors.doc_texts(docs["Ibuprofen"], ctx) == ["Ibuprofen", "Ibuprofen: an NSAID"]
    assert vectors.doc_texts(docs["treats"], ctx) == []
    nx.search.drain()
    assert len(nx.search.vectors.indexes[KIND_LINK]) == 0
    assert [h["predicate"] for h in kip(nx, 'SEARCH PROPOSITION "asprin headach"')][:1] \
        == ["treats"]


def test_a_database_saved_by_the_previous_layout_is_rebuilt_on_open(disk_nexus, kip,
                                                                     monkeypatch, tmp_path):
    nx = disk_nexus()
    kip(nx, SCHEMA)
    kip(nx, DATA)
    v = nx.search.vectors
    v.drain()
    concept_vectors = len(v.indexes[KIND_CONCEPT])
    # The previous layout: the link vectors ("subject predicate object", slot 0), saved
    # with FORMAT 1.
    with nx.store.read() as txn:
        links = [n for n in txn.elements()
                 if element_doc(txn, n).kind == KIND_LINK]          # type: ignore[union-attr]
        texts = []
        for n in links:
            head = txn.head(n)
            texts.append(link_vec_text("treats", txn.head(head.subject).name,
                                       txn.head(head.object).name))
    with v.lock:
        v.indexes[KIND_LINK].add(np.asarray(links, dtype=np.uint64) * vectors.SLOTS,
                                 v.embedder.embed(texts))
        v._dirty(len(links))
    monkeypatch.setattr(vectors, "FORMAT", 1)
    nx.close()
    monkeypatch.undo()
    meta = json.loads((tmp_path / "db" / "vectors.json").read_text())
    assert meta["format"] == 1

    nx = disk_nexus()
    assert nx.search.opened == "rebuilt"
    hits = kip(nx, 'SEARCH PROPOSITION "asprin headach"')
    assert hits and hits[0]["predicate"] == "treats"
    nx.search.drain()
    assert len(nx.search.vectors.indexes[KIND_LINK]) == 0
    assert len(nx.search.vectors.indexes[KIND_CONCEPT]) == concept_vectors
    assert nx.check(deep=True)["ok"]
    nx.close()
    assert json.loads((tmp_path / "db" / "vectors.json").read_text())["format"] == 2
    nx = disk_nexus()
    assert nx.search.opened == "loaded"
