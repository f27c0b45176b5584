"""Access control: nobody gets in.

* `execute_kip_readonly` changes nothing, whatever the command (every KML form, disguised
  with comments, case and whitespace, in batches, as a dry run), through the API, over HTTP
  and through `kip exec --readonly`; a dry run through `execute_kip` changes nothing either.
* With an API key, no request that reaches data is answered without it (every method,
  JSON-RPC batches and notifications, every wrong form of the header); the comparison is
  timing-safe (`hmac.compare_digest`).
* Parameters are values, never syntax: binding any value gives the command that writing the
  value as a literal gives, and values full of KIP syntax find, write and delete exactly
  what a literal would.
* `core_directives` and the protected definitions cannot be changed by any path:
  `execute_kip` (single, batch, dry run, by id, by parameter, by a broad WHERE), `write_session`,
  `load_capsules` / `kip load` without `--privileged`, `bulk_import`, and an export → load
  round trip (also of a tampered export).
* An export never carries secrets. Decided (docs/guarantees.md): secrets are everything that
  is configuration rather than memory — the API key, the environment, file paths, the audit
  log of requests, and the deployment's principal id (`self_id`, set into `$self.id` at
  creation): an export is knowledge, and loading it elsewhere must not make another agent
  claim this deployment's identity.
"""
from __future__ import annotations

import importlib
import inspect
import json
import os
import re

import pytest
from reliability_support import dump, full_or, seeded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kipserver import KipServer

from nexus.api import Nexus
from nexus.errors import KipError
from nexus.syntax import bind, parse, value_text

KEY = "access-key-" + "7" * 24


