"""A pattern group runs in the database as one SQL statement (issue 22: "a pattern group
becomes one SQL statement ... never a query per row").

On PostgreSQL the leading concept and link clauses of a FIND's block, with its NOT and
OPTIONAL blocks made of the same, are one statement (nexus.exec.pushdown, pg_match);
FILTERs, paths, predicate variables and UNIONs run as before. Whatever runs where, the
answers are the memory store's, rows in the same order, and the errors are the same.
"""
from __future__ import annotations

from typing import Any, Iterator

import psycopg
import pytest

from nexus import Nexus

GRAPH = [
    'UPSERT { CONCEPT ?t { {type: "$ConceptType", name: "Drug"} } '
    'CONCEPT ?s { {type: "$ConceptType", name: "Symptom"} } '
    'CONCEPT ?c { {type: "$ConceptType", name: "DrugClass"} } '
    'CONCEPT ?a { {type: "$PropositionType", name: "treats"} } '
    'CONCEPT ?b { {type: "$PropositionType", name: "prevents"} } '
    'CONCEPT ?e { {type: "$PropositionType", name: "has_side_effect"} } '
    'CONCEPT ?f { {type: "$PropositionType", name: "is_class_of"} } '
    'CONCEPT ?g { {type: "$PropositionType", name: "interacts_with"} } '
    'CONCEPT ?h { {type: "$PropositionType", name: "is_subclass_of"} } }',
]
SYMPTOMS = ["Headache", "Fever", "Nausea", "Cough", "Rash"]
CLASSES = ["NSAID", "Analgesic", "Antibiotic"]


def _drugs() -> Iterator[str]:
    for i in range(24):
        name = f"Drug{i:02d}"
        treats = [SYMPTOMS[(i + k) % 5] for k in range(i % 3 + 1)]
        props = [f'("treats", {{type: "Symptom", name: "{s}"}})' for s in treats]
        if i % 4 == 0:
            props.append(f'("prevents", {{type: "Symptom", name: "{SYMPTOMS[i % 5]}"}})')
        if i % 3:
            props.append(f'("has_side_effect", {{type: "Symptom", name: "{SYMPTOMS[(i * 7) % 5]}"}})')
        props.append(f'("is_class_of", {{type: "DrugClass", name: "{CLASSES[i % 3]}"}})')
        if i % 5 == 1:
            props.append(f'("interacts_with", {{type: "Drug", name: "Drug{(i + 3) % 24:02d}"}})')
        if i == 7:
            props.append('("interacts_with", {type: "Drug", name: "Drug07"})')   # a self-loop
        risk = "null" if i == 5 else str(i % 6)
        yield (f'UPSERT {{ CONCEPT ?d {{ {{type: "Drug", name: "{name}"}} '
               f'SET ATTRIBUTES {{ risk_level: {risk}, tag: "t{i % 4}" }} '
               f'SET PROPOSITIONS {{ {" ".join(props)} }} }} WITH METADATA {{ source: "s{i % 2}" }} }}')


def _setup() -> list[str]:
    out = list(GRAPH)
    out += [f'UPSERT {{ CONCEPT ?s {{ {{type: "Symptom", name: "{s}"}} }} }}' for s in SYMPTOMS]
    out += [f'UPSERT {{ CONCEPT ?c {{ {{type: "DrugClass", name: "{c}"}} }} }}' for c in CLASSES]
    out += [f'UPSERT {{ CONCEPT ?d {{ {{type: "Drug", name: "Drug{i:02d}"}} }} }}'
            for i in range(24)]
    out.append('UPSERT { CONCEPT ?c { {type: "DrugClass", name: "NSAID"} '
               'SET PROPOSITIONS { ("is_subclass_of", {type: "DrugClass", name: "Analgesic"}) } } }')
    return out + list(_drugs())


