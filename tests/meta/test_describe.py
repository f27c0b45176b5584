"""Every DESCRIBE form (spec §5.1, CONTRACT §8) on the bootstrap database and after a
capsule: shapes, sorting, paging, usage statistics, case-sensitive lookups, KIP_3002."""
from __future__ import annotations

import os

import pytest

from nexus.api import Nexus

MEDICAL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "medical.kip")

DEF_KEYS = {"id", "type", "name", "attributes"}
BOOT_TYPES = ["$ConceptType", "$PropositionType", "Domain", "Event", "Person"]


# --- CONCEPT TYPES / PROPOSITION TYPES -----------------------------------------------------

def test_concept_types_are_sorted_names(boot, ok):
    names = ok(boot, "DESCRIBE CONCEPT TYPES")
    assert names == sorted(names)
    assert set(BOOT_TYPES) <= set(names)
    assert all(isinstance(n, str) for n in names)


def test_concept_types_after_capsule(medical, ok):
    names = ok(medical, "DESCRIBE CONCEPT TYPES")
    assert {"Drug", "Symptom"} <= set(names) and names == sorted(names)


def test_proposition_types(medical, ok):
    names = ok(medical, "DESCRIBE PROPOSITION TYPES")
    assert names == sorted(names)
    assert {"belongs_to_domain", "treats", "has_side_effect"} <= set(names)


@pytest.mark.parametrize("target", ["CONCEPT TYPES", "PROPOSITION TYPES", "DOMAINS"])
def test_paging_walks_the_whole_list_once(medical, kip, ok, target):
    whole = ok(medical, f"DESCRIBE {target}")
    seen, cursor = [], None
    for _ in range(50):
        command = f"DESCRIBE {target} LIMIT 2" + (f' CURSOR "{cursor}"' if cursor else "")
        response = kip(medical, command)
        page = response["result"]
        assert 1 <= len(page) <= 2
        seen.extend(page)
        cursor = response.get("next_cursor")
        if cursor is None:
            break
    assert seen == whole


def test_limit_larger_than_the_list_has_no_cursor(boot, kip):
    response = kip(boot, "DESCRIBE CONCEPT TYPES LIMIT 1000")
    assert "next_cursor" not in response and len(response["result"]) >= 5


def test_cursor_and_limit_as_parameters(boot, kip):
    first = kip(boot, "DESCRIBE CONCEPT TYPES LIMIT :n", n=2)
    second = kip(boot, "DESCRIBE CONCEPT TYPES LIMIT :n CURSOR :c", n=2,
                 c=first["next_cursor"])
    assert second["result"][0] > first["result"][-1]


def test_cursor_of_another_list_or_garbage_is_kip_1001(boot, kip):
    cursor = kip(boot, "DESCRIBE CONCEPT TYPES LIMIT 1")["next_cursor"]
    for command in (f'DESCRIBE PROPOSITION TYPES LIMIT 1 CURSOR "{cursor}"',
                    f'DESCRIBE DOMAINS CURSOR "{cursor}"',
                    'DESCRIBE CONCEPT TYPES CURSOR "not-a-cursor"',
                    'DESCRIBE CONCEPT TYPES CURSOR "eyJvIjo1LCJmIjoiYWJjIn0"'):   # a FIND one
        error = kip(boot, command)["error"]
        assert error["code"] == "KIP_1001", command


def test_cursor_survives_new_definitions(boot, kip):
    everything = kip(boot, "DESCRIBE CONCEPT TYPES")["result"]
    first = kip(boot, "DESCRIBE CONCEPT TYPES LIMIT 3")
    assert first["result"] == everything[:3] and first["result"][-1] > "Aardvark"
    r = boot.execute_kip({"command": 'UPSERT { CONCEPT ?t { {type: "$ConceptType", '
                                     'name: "Aardvark"} SET ATTRIBUTES {description: "x"} } }'})
    assert "result" in r, r
    rest = kip(boot, f'DESCRIBE CONCEPT TYPES CURSOR "{first["next_cursor"]}"')["result"]
    # keyset paging: a definition added before the cursor's position does not shift the page
    assert "Aardvark" not in rest and rest == everything[3:]


# --- DOMAINS --------------------------------------------------------------------------------

