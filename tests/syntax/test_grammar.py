"""What the grammar accepts, and the AST it gives: the shapes of spec §3–§5, the lexical rules
of §2.7–§2.8, and the deliberate leniencies written at the top of grammar/kip.lark."""
from __future__ import annotations

import pytest

from nexus.syntax import ast as A
from nexus.syntax import parse, to_text


def cmd(text: str):
    parsed = parse(text)
    assert parse(to_text(parsed.command)).command == parsed.command
    return parsed.command


def where0(text: str):
    return cmd(f"FIND(?x) WHERE {{ {text} }}").where[0]


def lit(v):
    return A.Literal(v)


# --- KQL -----------------------------------------------------------------------------------

def test_find_items_paths_and_aggregates():
    c = cmd("FIND(?a, ?b.name, ?b.attributes.risk_level, ?l.metadata.source, COUNT(?a), "
            "COUNT(DISTINCT ?b), SUM(?a.attributes.n), AVG(?a.attributes.n), MIN(?a.name), "
            "MAX(?a.name)) WHERE { }")
    assert c.items[:4] == (A.Path("a"), A.Path("b", ("name",)),
                           A.Path("b", ("attributes", "risk_level")),
                           A.Path("l", ("metadata", "source")))
    assert c.items[4] == A.Aggregate("COUNT", False, A.Path("a"))
    assert c.items[5] == A.Aggregate("COUNT", True, A.Path("b"))
    assert [i.func for i in c.items[6:]] == ["SUM", "AVG", "MIN", "MAX"]


@pytest.mark.parametrize("field", ["id", "type", "name", "subject", "predicate", "object",
                                   "attributes", "metadata"])
def test_dot_path_fields(field):
    assert cmd(f"FIND(?x.{field}) WHERE {{ }}").items[0] == A.Path("x", (field,))


def test_concept_clauses():
    assert where0('?d {id: "C:123"}') == A.ConceptPattern("d", A.ConceptMatch(id=lit("C:123")))
    assert where0('?d {type: "Drug", name: "Aspirin"}').match == A.ConceptMatch(
        type=lit("Drug"), name=lit("Aspirin"))
    assert where0('?d {name: "Aspirin", type: "Drug"}').match == A.ConceptMatch(
        type=lit("Drug"), name=lit("Aspirin"))
    assert where0('?d {"type": "Drug"}').match == A.ConceptMatch(type=lit("Drug"))
    assert where0('?d {name: "Headache"}').match == A.ConceptMatch(name=lit("Headache"))


def test_proposition_clauses():
    p = where0('?l (?drug, "treats", ?symptom)')
    assert p == A.PropositionPattern("l", A.PropositionMatch(
        A.VarTerm("drug"), A.Predicate((lit("treats"),)), A.VarTerm("symptom")))
    assert where0('?f (id: "P:12345:treats")').match == A.PropositionIdMatch(
        lit("P:12345:treats"))
    nested = where0('(?u, "stated", ({type: "Drug", name: "A"}, "treats", (id: "P:1:x")))')
    assert nested.var is None
    inner = nested.match.object
    assert isinstance(inner, A.PropositionMatch)
    assert inner.subject == A.ConceptMatch(type=lit("Drug"), name=lit("A"))
    assert inner.object == A.PropositionIdMatch(lit("P:1:x"))


@pytest.mark.parametrize("text, hops", [
    ('"follows"{1,5}', (1, 5)), ('"follows"{1,}', (1, None)), ('"follows"{5}', (5, 5)),
    ('"is_subclass_of"{0,5}', (0, 5)), ('"p"{0}', (0, 0)), ('"p" {2 , 3}', (2, 3)),
])
def test_path_operators(text, hops):
    pred = where0(f"(?a, {text}, ?b)").match.predicate
    assert pred.hops == hops and len(pred.names) == 1


def test_predicate_alternatives():
    pred = where0('(?a, "follows" | "connects" | "links", ?b)').match.predicate
    assert pred.names == (lit("follows"), lit("connects"), lit("links")) and pred.hops is None


