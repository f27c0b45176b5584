"""The shell's pure parts, without a terminal: tokenizer, completeness, splitting, cursors,
rendering and completion."""
from __future__ import annotations

from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from nexus.shell import lexer, render
from nexus.shell.backend import LoadReport
from nexus.shell.commands import describe_command, parse_value
from nexus.shell.editor import KipCompleter, KipHighlighter

# --- completeness --------------------------------------------------------------------------


def test_is_complete_waits_for_balanced_and_finished_commands():
    c = lexer.is_complete
    assert not c("")
    assert not c("   \n  ")
    assert not c("// only a comment")
    assert not c("FIND(?x)")                        # balanced, but WHERE is missing
    assert not c("FIND(?x) WHERE {")
    assert not c('FIND(?x) WHERE { ?x {name: "}"}')  # the brace is inside a string
    assert not c("FIND(?x) WHERE { // }\n")         # ... or inside a comment
    assert c('FIND(?x) WHERE { ?x {name: "a"} }')
    assert c("FIND(?x);")                           # `;` runs it (and shows the error)
    assert c("FIND(?x) WHERE { ?x {typo \"A\"} }")   # an error in the middle: run it
    assert c('FIND(?x) WHERE { ?x {name: "abc} }')  # unterminated string: run it
    assert c("FIND(?x) }")                          # a closer too many: run it
    assert c('SEARCH CONCEPT "aspirin"')
    assert not c("DESCRIBE")
    assert c("DESCRIBE PRIMER")
    assert not c('FIND(?x) WHERE { ?x {name: "a"} }; FIND(?y)')   # the last one decides
    assert c('DESCRIBE PRIMER\nFIND(?y) WHERE { ?y {name: "b"} }')
    assert c(":help")
    assert c(":param x 1")
    assert not c(":explain FIND(?x) WHERE {")
    assert c(":explain FIND(?x) WHERE {\n ?x {name: \"a\"} }")


# --- splitting scripts ---------------------------------------------------------------------

def test_split_commands_on_semicolons_command_words_and_meta_lines():
    script = """\
// header comment
FIND(?x) WHERE {
  ?x {name: "FIND; UPSERT"}   // words in strings and comments: FIND
}
LIMIT 3
UPSERT { CONCEPT ?a { {type: "T", name: "a"} } }
WITH METADATA { source: "s" }
UPSERT { CONCEPT ?b { {type: "T", name: "b"} } };DESCRIBE PRIMER
:param n 3
EXPLAIN FIND(?x) WHERE { ?x {name: :n} }
SEARCH CONCEPT "x"
  WITH TYPE "T"
  LIMIT
:n
"""
    chunks = lexer.split_commands(script)
    assert [(c.kind, c.line) for c in chunks] == [
        ("kip", 2), ("kip", 6), ("kip", 8), ("kip", 8), ("meta", 9), ("kip", 10),
        ("kip", 11)]
    assert chunks[0].text.endswith("LIMIT 3")
    assert chunks[1].text.endswith('WITH METADATA { source: "s" }')
    assert chunks[3].text == "DESCRIBE PRIMER"
    assert chunks[4].text == ":param n 3"
    assert chunks[5].text.startswith("EXPLAIN FIND")
    assert chunks[6].text.endswith("LIMIT\n:n")   # a parameter after LIMIT, not a :command


def test_split_meta_explain_spans_lines_until_complete():
    chunks = lexer.split_commands(':explain FIND(?x) WHERE {\n  ?x {name: "a"}\n}\n:params\n')
    assert [c.kind for c in chunks] == ["meta", "meta"]
    assert chunks[0].text.endswith("}")


# --- tokens, variables, cursors ------------------------------------------------------------

def test_tokenizer_never_fails_and_covers_the_text():
    for text in ['FIND(?a.name, :p) WHERE { ?a {k:3, "x":true} } // c', '"unterminated\n?x',
                 "\\ @ # ü 😀", ""]:
        tokens = lexer.tokenize(text)
        assert "".join(t.text for t in tokens) == text
    kinds = {t.text: t.kind for t in lexer.tokenize('FIND(?a.name, :p) { k:3 } "s" // c')}
    assert kinds["?a.name"] == "var" and kinds[":p"] == "param" and kinds["3"] == "number"
    assert kinds['"s"'] == "string" and kinds["// c"] == "comment" and kinds["FIND"] == "word"


