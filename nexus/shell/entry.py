"""What a person typed: when Enter runs it, which lines are shell commands, and how an entry
splits into commands.

**When Enter runs an entry** (`is_complete`) — the parser decides, not the line:

- a shell command line runs at once: `:help`, `:load f.kip` … and the habits people bring
  from other shells, `\\q`, `\\?`, `.quit`, `quit`, `exit`, `help` (`:explain` waits for its
  query to be complete);
- KIP text that ends with `;` runs; so does text with an unterminated string or a closer too
  many (to show the error);
- open brackets wait;
- balanced text goes to the parser (`nexus.language.parse`): an error at the end of the
  command ("it ends too early") waits, another error runs (to show it), and a command that
  parses runs — unless the grammar says it may still go on: a finished `UPSERT { … }` may be
  followed by its `WITH METADATA { … }` or by another `UPSERT { … }` of the same command, so
  it waits for the next line. Both are asked of the parser by appending a probe (`WITH
  METADATA`, the command's own first word) and seeing whether the error moves to the end.

The editor adds one rule (`nexus.shell.editor`): Enter on an empty last line runs the entry as
it stands.

**How an entry splits** (`split_commands`): at `;` outside brackets, strings and comments;
before a word that starts a statement at bracket depth 0; around shell command lines. With
`join=True` (what a person submitted at the prompt) a statement the parser lets continue keeps
the next one — a pasted capsule of several `UPSERT` statements is one command, one
transaction. Scripts (`join=False`) send each statement on its own.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import KipError
from ..language import parse, statement_keywords
from .lexer import CLOSERS, OPENERS, Token, depth, significant, tokenize

# Words people type to leave or get help in psql, sqlite3 and cypher-shell: shell commands
# when they stand alone on a line (none of them is KIP: KIP keywords are uppercase).
SHELL_WORDS = frozenset(("quit", "exit", "help"))
# First characters of a shell command line: `:help`, `\q` (psql), `.quit` (sqlite3).
SHELL_PREFIXES = (":", "\\", ".")
# RC11 statements not yet in every grammar: a word that starts one also ends the command
# before it (the statement registry adds the rest as they are registered).
RC11_STATEMENT_WORDS = frozenset(("UPDATE", "MERGE", "EXPORT"))
# Probes appended to a parsed command: if the parser then says "ends too early", the
# command may still go on (UPSERT's trailing WITH METADATA, or another UPSERT statement).
_TRAILING_PROBE = "WITH METADATA"


def command_words() -> frozenset[str]:
    """Words that start a KIP statement: the statement registry's, and RC11's."""
    return frozenset(statement_keywords()) | RC11_STATEMENT_WORDS


def shell_word(line: str) -> str | None:
    """`quit`, `exit` or `help` when the line is just that word (any case, `;` allowed)."""
    word = line.strip().rstrip(";").strip().lower()
    return word if word in SHELL_WORDS else None


def is_meta(text: str) -> bool:
    """A shell command entry (`:help`, `\\q`, `.quit`, `quit` …) rather than KIP text."""
    stripped = text.lstrip()
    if stripped.startswith(SHELL_PREFIXES):
        return True
    return shell_word(stripped) is not None


def is_complete(text: str) -> bool:
    """Should Enter run `text` (True) or open a continuation line (False)? See the module
    docstring for the rules."""
    if is_meta(text):
        head, _, rest = text.strip().partition(" ")
        if head == ":explain" and rest.strip():
            return is_complete(rest)
        return True
    tokens = significant(tokenize(text))
    if not tokens:
        return False
    if tokens[-1].text == ";":
        return True
    if any(not t.closed for t in tokens):
        return True  # an unterminated string (strings cannot span lines): show the error
    d = depth(tokens)
    if d != 0:
        return d < 0
    chunks = split_commands(text, join=True)   # several commands at once: the last decides
    if not chunks:
        return False
    if chunks[-1].kind == "meta":
        return True
    return parse_state(chunks[-1].text) != "incomplete"


def parse_state(text: str) -> str:
    """`complete`, `incomplete` (ends too early, or may still go on) or `error`."""
    try:
        parse(text)
    except KipError as err:
        return "incomplete" if _ends_early(err) else "error"
    return "incomplete" if may_continue(text) else "complete"


def _ends_early(err: KipError) -> bool:
    data = err.to_dict().get("data") or {}
    return data.get("found") == "end of command" and "only comments" not in err.message


def may_continue(text: str, word: str | None = None) -> bool:
    """Whether the parsed command `text` may go on with `word` (default: its trailing WITH
    METADATA, or another statement of its own first word) on the next line."""
    probes = [word] if word else [_TRAILING_PROBE, first_word(text)]
    for probe in probes:
        if not probe:
            continue
        try:
            parse(f"{text}\n{probe}")
        except KipError as err:
            if _ends_early(err):
                return True
            continue
        return True           # the probe itself completed the command: it goes on
    return False


def _joins(statement: str, word: str) -> bool:
    """Whether a statement starting with `word` belongs to the same command as `statement`
    before it: the parser lets `statement` go on with `word` — or `statement` has an error
    and starts with the same word, so the engine reports it for the whole entry and runs
    none of it (a pasted capsule stays all or nothing)."""
    if may_continue(statement, word):
        return True
    return first_word(statement) == word and parse_state(statement) == "error"


def first_word(text: str) -> str:
    """The word a command starts with (after blanks and comments), or ""."""
    for tok in tokenize(text):
        if tok.significant:
            return tok.text if tok.kind == "word" else ""
    return ""


@dataclass(frozen=True, slots=True)
class Chunk:
    """One unit of work from a script or a submitted entry."""
    kind: str     # "kip" (a KIP command) or "meta" (a shell command line)
    text: str
    line: int     # 1-based line where it starts in the source


def split_commands(text: str, *, join: bool = False) -> list[Chunk]:
    """Split a script or an entry into KIP commands and shell command lines.

    A KIP command ends at a `;` outside brackets, strings and comments, or just before a
    word that starts a new statement (FIND, UPSERT, DELETE, DESCRIBE, SEARCH, EXPLAIN, and
    RC11's UPDATE, MERGE, EXPORT) at bracket depth 0. So `UPSERT {…}` followed by `WITH
    METADATA {…}` on the next line stays one command, and so does a SEARCH whose LIMIT is on
    the next line. With `join`, a statement that the parser lets continue with the next one
    (UPSERT after UPSERT) stays in the same command too.

    A line whose first character (after blanks) is `:`, `\\` or `.`, or that is just `quit`,
    `exit` or `help`, is a shell command — unless it stands inside brackets, or (for `:`)
    where a parameter is expected (after LIMIT, CURSOR, TYPE...); it ends the command before.
    """
    chunks: list[Chunk] = []
    tokens = tokenize(text)
    words = command_words()
    start: int | None = None      # offset where the current KIP command starts
    stmt_start = 0                # ... and its current statement
    last_sig: Token | None = None
    d = 0
    i = 0

    def flush(end: int) -> None:
        nonlocal start, last_sig
        if start is not None:
            body = text[start:end].strip()
            if body:
                chunks.append(Chunk("kip", body, text.count("\n", 0, start) + 1))
        start, last_sig = None, None

    while i < len(tokens):
        tok = tokens[i]
        if not tok.significant:
            i += 1
            continue
        if d == 0 and _starts_shell_line(text, tok, last_sig):
            flush(tok.start)
            end = _meta_end(text, tok.start)
            chunks.append(Chunk("meta", text[tok.start:end].strip(),
                                text.count("\n", 0, tok.start) + 1))
            while i < len(tokens) and tokens[i].start < end:
                i += 1
            continue
        if d == 0 and tok.text == ";":
            flush(tok.start)
            i += 1
            continue
        if (d == 0 and start is not None and tok.kind == "word" and tok.text in words
                and not (last_sig is not None and last_sig.text == "EXPLAIN")):
            if join and _joins(text[stmt_start:tok.start], tok.text):
                stmt_start = tok.start
            else:
                flush(tok.start)
        if start is None:
            start = stmt_start = tok.start
        if tok.kind == "punct":
            if tok.text in OPENERS:
                d += 1
            elif tok.text in CLOSERS:
                d = max(0, d - 1)
        last_sig = tok
        i += 1
    flush(len(text))
    return chunks


# Words after which a `:name` at the start of a line is a parameter, not a `:command`.
_TAKES_VALUE = frozenset(("LIMIT", "CURSOR", "TYPE", "CONCEPT", "PROPOSITION", "METADATA",
                          "ATTRIBUTES", "MODE", "THRESHOLD", "VERSION"))


def _starts_shell_line(text: str, tok: Token, last_sig: Token | None) -> bool:
    if not _at_line_start(text, tok.start):
        return False
    if tok.text.startswith(":"):
        return last_sig is None or last_sig.text not in _TAKES_VALUE
    if tok.text in ("\\", "."):
        return True
    if tok.kind == "word":
        end = text.find("\n", tok.start)
        return shell_word(text[tok.start:len(text) if end < 0 else end]) is not None
    return False


def _at_line_start(text: str, pos: int) -> bool:
    line_start = text.rfind("\n", 0, pos) + 1
    return not text[line_start:pos].strip()


def _meta_end(text: str, pos: int) -> int:
    """The end of a shell command that starts at `pos`: its line, or for `:explain` as many
    lines as its query needs."""
    end = text.find("\n", pos)
    end = len(text) if end < 0 else end
    head = text[pos:end].strip().split(" ", 1)
    if head[0] == ":explain" and len(head) > 1:
        while end < len(text) and not is_complete(text[pos:end].split(" ", 1)[1]):
            nxt = text.find("\n", end + 1)
            end = len(text) if nxt < 0 else nxt
    return end
