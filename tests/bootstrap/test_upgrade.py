"""A database created by the previous release upgrades on open (issue 16, CONTRACT §9):
the capsules it lacks are applied, `$self` and `$system` are left exactly as they were (user
edits survive), user knowledge is untouched, and a second open changes nothing.

The previous layout is rebuilt for real, in an LMDB directory: the RC6 release's bundled
capsules (tests/bootstrap/fixtures/rc6/, copied from that release) applied the way its
bootstrap applied them — in its order, one privileged write session per capsule, each
storing its sha256 under `capsule:<its name>`."""
from __future__ import annotations

import hashlib
from importlib.resources import as_file, files
from pathlib import Path

import pytest

from nexus.api import Nexus
from nexus.ops.capsules import BUNDLED, RETIRED, bundled_text, load_capsules
from nexus.store.protocol import ConceptHead

RC6 = Path(__file__).parent / "fixtures" / "rc6"
RC6_BUNDLED = ("genesis.kip", "person.kip", "event.kip", "sleep_task.kip",
               "persons/system.kip", "persons/self.kip")
USER_EDITS = """
UPSERT {
  CONCEPT ?me { {type: "Person", name: "$self"}
    SET ATTRIBUTES { persona: "grown through use", strengths: ["patience"],
                     values: [{name: "candour", description: "say it", origin: "e1",
                               confidence: 0.8}] } }
  CONCEPT ?alice { {type: "Person", name: "alice"} SET ATTRIBUTES { person_class: "Human" } }
  CONCEPT ?chat { {type: "Event", name: "chat-1"}
    SET ATTRIBUTES { event_class: "Conversation", start_time: "2026-01-01T10:00:00Z",
                     content_summary: "talked about tea" }
    SET PROPOSITIONS { ("involves", ?alice), ("involves", ?me),
                       ("belongs_to_domain", {type: "Domain", name: "Unsorted"}) } }
} WITH METADATA { source: "chat", author: "$self", confidence: 0.9 }
UPSERT {
  CONCEPT ?sys { {type: "Person", name: "$system"}
    SET ATTRIBUTES { maintenance_log: [{timestamp: "2026-01-02T00:00:00Z", scope: "quick"}],
                     last_sleep_cycle: "2026-01-02T00:00:00Z" } }
}
"""


def build_previous_release(path: str) -> None:
    with Nexus.open(path, bootstrap=False) as nx:
        for name in RC6_BUNDLED:
            text = (RC6 / name).read_text("utf-8")
            with nx.write_session(privileged=True) as session:
                session.run(text)
                session.txn.aux("engine").put(
                    b"capsule:" + name.encode(),
                    hashlib.sha256(text.encode()).hexdigest().encode())
        response = nx.execute_kip({"command": USER_EDITS})
        assert "error" not in response, response


def graph(nx: Nexus) -> tuple[set, set]:
    """Concepts as (type, name) and links as ((type, name), predicate, (type, name))."""
    with nx.store.read() as t:
        def key(n):
            h = t.head(n)
            return t.symbol_text(h.type_id), h.name
        concepts, links = set(), set()
        for n in t.elements():
            h = t.head(n)
            if type(h) is ConceptHead:
                concepts.add(key(n))
            else:
                links.add((key(h.subject), t.symbol_text(h.predicate_id), key(h.object)))
        return concepts, links


def element(nx: Nexus, type_: str, name: str) -> tuple[dict, dict]:
    with nx.store.read() as t:
        n = t.concept_id(t.symbol_id(type_), name)
        assert n is not None, (type_, name)
        return t.attributes(n), t.metadata(n)


@pytest.fixture
def previous(tmp_path) -> str:
    path = str(tmp_path / "db")
    build_previous_release(path)
    return path


