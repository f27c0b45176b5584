"""bind(): typed values replace placeholders; the parse is reused; mistakes are KIP errors;
a value can never change the shape of a command."""
from __future__ import annotations

import math

import pytest

from nexus.errors import ErrorCode, KipError
from nexus.syntax import ast as A
from nexus.syntax import bind, parse, to_text

FIND_BY_NAME = "FIND(?c) WHERE { ?c {type: :type, name: :name} }"


def _where0(cmd):
    return cmd.where[0]


# --- typed values ------------------------------------------------------------------------

@pytest.mark.parametrize("value", [
    2, 2.0, -7, 1.5e300, 0.1, True, False, None, "", "Aspirin",
    "héllo wörld — 日本語 😀", "\u2028 line separator", 'quote " and \\ backslash',
    [1, 2.0, "x", None, [True, {"k": []}]],
    {"nested": {"deep": [1, {"x": 2.5}]}, "emoji": "🧩"},
    10 ** 30,
])
def test_value_is_bound_with_its_json_type(value):
    text = 'UPSERT { CONCEPT ?a { {type: "T", name: "n"} SET ATTRIBUTES { v: :v } } }'
    bound = bind(parse(text), {"v": value})
    got = bound.statements[0].blocks[0].attributes
    assert isinstance(got, A.Literal)
    assert got.value == {"v": value}
    assert type(got.value["v"]) is type(value)  # 2 stays int, 2.0 stays float


def test_int_and_float_stay_apart_in_filter():
    parsed = parse("FIND(?x) WHERE { ?x {type: \"T\"} FILTER(?x.attributes.n == :n) }")
    as_int = bind(parsed, {"n": 2}).where[1].expr.right
    as_float = bind(parsed, {"n": 2.0}).where[1].expr.right
    assert type(as_int.value) is int and type(as_float.value) is float


def test_placeholders_inside_objects_and_arrays_fold_into_one_literal():
    text = ('UPSERT { CONCEPT ?a { {type: "T", name: :n} '
            'SET ATTRIBUTES { a: [1, :x, {b: :y, c: [:z]}], d: :w } } } WITH METADATA :m')
    parsed = parse(text)
    assert parsed.parameters == {"n", "x", "y", "z", "w", "m"}
    bound = bind(parsed, {"n": "N", "x": 2.5, "y": {"q": "é"}, "z": None, "w": [1],
                          "m": {"source": "s", "confidence": 0.9}})
    block = bound.statements[0].blocks[0]
    assert block.match.name == A.Literal("N")
    assert block.attributes == A.Literal({"a": [1, 2.5, {"b": {"q": "é"}, "c": [None]}],
                                          "d": [1]})
    assert bound.statements[0].metadata == A.Literal({"source": "s", "confidence": 0.9})


def test_every_placeholder_position_is_bound():
    text = """
    FIND(?x, COUNT(?y))
    WHERE {
      ?x {type: :type, name: :name}
      ?l (id: :link_id)
      ?z {id: :node_id}
      (?x, :pred | "other", ?y)
      (?x, :path_pred{1,3}, ?w)
      FILTER(IN(?x.name, :names) && ?x.attributes.k > :min || REGEX(?x.name, :re))
      OPTIONAL { (?x, "p", {type: :t2, name: :n2}) }
    }
    LIMIT :limit
    CURSOR :cursor
    """
    parsed = parse(text)
    values = {"type": "T", "name": "N", "link_id": "P:1:p", "node_id": "C:1", "pred": "p",
              "path_pred": "q", "names": ["a"], "min": 1, "re": "^a", "t2": "T2", "n2": "N2",
              "limit": 5, "cursor": "abc"}
    assert parsed.parameters == set(values)
    bound = bind(parsed, values)
    leftovers = [n for n in _walk(bound) if isinstance(n, (A.Param, A.ObjectValue, A.ArrayValue))]
    assert leftovers == []
    assert bound.limit == A.Literal(5) and bound.cursor == A.Literal("abc")
    assert parse(to_text(bound)).command == bound


def test_kml_and_meta_placeholder_positions():
    cases = {
        'DELETE ATTRIBUTES {:k, "b"} FROM ?x WHERE { ?x {type: :t} }': {"k": "a", "t": "T"},
        "SEARCH CONCEPT :q WITH TYPE :t LIMIT :n": {"q": "aspirin", "t": "Drug", "n": 3},
        "DESCRIBE CONCEPT TYPES LIMIT :n CURSOR :c": {"n": 3, "c": "tok"},
        "DESCRIBE PROPOSITION TYPE :p": {"p": "treats"},
        'UPSERT { CONCEPT ?a { {type: "T", name: "n"} SET PROPOSITIONS { (:p, {id: :id}) '
        "WITH METADATA :m } } }": {"p": "rel", "id": "C:9", "m": {"a": 1}},
    }
    for text, values in cases.items():
        bound = bind(parse(text), values)
        assert not [n for n in _walk(bound) if isinstance(n, A.Param)], text


