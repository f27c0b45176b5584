"""A reader beside the owner (`Nexus.follow`): another process writes through `kip serve`;
a read that begins after the write was acknowledged sees it — also what this process had
cached: a link's ends moved by MERGE, PRIMER's domain rankings — and writes are refused."""
from __future__ import annotations

import pytest

from nexus.api import Nexus

from .conftest import start_server

DRUG = 'UPSERT { CONCEPT ?d { {type: "Drug", name: :name} } } WITH METADATA {source: "t"}'


@pytest.fixture(scope="module")
def owner(tmp_path_factory):
    db = tmp_path_factory.mktemp("follow") / "db"
    srv = start_server(db)
    status, data = srv.kip(
        'UPSERT { CONCEPT ?t { {type: "$ConceptType", name: "Drug"} SET ATTRIBUTES '
        '{description: "a drug"} } CONCEPT ?p { {type: "$PropositionType", name: "treats"} '
        'SET ATTRIBUTES {description: "treats"} } }')
    assert status == 200, data
    yield srv
    srv.stop()


@pytest.fixture
def reader(owner):
    nx = Nexus.follow(str(owner.db))
    yield nx
    nx.close()


def names(nx, query, **params):
    """The result of a FIND (a named concept that does not exist: none)."""
    r = nx.execute_kip_readonly({"command": query, "parameters": params})
    if r.get("error", {}).get("code") == "KIP_3002":
        return []
    assert "result" in r, r
    return r["result"]


def test_an_acknowledged_write_is_seen_by_the_next_read(owner, reader):
    query = 'FIND(?d.name) WHERE { ?d {type: "Drug", name: :name} }'
    assert names(reader, query, name="Aspirin") == []
    for i in range(3):
        status, data = owner.kip(DRUG, {"name": f"Drug{i}"})
        assert status == 200, data
        assert names(reader, query, name=f"Drug{i}") == [f"Drug{i}"]


def test_links_moved_by_merge_elsewhere_are_read_as_they_are_now(owner, reader):
    status, data = owner.kip(
        'UPSERT { CONCEPT ?a { {type: "Drug", name: "ASA"} } '
        'CONCEPT ?b { {type: "Drug", name: "Aspirin"} } '
        'CONCEPT ?h { {type: "Drug", name: "Headache pill"} } '
        'PROPOSITION ?l { (?a, "treats", ?h) } } WITH METADATA {source: "t"}')
    assert status == 200, data
    link = 'FIND(?s.name) WHERE { (?s, "treats", {type: "Drug", name: "Headache pill"}) }'
    assert names(reader, link) == ["ASA"]         # the link's head is now in the cache
    status, data = owner.kip('MERGE CONCEPT ?dup INTO ?keep WHERE { ?dup {type: "Drug", '
                             'name: "ASA"} ?keep {type: "Drug", name: "Aspirin"} }')
    assert status == 200, data
    assert names(reader, link) == ["Aspirin"]


def test_primer_follows_the_owner(owner, reader):
    def domains():
        r = reader.execute_kip_readonly({"command": "DESCRIBE PRIMER"})
        return {d["name"]: d for d in r["result"]["domain_map"]}
    before = domains()
    assert "Pharmacy" not in before
    status, data = owner.kip(
        'UPSERT { CONCEPT ?dom { {type: "Domain", name: "Pharmacy"} } '
        'CONCEPT ?d { {type: "Drug", name: "Ibuprofen"} SET PROPOSITIONS { '
        '("belongs_to_domain", ?dom) } } } WITH METADATA {source: "t"}')
    assert status == 200, data
    after = domains()
    assert after["Pharmacy"]["key_concepts"] == [{"type": "Drug", "name": "Ibuprofen"}]
    status, data = owner.kip(
        'UPSERT { CONCEPT ?d { {type: "Drug", name: "Naproxen"} SET PROPOSITIONS { '
        '("belongs_to_domain", {type: "Domain", name: "Pharmacy"}) } } } '
        'WITH METADATA {source: "t"}')
    assert status == 200, data
    keys = domains()["Pharmacy"]["key_concepts"]
    assert {"type": "Drug", "name": "Naproxen"} in keys


def test_a_follower_refuses_writes(owner, reader):
    r = reader.execute_kip({"command": DRUG, "parameters": {"name": "Nope"}})
    assert r["error"]["code"] == "KIP_4003"
    status, data = owner.kip('FIND(?d) WHERE { ?d {type: "Drug", name: "Nope"} }')
    assert status == 404 and data["error"]["code"] == "KIP_3002", data


def test_only_lmdb_is_followed():
    from nexus.errors import KipError
    with pytest.raises(KipError) as exc:
        Nexus.follow("memory://")
    assert exc.value.code.value == "KIP_4003"


@pytest.mark.parametrize("opener", ["open", "follow"])
def test_an_unknown_columnar_mode_is_refused_by_open_and_follow(tmp_path, opener):
    from nexus.errors import KipError
    with Nexus.open(str(tmp_path / "db"), bootstrap=False):
        pass
    with pytest.raises(KipError) as exc:
        getattr(Nexus, opener)(str(tmp_path / "db"), columnar="sometimes")
    assert exc.value.code.value == "KIP_1001" and "sometimes" in exc.value.message


def test_a_hub_query_follows_the_owner_writes(owner, reader, monkeypatch):
    """A hub-anchored FIND on the follower runs columnar (nexus.exec.hubs) and reads an
    attribute column: the owner's acknowledged attribute change is seen by the next read,
    on either executor (the column caches are keyed by LMDB's transaction id)."""
    from nexus.exec import columnar, hubs
    monkeypatch.setattr(hubs, "WORK_COST", 1e9)         # one row run pays for the arrays
    ran = []
    real = columnar.execute
    monkeypatch.setattr(columnar, "execute", lambda *a: ran.append(1) or real(*a))
    blocks = " ".join(f'CONCEPT ?d{i} {{ {{type: "Drug", name: "Hub drug {i}"}} '
                      f'SET ATTRIBUTES {{risk: {i % 5}}} SET PROPOSITIONS {{ ("treats", ?h) }} }}'
                      for i in range(300))
    status, data = owner.kip(f'UPSERT {{ CONCEPT ?h {{ {{type: "Drug", name: "Hub pill"}} }} '
                             f'{blocks} }} WITH METADATA {{source: "t"}}')
    assert status == 200, data
    query = ('FIND(?d.name) WHERE { ?d {type: "Drug"} (?d, "treats", {type: "Drug", '
             'name: "Hub pill"}) FILTER(?d.attributes.risk < 2) }')
    expected = sorted(f"Hub drug {i}" for i in range(300) if i % 5 < 2)

    def answers_on_both_executors(modes: tuple[str, str]) -> None:
        for mode in modes:
            reader.columnar = mode
            for _ in range(3):
                assert sorted(names(reader, query)) == expected
            assert ran, mode
            ran.clear()

    answers_on_both_executors(("auto", "always"))
    status, data = owner.kip('UPSERT { CONCEPT ?d { {type: "Drug", name: "Hub drug 5"} '
                             'SET ATTRIBUTES {risk: 9} } } WITH METADATA {source: "t"}')
    assert status == 200, data
    expected.remove("Hub drug 5")
    answers_on_both_executors(("always", "auto"))
