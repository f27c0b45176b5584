"""`load_capsules`: files and folders, each file one transaction, counts, progress, big files
split into statements (same result, positions still point into the file)."""
from __future__ import annotations

import pytest

import nexus.ops.capsules as capsules
from nexus.ops.capsules import load_capsules, split_statements

SCHEMA = """
// the medical schema
UPSERT {
  CONCEPT ?d { {type: "$ConceptType", name: "Drug"} SET ATTRIBUTES { description: "// not a comment" } }
  CONCEPT ?s { {type: "$ConceptType", name: "Symptom"} }
  CONCEPT ?t { {type: "$PropositionType", name: "treats"} }
}
WITH METADATA { source: "schema" }
"""

DATA = """UPSERT { CONCEPT ?h { {type: "Symptom", name: "Headache"} } }
UPSERT {
  CONCEPT ?a { {type: "Drug", name: "Aspirin"} SET ATTRIBUTES { note: "UPSERT { inside a string" }
    SET PROPOSITIONS { ("treats", {type: "Symptom", name: "Headache"}) } }
}   UPSERT { CONCEPT ?i { {type: "Drug", name: "Ibuprofen"} } }
// trailing comment
"""


def dump(nx):
    return nx.store.dump()


@pytest.fixture
def files(tmp_path):
    root = tmp_path / "caps"
    (root / "b").mkdir(parents=True)
    (root / "a_schema.kip").write_text(SCHEMA, "utf-8")
    (root / "b" / "data.kip").write_text(DATA, "utf-8")
    (root / "notes.txt").write_text("not a capsule", "utf-8")
    return root


def test_folder_is_loaded_recursively_in_order(nx, files):
    results = load_capsules(nx, [files])
    assert [r["path"] for r in results] == [str(files / "a_schema.kip"),
                                            str(files / "b" / "data.kip")]
    assert results[0] == {"path": str(files / "a_schema.kip"), "statements": 1,
                          "concepts_created": 3, "concepts_updated": 0,
                          "propositions_created": 0, "propositions_updated": 0, "deleted": 0}
    assert results[1]["concepts_created"] == 3 and results[1]["propositions_created"] == 1
    again = load_capsules(nx, [files / "b" / "data.kip"])
    assert again[0]["concepts_created"] == 0 and again[0]["concepts_updated"] == 3
    assert again[0]["propositions_updated"] == 1


def test_a_failing_file_leaves_nothing_of_itself(nx, files, tmp_path):
    bad = tmp_path / "bad.kip"
    bad.write_text(DATA + '\nUPSERT { CONCEPT ?x { {type: "Gene", name: "X"} } }\n', "utf-8")
    load_capsules(nx, [files / "a_schema.kip"])
    before = dump(nx)
    results = load_capsules(nx, [bad, files / "b" / "data.kip"])
    assert len(results) == 1 and results[0]["error"]["code"] == "KIP_2001"
    assert results[0]["error"]["data"]["line"] == 8          # a line of the file
    assert dump(nx) == before
    results = load_capsules(nx, [bad, files / "b" / "data.kip"], keep_going=True)
    assert "error" in results[0] and results[1]["concepts_created"] == 3


def test_big_files_are_split_but_stay_atomic(nx, files, monkeypatch):
    monkeypatch.setattr(capsules, "SPLIT_BYTES", 10)
    progress = []
    results = load_capsules(nx, [files], progress=lambda *a: progress.append(a))
    assert [r["statements"] for r in results] == [1, 3]
    assert progress[-1][1] == progress[-1][2] == len(DATA)
    assert [p[1] for p in progress if p[0].endswith("data.kip")] == sorted(
        p[1] for p in progress if p[0].endswith("data.kip"))
    with nx.store.read() as t:
        drug = t.symbol_id("Drug")
        n = t.concept_id(drug, "Aspirin")
        assert t.attributes(n) == {"note": "UPSERT { inside a string"}
    # an error in the last statement of a split file undoes the statements before it
    before = dump(nx)
    path = files / "b" / "data.kip"
    path.write_text(DATA.replace("Ibuprofen\"} }", "Ibuprofen\"} SET ATTRIBUTES { _x: 1 } }"))
    results = load_capsules(nx, [path])
    assert results[0]["error"]["code"] == "KIP_2002"
    assert results[0]["error"]["data"]["line"] == 5
    assert dump(nx) == before


def test_split_statements():
    pieces = split_statements(DATA)
    assert len(pieces) == 3
    assert "".join(p.lstrip("\n ") for p in pieces) == DATA     # nothing lost, in order
    # each piece keeps the (line, column) it had in the file
    def line_col(text, i):
        return text.count("\n", 0, i) + 1, i - text.rfind("\n", 0, i)
    assert line_col(pieces[2], pieces[2].index("UPSERT")) == line_col(
        DATA, DATA.index("UPSERT { CONCEPT ?i"))
    assert split_statements("// only a comment\n") == []


def test_missing_path(nx, tmp_path):
    from nexus.errors import KipError
    with pytest.raises(KipError) as info:
        load_capsules(nx, [tmp_path / "nope.kip"])
    assert info.value.code.value == "KIP_3002"


def test_loading_is_protected_unless_privileged(nx, tmp_path):
    path = tmp_path / "evil.kip"
    path.write_text('UPSERT { CONCEPT ?x { {type: "Domain", name: "CoreSchema"} '
                    'SET ATTRIBUTES { description: "mine" } } }', "utf-8")
    assert load_capsules(nx, [path])[0]["error"]["code"] == "KIP_3004"
    assert load_capsules(nx, [path], privileged=True)[0]["concepts_updated"] == 1


def test_write_batch_is_all_or_nothing(nx):
    nx.execute_kip({"command": SCHEMA})
    before = dump(nx)
    with pytest.raises(RuntimeError):
        with nx.write_session() as batch:
            batch.run('UPSERT { CONCEPT ?h { {type: "Symptom", name: "Headache"} } }')
            raise RuntimeError("boom")
    assert dump(nx) == before


def test_bundled_capsules_load_again_leaving_protected_elements_as_they_are(nx):
    """CONTRACT §10: loading the bundled capsules into the database they bootstrapped is not
    KIP_3004, and writes nothing to a protected element (core definitions, CoreSchema and
    its core links, $self, $system): only the ordinary definitions are re-stated."""
    from importlib.resources import as_file, files as package_files

    from nexus.exec.protect import is_protected

    def protected(nx):
        with nx.store.read() as t:
            return {n: (t.attributes(n), t.metadata(n)) for n in t.elements()
                    if is_protected(t, t.head(n))}

    before = protected(nx)
    assert len(before) == 11        # 5 core nodes, 4 core links, 2 actors
    with as_file(package_files("nexus.bundled")) as folder:
        results = load_capsules(nx, [folder])
    assert [r.get("error") for r in results] == [None] * len(capsules.BUNDLED)
    assert sum(r["concepts_created"] + r["propositions_created"] for r in results) == 0
    assert protected(nx) == before
