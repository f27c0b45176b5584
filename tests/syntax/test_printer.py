"""to_text(): the canonical text of a command, exactly; and ASTs built by hand (not only by
the parser) print to text that parses back to them."""
from __future__ import annotations

import pytest

from nexus.syntax import ast as A
from nexus.syntax import parse, to_text, value_text


def canonical(text: str) -> str:
    printed = to_text(parse(text).command)
    assert parse(printed).command == parse(text).command
    return printed


def test_find_canonical_form():
    text = ('FIND(?d.name,COUNT( DISTINCT ?s ))WHERE{?d{type:"Drug"}(?d,"treats"|"cures",?s)'
            'OPTIONAL{?l(?d,"has_side_effect",{type:"Symptom",name:"Nausea"})}'
            'NOT{(?d,"is_class_of"{0,3},{name:"NSAID"})}UNION{?d{id:"C:1"}}'
            'FILTER(!(?d.attributes.risk_level>=2.0)||IN(?d.name,["a",1,null]) && '
            '?d.metadata.x != :p)}ORDER BY ?d.name DESC,COUNT(DISTINCT ?s) LIMIT 10 '
            'CURSOR "tok"')
    assert canonical(text) == '''\
FIND(?d.name, COUNT(DISTINCT ?s))
WHERE {
  ?d {type: "Drug"}
  (?d, "treats" | "cures", ?s)
  OPTIONAL {
    ?l (?d, "has_side_effect", {type: "Symptom", name: "Nausea"})
  }
  NOT {
    (?d, "is_class_of"{0,3}, {name: "NSAID"})
  }
  UNION {
    ?d {id: "C:1"}
  }
  FILTER(!(?d.attributes.risk_level >= 2.0) || IN(?d.name, ["a", 1, null]) && ?d.metadata.x != :p)
}
ORDER BY ?d.name DESC, COUNT(DISTINCT ?s) ASC
LIMIT 10
CURSOR "tok"'''


def test_upsert_canonical_form():
    text = ('UPSERT{CONCEPT ?a{{type:"T",name:"a\\"b\\n日本😀"}SET ATTRIBUTES{x:1,y:2.0,'
            'z:[1e16,-0.5,true],"w":{"k k":null,"true":{}}} SET PROPOSITIONS{("p",?b) '
            '("q",{id:"C:2"}) WITH METADATA{c:0.5}}} WITH METADATA{s:1} '
            'PROPOSITION ?l{(?a,"r",(id:"P:3:r"))SET ATTRIBUTES :attrs}}'
            'WITH METADATA{source:"t"} UPSERT{}')
    assert canonical(text) == '''\
UPSERT {
  CONCEPT ?a {
    {type: "T", name: "a\\"b\\n日本😀"}
    SET ATTRIBUTES { x: 1, y: 2.0, z: [1e+16, -0.5, true], w: { "k k": null, "true": {} } }
    SET PROPOSITIONS {
      ("p", ?b)
      ("q", {id: "C:2"}) WITH METADATA { c: 0.5 }
    }
  } WITH METADATA { s: 1 }
  PROPOSITION ?l {
    (?a, "r", (id: "P:3:r"))
    SET ATTRIBUTES :attrs
  }
}
WITH METADATA { source: "t" }

UPSERT {
}'''


@pytest.mark.parametrize("text, expected", [
    ('DELETE ATTRIBUTES ["a","b",] FROM ?x WHERE{?x{type:"T"}}',
     'DELETE ATTRIBUTES {"a", "b"} FROM ?x\nWHERE {\n  ?x {type: "T"}\n}'),
    ('DELETE METADATA {"old_source"} FROM ?x WHERE{?x{type:"T"}}',
     'DELETE METADATA {"old_source"} FROM ?x\nWHERE {\n  ?x {type: "T"}\n}'),
    ('DELETE PROPOSITIONS ?l WHERE { ?l (?s, "p", ?o) }',
     'DELETE PROPOSITIONS ?l\nWHERE {\n  ?l (?s, "p", ?o)\n}'),
    ('DELETE CONCEPT ?x DETACH WHERE{?x{type:"T",name:"n"}}',
     'DELETE CONCEPT ?x DETACH\nWHERE {\n  ?x {type: "T", name: "n"}\n}'),
    ("DESCRIBE PRIMER", "DESCRIBE PRIMER"),
    ("DESCRIBE   DOMAINS", "DESCRIBE DOMAINS"),
    ('DESCRIBE CONCEPT TYPES CURSOR "c" LIMIT 5', 'DESCRIBE CONCEPT TYPES LIMIT 5 CURSOR "c"'),
    ('DESCRIBE CONCEPT TYPE "Drug"', 'DESCRIBE CONCEPT TYPE "Drug"'),
    ("DESCRIBE PROPOSITION TYPES", "DESCRIBE PROPOSITION TYPES"),
    ("DESCRIBE PROPOSITION TYPE :p", "DESCRIBE PROPOSITION TYPE :p"),
    ('SEARCH PROPOSITION "treats" LIMIT 3 WITH TYPE "treats"',
     'SEARCH PROPOSITION "treats" WITH TYPE "treats" LIMIT 3'),
    ('SEARCH CONCEPT "aspirin";', 'SEARCH CONCEPT "aspirin"'),
    ("EXPLAIN FIND(?x) WHERE {}", "EXPLAIN FIND(?x)\nWHERE { }"),
    ('FIND(?x) WHERE { (?x, "p"{2,2}, ?y) (?x, "q"{1,}, ?z) }',
     'FIND(?x)\nWHERE {\n  (?x, "p"{2}, ?y)\n  (?x, "q"{1,}, ?z)\n}'),
    ("FIND(?x, ) WHERE { ?x {name: \"a\",} } ORDER BY ?x.name",
     'FIND(?x)\nWHERE {\n  ?x {name: "a"}\n}\nORDER BY ?x.name ASC'),
])
def test_canonical_text(text, expected):
    assert canonical(text) == expected


