"""Spaces on PostgreSQL (issue 22): `--spaces postgresql://…` keeps many memories in one
database — a space is its rows (every table leads with `space`), opened as `URL?space=NAME`.
A new space is a copy of a bootstrapped template space, made in one transaction; spaces are
isolated from each other; a drop deletes the space's rows and nothing else; templates never
show up as spaces; the CLI and `kip serve --spaces URL` take the URL, and no password they
were given appears in what they print."""
from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

import nexus.spaces as spaces_module
from nexus import Nexus
from nexus.spaces import Spaces, locate
from serving import launch

ROOT = Path(__file__).resolve().parents[2]
TYPES = 'FIND(?t.name) WHERE { ?t {type: "$ConceptType"} } ORDER BY ?t.name LIMIT 100'
PEOPLE = 'FIND(?p.name) WHERE { ?p {type: "Person"} } ORDER BY ?p.name'


def _with_password(url: str, password: str) -> str:
    """The URL with a password for its user (the test server trusts local connections, so
    the password is never checked: it is there to be kept out of every output)."""
    scheme, _, rest = url.partition("://")
    user, _, host = rest.partition("@")
    return f"{scheme}://{user}:{password}@{host}"


def _result(nexus: Nexus, command: str) -> Any:
    response = nexus.execute_kip({"command": command})
    assert "error" not in response, response
    return response["result"]


def _people(found: Any) -> list[str]:
    """The Person names of a FIND, without the bootstrap's own ($self, $system)."""
    return [n for n in found if not n.startswith("$")]


def _person(name: str) -> str:
    return (f'UPSERT {{ CONCEPT ?p {{ {{type: "Person", name: "{name}"}} '
            f'SET ATTRIBUTES {{ person_class: "Human" }} }} }}')


@pytest.fixture(scope="module")
def spaces_url(pg_server) -> str:
    return _with_password(pg_server.fresh_database("spaces"), "Sh-secret-77")


def test_spaces_are_copies_of_one_template_and_isolated(spaces_url, monkeypatch):
    opened: list[str] = []
    real_open = Nexus.open

    def counting_open(location, **options):
        opened.append(str(location))
        return real_open(location, **options)
    monkeypatch.setattr(spaces_module.Nexus, "open", counting_open)
    registry = Spaces(spaces_url, max_open=2)
    try:
        assert registry.names() == []
        for name in ("a", "b", "c"):
            assert registry.create(name) is True
        assert registry.create("a") is False
        bootstraps = [o for o in opened if "space=_template-" in o]
        assert len(bootstraps) == 1, opened             # the template, built once
        assert registry.names() == ["a", "b", "c"]      # the template is no space
        assert registry.exists("b") and not registry.exists("zz")

        with Nexus.open(None) as alone:                 # what a bootstrap gives
            expected = _result(alone, TYPES)
        for name in ("a", "b", "c"):
            with registry.acquire(name) as nexus:
                assert _result(nexus, TYPES) == expected
                _result(nexus, _person(f"only-in-{name}"))
        for name in ("a", "b", "c"):                    # 3 spaces, 2 open: some reopened
            with registry.acquire(name) as nexus:
                assert _people(_result(nexus, PEOPLE)) == [f"only-in-{name}"]
        assert registry.open_count() <= 2
    finally:
        registry.close()


def test_a_drop_deletes_that_space_only(spaces_url, pg_server):
    registry = Spaces(spaces_url)
    try:
        for name in ("keep", "gone"):
            registry.create(name)
            with registry.acquire(name) as nexus:
                _result(nexus, _person(f"p-{name}"))
        assert registry.drop("gone") is True
        assert registry.drop("gone") is False
        assert not registry.exists("gone") and "gone" not in registry.names()
        dbname = urlsplit(spaces_url).path.lstrip("/")
        for table in ("nexus_meta", "nexus_concepts", "nexus_links", "nexus_symbols",
                      "nexus_aux", "nexus_stats"):
            assert pg_server.sql(f"SELECT count(*) FROM {table} WHERE space = 'gone'",
                                 dbname) == [(0,)], table
        with registry.acquire("keep") as nexus:
            assert _people(_result(nexus, PEOPLE)) == ["p-keep"]
        with pytest.raises(Exception, match="No space named 'gone'"):
            with registry.acquire("gone"):
                pass
        # Created again, it starts from the template: nothing of before comes back.
        assert registry.create("gone") is True
        with registry.acquire("gone") as nexus:
            assert _people(_result(nexus, PEOPLE)) == []
    finally:
        registry.close()


