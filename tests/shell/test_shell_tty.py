"""The real shell in a pseudo-terminal: what a person at the keyboard sees.

Each test types into `python -m nexus.shell` (see conftest.spawn_shell) and reads the
screen output with ANSI escapes stripped.
"""
from __future__ import annotations

import textwrap


def test_multiline_find_runs_when_brackets_balance_and_renders_a_table(spawn_shell):
    term = spawn_shell()
    term.line("FIND(?w.name, ?w.attributes.size)")     # balanced, but WHERE is missing
    term.line("WHERE {")
    term.line('  ?w {type: "Widget"}')
    term.line("}")                                      # now complete: runs
    m = term.expect(r" \?w\.name \| \?w\.attributes\.size\n-+\+-+\n(.*?)\(5 rows")
    rows = [line.split("|") for line in m.group(1).strip().splitlines()]
    assert [(a.strip(), b.strip()) for a, b in rows] == [(f"w{i}", str(i)) for i in range(5)]
    assert " w0      |                  0" in m.group(1)   # numbers right-aligned
    term.prompt()


def test_multiline_upsert_then_find(spawn_shell):
    term = spawn_shell()
    term.line("UPSERT {")
    term.line('  CONCEPT ?g {')
    term.line('    {type: "Widget", name: "w9"}')
    term.line("    SET ATTRIBUTES { size: 9 }")
    term.line("  }")
    term.line("} WITH METADATA { source: \"shell-test\" };")    # `;`: run it now
    term.expect(r"UPSERT: 1 concept \(C:\d+\)\n")
    term.prompt()
    term.line('FIND(?w.attributes.size) WHERE { ?w {type: "Widget", name: "w9"} }')
    term.expect(r"\?w\.attributes\.size\n-+\n +9\n\(1 row")


def test_tab_completes_types_variables_and_keywords(spawn_shell):
    term = spawn_shell()
    term.complete('FIND(?w.name) WHERE { ?w {type: "Wid', r'"Wid', r'get"')
    term.line("} }")        # completion closed the string: `"Widget"`
    term.expect(r"\(5 rows")
    term.prompt()
    term.complete('FIND(?widget.name) WHERE { ?wid', r"\{ \?wid", "get")
    term.complete(' {type: "Widget"} FIL', r"\} FIL", "TER")
    term.line('(?widget.attributes.size > 3) }')
    term.expect(r" \?widget\.name\n-+\n w4\n\(1 row")


def test_error_shows_code_hint_and_caret(spawn_shell):
    term = spawn_shell()
    term.line("FIND(?x) WHERE {")
    term.line('  ?x {typo "A"}')
    term.line("}")
    m = term.expect(r"KIP_1001 InvalidSyntax: (.*?)\n(.*?)hint: ")
    assert "line 2, column 12" in m.group(1) + m.group(2)
    assert '\n      ?x {typo "A"}\n               ^\n' in "\n" + m.group(2)
    term.prompt()
    # The shell goes on after an error.
    term.line('FIND(COUNT(?w)) WHERE { ?w {type: "Widget"} }')
    term.expect(r"COUNT\(\?w\)\n-+\n +5\n")


def test_load_a_capsule(spawn_shell, tmp_path):
    capsule = tmp_path / "gadgets.kip"
    capsule.write_text(textwrap.dedent("""\
        // Gadgets: a type and two instances, in two UPSERT statements.
        UPSERT {
          CONCEPT ?t { {type: "$ConceptType", name: "Gadget"} }
        }
        WITH METADATA { source: "gadgets", author: "$system", confidence: 1.0 }

        UPSERT {
          CONCEPT { {type: "Gadget", name: "g1"} SET ATTRIBUTES { colour: "red" } }
          CONCEPT { {type: "Gadget", name: "g2"} SET ATTRIBUTES { colour: "blue" } }
        }
        WITH METADATA { source: "gadgets", author: "$system", confidence: 1.0 }
        """))
    term = spawn_shell()
    term.line(f":load {capsule}")
    term.expect(r"Loaded .*gadgets\.kip")
    term.prompt()
    term.line('FIND(?g.name, ?g.attributes.colour) WHERE { ?g {type: "Gadget"} }')
    term.expect(r" g1 +\| red\n g2 +\| blue\n\(2 rows")
    # The new type is offered by completion after the load.
    term.complete('FIND(?g.name) WHERE { ?g {type: "Gad', r'"Gad', r'get"')
    term.line("} }")
    term.expect(r"\(2 rows")