def test_filter_operators_and_functions():
    f = where0('FILTER(?d.attributes.risk_level < 3 && CONTAINS(?d.name, "acid") || '
               '!IS_NULL(?d.metadata.expires_at) && IN(?d.attributes.c, ["a", 1, null]) && '
               'STARTS_WITH(?d.name, "a") && ENDS_WITH(?d.name, "b") && '
               'REGEX(?d.name, "^a", "i") && IS_NOT_NULL(?d.id) && ?d.name != "x" && '
               '?d.attributes.n >= 1.5 && ?d.attributes.n <= -2 && ?d.attributes.n > 0 && '
               '?d.attributes.ok == true)').expr
    assert isinstance(f, A.BoolOp) and f.op == "||" and len(f.operands) == 2
    left, right = f.operands
    assert left.op == "&&" and len(left.operands) == 2
    assert isinstance(right.operands[0], A.NotOp)
    funcs = [o.func for o in right.operands if isinstance(o, A.Call)]
    assert funcs == ["IN", "STARTS_WITH", "ENDS_WITH", "REGEX", "IS_NOT_NULL"]
    ops = [o.op for o in right.operands if isinstance(o, A.Compare)]
    assert ops == ["!=", ">=", "<=", ">", "=="]


def test_filter_precedence():
    # || binds loosest, then &&, then !, then comparison.
    e = where0("FILTER(!?x.name == 1 || ?x.id == 2 && ?x.type == 3)").expr
    assert e.op == "||"
    assert e.operands[0] == A.NotOp(A.Compare("==", A.Path("x", ("name",)), lit(1)))
    assert e.operands[1].op == "&&"


def test_not_optional_union_blocks():
    c = cmd('FIND(?d) WHERE { ?d {type: "Drug"} NOT { (?d, "is_class_of", {name: "NSAID"}) } '
            'OPTIONAL { (?d, "has_side_effect", ?s) } UNION { ?d {type: "Drug"} '
            'OPTIONAL { NOT { FILTER(true) } } } }')
    kinds = [type(p) for p in c.where]
    assert kinds == [A.ConceptPattern, A.NotPattern, A.OptionalPattern, A.UnionPattern]
    assert isinstance(c.where[3].body[1].body[0], A.NotPattern)


def test_solution_modifiers():
    c = cmd('FIND(?d.name, COUNT(?s)) WHERE { } ORDER BY ?d.name DESC, COUNT(?s) '
            'ASC, ?d.id LIMIT 20 CURSOR "tok"')
    assert [(k.expr, k.descending) for k in c.order_by] == [
        (A.Path("d", ("name",)), True), (A.Aggregate("COUNT", False, A.Path("s")), False),
        (A.Path("d", ("id",)), False)]
    assert c.limit == lit(20) and c.cursor == lit("tok")
    # Modifiers in any order, each at most once.
    c2 = cmd('FIND(?d) WHERE { } CURSOR "t" LIMIT 5 ORDER BY ?d.name')
    assert (c2.limit, c2.cursor) == (lit(5), lit("t")) and c2.order_by


def test_explain_is_kql():
    parsed = parse("EXPLAIN FIND(?x) WHERE { ?x {type: \"T\"} }")
    assert isinstance(parsed.command, A.Explain) and parsed.kind.label == "KQL"


# --- KML -----------------------------------------------------------------------------------

