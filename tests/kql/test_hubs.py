"""Hub-anchored FINDs (nexus.exec.hubs) and attribute columns (nexus.store.columns.AttrColumn).

An anchored FIND whose constant is a hub runs columnar once its row-path runs have paid for
the arrays; a FILTER on one attribute of a type-checked variable then reads the type's
attribute column. What KIP specifies does not change: the same answers as the row path,
for every kind of attribute value (the FILTER semantics of CONTRACT §4), and never a stale
one after a write — by this process, after a reopen, or (tests/server/test_follower.py)
by another process.
"""
from __future__ import annotations

import pytest

from kqlsupport import STORES, open_db

from nexus.exec import columnar, hubs
from nexus.store.columns import store_columns

HUB = 300                   # drugs that treat the hub symptom (HUB_WORK is 256)
Q3 = ('FIND(?d.name) WHERE { ?d {type: "Drug"} '
      '(?d, "treats", {type: "Symptom", name: :symptom}) '
      'FILTER(?d.attributes.risk < :max_risk) '
      'NOT { (?d, "is_class_of", {type: "DrugClass", name: "NSAID"}) } }')

# Attribute values of every JSON kind, the ones FILTER's ordering treats specially included.
VALUES = [1, 2, 2.0, 2.5, 3, 7, -1, 0, True, False, None, "2", "a", [1], {"x": 1}]


def risk(i: int) -> object:
    return VALUES[i % (len(VALUES) + 1)] if i % (len(VALUES) + 1) < len(VALUES) else "-"


def hub_graph(nx) -> None:
    """HUB drugs treat "Hub"; three treat "Small"; every seventh is an NSAID; drug i's
    `risk` is risk(i) ("-": no such key), `nested` is {"risk": risk(i)}."""
    with nx.store.write() as t:
        drug, symptom, cls = t.intern("Drug"), t.intern("Symptom"), t.intern("DrugClass")
        treats, is_class_of = t.intern("treats"), t.intern("is_class_of")
        hub, small, nsaid = t.new_id(), t.new_id(), t.new_id()
        t.create_concept(hub, symptom, "Hub", {}, {})
        t.create_concept(small, symptom, "Small", {}, {})
        t.create_concept(nsaid, cls, "NSAID", {}, {})
        for i in range(HUB):
            d = t.new_id()
            value = risk(i)
            attrs = {} if value == "-" else {"risk": value, "nested": {"risk": value}}
            t.create_concept(d, drug, f"D{i}", attrs, {})
            t.create_link(t.new_id(), d, treats, hub, {}, {})
            if i < 3:
                t.create_link(t.new_id(), d, treats, small, {}, {})
            if i % 7 == 0:
                t.create_link(t.new_id(), d, is_class_of, nsaid, {}, {})


@pytest.fixture(params=STORES)
def nx(request, tmp_path):
    db = open_db(request.param, tmp_path if request.param == "lmdb" else None)
    hub_graph(db)
    yield db
    db.close()


def find(nx, command, mode="auto", **params):
    nx.columnar = mode
    response = nx.execute_kip({"command": command, "parameters": params})
    assert "error" not in response, response
    return response["result"]


def count_columnar(monkeypatch) -> list[int]:
    ran: list[int] = []
    real = columnar.execute
    monkeypatch.setattr(columnar, "execute", lambda *a: ran.append(1) or real(*a))
    return ran


@pytest.mark.parametrize("op", ["<", "<=", ">", ">=", "==", "!="])
@pytest.mark.parametrize("bound", [2, 2.0, True, "2", None])
@pytest.mark.parametrize("path", ["risk", "nested.risk"])
def test_an_attribute_column_filter_answers_as_the_row_path(nx, op, bound, path):
    """Every kind of value against every kind of bound, top-level and nested keys, missing
    keys: the attribute column gives the row path's answers."""
    command = (f'FIND(?d.name) WHERE {{ ?d {{type: "Drug"}} '
               f'FILTER(?d.attributes.{path} {op} :bound) }}')
    row = find(nx, command, "never", bound=bound)
    assert find(nx, command, "always", bound=bound) == row
    flipped = (f'FIND(?d.name) WHERE {{ ?d {{type: "Drug"}} '
               f'FILTER(:bound {op} ?d.attributes.{path}) }}')
    assert find(nx, flipped, "always", bound=bound) == find(nx, flipped, "never", bound=bound)


def test_the_filter_reads_the_attribute_column(nx):
    with nx.store.read() as t:
        tid = t.symbol_id("Drug")
    find(nx, Q3, "always", symptom="Hub", max_risk=3)
    with nx.store.read() as t:
        snap = t.snapshot_id()
    assert store_columns(nx.store).cached(snap, ("A", tid, "risk"))


def test_a_hub_runs_columnar_once_its_row_runs_paid_for_the_arrays(nx, monkeypatch):
    ran = count_columnar(monkeypatch)
    expected = find(nx, Q3, "never", symptom="Hub", max_risk=3)
    small = find(nx, Q3, "never", symptom="Small", max_risk=3)
    answers = [find(nx, Q3, symptom="Hub", max_risk=3) for _ in range(40)]
    assert all(a == expected for a in answers)
    assert ran, "the hub should have gone columnar"
    assert len(ran) < 40, "the first runs rent the row path"
    ran.clear()
    for _ in range(20):
        assert find(nx, Q3, symptom="Small", max_risk=3) == small
    assert not ran, "an ordinary symptom keeps the row path"


