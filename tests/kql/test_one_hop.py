"""One hop from a constant, then a type test of the far end — the commonest FIND (the peers'
Q2: `?d {type: "Drug"} (?d, "treats", {type: "Symptom", name: :s})`).

Spec §3 (FIND/WHERE): a solution binds ?d to a concept that has a `treats` link to the
symptom AND the type Drug; the answer is the distinct values of the FIND expressions.
These tests state the answers computed from how the graph was built — concepts of other
types linked the same way are not answers, a name test keeps only that concept, unknown
types or predicates answer nothing — in both link directions, with a link variable, under
both FIND executors and both stores. The row path runs the expand and the type test as one
stage (`operators._c_expand_checked`): it must give the rows, and count the work, that the
two stages give one after the other. The row cap applies to the one-hop stream as to any
(`shape.first_distinct_capped` against `limited` + `first_distinct`).
"""
from __future__ import annotations

import pytest

from kqlsupport import MODES, STORES, open_db
from nexus.config import Limits
from nexus.errors import KipError
from nexus.exec import kql, operators
from nexus.exec.context import ExecContext
from nexus.exec.env import Env
from nexus.exec.shape import first_distinct, first_distinct_capped, limited
from nexus.plan import physical as P
from nexus.syntax import parse

N = 40


def _build(nx) -> None:
    """Drugs d0..d39; d0..d19 treat S, d0..d2 treat T; persons p0..p4 and one symptom
    also `treats` S (not drugs); lab L `tests` d0..d9 and p0."""
    with nx.store.write() as t:
        sid = {name: t.intern(name) for name in
               ("Drug", "Symptom", "Person", "Lab", "treats", "tests")}

        def concept(type_: str, name: str) -> int:
            k = t.new_id()
            t.create_concept(k, sid[type_], name, {}, {})
            return k

        def link(s: int, p: str, o: int) -> None:
            t.create_link(t.new_id(), s, sid[p], o, {}, {})

        s, tt, lab = concept("Symptom", "S"), concept("Symptom", "T"), concept("Lab", "L")
        for i in range(N):
            d = concept("Drug", f"d{i}")
            if i < 20:
                link(d, "treats", s)
            if i < 3:
                link(d, "treats", tt)
            if i < 10:
                link(lab, "tests", d)
        for i in range(5):
            p = concept("Person", f"p{i}")
            link(p, "treats", s)
            if i == 0:
                link(lab, "tests", p)
        link(concept("Symptom", "S-like"), "treats", s)


@pytest.fixture(scope="module", params=STORES)
def db(request, tmp_path_factory):
    nx = open_db(request.param, tmp_path_factory.mktemp("hop") if request.param == "lmdb"
                 else None)
    _build(nx)
    yield nx
    nx.close()


def _find(nx, command: str, mode: str, **params):
    nx.columnar = mode
    response = nx.execute_kip_readonly({"command": command, "parameters": params})
    assert "result" in response, response
    return response["result"]


Q2 = '''FIND(?d.name) WHERE {
  ?d {type: :type}
  (?d, "treats", {type: "Symptom", name: :symptom})
}'''


@pytest.mark.parametrize("mode", MODES)
def test_in_links_keep_the_type(db, mode):
    assert sorted(_find(db, Q2, mode, type="Drug", symptom="S")) == \
        sorted(f"d{i}" for i in range(20))
    assert sorted(_find(db, Q2, mode, type="Drug", symptom="T")) == ["d0", "d1", "d2"]
    assert sorted(_find(db, Q2, mode, type="Person", symptom="S")) == \
        [f"p{i}" for i in range(5)]
    assert _find(db, Q2, mode, type="Symptom", symptom="S") == ["S-like"]
    assert _find(db, Q2, mode, type="Lab", symptom="S") == []
    assert _find(db, Q2, mode, type="NoSuchType", symptom="S") == []


@pytest.mark.parametrize("mode", MODES)
def test_out_links_and_a_name_test(db, mode):
    q = 'FIND(?d.name) WHERE { ?d {type: "Drug"} ({type: "Lab", name: "L"}, "tests", ?d) }'
    assert sorted(_find(db, q, mode)) == sorted(f"d{i}" for i in range(10))
    q = '''FIND(?d.name) WHERE { ?d {name: :name}
                                 ({type: "Lab", name: "L"}, "tests", ?d) }'''
    assert _find(db, q, mode, name="d7") == ["d7"]
    assert _find(db, q, mode, name="d30") == []          # a drug, but not tested by L
    assert _find(db, q, mode, name="p0") == ["p0"]       # tested by L: any type
    assert _find(db, q, mode, name="S") == []


