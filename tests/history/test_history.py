"""The version history extension (docs/history.md): FIND … AS OF, DESCRIBE HISTORY, REVERT,
retention and the per-database switch — on the memory and LMDB stores."""
from __future__ import annotations

import time

import pytest

from nexus import Nexus

DRUGS = '''UPSERT {
  CONCEPT ?h { {type: "Symptom", name: "Headache"} }
  CONCEPT ?a { {type: "Drug", name: "Aspirin"} SET ATTRIBUTES { risk: 2, tags: ["nsaid"] }
               SET PROPOSITIONS { ("treats", ?h) } }
}'''
SCHEMA = '''UPSERT {
  CONCEPT ?d { {type: "$ConceptType", name: "Drug"} SET ATTRIBUTES { description: "a drug" } }
  CONCEPT ?s { {type: "$ConceptType", name: "Symptom"} SET ATTRIBUTES { description: "s" } }
  CONCEPT ?t { {type: "$PropositionType", name: "treats"} SET ATTRIBUTES { description: "t" } }
}'''


@pytest.fixture(params=["memory", "lmdb"])
def nx(request, tmp_path):
    db = Nexus.open(None if request.param == "memory" else str(tmp_path / "db"))
    ok(db, SCHEMA)
    yield db
    db.close()


def ok(nx, command, **params):
    response = nx.execute_kip({"command": command, "parameters": params})
    assert "result" in response, response
    return response["result"]


def err(nx, command, **params):
    response = nx.execute_kip({"command": command, "parameters": params})
    assert "error" in response, response
    return response["error"]


def last_seq(nx) -> int:
    return ok(nx, "DESCRIBE HISTORY LIMIT 1")[0]["seq"]


def aspirin(nx, field="attributes", suffix=""):
    return ok(nx, f'FIND(?a.{field}) WHERE {{ ?a {{type: "Drug", name: "Aspirin"}} }}{suffix}')


def test_as_of_reads_the_graph_as_it_was(nx):
    ok(nx, DRUGS)
    created = last_seq(nx)
    stamp = ok(nx, 'FIND(?a.metadata._updated_at) WHERE { ?a {type: "Drug", name: "Aspirin"} }')[0]
    time.sleep(0.005)
    ok(nx, 'UPSERT { CONCEPT ?a { {type: "Drug", name: "Aspirin"} SET ATTRIBUTES { risk: 3 } } }')
    ok(nx, 'DELETE PROPOSITIONS ?l WHERE { ?l ({type: "Drug", name: "Aspirin"}, "treats", ?s) }')
    ok(nx, 'DELETE ATTRIBUTES {"tags"} FROM ?a WHERE { ?a {type: "Drug", name: "Aspirin"} }')
    assert aspirin(nx) == [{"risk": 3}]
    # by time and by log position, the attribute, the removed key and the deleted link
    assert aspirin(nx, suffix=" AS OF :t".replace(":t", f'"{stamp}"')) == [
        {"risk": 2, "tags": ["nsaid"]}]
    assert aspirin(nx, suffix=f" AS OF VERSION {created}") == [{"risk": 2, "tags": ["nsaid"]}]
    treats = 'FIND(?s.name) WHERE { ({type: "Drug", name: "Aspirin"}, "treats", ?s) }'
    assert ok(nx, treats) == []
    assert ok(nx, treats + f" AS OF VERSION {created}") == ["Headache"]
    # before the concept existed: a mandatory clause that matches nothing
    before = err(nx, 'FIND(?a) WHERE { ?a {type: "Drug", name: "Aspirin"} } AS OF VERSION :v',
                 v=created - 1)
    assert before["code"] == "KIP_3002"
    assert ok(nx, 'FIND(COUNT(?d)) WHERE { ?d {type: "Drug"} } AS OF VERSION :v',
              v=created - 1) == 0
    # the current graph is untouched by reading the past
    assert aspirin(nx) == [{"risk": 3}]