def test_upsert_structure():
    c = cmd('''
        UPSERT {
          CONCEPT ?a { {type: "T", name: "a"} }
          CONCEPT { {id: "C:1"} SET ATTRIBUTES { x: 1 } }
          CONCEPT ?b {
            {type: "T", name: "b"}
            SET ATTRIBUTES { y: [1, 2] }
            SET PROPOSITIONS {
              ("rel", ?a)
              ("rel", {type: "T", name: "c"}) WITH METADATA { confidence: 0.5 }
              ("rel", {id: "C:9"}),
              ("about", (?a, "rel", {id: "C:9"}))
              ("about", (id: "P:3:rel"))
            }
          }
          WITH METADATA { source: "inner" }
          PROPOSITION ?p { (?a, "rel", ?b) SET ATTRIBUTES { w: 1 } } WITH METADATA { c: 1 }
          PROPOSITION { (id: "P:3:rel") }
        }
        WITH METADATA { source: "outer" }
        UPSERT { }
    ''')
    assert len(c.statements) == 2 and c.statements[1].blocks == ()
    s = c.statements[0]
    assert s.metadata == lit({"source": "outer"})
    a, anon, b, p, anon_p = s.blocks
    assert a.handle == "a" and a.attributes is None and a.propositions is None
    assert anon.handle is None and anon.match == A.ConceptMatch(id=lit("C:1"))
    assert b.metadata == lit({"source": "inner"}) and len(b.propositions) == 5
    assert b.propositions[1].metadata == lit({"confidence": 0.5})
    assert isinstance(b.propositions[3].target, A.PropositionMatch)
    assert p.handle == "p" and p.metadata == lit({"c": 1}) and p.attributes == lit({"w": 1})
    assert anon_p.match == A.PropositionIdMatch(lit("P:3:rel"))
    assert parse("UPSERT { }").kind.label == "KML"


def test_empty_set_clauses():
    b = cmd('UPSERT { CONCEPT ?a { {type: "T", name: "a"} SET ATTRIBUTES { } '
            'SET PROPOSITIONS { } } }').statements[0].blocks[0]
    assert b.attributes == lit({}) and b.propositions == ()


@pytest.mark.parametrize("text, cls, keys", [
    ('DELETE ATTRIBUTES {"risk_category", "old_id"} FROM ?drug WHERE { }', A.DeleteAttributes,
     ("risk_category", "old_id")),
    ('DELETE ATTRIBUTES ["a"] FROM ?drug WHERE { }', A.DeleteAttributes, ("a",)),
    ('DELETE METADATA {"old_source",} FROM ?drug WHERE { }', A.DeleteMetadata, ("old_source",)),
])
def test_delete_keys(text, cls, keys):
    c = cmd(text)
    assert isinstance(c, cls) and c.target == "drug"
    assert tuple(k.value for k in c.keys) == keys


def test_delete_propositions_and_concept():
    c = cmd('DELETE PROPOSITIONS ?link WHERE { ?link (?s, "treats", ?o) '
            'FILTER(?link.metadata.source == "untrusted_source_v1") }')
    assert isinstance(c, A.DeletePropositions) and c.target == "link" and len(c.where) == 2
    c = cmd('DELETE CONCEPT ?drug DETACH WHERE { ?drug {type: "Drug", name: "OutdatedDrug"} }')
    assert isinstance(c, A.DeleteConcept) and c.target == "drug"
    assert parse('DELETE CONCEPT ?d DETACH WHERE { }').kind.label == "KML"


# --- META ----------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("DESCRIBE PRIMER", A.DescribePrimer()),
    ("DESCRIBE DOMAINS", A.DescribeDomains()),
    ("DESCRIBE CONCEPT TYPES", A.DescribeConceptTypes()),
    ('DESCRIBE CONCEPT TYPES LIMIT 10 CURSOR "c"',
     A.DescribeConceptTypes(lit(10), lit("c"))),
    ('DESCRIBE CONCEPT TYPE "Drug"', A.DescribeConceptType(lit("Drug"))),
    ("DESCRIBE PROPOSITION TYPES LIMIT 5", A.DescribePropositionTypes(lit(5))),
    ('DESCRIBE PROPOSITION TYPE "treats"', A.DescribePropositionType(lit("treats"))),
    ('SEARCH CONCEPT "aspirin" LIMIT 5', A.Search("CONCEPT", lit("aspirin"), None, lit(5))),
    ('SEARCH CONCEPT "Aspirin" WITH TYPE "Drug"', A.Search("CONCEPT", lit("Aspirin"),
                                                           lit("Drug"))),
    ('SEARCH PROPOSITION "treats" WITH TYPE "treats" LIMIT 10',
     A.Search("PROPOSITION", lit("treats"), lit("treats"), lit(10))),
])
def test_meta_commands(text, expected):
    parsed = parse(text)
    assert parsed.command == expected and parsed.kind.label == "META"