def test_variables_in_first_seen_order():
    assert lexer.variables("FIND(?b.name, ?a) WHERE { ?a {type: \"T\"} (?a, \"p\", ?b) ?c.x }") == [
        "?b", "?a", "?c"]


def test_with_cursor_appends_or_replaces():
    q = 'FIND(?x) WHERE { ?x {name: "CURSOR"} } LIMIT 2'
    assert lexer.with_cursor(q, "abc") == q + ' CURSOR "abc"'
    assert lexer.with_cursor(q + ";", "abc") == q + ' CURSOR "abc"'
    assert lexer.with_cursor(q + ' CURSOR "old" // c', "new") == q + ' CURSOR "new" // c'
    assert lexer.with_cursor("DESCRIBE CONCEPT TYPES", "t") == 'DESCRIBE CONCEPT TYPES CURSOR "t"'


# --- rendering -----------------------------------------------------------------------------

P = render.Painter(False)


def rendered(command: str, response: dict, width: int = 80) -> list[str]:
    return render.render(command, response, P, width).lines


def test_find_table_folds_nested_values_and_clips():
    node = {"_type": "ConceptNode", "id": "C:1", "type": "Drug", "name": "Aspirin",
            "attributes": {"long": "x" * 200}}
    lines = rendered("FIND(?d.name, ?d.attributes.tags, ?d) WHERE { ?d {type: \"Drug\"} }",
                     {"result": [["Aspirin", None], [["a", "b"], None], [node, node]]})
    assert lines[0] == " ?d.name | ?d.attributes.tags | ?d"
    assert lines[2].startswith(' Aspirin | ["a","b"]          | {"id":"C:1","type":"Drug"')
    assert lines[2].endswith("…") and render.width_of(lines[2]) <= 80
    assert lines[3].startswith(" null    | null ")


def test_find_single_element_is_compact_and_aggregates_are_scalars():
    link = {"_type": "PropositionLink", "id": "P:3:treats", "subject": "C:1",
            "predicate": "treats", "object": "C:2", "metadata": {"confidence": 0.9}}
    lines = rendered('FIND(?l) WHERE { ?l (?a, "treats", ?b) }', {"result": [link]})
    assert lines == ["P:3:treats  C:1 -[treats]-> C:2", "  metadata:", "    confidence: 0.9"]
    out = render.render("FIND(COUNT(?a), MAX(?a.attributes.n)) WHERE { ?a {type: \"T\"} }",
                        {"result": [3, 7]}, P)
    assert out.lines == [" COUNT(?a) | MAX(?a.attributes.n)", "-----------+----------------------",
                         "         3 |                    7"]
    assert out.summary == "1 row"


def test_kml_results_are_one_line():
    assert rendered('UPSERT { CONCEPT ?a { {type: "T", name: "a"} } }',
                    {"result": {"blocks": 1, "upsert_concept_nodes": ["C:1", "C:2"],
                                "upsert_proposition_links": ["P:3:p"]}}) == [
        "UPSERT: 2 concepts (C:1, C:2), 1 proposition (P:3:p)"]
    assert rendered('DELETE CONCEPT ?a DETACH WHERE { ?a {name: "a"} }',
                    {"result": {"deleted_concepts": 1, "deleted_propositions": 2}}) == [
        "DELETE: 1 concept deleted, 2 propositions deleted"]


def test_describe_and_search_layouts():
    out = render.render("DESCRIBE CONCEPT TYPES", {"result": ["Drug", "Event", "Person"]}, P, 30)
    assert out.lines == ["Drug    Event   Person"] and out.summary == "3 types"
    hits = [{"_type": "ConceptNode", "id": "C:5", "type": "Drug", "name": "Aspirin",
             "metadata": {"_score": 0.91234}}]
    lines = rendered('SEARCH CONCEPT "asp"', {"result": hits})
    assert lines[2] == " 0.912 | C:5 | Drug | Aspirin"
    link = {"_type": "PropositionLink", "id": "P:3:treats", "subject": "C:1",
            "predicate": "treats", "object": "C:2", "metadata": {"_score": 0.5}}
    lines = rendered('SEARCH PROPOSITION "treats"', {"result": [link]})
    assert lines[0] == " score | id         | predicate | link"
    assert lines[2] == " 0.500 | P:3:treats | treats    | C:1 -[treats]-> C:2"
    primer = {"identity": {"id": "C:9", "type": "Person", "name": "$self"},
              "domain_map": [{"name": "CoreSchema", "key_concept_types": ["Person"]}],
              "total_domains": 1}
    lines = rendered("DESCRIBE PRIMER", {"result": primer})
    assert lines[:3] == ["identity:", "  id: C:9", "  type: Person"]
    assert "  - name: CoreSchema" in lines
    assert "    key_concept_types: Person" in lines


