"""The bundled capsules are the KIP v1.0-RC11 ecosystem's (spec Appendices 2-3), and every one
of the ecosystem's capsules loads unchanged with the real `kip load` into a database nexus
bootstrapped (CONTRACT §10: re-applying content a database holds is a no-op, never KIP_3004;
a protected element given another value is still KIP_3004). docs/decisions.md "Capsules".

Skipped when the reference material (`../shared`) is absent."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import pytest

from nexus.api import Nexus
from nexus.exec.protect import is_core_link
from nexus.ops.capsules import BUNDLED

from clirun import kip_in_process  # tests/clirun.py (tests/ is on the path)

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / ".." / "shared" / "spec" / "capsules-v1.0-RC11"
pytestmark = pytest.mark.skipif(not REFERENCE.is_dir(), reason="../shared is absent")

PROTECTED = [("$ConceptType", "$ConceptType"), ("$ConceptType", "$PropositionType"),
             ("$ConceptType", "Domain"), ("$PropositionType", "belongs_to_domain"),
             ("Domain", "CoreSchema"), ("Person", "$self"), ("Person", "$system")]


def reference_files() -> list[str]:
    return sorted(str(p.relative_to(REFERENCE)) for p in REFERENCE.rglob("*.kip"))


def kip(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([sys.executable, "-m", "nexus.cli", *args], env=env,
                          capture_output=True, text=True, timeout=300)


def without_ids_and_comments(text: str) -> str:
    """An actor capsule minus its `id` attribute line and its `//` comment lines."""
    text = re.sub(r'\n *id: "[^"]*",', "", text)
    return re.sub(r"^//[^\n]*\n", "", text, flags=re.M)


def test_the_bundled_set_is_the_published_set():
    assert sorted(BUNDLED) == reference_files()


@pytest.mark.parametrize("name", BUNDLED)
def test_each_bundled_capsule_is_the_published_text(name):
    bundled = files("nexus.bundled").joinpath(name).read_text("utf-8")
    published = (REFERENCE / name).read_text("utf-8")
    if name.startswith("persons/"):         # the one nexus change (docs/decisions.md)
        assert re.search(r'\n *id: "', published) and not re.search(r'\n *id: "', bundled)
        bundled, published = map(without_ids_and_comments, (bundled, published))
    assert bundled == published


def state(db: Path) -> dict:
    """{(type, name): (attributes, metadata)} of the protected concepts, and the number of
    elements."""
    with Nexus.open(str(db)) as nx, nx.store.read() as t:
        out: dict = {"elements": t.count_concepts() + t.count_links()}
        for type_, name in PROTECTED:
            n = t.concept_id(t.symbol_id(type_), name)
            out[(type_, name)] = (t.attributes(n), t.metadata(n))
        core = t.concept_id(t.symbol_id("Domain"), "CoreSchema")
        out["core links"] = {link: (t.attributes(link), t.metadata(link))
                             for _, _, link in t.in_links(core)
                             if is_core_link(t, t.head(link))}
        assert len(out["core links"]) == 4
        return out


@pytest.fixture(params=["lmdb", "postgresql"])
def database(request, tmp_path):
    """A database location for `kip --db`: an LMDB directory, or a fresh PostgreSQL database
    of the session's server (tests/pgtest.py; skipped without the postgres extra)."""
    if request.param == "postgresql":
        return request.getfixturevalue("pg_server").fresh_database("capsules")
    return tmp_path / "db"


@pytest.mark.slow
def test_every_reference_capsule_loads_unchanged_with_kip_load(database):
    db = database
    created = kip_in_process("exec", "--db", str(db), "DESCRIBE PRIMER")  # bootstraps it
    assert created.returncode == 0, created.stderr
    before = state(db)
    # One `kip load` per published capsule: `nexus.cli.main` in this process (a subprocess
    # each cost 20 start-ups); the whole folder at the end goes through a real `kip load`.
    for name in reference_files():
        proc = kip_in_process("load", "--db", str(db), str(REFERENCE / name))
        assert proc.returncode == 0, (name, proc.stdout[-2000:], proc.stderr[-2000:])
        report = json.loads(proc.stdout)
        assert [r.get("error") for r in report] == [None], name
        assert report[0]["concepts_created"] == report[0]["propositions_created"] == 0, name
    after = state(db)
    assert after["elements"] == before["elements"]          # the same graph, nothing new
    placeholders = {"$self": "uuc56-gyb", "$system": "aaaaa-aa"}
    for key in PROTECTED:
        if key[0] == "Person":      # the published placeholder id is written: not protected
            attrs, meta = after[key]
            assert attrs.pop("id") == placeholders[key[1]]
            assert attrs == before[key][0], key
            assert meta["_version"] == before[key][1]["_version"] + 1
        else:
            assert after[key] == before[key], key           # a no-op: not even _version
    assert after["core links"] == before["core links"]
    # The whole folder again, in one real `kip load` process: still loads.
    proc = kip("load", "--db", str(db), str(REFERENCE))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(json.loads(proc.stdout)) == len(reference_files())


def test_a_protected_element_with_another_value_is_still_refused(tmp_path):
    db = tmp_path / "db"
    assert kip("exec", "--db", str(db), "DESCRIBE PRIMER").returncode == 0
    before = state(db)
    genesis = (REFERENCE / "Genesis.kip").read_text("utf-8")
    changed = tmp_path / "Genesis.kip"
    changed.write_text(genesis.replace('display_hint: "📦"', 'display_hint: "🎁"'), "utf-8")
    assert changed.read_text("utf-8") != genesis
    proc = kip("load", "--db", str(db), str(changed))
    assert proc.returncode == 1
    assert json.loads(proc.stdout)[0]["error"]["code"] == "KIP_3004"
    me = (REFERENCE / "persons" / "self.kip").read_text("utf-8")
    directive = "I must protect my core identity"
    assert directive in me
    changed = tmp_path / "self.kip"
    changed.write_text(me.replace(directive, "I may give up my core identity"), "utf-8")
    proc = kip("load", "--db", str(db), str(changed))
    assert proc.returncode == 1
    assert json.loads(proc.stdout)[0]["error"]["code"] == "KIP_3004"
    assert state(db) == before                       # a failed capsule leaves nothing