def access_settings(ci: int, full: int):
    return settings(max_examples=full_or(ci, full), deadline=None, derandomize=True,
                    database=None, suppress_health_check=[
                        HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


# --- every write, in every disguise -------------------------------------------------------------

WRITES = [
    'UPSERT { CONCEPT ?x { {type: "Drug", name: "Paracetamol"} SET ATTRIBUTES { dose_mg: 1 } } }',
    'UPSERT { CONCEPT ?x { {type: "Drug", name: "Aspirin"} SET ATTRIBUTES { dose_mg: 1 } } }',
    'UPSERT { CONCEPT ?x { {type: "Drug", name: "Aspirin"} } WITH METADATA { tag: 1 } }',
    'UPSERT { PROPOSITION ?l { ({type: "Drug", name: "Ibuprofen"}, "treats", '
    '{type: "Symptom", name: "Headache"}) } }',
    'UPSERT { CONCEPT ?t { {type: "$ConceptType", name: "Gadget"} SET ATTRIBUTES '
    '{ description: "g" } } }',
    'DELETE CONCEPT ?d DETACH WHERE { ?d {type: "Drug", name: "Aspirin"} }',
    'DELETE CONCEPT ?d DETACH WHERE { ?d {type: "Drug"} }',
    'DELETE PROPOSITIONS ?l WHERE { ?l (?d, "treats", ?s) }',
    'DELETE ATTRIBUTES {"dose_mg"} FROM ?d WHERE { ?d {type: "Drug"} }',
    'DELETE METADATA {"source"} FROM ?d WHERE { ?d {type: "Drug"} }',
    'UPSERT { CONCEPT ?s { {type: "Person", name: "$self"} SET ATTRIBUTES { persona: "x" } } }',
]
DISGUISES = [
    lambda t: t,
    lambda t: "// a comment\n  " + t,
    lambda t: "/* no block comments */ " + t,
    lambda t: t.replace("UPSERT", "upsert").replace("DELETE", "delete"),
    lambda t: "\ufeff" + t,
    lambda t: "\n\t " + t.replace(" ", "\n"),
    lambda t: 'FIND(?x) WHERE { ?x {type: "Drug"} } ' + t,
    lambda t: t + ' FIND(?x) WHERE { ?x {type: "Drug"} }',
    lambda t: "EXPLAIN " + t,
]


def _valid_writes() -> None:
    """Each of WRITES succeeds through execute_kip (so refusing them means something)."""
    for text in WRITES:
        with Nexus.open(None) as nx:
            seeded(nx)
            before = dump(nx)
            response = nx.execute_kip({"command": text})
            assert "result" in response, (text, response)
            assert dump(nx) != before, text


def test_the_writes_are_real_writes():
    _valid_writes()


@pytest.mark.parametrize("disguise", range(len(DISGUISES)))
def test_readonly_refuses_every_write_in_every_disguise(shared_nx, disguise):
    before = dump(shared_nx)
    find = 'FIND(?d) WHERE { ?d {type: "Drug"} }'
    for text in WRITES:
        command = DISGUISES[disguise](text)
        for request, refused in (
                ({"command": command}, lambda r: [r]),
                ({"command": command, "dry_run": True}, lambda r: [r]),
                ({"commands": [command, command]}, lambda r: r["result"]),
                ({"commands": [find, {"command": command, "parameters": {}}], "dry_run": True},
                 lambda r: r["result"][1:])):
            response = shared_nx.execute_kip_readonly(request)
            for answer in refused(response):
                assert "error" in answer, (command, answer)
                assert answer["error"]["code"] in ("KIP_1001", "KIP_1002"), answer
            assert dump(shared_nx) == before, command


def test_readonly_refusal_names_the_method(shared_nx):
    response = shared_nx.execute_kip_readonly({"command": WRITES[0]})
    assert "execute_kip" in response["error"]["message"]


@pytest.mark.parametrize("text", WRITES)
def test_dry_run_through_execute_kip_writes_nothing(shared_nx, text):
    before = dump(shared_nx)
    response = shared_nx.execute_kip({"command": text, "dry_run": True})
    assert "result" in response or response["error"]["code"] == "KIP_3004", response
    if "result" in response:                       # the shape of a real run, zero counts
        assert all(v in (0, []) for v in response["result"].values()), response
    response = shared_nx.execute_kip({"commands": [text, text], "dry_run": True})
    assert dump(shared_nx) == before


def test_readonly_over_http_changes_nothing(keyed):
    """The same refusals through `kip serve`: plain and JSON-RPC framing, single commands,
    batches, dry runs; the database (but for the audit log of the requests) is unchanged."""
    before = _db_dump(keyed)
    find = 'FIND(?d) WHERE { ?d {type: "Drug"} }'
    for text in WRITES:
        for params in ({"command": text}, {"command": text, "dry_run": True},
                       {"commands": [find, text, {"command": text, "parameters": {}}]},
                       {"commands": [text], "dry_run": True}):
            for framed in (False, True):
                body = {"method": "execute_kip_readonly", "params": params}
                if framed:
                    body.update(jsonrpc="2.0", id=7)
                status, data = keyed.post(body)
                answer = data["result"] if framed else data
                if "command" in params:
                    assert status == 400 and answer["error"]["code"] == "KIP_1001", answer
                else:
                    assert status == 200, answer
                    refused = answer["result"][1:] if len(answer["result"]) == 3 \
                        else answer["result"]
                    assert all(r["error"]["code"] == "KIP_1001" for r in refused), answer
    assert _db_dump(keyed) == before


def test_kip_exec_readonly(tmp_path):
    from nexus.cli import main
    db = tmp_path / "db"
    with Nexus.open(str(db)) as nx:
        seeded(nx)
        before = dump(nx)
    for text in WRITES[:3] + WRITES[5:7]:
        assert main(["exec", "--db", str(db), "--readonly", text]) == 1
        assert main(["exec", "--db", str(db), "--readonly", "--dry-run", text]) == 1
    with Nexus.open(str(db)) as nx:
        assert dump(nx) == before


# --- the API key ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    db = tmp_path_factory.mktemp("access") / "db"
    with Nexus.open(str(db)) as nx:
        seeded(nx)
    srv = KipServer.start(db, key=KEY)
    yield srv
    assert srv.stop() == 0


FIND = 'FIND(?d.name) WHERE { ?d {type: "Drug"} }'
CALLS = [
    {"method": "execute_kip", "params": {"command": FIND}},
    {"method": "execute_kip", "params": {"command": WRITES[0]}},
    {"method": "execute_kip_readonly", "params": {"command": FIND}},
    {"method": "list_logs", "params": {}},
    {"method": "list_logs"},
    {"jsonrpc": "2.0", "id": 1, "method": "execute_kip", "params": {"command": FIND}},
    {"jsonrpc": "2.0", "method": "execute_kip", "params": {"command": WRITES[0]}},  # notify
    [{"jsonrpc": "2.0", "id": 1, "method": "list_logs"}],
    {"method": "nope"},
    "not even json",
]
BAD_AUTH = [None, "", "Bearer", "Bearer ", f"Bearer {KEY[:-1]}", f"Bearer {KEY}x",
            f"Bearer {KEY[1:]}", f"Basic {KEY}", f"Token {KEY}", KEY, f"Bearer  {KEY} extra",
            f"Bearer {KEY.upper()}", "Bearer " + "k" * 10_000, f"bearer{KEY}",
            f"Bearer {KEY}\t"[:-1] + "\x00"]


def test_no_data_without_the_key(keyed):
    before = _db_dump(keyed)
    for call in CALLS:
        body = call.encode() if isinstance(call, str) else json.dumps(call).encode()
        for auth in BAD_AUTH:
            headers = {"Content-Type": "application/json"}
            if auth is not None:
                headers["Authorization"] = auth
            try:
                status, data = keyed.request("POST", "/kip", body, headers)
            except ValueError:          # a header http.client itself refuses to send
                continue
            if status == 400 and "Invalid HTTP request" in str(data):    # (KIP JSON)
                assert "\x00" in auth          # refused by the HTTP parser itself
                continue
            assert status == 401, (call, auth, status, data)
            assert data["error"]["code"] == "KIP_4003" and "Unauthorized" in \
                data["error"]["message"]
    assert _db_dump(keyed) == before
    status, data = keyed.post(CALLS[0])
    assert status == 200 and "Aspirin" in data["result"]


def test_the_key_is_checked_before_the_body_and_the_connection_is_closed(keyed):
    status, data = keyed.raw(
        b"POST /kip HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n{")
    assert status == 401
    conn = keyed.connect()
    conn.request("POST", "/kip", body=b"{}", headers={"Authorization": "Bearer no"})
    response = conn.getresponse()
    response.read()
    assert response.status == 401 and response.getheader("connection") == "close"
    conn.close()


def test_public_routes_show_no_data(keyed):
    for path in ("/", "/healthz"):
        status, data = keyed.request("GET", path)
        assert status == 200 and "Aspirin" not in json.dumps(data)
    assert keyed.request("GET", "/kip")[0] in (401, 405)


def test_key_comparison_is_timing_safe():
    import pkgutil

    from nexus import server
    source = inspect.getsource(server.KipApp._check_auth)
    assert "hmac.compare_digest(" in source
    modules = [server] + [importlib.import_module(f"nexus.server.{m.name}")
                          for m in pkgutil.iter_modules(server.__path__)]
    assert len(modules) > 1
    for module in modules:
        assert not re.search(r"api_key\s*(==|!=)|(==|!=)\s*self\.api_key",
                             inspect.getsource(module)), module.__name__


def _db_dump(srv: KipServer) -> dict:
    from nexus.store.lmdb_store import JOURNAL_KEY, LmdbGraphStore
    store = LmdbGraphStore(str(srv.log.parent / "db"), readonly=True)   # beside its owner
    try:
        tables = store.dump()
    finally:
        store.close()
    tables.pop("aux.audit")
    # the audit's flushes also rewrite the key that keeps the snapshot id (lmdb_store)
    tables["meta"] = [kv for kv in tables["meta"] if kv[0] != JOURNAL_KEY]
    return tables


# --- parameters are values ---------------------------------------------------------------------

SYNTAX_VALUES = [
    '"} } DELETE CONCEPT ?d DETACH WHERE { ?d {type: "Drug"} }',
    '" } UPSERT { CONCEPT ?z { {type: "Drug", name: "pwned"} } } //',
    'Aspirin"} ?x {type: "Drug', "?d", ":n", "$self", '\\"', "\\", "*/", "//", "\n}\n",
    "FIND(?d) WHERE { ?d {type: \"Drug\"} }", "Aspirin\u0000", " Aspirin", "ASPIRIN",
]
values = st.one_of(
    st.sampled_from(SYNTAX_VALUES),
    st.lists(st.sampled_from(SYNTAX_VALUES), min_size=1, max_size=4).map("".join),
    st.text(alphabet=st.sampled_from(list('{}()[]"\\:?$!/*,;=<> \nabcUPSERTDELETE')),
            max_size=60))
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1),
              st.floats(allow_nan=False, allow_infinity=False), values),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(values, inner, max_size=3)), max_leaves=8)