def test_an_element_under_the_hub_bound_keeps_the_row_path(nx, monkeypatch):
    monkeypatch.setattr(hubs, "HUB_WORK", 10 ** 9)
    ran = count_columnar(monkeypatch)
    for _ in range(30):
        find(nx, Q3, symptom="Hub", max_risk=3)
    assert not ran


def test_a_write_is_seen_and_starts_the_choice_over(nx, monkeypatch):
    """After a write the hub first runs on the row path again (new snapshot: nothing
    cached, nothing paid), and every answer follows the write — the attribute column of the
    old snapshot is never read for the new one."""
    monkeypatch.setattr(hubs, "WORK_COST", 1e9)         # one row run pays for everything
    ran = count_columnar(monkeypatch)
    for _ in range(3):
        before = find(nx, Q3, symptom="Hub", max_risk=3)
    assert ran and "D1" in before
    with nx.store.write() as t:
        d1 = t.concept_id(t.symbol_id("Drug"), "D1")
        t.set_attributes(d1, {"risk": 9})
    ran.clear()
    after = find(nx, Q3, symptom="Hub", max_risk=3)
    assert not ran and "D1" not in after
    assert find(nx, Q3, symptom="Hub", max_risk=3) == after
    assert find(nx, Q3, symptom="Hub", max_risk=3) == after
    assert ran, "paid for again on the new snapshot"
    assert after == find(nx, Q3, "never", symptom="Hub", max_risk=3)
    with nx.store.write() as t:
        t.set_attributes(d1, {"risk": 1})
    for _ in range(3):
        assert "D1" in find(nx, Q3, symptom="Hub", max_risk=3)


def test_answers_after_a_reopen(tmp_path):
    db = open_db("lmdb", tmp_path)
    hub_graph(db)
    expected = find(db, Q3, "never", symptom="Hub", max_risk=3)
    for _ in range(5):
        find(db, Q3, "always", symptom="Hub", max_risk=3)
    with db.store.write() as t:
        t.set_attributes(t.concept_id(t.symbol_id("Drug"), "D2"), {"risk": 8})
    db.close()
    db = open_db("lmdb", tmp_path)
    try:
        assert "D2" in expected
        got = find(db, Q3, "always", symptom="Hub", max_risk=3)
        assert got == [n for n in expected if n != "D2"]
        assert got == find(db, Q3, "never", symptom="Hub", max_risk=3)
    finally:
        db.close()


# --- reads under a time budget (`execute_kip_within`: `kip serve` on its event loop) -----

def within(nx, command, budget=60.0, **params):
    nx.columnar = "auto"
    response = nx.execute_kip_within({"command": command, "parameters": params}, budget)
    assert response is not None and "error" not in response, response
    return response["result"]


def test_a_budgeted_hub_read_runs_columnar_once_its_arrays_are_cached(nx, monkeypatch):
    """An unbudgeted run built the hub's arrays: a budgeted run of the hub reads them (the
    row path costs several times more), with the row path's answers."""
    expected = find(nx, Q3, "never", symptom="Hub", max_risk=3)
    ran = count_columnar(monkeypatch)
    within(nx, Q3, symptom="Hub", max_risk=3)           # measured: a hub
    assert not ran
    find(nx, Q3, "always", symptom="Hub", max_risk=3)   # builds and caches the arrays
    ran.clear()
    assert within(nx, Q3, symptom="Hub", max_risk=3) == expected
    assert ran, "cached arrays: the budgeted hub read should run columnar"
    ran.clear()
    small = find(nx, Q3, "never", symptom="Small", max_risk=3)
    for _ in range(3):
        assert within(nx, Q3, symptom="Small", max_risk=3) == small
    assert not ran, "an ordinary symptom keeps the row path"


def test_a_budgeted_hub_read_never_builds_arrays(nx, monkeypatch):
    """Under a budget the rent is paid but nothing is bought: the arrays are not built, so
    the loop is never held by a build; the next unbudgeted run buys them."""
    monkeypatch.setattr(hubs, "WORK_COST", 1e9)         # one row run pays for everything
    ran = count_columnar(monkeypatch)
    expected = find(nx, Q3, "never", symptom="Hub", max_risk=3)
    for _ in range(5):
        assert within(nx, Q3, symptom="Hub", max_risk=3) == expected
    assert not ran
    with nx.store.read() as t:
        snap, tid = t.snapshot_id(), t.symbol_id("Drug")
    assert not store_columns(nx.store).cached(snap, ("A", tid, "risk"))
    assert find(nx, Q3, symptom="Hub", max_risk=3) == expected
    assert ran, "paid for by the budgeted runs: the unbudgeted one buys"


def test_a_budgeted_hub_read_whose_work_exceeds_the_budget_keeps_the_row_path(nx,
                                                                             monkeypatch):
    expected = find(nx, Q3, "never", symptom="Hub", max_risk=3)
    find(nx, Q3, "always", symptom="Hub", max_risk=3)   # the arrays cached
    within(nx, Q3, symptom="Hub", max_risk=3)           # measured, columnar
    monkeypatch.setattr(hubs, "BUDGET_WORK", 1)         # no work fits any budget
    ran = count_columnar(monkeypatch)
    assert within(nx, Q3, symptom="Hub", max_risk=3) == expected
    assert not ran
    assert find(nx, Q3, symptom="Hub", max_risk=3) == expected
    assert ran, "without a budget the cached arrays are read"
