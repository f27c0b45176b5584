"""The sleep-cycle procedures of SystemInstructions-v1.0-RC11.md, run for real (issue 16, "Done
when"): every KIP block `$system` is told to run, as published (cut by tests/spec/rc11_blocks.py),
executed with parameters against a bootstrapped database seeded with a waking mind's memories —
not a dry run — and its effect checked.

Each test is one phase of the workflow, on its own copy of the seeded LMDB database. The block
table (`BLOCK`) names every block of the text by its line; a test fails if the text holds a
block no phase runs. The decay sweep over a predicate variable that Phase 7 mentions in prose
(no block of its own) runs too, as the spec's §4.3 writes it.
Skipped when ../shared is absent."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from nexus.api import Nexus

from .rc11_blocks import SHARED, blocks

TEXT = "SystemInstructions-v1.0-RC11.md"
pytestmark = pytest.mark.skipif(not (SHARED / TEXT).exists(), reason="../shared absent")
SOURCE = {b.ident.split(":")[1]: b.text for b in blocks()
          if b.ident.startswith("SystemInstructions:")}

# Every block of the text, by its first line, with what it is.
BLOCK = {
    "47": "1.1 pending SleepTasks", "54": "1.2 Unsorted backlog", "59": "1.3 orphans",
    "65": "1.4 stale Events", "72": "1.5 domain health",
    "84": "2.1 task in progress", "100": "2.2 consolidate Event -> Preference",
    "121": "2.3 task completed", "130": "2.3 task deleted (option B)",
    "136": "3 Unsorted items", "144": "3 reclassify", "156": "3 leave Unsorted",
    "166": "4A classify orphan", "175": "4B orphan to Unsorted",
    "194": "5 Event consolidated",
    "209": "6 duplicate candidates", "219": "6 MERGE",
    "235": "7 decay sweep",
    "273": "9 expired concepts", "282": "9 delete expired concept",
    "294": "9 expired links audit", "302": "9 delete audited link",
    "317": "10 read maintenance_log", "320": "10 write maintenance_log (EXPECT VERSION)",
    "360": "safety: archive", "369": "safety: leave other domains",
}

NOW = "2026-03-10T03:00:00Z"
SEED = """
UPSERT {
  CONCEPT ?topic { {type: "$ConceptType", name: "Topic"}
    SET ATTRIBUTES { description: "A subject of conversation.", display_hint: "🏷️" }
    SET PROPOSITIONS { ("belongs_to_domain", {type: "Domain", name: "CoreSchema"}) } }
} WITH METADATA { source: "seed", author: "$self" }

UPSERT {
  CONCEPT ?prefs { {type: "Domain", name: "UserPreferences"}
    SET ATTRIBUTES { description: "What users prefer." } }
  CONCEPT ?bev { {type: "Domain", name: "Beverages"} SET ATTRIBUTES { description: "Drinks." } }
  CONCEPT ?people { {type: "Domain", name: "People"} SET ATTRIBUTES { description: "People." } }
  CONCEPT ?alice { {type: "Person", name: "alice"} SET ATTRIBUTES { person_class: "Human" }
    SET PROPOSITIONS { ("belongs_to_domain", ?people) } }
  CONCEPT ?tea { {type: "Topic", name: "tea"} }
  CONCEPT ?matcha { {type: "Topic", name: "matcha"} }
  CONCEPT ?green { {type: "Topic", name: "green tea"}
    SET PROPOSITIONS { ("belongs_to_domain", {type: "Domain", name: "Unsorted"}) } }
  CONCEPT ?eg { {type: "Topic", name: "Earl Grey"} SET ATTRIBUTES { origin: "China" }
    SET PROPOSITIONS { ("belongs_to_domain", ?bev) } }
  CONCEPT ?egt { {type: "Topic", name: "Earl Grey tea"}
    SET ATTRIBUTES { origin: "England", flavour: "bergamot" }
    SET PROPOSITIONS { ("belongs_to_domain", {type: "Domain", name: "Unsorted"}) } }
  CONCEPT ?coffee { {type: "Topic", name: "coffee"}
    SET PROPOSITIONS { ("belongs_to_domain", ?bev) } }
  CONCEPT ?chat { {type: "Event", name: "chat-2026-01-01"}
    SET ATTRIBUTES { event_class: "Conversation", start_time: "2026-01-01T10:00:00Z",
                     content_summary: "alice said she likes green tea",
                     consolidation_status: "pending" }
    SET PROPOSITIONS { ("involves", ?alice), ("involves", {type: "Person", name: "$self"}),
                       ("mentions", ?green) } }
  CONCEPT ?recent { {type: "Event", name: "chat-2026-03-01"}
    SET ATTRIBUTES { event_class: "Conversation", start_time: "2026-03-01T10:00:00Z",
                     content_summary: "small talk", consolidation_status: "pending" }
    SET PROPOSITIONS { ("involves", ?alice) } }
  CONCEPT ?done { {type: "Event", name: "chat-2025-12-01"}
    SET ATTRIBUTES { event_class: "Conversation", start_time: "2025-12-01T10:00:00Z",
                     content_summary: "alice drinks coffee", consolidation_status: "completed" }
    SET PROPOSITIONS { ("consolidated_to", ?coffee),
                       ("mentions", ?coffee) WITH METADATA { expires_at: "2026-01-10T00:00:00Z" } }
  } WITH METADATA { expires_at: "2026-01-15T00:00:00Z" }
} WITH METADATA { source: "waking", author: "$self", confidence: 0.9 }