TEMPLATES = [
    'FIND(?d) WHERE { ?d {type: "Drug", name: :v} }',
    'FIND(?d) WHERE { ?d {type: :v} }',
    'FIND(?d.name) WHERE { ?d {type: "Drug"} FILTER(?d.name == :v || ?d.attributes.x == :v) }',
    'FIND(?d.name) WHERE { ?d {type: "Drug"} FILTER(IN(?d.name, :v)) }',
    'UPSERT { CONCEPT ?x { {type: "Drug", name: "Target"} SET ATTRIBUTES { a: :v, b: [:v] } } '
    'WITH METADATA { m: :v } }',
    'DELETE CONCEPT ?d DETACH WHERE { ?d {type: "Drug", name: :v} }',
    'DELETE ATTRIBUTES {"dose_mg"} FROM ?d WHERE { ?d {type: "Drug"} FILTER(?d.name == :v) }',
    'SEARCH CONCEPT :v WITH TYPE "Drug" LIMIT 3',
]


@access_settings(100, 3000)
@given(template=st.sampled_from(TEMPLATES), value=json_values)
def test_binding_a_value_equals_writing_it_as_a_literal(template, value):
    parsed = parse(template)
    try:
        bound = bind(parsed, {"v": value})
    except KipError as err:
        assert err.code.value in ("KIP_1001", "KIP_1002", "KIP_2003"), err
        return
    literal = template.replace(":v", value_text(value))
    assert bound == parse(literal).command, (template, value)


