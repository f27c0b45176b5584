"""The shell's pure parts, without a terminal: tokenizer, completeness, splitting, cursors,
rendering and completion."""
from __future__ import annotations

import io
import re

from hypothesis import given, settings
from hypothesis import strategies as st
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from nexus.shell import entry, layout, lexer, render
from nexus.shell.backend import LoadReport
from nexus.shell.commands import describe_command, parse_value
from nexus.shell.completion import KipCompleter
from nexus.shell.editor import KipHighlighter
from nexus.shell.names import NameBook
from nexus.shell.progress import Progress

# --- completeness --------------------------------------------------------------------------


def test_is_complete_waits_for_balanced_and_finished_commands():
    c = entry.is_complete
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


UPSERT_A = 'UPSERT { CONCEPT ?a { {type: "T", name: "a"} } }'
UPSERT_B = 'UPSERT { CONCEPT ?b { {type: "T", name: "b"} } }'


def test_a_finished_upsert_waits_for_what_may_follow():
    c = entry.is_complete
    assert not c(UPSERT_A)                               # a WITH METADATA may follow
    assert not c(UPSERT_A + "\nWITH METADATA {")          # open brackets
    assert not c(UPSERT_A + "\nWITH METADATA")            # ends too early
    assert not c(UPSERT_A + "\nWITH METADATA { source: \"s\" }")   # another UPSERT may follow
    assert not c(UPSERT_A + "\n" + UPSERT_B)
    assert c(UPSERT_A + ";")                             # `;` runs it
    assert c(UPSERT_A + "\nFIND(?x) WHERE { ?x {name: \"a\"} }")   # another statement: runs
    assert c('DELETE CONCEPT ?x DETACH WHERE { ?x {name: "a"} }')  # nothing may follow
    assert entry.parse_state(UPSERT_A) == "incomplete"
    assert entry.parse_state('FIND(?x) WHERE { ?x {name: "a"} }') == "complete"
    assert entry.parse_state("FIND(?x) WHERE { ?x {typo 1} }") == "error"
    assert entry.may_continue(UPSERT_A) and not entry.may_continue("DESCRIBE PRIMER")


def test_shell_words_from_other_shells_are_shell_commands():
    for line in ("\\q", "\\?", "\\dt", ".quit", ".exit", ".help", "quit", "exit", "help",
                 "QUIT", "Exit;", " help "):
        assert entry.is_meta(line), line
        assert entry.is_complete(line), line
        assert [c.kind for c in entry.split_commands(line)] == ["meta"], line
    for line in ("quit me", "FIND(?help)", "helpful"):
        assert not entry.is_meta(line), line
    chunks = entry.split_commands('FIND(?x) WHERE { ?x {name: "quit"} }\nquit\n\\q\n')
    assert [(c.kind, c.text) for c in chunks] == [
        ("kip", 'FIND(?x) WHERE { ?x {name: "quit"} }'), ("meta", "quit"), ("meta", "\\q")]
    # Inside brackets a lone word is not a command (it is the parser's to judge).
    assert [c.kind for c in entry.split_commands("FIND(?x) WHERE {\nhelp\n}")] == ["kip"]


def test_an_entry_of_several_upserts_is_one_command():
    capsule = f"{UPSERT_A}\nWITH METADATA {{ source: \"s\" }}\n\n{UPSERT_B}\n"
    assert [c.kind for c in entry.split_commands(capsule)] == ["kip", "kip"]   # a script
    joined = entry.split_commands(capsule, join=True)                          # an entry
    assert [c.text for c in joined] == [capsule.strip()]
    # A statement of another kind still ends the command; so does `;`.
    mixed = entry.split_commands(f"{UPSERT_A}\nDESCRIBE PRIMER\n{UPSERT_A};{UPSERT_B}",
                                 join=True)
    assert [c.text for c in mixed] == [UPSERT_A, "DESCRIBE PRIMER", UPSERT_A, UPSERT_B]
    # A capsule with an error stays whole: the engine reports it and runs none of it.
    broken = f'UPSERT {{ CONCEPT ?a {{ {{typo "x"}} }} }}\n{UPSERT_B}'
    assert len(entry.split_commands(broken, join=True)) == 1


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
    chunks = entry.split_commands(script)
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
    chunks = entry.split_commands(':explain FIND(?x) WHERE {\n  ?x {name: "a"}\n}\n:params\n')
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
ASPIRIN = {"_type": "ConceptNode", "id": "C:1", "type": "Drug", "name": "Aspirin",
           "attributes": {"dose": 500}}