QUERIES = [
    # scans, joins, alternatives, both directions
    'FIND(?d.name) WHERE { ?d {type: "Drug"} }',
    'FIND(?d.name, ?s.name) WHERE { ?d {type: "Drug"} (?d, "treats", ?s) }',
    'FIND(?d.name, ?s.name) WHERE { (?d, "treats" | "prevents", ?s) }',
    'FIND(?d.name, ?s.name) WHERE { ?s {type: "Symptom"} (?d, "prevents" | "treats", ?s) }',
    'FIND(?d.name) WHERE { ?d {type: "Drug"} (?d, "treats", {type: "Symptom", name: "Fever"}) }',
    'FIND(?d) WHERE { ?d {type: "Drug"} (?d, "treats", {type: "Symptom", name: :s}) }',
    'FIND(?d.name, ?l) WHERE { ?l (?d, "treats", {type: "Symptom", name: "Cough"}) }',
    'FIND(?a.name, ?b.name) WHERE { (?a, "interacts_with", ?b) }',
    'FIND(?a.name) WHERE { (?a, "interacts_with", ?a) }',
    'FIND(?x.name) WHERE { ?x {name: "Drug03"} }',
    'FIND(?x.name) WHERE { ?x {type: "Drug", name: "Drug03"} (?x, "treats", ?s) ?s {type: "Symptom"} }',
    'FIND(?d.name, ?s.name) WHERE { ?d {type: "Drug"} ?s {type: "Symptom"} (?d, "treats", ?s) '
    '(?d, "has_side_effect", ?s) }',
    # FILTERs (run after the statement, on what it read)
    'FIND(?d.name) WHERE { ?d {type: "Drug"} (?d, "treats", {type: "Symptom", name: "Fever"}) '
    'FILTER(?d.attributes.risk_level < 3) }',
    'FIND(?d.name, ?d.attributes.tag) WHERE { ?d {type: "Drug"} FILTER(?d.metadata.source == "s1") }',
    'FIND(?d.name) WHERE { ?d {type: "Drug"} FILTER(IS_NULL(?d.attributes.risk_level)) }',
    # NOT, OPTIONAL
    'FIND(?d.name) WHERE { ?d {type: "Drug"} (?d, "treats", {type: "Symptom", name: :s}) '
    'FILTER(?d.attributes.risk_level < 4) '
    'NOT { (?d, "is_class_of", {type: "DrugClass", name: "NSAID"}) } }',
    'FIND(?d.name) WHERE { ?d {type: "Drug"} NOT { (?d, "has_side_effect", ?x) } }',
    'FIND(?d.name) WHERE { ?d {type: "Drug"} NOT { (?d, "is_class_of", {type: "DrugClass", '
    'name: "Nonexistent"}) } }',
    'FIND(?d.name, ?se.name) WHERE { ?d {type: "Drug"} OPTIONAL { (?d, "has_side_effect", ?se) } }',
    'FIND(?d.name, ?se.name, ?c.name) WHERE { ?d {type: "Drug"} '
    'OPTIONAL { (?d, "has_side_effect", ?se) (?se, "prevents" | "treats", ?z) } '
    'OPTIONAL { (?d, "is_class_of", ?c) ?c {type: "DrugClass", name: "NSAID"} } }',
    'FIND(?d.name, ?l) WHERE { ?d {type: "Drug"} OPTIONAL { ?l (?d, "prevents", ?s) } }',
    'FIND(?d.name) WHERE { ?d {type: "Drug"} OPTIONAL { (?d, "prevents", ?s) } '
    'FILTER(IS_NULL(?s)) }',
    'FIND(?d.name) WHERE { ?d {type: "Drug"} OPTIONAL { (?d, "prevents", ?s) } '
    '(?s, "treats", ?q) }',
    # aggregation, order, limits
    'FIND(?c.name, COUNT(?d)) WHERE { ?d {type: "Drug"} ?c {type: "DrugClass"} (?d, "is_class_of", ?c) }',
    'FIND(?d.name) WHERE { ?d {type: "Drug"} (?d, "treats", ?s) } ORDER BY ?d.name DESC LIMIT 5',
    'FIND(COUNT(?s)) WHERE { ?d {type: "Drug"} (?d, "treats", ?s) }',
    # what is not pushed down (or only in part)
    'FIND(?a.name) WHERE { ?c {type: "DrugClass", name: "NSAID"} (?c, "is_subclass_of"{1,3}, ?a) }',
    'FIND(?d.name, ?p) WHERE { ?d {type: "Drug", name: "Drug04"} (?d, ?p, ?o) }',
    'FIND(?d.name) WHERE { ?d {type: "Drug"} NOT { (?d, "treats", ?s) FILTER(?s.name == "Fever") } }',
    'FIND(?x.name) WHERE { UNION { ?x {type: "Symptom"} } UNION { ?x {type: "DrugClass"} } }',
    'FIND(?d.name) WHERE { ?d {type: "Drug"} (?d, "treats", ?s) UNION { ?s {type: "Symptom", name: "Rash"} } }',
    # nothing matches
    'FIND(?d.name) WHERE { ?d {type: "NoSuchType"} (?d, "treats", ?s) }',
    'FIND(?d.name) WHERE { ?d {type: "Drug"} (?d, "no_such_predicate", ?s) }',
    'FIND(?d.name) WHERE { ?d {type: "Drug"} (?d, "treats", {type: "Symptom", name: 42}) }',
    'FIND(?d.name) WHERE { ?d {type: "Drug"} (?d, "treats", {type: "Symptom", name: "Missing"}) }',
    'FIND(?d.name) WHERE { ?d {type: "Drug", name: "Missing"} (?d, "treats", ?s) }',
]