@access_settings(60, 1000)
@given(name=values, attribute=json_values)
def test_values_full_of_syntax_write_and_find_exactly_themselves(shared_nx, name, attribute):
    nx = shared_nx
    drugs = 'FIND(?d.name) WHERE { ?d {type: "Drug"} }'
    names = set(nx.execute_kip_readonly({"command": drugs})["result"])
    found = nx.execute_kip_readonly({"command": TEMPLATES[0], "parameters": {"v": name}})
    assert [d["name"] for d in found.get("result", [])] == ([name] if name in names else []) \
        or found["error"]["code"] == "KIP_3002"
    before = dump(nx)
    response = nx.execute_kip({"command": TEMPLATES[5], "parameters": {"v": name}})
    if name not in names:
        assert response["error"]["code"] == "KIP_3002" and dump(nx) == before
    write = ('UPSERT { CONCEPT ?x { {type: "Drug", name: :n} SET ATTRIBUTES { a: :a } } }')
    response = nx.execute_kip({"command": write, "parameters": {"n": name, "a": attribute}})
    if "error" in response:         # e.g. an empty name
        assert response["error"]["code"] in ("KIP_2002", "KIP_2003", "KIP_1001"), response
        return
    after = set(nx.execute_kip_readonly({"command": drugs})["result"])
    assert after == (names - {name}) | {name}
    got = nx.execute_kip_readonly({"command": 'FIND(?d.attributes.a) WHERE { ?d {type: "Drug", '
                                   'name: :n} }', "parameters": {"n": name}})
    assert got["result"] == [attribute]
    nx.execute_kip({"command": TEMPLATES[5], "parameters": {"v": name}})
    assert set(nx.execute_kip_readonly({"command": drugs})["result"]) == names - {name}


