"""UPSERT with `:name` parameters (spec §2.2 parameters, §4.1 UPSERT, CONTRACT §1): values
are checked as binding checks them — every one of them, before anything is written — and a
bad value anywhere in a big command aborts the whole command with the binding's error.

UPSERT reads its parameter values at execution (`late_binding`); these tests hold it to the
behaviour of binding the command first.
"""
from __future__ import annotations

import math

import pytest

from nexus.api import Nexus
from nexus.errors import KipError
from nexus.syntax import bind, parse
from nexus.syntax.bind import check_values

from .kml_support import err, ok

SCHEMA = '''UPSERT {
  CONCEPT { {type: "$ConceptType", name: "Drug"} SET ATTRIBUTES { description: "a drug" } }
  CONCEPT { {type: "$PropositionType", name: "treats"}
            SET ATTRIBUTES { description: "treats", subject_types: ["*"], object_types: ["*"] } }
}'''


def _blocks(k: int) -> str:
    return "UPSERT {\n" + "\n".join(
        f"CONCEPT {{ {{type: :t{j}, name: :n{j}}} SET ATTRIBUTES :a{j} }} WITH METADATA :m{j}"
        for j in range(k)) + "\n}"


def _params(k: int) -> dict:
    out: dict = {}
    for j in range(k):
        out.update({f"t{j}": "Drug", f"n{j}": f"drug {j}", f"a{j}": {"risk": j},
                    f"m{j}": {"source": "test", "confidence": 0.5}})
    return out


@pytest.fixture
def nx():
    n = Nexus.open(None)
    ok(n, SCHEMA)
    yield n
    n.close()


def test_a_big_parameterised_upsert_writes_every_block(nx):
    ok(nx, _blocks(300), _params(300))
    got = ok(nx, 'FIND(?d.name, ?d.attributes.risk) WHERE { ?d {type: "Drug", name: :n} }',
             {"n": "drug 299"})
    assert got == [["drug 299"], [299]]


@pytest.mark.parametrize("bad, code", [
    ({"m299": {"bad key": 1}}, "KIP_1002"),          # a metadata key that is no identifier
    ({"a299": ["not", "a map"]}, "KIP_1001"),        # SET ATTRIBUTES :a must be an object
    ({"n299": 7}, "KIP_1001"),                        # a name must be a string
    ({"a299": {"v": math.nan}}, "KIP_2003"),          # not a JSON value
])
def test_a_bad_value_in_the_last_block_writes_nothing(nx, bad, code):
    params = {**_params(300), **bad}
    error = err(nx, _blocks(300), code, params)
    name = next(iter(bad))
    assert f":{name}" in error["message"]


def test_a_bad_value_is_reported_before_an_execution_error(nx):
    # Block 0 names a type that does not exist (an execution error, KIP_2001 or 3002);
    # block 250 has a value of the wrong kind: binding refuses the command first.
    params = {**_params(300), "t0": "NoSuchType", "n250": ["x"]}
    error = err(nx, _blocks(300), "KIP_1001", params)
    assert ":n250" in error["message"]


def test_placeholders_inside_maps_are_stored_as_values(nx):
    ok(nx, 'UPSERT { CONCEPT { {type: "Drug", name: :n} '
           'SET ATTRIBUTES { risk: :r, tags: [:t, "fixed"], nested: { k: :k } } } }',
       {"n": "mapped", "r": 3, "t": "tag", "k": None})
    got = ok(nx, 'FIND(?d.attributes) WHERE { ?d {type: "Drug", name: "mapped"} }')
    assert got == [{"risk": 3, "tags": ["tag", "fixed"], "nested": {"k": None}}]


def test_links_to_ends_named_by_parameters(nx):
    ok(nx, _blocks(3), _params(3))
    text = "UPSERT {\n" + "\n".join(
        f"PROPOSITION {{ ({{type: :st{j}, name: :sn{j}}}, :p{j}, "
        f"{{type: :ot{j}, name: :on{j}}}) }} WITH METADATA :m{j}" for j in range(4)) + "\n}"
    params: dict = {}
    for j, (s, o) in enumerate([(0, 1), (0, 2), (1, 2), (0, 1)]):   # the last repeats the first
        params.update({f"st{j}": "Drug", f"sn{j}": f"drug {s}", f"p{j}": "treats",
                       f"ot{j}": "Drug", f"on{j}": f"drug {o}", f"m{j}": {"confidence": j}})
    result = ok(nx, text, params)
    links = result["upsert_proposition_links"]
    assert len(links) == 4 and links[0] == links[3]      # one link per (s, p, o)
    params["on3"] = "no such drug"
    err(nx, text, "KIP_3002", params)


@pytest.mark.parametrize("values", [
    {"m1": {"bad key": 1}}, {"n0": 1}, {"a1": [1]}, {"a0": {"x": {1, 2}}},
    {"m0": {"k": math.inf}}, {"a1": {1: "int key"}},
])
def test_check_values_gives_the_error_binding_gives(values):
    parsed = parse(_blocks(2))
    params = {**_params(2), **values}
    with pytest.raises(KipError) as bound:
        bind(parsed, params)
    with pytest.raises(KipError) as checked:
        check_values(parsed.command, params)
    assert checked.value.to_dict() == bound.value.to_dict()
