"""`NOT { (?x, "p", C) }` with C a constant clause — the block that excludes the neighbours
of one concept (spec §3.3 NOT: drop the outer rows for which the block has a solution).

The row path runs such a block as an anti join that probes row by row and switches to the
set of C's neighbours once the rows are many, and puts that set before the FILTERs written
before the block once it is complete (`nexus.exec.anti_link`). These tests state the
answers KIP gives — computed here from how the graph was built — on a hub (hundreds of
rows: the set is used) and on a small node (a few probes), in both link directions, with an
unknown constant and with a null (OPTIONAL) outer value; under both FIND executors, and with
the switch forced early and never taken; and that the set is used where it should be.
"""
from __future__ import annotations

import pytest

import nexus.exec.anti_link as anti_link
from kqlsupport import MODES, STORES, open_db

N = 300


def _build(nx) -> None:
    """Drugs d0..d299 (risk i % 5 + 1, meta level i % 4) all treating the hub symptom H,
    d0..d9 treating S; class C has the drugs with i % 3 == 0 (and persons p0..p49, so its
    neighbour set holds other types too); lab L `tests` the drugs with i % 4 == 0; the drugs
    with i % 7 == 0 have a side effect E{i}, and E0, E14, … (i % 14 == 0) are in class C."""
    with nx.store.write() as t:
        sid = {name: t.intern(name) for name in
               ("Drug", "Symptom", "DrugClass", "Person", "Lab", "Effect", "treats",
                "is_class_of", "tests", "has_side_effect")}

        def concept(type_: str, name: str, attrs: dict | None = None,
                    meta: dict | None = None) -> int:
            k = t.new_id()
            t.create_concept(k, sid[type_], name, attrs or {}, meta or {})
            return k

        def link(s: int, p: str, o: int) -> None:
            t.create_link(t.new_id(), s, sid[p], o, {}, {})

        hub, small = concept("Symptom", "H"), concept("Symptom", "S")
        cls, lab = concept("DrugClass", "C"), concept("Lab", "L")
        concept("DrugClass", "Empty")
        for i in range(50):
            link(concept("Person", f"p{i}"), "is_class_of", cls)
        for i in range(N):
            d = concept("Drug", f"d{i}", {"risk": i % 5 + 1, "info": {"level": i % 3}},
                        {"level": i % 4})
            link(d, "treats", hub)
            if i < 10:
                link(d, "treats", small)
            if i % 3 == 0:
                link(d, "is_class_of", cls)
            if i % 4 == 0:
                link(lab, "tests", d)
            if i % 7 == 0:
                e = concept("Effect", f"E{i}")
                link(d, "has_side_effect", e)
                if i % 14 == 0:
                    link(e, "is_class_of", cls)


@pytest.fixture(scope="module", params=STORES)
def db(request, tmp_path_factory):
    nx = open_db(request.param, tmp_path_factory.mktemp("anti") if request.param == "lmdb"
                 else None)
    _build(nx)
    yield nx
    nx.close()


def _find(nx, command: str, mode: str, **params) -> list:
    nx.columnar = mode
    response = nx.execute_kip_readonly({"command": command, "parameters": params})
    assert "result" in response, response
    return sorted(response["result"])


def _names(keep) -> list[str]:
    return sorted(f"d{i}" for i in range(N) if keep(i))


Q3_SHAPE = '''FIND(?d.name) WHERE {
  ?d {type: "Drug"}
  (?d, "treats", {type: "Symptom", name: :symptom})
  FILTER(?d.attributes.risk < :max_risk)
  NOT { (?d, "is_class_of", {type: "DrugClass", name: :cls}) }
}'''


@pytest.fixture(params=["default", "early", "never"])
def switch(request, monkeypatch):
    """The anti join's switch to the neighbour set: as shipped, at the first row, never."""
    if request.param == "early":
        monkeypatch.setattr(anti_link, "PROBES_BEFORE_SCAN", 0)
        monkeypatch.setattr(anti_link, "SCAN_PER_PROBE", 1)
    elif request.param == "never":
        monkeypatch.setattr(anti_link, "PROBES_BEFORE_SCAN", 10 ** 9)
    return request.param