# --- protected definitions and core_directives -------------------------------------------------

PROTECTED_QUERY = """
FIND(?n.type, ?n.name, ?n.attributes, ?n.metadata) WHERE {
  ?n {type: :t, name: :name}
}"""
PROTECTED = [("$ConceptType", "$ConceptType"), ("$ConceptType", "$PropositionType"),
             ("$ConceptType", "Domain"), ("$PropositionType", "belongs_to_domain"),
             ("Domain", "CoreSchema")]
ACTORS = [("Person", "$self"), ("Person", "$system")]


def protected_state(nx: Nexus) -> dict:
    """The protected elements as they are: definitions and their domain links whole, the
    actors' identity and core_directives."""
    out = {}
    for t, name in PROTECTED + ACTORS:
        r = nx.execute_kip_readonly({"command": PROTECTED_QUERY,
                                     "parameters": {"t": t, "name": name}})
        assert "result" in r and r["result"][0], (t, name, r)
        types, names, attributes, metadata = (col[0] for col in r["result"])
        if (t, name) in ACTORS:
            out[t, name] = (types, names, (attributes or {}).get("core_directives"))
        else:
            out[t, name] = (types, names, attributes, metadata)
    for t, name in PROTECTED:          # their (protected) links to the CoreSchema domain
        r = nx.execute_kip_readonly({"command": 'FIND(?l) WHERE { ?l ({type: :t, name: :name}, '
                                     '"belongs_to_domain", {type: "Domain", name: "CoreSchema"}) }',
                                     "parameters": {"t": t, "name": name}})
        out["link", t, name] = r["result"]
    return out


ATTACKS = [
    'UPSERT { CONCEPT ?s { {type: "Person", name: "$self"} SET ATTRIBUTES '
    '{ core_directives: [] } } }',
    'UPSERT { CONCEPT ?s { {type: "Person", name: "$system"} SET ATTRIBUTES '
    '{ core_directives: "obey" } } }',
    'DELETE ATTRIBUTES {"core_directives"} FROM ?s WHERE { ?s {type: "Person", name: "$self"} }',
    'DELETE ATTRIBUTES {"core_directives"} FROM ?s WHERE { ?s {type: "Person"} }',
    'DELETE CONCEPT ?s DETACH WHERE { ?s {type: "Person", name: "$self"} }',
    'DELETE CONCEPT ?s DETACH WHERE { ?s {type: "Person"} }',
    'UPSERT { CONCEPT ?t { {type: "$ConceptType", name: "$ConceptType"} SET ATTRIBUTES '
    '{ description: "pwned" } } }',
    'UPSERT { CONCEPT ?t { {type: "$ConceptType", name: "Domain"} } WITH METADATA { x: 1 } }',
    'UPSERT { CONCEPT ?t { {type: "$PropositionType", name: "belongs_to_domain"} '
    'SET ATTRIBUTES { subject_types: [] } } }',
    'UPSERT { CONCEPT ?d { {type: "Domain", name: "CoreSchema"} SET ATTRIBUTES '
    '{ description: "" } } }',
    'DELETE METADATA {"source"} FROM ?d WHERE { ?d {type: "Domain", name: "CoreSchema"} }',
    'DELETE CONCEPT ?d DETACH WHERE { ?d {type: "Domain"} }',
    'DELETE CONCEPT ?t DETACH WHERE { ?t {type: "$ConceptType"} }',
    'DELETE PROPOSITIONS ?l WHERE { ?l (?d, "belongs_to_domain", ?c) }',
    'DELETE PROPOSITIONS ?l WHERE { ?l ({type: "$ConceptType", name: "Domain"}, '
    '"belongs_to_domain", {type: "Domain", name: "CoreSchema"}) }',
    'UPSERT { PROPOSITION ?l { ({type: "$ConceptType", name: "Domain"}, "belongs_to_domain", '
    '{type: "Domain", name: "CoreSchema"}) SET ATTRIBUTES { x: 1 } } }',
    'DELETE ATTRIBUTES {"description"} FROM ?t WHERE { ?t {type: "$ConceptType"} }',
]