VOLATILE = {"id", "subject", "object", "_created_at", "_updated_at"}  # differ between stores


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def _answer(nexus: Nexus, command: str) -> Any:
    response = nexus.execute_kip({"command": command, "parameters": {"s": "Headache"}})
    if "error" in response:
        return {"error": response["error"]["code"]}
    return _stable(response["result"])


@pytest.fixture(scope="module")
def stores(pg_database) -> Iterator[tuple[Nexus, Nexus]]:
    pg, memory = Nexus.open(pg_database), Nexus.open("memory://")
    for command in _setup():
        for nexus in (pg, memory):
            response = nexus.execute_kip({"command": command})
            assert "error" not in response, (command, response)
    yield pg, memory
    pg.close()
    memory.close()


@pytest.mark.parametrize("command", QUERIES)
def test_the_answers_are_the_memory_stores_row_for_row(stores, command):
    pg, memory = stores
    assert _answer(pg, command) == _answer(memory, command)


class _Count:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        original = psycopg.Connection.execute

        def execute(conn: Any, query: Any, params: Any = None, **kw: Any) -> Any:
            self.n += 1
            return original(conn, query, params, **kw)
        monkeypatch.setattr(psycopg.Connection, "execute", execute)


@pytest.mark.parametrize("command", [
    'FIND(?d.name, ?se.name) WHERE { ?d {type: "Drug"} OPTIONAL { (?d, "has_side_effect", ?se) } }',
    'FIND(?d.name) WHERE { ?d {type: "Drug"} (?d, "treats", {type: "Symptom", name: "Fever"}) '
    'FILTER(?d.attributes.risk_level < 4) '
    'NOT { (?d, "is_class_of", {type: "DrugClass", name: "NSAID"}) } }',
    'FIND(?c.name, COUNT(?d)) WHERE { ?d {type: "Drug"} ?c {type: "DrugClass"} (?d, "is_class_of", ?c) }',
])
def test_a_pattern_group_is_one_statement(stores, monkeypatch, command):
    """The read transaction's BEGIN and ROLLBACK, and the group's one statement: the
    clauses, the FILTER's attributes and the names FIND returns all come in its rows."""
    pg, _ = stores
    _answer(pg, command)                     # (the plan, the symbols: cached)
    count = _Count(monkeypatch)
    _answer(pg, command)
    assert count.n == 3


def test_a_missing_mandatory_constant_is_still_reported(stores):
    pg, memory = stores
    command = ('FIND(?d.name) WHERE { ?d {type: "Drug"} '
               '(?d, "treats", {type: "Symptom", name: "Missing"}) }')
    assert _answer(pg, command) == _answer(memory, command) == {"error": "KIP_3002"}


