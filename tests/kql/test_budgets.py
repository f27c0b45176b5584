"""Budgets (CONTRACT §1 status classes, §6; nexus.config.Limits): the query deadline
(KIP_4001), the row cap (KIP_4002), bounded REGEX, on both stores and both FIND executors.

Each timed case asserts both the error and that it came back promptly: a budget that is
checked too rarely is as bad as none.
"""
from __future__ import annotations

import time

import pytest

from kqlsupport import STORES

TIMEOUT = 0.05
SLACK = 3.0          # seconds a budget may overrun on a loaded 2-core CI machine: the
                     # assertion is "bounded, not a hang", not a latency figure

# Queries that each do ~10^7 units of work on the `wide` graph (3000 nodes), shaped so that
# the work happens in different places: a cross product streamed to an aggregate, a
# correlated NOT and OPTIONAL whose inner scans yield nothing, a path walk per row, and a
# FILTER that rejects everything.
HEAVY = {
    "cross product": 'FIND(COUNT(?a)) WHERE { ?a {type: "Node"} ?b {type: "Node"} }',
    "correlated NOT": 'FIND(?a.name) WHERE { ?a {type: "Node"} NOT { ?b {type: "Node"} '
                      'FILTER(?b.attributes.i < ?a.attributes.i && ?b.name == "zz") } }',
    "correlated OPTIONAL": 'FIND(?a.name, ?b.name) WHERE { ?a {type: "Node"} OPTIONAL { '
                           '?b {type: "Node"} FILTER(?b.attributes.i < ?a.attributes.i '
                           '&& ?b.name == "zz") } }',
    "path per row": 'FIND(?a.name) WHERE { ?a {type: "Node"} (?a, "next"{1,20}, ?b) '
                    'FILTER(?b.attributes.i < 0) }',
    "filter rejects all": 'FIND(?a.name) WHERE { ?a {type: "Node"} ?b {type: "Node"} '
                          'FILTER(?a == ?b && ?a.name == "zz") }',
    "union of scans": 'FIND(?a.name) WHERE { ?a {type: "Node"} ?b {type: "Node"} '
                      'FILTER(?b.name == "zz") UNION { ?a {type: "Node"} ?c {type: "Node"} '
                      'FILTER(?c.name == "zz") } }',
}


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("name", sorted(HEAVY))
def test_deadline(kql_db, store, name, columnar):
    nx = kql_db(store, "wide", columnar=columnar, query_timeout=TIMEOUT, max_rows=10**9)
    nx.execute_kip({"command": 'FIND(COUNT(?a)) WHERE { ?a {type: "Node"} }'})  # warm
    t0 = time.monotonic()
    response = nx.execute_kip({"command": HEAVY[name]})
    elapsed = time.monotonic() - t0
    assert response.get("error", {}).get("code") == "KIP_4001", response
    assert response["error"]["hint"]
    assert elapsed < TIMEOUT + SLACK, f"deadline overrun: {elapsed:.3f}s"


@pytest.mark.parametrize("store", STORES)
def test_deadline_not_hit_by_a_light_query(kql_db, store, columnar):
    nx = kql_db(store, "wide", columnar=columnar, query_timeout=TIMEOUT, max_rows=10**9)
    response = nx.execute_kip({"command": 'FIND(?a.name) WHERE { ?a {type: "Node", name: "w7"} '
                                          '(?a, "next"{1,3}, ?b) }'})
    assert "error" not in response, response


@pytest.mark.parametrize("store", STORES)
def test_row_cap(kql_db, store, columnar):
    nx = kql_db(store, "medical", columnar=columnar, max_rows=5)
    response = nx.execute_kip({"command": 'FIND(?d.name) WHERE { ?d {type: "Drug"} }'})
    assert response["error"]["code"] == "KIP_4002", response
    assert "LIMIT" in response["error"]["hint"]
    # Under the cap: fine.
    response = nx.execute_kip({"command": 'FIND(?d.name) WHERE { ?d {type: "Company"} }'})
    assert response == {"result": ["Bayer", "Pfizer"]} or sorted(response["result"]) == \
        ["Bayer", "Pfizer"]


@pytest.mark.parametrize("store", STORES)
def test_row_cap_counts_solutions_not_results(kql_db, store, columnar):
    """The cap bounds the work (solutions), also when the answer is one aggregate."""
    nx = kql_db(store, "wide", columnar=columnar, max_rows=1000)
    response = nx.execute_kip({"command": 'FIND(COUNT(?a)) WHERE { ?a {type: "Node"} }'})
    assert response["error"]["code"] == "KIP_4002", response


@pytest.mark.parametrize("store", STORES)
def test_row_cap_with_limit_stops_early(kql_db, store, columnar):
    """LIMIT without ORDER BY stops the stream, so the cap is not reached."""
    nx = kql_db(store, "wide", columnar=columnar, max_rows=1000)
    response = nx.execute_kip({"command": 'FIND(?a.name) WHERE { ?a {type: "Node"} } LIMIT 10'})
    assert "error" not in response, response
    assert len(response["result"]) == 10 and "next_cursor" in response


# --- REGEX ---------------------------------------------------------------------------------

CATASTROPHIC = ["^(a+)+$", "^(a|aa)+$", "^(a|a?)+$", "(.*a){41}"]


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_regex_catastrophic_pattern_is_bounded(kql_db, store, pattern, columnar):
    nx = kql_db(store, "wide", columnar=columnar, regex_timeout=0.1, query_timeout=5)
    with nx.store.write() as t:       # a value that makes these patterns backtrack
        tid = t.intern("Evil")
        if t.concept_id(tid, "x") is None:
            t.create_concept(t.new_id(), tid, "x", {"s": "a" * 40 + "!"}, {})
    t0 = time.monotonic()
    response = nx.execute_kip({
        "command": 'FIND(?e.name) WHERE { ?e {type: "Evil"} FILTER(REGEX(?e.attributes.s, :p)) }',
        "parameters": {"p": pattern}})
    elapsed = time.monotonic() - t0
    assert elapsed < 0.1 + SLACK, f"REGEX ran {elapsed:.2f}s"
    # Either the engine proves no match quickly, or it gives up with KIP_4001; never a hang
    # and never an internal error.
    assert response in ({"result": []},) or response["error"]["code"] == "KIP_4001", response