def test_as_of_errors_name_the_problem(nx):
    ok(nx, DRUGS)
    bad = err(nx, 'FIND(?a) WHERE { ?a {type: "Drug"} } AS OF "last tuesday"')
    assert bad["code"] == "KIP_1001" and "ISO 8601" in bad["message"]
    beyond = err(nx, 'FIND(?a) WHERE { ?a {type: "Drug"} } AS OF VERSION 99999')
    assert beyond["code"] == "KIP_3002" and "latest is" in beyond["message"]
    assert err(nx, 'FIND(?a) WHERE { ?a {type: "Drug"} } AS OF VERSION 0')["code"] == "KIP_1001"


def test_describe_history_of_an_element_newest_first_with_what_changed(nx):
    ok(nx, DRUGS)
    ok(nx, 'UPSERT { CONCEPT ?a { {type: "Drug", name: "Aspirin"} SET ATTRIBUTES { risk: 3, '
           'dose: "81mg" } } }')
    ok(nx, 'DELETE ATTRIBUTES {"tags"} FROM ?a WHERE { ?a {type: "Drug", name: "Aspirin"} }')
    cid = ok(nx, 'FIND(?a) WHERE { ?a {type: "Drug", name: "Aspirin"} }')[0]["id"]
    history = ok(nx, "DESCRIBE HISTORY {id: :id}", id=cid)
    assert history["id"] == cid
    versions = history["versions"]
    assert [v["version"] for v in versions] == [3, 2, 1]
    assert [v["kind"] for v in versions] == ["DELETE", "UPSERT", "UPSERT"]
    assert versions[0]["change"] == {"attributes": {"removed": ["tags"]}}
    assert versions[1]["change"] == {"attributes": {"added": {"dose": "81mg"},
                                                    "changed": {"risk": [2, 3]}}}
    assert versions[2]["change"]["created"] is True
    assert versions[2]["text"].startswith("UPSERT")
    # paged
    first = nx.execute_kip({"command": "DESCRIBE HISTORY {id: :id} LIMIT 2",
                            "parameters": {"id": cid}})
    assert [v["version"] for v in first["result"]["versions"]] == [3, 2]
    rest = ok(nx, "DESCRIBE HISTORY {id: :id} LIMIT 2 CURSOR :c", id=cid,
              c=first["next_cursor"])
    assert [v["version"] for v in rest["versions"]] == [1]
    # a link's history, and the log itself
    link = ok(nx, 'FIND(?l) WHERE { ?l ({type: "Drug", name: "Aspirin"}, "treats", ?s) }')[0]
    assert ok(nx, "DESCRIBE HISTORY (id: :id)", id=link["id"])["versions"][0]["change"] == {
        "created": True}
    log = ok(nx, "DESCRIBE HISTORY LIMIT 2")
    assert [e["kind"] for e in log] == ["DELETE", "UPSERT"] and log[0]["seq"] > log[1]["seq"]
    assert err(nx, 'DESCRIBE HISTORY {id: "P:3:treats"}')["code"] == "KIP_1001"


def test_revert_command_restores_what_it_changed_and_records_the_reason(nx):
    ok(nx, DRUGS)
    ok(nx, 'UPSERT { CONCEPT ?a { {type: "Drug", name: "Aspirin"} SET ATTRIBUTES { risk: 9 } } }')
    bad = last_seq(nx)
    result = ok(nx, 'REVERT COMMAND :s REASON "risk was a typo"', s=bad)
    assert result == {"reverted": bad, "restored": 1, "removed": 0}
    assert aspirin(nx) == [{"risk": 2, "tags": ["nsaid"]}]
    assert aspirin(nx, "metadata._version") == [3]          # versions move forward
    entry = ok(nx, "DESCRIBE HISTORY LIMIT 1")[0]
    assert entry["kind"] == "REVERT" and entry["reason"] == "risk was a typo"
    assert entry["reverts"] == bad


