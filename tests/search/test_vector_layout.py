"""What gets a vector (FORMAT 2): each concept's distinct texts once, no link — a link write
queues no vector work, and only the concepts' index file is written; a database saved by the
previous layout (FORMAT 1: a vector per link, a second identical vector for a concept
without a description) is rebuilt on open and answers SEARCH PROPOSITION as before."""
from __future__ import annotations

import json

import numpy as np
import pytest
from usearch.index import Index

from nexus.search import vectors
from nexus.search.embed import HashedNgramEmbedder
from nexus.search.text import KIND_CONCEPT, KIND_LINK, element_doc, link_vec_text

# The n-gram vector index's mechanics, exercised with the default embedder's cheap vectors
# (which by default has gram postings instead: `conftest.ngram_vectors`).
pytestmark = pytest.mark.usefixtures("ngram_vectors")

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
    with nx.store.read() as txn:
        links = {n for n in txn.elements() if element_doc(txn, n).kind == KIND_LINK}
    assert links and not links & nx.search.vectors.ids()
    assert [h["predicate"] for h in kip(nx, 'SEARCH PROPOSITION "asprin headach"')][:1] \
        == ["treats"]


def _seq(nx) -> int:
    with nx.store.read() as txn:
        return vectors.read_seq(txn)


def test_a_link_write_queues_no_vector_work(disk_nexus, kip):
    """Creating, changing and deleting links leaves the vector queue as it was (links have
    no vectors); a concept write still queues its change."""
    nx = disk_nexus()
    kip(nx, SCHEMA)
    kip(nx, DATA)
    nx.search.drain()
    seq = _seq(nx)
    kip(nx, 'UPSERT { CONCEPT ?a { {type: "Drug", name: "Aspirin"} } '
            'CONCEPT ?f { {type: "Symptom", name: "Fever"} } '
            'PROPOSITION ?t { (?a, "treats", ?f) SET ATTRIBUTES {note: "low dose"} } }')
    kip(nx, 'UPSERT { PROPOSITION ?t { ({type: "Drug", name: "Aspirin"}, "treats", '
            '{type: "Symptom", name: "Fever"}) SET ATTRIBUTES {note: "any dose"} } '
            'WITH METADATA {confidence: 0.5} }')
    kip(nx, 'DELETE PROPOSITIONS ?l WHERE { ?l ({type: "Drug", name: "Ibuprofen"}, '
            '"treats", ?s) }')
    assert _seq(nx) == seq
    assert [h["predicate"] for h in kip(nx, 'SEARCH PROPOSITION "aspirin fever"')][:1] \
        == ["treats"]                               # (the lexical index has the link)
    kip(nx, 'UPSERT { CONCEPT ?m { {type: "Symptom", name: "Migraine"} } }')
    assert _seq(nx) == seq + 1


def test_a_database_saved_by_the_previous_layout_is_rebuilt_on_open(disk_nexus, kip,
                                                                     monkeypatch, tmp_path):
    nx = disk_nexus()
    kip(nx, SCHEMA)
    kip(nx, DATA)
    v = nx.search.vectors
    v.drain()
    concept_vectors = len(v.indexes[KIND_CONCEPT])
    nx.close()
    # The previous layout: the link vectors ("subject predicate object", slot 0) in a
    # propositions file beside the concepts', saved with FORMAT 1.
    db = tmp_path / "db"
    nx = disk_nexus()
    with nx.store.read() as txn:
        links = [n for n in txn.elements()
                 if element_doc(txn, n).kind == KIND_LINK]          # type: ignore[union-attr]
        texts = []
        for n in links:
            head = txn.head(n)
            texts.append(link_vec_text("treats", txn.head(head.subject).name,
                                       txn.head(head.object).name))
    embedder = nx.search.vectors.embedder
    nx.close()
    old = Index(ndim=embedder.dim, metric="cos", dtype="i8")
    old.add(np.asarray(links, dtype=np.uint64) * vectors.SLOTS, embedder.embed(texts))
    old.save(str(db / "vectors.propositions.usearch"))
    meta = json.loads((db / "vectors.json").read_text())
    meta["format"] = 1
    (db / "vectors.json").write_text(json.dumps(meta))
    meta = json.loads((tmp_path / "db" / "vectors.json").read_text())
    assert meta["format"] == 1

    nx = disk_nexus()
    assert nx.search.opened == "rebuilt"
    hits = kip(nx, 'SEARCH PROPOSITION "asprin headach"')
    assert hits and hits[0]["predicate"] == "treats"
    nx.search.drain()
    assert not set(links) & nx.search.vectors.ids()
    assert len(nx.search.vectors.indexes[KIND_CONCEPT]) == concept_vectors
    assert nx.check(deep=True)["ok"]
    nx.close()
    assert json.loads((db / "vectors.json").read_text())["format"] == 2
    assert not (db / "vectors.propositions.usearch").exists()   # the old file is gone
    nx = disk_nexus()
    assert nx.search.opened == "loaded"


def test_the_empty_propositions_file_of_earlier_saves_is_removed(disk_nexus, kip, tmp_path):
    """FORMAT-2 saves wrote an empty propositions index beside the concepts': such a
    database opens as it is (nothing rebuilt) and its next save removes that file."""
    nx = disk_nexus()
    kip(nx, SCHEMA)
    kip(nx, DATA)
    nx.close()
    db = tmp_path / "db"
    assert sorted(p.name for p in db.glob("vectors.*")) == [
        "vectors.concepts.usearch", "vectors.json"]
    Index(ndim=nx.search.vectors.embedder.dim, metric="cos", dtype="i8").save(
        str(db / "vectors.propositions.usearch"))
    nx = disk_nexus()
    assert nx.search.opened == "loaded"
    kip(nx, 'UPSERT { CONCEPT ?m { {type: "Symptom", name: "Migraine"} } }')
    assert [h["name"] for h in kip(nx, 'SEARCH CONCEPT "migrane"')][:1] == ["Migraine"]
    nx.close()
    assert not (db / "vectors.propositions.usearch").exists()
    nx = disk_nexus()
    assert nx.search.opened == "loaded"
    assert [h["name"] for h in kip(nx, 'SEARCH CONCEPT "migrane"')][:1] == ["Migraine"]
