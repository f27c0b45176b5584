"""DESCRIBE PRIMER (spec §2.5, §5.1.1; CONTRACT §8): identity, a domain map ranked by graph
importance, and a cache that reads never rebuild and writes invalidate per domain."""
from __future__ import annotations

import pytest

import nexus.exec.primer as primer
from nexus.api import Nexus

ENTRY_KEYS = {"name", "description", "key_concept_types", "key_proposition_types",
              "key_concepts"}


def entry(result, name):
    return next(d for d in result["domain_map"] if d["name"] == name)


def test_shape_on_bootstrap(boot, ok):
    result = ok(boot, "DESCRIBE PRIMER")
    assert set(result) == {"identity", "domain_map", "total_domains", "search_modes",
                           "extensions"}
    assert result["extensions"]["history"]["enabled"] is True
    identity = result["identity"]
    assert set(identity) == {"id", "type", "name", "attributes"}
    assert identity["type"] == "Person" and identity["name"] == "$self"
    assert identity["attributes"]["person_class"] == "AI"
    assert result["total_domains"] == len(ok(boot, "DESCRIBE DOMAINS"))
    assert all(set(d) == ENTRY_KEYS for d in result["domain_map"])
    assert result["search_modes"] and all(isinstance(m, str) for m in result["search_modes"])
    core = entry(result, "CoreSchema")
    assert core["description"]
    assert {"$ConceptType", "$PropositionType", "Domain"} <= set(core["key_concept_types"])
    assert "belongs_to_domain" in core["key_proposition_types"]


def test_domain_map_after_capsule(medical, ok):
    result = ok(medical, "DESCRIBE PRIMER")
    med = entry(result, "Medical")
    assert med["description"] == "Drugs, symptoms and what treats what."
    assert set(med["key_concept_types"]) == {"Drug", "Symptom"}
    assert med["key_proposition_types"][0] == "treats"         # 6 links vs 2
    assert "belongs_to_domain" not in med["key_proposition_types"]
    # Headache is the hub every drug treats: the most important concept of the domain.
    assert med["key_concepts"][0] == {"type": "Symptom", "name": "Headache"}
    assert {c["name"] for c in med["key_concepts"]} == {
        "Headache", "Fever", "Nausea", "Aspirin", "Ibuprofen", "Paracetamol", "Codeine"}
    names = [d["name"] for d in result["domain_map"]]
    assert names.index("Medical") < names.index("Unsorted")    # bigger domains first


def test_no_identity_without_self():
    nx = Nexus.open(None, bootstrap=False)
    try:
        result = nx.execute_kip({"command": "DESCRIBE PRIMER"})["result"]
        assert result["identity"] is None and result["domain_map"] == []
        assert result["total_domains"] == 0
    finally:
        nx.close()


@pytest.fixture
def counted(monkeypatch):
    calls = []
    real = primer.rank_domain

    def rank(txn, domain):
        calls.append(txn.known_head(domain).name)
        return real(txn, domain)
    monkeypatch.setattr(primer, "rank_domain", rank)
    return calls


def test_reads_reuse_the_cache(medical, ok, counted):
    first = ok(medical, "DESCRIBE PRIMER")
    assert len(counted) == first["total_domains"]
    counted.clear()
    for _ in range(3):
        assert ok(medical, "DESCRIBE PRIMER") == first
    assert counted == []


def test_a_write_recomputes_only_the_domains_it_touches(medical, ok, counted):
    ok(medical, "DESCRIBE PRIMER")
    counted.clear()
    r = medical.execute_kip({"command": """
        UPSERT { CONCEPT ?m { {type: "Domain", name: "Medical"} }
                 CONCEPT ?d { {type: "Drug", name: "Naproxen"}
                              SET PROPOSITIONS { ("belongs_to_domain", ?m) } } }"""})
    assert "result" in r, r
    result = ok(medical, "DESCRIBE PRIMER")
    # Medical gained a member; CoreSchema owns the Domain type and belongs_to_domain, whose
    # counts changed. The other domains are untouched.
    assert "Medical" in counted and set(counted) <= {"Medical", "CoreSchema"}
    assert {"type": "Drug", "name": "Naproxen"} in entry(result, "Medical")["key_concepts"]
    counted.clear()
    # An element outside every domain, of a type no domain owns: nothing to recompute.
    medical.execute_kip({"command": 'UPSERT { CONCEPT ?e { {type: "Event", name: "Chat 1"} '
                                    'SET ATTRIBUTES {event_class: "Conversation", '
                                    'start_time: "2025-01-01T00:00:00Z", '
                                    'content_summary: "hi"} } }'})
    ok(medical, "DESCRIBE PRIMER")
    assert "Medical" not in counted


def test_an_instance_of_a_domain_type_invalidates_that_domain(medical, ok, counted):
    ok(medical, "DESCRIBE PRIMER")
    counted.clear()
    medical.execute_kip({"command": 'UPSERT { CONCEPT ?d { {type: "Drug", name: "Orphan"} } }'})
    ok(medical, "DESCRIBE PRIMER")
    assert counted == ["Medical"]          # Drug's definition belongs to Medical