def test_revert_of_a_creation_removes_it_with_its_links(nx):
    ok(nx, DRUGS)
    seq = last_seq(nx)
    assert ok(nx, 'REVERT COMMAND :s REASON "wrong import"', s=seq)["removed"] == 3
    assert ok(nx, 'FIND(COUNT(?d)) WHERE { ?d {type: "Drug"} }') == 0
    assert nx.check()["ok"]


def test_revert_refuses_when_later_commands_changed_the_element_unless_force(nx):
    ok(nx, DRUGS)
    ok(nx, 'UPSERT { CONCEPT ?a { {type: "Drug", name: "Aspirin"} SET ATTRIBUTES { risk: 9 } } }')
    bad = last_seq(nx)
    ok(nx, 'UPSERT { CONCEPT ?a { {type: "Drug", name: "Aspirin"} SET ATTRIBUTES { dose: 1 } } }')
    conflict = err(nx, 'REVERT COMMAND :s REASON "typo"', s=bad)
    assert conflict["code"] == "KIP_3005" and conflict["data"]["changed_by"] == bad + 1
    assert "FORCE" in conflict["hint"]
    assert aspirin(nx) == [{"risk": 9, "tags": ["nsaid"], "dose": 1}]       # nothing changed
    ok(nx, 'REVERT COMMAND :s REASON "typo" FORCE', s=bad)
    # only what the reverted command changed comes back; the later key stays
    assert aspirin(nx) == [{"risk": 2, "tags": ["nsaid"], "dose": 1}]


def test_revert_an_element_to_a_version(nx):
    ok(nx, DRUGS)
    for risk in (3, 4, 5):
        ok(nx, f'UPSERT {{ CONCEPT ?a {{ {{type: "Drug", name: "Aspirin"}} SET ATTRIBUTES '
               f'{{ risk: {risk} }} }} }}')
    cid = ok(nx, 'FIND(?a) WHERE { ?a {type: "Drug", name: "Aspirin"} }')[0]["id"]
    result = ok(nx, 'REVERT {id: :id} TO VERSION 2 REASON "back to 3"', id=cid)
    assert result["reverted"] == cid and result["version"] == 5
    assert aspirin(nx) == [{"risk": 3, "tags": ["nsaid"]}]
    missing = err(nx, 'REVERT {id: :id} TO VERSION 40 REASON "x"', id=cid)
    assert missing["code"] == "KIP_3002"


def test_revert_of_protected_elements_is_refused(nx):
    first = ok(nx, "DESCRIBE HISTORY LIMIT 200")[-1]["seq"]        # the bootstrap's genesis
    refused = err(nx, 'REVERT COMMAND :s REASON "x" FORCE', s=first)
    assert refused["code"] == "KIP_3004"
    assert nx.check()["ok"]


def test_reason_is_mandatory_and_revert_is_a_write():
    with Nexus.open(None) as nx:
        ok(nx, SCHEMA)
        seq = last_seq(nx)
        assert err(nx, 'REVERT COMMAND :s REASON ""', s=seq)["code"] == "KIP_1001"
        assert nx.execute_kip({"command": "REVERT COMMAND 1"})["error"]["code"] == "KIP_1001"
        readonly = nx.execute_kip_readonly({"command": f'REVERT COMMAND {seq} REASON "x"'})
        assert readonly["error"]["code"] == "KIP_1001"
        assert "result" in nx.execute_kip_readonly({"command": "DESCRIBE HISTORY LIMIT 1"})
        assert "result" in nx.execute_kip_readonly(
            {"command": f'FIND(?t.name) WHERE {{ ?t {{type: "$ConceptType"}} }} '
                        f'AS OF VERSION {seq}'})
        dry = nx.execute_kip({"command": f'REVERT COMMAND {seq} REASON "x"', "dry_run": True})
        assert dry["result"]["removed"] == 0 and last_seq(nx) == seq