def _walk(node):
    stack = [node]
    while stack:
        item = stack.pop()
        yield item
        if isinstance(item, tuple):
            stack.extend(item)
        elif hasattr(item, "__dataclass_fields__") and not isinstance(item, (A.Literal, A.Pos)):
            stack.extend(getattr(item, f) for f in item.__dataclass_fields__)


# --- parse once, bind many times ---------------------------------------------------------

def test_parse_is_cached_by_text():
    assert parse(FIND_BY_NAME) is parse(FIND_BY_NAME)
    assert parse("".join(list(FIND_BY_NAME))) is parse(FIND_BY_NAME)  # equal text, new str


def test_one_parse_many_bindings():
    parsed = parse(FIND_BY_NAME)
    seen = []
    for i in range(50):
        bound = bind(parse(FIND_BY_NAME), {"type": "Drug", "name": f"drug-{i}"})
        assert _where0(bound).match.name == A.Literal(f"drug-{i}")
        seen.append(bound)
    assert len({id(b) for b in seen}) == 50
    assert seen[0] != seen[1]
    # The cached parse is untouched: still placeholders.
    assert _where0(parsed.command).match.name == A.Param("name", A.EXPECT_STRING)
    assert parse(FIND_BY_NAME) is parsed


def test_bindings_share_nothing_mutable_with_each_other():
    parsed = parse("FIND(?c) WHERE { ?c {type: \"T\"} FILTER(IN(?c.name, :names)) }")
    a = bind(parsed, {"names": ["x"]})
    b = bind(parsed, {"names": ["y", "z"]})
    assert a.where[1].expr.args[1].value == ["x"]
    assert b.where[1].expr.args[1].value == ["y", "z"]


def test_no_placeholders_returns_the_parsed_command():
    parsed = parse('FIND(?c) WHERE { ?c {type: "T"} }')
    assert bind(parsed, {"unused": 1}) is parsed.command
    assert bind(parsed) is parsed.command


def test_unused_parameters_are_ignored():
    bound = bind(parse(FIND_BY_NAME), {"type": "T", "name": "N", "limit": 5, "other": [1]})
    assert _where0(bound).match.type == A.Literal("T")


def test_same_placeholder_used_twice():
    bound = bind(parse("FIND(?a, ?b) WHERE { ?a {name: :n} ?b {name: :n} }"), {"n": "X"})
    assert bound.where[0].match.name == bound.where[1].match.name == A.Literal("X")


def test_bind_a_bare_command_node():
    command = parse(FIND_BY_NAME).command
    bound = bind(command, {"type": "T", "name": "N"})
    assert _where0(bound).match.type == A.Literal("T")
    with pytest.raises(KipError) as info:
        bind(command, {"type": "T"})
    assert ":name" in info.value.message


# --- mistakes ----------------------------------------------------------------------------

def test_missing_placeholder_is_named():
    with pytest.raises(KipError) as info:
        bind(parse(FIND_BY_NAME), {"type": "Drug"})
    err = info.value
    assert err.code == ErrorCode.KIP_1001
    assert ":name" in err.message and "name" in err.hint
    assert err.data["missing_parameters"] == ["name"]
    assert (err.line, err.column) == (1, 41)  # where :name is written


def test_several_missing_placeholders_are_all_named():
    with pytest.raises(KipError) as info:
        bind(parse(FIND_BY_NAME), None)
    assert ":name" in info.value.message and ":type" in info.value.message


@pytest.mark.parametrize("text, values", [
    ('FIND(?x) WHERE { ?x {type: "T"} } LIMIT :n', {"n": "5"}),
    ('FIND(?x) WHERE { ?x {type: "T"} } LIMIT :n', {"n": 0}),
    ('FIND(?x) WHERE { ?x {type: "T"} } LIMIT :n', {"n": -3}),
    ('FIND(?x) WHERE { ?x {type: "T"} } LIMIT :n', {"n": 2.0}),
    ('FIND(?x) WHERE { ?x {type: "T"} } LIMIT :n', {"n": True}),
    ('FIND(?x) WHERE { ?x {type: "T"} } CURSOR :c', {"c": 5}),
    ("FIND(?x) WHERE { ?x {type: :t} }", {"t": 3}),
    ("FIND(?x) WHERE { ?x {id: :t} }", {"t": None}),
    ("FIND(?x) WHERE { (?x, :p, ?y) }", {"p": ["a"]}),
    ('UPSERT { CONCEPT ?a { {type: "T", name: "n"} SET ATTRIBUTES :attrs } }', {"attrs": [1]}),
    ('UPSERT { CONCEPT ?a { {type: "T", name: "n"} } WITH METADATA :m }', {"m": "x"}),
    ('FIND(?x) WHERE { ?x {type: "T"} FILTER(IN(?x.name, :names)) }', {"names": "a"}),
    ('FIND(?x) WHERE { ?x {type: "T"} FILTER(?x.name == :v) }', {"v": ["a"]}),
    ('FIND(?x) WHERE { ?x {type: "T"} FILTER(CONTAINS(?x.name, :v)) }', {"v": {"a": 1}}),
    ("SEARCH CONCEPT :q", {"q": 1}),
    ("DESCRIBE CONCEPT TYPE :t", {"t": {"name": "Drug"}}),
    ('DELETE METADATA {:k} FROM ?x WHERE { ?x {type: "T"} }', {"k": 1}),
])
def test_wrong_kind_for_position(text, values):
    with pytest.raises(KipError) as info:
        bind(parse(text), values)
    err = info.value
    assert err.code == ErrorCode.KIP_1001
    name = next(iter(values))
    assert f":{name}" in err.message and "must be" in err.message
    assert err.line == 1 and err.column == text.index(f":{name}") + 1