HEADACHE = {"_type": "ConceptNode", "id": "C:2", "type": "Symptom", "name": "Headache"}
TREATS = {"_type": "PropositionLink", "id": "P:3:treats", "subject": "C:1",
          "predicate": "treats", "object": "C:2", "metadata": {"confidence": 0.9}}
BOOK = {"C:1": ASPIRIN, "C:2": HEADACHE, "P:3:treats": TREATS}


def view(width: int = 80, names: dict | None = None, ids: bool = False) -> layout.View:
    return layout.View(P, width, names or {}, ids)


def rendered(command: str, response: dict, width: int = 80, names: dict | None = None,
             ids: bool = False) -> list[str]:
    return render.render(command, response, view(width, names, ids)).lines


def test_find_table_folds_nested_values_and_clips():
    lines = rendered("FIND(?d.name, ?d.attributes.tags, ?d.attributes.long) WHERE "
                     "{ ?d {type: \"Drug\"} }",
                     {"result": [["Aspirin", None], [["a", "b"], None], ["x" * 200, None]]})
    assert lines[0] == " ?d.name | ?d.attributes.tags | ?d.attributes.long"
    assert lines[2].startswith(' Aspirin | ["a","b"]          | xxxxx')
    assert lines[2].endswith("…") and layout.width_of(lines[2]) <= 80
    assert lines[3].startswith(" null    | null ")


def test_links_show_their_ends_by_name_and_ids_on_demand():
    assert rendered('FIND(?l) WHERE { ?l (?a, "treats", ?b) }', {"result": [TREATS]},
                    names=BOOK) == ["Aspirin —treats→ Headache", "  metadata:",
                                    "    confidence: 0.9"]
    assert rendered('FIND(?l) WHERE { ?l (?a, "treats", ?b) }', {"result": [TREATS]},
                    names=BOOK, ids=True)[0] == (
        "Aspirin [C:1] —treats→ Headache [C:2]  [P:3:treats]")
    # An end nobody could name stays an id.
    assert rendered('FIND(?l) WHERE { ?l (?a, "treats", ?b) }',
                    {"result": [TREATS]})[0] == "C:1 —treats→ C:2"
    # A higher-order link: its end is a link, shown in brackets.
    cited = {"_type": "PropositionLink", "id": "P:5:cited_by", "subject": "P:3:treats",
             "predicate": "cited_by", "object": "C:4"}
    names = dict(BOOK, **{"C:4": {"_type": "ConceptNode", "id": "C:4", "type": "Study",
                                  "name": "Study 4"}})
    lines = rendered('FIND(?l, ?x) WHERE { ?l (?a, "cited_by", ?x) }',
                     {"result": [[cited], [names["C:4"]]]}, names=names)
    assert lines[0] == " ?l" + " " * 45 + "| ?x"
    assert lines[2] == " (Aspirin —treats→ Headache) —cited_by→ Study 4 | Study 4 (Study)"


def test_node_and_link_lists_are_tables_of_the_columns_that_matter():
    widgets = [{"_type": "ConceptNode", "id": f"C:{i}", "type": "Widget", "name": f"w{i}",
                "attributes": {"size": i, **({"colour": "red"} if i % 2 else {})},
                "metadata": {"_version": 1}} for i in range(3)]
    lines = rendered('FIND(?w) WHERE { ?w {type: "Widget"} }', {"result": widgets})
    assert lines == [" name | type   | size | colour", "------+--------+------+--------",
                     " w0   | Widget |    0 |", " w1   | Widget |    1 | red",
                     " w2   | Widget |    2 |"]
    lines = rendered('FIND(?w) WHERE { ?w {type: "Widget"} }', {"result": widgets}, ids=True)
    assert lines[0] == " id  | name | type   | size | colour" and lines[2].startswith(" C:0 | w0")
    second = dict(TREATS, id="P:4:treats", object="C:1", attributes={"since": 2001})
    lines = rendered('FIND(?l) WHERE { ?l (?a, "treats", ?b) }',
                     {"result": [TREATS, second]}, names=BOOK)
    assert lines == [" link                      | since", "---------------------------+-------",
                     " Aspirin —treats→ Headache |", " Aspirin —treats→ Aspirin  |  2001"]
    # Nodes in a table of several columns: by name and type.
    lines = rendered('FIND(?d, ?d.attributes.dose) WHERE { ?d {type: "Drug"} }',
                     {"result": [[ASPIRIN], [500]]})
    assert lines[2] == " Aspirin (Drug) |                500"


