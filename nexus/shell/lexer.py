"""A forgiving tokenizer for the text people type, and what the shell derives from it.

The engine's parser (`nexus.syntax.parse`) is strict: it stops at the first error. The shell
needs to look at text that is half typed — to colour it, to know whether Enter should run it
or open a new line, to split a script into commands, to find the variables already typed —
so it has its own small tokenizer that never fails: an unterminated string simply ends at the
end of its line (KIP strings cannot span lines), and any other character is punctuation.
The parser is still the judge of whether a balanced command is finished (`is_complete`).

Public: `tokenize`, `Token`, `is_complete`, `split_commands`, `Chunk`, `variables`,
`with_cursor`.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Iterator

from .. import language as syntax
from ..errors import KipError

# Words that start a KIP command when they stand at bracket depth 0.
COMMAND_WORDS = frozenset(("FIND", "EXPLAIN", "UPSERT", "DELETE", "DESCRIBE", "SEARCH"))
OPENERS, CLOSERS = "{([", "})]"

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<comment>//[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\[^\n])*"?)
  | (?P<var>\?\w*(?:\.\w+)*)
  | (?P<number>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
  | (?P<word>[$\w]+)
  | (?P<punct>.)
""", re.X | re.S)
_PARAM = re.compile(r":[A-Za-z_]\w*")


@dataclass(frozen=True, slots=True)
class Token:
    kind: str     # ws comment string var param number word punct
    text: str
    start: int    # offset in the text

    @property
    def end(self) -> int:
        return self.start + len(self.text)

    @property
    def significant(self) -> bool:
        return self.kind not in ("ws", "comment")

    @property
    def closed(self) -> bool:
        """False for a string that runs to the end of its line without its closing quote."""
        return self.kind != "string" or (len(self.text) >= 2 and self.text.endswith('"')
                                         and not _escaped_end(self.text))


def _escaped_end(text: str) -> bool:
    backslashes = len(text) - 1 - len(text[:-1].rstrip("\\"))
    return backslashes % 2 == 1


def tokenize(text: str) -> list[Token]:
    """Every character of `text` belongs to exactly one token; never raises."""
    out: list[Token] = []
    pos = 0
    while pos < len(text):
        # `:name` is a parameter where a value may start; after a word or a quote (`key:3`,
        # `"k":v`) the colon is the key separator.
        if text[pos] == ":" and (pos == 0 or not (text[pos - 1].isalnum()
                                                   or text[pos - 1] in '_"$')):
            m = _PARAM.match(text, pos)
            if m:
                out.append(Token("param", m.group(), pos))
                pos = m.end()
                continue
        m = _TOKEN.match(text, pos)
        assert m is not None  # the last alternative matches any character
        out.append(Token(m.lastgroup or "punct", m.group(), pos))
        pos = m.end()
    return out


def significant(tokens: list[Token]) -> list[Token]:
    return [t for t in tokens if t.significant]


def depth(tokens: list[Token]) -> int:
    """Open brackets minus closed ones (negative when a closer has no opener)."""
    d = 0
    for t in tokens:
        if t.kind == "punct":
            if t.text in OPENERS:
                d += 1
            elif t.text in CLOSERS:
                d -= 1
    return d


def is_meta(text: str) -> bool:
    """A `:command` line (`:help`, `:load f.kip`...) rather than KIP text."""
    return text.lstrip().startswith(":")


def is_complete(text: str) -> bool:
    """Should Enter run `text` (True) or open a continuation line (False)?

    A `:command` is one line (`:explain` waits for its query to be complete). KIP text is
    complete when it ends with `;`, or when its brackets balance outside strings and comments
    and the parser does not say "it ends too early" — so `FIND(?x)` waits for its WHERE, while
    a balanced command with an error in the middle runs at once and shows the error.
    """
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
    chunks = split_commands(text)     # several commands at once: the last one decides
    if not chunks:
        return False
    if chunks[-1].kind == "meta":
        return True
    try:
        syntax.parse(chunks[-1].text)
    except KipError as err:
        data = err.to_dict().get("data") or {}
        return data.get("found") != "end of command" and "only comments" not in err.message
    return True