def test_error_rendering_keeps_the_caret_under_the_column():
    err = {"code": "KIP_1001", "name": "InvalidSyntax", "message": "Unexpected 'x'",
           "hint": "Fix it.", "data": {"line": 2, "column": 5, "snippet": "  a x b\n    ^"}}
    assert render.render_error(err, P) == [
        "KIP_1001 InvalidSyntax: Unexpected 'x'",
        "  at line 2, column 5:",
        "      a x b",
        "        ^",
        "  hint: Fix it."]
    coloured = render.render_error(err, render.Painter(True))
    assert "\x1b[1;31m" in coloured[0] and "\x1b[" in coloured[3]


# --- meta command helpers ------------------------------------------------------------------

def test_describe_shortcuts_and_param_values():
    assert describe_command("") == "DESCRIBE PRIMER"
    assert describe_command("types") == "DESCRIBE CONCEPT TYPES"
    assert describe_command("predicates") == "DESCRIBE PROPOSITION TYPES"
    assert describe_command("type Drug") == 'DESCRIBE CONCEPT TYPE "Drug"'
    assert describe_command('predicate "treats"') == 'DESCRIBE PROPOSITION TYPE "treats"'
    assert describe_command("nonsense") is None
    assert parse_value("3") == 3 and parse_value('{"a": [1]}') == {"a": [1]}
    assert parse_value("Alice") == "Alice" and parse_value('"Bob"') == "Bob"


def test_load_report_summary():
    r = LoadReport()
    r.add_result({"blocks": 1, "upsert_concept_nodes": ["C:1"], "upsert_proposition_links": []})
    r.add_result({"blocks": 1, "upsert_concept_nodes": ["C:2", "C:3"]})
    assert r.summary() == "2 statements, 3 concepts"


# --- completion and highlighting -----------------------------------------------------------

class _Schema:
    def types(self):
        return ["Drug", "Person", "Widget"]

    def predicates(self):
        return ["treats", "made_by"]


class _Shell:
    schema = _Schema()
    params = {"who": 1}


def complete(text: str) -> list[str]:
    completer = KipCompleter(_Shell())
    return [c.text for c in completer.get_completions(Document(text), CompleteEvent(True))]


def test_completion_contexts():
    assert complete('FIND(?d) WHERE { ?d {type: "W') == ['Widget"']
    assert complete('FIND(?d) WHERE { ?d {type: "') == ['Drug"', 'Person"', 'Widget"']
    assert complete('FIND(?d) WHERE { (?d, "t') == ['treats"']
    assert complete('DESCRIBE PROPOSITION TYPE "m') == ['made_by"']
    assert complete('FIND(?drug, ?dose) WHERE { ?d') == ["?drug", "?dose"]
    assert complete("FIND(?drug.na") == ["name"]
    assert complete("FIND(?d) WHERE { ?d {type: \"T\"} OPT") == ["OPTIONAL"]
    assert complete("FIND(?d) WHERE { ?d {type: W") == ['"Widget"']
    assert complete("FIND(?d) WHERE { ?d {type: ") == ['"Drug"', '"Person"', '"Widget"']
    assert complete(":de") == [":describe"]
    assert sorted(complete(":describe ty")) == ["type", "types"]
    assert complete(":describe type P") == ["Person"]
    assert complete(":json o") == ["on", "off"]
    assert complete(":unparam ") == ["who"]
    assert complete("FIND(?d) ") == []


def test_highlighter_styles_tokens():
    doc = Document('FIND(?a.name) WHERE { ?a {name: :n, k: 3} } // c\n"s"')
    first = KipHighlighter().lex_document(doc)(0)
    styles = {text: style for style, text in first}
    assert styles["FIND"] == "class:kip.keyword"
    assert styles["?a.name"] == "class:kip.variable"
    assert styles[":n"] == "class:kip.param"
    assert styles["3"] == "class:kip.number"
    assert styles["// c"] == "class:kip.comment"
    assert KipHighlighter().lex_document(doc)(1) == [("class:kip.string", '"s"')]