def test_find_single_element_and_aggregates():
    lines = rendered('FIND(?d) WHERE { ?d {name: "Aspirin"} }', {"result": [ASPIRIN]})
    assert lines == ['Drug "Aspirin"', "  attributes:", "    dose: 500"]
    out = render.render("FIND(COUNT(?a), MAX(?a.attributes.n)) WHERE { ?a {type: \"T\"} }",
                        {"result": [3, 7]}, view())
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


def test_rc11_result_shapes_render_from_the_response_alone():
    # The grammar may not know these statements yet: the response's shape is enough.
    update = ('UPDATE ?l SET METADATA { strength: MUL(?l.metadata.strength, 0.9) } '
              'WHERE { ?l (?s, "p", ?o) }')
    assert rendered(update, {"result": {"updated": 3, "matched": 5}}) == [
        "UPDATE: 5 matched, 3 updated"]
    merge = 'MERGE CONCEPT ?a INTO ?b WHERE { ?a {name: "x"} ?b {name: "y"} }'
    assert rendered(merge, {"result": {"merged": 1, "links_repointed": 4,
                                       "links_deduplicated": 1, "attributes_filled": 2}}) == [
        "MERGE: 1 concept merged, 4 links repointed, 1 duplicate link dropped, "
        "2 attributes filled"]
    assert rendered(merge, {"result": {"merged": "Drug:Asprin", "links_repointed": 0}}) == [
        "MERGE: merged Drug:Asprin, 0 links repointed"]
    capsule = 'UPSERT {\n  CONCEPT ?a { {type: "Drug", name: "Aspirin"} }\n}\n'
    out = render.render('EXPORT ?d WHERE { ?d {type: "Drug"} } LIMIT 1',
                        {"result": {"capsule": capsule, "concepts": 1, "propositions": 0},
                         "next_cursor": "abc"}, view())
    assert out.lines == capsule.rstrip("\n").splitlines()
    assert out.summary == "1 concept, 0 propositions"
    hits = [dict(ASPIRIN, metadata={"_score": 0.8})]
    out = render.render('SEARCH CONCEPT "asp" MODE "semantic" THRESHOLD 0.5',
                        {"result": hits, "hint": "No semantic embedder: served as keyword."},
                        view())
    assert out.lines == [" score | type | name", "-------+------+---------",
                         " 0.800 | Drug | Aspirin",
                         "note: No semantic embedder: served as keyword."]
    assert render.result_kind({"updated_concepts": 1}) == "delete"
    assert render.result_kind({"something": 1}) is None


def test_describe_and_search_layouts():
    out = render.render("DESCRIBE CONCEPT TYPES", {"result": ["Drug", "Event", "Person"]},
                        view(30))
    assert out.lines == ["Drug    Event   Person"] and out.summary == "3 types"
    hits = [{"_type": "ConceptNode", "id": "C:5", "type": "Drug", "name": "Aspirin",
             "metadata": {"_score": 0.91234}}]
    assert rendered('SEARCH CONCEPT "asp"', {"result": hits})[2] == " 0.912 | Drug | Aspirin"
    assert rendered('SEARCH CONCEPT "asp"', {"result": hits}, ids=True)[2] == (
        " 0.912 | C:5 | Drug | Aspirin")
    link = dict(TREATS, metadata={"_score": 0.5})
    lines = rendered('SEARCH PROPOSITION "treats"', {"result": [link]}, names=BOOK)
    assert lines[0] == " score | link"
    assert lines[2] == " 0.500 | Aspirin —treats→ Headache"
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