def test_domains_are_definitions_sorted_by_name(boot, ok):
    domains = ok(boot, "DESCRIBE DOMAINS")
    assert all(set(d) == DEF_KEYS and d["type"] == "Domain" for d in domains)
    names = [d["name"] for d in domains]
    assert "CoreSchema" in names and names == sorted(names)
    core = next(d for d in domains if d["name"] == "CoreSchema")
    assert core["id"].startswith("C:") and core["attributes"]["description"]


def test_domains_after_capsule(medical, ok):
    assert "Medical" in [d["name"] for d in ok(medical, "DESCRIBE DOMAINS")]


# --- CONCEPT TYPE "X" -----------------------------------------------------------------------

def test_concept_type_definition_and_usage(medical, ok):
    drug = ok(medical, 'DESCRIBE CONCEPT TYPE "Drug"')
    assert set(drug) == DEF_KEYS | {"usage"}
    assert drug["type"] == "$ConceptType" and drug["name"] == "Drug"
    assert drug["attributes"]["display_hint"] == "💊"
    usage = drug["usage"]
    assert usage["instance_count"] == 4 and usage["sample_size"] == 4
    assert usage["attribute_keys"][0] == "risk_level"            # on every instance
    assert set(usage["attribute_keys"]) == {"risk_level", "aliases", "controlled"}
    assert usage["outgoing_predicates"][0] == "treats"           # the most frequent
    assert set(usage["outgoing_predicates"]) == {"treats", "belongs_to_domain",
                                                 "has_side_effect"}
    assert usage["incoming_predicates"] == []
    symptom = ok(medical, 'DESCRIBE CONCEPT TYPE "Symptom"')["usage"]
    assert symptom["incoming_predicates"][0] == "treats"


def test_concept_type_on_bootstrap(boot, ok):
    person = ok(boot, 'DESCRIBE CONCEPT TYPE "Person"')
    assert person["type"] == "$ConceptType" and "instance_schema" in person["attributes"]
    assert person["usage"]["instance_count"] == 2                 # $self and $system
    assert "person_class" in person["usage"]["attribute_keys"]
    meta = ok(boot, 'DESCRIBE CONCEPT TYPE "$ConceptType"')
    assert meta["name"] == "$ConceptType"
    assert meta["usage"]["instance_count"] == len(ok(boot, "DESCRIBE CONCEPT TYPES"))


def test_concept_type_name_as_parameter(boot, ok):
    assert ok(boot, "DESCRIBE CONCEPT TYPE :t", t="Event")["name"] == "Event"


def test_concept_type_is_case_sensitive(medical, kip):
    error = kip(medical, 'DESCRIBE CONCEPT TYPE "drug"')["error"]
    assert error["code"] == "KIP_3002" and error["name"] == "NotFound"
    assert '"Drug"' in error["hint"] and "case-sensitive" in error["hint"]
    assert error["data"]["suggestions"] == ["Drug"]


def test_unknown_concept_type(boot, kip):
    error = kip(boot, 'DESCRIBE CONCEPT TYPE "Gizmo"')["error"]
    assert error["code"] == "KIP_3002" and "Gizmo" in error["message"]
    assert "DESCRIBE CONCEPT TYPES" in error["hint"]


def test_a_predicate_is_not_a_concept_type(boot, kip):
    error = kip(boot, 'DESCRIBE CONCEPT TYPE "belongs_to_domain"')["error"]
    assert error["code"] == "KIP_3002"
    assert 'DESCRIBE PROPOSITION TYPE "belongs_to_domain"' in error["hint"]


def test_usage_is_sampled_on_big_types(boot, ok):
    from nexus.ops.bulk_import import bulk_import
    from nexus.exec.meta import USAGE_SAMPLE
    boot.execute_kip({"command": 'UPSERT { CONCEPT ?t { {type: "$ConceptType", name: "Item"} '
                                 'SET ATTRIBUTES {description: "x"} } }'})
    count = USAGE_SAMPLE + 150
    bulk_import(boot, [{"type": "Item", "name": f"item {i}", "attributes": {"k": i}}
                       for i in range(count)])
    usage = ok(boot, 'DESCRIBE CONCEPT TYPE "Item"')["usage"]
    assert usage["instance_count"] == count and usage["sample_size"] == USAGE_SAMPLE


# --- PROPOSITION TYPE "x" -------------------------------------------------------------------

def test_proposition_type_definition_and_usage(medical, ok):
    treats = ok(medical, 'DESCRIBE PROPOSITION TYPE "treats"')
    assert set(treats) == DEF_KEYS | {"usage"} and treats["type"] == "$PropositionType"
    assert treats["attributes"]["subject_types"] == ["Drug"]
    assert treats["usage"] == {"link_count": 6, "sample_size": 6, "subject_types": ["Drug"],
                               "object_types": ["Symptom"]}


