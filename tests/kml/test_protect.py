"""Protected targets (CONTRACT §7, spec Appendix 4 KIP_3004), every one of them, both stores.

Core nodes: the definitions of $ConceptType, $PropositionType, Domain, belongs_to_domain and
the CoreSchema domain — no attribute/metadata change, no delete. Core links: their
belongs_to_domain links to CoreSchema — no change, no delete. Actors $self/$system — no
delete, no setting/deleting core_directives. Bare references are fine, and so is re-stating
what a protected element already holds (CONTRACT §10: an identical re-application is a no-op,
docs/decisions.md "Capsules"); the privileged path (capsules) bypasses everything.
"""
from __future__ import annotations

import pytest

from kml_support import concept, element, err, ok, raw_dump

CORE = [("$ConceptType", "$ConceptType"), ("$ConceptType", "$PropositionType"),
        ("$ConceptType", "Domain"), ("$PropositionType", "belongs_to_domain"),
        ("Domain", "CoreSchema")]
CORE_LINKED = CORE[:4]          # CoreSchema has no belongs_to_domain link of its own
ACTORS = [("Person", "$self"), ("Person", "$system")]
CORE_SCHEMA = {"type": "Domain", "name": "CoreSchema"}


def ref(t, n):
    return f'{{type: "{t}", name: "{n}"}}'


def core_link(t, n):
    return [{"type": t, "name": n}, "belongs_to_domain", CORE_SCHEMA]


@pytest.fixture
def predicate(nx):
    ok(nx, 'UPSERT { CONCEPT ?p { {type: "$PropositionType", name: "describes"} '
           'SET ATTRIBUTES { description: "d", subject_types: ["*"], object_types: ["*"] } } '
           'CONCEPT ?t { {type: "$ConceptType", name: "Note"} } '
           'CONCEPT ?n { {type: "Note", name: "n1"} } }')
    return "describes"


@pytest.mark.parametrize("t,n", CORE, ids=[n for _, n in CORE])
class TestCoreNodes:
    @pytest.mark.parametrize("clause", [
        'SET ATTRIBUTES { description: "mine" }',
        'SET ATTRIBUTES { extra: 1 }',
        'SET ATTRIBUTES { description: null }',
    ])
    def test_no_attribute_change(self, nx, t, n, clause):
        e = err(nx, f'UPSERT {{ CONCEPT ?x {{ {ref(t, n)} {clause} }} }}', "KIP_3004")
        assert n in e["message"]

    def test_no_metadata_change(self, nx, t, n):
        err(nx, f'UPSERT {{ CONCEPT ?x {{ {ref(t, n)} }} WITH METADATA {{ source: "me" }} }}',
            "KIP_3004")

    def test_no_change_by_id(self, nx, t, n):
        cid = concept(nx, t, n)["id"]
        err(nx, f'UPSERT {{ CONCEPT ?x {{ {{id: "C:{cid}"}} SET ATTRIBUTES {{ a: 1 }} }} }}',
            "KIP_3004")

    def test_no_delete(self, nx, t, n):
        err(nx, f'DELETE CONCEPT ?x DETACH WHERE {{ ?x {ref(t, n)} }}', "KIP_3004")

    def test_no_key_delete(self, nx, t, n):
        err(nx, f'DELETE ATTRIBUTES {{"description"}} FROM ?x WHERE {{ ?x {ref(t, n)} }}',
            "KIP_3004")
        err(nx, f'DELETE METADATA {{"source"}} FROM ?x WHERE {{ ?x {ref(t, n)} }}', "KIP_3004")

    def test_deleting_absent_keys_is_no_change(self, nx, t, n):
        result = ok(nx, f'DELETE ATTRIBUTES {{"no_such_key"}} FROM ?x WHERE {{ ?x {ref(t, n)} }}')
        assert result == {"updated_concepts": 0, "updated_propositions": 0}

    def test_bare_reference_writes_nothing(self, nx, t, n, predicate):
        before = concept(nx, t, n)
        result = ok(nx, f'UPSERT {{ CONCEPT ?x {{ {ref(t, n)} }} '
                        f'CONCEPT ?y {{ {{type: "Note", name: "n1"}} SET PROPOSITIONS '
                        f'{{ ("describes", ?x) }} }} }} WITH METADATA {{ source: "agent" }}')
        assert result["upsert_concept_nodes"][0] == f"C:{before['id']}"
        assert concept(nx, t, n) == before          # no outer metadata merge, no _version bump

    def test_set_propositions_from_it_may_add_links(self, nx, t, n, predicate):
        before = concept(nx, t, n)
        ok(nx, f'UPSERT {{ CONCEPT ?x {{ {ref(t, n)} SET PROPOSITIONS '
               f'{{ ("describes", {{type: "Note", name: "n1"}}) }} }} }} '
               f'WITH METADATA {{ source: "agent" }}')
        link = element(nx, [{"type": t, "name": n}, "describes", {"type": "Note", "name": "n1"}])
        assert link["metadata"]["source"] == "agent" and link["metadata"]["_version"] == 1
        assert concept(nx, t, n) == before

    def test_privileged_bypasses(self, nx, t, n):
        ok(nx, f'UPSERT {{ CONCEPT ?x {{ {ref(t, n)} SET ATTRIBUTES {{ extra: 1 }} }} }}',
           privileged=True)
        assert concept(nx, t, n)["attributes"]["extra"] == 1
        ok(nx, f'DELETE METADATA {{"source"}} FROM ?x WHERE {{ ?x {ref(t, n)} }}',
           privileged=True)
        assert "source" not in concept(nx, t, n)["metadata"]