def test_map_placeholder_keys_must_be_identifiers():
    text = 'UPSERT { CONCEPT ?a { {type: "T", name: "n"} SET ATTRIBUTES :attrs } }'
    with pytest.raises(KipError) as info:
        bind(parse(text), {"attrs": {"risk level": 1}})
    assert info.value.code == ErrorCode.KIP_1002
    assert ":attrs" in info.value.message
    # Nested values are free JSON: only the top level are attribute names.
    bound = bind(parse(text), {"attrs": {"headers": {"Content-Type": "x"}}})
    assert bound.statements[0].blocks[0].attributes.value == {"headers": {"Content-Type": "x"}}


class _Opaque:
    pass


@pytest.mark.parametrize("value", [
    math.nan, math.inf, -math.inf, {1, 2}, _Opaque(), (1, 2), b"bytes", {1: "int key"},
    [1, [2, math.nan]], {"a": {"b": {3}}}, complex(1, 2),
])
def test_non_json_values_are_invalid_value_type(value):
    text = 'UPSERT { CONCEPT ?a { {type: "T", name: "n"} SET ATTRIBUTES { v: :v } } }'
    with pytest.raises(KipError) as info:
        bind(parse(text), {"v": value})
    assert info.value.code == ErrorCode.KIP_2003
    assert ":v" in info.value.message


def test_self_referencing_value_is_refused():
    loop: list = []
    loop.append(loop)
    text = 'UPSERT { CONCEPT ?a { {type: "T", name: "n"} SET ATTRIBUTES { v: :v } } }'
    with pytest.raises(KipError) as info:
        bind(parse(text), {"v": loop})
    assert info.value.code == ErrorCode.KIP_2003


# --- placeholders are values, never text -------------------------------------------------

def test_placeholder_inside_a_string_is_text():
    parsed = parse('FIND(?x) WHERE { ?x {name: "Hello :name"} }')
    assert parsed.parameters == frozenset()
    bound = bind(parsed, {"name": "World"})
    assert _where0(bound).match.name == A.Literal("Hello :name")


def test_colon_words_in_strings_and_comments_are_not_placeholders():
    parsed = parse('// uses :nothing\nSEARCH CONCEPT "time: 10:30 :x" LIMIT 5')
    assert parsed.parameters == frozenset()
    assert parsed.command.term == A.Literal("time: 10:30 :x")


@pytest.mark.parametrize("evil", [
    '"} DELETE CONCEPT ?x DETACH WHERE {',
    '\\"} DELETE CONCEPT ?x DETACH WHERE { ?x {type: \\"Drug\\"} }',
    "\"}) } UNION { ?y {type: \"Secret\"} } //",
    ":type",
    "\n}\nDESCRIBE PRIMER\n",
])
def test_values_with_kip_syntax_stay_plain_strings(evil):
    parsed = parse(FIND_BY_NAME)
    bound = bind(parsed, {"type": "Drug", "name": evil})
    harmless = bind(parsed, {"type": "Drug", "name": "Aspirin"})
    assert _where0(bound).match.name == A.Literal(evil)
    # Same shape as a harmless binding: only that one string differs.
    assert type(bound) is A.Find and len(bound.where) == len(harmless.where) == 1
    assert bound.items == harmless.items and _where0(bound).var == _where0(harmless).var
    # And it survives printing: the printer escapes it into one JSON string.
    assert parse(to_text(bound)).command == bound


def test_delete_key_placeholder_must_be_an_identifier():
    parsed = parse('DELETE ATTRIBUTES {:k} FROM ?x WHERE { ?x {type: "T"} }')
    assert bind(parsed, {"k": "risk_level"}).keys == (A.Literal("risk_level"),)
    with pytest.raises(KipError) as info:
        bind(parsed, {"k": "risk level"})
    assert info.value.code == ErrorCode.KIP_1002


def test_literal_and_placeholder_give_the_same_error_kind():
    # A value written in the text and the same value passed as a parameter are refused alike.
    with pytest.raises(KipError) as written:
        parse('FIND(?x) WHERE { ?x {type: "T"} } LIMIT 0')
    with pytest.raises(KipError) as passed:
        bind(parse('FIND(?x) WHERE { ?x {type: "T"} } LIMIT :n'), {"n": 0})
    assert written.value.code == passed.value.code == ErrorCode.KIP_1001
    for err in (written.value, passed.value):
        assert "positive integer" in err.message