def test_bad_names_touch_nothing(spaces_url):
    registry = Spaces(spaces_url)
    try:
        before = registry.names()
        for bad in ("..", "a/b", "_template-x", "A", "", "x" * 64, "caf\u00e9", ".hidden"):
            with pytest.raises(Exception, match="Invalid space name"):
                registry.create(bad)
        assert registry.names() == before
    finally:
        registry.close()


def test_a_client_resolves_a_space_of_a_url(spaces_url):
    from nexus.shell.target import resolve
    Spaces(spaces_url).create("cli")
    target = resolve(spaces=spaces_url, space="cli")
    assert target.db is not None and "space=cli" in target.db
    assert locate(spaces_url, "nowhere") is None
    with pytest.raises(ValueError) as refused:
        resolve(spaces=spaces_url, space="nowhere")
    assert "no space named 'nowhere'" in str(refused.value)
    assert "Sh-secret-77" not in str(refused.value)


def _kip(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-m", "nexus.cli", *args], env=env,
                          capture_output=True, text=True, timeout=300)


def test_kip_space_commands_and_kip_exec_take_the_url(spaces_url):
    made = _kip("space", "create", "from-cli", "--spaces", spaces_url)
    assert made.returncode == 0, made.stderr
    listed = _kip("space", "list", "--spaces", spaces_url)
    assert "from-cli" in listed.stdout.split()
    ran = _kip("exec", "--spaces", spaces_url, "--space", "from-cli", _person("via-exec"))
    assert ran.returncode == 0, ran.stderr
    found = _kip("exec", "--spaces", spaces_url, "--space", "from-cli", PEOPLE)
    assert "via-exec" in found.stdout, found.stderr
    dropped = _kip("space", "drop", "from-cli", "--spaces", spaces_url)
    assert dropped.returncode == 0, dropped.stderr
    for done in (made, listed, ran, found, dropped):
        assert "Sh-secret-77" not in done.stdout + done.stderr


def _post(host: str, port: int, space: str, command: str) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        conn.request("POST", f"/v1/{space}/kip", json.dumps(
            {"method": "execute_kip", "params": {"command": command}}),
            {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def test_kip_serve_spaces_on_a_url(spaces_url, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    log = tmp_path / "serve.log"
    cwd = os.getcwd()
    os.chdir(tmp_path)          # nothing may be made in the repository
    try:
        proc, host, port = launch(None, ["--access-log", "off", "--no-audit",
                                         "--auto-create"], log=log, env=env,
                                  spaces=spaces_url)  # type: ignore[arg-type]
    finally:
        os.chdir(cwd)
    try:
        status, body = _post(host, port, "web-a", _person("alice"))
        assert status == 200 and "result" in body, body          # created by the write
        status, body = _post(host, port, "web-b", _person("bob"))
        assert status == 200 and "result" in body, body
        status, body = _post(host, port, "web-a", PEOPLE)
        assert _people(body["result"]) == ["alice"], body
        status, body = _post(host, port, "web-b", PEOPLE)
        assert _people(body["result"]) == ["bob"], body
        assert "web-a" in Spaces(spaces_url).names()
        assert os.listdir(tmp_path) == ["serve.log"]              # no folder for the URL
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert "Sh-secret-77" not in log.read_text()


def test_a_drop_also_drops_that_space_s_search_indexes(spaces_url, pg_server, monkeypatch):
    from nexus.search import pg_vectors
    monkeypatch.setattr(pg_vectors, "INDEX_AT", 20)     # (the bootstrap alone passes it)
    dbname = urlsplit(spaces_url).path.lstrip("/")
    registry = Spaces(spaces_url)
    try:
        names = {}
        for name in ("stays", "goes"):
            registry.create(name)
            with registry.acquire(name) as nexus:
                _result(nexus, _person(f"p-{name}"))
                names[name] = nexus.search.pg_vectors.index_names

        def present(indexes: list[str]) -> int:
            listed = ", ".join(f"'{i}'" for i in indexes)      # (hex names: no quoting)
            return pg_server.sql(f"SELECT count(*) FROM pg_indexes WHERE indexname IN "
                                 f"({listed})", dbname)[0][0]
        # (one HNSW index per space: its concepts'; links have no vectors of their own)
        assert present(names["stays"]) == 1 and present(names["goes"]) == 1
        assert registry.drop("goes") is True
        assert present(names["goes"]) == 0
        assert present(names["stays"]) == 1
        with registry.acquire("stays") as nexus:
            assert _people(_result(nexus, PEOPLE)) == ["p-stays"]
            hits = nexus.execute_kip({"command": 'SEARCH CONCEPT "p-stays" LIMIT 1'})
            assert [h["name"] for h in hits["result"]] == ["p-stays"], hits
    finally:
        registry.close()
