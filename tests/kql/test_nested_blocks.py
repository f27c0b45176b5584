"""Deeply nested NOT and OPTIONAL blocks (a hostile but valid shape): the query is compiled
with each block compiled once on a store that reads row by row — compiling a block's
batched variant too, at every level, made compilation exponential in the nesting depth
(twenty nested NOTs took minutes, past the query deadline, which compilation does not
check)."""
from __future__ import annotations

import pytest

import nexus.exec.operators as operators
from nexus import Nexus


@pytest.fixture
def drugs(tmp_path):
    nx = Nexus.open(str(tmp_path / "db"))
    assert "result" in nx.execute_kip({"command": (
        'UPSERT { CONCEPT ?t { {type: "$ConceptType", name: "Drug"} } '
        'CONCEPT ?a { {type: "Drug", name: "a"} } CONCEPT ?x { {type: "Drug", name: "x"} } }')})
    yield nx
    nx.close()


def _nested(block: str, depth: int) -> str:
    return ('FIND(?d.name) WHERE { ?d {type: "Drug"} ' + f"{block} {{ " * depth
            + '?d {name: "x"} ' + "} " * depth + "} ORDER BY ?d.name")


@pytest.mark.parametrize("block, depth, expected", [
    # NOT over NOT over …: an even number of NOTs keeps the rows the innermost pattern
    # matches (x), an odd number the others (a); OPTIONAL keeps every row.
    ("NOT", 24, ["x"]),
    ("NOT", 25, ["a"]),
    ("OPTIONAL", 24, ["a", "x"]),
])
def test_nesting_compiles_each_block_once(drugs, monkeypatch, block, depth, expected):
    calls = []
    real = operators.compile_group

    def counting(plan):
        calls.append(plan)
        return real(plan)
    monkeypatch.setattr(operators, "compile_group", counting)
    response = drugs.execute_kip_readonly({"command": _nested(block, depth)})
    assert "result" in response, response
    assert len(calls) <= 4 * depth, f"{len(calls)} group compilations for depth {depth}"
    assert response["result"] == expected