def test_history_can_be_turned_off_per_database(tmp_path):
    path = str(tmp_path / "db")
    with Nexus.open(path) as nx:
        ok(nx, SCHEMA)
        nx.set_history(False)
        before = nx.execute_kip({"command": "DESCRIBE HISTORY"})
        assert before["error"]["code"] == "KIP_1001"
    with Nexus.open(path) as nx:                          # the database remembers
        assert not nx.history_enabled
        ok(nx, DRUGS)
        assert err(nx, 'FIND(?a) WHERE { ?a {type: "Drug"} } AS OF VERSION 1')["code"] == \
            "KIP_1001"
        primer = ok(nx, "DESCRIBE PRIMER")
        assert primer["extensions"]["history"]["enabled"] is False
        nx.set_history(True)
        ok(nx, 'UPSERT { CONCEPT ?a { {type: "Drug", name: "Aspirin"} SET ATTRIBUTES { risk: 7 } } }')
        assert ok(nx, "DESCRIBE HISTORY LIMIT 1")[0]["kind"] == "UPSERT"


def test_the_log_survives_reopening(tmp_path):
    path = str(tmp_path / "db")
    with Nexus.open(path) as nx:
        ok(nx, SCHEMA)
        ok(nx, DRUGS)
        seq = last_seq(nx)
        ok(nx, 'UPSERT { CONCEPT ?a { {type: "Drug", name: "Aspirin"} SET ATTRIBUTES { risk: 8 } } }')
    with Nexus.open(path) as nx:
        assert aspirin(nx, suffix=f" AS OF VERSION {seq}") == [{"risk": 2, "tags": ["nsaid"]}]
        assert nx.check()["history"]["ok"]


def test_compact_drops_old_records_and_says_so(nx):
    ok(nx, DRUGS)
    seq = last_seq(nx)
    time.sleep(0.01)
    report = nx.compact_history(0.005)
    assert report["dropped"] >= seq and report["kept"] == 0
    # the state after the last dropped record is still known; the one before it is not
    assert "result" in nx.execute_kip({"command": f'FIND(?a) WHERE {{ ?a {{type: "Drug"}} }} '
                                                  f'AS OF VERSION {seq}'})
    gone = err(nx, 'FIND(?a) WHERE { ?a {type: "Drug"} } AS OF VERSION :s', s=seq - 1)
    assert gone["code"] == "KIP_3002" and "retention" in gone["message"]
    ok(nx, 'UPSERT { CONCEPT ?a { {type: "Drug", name: "Aspirin"} SET ATTRIBUTES { risk: 8 } } }')
    assert aspirin(nx, suffix=f" AS OF VERSION {seq}") == [{"risk": 2, "tags": ["nsaid"]}]
    assert aspirin(nx, suffix=f" AS OF VERSION {seq + 1}") == [{"risk": 8, "tags": ["nsaid"]}]
    assert nx.check()["ok"]


def test_a_retention_policy_is_kept_by_the_database_and_applied_by_writes(tmp_path):
    path = str(tmp_path / "db")
    with Nexus.open(path) as nx:
        ok(nx, SCHEMA)
        ok(nx, DRUGS)
        old = last_seq(nx)
        time.sleep(0.05)
        nx.set_history_retention(0.04)                # applied at once: everything is older
        assert nx.history_retention == 0.04
        assert ok(nx, "DESCRIBE HISTORY") == []
    with Nexus.open(path) as nx:                      # the policy is the database's
        assert nx.history_retention == 0.04
        ok(nx, 'UPSERT { CONCEPT ?a { {type: "Drug", name: "Aspirin"} SET ATTRIBUTES { risk: 5 } } }')
        time.sleep(0.05)
    with Nexus.open(path) as nx:                      # a new process's first write prunes
        ok(nx, 'UPSERT { CONCEPT ?a { {type: "Drug", name: "Aspirin"} SET ATTRIBUTES { risk: 6 } } }')
        log = ok(nx, "DESCRIBE HISTORY")
        assert [e["seq"] for e in log] == [old + 2]
        nx.set_history_retention(None)
        assert nx.history_retention is None


