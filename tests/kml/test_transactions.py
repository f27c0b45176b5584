"""All-or-nothing commands, idempotency over the whole store, and what KML reports to the
indexes kept beside the store (CONTRACT §3, §7), on both stores."""
from __future__ import annotations

import pytest

from kml_support import MEDICAL_SCHEMA, concept, elements, err, ok, raw_dump

CAPSULE = """
UPSERT {
  CONCEPT ?h { {type: "Symptom", name: "Headache"} SET ATTRIBUTES { severity: 2 } }
  CONCEPT ?d { {type: "Drug", name: "Aspirin"} SET ATTRIBUTES { risk_level: 1, tags: ["otc"] }
               SET PROPOSITIONS { ("treats", ?h) WITH METADATA { confidence: 0.9 } } }
  PROPOSITION ?t { (?d, "treats", ?h) SET ATTRIBUTES { evidence: "A" } }
  CONCEPT ?s { {type: "Source", name: "Trial"} }
  PROPOSITION ?e { (?t, "supported_by", ?s) } WITH METADATA { weight: 1 }
}
WITH METADATA { source: "capsule", author: "tests" }
UPSERT {
  CONCEPT ?c { {type: "DrugClass", name: "NSAID"} }
  CONCEPT ?d { {type: "Drug", name: "Aspirin"} SET PROPOSITIONS { ("is_class_of", ?c) } }
}
"""

# The third block of the second statement fails, in a different way each time.
FAILING_THIRD_BLOCK = {
    "KIP_3002": 'CONCEPT ?x { {type: "Drug", name: "X"} SET PROPOSITIONS { ("treats", {type: "Symptom", name: "Nope"}) } }',
    "KIP_2001": 'CONCEPT ?x { {type: "Gene", name: "X"} }',
    "KIP_3001": 'PROPOSITION ?x { (?nowhere, "treats", ?a) }',
    "KIP_3004": 'CONCEPT ?x { {type: "Domain", name: "CoreSchema"} SET ATTRIBUTES { a: 1 } }',
    "KIP_2002": 'CONCEPT ?x { {type: "Drug", name: "X"} SET ATTRIBUTES { _a: 1 } }',
    "KIP_2003": 'CONCEPT ?x { {type: "Drug", name: "X"} SET ATTRIBUTES { big: 123456789012345678901234567890 } }',
    "KIP_1001": 'CONCEPT ?a { {type: "Drug", name: "X"} }',
}


@pytest.mark.parametrize("code", sorted(FAILING_THIRD_BLOCK))
def test_error_in_third_block_of_second_statement_changes_nothing(nx, code):
    ok(nx, MEDICAL_SCHEMA)
    ok(nx, CAPSULE)
    command = f"""
    UPSERT {{
      CONCEPT ?n {{ {{type: "Drug", name: "New1"}} SET ATTRIBUTES {{ a: 1 }} }}
      CONCEPT ?h {{ {{type: "Symptom", name: "Headache"}} SET ATTRIBUTES {{ severity: 5 }} }}
    }}
    WITH METADATA {{ source: "first" }}
    UPSERT {{
      CONCEPT ?a {{ {{type: "Drug", name: "Aspirin"}} SET ATTRIBUTES {{ risk_level: 9 }}
                   SET PROPOSITIONS {{ ("treats", {{type: "Symptom", name: "Headache"}}) }} }}
      PROPOSITION ?l {{ (?a, "has_side_effect", {{type: "Symptom", name: "Headache"}}) }}
      {FAILING_THIRD_BLOCK[code]}
      CONCEPT ?z {{ {{type: "Drug", name: "Never"}} }}
    }}
    """
    err(nx, command, code)      # err() compares the raw dump of every table before/after


def test_error_leaves_ids_unused(nx):
    ok(nx, MEDICAL_SCHEMA)
    err(nx, 'UPSERT { CONCEPT ?a { {type: "Drug", name: "A"} } CONCEPT ?b { {type: "Gene", '
            'name: "B"} } }', "KIP_2001")
    result = ok(nx, 'UPSERT { CONCEPT ?a { {type: "Drug", name: "A"} } }')
    with nx.store.read() as t:
        assert result["upsert_concept_nodes"] == [f"C:{t.max_id()}"]


def test_repeating_a_capsule_changes_only_version_and_updated_at(nx):
    ok(nx, MEDICAL_SCHEMA)
    ok(nx, CAPSULE)
    first = elements(nx)
    ok(nx, CAPSULE)
    second = elements(nx)
    assert first.keys() == second.keys()
    for key, a in first.items():
        b = second[key]
        va, vb = a["metadata"].pop("_version"), b["metadata"].pop("_version")
        ua, ub = a["metadata"].pop("_updated_at"), b["metadata"].pop("_updated_at")
        assert a == b, key
        assert ub >= ua
        # CONTRACT §3 / RC11 §2.11.1: +1 per command that mutates the element, however
        # many blocks name it (Aspirin: two blocks; the treats link: an entry and a block)
        assert vb - va in (0, 1)      # 0: elements the capsule does not name
    aspirin = concept(nx, "Drug", "Aspirin")
    assert aspirin["metadata"]["_version"] == 2