@pytest.mark.parametrize("t,n", CORE_LINKED, ids=[n for _, n in CORE_LINKED])
class TestCoreLinks:
    def test_no_delete(self, nx, t, n):
        err(nx, f'DELETE PROPOSITIONS ?l WHERE {{ ?l ({ref(t, n)}, "belongs_to_domain", '
                f'{ref("Domain", "CoreSchema")}) }}', "KIP_3004")

    def test_no_delete_by_id(self, nx, t, n):
        lid = element(nx, core_link(t, n))["id"]
        err(nx, f'DELETE PROPOSITIONS ?l WHERE {{ ?l (id: "P:{lid}:belongs_to_domain") }}',
            "KIP_3004")

    def test_no_change(self, nx, t, n):
        triple = f'({ref(t, n)}, "belongs_to_domain", {ref("Domain", "CoreSchema")})'
        err(nx, f'UPSERT {{ PROPOSITION ?l {{ {triple} SET ATTRIBUTES {{ a: 1 }} }} }}',
            "KIP_3004")
        err(nx, f'UPSERT {{ PROPOSITION ?l {{ {triple} }} WITH METADATA {{ a: 1 }} }}',
            "KIP_3004")
        err(nx, f'UPSERT {{ CONCEPT ?x {{ {ref(t, n)} SET PROPOSITIONS {{ ("belongs_to_domain", '
                f'{ref("Domain", "CoreSchema")}) WITH METADATA {{ a: 1 }} }} }} }}', "KIP_3004")
        err(nx, f'DELETE METADATA {{"source"}} FROM ?l WHERE {{ ?l {triple} }}', "KIP_3004")

    def test_bare_restatement_is_fine(self, nx, t, n):
        before = element(nx, core_link(t, n))
        ok(nx, f'UPSERT {{ CONCEPT ?x {{ {ref(t, n)} SET PROPOSITIONS {{ ("belongs_to_domain", '
               f'{ref("Domain", "CoreSchema")}) }} }} }} WITH METADATA {{ source: "agent" }}')
        ok(nx, f'UPSERT {{ PROPOSITION ?l {{ ({ref(t, n)}, "belongs_to_domain", '
               f'{ref("Domain", "CoreSchema")}) }} }}')
        assert element(nx, core_link(t, n)) == before


def test_bulk_delete_of_core_links_is_refused(nx):
    err(nx, 'DELETE PROPOSITIONS ?l WHERE { ?l (?s, "belongs_to_domain", '
            '{type: "Domain", name: "CoreSchema"}) }', "KIP_3004")


