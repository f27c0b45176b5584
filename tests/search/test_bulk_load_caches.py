"""What a bulk load leaves in the process: the heads its commits cached and the words its
vectors were embedded from are dropped when it returns (nexus.ops.bulk_import; measured in
bench/RESULTS.md, "File pages and the loader's heap") — and nothing it loaded is lost for it:
every element reads back and SEARCH finds it, by name and by typo."""
from __future__ import annotations

from nexus.ops.bulk_import import bulk_import

SCHEMA = """
UPSERT {
  CONCEPT ?drug { {type: "$ConceptType", name: "Drug"} SET ATTRIBUTES {description: "A medicine"} }
  CONCEPT ?treats { {type: "$PropositionType", name: "treats"} SET ATTRIBUTES {description: "cures"} }
}
"""


def _load(nexus, kip, count=2000):
    kip(nexus, SCHEMA)
    drugs = [{"type": "Drug", "name": f"Metrazolam {i}",
              "attributes": {"description": f"relieves pain number {i}"}} for i in range(count)]
    links = [{"subject": {"type": "Drug", "name": f"Metrazolam {i}"}, "predicate": "treats",
              "object": {"type": "Drug", "name": f"Metrazolam {i + 1}"}}
             for i in range(count - 1)]
    return bulk_import(nexus, drugs, links)


def test_a_bulk_load_returns_with_the_head_cache_empty(nexus, kip):
    counts = _load(nexus, kip)
    assert counts["concepts_created"] == 2000 and counts["propositions_created"] == 1999
    assert len(nexus.store.head_cache) == 0
    # heads decode again on demand: the loaded graph reads back whole
    found = kip(nexus, 'FIND(?d.name) WHERE { ?d {type: "Drug"} (?d, "treats", ?o) '
                       '?o {name: "Metrazolam 1999"} }')
    assert found == ["Metrazolam 1998"]


def test_a_bulk_load_returns_with_the_embedder_caches_empty(nexus, kip):
    _load(nexus, kip)
    for index in nexus.search.vector_indexes():
        embedder = index.embedder
        for cache in ("_cache", "_words"):
            assert len(getattr(embedder, cache, ())) == 0
    hits = kip(nexus, 'SEARCH CONCEPT "metrazolam 17" WITH TYPE "Drug" LIMIT 3')
    assert hits[0]["name"] == "Metrazolam 17"
    assert nexus.search.drain(120)
    hits = kip(nexus, 'SEARCH CONCEPT "Metrazolma 1234" WITH TYPE "Drug" LIMIT 10')
    assert "Metrazolam 1234" in [h["name"] for h in hits]