def test_result_ids_follow_top_level_blocks(nx):
    ok(nx, MEDICAL_SCHEMA)
    result = ok(nx, CAPSULE)
    assert result["blocks"] == 2
    everything = elements(nx)
    names = [everything[i].get("name") for i in result["upsert_concept_nodes"]]
    assert names == ["Headache", "Aspirin", "Trial", "NSAID", "Aspirin"]
    predicates = [everything[i]["predicate"] for i in result["upsert_proposition_links"]]
    assert predicates == ["treats", "supported_by"]
    assert all(i.startswith("P:") and i.endswith(":" + p)
               for i, p in zip(result["upsert_proposition_links"], predicates))


def test_engine_metadata(nx):
    ok(nx, MEDICAL_SCHEMA)
    ok(nx, CAPSULE)
    before = concept(nx, "Symptom", "Headache")["metadata"]
    assert before["_version"] == 1 and before["_created_at"] == before["_updated_at"]
    ok(nx, 'UPSERT { CONCEPT ?h { {type: "Symptom", name: "Headache"} } }')
    after = concept(nx, "Symptom", "Headache")["metadata"]
    assert after["_version"] == 2 and after["_created_at"] == before["_created_at"]
    assert after["_updated_at"] >= before["_updated_at"]
    assert list(after)[:2] == ["source", "author"]      # user keys keep their order


def test_touched_and_removed_are_reported(nx, monkeypatch):
    ok(nx, MEDICAL_SCHEMA)
    seen = []

    class Recorder:     # a commit hook: sees what each write touched and removed
        def stage(self, ctx): pass
        def before_commit(self, ctx): seen.append((set(ctx.touched), set(ctx.removed)))
        def after_commit(self, ctx): pass
        def rolled_back(self, ctx): pass
    nx.add_commit_hook(Recorder())
    result = ok(nx, CAPSULE)
    ids = {int(i.split(":")[1]) for i in
           result["upsert_concept_nodes"] + result["upsert_proposition_links"]}
    touched, removed = seen[-1]
    with nx.store.read() as t:
        everything_new = {n for n in t.elements() if n > min(ids) - 1}
    assert touched == everything_new and not removed
    ok(nx, 'DELETE CONCEPT ?d DETACH WHERE { ?d {type: "Drug", name: "Aspirin"} }')
    touched, removed = seen[-1]
    assert not touched and len(removed) == 1 + 3    # Aspirin, 2 links, 1 higher-order link
    ok(nx, 'DELETE ATTRIBUTES {"severity"} FROM ?s WHERE { ?s {type: "Symptom"} }')
    touched, removed = seen[-1]
    assert touched == {concept(nx, "Symptom", "Headache")["id"]} and not removed
    seen.clear()
    ok(nx, CAPSULE, dry_run=True)
    assert seen == []                               # a dry run commits nothing


def test_dry_run_of_a_whole_capsule_writes_nothing(nx):
    ok(nx, MEDICAL_SCHEMA)
    before = raw_dump(nx)
    result = ok(nx, CAPSULE, dry_run=True)
    assert result == {"blocks": 0, "upsert_concept_nodes": [], "upsert_proposition_links": []}
    assert raw_dump(nx) == before


def test_a_write_pauses_the_collector_also_when_its_text_was_parsed_before(nx):
    """A write command runs with the cyclic collector paused until it commits, and the
    collector is back on after — the first time its text is sent (parsed now) and when
    it is sent again (its parse cached: the engine reads the kind from it); a read
    leaves the collector on."""
    import gc
    ok(nx, MEDICAL_SCHEMA)
    during = []

    class Probe:        # a commit hook: whether the collector runs while the write commits
        def stage(self, ctx): pass
        def before_commit(self, ctx): during.append(gc.isenabled())
        def after_commit(self, ctx): pass
        def rolled_back(self, ctx): pass
    nx.add_commit_hook(Probe())
    assert gc.isenabled()
    text = 'UPSERT { CONCEPT ?h { {type: "Symptom", name: "Cough"} SET ATTRIBUTES { n: :n } } }'
    for n in range(3):
        ok(nx, text, {"n": n})
        assert gc.isenabled()
    assert during == [False, False, False]
    find = 'FIND(?h.attributes.n) WHERE { ?h {type: "Symptom", name: "Cough"} }'
    for _ in range(2):
        assert ok(nx, find) == [2] and gc.isenabled()