UPSERT {
  CONCEPT ?t1 { {type: "SleepTask", name: "SleepTask:2026-01-02:consolidate_to_semantic:chat-2026-01-01"}
    SET ATTRIBUTES { target_type: "Event", target_name: "chat-2026-01-01",
                     requested_action: "consolidate_to_semantic", reason: "a stated preference",
                     status: "pending", priority: 3 }
    SET PROPOSITIONS { ("assigned_to", {type: "Person", name: "$system"}),
                       ("belongs_to_domain", {type: "Domain", name: "System"}) } }
  CONCEPT ?t2 { {type: "SleepTask", name: "SleepTask:2026-01-02:review:matcha"}
    SET ATTRIBUTES { target_type: "Topic", target_name: "matcha", requested_action: "review",
                     reason: "unclear", status: "pending", priority: 1 }
    SET PROPOSITIONS { ("assigned_to", {type: "Person", name: "$system"}),
                       ("belongs_to_domain", {type: "Domain", name: "System"}) } }
  CONCEPT ?t3 { {type: "SleepTask", name: "SleepTask:2026-01-01:archive:coffee"}
    SET ATTRIBUTES { target_type: "Topic", target_name: "coffee", requested_action: "archive",
                     reason: "old", status: "completed", priority: 2 }
    SET PROPOSITIONS { ("assigned_to", {type: "Person", name: "$system"}),
                       ("belongs_to_domain", {type: "Domain", name: "System"}) } }
} WITH METADATA { source: "waking", author: "$self" }