MERGE_PAIR = '''UPSERT {
  CONCEPT ?h { {type: "Symptom", name: "Headache"} }
  CONCEPT ?f { {type: "Symptom", name: "Fever"} }
  CONCEPT ?p { {type: "Symptom", name: "Pain"} }
  CONCEPT ?a { {type: "Drug", name: "Aspirin"} SET PROPOSITIONS { ("treats", ?h) } }
  CONCEPT ?s { {type: "Drug", name: "ASA"} SET ATTRIBUTES { dose: 1 }
               SET PROPOSITIONS { ("treats", ?h) ("treats", ?f) ("treats", ?p) } }
}'''
LINKS = 'FIND(?l, ?d.name, ?s.name) WHERE { ?l (?d, "treats", ?s) ?d {type: "Drug"} }'


def links_now(nx, suffix=""):
    links, drugs, symptoms = ok(nx, LINKS + suffix)
    return sorted((link["id"], d, s) for link, d, s in zip(links, drugs, symptoms))


def link_versions(nx):
    return versions_of(ok(nx, 'FIND(?l, ?l.metadata._version) WHERE { ?l (?d, "treats", ?s) }'))


def versions_of(result):
    links, versions = result
    return sorted((link["id"], v) for link, v in zip(links, versions))


def test_merge_is_in_the_log_time_travel_sees_the_old_ends_and_revert_undoes_it(nx):
    ok(nx, MERGE_PAIR)
    time.sleep(0.005)           # the merge's `_updated_at` differs from the links' creation
    before, versions = links_now(nx), link_versions(nx)
    created = last_seq(nx)
    merged = ok(nx, 'MERGE CONCEPT ?s INTO ?t WHERE { ?s {type: "Drug", name: "ASA"} '
                    '?t {type: "Drug", name: "Aspirin"} }')
    assert merged["links_repointed"] == 2 and merged["links_deduplicated"] == 1
    merge = last_seq(nx)
    after = links_now(nx)
    assert {(d, s) for _, d, s in after} == {("Aspirin", "Headache"), ("Aspirin", "Fever"),
                                             ("Aspirin", "Pain")}
    moved = [n for n, d, s in before if d == "ASA" and (n, "Aspirin", s) in after]
    assert len(moved) == 2
    # each moved link: its history has the merge, its version one more
    now = dict(link_versions(nx))
    for n in moved:
        assert now[n] == dict(versions)[n] + 1
        log = ok(nx, "DESCRIBE HISTORY (id: :id)", id=n)["versions"]
        assert log[0]["version"] == now[n] and log[0]["text"].startswith("MERGE")
    assert nx.check()["ok"]
    # time travel: before the merge, the links had their old ends (and versions)
    assert links_now(nx, f" AS OF VERSION {created}") == before
    assert versions_of(ok(nx, 'FIND(?l, ?l.metadata._version) WHERE { ?l (?d, "treats", ?s) } '
                              f'AS OF VERSION {created}')) == versions
    # REVERT of the merge: the source back, the links on it again, the duplicate restored
    result = ok(nx, 'REVERT COMMAND :s REASON "not the same drug"', s=merge)
    assert result["reverted"] == merge
    assert links_now(nx) == before
    assert ok(nx, 'FIND(?s.attributes) WHERE { ?s {type: "Drug", name: "ASA"} }') == [
        {"dose": 1}]
    assert nx.check()["ok"]
    assert links_now(nx, f" AS OF VERSION {merge}") == after