@dataclass(frozen=True, slots=True)
class Chunk:
    """One unit of work from a script or a submitted buffer."""
    kind: str     # "kip" (a KIP command) or "meta" (a :command line)
    text: str
    line: int     # 1-based line where it starts in the source


def split_commands(text: str) -> list[Chunk]:
    """Split a script into KIP commands and `:command` lines.

    A KIP command ends at a `;` outside brackets, strings and comments, or just before a
    word that starts a new command (FIND, UPSERT, DELETE, DESCRIBE, SEARCH, EXPLAIN) at
    bracket depth 0. So `UPSERT {…}` followed by `WITH METADATA {…}` on the next line stays
    one command, and so does a SEARCH whose LIMIT is on the next line. A line whose first
    character (after blanks) is `:` is a `:command` unless it stands inside brackets or
    where a parameter is expected (after LIMIT, CURSOR, TYPE...); it ends the command before.
    """
    chunks: list[Chunk] = []
    tokens = tokenize(text)
    start: int | None = None      # offset where the current KIP command starts
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
        if (d == 0 and tok.text.startswith(":") and _at_line_start(text, tok.start)
                and (last_sig is None or last_sig.text not in _TAKES_VALUE)):
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
        if (d == 0 and start is not None and tok.kind == "word" and tok.text in COMMAND_WORDS
                and not (last_sig is not None and last_sig.text == "EXPLAIN")):
            flush(tok.start)
        if start is None:
            start = tok.start
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
                          "ATTRIBUTES"))


def _at_line_start(text: str, pos: int) -> bool:
    line_start = text.rfind("\n", 0, pos) + 1
    return not text[line_start:pos].strip()


def _meta_end(text: str, pos: int) -> int:
    """The end of a `:command` that starts at `pos`: its line, or for `:explain` as many
    lines as its query needs."""
    end = text.find("\n", pos)
    end = len(text) if end < 0 else end
    head = text[pos:end].strip().split(" ", 1)
    if head[0] == ":explain" and len(head) > 1:
        while end < len(text) and not is_complete(text[pos:end].split(" ", 1)[1]):
            nxt = text.find("\n", end + 1)
            end = len(text) if nxt < 0 else nxt
    return end


def variables(text: str) -> list[str]:
    """The `?variables` in `text`, without dot paths, in first-seen order."""
    seen: dict[str, None] = {}
    for tok in tokenize(text):
        if tok.kind == "var" and len(tok.text) > 1:
            seen.setdefault(tok.text.split(".", 1)[0], None)
    return list(seen)


def with_cursor(text: str, cursor: str) -> str:
    """`text` with its top-level `CURSOR "<token>"` replaced by `cursor`, or appended."""
    tokens = tokenize(text)
    literal = json.dumps(cursor)
    d = 0
    sig = significant(tokens)
    for k, tok in enumerate(sig):
        if tok.kind == "punct":
            d += tok.text in OPENERS
            d -= tok.text in CLOSERS
        elif d == 0 and tok.text == "CURSOR" and k + 1 < len(sig) and \
                sig[k + 1].kind in ("string", "param"):
            value = sig[k + 1]
            return text[:value.start] + literal + text[value.end:]
    # Append after the last significant token that is not a trailing `;`.
    while sig and sig[-1].text == ";":
        sig.pop()
    end = sig[-1].end if sig else len(text)
    return f"{text[:end]} CURSOR {literal}"


def words_before(text: str, n: int = 3) -> Iterator[Token]:
    """The last `n` significant tokens of `text`, nearest first."""
    sig = significant(tokenize(text))
    return reversed(sig[-n:])
