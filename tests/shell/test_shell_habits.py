"""The habits people bring from psql, sqlite3 and cypher-shell, each in the real shell in a
pseudo-terminal (see conftest.spawn_shell): leaving and asking for help as they are used to,
commands that run when the parser says they are complete (not when a line ends), results
with names, errors wrapped on word boundaries, "more" paging, RC11 completion.
"""
from __future__ import annotations

import pytest

from nexus import Nexus

PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"     # bracketed paste, as terminals send it


# --- leaving and help ---------------------------------------------------------------------

@pytest.mark.parametrize("typed", ["\\q", "quit", "exit", "QUIT;", ".quit", ":quit", "\x04"],
                         ids=["backslash-q", "quit", "exit", "QUIT;", "dot-quit", "colon-quit",
                              "ctrl-d"])
def test_the_usual_ways_to_leave(spawn_shell, typed):
    term = spawn_shell()
    if typed == "\x04":
        term.send(typed)                # Ctrl-D on an empty line
    else:
        term.line(typed)
    assert term.wait_exit() == 0
    assert "InvalidSyntax" not in term.text


def test_the_usual_ways_to_ask_for_help_and_unknown_backslash_commands(spawn_shell):
    term = spawn_shell()
    for typed in ("\\?", "help", ":help", ".help"):
        term.line(typed)
        term.expect(r"Shell commands\n  :help .*:quit .*:load FILE")
        term.prompt()
    assert "InvalidSyntax" not in term.text
    term.line("\\dt")
    m = term.expect(r"SHELL UnknownCommand: Unknown command \\dt\n(.*?)\nkip>")
    hint = " ".join(line.strip() for line in m.group(1).splitlines())
    assert hint.startswith("hint: Shell commands: :help :quit :load")
    assert "\\q, quit, exit or .quit to leave" in hint
    # The shell goes on.
    term.line('FIND(COUNT(?w)) WHERE { ?w {type: "Widget"} }')
    term.expect(r"COUNT\(\?w\)\n-+\n +5\n")


# --- when a command runs ------------------------------------------------------------------

def test_with_metadata_on_its_own_line_is_joined_to_the_upsert(spawn_shell):
    term = spawn_shell()
    term.line('UPSERT { CONCEPT ?g { {type: "Widget", name: "w8"} } }')
    term.expect(r"\n\s*\.\.\.>\s*$")               # complete, but it waits: continuation
    term.line('WITH METADATA { source: "own-line", confidence: 0.5 }')
    term.expect(r"\n\s*\.\.\.>\s*$")               # another UPSERT may still follow
    assert "UPSERT:" not in term.text
    term.line("")                                # an empty line runs it
    term.expect(r"UPSERT: 1 concept \(C:\d+\)\n")
    term.prompt()
    term.line('FIND(?w.metadata.source, ?w.metadata.confidence) WHERE '
              '{ ?w {type: "Widget", name: "w8"} }')
    term.expect(r" own-line +\| +0\.5\n\(1 row")


def test_open_brackets_wait_and_the_prompt_shows_what_is_open(spawn_shell):
    term = spawn_shell()
    term.line("FIND(?w.name) WHERE {")
    term.expect(r"\n\s*\.\.\{>\s*$")
    term.line('  ?w {type: "Widget"} FILTER(')
    term.expect(r"\n\s*\.\.\(>\s*$")
    term.line("  ?w.attributes.size > 3)")
    term.expect(r"\n\s*\.\.\{>\s*$")
    term.line("}")
    term.expect(r" \?w\.name\n-+\n w4\n\(1 row")


def test_an_upsert_followed_by_another_block_and_a_semicolon(spawn_shell):
    term = spawn_shell()
    term.line('UPSERT { CONCEPT ?m { {type: "Maker", name: "acme"} } }')
    term.line('UPSERT { CONCEPT ?w { {type: "Widget", name: "w0"} '
              'SET PROPOSITIONS { ("made_by", {type: "Maker", name: "acme"}) } } };')
    term.expect(r"UPSERT: 2 concepts \(C:\d+, C:\d+\) in 2 statements\n")
    term.prompt()
    # An empty line forces an unfinished command: its error is shown.
    term.line("FIND(?w.name) WHERE { ?w {type: \"Widget\"} }")
    term.expect(r"\(5 rows")
    term.line("FIND(?w.name)")
    term.expect(r"\n\s*\.\.\.>\s*$")
    term.line("")
    term.expect(r"KIP_1001 InvalidSyntax: Unexpected end of command")