def test_other_schema_links_are_not_protected(nx):
    result = ok(nx, 'DELETE PROPOSITIONS ?l WHERE { ?l ({type: "$ConceptType", name: "Event"}, '
                    '"belongs_to_domain", ?d) }')
    assert result == {"deleted_propositions": 1}
    ok(nx, 'UPSERT { CONCEPT ?x { {type: "$ConceptType", name: "Person"} '
           'SET ATTRIBUTES { display_hint: "🧑" } } }')


@pytest.mark.parametrize("t,n", ACTORS, ids=[n for _, n in ACTORS])
class TestActors:
    def test_no_delete(self, nx, t, n):
        err(nx, f'DELETE CONCEPT ?x DETACH WHERE {{ ?x {ref(t, n)} }}', "KIP_3004")

    def test_no_core_directives_change(self, nx, t, n):
        e = err(nx, f'UPSERT {{ CONCEPT ?x {{ {ref(t, n)} SET ATTRIBUTES '
                    f'{{ persona: "x", core_directives: [] }} }} }}', "KIP_3004")
        assert "core_directives" in e["message"]
        err(nx, f'DELETE ATTRIBUTES {{"core_directives"}} FROM ?x WHERE {{ ?x {ref(t, n)} }}',
            "KIP_3004")
        err(nx, 'DELETE ATTRIBUTES {"persona", "core_directives"} FROM ?x '
                'WHERE { ?x {type: "Person"} }', "KIP_3004")

    def test_other_attributes_and_metadata_evolve(self, nx, t, n):
        before = concept(nx, t, n)
        ok(nx, f'UPSERT {{ CONCEPT ?x {{ {ref(t, n)} SET ATTRIBUTES {{ persona: "curious", '
               f'strengths: ["patience"] }} }} }} WITH METADATA {{ mood: "good" }}')
        after = concept(nx, t, n)
        assert after["attributes"]["persona"] == "curious"
        assert after["attributes"]["core_directives"] == before["attributes"]["core_directives"]
        assert after["metadata"]["mood"] == "good"
        assert after["metadata"]["_version"] == before["metadata"]["_version"] + 1
        result = ok(nx, f'DELETE ATTRIBUTES {{"persona"}} FROM ?x WHERE {{ ?x {ref(t, n)} }}')
        assert result == {"updated_concepts": 1, "updated_propositions": 0}
        ok(nx, f'DELETE METADATA {{"mood", "source"}} FROM ?x WHERE {{ ?x {ref(t, n)} }}')

    def test_links_to_actors_come_and_go(self, nx, t, n):
        ok(nx, f'UPSERT {{ CONCEPT ?e {{ {{type: "Event", name: "chat-1"}} SET ATTRIBUTES '
               f'{{ event_class: "Conversation" }} SET PROPOSITIONS {{ ("involves", {ref(t, n)}) }} '
               f'}} }}')
        result = ok(nx, f'DELETE PROPOSITIONS ?l WHERE {{ ?l (?e, "involves", {ref(t, n)}) }}')
        assert result == {"deleted_propositions": 1}

    def test_privileged_bypasses(self, nx, t, n):
        ok(nx, f'DELETE ATTRIBUTES {{"core_directives"}} FROM ?x WHERE {{ ?x {ref(t, n)} }}',
           privileged=True)
        ok(nx, f'DELETE CONCEPT ?x DETACH WHERE {{ ?x {ref(t, n)} }}', privileged=True)
        assert concept(nx, t, n) is None


def test_privileged_may_delete_the_core(nx):
    core = concept(nx, "Domain", "CoreSchema")["id"]
    with nx.store.read() as t:
        incoming = len(list(t.in_links(core)))      # every definition of the capsules
    result = ok(nx, 'DELETE CONCEPT ?x DETACH WHERE { ?x {type: "Domain", name: "CoreSchema"} }',
                privileged=True)
    assert result == {"deleted_concepts": 1, "deleted_propositions": incoming}


# --- identical re-application (CONTRACT §10): a no-op, never KIP_3004 -------------------------

