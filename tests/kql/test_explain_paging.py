"""EXPLAIN (a nexus extension), paging without ORDER BY, and the DELETE … WHERE matcher
(`nexus.exec.kql.solutions`), on both stores."""
from __future__ import annotations

import pytest

from kqlsupport import STORES

from nexus.config import Limits
from nexus.exec import kql
from nexus.exec.context import ExecContext
from nexus.syntax import parse

Q_ANCHORED = '''FIND(?d.name) WHERE {
  ?s {type: "Symptom", name: "Headache"}
  (?d, "treats", ?s)
  ?d {type: "Drug"}
  FILTER(?d.attributes.risk_level < 3)
}'''


def explain(nx, text, **params):
    response = nx.execute_kip({"command": "EXPLAIN " + text, "parameters": params})
    assert "error" not in response, response
    return response["result"]


def ops(plan):
    return [s["op"] for s in plan["steps"]]


@pytest.mark.parametrize("store", STORES)
def test_explain_shape(kql_db, store):
    nx = kql_db(store, "medical")
    out = explain(nx, Q_ANCHORED)
    assert set(out) == {"text", "plan"}
    plan = out["plan"]
    assert isinstance(out["text"], str) and out["text"].count("\n") >= len(plan["steps"])
    for step in plan["steps"]:
        assert set(step) >= {"op", "index", "detail", "estimated_rows"}
        assert isinstance(step["estimated_rows"], (int, float))
        assert isinstance(step["detail"], str)
    assert plan["variables"] == ["s", "d"]
    assert plan["then"][0].startswith("Distinct on ?d")


@pytest.mark.parametrize("store", STORES)
def test_explain_anchors_on_the_constant_and_pushes_the_filter(kql_db, store):
    """The planner starts from the {type, name} clause, expands from it, checks the type,
    then filters as soon as ?d is bound."""
    nx = kql_db(store, "medical")
    plan = explain(nx, Q_ANCHORED)["plan"]
    assert ops(plan) == ["LookupConcept", "ExpandIn", "CheckConcept", "Filter"]
    assert plan["steps"][0]["index"].startswith("type+name")
    assert plan["steps"][1]["index"] == "object-subject-predicate"


@pytest.mark.parametrize("store", STORES)
def test_explain_filter_runs_before_a_later_expansion(kql_db, store):
    nx = kql_db(store, "medical")
    plan = explain(nx, '''FIND(?d.name, ?c.name) WHERE {
      ?d {type: "Drug", name: "Aspirin"}
      (?d, "is_class_of", ?c)
      FILTER(?d.attributes.risk_level < 3)
    }''')["plan"]
    names = ops(plan)
    assert names.index("Filter") < names.index("ExpandOut"), names


@pytest.mark.parametrize("store", STORES)
def test_explain_nested_blocks_and_unions(kql_db, store):
    nx = kql_db(store, "medical")
    out = explain(nx, '''FIND(?d.name, ?se.name, ?p.name) WHERE {
      ?d {type: "Drug"}
      OPTIONAL { (?d, "has_side_effect", ?se) }
      NOT { (?d, "is_class_of", {type: "DrugClass", name: "NSAID"}) }
      UNION { ?p {type: "Product"} }
    } ORDER BY ?d.name LIMIT 5''')
    plan = out["plan"]
    assert ops(plan)[:1] == ["ScanType"]
    assert "Optional" in ops(plan) and "Not" in ops(plan)
    for step in plan["steps"]:
        if step["op"] in ("Optional", "Not"):
            assert step["block"]["steps"], step
    assert len(plan["unions"]) == 1 and ops(plan["unions"][0]) == ["ScanType"]
    assert any(t.startswith("Sort by ?d.name ASC") for t in plan["then"])
    assert "Limit 5" in plan["then"]
    assert "UNION branch 1:" in out["text"]


@pytest.mark.parametrize("store", STORES)
def test_explain_keeps_placeholders_and_does_not_run(kql_db, store):
    """EXPLAIN shows :params as written and does not execute: a {type, name} that matches
    nothing is not an error here (it would be KIP_3002 when run)."""
    nx = kql_db(store, "medical")
    out = explain(nx, 'FIND(?d) WHERE { ?d {type: "Drug", name: :name} }', name="Nope")
    assert ":name" in out["text"]
    assert ops(out["plan"]) == ["LookupConcept"]