def test_a_pasted_capsule_runs_as_one_command(spawn_shell):
    good = ('UPSERT {\n  CONCEPT ?t { {type: "$ConceptType", name: "Gizmo"} }\n}\n'
            'WITH METADATA { source: "paste" }\n\n'
            'UPSERT {\n  CONCEPT { {type: "Gizmo", name: "g1"} }\n}\n\n'
            'UPSERT {\n  CONCEPT { {type: "Gizmo", name: "g2"} }\n}\n'
            'WITH METADATA { source: "paste" }\n')
    term = spawn_shell()
    term.send(PASTE_START + good + PASTE_END)
    term.expect(r'WITH METADATA \{ source: "paste" \}\n\s*\.\.\.>\s*$')   # arrived whole
    term.send("\r")
    term.expect(r"UPSERT: 3 concepts \(C:\d+, C:\d+, C:\d+\) in 3 statements\n")
    term.prompt()
    # A capsule whose last statement fails writes nothing at all.
    bad = ('UPSERT {\n  CONCEPT { {type: "Gizmo", name: "g3"} }\n}\n\n'
           'UPSERT {\n  CONCEPT { {type: "NoSuchType", name: "x"} }\n}\n')
    term.send(PASTE_START + bad + PASTE_END + "\r")
    term.expect(r"KIP_\d{4} \w+:")
    term.prompt()
    term.line('FIND(?g.name) WHERE { ?g {type: "Gizmo"} }')
    term.expect(r" g1\n g2\n\(2 rows")


# --- results for people -------------------------------------------------------------------

_LINKS = ('UPSERT { CONCEPT ?m { {type: "Maker", name: "acme"} } '
          'CONCEPT { {type: "Widget", name: "w1"} SET PROPOSITIONS { ("made_by", ?m) } } '
          'CONCEPT { {type: "Widget", name: "w2"} SET PROPOSITIONS { ("made_by", ?m) } } };')


@pytest.mark.parametrize("url", [False, True], ids=["local", "http"])
def test_links_by_name_ids_on_demand_and_node_tables(spawn_shell, url, request):
    if url:
        server = request.getfixturevalue("served_shell_db")
        term = spawn_shell("--url", server, db=False)
    else:
        term = spawn_shell()
    term.line(_LINKS)
    term.expect(r"UPSERT: ")
    term.line('FIND(?l) WHERE { ?l (?w, "made_by", ?m) }')
    term.expect(r" link\n-+\n w1 —made_by→ acme\n w2 —made_by→ acme\n\(2 rows")
    term.line('FIND(?l) WHERE { ?l ({type: "Widget", name: "w1"}, "made_by", ?m) }')
    term.expect(r"\nw1 —made_by→ acme\n  metadata:\n")
    term.line(":ids on")
    term.expect("ids on")
    term.line('FIND(?l) WHERE { ?l (?w, "made_by", ?m) }')
    term.expect(r" id +\| link\n-+\+-+\n"
                r" P:\d+:made_by \| w1 \[C:\d+\] —made_by→ acme \[C:\d+\]\n")
    term.line(":ids off")
    term.line('FIND(?w) WHERE { ?w {type: "Widget"} } LIMIT 3')
    term.expect(r" name \| type   \| size\n-+\+-+\+-+\n w0   \| Widget \|    0\n")
    term.expect(r"fetch the next page\? \[Y/n\]")
    term.send("n")
    term.expect(r"\(:more fetches it later\)")
    term.line(":more")                                   # "more" paging, when you want it
    term.expect(r" w3   \| Widget \|    3\n w4   \| Widget \|    4\n\(2 rows")


def test_long_errors_wrap_on_word_boundaries_with_the_caret_in_place(spawn_shell):
    command = 'FIND(?w.name) WHERE { ?w {type: "Widget"} } ORDER BY ?w.name LIMIT 3 CURSOR 5'
    with Nexus.open(None, bootstrap=False) as nx:
        err = nx.execute_kip({"command": command})["error"]
    term = spawn_shell("--timing", "off", cols=60)
    term.line(command)
    m = term.expect(r"\n(KIP_1001 InvalidSyntax: .*?)\nkip>")
    lines = m.group(1).splitlines()
    assert all(len(line) <= 60 for line in lines), lines
    at = lines.index(f"  at line 1, column {err['data']['column']}:")
    assert " ".join(line.strip() for line in lines[:at]) == \
        f"KIP_1001 InvalidSyntax: {err['message']}"                 # no word cut in two
    source, caret = lines[at + 1], lines[at + 2]
    assert caret.strip() == "^"
    assert source[caret.index("^")] == "5"                           # under the column
    hint = " ".join(line.strip() for line in lines[at + 3:])
    assert hint == f"hint: {err['hint']}"