UPSERT {
  CONCEPT ?alice { {type: "Person", name: "alice"} }
  CONCEPT ?p1 { {type: "Preference", name: "alice likes coffee"}
    SET ATTRIBUTES { evidence_count: 1 }
    SET PROPOSITIONS { ("belongs_to_domain", {type: "Domain", name: "UserPreferences"}) } }
  CONCEPT ?p2 { {type: "Preference", name: "alice likes oolong"}
    SET PROPOSITIONS { ("belongs_to_domain", {type: "Domain", name: "UserPreferences"}) } }
  CONCEPT ?p3 { {type: "Preference", name: "alice likes sugar"}
    SET PROPOSITIONS { ("belongs_to_domain", {type: "Domain", name: "UserPreferences"}) } }
  CONCEPT ?p4 { {type: "Preference", name: "alice likes milk"}
    SET PROPOSITIONS { ("belongs_to_domain", {type: "Domain", name: "UserPreferences"}) } }
  CONCEPT ?p5 { {type: "Preference", name: "alice likes lemon"}
    SET PROPOSITIONS { ("belongs_to_domain", {type: "Domain", name: "UserPreferences"}) } }
  PROPOSITION ?l1 { (?alice, "prefers", ?p1) } WITH METADATA { memory_strength: 0.8 }
  PROPOSITION ?l2 { (?alice, "prefers", ?p2) }
    WITH METADATA { memory_strength: 0.6, observed_at: "2026-03-05T00:00:00Z" }
  PROPOSITION ?l3 { (?alice, "prefers", ?p3) } WITH METADATA { memory_strength: 0.04 }
  PROPOSITION ?l4 { (?alice, "prefers", ?p4) }
    WITH METADATA { memory_strength: 0.5, superseded: true }
  PROPOSITION ?l5 { (?alice, "prefers", ?p5) }
} WITH METADATA { source: "waking", author: "$self", confidence: 0.9 }
"""


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sleep") / "seeded"
    with Nexus.open(str(path)) as nx:
        response = nx.execute_kip({"command": SEED})
        assert "error" not in response, response
    return path


@pytest.fixture
def nx(seeded, tmp_path):
    copy = tmp_path / "db"
    shutil.copytree(seeded, copy)
    with Nexus.open(str(copy)) as opened:
        yield opened


def run(nx: Nexus, line: str, **parameters: Any) -> Any:
    """Run the block of the text that starts at `line`, for real; return its result."""
    response = nx.execute_kip({"command": SOURCE[line], "parameters": parameters})
    assert "error" not in response, (BLOCK[line], response)
    return response["result"]


def q(nx: Nexus, command: str, **parameters: Any) -> Any:
    response = nx.execute_kip({"command": command, "parameters": parameters})
    assert "error" not in response, response
    return response["result"]


def node(nx: Nexus, type_: str, name: str) -> dict | None:
    """The concept, or None when it does not exist (a literal name that matches nothing is
    KIP_3002)."""
    response = nx.execute_kip({"command": "FIND(?n) WHERE { ?n {type: :t, name: :n} }",
                               "parameters": {"t": type_, "n": name}})
    if response.get("error", {}).get("code") == "KIP_3002":
        return None
    assert "error" not in response, response
    return response["result"][0]


def domains(nx: Nexus, type_: str, name: str) -> set[str]:
    return set(q(nx, 'FIND(?d.name) WHERE { ?x {type: :t, name: :n} '
                     '(?x, "belongs_to_domain", ?d) }', t=type_, n=name))


def test_every_block_of_the_text_is_run_by_a_phase():
    assert set(SOURCE) == set(BLOCK)


def test_phase_1_assessment(nx):
    tasks = run(nx, "47")
    assert [t["name"] for t in tasks] == [       # pending, for $system, by priority DESC
        "SleepTask:2026-01-02:consolidate_to_semantic:chat-2026-01-01",
        "SleepTask:2026-01-02:review:matcha"]
    assert run(nx, "54") == 2                    # green tea, Earl Grey tea
    types, names, created = run(nx, "59", type="Topic")
    assert sorted(names) == ["matcha", "tea"] and set(types) == {"Topic"}
    assert run(nx, "65", cutoff_date="2026-02-01T00:00:00Z") == [
        ["chat-2026-01-01"], ["2026-01-01T10:00:00Z"], ["alice said she likes green tea"]]
    names, counts = run(nx, "72")
    health = dict(zip(names, counts))
    assert counts == sorted(counts)
    assert {k: health[k] for k in ("Archived", "People", "Beverages", "Unsorted", "System",
                                   "UserPreferences")} == {
        "Archived": 0, "People": 1, "Beverages": 2, "Unsorted": 2, "System": 3,
        "UserPreferences": 5}


def test_phase_2_process_sleep_tasks(nx):
    task = "SleepTask:2026-01-02:consolidate_to_semantic:chat-2026-01-01"
    run(nx, "84", task_name=task, timestamp=NOW)
    assert node(nx, "SleepTask", task)["attributes"]["status"] == "in_progress"
    run(nx, "100", preference_name="alice likes green tea", event_name="chat-2026-01-01",
        extracted_preference="Alice prefers green tea to coffee.", holder_name="alice")
    preference = node(nx, "Preference", "alice likes green tea")
    assert preference["attributes"]["description"] == "Alice prefers green tea to coffee."
    assert domains(nx, "Preference", "alice likes green tea") == {"UserPreferences"}
    assert q(nx, 'FIND(?e.name) WHERE { ?p {type: "Preference", name: "alice likes green tea"} '
                 '(?p, "derived_from", ?e) }') == ["chat-2026-01-01"]
    link = q(nx, 'FIND(?l) WHERE { ?l ({type: "Person", name: "alice"}, "prefers", '
                 '{type: "Preference", name: "alice likes green tea"}) }')[0]
    assert (link["metadata"]["confidence"], link["metadata"]["author"]) == (0.8, "$system")
    run(nx, "121", task_name=task, timestamp=NOW)
    done = node(nx, "SleepTask", task)["attributes"]
    assert (done["status"], done["result"], done["completed_at"]) == ("completed", "success", NOW)
    assert run(nx, "130", task_name="SleepTask:2026-01-02:review:matcha") == {
        "deleted_concepts": 1, "deleted_propositions": 2}       # assigned_to, belongs_to_domain
    assert run(nx, "47") == []                                  # nothing pending any more


def test_phase_3_unsorted_reclassification(nx):
    assert sorted(n["name"] for n in run(nx, "136")) == ["Earl Grey tea", "green tea"]
    run(nx, "144", domain_name="Tea", domain_desc="Teas and tea culture.", item_type="Topic",
        item_name="green tea")
    assert node(nx, "Domain", "Tea")["attributes"]["description"] == "Teas and tea culture."
    assert run(nx, "156", item_type="Topic", item_name="green tea") == {
        "deleted_propositions": 1}
    assert domains(nx, "Topic", "green tea") == {"Tea"}
    assert [n["name"] for n in run(nx, "136")] == ["Earl Grey tea"]


def test_phase_4_orphan_resolution(nx):
    run(nx, "166", type="Topic", name="tea", target_domain="Beverages")
    run(nx, "175", type="Topic", name="matcha")
    assert domains(nx, "Topic", "tea") == {"Beverages"}
    assert domains(nx, "Topic", "matcha") == {"Unsorted"}
    assert run(nx, "59", type="Topic") == [[], [], []]          # no orphan left


def test_phase_5_stale_event_consolidation(nx):
    run(nx, "194", event_name="chat-2026-01-01", semantic_type="Topic",
        semantic_name="green tea", timestamp=NOW)
    event = node(nx, "Event", "chat-2026-01-01")["attributes"]
    assert (event["consolidation_status"], event["consolidated_at"]) == ("completed", NOW)
    assert run(nx, "65", cutoff_date="2026-02-01T00:00:00Z") == [[], [], []]


def test_phase_6_duplicate_merge(nx):
    a, b = run(nx, "209", type="Topic")
    assert set(zip(a, b)) == {("Earl Grey tea", "Earl Grey"), ("Earl Grey tea", "tea"),
                              ("green tea", "tea")}
    survivor_id = node(nx, "Topic", "Earl Grey")["id"]
    result = run(nx, "219", type="Topic", duplicate_name="Earl Grey tea",
                 survivor_name="Earl Grey")
    assert result["merged"] is True and result["links_repointed"] == 1
    assert node(nx, "Topic", "Earl Grey tea") is None
    survivor = node(nx, "Topic", "Earl Grey")
    assert survivor["id"] == survivor_id
    assert survivor["attributes"]["origin"] == "China"          # never overwritten
    assert survivor["attributes"]["flavour"] == "bergamot"      # filled
    assert "Earl Grey tea" in survivor["attributes"]["aliases"]
    assert survivor["metadata"]["_merged_from"]
    assert domains(nx, "Topic", "Earl Grey") == {"Beverages", "Unsorted"}


def strengths(nx: Nexus) -> dict[str, Any]:
    names, strength, applied = q(
        nx, 'FIND(?p.name, ?l.metadata.memory_strength, ?l.metadata.strength_decay_applied_at) '
            'WHERE { ?l ({type: "Person", name: "alice"}, "prefers", ?p) }')
    return {n: (s, a) for n, s, a in zip(names, strength, applied)}


def test_phase_7_memory_strength_decay(nx):
    parameters = dict(decay_factor=0.95, timestamp=NOW, cycle_start=NOW,
                      stale_cutoff="2026-02-24T03:00:00Z")
    before = strengths(nx)
    assert run(nx, "235", **parameters) == {"updated": 2, "matched": 2}
    after = strengths(nx)
    assert after["alice likes coffee"][0] == pytest.approx(0.8 * 0.95)
    assert after["alice likes lemon"][0] == pytest.approx(0.7 * 0.95)     # COALESCE default
    assert after["alice likes coffee"][1] == after["alice likes lemon"][1] == NOW
    for exempt in ("alice likes oolong", "alice likes sugar", "alice likes milk"):
        assert after[exempt] == before[exempt], exempt       # reinforced, floored, superseded
    assert run(nx, "235", **parameters) == {"updated": 0, "matched": 0}   # once per cycle
    assert strengths(nx) == after


def test_phase_7_decay_over_a_predicate_variable(nx):
    result = q(nx, """
        UPDATE ?link
        SET METADATA { memory_strength: CLAMP(MUL(COALESCE(?link.metadata.memory_strength, 0.7),
                                                  :decay_factor), 0.0, 1.0),
                       strength_decay_applied_at: :timestamp }
        WHERE {
          ?link (?s, ?p, ?o)
          FILTER(?p != "belongs_to_domain")
          FILTER(IS_NULL(?link.metadata.superseded) || ?link.metadata.superseded != true)
          FILTER(IS_NULL(?link.metadata.memory_strength) || ?link.metadata.memory_strength > 0.05)
          FILTER(IS_NULL(?link.metadata.strength_decay_applied_at)
                 || ?link.metadata.strength_decay_applied_at < :cycle_start)
          FILTER(IS_NULL(?link.metadata.observed_at) || ?link.metadata.observed_at < :stale_cutoff)
        }
        LIMIT 500""", decay_factor=0.95, timestamp=NOW, cycle_start=NOW,
               stale_cutoff="2026-02-24T03:00:00Z")
    assert result["updated"] == result["matched"] > 2
    assert strengths(nx)["alice likes coffee"][0] == pytest.approx(0.8 * 0.95)


def test_phase_9_physical_cleanup(nx):
    assert run(nx, "273", type="Event", now=NOW) == [
        ["Event"], ["chat-2025-12-01"], ["2026-01-15T00:00:00Z"], ["completed"]]
    assert run(nx, "273", type="Topic", now=NOW) == [[], [], [], []]
    audit = run(nx, "294", predicate="mentions", now=NOW)
    assert audit == [["Event"], ["chat-2025-12-01"], ["Topic"], ["coffee"],
                     ["2026-01-10T00:00:00Z"]]
    assert run(nx, "294", predicate="involves", now=NOW) == [[], [], [], [], []]
    assert run(nx, "302", predicate="mentions", now=NOW, s_type="Event",
               s_name="chat-2025-12-01", o_type="Topic", o_name="coffee") == {
        "deleted_propositions": 1}
    assert run(nx, "282", type="Event", name="chat-2025-12-01", now=NOW) == {
        "deleted_concepts": 1, "deleted_propositions": 1}       # its consolidated_to link
    assert node(nx, "Event", "chat-2025-12-01") is None
    assert node(nx, "Topic", "coffee") is not None
    assert run(nx, "282", type="Event", name="chat-2026-01-01", now=NOW) == {
        "deleted_concepts": 0, "deleted_propositions": 0}       # not expired: kept


def test_phase_10_finalization(nx):
    log, version = run(nx, "317")
    assert log == [[]] and len(version) == 1
    entry = dict(current_timestamp=NOW, trigger_type="scheduled",
                 summary_of_actions="consolidated 1 event", count=7, issues_list=["none"])
    run(nx, "320", v=version[0], **entry)
    system = node(nx, "Person", "$system")
    assert system["attributes"]["last_sleep_cycle"] == NOW
    assert system["attributes"]["maintenance_log"] == [{
        "timestamp": NOW, "trigger": "scheduled", "actions_taken": "consolidated 1 event",
        "items_processed": 7, "issues_found": ["none"]}]
    assert system["metadata"]["_version"] == version[0] + 1
    assert system["attributes"]["core_directives"]              # untouched
    stale = nx.execute_kip({"command": SOURCE["320"], "parameters": {"v": version[0], **entry}})
    assert stale["error"]["code"] == "KIP_3005"                 # re-read and retry
    assert stale["error"]["data"]["current"] == version[0] + 1


def test_safety_archive_pattern(nx):
    run(nx, "360", type="Topic", name="coffee", timestamp=NOW)
    assert node(nx, "Topic", "coffee")["attributes"]["status"] == "archived"
    assert domains(nx, "Topic", "coffee") == {"Beverages", "Archived"}
    assert run(nx, "369", type="Topic", name="coffee") == {"deleted_propositions": 1}
    assert domains(nx, "Topic", "coffee") == {"Archived"}
