"""A realistic agent session through a client written like the KIP ecosystem's
`execute_kip.py` script: stdlib `urllib.request`, `Authorization: Bearer`, a JSON body
`{"method", "params"}` posted to /kip. Every response must have the CONTRACT §2 shape."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest


def execute_kip(url: str, token: str, command: str | None = None,
                commands: list | None = None, parameters: dict | None = None,
                dry_run: bool = False, readonly: bool = False) -> dict:
    """What the ecosystem script does (one function, no third-party packages)."""
    params: dict = {}
    if command is not None:
        params["command"] = command
    if commands is not None:
        params["commands"] = commands
    if parameters:
        params["parameters"] = parameters
    if dry_run:
        params["dry_run"] = True
    body = {"method": "execute_kip_readonly" if readonly else "execute_kip", "params": params}
    req = urllib.request.Request(url, data=json.dumps(body).encode("utf-8"), method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:   # KIP errors come with a KIP body
        return json.loads(exc.read().decode("utf-8"))


def check_shape(response: dict) -> None:
    """CONTRACT §2: `result` (+ `next_cursor`) or `error` with code/name/message/hint."""
    assert isinstance(response, dict)
    if "error" in response:
        assert set(response) == {"error"}
        err = response["error"]
        assert {"code", "name", "message", "hint"} <= set(err) <= {
            "code", "name", "message", "hint", "data"}
        assert err["code"].startswith("KIP_")
    else:
        assert "result" in response and set(response) <= {"result", "next_cursor"}
        if "next_cursor" in response:
            assert isinstance(response["next_cursor"], str)


@pytest.fixture(scope="module")
def kip(server):
    url = f"http://{server.host}:{server.port}/kip"

    def call(*args, **kw):
        response = execute_kip(url, server.key, *args, **kw)
        check_shape(response)
        if kw.get("commands") is not None and "result" in response:
            for item in response["result"]:
                check_shape(item)
        return response
    return call


def ok(response: dict):
    assert "error" not in response, response
    return response["result"]


def test_agent_session(kip):
    # 1. wake up: who am I, what do I know?
    primer = ok(kip("DESCRIBE PRIMER", readonly=True))
    assert primer["identity"]["name"] == "$self"
    assert any(d["name"] == "CoreSchema" for d in primer["domain_map"])
    types = ok(kip("DESCRIBE CONCEPT TYPES", readonly=True))
    assert "Person" in types and "Event" in types and "Project" not in types

    # 2. learn a schema: a type, a predicate, a domain
    ok(kip("""
    UPSERT {
      CONCEPT ?project_type {
        {type: "$ConceptType", name: "Project"}
        SET ATTRIBUTES {
          description: "A piece of work with a goal",
          instance_schema: {status: {type: "string", is_required: false}}
        }
        SET PROPOSITIONS { ("belongs_to_domain", {type: "Domain", name: "CoreSchema"}) }
      }
      CONCEPT ?works_on {
        {type: "$PropositionType", name: "works_on"}
        SET ATTRIBUTES {description: "A person works on a project",
                        subject_types: ["Person"], object_types: ["Project"]}
        SET PROPOSITIONS { ("belongs_to_domain", {type: "Domain", name: "CoreSchema"}) }
      }
    }
    WITH METADATA {source: "agent-session", author: "$self", confidence: 0.9}
    """))
    assert "Project" in ok(kip("DESCRIBE CONCEPT TYPES", readonly=True))

    # 3. remember people, a project and an event (a batch with per-command parameters)
    upsert_person = ('UPSERT { CONCEPT ?p { {type: "Person", name: :name} '
                     'SET ATTRIBUTES {person_class: "Human", handle: :handle} } }')
    results = ok(kip(commands=[
        {"command": upsert_person, "parameters": {"name": "Alice", "handle": "alice"}},
        {"command": upsert_person, "parameters": {"name": "Bob", "handle": "bob"}},
        """UPSERT {
             CONCEPT ?apollo { {type: "Project", name: "Apollo"}
               SET ATTRIBUTES {status: "active"} }
             CONCEPT ?alice { {type: "Person", name: "Alice"}
               SET PROPOSITIONS { ("works_on", ?apollo) } }
             CONCEPT ?bob { {type: "Person", name: "Bob"}
               SET PROPOSITIONS { ("works_on", ?apollo) WITH METADATA {confidence: 0.6} } }
           } WITH METADATA {source: "conversation", author: "$self"}""",
        {"command": """UPSERT {
             CONCEPT ?e { {type: "Event", name: :event}
               SET ATTRIBUTES {event_class: "Conversation", start_time: :at,
                               content_summary: "Alice explained the Apollo plan"}
               SET PROPOSITIONS { ("involves", {type: "Person", name: "Alice"})
                                  ("mentions", {type: "Project", name: "Apollo"}) } }
           }""", "parameters": {"event": "chat-2025-01-02", "at": "2025-01-02T10:00:00Z"}},
    ]))
    assert all("result" in r for r in results), results

    # 4. recall with parameters
    names = ok(kip('FIND(?p.name) WHERE { ?p {type: "Person"} '
                   '(?p, "works_on", {type: "Project", name: :project}) } ORDER BY ?p.name',
                   parameters={"project": "Apollo"}, readonly=True))
    assert names == ["Alice", "Bob"]
    count = ok(kip('FIND(COUNT(?e)) WHERE { ?e {type: "Event"} '
                   '(?e, "involves", {type: "Person", name: :who}) }',
                   parameters={"who": "Alice"}, readonly=True))
    assert count == 1

    # 5. search by text
    hits = ok(kip('SEARCH CONCEPT "Apollo" WITH TYPE "Project" LIMIT 5', readonly=True))
    assert hits and hits[0]["name"] == "Apollo"
    assert 0 <= hits[0]["metadata"]["_score"] <= 1

    # 6. an error an agent recovers from
    err = kip('UPSERT { CONCEPT ?x { {type: "Projet", name: "Typo"} } }')
    assert err["error"]["code"] == "KIP_2001"

    # 7. forget: Bob's link, then the project
    ok(kip('DELETE PROPOSITIONS ?l WHERE { ?l ({type: "Person", name: "Bob"}, "works_on", '
           '{type: "Project", name: "Apollo"}) }'))
    deleted = ok(kip('DELETE CONCEPT ?p DETACH WHERE { ?p {type: "Project", name: "Apollo"} }'))
    assert deleted["deleted_concepts"] == 1 and deleted["deleted_propositions"] >= 2
    gone = kip('FIND(?p) WHERE { ?p {type: "Project", name: "Apollo"} }', readonly=True)
    assert gone["error"]["code"] == "KIP_3002"