# --- completion of RC11 words ---------------------------------------------------------------

def test_rc11_words_complete_where_they_fit(spawn_shell):
    term = spawn_shell()
    # (The screen is redrawn in parts: the completion shows as the text it adds.)
    term.complete("MERGE CONCEPT ?dup ", r"\?dup", r"INTO")
    term.send("\x03")                                            # Ctrl-C clears the input
    term.prompt()
    term.complete('SEARCH CONCEPT "w1" MO', r'"w1" MO', r'DE')
    term.complete(' "sem', r'sem', r'antic"')
    term.complete(" THR", r'THR', r'ESHOLD')
    term.send("\x03")
    term.prompt()
    term.complete("UPDATE ?w SET ATTRIBUTES { size: CL", r"size: CL", r"AMP")
    term.send("\x03")
    term.prompt()
    term.line("")
    assert "THRESHOLD" in term.text and "CLAMP" in term.text


def test_progress_bar_of_load_in_the_shell(spawn_shell, tmp_path):
    capsule = tmp_path / "many.kip"
    capsule.write_text("".join(f'UPSERT {{ CONCEPT {{ {{type: "Widget", name: "m{i}"}} }} }}\n'
                               for i in range(50)))
    term = spawn_shell()
    term.line(f":load {capsule}")
    term.expect(r"loading: 100%\|.*\| [\d.]+k?/[\d.]+k? .*\n.*Loaded .*many\.kip: "
                r"50 concepts created")


# --- RC11 results, from a server that answers them ------------------------------------------

_CAPSULE = 'UPSERT {\n  CONCEPT {\n    {type: "Drug", name: "Aspirin"}\n  }\n}\n'
_RC11 = {
    "UPDATE": {"result": {"updated": 3, "matched": 5}},
    "MERGE": {"result": {"merged": 1, "links_repointed": 4, "links_deduplicated": 1,
                         "attributes_filled": 2}},
    "EXPORT": {"result": {"capsule": _CAPSULE, "concepts": 1, "propositions": 0},
               "next_cursor": "page2"},
    "SEARCH": {"result": [{"_type": "ConceptNode", "id": "C:7", "type": "Drug",
                           "name": "Aspirin", "metadata": {"_score": 0.75}}],
               "hint": "No semantic embedder is installed: MODE \"semantic\" was served as "
                       "\"keyword\"."},
}


@pytest.fixture
def rc11_server():
    """A stand-in for a `kip serve` that knows RC11: canned answers by the first word."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            params = body["params"]
            if "commands" in params:
                answer = {"result": [{"result": []} for _ in params["commands"]]}
            else:
                command = params["command"]
                answer = dict(_RC11.get(command.split()[0], {"result": []}))
                if "CURSOR" in command:
                    answer.pop("next_cursor", None)
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_rc11_results_render_in_the_shell(spawn_shell, rc11_server):
    term = spawn_shell("--url", rc11_server, db=False)
    term.line("UPDATE ?l SET METADATA { strength: MUL(?l.metadata.strength, 0.9) } "
              'WHERE { ?l (?s, "treats", ?o) }')
    term.expect(r"\nUPDATE: 5 matched, 3 updated\n")
    term.line('MERGE CONCEPT ?a INTO ?b WHERE { ?a {type: "Drug", name: "Asprin"} '
              '?b {type: "Drug", name: "Aspirin"} }')
    term.expect(r"\nMERGE: 1 concept merged, 4 links repointed, 1 duplicate link dropped, "
                r"2 attributes filled\n")
    term.line('SEARCH CONCEPT "aspirin" MODE "semantic" THRESHOLD 0.5')
    term.expect(r" score \| type \| name\n-+\+-+\+-+\n 0\.750 \| Drug \| Aspirin\n"
                r"note: No semantic embedder is installed: MODE \"semantic\" was served as "
                r"\"keyword\"\.\n\(1 hit")
    term.line('EXPORT ?d WHERE { ?d {type: "Drug"} } LIMIT 1')
    term.expect(r'\nUPSERT \{\n  CONCEPT \{\n    \{type: "Drug", name: "Aspirin"\}\n  \}\n\}\n'
                r"\(1 concept, 0 propositions")
    term.expect(r"fetch the next page\? \[Y/n\]")
    term.send("y")
    term.expect(r"\(1 concept, 0 propositions")
    term.prompt()
