"""A forgiving tokenizer for the text people type, and what the shell derives from it.

The engine's parser (`nexus.language.parse`) is strict: it stops at the first error. The shell
needs to look at text that is half typed — to colour it, to see where brackets open and close,
to find the variables already typed, to put a CURSOR into a command — so it has its own small
tokenizer that never fails: an unterminated string simply ends at the end of its line (KIP
strings cannot span lines), and any other character is punctuation. Whether a command is
finished, and how an entry splits into commands, is `nexus.shell.entry`'s (where the parser
is the judge).

Public: `tokenize`, `Token`, `significant`, `depth`, `open_brackets`, `variables`,
`with_cursor`, `words_before`.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Iterator


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


def open_brackets(tokens: list[Token]) -> str:
    """The brackets still open after `tokens`, outermost first (`"{("`); a closer without
    its opener is ignored."""
    stack: list[str] = []
    for t in tokens:
        if t.kind == "punct":
            if t.text in OPENERS:
                stack.append(t.text)
            elif t.text in CLOSERS and stack:
                stack.pop()
    return "".join(stack)


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