def test_the_fixture_is_the_previous_layout(previous):
    with Nexus.open(previous, bootstrap=False) as nx:
        with nx.store.read() as t:
            stored = {k for k, _ in t.aux("engine").scan(b"capsule:")}
        assert stored == {b"capsule:" + n.encode() for n in RC6_BUNDLED}
        concepts, _ = graph(nx)
        assert ("$ConceptType", "Experience") not in concepts
        assert ("$PropositionType", "has_step") not in concepts


def test_opening_upgrades_and_keeps_self(previous):
    with Nexus.open(previous, bootstrap=False) as nx:
        old_self, old_system = element(nx, "Person", "$self"), element(nx, "Person", "$system")
        old_chat = element(nx, "Event", "chat-1")
        old_graph = graph(nx)
    with Nexus.open(previous) as nx:        # the upgrade
        # $self and $system: untouched, to the byte (attributes and metadata, _version too)
        assert element(nx, "Person", "$self") == old_self
        assert element(nx, "Person", "$system") == old_system
        assert old_self[0]["persona"] == "grown through use"
        assert element(nx, "Event", "chat-1") == old_chat
        # the new capsules are there: the graph is a fresh database's plus the user's
        concepts, links = graph(nx)
        with Nexus.open(None) as fresh:
            fresh_concepts, fresh_links = graph(fresh)
        user_concepts = {("Person", "alice"), ("Event", "chat-1")}
        assert concepts == fresh_concepts | user_concepts
        assert links - fresh_links == old_graph[1] - graph_of_rc6()[1]
        assert old_graph[0] <= concepts and old_graph[1] <= links
        # RC11 content of the definitions (re-applied over the RC6 text)
        ct, _ = element(nx, "$ConceptType", "$ConceptType")
        assert "Experience" in ct["key_instances"]
        involves, _ = element(nx, "$PropositionType", "involves")
        assert involves["subject_types"] == ["Event", "Experience"]
        assert element(nx, "$ConceptType", "SleepTask")[0]["display_hint"] == "🛏️"
        # the hashes: every RC11 capsule recorded (the actors' too), the RC6 names gone
        with nx.store.read() as t:
            stored = dict(t.aux("engine").scan(b"capsule:"))
        assert set(stored) == {b"capsule:" + n.encode() for n in BUNDLED
                               if not n.startswith("persons/")} | {
            b"capsule:persons/system.kip", b"capsule:persons/self.kip"}
        for name in BUNDLED:
            if not name.startswith("persons/"):
                assert stored[b"capsule:" + name.encode()] == hashlib.sha256(
                    bundled_text(name).encode()).hexdigest().encode()
        assert not {b"capsule:" + n.encode() for n in RETIRED} & set(stored)
        # agents can now use the RC11 types
        response = nx.execute_kip({"command": """
            UPSERT { CONCEPT ?x { {type: "Experience", name: "exp-1"}
                       SET ATTRIBUTES { goal: "brew tea" } } }"""})
        assert "error" not in response, response
        dump = nx.store.dump()
    with Nexus.open(previous) as nx:        # the second open writes nothing
        assert nx.store.dump() == dump


def test_upgraded_actors_keep_their_directives_against_the_new_capsules(previous):
    """The RC11 actor capsules would change the protected core_directives an RC6 $self and
    $system hold: loading them there is KIP_3004 (docs/decisions.md, "Capsules"), and
    leaves the actors as they were."""
    with Nexus.open(previous) as nx:
        before = element(nx, "Person", "$self"), element(nx, "Person", "$system")
        with as_file(files("nexus.bundled")) as folder:
            for name in ("persons/self.kip", "persons/system.kip"):
                result = load_capsules(nx, [Path(folder) / name])[0]
                assert result["error"]["code"] == "KIP_3004", result
        assert (element(nx, "Person", "$self"), element(nx, "Person", "$system")) == before


def graph_of_rc6() -> tuple[set, set]:
    """The graph the RC6 capsules alone make."""
    with Nexus.open(None, bootstrap=False) as nx:
        for name in RC6_BUNDLED:
            with nx.write_session(privileged=True) as session:
                session.run((RC6 / name).read_text("utf-8"))
        return graph(nx)
