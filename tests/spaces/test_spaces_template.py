"""A new space is a copy of a bootstrapped template (nexus.spaces): as complete as a space
bootstrapped on its own, made without a bootstrap per space, and rebuilt when the bundled
capsules change."""
from __future__ import annotations

import os

import nexus.ops.capsules as capsules
import nexus.spaces as spaces_module
from nexus import Nexus
from nexus.spaces import TEMPLATES, Spaces

TYPES = 'FIND(?t.name) WHERE { ?t {type: "$ConceptType"} } ORDER BY ?t.name LIMIT 100'
EVENT = 'FIND(?t.attributes.description) WHERE { ?t {type: "$ConceptType", name: "Event"} }'


def _run(nexus: Nexus, command: str) -> object:
    response = nexus.execute_kip_readonly({"command": command})
    assert "error" not in response, response
    return response["result"]


def test_a_created_space_holds_what_a_bootstrap_gives(tmp_path):
    registry = Spaces(str(tmp_path / "d"))
    assert registry.create("one") is True
    assert registry.create("one") is False
    with Nexus.open(str(tmp_path / "alone")) as alone:
        expected = _run(alone, TYPES)
    with registry.acquire("one") as one:
        assert _run(one, TYPES) == expected
        assert one.execute_kip({"command": 'SEARCH CONCEPT "persn" LIMIT 1'})["result"], \
            "the vector index came with the copy"
    registry.close()


def test_spaces_are_copied_not_bootstrapped_each(tmp_path, monkeypatch):
    opened = []
    real_open = Nexus.open

    def counting_open(location, **options):
        opened.append(location)
        return real_open(location, **options)
    monkeypatch.setattr(spaces_module.Nexus, "open", counting_open)
    registry = Spaces(str(tmp_path / "d"))
    for name in ("a", "b", "c"):
        assert registry.create(name)
    assert len(opened) == 1 and TEMPLATES in str(opened[0])     # the template, once
    assert registry.names() == ["a", "b", "c"]                  # the template is no space


def test_a_changed_bundled_set_builds_a_new_template(tmp_path, monkeypatch):
    root = tmp_path / "d"
    Spaces(str(root)).create("before")
    [old_key] = os.listdir(root / TEMPLATES)
    original = capsules.bundled_text

    def changed(name: str) -> str:
        text = original(name)
        if name != "Event.kip":
            return text
        new = text.replace('description: "', 'description: "A changed episode. ', 1)
        assert new != text
        return new
    monkeypatch.setattr(capsules, "bundled_text", changed)
    monkeypatch.setattr(spaces_module, "bundled_text", changed)
    registry = Spaces(str(root))
    registry.create("after")
    assert os.listdir(root / TEMPLATES) != [old_key]
    assert len(os.listdir(root / TEMPLATES)) == 1               # the stale one is gone
    with registry.acquire("after") as after:
        [description] = _run(after, EVENT)
        assert description.startswith("A changed episode")
    registry.close()


def test_threads_churning_through_few_open_spaces_each_see_their_own(tmp_path):
    import random
    from concurrent.futures import ThreadPoolExecutor
    registry = Spaces(str(tmp_path / "d"), max_open=2)
    names = [f"s{i}" for i in range(8)]
    for name in names:
        registry.create(name)
        with registry.acquire(name) as nexus:
            assert "error" not in nexus.execute_kip({"command": (
                f'UPSERT {{ CONCEPT ?p {{ {{type: "Person", name: "{name}"}} '
                f'SET ATTRIBUTES {{ person_class: "Human" }} }} }}')})

    def visit(seed: int) -> list[str]:
        rng, wrong = random.Random(seed), []
        for _ in range(15):
            name = rng.choice(names)
            with registry.acquire(name) as nexus:
                found = nexus.execute_kip_readonly({"command": (
                    'FIND(?p.name) WHERE { ?p {type: "Person"} }')})["result"]
                if [n for n in found if n.startswith("s")] != [name]:
                    wrong.append(name)
        return wrong
    with ThreadPoolExecutor(6) as pool:
        assert [w for ws in pool.map(visit, range(6)) for w in ws] == []
    assert registry.open_count() <= 2
    registry.close()


def test_the_template_depends_on_what_shapes_a_store_not_on_limits():
    from nexus.spaces import template_key
    plain = template_key({})
    assert template_key({"durable": False, "query_timeout": 5, "bootstrap": True}) == plain
    assert template_key({"self_id": "principal-1"}) != plain
    assert template_key({"bootstrap": False}) != plain


def test_spaces_on_an_unusable_url_are_refused_without_making_a_folder(tmp_path, monkeypatch,
                                                                       capsys):
    """`--spaces` is a directory or a postgresql:// URL (tests/postgresql/test_pg_spaces.py):
    another URL is refused with a message that says what to give; an unreachable database
    is an error naming the cause. Neither shows a password nor makes a folder named after
    the URL."""
    import pytest

    from nexus.cli import main
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="a directory or a postgresql:// URL"):
        Spaces("mysql://agent:s3cret@db.example:3306/memory")
    code = main(["space", "list", "--spaces", "mysql://agent:s3cret@db.example/memory"])
    err = capsys.readouterr().err
    assert code != 0 and "--spaces takes a directory or a postgresql:// URL" in err
    pytest.importorskip("psycopg")
    url = "postgresql://agent:s3cret@127.0.0.1:1/memory?connect_timeout=3"
    code = main(["space", "list", "--spaces", url])
    err += capsys.readouterr().err
    assert code != 0
    assert "unreachable" in err and "127.0.0.1" in err, err
    assert "s3cret" not in err
    assert os.listdir(tmp_path) == []