def test_long_errors_wrap_on_word_boundaries_and_the_caret_stays_put():
    words = [f"word{i:02d}" for i in range(40)]
    source = "FIND(?x) WHERE { " + " ".join(f"?x{i} {{name: \"n\"}}" for i in range(12)) + \
        " ?bad {typo 1} }"
    column = source.index("typo") + 1
    err = {"code": "KIP_1001", "name": "InvalidSyntax", "message": " ".join(words),
           "hint": " ".join(reversed(words)),
           "data": {"line": 1, "column": column,
                    "snippet": source + "\n" + " " * (column - 1) + "^"}}
    lines = render.render_error(err, P, 60)
    assert all(layout.width_of(line) <= 60 for line in lines), lines
    message = [line.strip() for line in lines[:lines.index("  at line 1, column "
                                                           f"{column}:")]]
    assert " ".join(message) == "KIP_1001 InvalidSyntax: " + " ".join(words)  # no word cut
    assert lines[0].startswith("KIP_1001 InvalidSyntax: word00")
    assert all(line.startswith("  ") for line in lines[1:])
    src, caret = [line for line in lines if "typo" in line][0], lines[
        [i for i, line in enumerate(lines) if "typo" in line][0] + 1]
    assert caret.strip() == "^" and src[caret.index("^"):].startswith("typo")
    hint = [line for line in lines if "hint:" in line][0]
    assert hint.startswith("  hint: word39 word38")
    # Wide characters before the caret count as two columns.
    err = {"code": "KIP_1001", "name": "InvalidSyntax", "message": "m",
           "data": {"snippet": '{name: "漢字" x}\n' + " " * 12 + "^"}}
    src, caret = render.render_error(err, P)[1:3]
    assert layout.width_of(src[:src.index("x")]) == caret.index("^")

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


def test_completion_of_statement_starts_and_rc11_contexts():
    starts = complete("")
    assert {"FIND", "UPSERT", "DELETE", "DESCRIBE", "SEARCH", "UPDATE", "MERGE",
            "EXPORT"} <= set(starts)
    cases = [  # (text before the cursor, what Tab offers)
        ("FI", ["FIND"]),                         # FILTER cannot start a command
        ("U", ["UPDATE", "UPSERT"]),
        ('SEARCH CONCEPT "aspirin" ', ["WITH", "MODE", "THRESHOLD", "LIMIT"]),
        ('SEARCH CONCEPT "aspirin" MODE "semantic" ', ["WITH", "THRESHOLD", "LIMIT"]),
        ('SEARCH CONCEPT "aspirin" MO', ["MODE"]),
        ('SEARCH CONCEPT "aspirin" MODE ', ['"keyword"', '"semantic"', '"hybrid"']),
        ('SEARCH CONCEPT "aspirin" MODE "h', ['hybrid"']),
        ("SEARCH ", ["CONCEPT", "PROPOSITION"]),
        ("MERGE ", ["CONCEPT"]),
        ("MERGE CONCEPT ?dup ", ["INTO"]),
        ("MERGE CONCEPT ?dup IN", ["INTO"]),
        ("MERGE CONCEPT ?dup INTO ?canon ", ["WHERE"]),
        ("UPDATE ?l ", ["SET"]),
        ("UPDATE ?l SET ", ["ATTRIBUTES", "METADATA"]),
        ("UPDATE ?l SET METADATA { s: CL", ["CLAMP"]),
        ("UPDATE ?l SET METADATA { s: ", ["ADD", "MUL", "CLAMP", "COALESCE"]),
        ("UPDATE ?l SET METADATA { s: MUL(CO", ["COALESCE", "COMMAND", "CONCEPT", "CONTAINS",
                                                "COUNT"]),
        ("UPDATE ?l SET METADATA { s: 1 } ", ["SET", "WHERE"]),
        ('UPSERT { CONCEPT ?a { {type: "T", name: "a"} EX', ["EXPECT"]),
        ('UPSERT { CONCEPT ?a { {type: "T", name: "a"} EXPECT ', ["VERSION"]),
        ("EXPORT ?d ", ["WHERE"]),
        ('FIND(?x) WHERE { ?x {name: "a"} }; FI', ["FIND"]),
        (":id", [":ids"]),
        (":ids o", ["on", "off"]),
    ]
    for text, offered in cases:
        assert complete(text) == offered, text


# --- names of link ends ----------------------------------------------------------------------

class _Backend:
    """Answers `FIND ... {id: :id}` batches from a dict, and counts the requests."""

    def __init__(self, elements: dict, fail: bool = False) -> None:
        self.elements, self.fail, self.batches = elements, fail, []

    def execute_batch(self, commands, *, readonly=True):
        assert readonly
        self.batches.append(commands)
        if self.fail:
            return None
        out = []
        for c in commands:
            el = self.elements.get(c["parameters"]["id"])
            is_link = "(id:" in c["command"]
            kind_ok = el is not None and is_link == (el["_type"] == "PropositionLink")
            out.append({"result": [el]} if kind_ok else
                       {"error": {"code": "KIP_3002", "name": "NotFound", "message": "no"}})
        return out