@pytest.mark.parametrize("mode", MODES)
def test_unknown_predicate_and_link_variable(db, mode):
    q = 'FIND(?d.name) WHERE { ?d {type: "Drug"} (?d, "cures", {type: "Symptom", name: "S"}) }'
    assert _find(db, q, mode) == []
    q = '''FIND(?d.name, ?l) WHERE { ?d {type: "Drug"}
                                     ?l (?d, "treats", {type: "Symptom", name: "T"}) }'''
    names, links = _find(db, q, mode)
    assert sorted(names) == ["d0", "d1", "d2"]
    assert len(set(map(str, links))) == 3 and all(":treats" in str(x) for x in links)


def test_the_fused_stage_gives_the_chain_rows_and_work(db):
    """`_c_expand_checked` against `_c_expand` then `_c_check_concept`: same rows, in the
    same order, and the same work counted (the hub choice reads it), for each end test."""
    db.columnar = "never"
    heads = ['?d {type: "Drug"}', '?d {type: "Person"}', '?d {name: "d4"}',
             '?d {type: "Nope"}']
    compared: list[str] = []
    with db.read_session() as ctx:
        for head in heads:
            for hop in ('(?d, "treats", {type: "Symptom", name: "S"})',
                        '?l (?d, "treats", {type: "Symptom", name: "S"})',
                        '({type: "Lab", name: "L"}, "tests", ?d)'):
                text = f"FIND(?d) WHERE {{ {head} {hop} }}"
                prep = kql.prepare(ctx, parse(text).command, {}, cache=False)
                steps = prep.plan.steps
                layouts = operators.step_layouts(prep.plan)
                k = next((i for i, s in enumerate(steps[:-1]) if type(s) is P.Expand
                          and type(steps[i + 1]) is P.CheckConcept), None)
                if k is None:           # planned another way (a name scan first)
                    continue
                expand, check = steps[k], steps[k + 1]
                assert check.var == expand.end
                compared.append(text)
                outs = []
                for stage in (operators._c_expand_checked(expand, check, layouts[k]),
                              operators._chained(operators._c_expand(expand, layouts[k]),
                                                 operators._c_check_concept(
                                                     check, layouts[k + 1]))):
                    env = Env(ctx, {})
                    rows = list(operators.compile_step(steps[0], layouts[0])(env, iter(((),))))
                    outs.append((list(stage(env, iter(rows))), env.work))
                assert outs[0] == outs[1], text
                assert outs[0][0] or "Nope" in head, text
    assert len(compared) >= 6, compared         # Drug and Person, each hop


def _ctx(max_rows: int) -> ExecContext:
    return ExecContext(None, Limits(max_rows=max_rows), 1e18)  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [0, 1, 5, 6, 12])
@pytest.mark.parametrize("stop", [None, 1, 3, 100])
def test_capped_first_distinct_is_limited_then_first_distinct(n, stop):
    rows = [(i % 4, i) for i in range(n)]           # repeats on position 0
    for k in (0, 1):
        outcomes = []
        for run in (lambda: first_distinct(limited(_ctx(5), iter(rows)), (k,), stop),
                    lambda: first_distinct_capped(_ctx(5), iter(rows), k, stop)):
            try:
                outcomes.append(run())
            except KipError as err:
                outcomes.append(err.code)
        assert outcomes[0] == outcomes[1], (n, stop, k)


def test_the_row_cap_stops_a_one_hop_query(tmp_path):
    nx = open_db("lmdb", tmp_path, max_rows=5)
    try:
        _build(nx)
        for mode in MODES:
            nx.columnar = mode
            response = nx.execute_kip_readonly({"command": Q2, "parameters": {
                "type": "Drug", "symptom": "S"}})
            assert response["error"]["code"] == "KIP_4002", response
            response = nx.execute_kip_readonly({"command": Q2, "parameters": {
                "type": "Drug", "symptom": "T"}})
            assert sorted(response["result"]) == ["d0", "d1", "d2"]
    finally:
        nx.close()
