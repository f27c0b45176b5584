"""A link's forward entry on LMDB is MARK (`nexus.search.lexical_entry.MARK`): its texts
(predicate, subject and object) are the graph's, and its terms are derived from them with
the same weights as the full layout's. A database written before, whose link entries hold
terms and weights (the full layout) or the texts (the link layout), searches the same,
checks clean, and its links' entries become MARK when a write touches them — a MERGE, a
delete of an end — or a reindex rewrites them."""
from __future__ import annotations

import msgpack
import pytest

from nexus.search import lexical, lexical_entry
from nexus.search.text import KIND_LINK, element_doc

SCHEMA = """
UPSERT {
  CONCEPT ?d { {type: "$ConceptType", name: "Drug"} SET ATTRIBUTES {description: "A medicine"} }
  CONCEPT ?s { {type: "$ConceptType", name: "Symptom"} SET ATTRIBUTES {description: "A sign"} }
  CONCEPT ?t { {type: "$PropositionType", name: "treats"} SET ATTRIBUTES {description: "cures"} }
}
"""
QUERIES = ['SEARCH PROPOSITION "treats fever" LIMIT 20', 'SEARCH PROPOSITION "aspirin" LIMIT 20',
           'SEARCH PROPOSITION "treats" LIMIT 10', 'SEARCH PROPOSITION "willow headache" LIMIT 5',
           'SEARCH CONCEPT "aspirin" LIMIT 5']


def _load(nx, kip):
    kip(nx, SCHEMA)
    for s in ("Fever", "Headache", "Sore Throat"):
        kip(nx, 'UPSERT { CONCEPT ?s { {type: "Symptom", name: :s} } }', s=s)
    for i in range(30):
        drug = ["Aspirin", "Willow Bark", "Ibuprofen"][i % 3] + f" {i}"
        kip(nx, 'UPSERT { CONCEPT ?d { {type: "Drug", name: :d} '
                'SET PROPOSITIONS { ("treats", {type: "Symptom", name: :s}) } } }',
            d=drug, s=["Fever", "Headache", "Sore Throat"][i % 3])
    nx.reindex()                # every posting in the lists


def _answers(nx, kip):
    return [[(h.get("name") or h.get("predicate"), h["metadata"]["_score"])
             for h in kip(nx, q)] for q in QUERIES]


def _entries(nx):
    with nx.store.read() as txn:
        return dict(txn.aux("lexdoc").scan())


def _full(txn, n):
    """Link `n`'s entry as the code before the link layout wrote it."""
    doc = element_doc(txn, n)
    terms = lexical.doc_terms(doc)
    return lexical_entry.full_bytes(doc, terms, lexical.doc_names(doc))


def _texts(txn, n):
    """Link `n`'s entry as the code before MARK wrote it (the link layout)."""
    doc = element_doc(txn, n)
    return lexical_entry.texts_bytes(doc.group, lexical_entry.link_texts(doc))


def _is_link_entry(v: bytes) -> bool:
    return v == lexical.MARK or v[:1] == lexical_entry.LINK_HEADER or \
        msgpack.unpackb(v)[0] == KIND_LINK


def test_link_entries_are_marks_and_derive_the_same_terms(nexus, kip):
    _load(nexus, kip)
    with nexus.store.read() as txn:
        links = [n for n in txn.elements() if (d := element_doc(txn, n)) and d.kind == KIND_LINK]
        assert links
        for n in links:
            raw = txn.aux("lexdoc").get(n.to_bytes(8, "big"))
            assert raw == lexical.MARK
            new, old = lexical.entry(txn, n), lexical.Entry(_full(txn, n))
            assert (new.kind, new.group, new.names, new.terms) == \
                (old.kind, old.group, old.names, old.terms)
            assert lexical.names(txn, n) == old.names
            assert lexical.Entry(_texts(txn, n)).terms == old.terms


@pytest.mark.parametrize("layout", [_full, _texts])
def test_a_database_with_older_link_entries_searches_checks_and_writes(disk_nexus, kip, layout):
    nx = disk_nexus()
    _load(nx, kip)
    before = _answers(nx, kip)
    with nx.write_session() as session:                 # every link entry as written before
        txn = session.txn
        aux = txn.aux("lexdoc")
        for key, raw in list(aux.scan()):
            if raw == lexical.MARK:
                aux.put(key, layout(txn, int.from_bytes(key, "big")))
    nx = disk_nexus()
    old = [k for k, v in _entries(nx).items() if _is_link_entry(v)]
    assert len(old) >= 30 and lexical.MARK not in _entries(nx).values()
    assert _answers(nx, kip) == before
    assert nx.search.check(deep=True)["ok"]
    assert nx.check(deep=True)["ok"] is True
    # a rename, a merge and a delete of ends: their links' entries in the new layout
    kip(nx, 'UPSERT { CONCEPT ?s { {type: "Symptom", name: "Fever"} '
            'SET ATTRIBUTES {aliases: ["Pyrexia"]} } }')
    kip(nx, 'MERGE CONCEPT ?a INTO ?b WHERE { ?a {type: "Symptom", name: "Sore Throat"} '
            '?b {type: "Symptom", name: "Headache"} }')
    kip(nx, 'DELETE CONCEPT ?d DETACH WHERE { ?d {type: "Drug", name: "Aspirin 0"} }')
    after = _answers(nx, kip)
    assert nx.search.check(deep=True)["ok"]
    assert nx.check(deep=True)["ok"] is True
    nx.reindex()
    nx.search.drain()
    assert _answers(nx, kip) == after
    assert all(v == lexical.MARK for v in _entries(nx).values() if _is_link_entry(v))


def test_merge_moves_link_entries_as_a_reindex_writes_them(nexus, kip):
    _load(nexus, kip)
    kip(nexus, 'MERGE CONCEPT ?a INTO ?b WHERE { ?a {type: "Symptom", name: "Fever"} '
               '?b {type: "Symptom", name: "Headache"} }')
    kip(nexus, 'MERGE CONCEPT ?a INTO ?b WHERE { ?a {type: "Drug", name: "Aspirin 3"} '
               '?b {type: "Drug", name: "Willow Bark 1"} }')
    merged = _entries(nexus)
    answers = _answers(nexus, kip)
    assert nexus.search.check(deep=True)["ok"]
    assert nexus.check(deep=True)["ok"] is True          # the postings match the entries
    nexus.reindex()
    nexus.search.drain()
    assert _entries(nexus) == merged
    assert _answers(nexus, kip) == answers