def test_name_book_asks_once_per_page_and_follows_higher_order_links():
    cited = {"_type": "PropositionLink", "id": "P:5:cited_by", "subject": "P:3:treats",
             "predicate": "cited_by", "object": "C:4"}
    study = {"_type": "ConceptNode", "id": "C:4", "type": "Study", "name": "Study 4"}
    backend = _Backend({"C:1": ASPIRIN, "C:2": HEADACHE, "P:3:treats": TREATS, "C:4": study})
    book = NameBook(backend)
    names = book.lookup([cited, TREATS, {"nested": [HEADACHE]}])
    assert {k: v["id"] for k, v in names.items()} == {
        "P:5:cited_by": "P:5:cited_by", "P:3:treats": "P:3:treats", "C:4": "C:4",
        "C:1": "C:1", "C:2": "C:2"}
    # One batch for the ends not in the result (C:4, C:1), none for C:2 (in the result).
    assert [sorted(c["parameters"]["id"] for c in b) for b in backend.batches] == [
        ["C:1", "C:4"]]
    # Elements seen or fetched are kept until the next write.
    assert book.lookup([cited])["C:1"] == ASPIRIN and len(backend.batches) == 1
    book.invalidate()
    book.lookup([TREATS])
    assert len(backend.batches) == 2
    # Unknown ids and a failing backend leave ids as they are.
    assert "C:99" not in NameBook(backend).lookup([dict(TREATS, subject="C:99")])
    assert NameBook(_Backend({}, fail=True)).lookup([TREATS]) == {"P:3:treats": TREATS}


# --- progress ----------------------------------------------------------------------------------

def test_progress_prints_counts_when_not_a_terminal():
    out = io.StringIO()
    with Progress("kip load", out, unit="bytes") as progress:
        progress("/data/a.kip", 0, 2048)
        progress("/data/a.kip", 1024, 2048)         # within the interval: not printed
        progress("/data/a.kip", 2048, 2048)
        progress("/data/b.kip", 0, 10)
    lines = out.getvalue().splitlines()
    assert lines[0] == "kip load: a.kip: 0 B of 2.0 KB (0%)"
    assert re.fullmatch(r"kip load: a\.kip: 2\.0 KB of 2\.0 KB \(100%\), done in [\d.]+ s",
                        lines[1])
    assert lines[2] == "kip load: b.kip: 0 B of 10 B (0%)"
    assert re.fullmatch(r"kip load: b\.kip: 0 B of 10 B \(0%\), done in [\d.]+ s", lines[3])
    assert len(lines) == 4
    quiet = io.StringIO()
    with Progress("kip bootstrap", quiet, delay=60) as progress:
        progress("genesis.kip", 0, 6)
        progress("self.kip", 6, 6)
    assert quiet.getvalue() == ""                   # quick work stays quiet


def test_progress_draws_a_bar_at_a_terminal():
    out = io.StringIO()
    with Progress("kip reindex", out, tty=True) as progress:
        progress("lexical", 50, 100)
        progress("lexical", 100, 100)
        progress("vectors", 10, 10)
    text = out.getvalue()
    assert "kip reindex lexical: 100%" in text and "100/100" in text
    assert "kip reindex vectors: 100%" in text and "\r" in text


# --- bad input never crashes -------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["_type", "id", "subject", "object", "predicate", "name", "type",
                         "attributes", "metadata", "capsule", "updated", "matched", "merged",
                         "links_repointed", "hint", "code", "message", "data", "snippet"]),
        inner, max_size=5),
    max_leaves=20)
_text = st.lists(st.sampled_from(list('FINDUPSERTWHM{}()[]";:?\\.\n /qhelp—') +
                                 ["UPSERT ", "WITH METADATA ", "MODE ", "quit", "FIND(?x) ",
                                  "WHERE ", '{type: "T"}', "SEARCH CONCEPT ", "UPDATE ?x "]),
                 max_size=30).map("".join)


@settings(max_examples=300, deadline=None)
@given(command=_text, result=_json, error=st.booleans(), ids=st.booleans())
def test_rendering_never_fails(command, result, error, ids):
    response = {"error": result} if error else {"result": result, "hint": "h"}
    shown = render.render(command, response, view(40, {"C:1": ASPIRIN}, ids))
    assert all(isinstance(line, str) for line in shown.lines)


@settings(max_examples=300, deadline=None)
@given(text=_text)
def test_entry_and_completion_never_fail(text):
    entry.is_complete(text)
    entry.split_commands(text, join=True)
    complete(text)