def test_a_link_merge_moves_twice_is_bumped_once_and_reverts_to_its_exact_metadata(nx):
    # x leaves the source and points at t1; t1 collapses into t2, so x moves again (onto
    # t2) within the one MERGE: one `_version` step, and its whole metadata back on REVERT.
    ok(nx, 'UPSERT { CONCEPT ?p { {type: "$PropositionType", name: "about"} '
           'SET ATTRIBUTES { description: "a note on a claim" } } }')
    ok(nx, '''UPSERT {
      CONCEPT ?h { {type: "Symptom", name: "Headache"} }
      CONCEPT ?a { {type: "Drug", name: "Aspirin"} SET PROPOSITIONS { ("treats", ?h) } }
      CONCEPT ?s { {type: "Drug", name: "ASA"} }
      PROPOSITION ?t1 { (?s, "treats", ?h) }
      PROPOSITION ?x { (?s, "about", ?t1) SET ATTRIBUTES { note: "n" } }
    } WITH METADATA { source: "a test" }''')
    time.sleep(0.005)
    x_query = 'FIND(?x) WHERE { ?x (?d, "about", ?l) }'
    [x_before] = ok(nx, x_query)
    created = last_seq(nx)
    merged = ok(nx, 'MERGE CONCEPT ?s INTO ?t WHERE { ?s {type: "Drug", name: "ASA"} '
                    '?t {type: "Drug", name: "Aspirin"} }')
    assert merged["links_repointed"] == 1 and merged["links_deduplicated"] == 1
    merge = last_seq(nx)
    [x_after] = ok(nx, x_query)
    assert x_after["id"] == x_before["id"] and x_after["subject"] != x_before["subject"]
    meta = x_after["metadata"]
    assert meta["_version"] == x_before["metadata"]["_version"] + 1
    assert meta["_updated_at"] > x_before["metadata"]["_updated_at"]
    assert without_stamps(x_after)["metadata"] == without_stamps(x_before)["metadata"]
    log = ok(nx, "DESCRIBE HISTORY (id: :id)", id=x_after["id"])["versions"]
    assert log[0]["version"] == meta["_version"]
    assert ok(nx, x_query + f" AS OF VERSION {created}") == [x_before]
    assert nx.check()["ok"]
    ok(nx, 'REVERT COMMAND :s REASON "two drugs"', s=merge)
    [x_reverted] = ok(nx, x_query)     # REVERT is itself a write: one more `_version`
    assert without_stamps(x_reverted) == without_stamps(x_before)
    assert x_reverted["metadata"]["_version"] == meta["_version"] + 1
    assert nx.check()["ok"]


def test_links_merge_moved_read_as_bumped_and_revert_to_their_exact_metadata(nx):
    ok(nx, MERGE_PAIR)
    time.sleep(0.005)
    query = 'FIND(?l) WHERE { ?l (?d, "treats", ?s) ?d {type: "Drug"} }'
    before = {link["id"]: link for link in ok(nx, query)}
    created = last_seq(nx)
    ok(nx, 'MERGE CONCEPT ?s INTO ?t WHERE { ?s {type: "Drug", name: "ASA"} '
           '?t {type: "Drug", name: "Aspirin"} }')
    merge = last_seq(nx)
    for link in ok(nx, query):
        was = before[link["id"]]["metadata"]
        if link["subject"] == before[link["id"]]["subject"]:
            assert link["metadata"] == was             # not moved: untouched
            continue
        assert link["metadata"]["_version"] == was["_version"] + 1
        assert link["metadata"]["_created_at"] == was["_created_at"]
        assert link["metadata"]["_updated_at"] > was["_updated_at"]
    assert {link["id"]: link for link in ok(nx, query + f" AS OF VERSION {created}")} == before
    ok(nx, 'REVERT COMMAND :s REASON "two drugs"', s=merge)
    assert {link["id"]: without_stamps(link) for link in ok(nx, query)} == \
        {n: without_stamps(link) for n, link in before.items()}


def without_stamps(element):
    """An element as FIND returns it, its `_version` and `_updated_at` left out."""
    meta = {k: v for k, v in element["metadata"].items() if k not in ("_version", "_updated_at")}
    return {**element, "metadata": meta}