def test_proposition_type_on_bootstrap(boot, ok):
    bd = ok(boot, 'DESCRIBE PROPOSITION TYPE "belongs_to_domain"')
    assert bd["usage"]["object_types"] == ["Domain"]
    assert "$ConceptType" in bd["usage"]["subject_types"]
    assert bd["usage"]["link_count"] >= 5


def test_proposition_type_is_case_sensitive(boot, kip):
    error = kip(boot, 'DESCRIBE PROPOSITION TYPE "Belongs_To_Domain"')["error"]
    assert error["code"] == "KIP_3002" and '"belongs_to_domain"' in error["hint"]
    error = kip(boot, 'DESCRIBE PROPOSITION TYPE "Person"')["error"]
    assert 'DESCRIBE CONCEPT TYPE "Person"' in error["hint"]


def test_describe_runs_in_readonly_and_batches(medical):
    response = medical.execute_kip_readonly({"commands": [
        "DESCRIBE PRIMER", 'DESCRIBE CONCEPT TYPE "Nope"', "DESCRIBE DOMAINS"]})
    first, second, third = response["result"]
    assert "result" in first and second["error"]["code"] == "KIP_3002" and "result" in third


# --- an answer kept per snapshot ---------------------------------------------------------------

NEW_DRUG = ('UPSERT { CONCEPT ?d { {type: "Drug", name: :d} SET ATTRIBUTES {risk_level: 1, '
            'dosage: "5 mg"} } CONCEPT ?s { {type: "Symptom", name: "Headache"} } '
            'PROPOSITION ?t { (?d, "treats", ?s) } }')


def _write(nx, command, **parameters):
    r = nx.execute_kip({"command": command, "parameters": parameters})
    assert "error" not in r, r


def _usage_follows_writes(nx, ok):
    drug = ok(nx, 'DESCRIBE CONCEPT TYPE "Drug"')["usage"]
    treats = ok(nx, 'DESCRIBE PROPOSITION TYPE "treats"')["usage"]
    assert ok(nx, 'DESCRIBE CONCEPT TYPE "Drug"')["usage"] == drug      # asked again
    _write(nx, NEW_DRUG, d="Newdrug")
    after = ok(nx, 'DESCRIBE CONCEPT TYPE "Drug"')["usage"]
    assert after["instance_count"] == drug["instance_count"] + 1
    assert "dosage" in after["attribute_keys"] and "dosage" not in drug["attribute_keys"]
    assert ok(nx, 'DESCRIBE PROPOSITION TYPE "treats"')["usage"]["link_count"] == \
        treats["link_count"] + 1
    _write(nx, 'DELETE CONCEPT ?d DETACH WHERE { ?d {type: "Drug", name: "Newdrug"} }')
    assert ok(nx, 'DESCRIBE CONCEPT TYPE "Drug"')["usage"] == drug
    assert ok(nx, 'DESCRIBE PROPOSITION TYPE "treats"')["usage"] == treats


def test_usage_follows_writes(medical, ok):
    _usage_follows_writes(medical, ok)


def test_usage_follows_writes_on_lmdb_between_audit_flushes(tmp_path, ok):
    from nexus.ops.audit import AuditLog
    from nexus.ops.capsules import load_capsules
    with Nexus.open(str(tmp_path / "db"), wal=True) as nx:
        [report] = load_capsules(nx, [MEDICAL])
        assert "error" not in report, report
        log = AuditLog.for_engine(nx)
        log.record({"method": "execute_kip_readonly"})
        log.flush()                         # a journal-only commit: the same snapshot id
        _usage_follows_writes(nx, ok)
        log.record({"method": "execute_kip_readonly"})
        log.flush()
        assert ok(nx, 'DESCRIBE CONCEPT TYPE "Drug"')["usage"]["instance_count"] == 4


def test_a_described_type_is_the_callers_own(medical, ok):
    first = ok(medical, 'DESCRIBE CONCEPT TYPE "Drug"')
    first["usage"]["attribute_keys"].clear()
    first["attributes"]["display_hint"] = "changed"
    again = ok(medical, 'DESCRIBE CONCEPT TYPE "Drug"')
    assert again["usage"]["attribute_keys"] and again["attributes"]["display_hint"] == "💊"