def user_metadata(element_json: dict) -> dict:
    return {k: v for k, v in element_json["metadata"].items() if not k.startswith("_")}


def no_op(nx, command: str, parameters: dict | None = None) -> None:
    """`command` succeeds and leaves the store byte-for-byte as it was."""
    before = raw_dump(nx)
    ok(nx, command, parameters)
    assert raw_dump(nx) == before, "an identical re-application wrote something"


@pytest.mark.parametrize("t,n", CORE + ACTORS, ids=[n for _, n in CORE + ACTORS])
class TestIdenticalRestatement:
    def test_everything_it_holds(self, nx, t, n):
        held = concept(nx, t, n)
        no_op(nx, f"UPSERT {{ CONCEPT ?x {{ {ref(t, n)} SET ATTRIBUTES :a }} }} "
                  f"WITH METADATA :m", {"a": held["attributes"], "m": user_metadata(held)})

    def test_part_of_it_and_equal_json(self, nx, t, n):
        held = concept(nx, t, n)
        key = "core_directives" if t == "Person" else "description"
        # confidence 1 is the JSON number 1.0; key order inside objects does not matter
        reordered = [dict(reversed(list(d.items()))) if isinstance(d, dict) else d
                     for d in held["attributes"][key]] \
            if isinstance(held["attributes"][key], list) else held["attributes"][key]
        no_op(nx, f"UPSERT {{ CONCEPT ?x {{ {ref(t, n)} SET ATTRIBUTES {{ {key}: :v }} }} }} "
                  f"WITH METADATA {{ confidence: 1 }}", {"v": reordered})
        no_op(nx, f"UPSERT {{ CONCEPT ?x {{ {ref(t, n)} SET ATTRIBUTES {{ }} }} }}")

    def test_a_different_value_is_still_refused(self, nx, t, n):
        held = concept(nx, t, n)
        key = "core_directives" if t == "Person" else "description"
        changed = held["attributes"][key][:-1] if t == "Person" else "mine"
        err(nx, f"UPSERT {{ CONCEPT ?x {{ {ref(t, n)} SET ATTRIBUTES :a }} }} WITH METADATA :m",
            "KIP_3004", {"a": {**held["attributes"], key: changed},
                         "m": user_metadata(held)})
        if t != "Person":       # an actor's metadata evolves freely; a core node's does not
            err(nx, f"UPSERT {{ CONCEPT ?x {{ {ref(t, n)} }} WITH METADATA "
                    f"{{ confidence: true }} }}", "KIP_3004")      # true is not the number 1
            err(nx, f"UPSERT {{ CONCEPT ?x {{ {ref(t, n)} }} WITH METADATA "
                    f"{{ status: \"active\", extra: 1 }} }}", "KIP_3004")


@pytest.mark.parametrize("t,n", ACTORS, ids=[n for _, n in ACTORS])
def test_actor_core_directives_restated_with_other_changes(nx, t, n):
    held = concept(nx, t, n)
    ok(nx, f"UPSERT {{ CONCEPT ?x {{ {ref(t, n)} SET ATTRIBUTES "
           f"{{ core_directives: :d, persona: \"grown\" }} }} }}",
       {"d": held["attributes"]["core_directives"]})
    after = concept(nx, t, n)
    assert after["attributes"]["persona"] == "grown"
    assert after["attributes"]["core_directives"] == held["attributes"]["core_directives"]
    assert after["metadata"]["_version"] == held["metadata"]["_version"] + 1


@pytest.mark.parametrize("t,n", CORE_LINKED, ids=[n for _, n in CORE_LINKED])
def test_core_link_restated_with_its_metadata(nx, t, n):
    held = element(nx, core_link(t, n))
    triple = f'({ref(t, n)}, "belongs_to_domain", {ref("Domain", "CoreSchema")})'
    no_op(nx, f"UPSERT {{ PROPOSITION ?l {{ {triple} }} }} WITH METADATA :m",
          {"m": user_metadata(held)})
    err(nx, f"UPSERT {{ PROPOSITION ?l {{ {triple} }} WITH METADATA {{ author: \"me\" }} }}",
        "KIP_3004")