def test_writes_between_two_primers_invalidate_their_domains_together(medical, ok, counted):
    ok(medical, "DESCRIBE PRIMER")
    counted.clear()
    for name in ("Orphan 1", "Orphan 2", "Orphan 3"):
        medical.execute_kip({"command": f'UPSERT {{ CONCEPT ?d {{ {{type: "Drug", '
                                        f'name: "{name}"}} }} }}'})
    result = ok(medical, "DESCRIBE PRIMER")
    assert counted == ["Medical"]           # once, for the three writes
    counted.clear()
    assert ok(medical, "DESCRIBE PRIMER") == result and counted == []


def test_a_long_queue_of_writes_is_settled_by_a_write(medical, ok, counted, monkeypatch):
    # Past QUEUE_IDS queued ids, the write that passes it finds their domains itself.
    monkeypatch.setattr(primer, "QUEUE_IDS", 0)
    ok(medical, "DESCRIBE PRIMER")
    counted.clear()
    medical.execute_kip({"command": 'UPSERT { CONCEPT ?d { {type: "Drug", name: "Orphan"} } }'})
    ok(medical, "DESCRIBE PRIMER")
    assert counted == ["Medical"]


# Loader-shaped commands: the parser reads them as columns and the UPSERT executor writes
# them column-wise, handing the commit hooks the heads it wrote (no read-back): the domains
# they touch are invalidated all the same, whether the queue settles now or later.
LOADED = [
    # a new instance of a type whose definition belongs to Medical
    ('UPSERT { CONCEPT { {type: "Drug", name: "Orphan"} } }', {}),
    # a new concept of a type of no domain, linked into Medical
    ('UPSERT { CONCEPT { {type: :t, name: "Loose"} SET PROPOSITIONS { '
     '("belongs_to_domain", {type: "Domain", name: "Medical"}) } } }', {"t": "Domain"}),
    # an existing member's attributes
    ('UPSERT { CONCEPT { {type: "Symptom", name: "Headache"} SET ATTRIBUTES :a } }',
     {"a": {"severity": 3}}),
]


@pytest.mark.parametrize("queue_ids", [primer.QUEUE_IDS, 0])
@pytest.mark.parametrize("command", range(len(LOADED)))
def test_loader_shaped_writes_invalidate_their_domains(medical, ok, counted, monkeypatch,
                                                       queue_ids, command):
    from nexus.syntax import ast as A, parse
    text, params = LOADED[command]
    assert type(parse(text).command) is A.ColumnUpsert
    monkeypatch.setattr(primer, "QUEUE_IDS", queue_ids)
    ok(medical, "DESCRIBE PRIMER")
    counted.clear()
    r = medical.execute_kip({"command": text, "parameters": params})
    assert "result" in r, r
    ok(medical, "DESCRIBE PRIMER")
    assert "Medical" in counted


def test_a_delete_invalidates_everything(medical, ok, counted):
    first = ok(medical, "DESCRIBE PRIMER")
    counted.clear()
    r = medical.execute_kip({"command": 'DELETE CONCEPT ?c DETACH WHERE '
                                        '{ ?c {type: "Symptom", name: "Headache"} }'})
    assert "result" in r, r
    result = ok(medical, "DESCRIBE PRIMER")
    assert len(counted) == first["total_domains"]
    assert "Headache" not in [c["name"] for c in entry(result, "Medical")["key_concepts"]]


def test_ranking_work_is_bounded(boot, ok, monkeypatch):
    from nexus.ops.bulk_import import bulk_import
    monkeypatch.setattr(primer, "MAX_MEMBERS", 50)
    boot.execute_kip({"command": """
        UPSERT { CONCEPT ?b { {type: "Domain", name: "Big"} SET ATTRIBUTES {description: "b"} }
                 CONCEPT ?t { {type: "$ConceptType", name: "Thing"}
                              SET ATTRIBUTES {description: "t"} } }"""})
    things = [{"type": "Thing", "name": f"t{i}"} for i in range(300)]
    links = [{"subject": {"type": "Thing", "name": f"t{i}"}, "predicate": "belongs_to_domain",
              "object": {"type": "Domain", "name": "Big"}} for i in range(300)]
    bulk_import(boot, things, links)
    big = entry(ok(boot, "DESCRIBE PRIMER"), "Big")
    assert big["key_concept_types"] == ["Thing"] and len(big["key_concepts"]) == primer.TOP_K


def test_pagerank_prefers_the_node_everyone_points_to():
    ranks = primer.pagerank(4, [(0, 3), (1, 3), (2, 3), (3, 0)])
    assert ranks.argmax() == 3 and abs(ranks.sum() - 1.0) < 1e-6
    assert list(primer.pagerank(3, [])) == [1 / 3] * 3