def test_cursor_paging_asks_for_the_next_page(spawn_shell):
    term = spawn_shell()
    term.line('FIND(?w.name) WHERE { ?w {type: "Widget"} } LIMIT 2')
    term.expect(r" w0\n w1\n\(2 rows")
    term.expect(r"fetch the next page\? \[Y/n\]")
    term.send("y")
    term.expect(r" w2\n w3\n\(2 rows")
    term.expect(r"fetch the next page\? \[Y/n\]")
    term.send("n")
    term.prompt()
    assert "w4" not in term.text


def test_long_results_are_paged_with_more(spawn_shell):
    term = spawn_shell(rows=12)
    term.line('FIND(?a.name, ?b.name) WHERE { ?a {type: "Widget"} ?b {type: "Widget"} }')
    term.expect(r"--more-- \(10/28 lines")
    term.send(" ")
    term.expect(r"--more-- \(20/28 lines")
    term.send("q")
    term.prompt()
    assert "(25 rows" not in term.text[term.pos - 200:]


def test_history_is_kept_across_sessions(spawn_shell):
    first = spawn_shell()
    first.line('FIND(?w.name) WHERE { ?w {type: "Widget", name: "w3"} }')
    first.expect(r" w3\n\(1 row")
    first.prompt()
    first.send("\x04")                                  # Ctrl-D quits
    assert first.wait_exit() == 0

    second = spawn_shell()
    second.send("\x1b[A")                               # Up: the previous session's command
    second.send("\r")
    second.expect(r" w3\n\(1 row")


def test_params_json_output_and_semicolons(spawn_shell):
    term = spawn_shell()
    term.line('SEARCH CONCEPT "w3" WITH TYPE "Widget" LIMIT 1;')
    term.expect(r" w3\n\(1 hit")
    term.line(":param who w2")                          # not JSON: taken as a string
    term.expect(r':who = "w2"')
    term.line(":param n 2")
    term.expect(r":n = 2")
    term.line(":params")
    term.expect(r':n = 2\n:who = "w2"')
    term.line('FIND(?w.name) WHERE { ?w {name: :who} }')
    term.expect(r" \?w\.name\n-+\n w2\n")
    term.line(":json")
    term.expect("JSON output on")
    term.line('FIND(?w.attributes.size) WHERE { ?w {name: :who} }')
    term.expect(r'\{\n  "result": \[\n    2\n  \]\n\}')
    term.line(":json off")
    term.expect("JSON output off")
    term.line(":unparam who")
    term.line('FIND(?w.name) WHERE { ?w {name: :who} }')
    term.expect(r"KIP_1001 InvalidSyntax: .*who")


def test_readonly_refuses_writes(spawn_shell):
    term = spawn_shell("--readonly")
    term.line('UPSERT { CONCEPT { {type: "Widget", name: "nope"} } }')
    term.line("")                       # a finished UPSERT waits: an empty line runs it
    term.expect(r"KIP_1001 InvalidSyntax: execute_kip_readonly cannot run KML")
    term.line(":readonly off")
    term.expect("read-only off")
    term.line(":explain FIND(?w) WHERE { ?w {type: \"Widget\"} }")
    term.expect(r"ScanType|Scan")
    term.line(":describe types")
    term.expect(r"Maker .*Widget.*\(\d+ types")
    term.line(":help")
    term.expect(r":quit .*:load FILE .*:describe")
    term.line(":quit")
    assert term.wait_exit() == 0