@pytest.mark.parametrize("filter_text, expected", [
    ("(!?x.name) == true", "(!?x.name) == true"),
    ("!?x.name == true", "!(?x.name == true)"),
    ("(?x.a == 1 || ?x.b == 2) && ?x.c == 3", "(?x.attributes.a == 1 || ?x.attributes.b == 2)"
     " && ?x.attributes.c == 3"),
    ("?x.a == 1 || (?x.b == 2 && ?x.c == 3)", "?x.attributes.a == 1 || ?x.attributes.b == 2"
     " && ?x.attributes.c == 3"),
    ("((?x.a == 1)) && (((?x.b == 2)))", "?x.attributes.a == 1 && ?x.attributes.b == 2"),
    ("(?x.a == 1 && ?x.b == 2) && ?x.c == 3",
     "?x.attributes.a == 1 && ?x.attributes.b == 2 && ?x.attributes.c == 3"),
    ("!!IS_NULL(?x.a)", "!!IS_NULL(?x.attributes.a)"),
    ("(?x.a == 1) == false", "(?x.attributes.a == 1) == false"),
    ("REGEX(?x.name, \"^a\", \"i\")", 'REGEX(?x.name, "^a", "i")'),
    ("?x.a > -1.5e-7", "?x.attributes.a > -1.5e-07"),
])
def test_filter_precedence_is_kept(filter_text, expected):
    filter_text = filter_text.replace("?x.a", "?x.attributes.a").replace(
        "?x.b", "?x.attributes.b").replace("?x.c", "?x.attributes.c")
    text = f"FIND(?x) WHERE {{ FILTER({filter_text}) }}"
    assert canonical(text) == f"FIND(?x)\nWHERE {{\n  FILTER({expected})\n}}"


def test_hand_built_ast_prints_to_equivalent_text():
    x = A.Path("x", ("attributes", "n"))
    expr = A.BoolOp("||", (
        A.Compare("==", A.NotOp(x), A.Literal(False)),
        A.NotOp(A.BoolOp("&&", (A.Call("IS_NULL", (x,)), A.Compare("<", x, A.Literal(2.0))))),
    ))
    command = A.Find(
        items=(A.Path("x"), A.Aggregate("COUNT", True, A.Path("y"))),
        where=(
            A.ConceptPattern("x", A.ConceptMatch(type=A.Literal("T"))),
            A.PropositionPattern(None, A.PropositionMatch(
                A.VarTerm("x"), A.Predicate((A.Literal("p"),), (0, None)), A.VarTerm("y"))),
            A.FilterPattern(expr),
        ),
        order_by=(A.OrderKey(A.Path("x", ("name",)), True),),
        limit=A.Literal(3),
    )
    assert parse(to_text(command)).command == command


@pytest.mark.parametrize("value, text", [
    (None, "null"), (True, "true"), (False, "false"), (0, "0"), (-12, "-12"),
    (2.0, "2.0"), (0.1, "0.1"), (1e16, "1e+16"), (-0.0, "-0.0"),
    ("a\"b\\c\nd\t", '"a\\"b\\\\c\\nd\\t"'), ("日本😀", '"日本😀"'), ("\u2028", '"\u2028"'),
    ([], "[]"), ({}, "{}"), ([1, [2, {"a": None}]], '[1, [2, { a: null }]]'),
    ({"ok_key": 1, "not ok": 2, "null": 3, "_x": 4},
     '{ ok_key: 1, "not ok": 2, "null": 3, _x: 4 }'),
])
def test_value_text(value, text):
    assert value_text(value) == text
    # and it is what the parser reads back
    parsed = parse(f'UPSERT {{ CONCEPT ?a {{ {{type: "T", name: "n"}} '
                   f'SET ATTRIBUTES {{ v: {text} }} }} }}')
    got = parsed.command.statements[0].blocks[0].attributes.value["v"]
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), {1, 2}, object()])
def test_value_text_refuses_non_json(bad):
    with pytest.raises((TypeError, ValueError)):
        value_text(bad)


# --- RC11 §3.4.2: predicate variables ------------------------------------------------------

def test_predicate_variable_canonical_form():
    text = ('FIND(?p,?n)WHERE{?l({type:"Drug",name:"Aspirin"},?p,?n)'
            '(?u,"stated",(?d,?q,?n))FILTER(?p!="belongs_to_domain")}ORDER BY ?p')
    assert canonical(text) == '''\
FIND(?p, ?n)
WHERE {
  ?l ({type: "Drug", name: "Aspirin"}, ?p, ?n)
  (?u, "stated", (?d, ?q, ?n))
  FILTER(?p != "belongs_to_domain")
}
ORDER BY ?p ASC'''
    match = parse(text).command.where[0].match
    assert match.predicate == A.PredicateVar("p")