@pytest.mark.parametrize("mode", MODES)
def test_hub_and_small_node(db, mode, switch):
    hub = _names(lambda i: i % 5 + 1 < 3 and i % 3 != 0)
    assert _find(db, Q3_SHAPE, mode, symptom="H", max_risk=3, cls="C") == hub
    small = _names(lambda i: i < 10 and i % 5 + 1 < 3 and i % 3 != 0)
    assert _find(db, Q3_SHAPE, mode, symptom="S", max_risk=3, cls="C") == small
    # A class with no members, and one that does not exist: the NOT drops nothing.
    every = _names(lambda i: i % 5 + 1 < 3)
    assert _find(db, Q3_SHAPE, mode, symptom="H", max_risk=3, cls="Empty") == every
    assert _find(db, Q3_SHAPE, mode, symptom="H", max_risk=3, cls="Nope") == every


@pytest.mark.parametrize("mode", MODES)
def test_constant_as_subject(db, mode, switch):
    q = '''FIND(?d.name) WHERE {
      ?d {type: "Drug"}
      (?d, "treats", {type: "Symptom", name: "H"})
      FILTER(?d.metadata.level != 1)
      NOT { ({type: "Lab", name: "L"}, "tests", ?d) }
    }'''
    assert _find(db, q, mode) == _names(lambda i: i % 4 != 1 and i % 4 != 0)


@pytest.mark.parametrize("mode", MODES)
def test_flipped_and_nested_paths(db, mode, switch):
    q = '''FIND(?d.name) WHERE {
      ?d {type: "Drug"}
      (?d, "treats", {type: "Symptom", name: "H"})
      FILTER(3 > ?d.attributes.risk)
      FILTER(?d.attributes.info.level == :level)
      FILTER(?d.attributes.risk.deeper == null)
      NOT { (?d, "is_class_of", {type: "DrugClass", name: "C"}) }
    }'''
    assert _find(db, q, mode, level=1) == _names(
        lambda i: i % 5 + 1 < 3 and i % 3 == 1)


@pytest.mark.parametrize("mode", MODES)
def test_null_outer_value_is_kept(db, mode, switch):
    # ?e is null for drugs without a side effect: the NOT's link cannot exist, the row stays.
    q = '''FIND(?d.name) WHERE {
      ?d {type: "Drug"}
      OPTIONAL { (?d, "has_side_effect", ?e) }
      NOT { (?e, "is_class_of", {type: "DrugClass", name: "C"}) }
    }'''
    assert _find(db, q, mode) == _names(lambda i: i % 14 != 0)


def test_the_set_is_read_for_a_hub_only(db, monkeypatch):
    reads: list[bool] = []          # per read of C's links: whether the set is now complete
    real = anti_link.Probe._read_on

    def spy(self, probes):
        real(self, probes)
        reads.append(self.members is not None)
    monkeypatch.setattr(anti_link.Probe, "_read_on", spy)
    _find(db, Q3_SHAPE, "never", symptom="S", max_risk=3, cls="C")
    assert reads == []              # 10 candidates: probed one by one
    _find(db, Q3_SHAPE, "never", symptom="H", max_risk=3, cls="C")
    assert reads and reads[-1]      # 300 candidates: C's 150 links read, then the set


def test_regex_filter_keeps_the_written_order(db):
    # A REGEX that raises on its first row raises whatever the NOT would have dropped.
    q = Q3_SHAPE.replace("?d.attributes.risk < :max_risk", "REGEX(?d.name, :pattern)")
    response = db.execute_kip_readonly({"command": q, "parameters": {
        "symptom": "H", "cls": "C", "pattern": "("}})
    assert response["error"]["code"] == "KIP_1001", response
