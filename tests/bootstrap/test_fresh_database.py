"""A new database holds exactly the bundled capsules (CONTRACT §9, capsules.md), and opening
it again changes nothing at all (not even `_version`); `$self` is never reset."""
from __future__ import annotations

import hashlib

import pytest

from nexus.api import Nexus
from nexus.ops.capsules import BUNDLED, bootstrap, bundled_text
from nexus.store.protocol import ConceptHead

CONCEPTS = {
    ("$ConceptType", "$ConceptType"), ("$ConceptType", "$PropositionType"),
    ("$ConceptType", "Domain"), ("$ConceptType", "Person"), ("$ConceptType", "Event"),
    ("$ConceptType", "SleepTask"),
    ("$PropositionType", "belongs_to_domain"), ("$PropositionType", "involves"),
    ("$PropositionType", "mentions"), ("$PropositionType", "consolidated_to"),
    ("$PropositionType", "derived_from"), ("$PropositionType", "assigned_to"),
    ("Domain", "CoreSchema"), ("Domain", "Unsorted"), ("Domain", "Archived"),
    ("Domain", "System"),
    ("Person", "$self"), ("Person", "$system"),
    # RC11: the memory types and the shared predicate capsules
    *(("$ConceptType", t) for t in ("Preference", "Insight", "Commitment", "Experience",
                                    "ExperienceStep", "Skill")),
    *(("$PropositionType", p) for p in ("caused_by", "committed_to", "compiled_to",
                                        "derived_insight", "has_step", "learned", "owed_to",
                                        "prefers")),
}
# Every type and predicate definition belongs to CoreSchema, and so do the operational
# domains of the RC11 Genesis (step 3d); nothing else is linked.
LINKS = {((t, n), "belongs_to_domain", ("Domain", "CoreSchema"))
         for t, n in CONCEPTS if t in ("$ConceptType", "$PropositionType")
         or (t == "Domain" and n in ("Unsorted", "Archived", "System"))}


def contents(nx: Nexus) -> tuple[set, set]:
    concepts, links = set(), set()
    with nx.store.read() as t:
        def key(n):
            h = t.head(n)
            return t.symbol_text(h.type_id), h.name
        for n in t.elements():
            h = t.head(n)
            if type(h) is ConceptHead:
                concepts.add(key(n))
            else:
                links.add((key(h.subject), t.symbol_text(h.predicate_id), key(h.object)))
    return concepts, links


def test_fresh_database_holds_exactly_the_bundled_capsules(nx):
    concepts, links = contents(nx)
    assert concepts == CONCEPTS
    assert links == LINKS
    with nx.store.read() as t:
        assert (t.count_concepts(), t.count_links()) == (len(CONCEPTS), len(LINKS))
        assert t.max_id() == len(CONCEPTS) + len(LINKS)
        stored = dict(t.aux("engine").scan(b"capsule:"))
    assert stored == {f"capsule:{name}".encode():
                      hashlib.sha256(bundled_text(name).encode()).hexdigest().encode()
                      for name in BUNDLED}


def test_bootstrap_metadata_and_versions(nx):
    with nx.store.read() as t:
        for n in t.elements():
            meta = t.metadata(n)
            assert {k: meta[k] for k in ("source", "author", "confidence", "status")} == {
                "source": "SystemBootstrap", "author": "$system", "confidence": 1.0,
                "status": "active"}, n
            assert meta["_version"] == 1, (n, meta)        # nothing is written twice


def test_capsule_facts(nx):
    """The facts of capsules.md: attribute keys, types, signatures, the two actors."""
    with nx.store.read() as t:
        def attrs(type_, name):
            return t.attributes(t.concept_id(t.symbol_id(type_), name))
        person = attrs("$ConceptType", "Person")
        assert person["display_hint"] == "👤"
        assert set(person["instance_schema"]) == {
            "person_class", "id", "name", "handle", "avatar", "status", "persona",
            "core_directives", "core_mission", "capabilities", "relationship_to_self",
            "interaction_summary", "behavior_preferences", "strengths", "weaknesses",
            "identity_narrative", "values", "privacy_settings", "service_endpoints",
            "cognitive_state", "last_sleep_cycle", "maintenance_log", "growth_log"}
        assert person["instance_schema"]["person_class"]["is_required"] is True
        event = attrs("$ConceptType", "Event")
        assert event["display_hint"] == "⏱️"
        assert {k for k, v in event["instance_schema"].items() if v["is_required"]} == {
            "event_class", "start_time", "content_summary"}
        task = attrs("$ConceptType", "SleepTask")
        assert {k for k, v in task["instance_schema"].items() if v.get("is_required")} == {
            "target_type", "target_name", "requested_action", "reason"}
        signatures = {p: (attrs("$PropositionType", p)["subject_types"],
                          attrs("$PropositionType", p)["object_types"])
                      for p in ("belongs_to_domain", "involves", "mentions", "consolidated_to",
                                "derived_from", "assigned_to")}
        assert signatures == {     # RC11: the episodic predicates span Event and Experience
            "belongs_to_domain": (["*"], ["Domain"]),
            "involves": (["Event", "Experience"], ["Person"]),
            "mentions": (["Event", "Experience"], ["*"]),
            "consolidated_to": (["Event", "Experience"], ["*"]),
            "derived_from": (["*"], ["Event", "Experience"]),
            "assigned_to": (["SleepTask"], ["Person"])}
        me, system = attrs("Person", "$self"), attrs("Person", "$system")
        assert (me["person_class"], me["cognitive_state"]) == ("AI", "waking")
        assert len(me["core_directives"]) == 7 and me["persona"] and me["identity_narrative"]
        assert all(me[k] == [] for k in ("capabilities", "strengths", "weaknesses", "values"))
        assert (system["person_class"], system["cognitive_state"], system["handle"]) == (
            "AI", "sleeping", "system")
        assert len(system["core_directives"]) == 6 and system["core_mission"]
        assert system["maintenance_log"] == []
        assert "id" not in me


