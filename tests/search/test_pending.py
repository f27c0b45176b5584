"""Small writes leave their new documents pending (`nexus.search.lexical.SMALL_WRITE`): a
SEARCH ranks them exactly as if their postings were in the lists, through renames,
deletes and the fold into the lists, and the deep check finds no drift."""
from __future__ import annotations

from nexus.search import lexical
from nexus.search.text import KIND_CONCEPT

SCHEMA = """
UPSERT {
  CONCEPT ?d { {type: "$ConceptType", name: "Drug"} SET ATTRIBUTES {description: "A medicine"} }
  CONCEPT ?s { {type: "$ConceptType", name: "Symptom"} SET ATTRIBUTES {description: "A sign"} }
  CONCEPT ?t { {type: "$PropositionType", name: "treats"} SET ATTRIBUTES {description: "cures"} }
}
"""
SYMPTOMS = """
UPSERT {
  CONCEPT ?f { {type: "Symptom", name: "Fever"} }
  CONCEPT ?h { {type: "Symptom", name: "Headache"} }
}
"""
ONE = """
UPSERT {
  CONCEPT ?d { {type: "Drug", name: :name} SET ATTRIBUTES {description: :text}
    SET PROPOSITIONS { ("treats", {type: "Symptom", name: :symptom}) } }
}
"""
QUERIES = ['SEARCH CONCEPT "drug 7" LIMIT 20', 'SEARCH CONCEPT "pain relief" LIMIT 20',
           'SEARCH CONCEPT "willow" LIMIT 20', 'SEARCH PROPOSITION "treats fever" LIMIT 20',
           'SEARCH CONCEPT "drug" WITH TYPE "Drug" LIMIT 20']


def _answers(nx, kip):
    return [[(h.get("name") or h.get("predicate"), h["metadata"]["_score"])
             for h in kip(nx, q)] for q in QUERIES]


def _pending(nx):
    with nx.store.read() as txn:
        return len(list(txn.aux("lex").scan(b"q")))


def test_pending_documents_search_like_indexed_ones(nexus, kip):
    kip(nexus, SCHEMA)
    kip(nexus, SYMPTOMS)
    counts = []
    for i in range(lexical.PENDING_MAX // 2 + 4):       # two documents each: past a fold
        kip(nexus, ONE, name=f"Drug {i}", text=f"pain relief number {i}",
            symptom="Fever" if i % 2 else "Headache")
        counts.append(_pending(nexus))
        assert counts[-1] <= lexical.PENDING_MAX
        if i % 7 == 6:
            assert _answers(nexus, kip) == _reindexed(nexus, kip)
    assert 0 in counts          # a write folded the pending documents into the lists
    assert nexus.search.check(deep=True)["ok"]
    # a pending document renamed, re-described and deleted
    kip(nexus, ONE, name="Drug 70", text="willow bark", symptom="Fever")
    kip(nexus, 'UPSERT { CONCEPT ?d { {type: "Drug", name: "Drug 70"} '
               'SET ATTRIBUTES {description: "willow bark extract", aliases: ["Bayer"]} } }')
    assert nexus.search.check(deep=True)["ok"]
    assert _answers(nexus, kip) == _reindexed(nexus, kip)
    kip(nexus, 'DELETE CONCEPT ?d DETACH WHERE { ?d {type: "Drug", name: "Drug 70"} }')
    assert nexus.search.check(deep=True)["ok"]
    assert _answers(nexus, kip) == _reindexed(nexus, kip)
    with nexus.store.read() as txn:
        assert lexical.doc_count(txn, KIND_CONCEPT) == txn.count_concepts()


def _reindexed(nx, kip):
    """The answers of a copy of `nx`'s graph whose postings are all in the lists."""
    before = _answers(nx, kip)
    nx.reindex()
    assert _pending(nx) == 0
    after = _answers(nx, kip)
    assert nx.search.check(deep=True)["ok"]
    assert after == before
    return after