def test_explain_says_what_runs_as_one_query(stores):
    pg, memory = stores
    plan = pg.execute_kip({"command": (
        'EXPLAIN FIND(?d.name) WHERE { ?d {type: "Drug"} FILTER(?d.attributes.risk_level < 3) '
        '(?d, "treats", ?s) (?s, "treats"{1,2}, ?x) }')})["result"]
    assert plan["pushdown"] == {"steps": 2, "filters_after": 1, "stopped_at": "a path {m,n}"}
    assert "pushdown: the first 2 step(s) as one query" in plan["text"]
    whole = pg.execute_kip({"command": 'EXPLAIN FIND(?d.name) WHERE { ?d {type: "Drug"} '
                                       'NOT { (?d, "treats", ?s) } }'})["result"]
    assert whole["pushdown"] == {"steps": 2, "filters_after": 0}
    assert "pushdown" not in memory.execute_kip({"command": (
        'EXPLAIN FIND(?d.name) WHERE { ?d {type: "Drug"} }')})["result"]


def test_the_row_cap_holds_for_a_pushed_down_group(pg_server):
    """CONTRACT §6's row cap (KIP_4002) is the same whether the solutions come from one
    statement or from the operators (the statement reads at most one row past it)."""
    url = pg_server.fresh_database("cap")
    with Nexus.open(url, max_rows=5) as pg, Nexus.open("memory://", max_rows=5) as memory:
        for command in _setup()[:12]:
            for nexus in (pg, memory):
                assert "error" not in nexus.execute_kip({"command": command})
        for command in ('FIND(?s.name) WHERE { ?s {type: "Symptom"} }',
                        'FIND(?x.name) WHERE { ?x {type: "$ConceptType"} }',
                        'FIND(?x.name) WHERE { ?x {type: "$ConceptType"} '
                        'FILTER(?x.name != "Drug") }'):
            assert _answer(pg, command) == _answer(memory, command)
        assert _answer(pg, 'FIND(?x.name) WHERE { ?x {type: "$ConceptType"} }') == \
            {"error": "KIP_4002"}


def test_a_statement_past_the_deadline_is_cancelled(pg_server):
    """One statement runs until it ends: past the command's deadline it is cancelled, and
    the command fails with the timeout's KIP_4001 (CONTRACT §6); the store stays usable."""
    url = pg_server.fresh_database("deadline")
    with Nexus.open(url) as pg:
        for command in _setup():
            assert "error" not in pg.execute_kip({"command": command})
    heavy = ('FIND(COUNT(?a)) WHERE { ?a {type: "Drug"} ?b {type: "Drug"} ?c {type: "Drug"} '
             '?d {type: "Drug"} ?e {type: "Drug"} ?f {type: "Drug"} FILTER(?a.name != "x") }')
    with Nexus.open(url, query_timeout=1.0, max_rows=10**9) as pg:
        pg.execute_kip({"command": 'FIND(?d.name) WHERE { ?d {type: "Drug"} } LIMIT 1'})
        assert _answer(pg, heavy) == {"error": "KIP_4001"}
        assert _answer(pg, 'FIND(COUNT(?d)) WHERE { ?d {type: "Drug"} }') == 24


@pytest.mark.parametrize("command", [
    'FIND(?d.name) WHERE { ?d {type: "Drug"} NOT { ?d {name: "Drug03"} } }',
    'FIND(?d.name, ?x.name) WHERE { ?d {type: "Drug"} OPTIONAL { (?d, "treats", ?x) '
    '?x {type: "Symptom", name: "Fever"} } }',
    'FIND(?d, ?x) WHERE { ?d {type: "Drug"} (?d, "is_class_of", ?x) ?x {type: "DrugClass"} } '
    'ORDER BY ?x.name LIMIT 4',
    'FIND(?x.name, COUNT(?d), COUNT(?d.name)) WHERE { ?d {type: "Drug"} (?d, "treats", ?x) }',
])
def test_checks_inside_blocks_and_what_the_find_reads(stores, command):
    pg, memory = stores
    assert _answer(pg, command) == _answer(memory, command)