def test_opening_twice_changes_nothing(open_nexus, store_kind):
    nx = open_nexus()
    before = nx.store.dump()
    if store_kind == "lmdb":
        nx = open_nexus(reopen=True)
    else:
        assert bootstrap(nx) == []
    assert nx.store.dump() == before


def test_reopen_keeps_data_and_never_resets_self(open_nexus, store_kind):
    if store_kind == "memory":
        pytest.skip("a memory nexus cannot be reopened")
    nx = open_nexus()
    nx.execute_kip({"command": 'UPSERT { CONCEPT ?s { {type: "Person", name: "$self"} '
                               'SET ATTRIBUTES { persona: "grown up", capabilities: ["kip"] } } }'})
    # Even if the stored hash of the actor capsule were lost or different, $self stays.
    with nx.write_session(privileged=True) as b:
        b.txn.aux("engine").delete(b"capsule:persons/self.kip")
    nx = open_nexus(reopen=True)
    with nx.store.read() as t:
        n = t.concept_id(t.symbol_id("Person"), "$self")
        assert t.attributes(n)["persona"] == "grown up"
        assert t.attributes(n)["capabilities"] == ["kip"]
        assert t.metadata(n)["_version"] == 2


def test_changed_capsule_is_reapplied(open_nexus, store_kind):
    nx = open_nexus()
    with nx.write_session(privileged=True) as b:      # as if Event.kip had changed since
        b.txn.aux("engine").put(b"capsule:Event.kip", b"0" * 64)
    if store_kind == "lmdb":
        nx = open_nexus(reopen=True)
    else:
        assert bootstrap(nx) == ["Event.kip"]
    with nx.store.read() as t:
        ct, pt = t.symbol_id("$ConceptType"), t.symbol_id("$PropositionType")
        assert t.metadata(t.concept_id(ct, "Event"))["_version"] == 2
        assert t.metadata(t.concept_id(pt, "mentions"))["_version"] == 1
        assert t.metadata(t.concept_id(ct, "Person"))["_version"] == 1
        assert t.aux("engine").get(b"capsule:Event.kip") == hashlib.sha256(
            bundled_text("Event.kip").encode()).hexdigest().encode()
        assert (t.count_concepts(), t.count_links()) == (len(CONCEPTS), len(LINKS))


def test_self_id_is_set_at_creation_only(open_nexus, store_kind):
    nx = open_nexus(self_id="principal-42")
    with nx.store.read() as t:
        n = t.concept_id(t.symbol_id("Person"), "$self")
        assert t.attributes(n)["id"] == "principal-42"
        assert t.metadata(n)["_version"] == 1
    if store_kind == "lmdb":
        nx = open_nexus(reopen=True, self_id="someone-else")
        with nx.store.read() as t:
            n = t.concept_id(t.symbol_id("Person"), "$self")
            assert t.attributes(n)["id"] == "principal-42"


def test_without_bootstrap_the_database_is_empty(open_nexus):
    nx = open_nexus(bootstrap=False)
    with nx.store.read() as t:
        assert t.max_id() == 0 and not list(t.aux("engine").scan(b"capsule:"))


def test_a_short_query_timeout_bounds_commands_not_the_bootstrap():
    """`query_timeout` bounds what agents send: a database opened with a timeout too short
    for any command still applies every bundled capsule, and then bounds the commands."""
    with Nexus.open(None, query_timeout=1e-9) as nx:
        with nx.store.read() as txn:
            assert sum(1 for _ in txn.elements()) > 40
        r = nx.execute_kip({"command": 'UPSERT { CONCEPT ?p { {type: "Person", name: "x"} } }'
                                       ' WITH METADATA {source: "t"}'})
        assert r["error"]["code"] == "KIP_4001", r