@pytest.mark.parametrize("store", STORES)
def test_explain_reports_unbound_variables(kql_db, store):
    nx = kql_db(store, "medical")
    response = nx.execute_kip({"command": 'EXPLAIN FIND(?x) WHERE { ?d {type: "Drug"} }'})
    assert response["error"]["code"] == "KIP_3001"


@pytest.mark.parametrize("store", STORES)
def test_explain_aggregate_and_readonly(kql_db, store):
    nx = kql_db(store, "catalog")
    response = nx.execute_kip_readonly({"command": 'EXPLAIN FIND(?s.name, COUNT(?i)) WHERE '
                                                   '{ (?i, "in_store", ?s) }'})
    assert response["result"]["plan"]["then"][0] == "Aggregate (implicit GROUP BY)"


@pytest.mark.parametrize("store", STORES)
def test_explain_path(kql_db, store):
    nx = kql_db(store, "paths")
    plan = explain(nx, 'FIND(?b) WHERE { ?a {type: "Node", name: "A"} '
                       '(?a, "follows"{1,5}, ?b) }')["plan"]
    assert ops(plan) == ["LookupConcept", "PathWalk"]
    assert "{1,5}" in plan["steps"][1]["detail"]


# --- paging without ORDER BY -------------------------------------------------------------

@pytest.mark.parametrize("store", STORES)
def test_paging_without_order_is_stable_and_complete(kql_db, store):
    """First-found order is stable for an unchanged store: three pages of 4, disjoint, that
    together are the whole answer, and re-reading a page gives the same rows."""
    nx = kql_db(store, "medical")
    text = 'FIND(?d.name, ?d.attributes.risk_level) WHERE { ?d {type: "Drug"} } LIMIT 4'
    full = nx.execute_kip({"command": text.replace(" LIMIT 4", "")})["result"]
    pages, cursors, cursor = [], [], None
    for _ in range(3):
        cmd = text + (" CURSOR :c" if cursor else "")
        response = nx.execute_kip({"command": cmd, "parameters": {"c": cursor} if cursor else {}})
        pages.append(response["result"])
        cursors.append(cursor)
        cursor = response.get("next_cursor")
    assert cursor is None
    assert [len(p[0]) for p in pages] == [4, 4, 3]
    names = [n for p in pages for n in p[0]]
    assert names == full[0] and len(set(names)) == 11
    again = nx.execute_kip({"command": text + " CURSOR :c", "parameters": {"c": cursors[1]}})
    assert again["result"] == pages[1]


# --- the DELETE … WHERE matcher ----------------------------------------------------------

def _solutions(nx, text, variables, params=None):
    where = parse(text).command.where
    with nx.store.read() as txn:
        ctx = ExecContext.start(txn, Limits())
        return list(kql.solutions(ctx, where, variables, params or {}))


@pytest.mark.parametrize("store", STORES)
def test_solutions_for_delete(kql_db, store):
    nx = kql_db(store, "medical")
    rows = _solutions(nx, 'FIND(?l) WHERE { ?l (?s, "treats", ?o) '
                          'FILTER(?l.metadata.source == "untrusted_source_v1") }', ["l"])
    assert len(rows) == 1 and isinstance(rows[0][0], int)
    rows = _solutions(nx, 'FIND(?d) WHERE { ?d {type: "Drug"} (?d, "treats", ?s) }', ["d"])
    assert len(rows) == len(set(rows)) == 9          # distinct per target, not per link
    rows = _solutions(nx, 'FIND(?d, ?s) WHERE { ?d {type: "Drug", name: "Aspirin"} '
                          'OPTIONAL { (?d, "no_such", ?s) } }', ["d", "s"])
    assert len(rows) == 1 and rows[0][1] is None


@pytest.mark.parametrize("store", STORES)
def test_solutions_errors(kql_db, store):
    from nexus.errors import KipError
    nx = kql_db(store, "medical")
    with pytest.raises(KipError) as err:
        _solutions(nx, 'FIND(?d) WHERE { ?d {type: "Drug", name: "Nope"} }', ["d"])
    assert err.value.code.value == "KIP_3002"
    with pytest.raises(KipError) as err:
        _solutions(nx, 'FIND(?d) WHERE { ?d {type: "Drug"} }', ["x"])
    assert err.value.code.value == "KIP_3001"