def by_id_attacks(nx: Nexus) -> list[str]:
    ids = nx.execute_kip_readonly({"command": 'FIND(?n) WHERE { ?n {type: "Domain", '
                                   'name: "CoreSchema"} }'})["result"]
    n = ids[0]["id"]
    me = nx.execute_kip_readonly({"command": 'FIND(?n) WHERE { ?n {type: "Person", '
                                  'name: "$self"} }'})["result"][0]["id"]
    return [f'UPSERT {{ CONCEPT ?d {{ {{id: "{n}"}} SET ATTRIBUTES {{ description: "x" }} }} }}',
            f'DELETE CONCEPT ?d DETACH WHERE {{ ?d {{id: "{n}"}} }}',
            f'UPSERT {{ CONCEPT ?s {{ {{id: "{me}"}} SET ATTRIBUTES {{ core_directives: 1 }} }} }}']


def test_no_attack_through_execute_kip(shared_nx):
    nx = shared_nx
    before = protected_state(nx)
    for text in ATTACKS + by_id_attacks(nx):
        for request in ({"command": text}, {"command": text, "dry_run": True},
                        {"commands": [WRITES[0], text, WRITES[4]]}):
            response = nx.execute_kip(request)
            answer = response if "command" in request else response["result"][1]
            assert answer["error"]["code"] == "KIP_3004", (text, response)
            if "commands" in request:
                assert len(response["result"]) == 2    # the batch stopped at the refusal
        assert protected_state(nx) == before, text
    params = {"t": "Person", "n": "$self", "k": "core_directives", "v": []}
    for text in ('UPSERT { CONCEPT ?s { {type: :t, name: :n} SET ATTRIBUTES { core_directives:'
                 ' :v } } }', 'DELETE ATTRIBUTES {:k} FROM ?s WHERE { ?s {type: :t, name: :n} }'):
        response = nx.execute_kip({"command": text, "parameters": params})
        assert response["error"]["code"] in ("KIP_3004", "KIP_1001"), response
    assert protected_state(nx) == before


def test_ordinary_attributes_of_self_still_evolve(nx):
    before = protected_state(nx)
    response = nx.execute_kip({"command": 'UPSERT { CONCEPT ?s { {type: "Person", name: '
                               '"$self"} SET ATTRIBUTES { persona: "grown" } } }'})
    assert "result" in response, response
    assert protected_state(nx) == before


def test_no_attack_through_write_session_bulk_import_or_capsules(nx, tmp_path):
    from nexus.ops.bulk_import import bulk_import
    from nexus.ops.capsules import load_capsules
    before, base = protected_state(nx), dump(nx)
    for text in ATTACKS:
        with pytest.raises(KipError) as info:
            with nx.write_session() as batch:
                batch.run(WRITES[0])
                batch.run(text)
        assert info.value.code.value == "KIP_3004"
        capsule = tmp_path / "attack.kip"
        capsule.write_text(text + "\n")
        report = load_capsules(nx, [str(capsule)])
        assert report[0]["error"]["code"] == "KIP_3004", report
    for rows in ([{"type": "Person", "name": "$self", "attributes": {"core_directives": []}}],
                 [{"type": "$ConceptType", "name": "Domain", "attributes": {"x": 1}}],
                 [{"type": "Domain", "name": "CoreSchema", "metadata": {"x": 1}}]):
        with pytest.raises(KipError) as info:
            bulk_import(nx, rows)
        assert info.value.code.value == "KIP_3004"
    assert protected_state(nx) == before and dump(nx) == base


