"""Predicate variables (RC11 §3.4.2) on the link indexes: what EXPLAIN shows for each shape, and
the columnar executor answering exactly as the row path, row for row and in the same order
(the results themselves are the language cases of tests/cases/*/predicate_variables.kiptest).
"""
from __future__ import annotations

import random

import pytest

from kqlsupport import STORES

from nexus.api import Nexus


def plan_of(nx: Nexus, text: str) -> list[tuple[str, str]]:
    response = nx.execute_kip({"command": "EXPLAIN " + text})
    assert "result" in response, response
    return [(s["op"], s["index"] or "") for s in response["result"]["plan"]["steps"]]


@pytest.mark.parametrize("store", STORES)
def test_a_bound_end_reads_that_nodes_links_only(kql_db, store):
    """RC11 §3.4.2 "at least one endpoint SHOULD be constrained": from a bound end the plan
    is one prefix range of the s-p-o / o-p-s index — no link scan."""
    nx = kql_db(store, "medical")
    out = plan_of(nx, 'FIND(?p) WHERE { ({type: "Drug", name: "Aspirin"}, ?p, ?o) }')
    assert out == [("LookupConcept", "type+name → id (unique)"),
                   ("ExpandOut", "subject-predicate-object (every predicate of the bound end)")]
    into = plan_of(nx, 'FIND(?p) WHERE { (?s, ?p, {type: "Symptom", name: "Headache"}) }')
    assert [op for op, _ in into] == ["LookupConcept", "ExpandIn"]
    both = plan_of(nx, 'FIND(?p) WHERE { ?d {type: "Drug", name: "Aspirin"} '
                       '?s {type: "Symptom", name: "Fever"} (?d, ?p, ?s) }')
    assert [op for op, _ in both][-1] == "ExpandOut (check end)"
    unified = plan_of(nx, 'FIND(?x) WHERE { ({type: "Drug", name: "Aspirin"}, ?p, '
                          '{type: "Symptom", name: "Headache"}) ({type: "Drug", name: '
                          '"Ibuprofen"}, ?p, ?x) }')
    assert unified[-1][1] == "subject-predicate-object (point)"      # ?p bound: one predicate
    link = plan_of(nx, 'FIND(?p) WHERE { ?l (id: "P:1:treats") ?l (?s, ?p, ?o) }')
    assert [op for op, _ in link] == ["LookupLink", "LinkEnds"]


@pytest.mark.parametrize("store", STORES)
def test_only_an_unconstrained_clause_scans_links(kql_db, store):
    nx = kql_db(store, "medical")
    out = plan_of(nx, 'FIND(?p) WHERE { (?s, ?p, ?o) }')
    assert out == [("ScanLinks",
                    "predicate-subject-object (every predicate, capped by max_link_scan)")]
    pinned = plan_of(nx, 'FIND(?p) WHERE { (?s, ?p, ?o) FILTER(IN(?p, ["treats"])) }')
    assert pinned[0] == ("ScanLinks", "predicate-subject-object (the FILTER's predicates)")


def _random_graph(nx: Nexus, n: int = 120, seed: int = 15) -> None:
    rng = random.Random(seed)
    preds = ["a", "b", "c", "d"]
    lines = ['UPSERT { CONCEPT { {type: "$ConceptType", name: "$ConceptType"} } '
             'CONCEPT { {type: "$ConceptType", name: "$PropositionType"} } '
             'CONCEPT { {type: "$ConceptType", name: "N"} } ' +
             " ".join(f'CONCEPT {{ {{type: "$PropositionType", name: "{p}"}} }}' for p in preds)
             + " }"]
    lines.append("UPSERT { " + " ".join(f'CONCEPT {{ {{type: "N", name: "n{i}"}} }}'
                                        for i in range(n)) + " }")
    blocks = []
    for i in range(n):
        targets = {(rng.choice(preds), rng.randrange(n)) for _ in range(rng.randrange(4))}
        if targets:
            links = " ".join(f'("{p}", {{type: "N", name: "n{j}"}})' for p, j in sorted(targets))
            blocks.append(f'CONCEPT {{ {{type: "N", name: "n{i}"}} SET PROPOSITIONS {{ {links} }} }}')
    lines.append("UPSERT { " + " ".join(blocks) + " }")
    for text in lines:
        response = nx.execute_kip({"command": text})
        assert "result" in response, response


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("query", [
    'FIND(?x.name, ?p, ?y.name) WHERE { ?x {type: "N"} (?x, ?p, ?y) }',
    'FIND(?x.name, ?p, ?y.name, ?l.id) WHERE { ?x {type: "N"} ?l (?y, ?p, ?x) }',
    'FIND(?p, COUNT(?y)) WHERE { ?x {type: "N"} (?x, ?p, ?y) }',
    'FIND(?x.name, ?p, ?y.name) WHERE { ?x {type: "N"} (?x, ?p, ?y) FILTER(IN(?p, ["c", "a"])) }',
    'FIND(?x.name, ?p) WHERE { ?x {type: "N"} OPTIONAL { (?x, ?p, ?y) } }',
    'FIND(?x.name) WHERE { ?x {type: "N"} NOT { (?x, ?p, ?y) FILTER(?p == "a") } }',
])
def test_columnar_answers_as_the_row_path(tmp_path, store, query):
    """The columnar run of a predicate-variable expansion (every predicate's link arrays)
    gives the row path's rows in the row path's order."""
    answers = []
    for mode in ("never", "always"):
        path = None if store == "memory" else str(tmp_path / mode)
        with Nexus.open(path, bootstrap=False, durable=False, columnar=mode) as nx:
            _random_graph(nx)
            response = nx.execute_kip({"command": query})
            assert "result" in response, response
            answers.append(response["result"])
    assert answers[0] == answers[1]
    assert answers[0] and answers[0][0]