# --- lexical rules -------------------------------------------------------------------------

def test_comments_anywhere():
    c = cmd('// leading\nFIND(?x) // after FIND\nWHERE { // open\n ?x {type: "T", // key\n'
            ' name: "n // not a comment"} // end\n} // trailing')
    assert c.where[0].match.name == lit("n // not a comment")


@pytest.mark.parametrize("json_text, value", [
    ('"\\u00e9\\n\\t\\"\\\\\\/"', 'é\n\t"\\/'),
    ('"\\ud83d\\ude00"', "😀"),
    ('"😀 日本語"', "😀 日本語"),
    ("0", 0), ("-0", 0), ("12", 12), ("2.0", 2.0), ("1e3", 1000.0), ("1E-2", 0.01),
    ("-1.5e+2", -150.0), ("123456789012345678901234567890", 123456789012345678901234567890),
    ("true", True), ("false", False), ("null", None),
    ("[]", []), ("{}", {}), ('[1, "a", [null], {"k": {}}]', [1, "a", [None], {"k": {}}]),
    ('{ "quoted key": 1, bare_key: 2, "": 3 }', {"quoted key": 1, "bare_key": 2, "": 3}),
    ("[1, 2,]", [1, 2]), ("{ a: 1, }", {"a": 1}),
])
def test_json_values(json_text, value):
    c = cmd(f'UPSERT {{ CONCEPT ?a {{ {{type: "T", name: "n"}} SET ATTRIBUTES {{ v: {json_text} '
            f'}} }} }}')
    got = c.statements[0].blocks[0].attributes.value["v"]
    assert got == value and type(got) is type(value)


def test_keywords_are_fine_as_keys_and_path_segments():
    c = cmd('UPSERT { CONCEPT ?a { {type: "T", name: "n"} SET ATTRIBUTES { FIND: 1, limit: 2, '
            'id: 3, type: 4, true_value: 5, _private: 6 } } }')
    assert set(c.statements[0].blocks[0].attributes.value) == {
        "FIND", "limit", "id", "type", "true_value", "_private"}
    f = cmd("FIND(?x.attributes.LIMIT, ?where.name) WHERE { }")
    assert f.items == (A.Path("x", ("attributes", "LIMIT")), A.Path("where", ("name",)))


def test_meta_type_names_are_strings():
    c = cmd('FIND(?t) WHERE { ?t {type: "$ConceptType", name: "$PropositionType"} }')
    assert c.where[0].match.type == lit("$ConceptType")


def test_trailing_semicolons_and_whitespace():
    assert parse("DESCRIBE PRIMER;").command == A.DescribePrimer()
    assert parse("\n\t DESCRIBE PRIMER ;; \r\n").command == A.DescribePrimer()


def test_trailing_commas():
    c = cmd('FIND(?x, ?y,) WHERE { ?x {type: "T",} }')
    assert len(c.items) == 2 and c.where[0].match == A.ConceptMatch(type=lit("T"))


def test_positions_are_recorded():
    c = parse('FIND(?x)\nWHERE {\n  ?x {type: :t}\n  FILTER(?x.name == "a")\n}').command
    assert c.pos == A.Pos(1, 1)
    assert c.where[0].pos == A.Pos(3, 3)
    assert c.where[0].match.type.pos == A.Pos(3, 13)
    assert c.where[1].expr.left.pos == A.Pos(4, 10)
    # Positions are not part of equality: the same command written differently is equal.
    assert c == parse('FIND(?x) WHERE { ?x {type: :t} FILTER(?x.name == "a") }').command


def test_placeholder_names_are_collected():
    parsed = parse('FIND(?x) WHERE { ?x {type: :t, name: :n} FILTER(IN(?x.id, :ids)) } '
                   'LIMIT :limit')
    assert parsed.parameters == {"t", "n", "ids", "limit"}
    assert parse('FIND(?x) WHERE { ?x {name: ":not_a_param"} }').parameters == frozenset()