def test_kip_load_needs_privilege(tmp_path):
    from nexus.cli import main
    db = tmp_path / "db"
    with Nexus.open(str(db)) as nx:
        before = protected_state(nx)
    capsule = tmp_path / "attack.kip"
    capsule.write_text("\n".join(ATTACKS[:1] + ATTACKS[6:7]))      # two UPSERT statements
    assert main(["load", "--db", str(db), str(capsule)]) == 1
    with Nexus.open(str(db)) as nx:
        assert protected_state(nx) == before
    assert main(["load", "--db", str(db), "--privileged", str(capsule)]) == 0   # the operator
    with Nexus.open(str(db)) as nx:
        assert protected_state(nx) != before


def test_export_load_round_trip_keeps_the_protected_core(tmp_path):
    from nexus.ops.capsules import load_capsules
    from nexus.ops.export import export_text
    with Nexus.open(str(tmp_path / "a")) as a:
        seeded(a)
        r = a.execute_kip({"command": 'UPSERT { CONCEPT ?s { {type: "Person", name: "$self"} '
                           'SET ATTRIBUTES { persona: "A" } } }'})
        assert "result" in r, r
        text = export_text(a)
    with Nexus.open(str(tmp_path / "b")) as b:
        before = protected_state(b)
        capsule = tmp_path / "export.kip"
        capsule.write_text(text)
        report = load_capsules(b, [str(capsule)])
        assert "error" not in report[0], report
        assert protected_state(b) == before
        persona = b.execute_kip_readonly({"command": 'FIND(?s.attributes.persona) WHERE { ?s '
                                          '{type: "Person", name: "$self"} }'})["result"]
        assert persona == ["A"]
        # a tampered export (core_directives put back in) is refused whole
        tampered = text.replace('persona: "A"', 'persona: "A", core_directives: []')
        assert tampered != text
        capsule.write_text(tampered)
        base = dump(b)
        assert load_capsules(b, [str(capsule)])[0]["error"]["code"] == "KIP_3004"
        assert dump(b) == base


# --- secrets never leave in an export ----------------------------------------------------------

def test_an_export_carries_no_secret(tmp_path):
    from nexus.cli import main
    db = tmp_path / "db"
    principal = "principal-" + os.urandom(8).hex()
    canary = "audit-canary-" + os.urandom(8).hex()
    with Nexus.open(str(db), self_id=principal) as nx:
        seeded(nx)
    srv = KipServer.start(db, key=KEY)
    try:
        status, _ = srv.kip({"command": 'FIND(?d) WHERE { ?d {type: "Drug", name: :n} }',
                             "parameters": {"n": canary}})
        assert status == 404                                    # KIP_3002: no such drug
        status, _ = srv.kip({"command": 'FIND(?d) WHERE { ?d {type: "Drug"} '
                             f'FILTER(?d.name == "{canary}") }}'})
        assert status == 200
        status, logs = srv.post({"method": "list_logs"})
        assert status == 200 and canary in json.dumps(logs)     # the audit log has it ...
    finally:
        assert srv.stop() == 0
    out = tmp_path / "export.kip"
    assert main(["export", "--db", str(db), "-o", str(out)]) == 0
    text = out.read_text()
    assert "Aspirin" in text                                    # ... the export has data
    for secret in (KEY, canary, str(db), str(tmp_path), principal):
        assert secret not in text, secret                       # ... and no secret
    with Nexus.open(str(db), self_id=principal) as nx:
        from nexus.ops.export import export_text
        assert principal not in export_text(nx)


def test_loading_an_export_keeps_the_target_identity(tmp_path):
    from nexus.ops.capsules import load_capsules
    from nexus.ops.export import export_text
    with Nexus.open(str(tmp_path / "a"), self_id="principal-A") as a:
        text = export_text(a)
    capsule = tmp_path / "a.kip"
    capsule.write_text(text)
    with Nexus.open(str(tmp_path / "b"), self_id="principal-B") as b:
        assert "error" not in load_capsules(b, [str(capsule)])[0]
        ident = b.execute_kip_readonly({"command": 'FIND(?s.attributes.id) WHERE { ?s {type: '
                                        '"Person", name: "$self"} }'})["result"]
        assert ident == ["principal-B"]
