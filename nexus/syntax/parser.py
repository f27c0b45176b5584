"""Text → AST: the LALR parser (built once), the parse cache, and syntax diagnostics.

`parse(text)` returns a `ParsedCommand` or raises `KipError` — `KIP_1001` (with line, column,
the offending token, what was expected and a caret snippet), `KIP_1002` for identifiers that
break spec §2.8.1, or `KIP_4002` for input that is too long or nested too deeply. No Lark
exception escapes. Parses are cached by text (they are immutable), so an agent loop that
sends the same command with different parameters parses it once.
"""
from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Iterable, cast

from lark import Lark, Token
from lark.exceptions import (LarkError, UnexpectedCharacters, UnexpectedEOF,
                             UnexpectedInput, UnexpectedToken, VisitError)

from ..bounded import WeightedLRU
from ..errors import ErrorCode, KipError, caret_snippet
from . import ast as A
from .fastparse import fast_upsert
from .statements import StatementKind, info, kind_of
from .transform_common import PositionedError, safe_text
from .transformer import KipTransformer

# Limits on what the parser accepts; the engine's configuration may lower them.
MAX_COMMAND_BYTES = 8 * 1024 * 1024
MAX_NESTING = 64

def grammar_text() -> str:
    """The KIP grammar (nexus/grammar/kip.lark), the source of truth of the language."""
    return resources.files("nexus.grammar").joinpath("kip.lark").read_text("utf-8")


# Every uppercase word the grammar quotes: the language's keywords, read from the grammar so
# that a new statement's words need no second list (completion, highlighting, diagnostics).
KEYWORDS = frozenset(re.findall(r'"([A-Z][A-Z_]+)"', grammar_text()))


@dataclass(frozen=True, slots=True)
class ParsedCommand:
    """A parsed command and what later stages want to know without walking it again."""
    command: A.Command
    kind: StatementKind           # from the statement registry (nexus.syntax.statements)
    parameters: frozenset[str]    # placeholder names used anywhere in the command
    # Read on every execution of a cached command: derived once here rather than per run.
    writes: bool = field(init=False)          # kind.writes
    late_binding: bool = field(init=False)    # the executor binds parameters (StatementInfo)

    def __post_init__(self) -> None:
        found = info(self.command)
        object.__setattr__(self, "writes", self.kind.writes)
        object.__setattr__(self, "late_binding", found is not None and found.late_binding)


# --- the nesting budget -----------------------------------------------------------------
#
# Every way of nesting (brackets, and `!` chains inside FILTER) is counted by lexer callbacks
# while the text is read, so a deeply nested command is refused (KIP_4002) before any deep
# tree exists — no recursion limit is ever reached downstream (transformer, printer, binder,
# planner). A `!` nests until the end of its operand: the next `&&`, `||` or `,` at the same
# bracket level, or the bracket that closes the level. `_depth.pending[i]` is the number of
# open `!` at bracket level i; the depth is the number of open brackets plus all open `!`.

_OPENERS = {"LBRACE", "LPAR", "LSQB"}
_CLOSERS = {"RBRACE", "RPAR", "RSQB"}
_SEPARATORS = {"_AND", "_OR", "COMMA"}
_depth = threading.local()


class _TooDeep(Exception):
    def __init__(self, tok: Token) -> None:
        self.tok = tok


class _TooSlow(Exception):
    pass


# The time budget of a parse (`parse(..., timeout=)`): Lark has no deadline of its own, and a
# command of a few megabytes takes minutes to parse, so the opener callback below looks at
# the clock every _CLOCK_EVERY brackets (every block of a command has several).
_CLOCK_EVERY = 64


def _reset_depth(limit: int) -> None:
    _depth.n = 0
    _depth.pending = [0]
    _depth.limit = limit
    _depth.opened = 0


def _open(tok: Token) -> Token:
    _depth.pending.append(0)
    _depth.n += 1
    if _depth.n > _depth.limit:
        raise _TooDeep(tok)
    _depth.opened += 1
    if not _depth.opened % _CLOCK_EVERY:
        _check_clock()
    return tok


def _check_clock() -> None:
    deadline = getattr(_depth, "deadline", None)
    if deadline is not None and time.monotonic() > deadline:
        raise _TooSlow()


def _close(tok: Token) -> Token:
    if len(_depth.pending) > 1:  # an unbalanced closer is the parser's to report
        _depth.n -= 1 + _depth.pending.pop()
    return tok


def _bang(tok: Token) -> Token:
    _depth.pending[-1] += 1
    _depth.n += 1
    if _depth.n > _depth.limit:
        raise _TooDeep(tok)
    return tok


def _separator(tok: Token) -> Token:
    _depth.n -= _depth.pending[-1]
    _depth.pending[-1] = 0
    return tok


@lru_cache(maxsize=1)
def _lark() -> Lark:
    grammar = grammar_text()
    callbacks = {name: _open for name in _OPENERS}
    callbacks.update({name: _close for name in _CLOSERS})
    callbacks.update({name: _separator for name in _SEPARATORS})
    callbacks["BANG"] = _bang
    # Lark cannot pass positions (meta) to a transformer embedded in the LALR parser, so the
    # tree is built and then transformed; positions matter more than the ~2x on a cold parse.
    return Lark(grammar, parser="lalr", lexer="contextual", propagate_positions=True,
                maybe_placeholders=True, lexer_callbacks=callbacks, cache=False)


_TRANSFORMER = KipTransformer()


def parse(text: str, *, max_bytes: int = MAX_COMMAND_BYTES,
          max_nesting: int = MAX_NESTING, timeout: float | None = None) -> ParsedCommand:
    """Parse one KIP command (cached by text and limits). `timeout`: seconds a parse that
    is not cached may take (`KIP_4001` beyond; checked as the text is read, and once more
    before the tree is transformed); None = no limit."""
    if not isinstance(text, str):
        raise KipError(ErrorCode.KIP_1001, "The command must be a string",
                       "Send the KIP command text as a JSON string.")
    cacheable = len(text) <= CACHE_MAX_CHARS   # big capsules are rarely re-sent: not pinned
    key = (text, max_bytes, max_nesting)
    if cacheable:
        hit = _PARSED.get(key)
        if hit is not None:
            return hit
    _depth.timeout = timeout
    try:
        parsed = _parse_text(text, max_bytes, max_nesting)
    finally:
        _depth.timeout = _depth.deadline = None
    if cacheable:
        _PARSED.put(key, parsed, AST_BYTES_PER_CHAR * len(text) + 512)
    return parsed


def parsed_before(text: object, *, max_bytes: int = MAX_COMMAND_BYTES,
                  max_nesting: int = MAX_NESTING) -> ParsedCommand | None:
    """What `parse` answers from its cache for `text` under these limits, or None when it
    would parse (not seen yet, too big to cache, or not a string): a cheap look before the
    caller decides how to run the parse (the engine pauses the collector for a write's)."""
    if type(text) is not str or len(text) > CACHE_MAX_CHARS:
        return None
    return _PARSED.get((text, max_bytes, max_nesting))


# Only commands up to this size are cached, in a cache bounded by bytes (nexus.bounded): a
# syntax tree weighs 15-30 times its text, so at most 4096 entries and about 128 MiB.
CACHE_MAX_CHARS = 64 * 1024
CACHE_MAX_BYTES = 128 << 20
AST_BYTES_PER_CHAR = 32


def parse_lalr(text: str, *, max_bytes: int = MAX_COMMAND_BYTES,
               max_nesting: int = MAX_NESTING) -> ParsedCommand:
    """`parse` without the UPSERT fast path and without the cache: the LALR parser alone, the
    reference that nexus/syntax/fastparse.py is tested against."""
    if not isinstance(text, str):
        return parse(text)
    return _parse_text(text, max_bytes, max_nesting, fast=False)


def _parse_text(text: str, max_bytes: int, max_nesting: int,
                fast: bool = True) -> ParsedCommand:
    # A character is at least one UTF-8 byte: encode only when the length leaves a doubt.
    size, exact = len(text), False
    if size <= max_bytes:
        size, exact = len(text.encode("utf-8", "surrogatepass")), True
    if size > max_bytes:
        raise KipError(ErrorCode.KIP_4002,
                       f"The command is {'' if exact else 'at least '}{size} bytes long, over "
                       f"the limit of {max_bytes} bytes",
                       "Split the command: send several smaller UPSERT commands in a "
                       "`commands` batch, or load large capsules with `kip load`.",
                       data={"limit_bytes": max_bytes})
    if not text.strip():
        raise KipError(ErrorCode.KIP_1001, "The command is empty",
                       _START_HINT, line=1, column=1, snippet=snippet(text, 1, 1))
    _reset_depth(max_nesting)
    timeout = getattr(_depth, "timeout", None)
    _depth.deadline = None if timeout is None else time.monotonic() + timeout
    # Big UPSERT commands are read by hand (same AST); anything else, and every error, is
    # the LALR parser's (nexus/syntax/fastparse.py).
    read = fast_upsert(text, max_nesting, _depth.deadline) if fast else None
    if read is not None:
        return ParsedCommand(read[0], kind_of(read[0]), read[1])
    try:
        tree = _lark().parse(text)
        _check_clock()
        command = _TRANSFORMER.transform(tree)
    except _TooSlow:
        raise KipError(ErrorCode.KIP_4001,
                       f"Parsing the command took longer than the limit of {timeout:g} s "
                       f"({len(text)} characters)",
                       "Split the command: send several smaller UPSERT commands in a "
                       "`commands` batch, or load large capsules with `kip load`.") from None
    except _TooDeep as exc:
        # Tokens come from our lexer, which positions every one.
        line, column = exc.tok.line or 1, exc.tok.column or 1
        raise KipError(ErrorCode.KIP_4002,
                       f"The command is nested more than {max_nesting} levels deep "
                       f"(brackets and '!' at line {line}, column {column})",
                       "Flatten the command: nest fewer brackets or '!', or split it.",
                       line=line, column=column, snippet=snippet(text, line, column)) from None
    except PositionedError as exc:
        raise _positioned(text, exc.error) from None
    except VisitError as exc:  # a transformer error Lark wrapped
        inner = exc.orig_exc
        if isinstance(inner, PositionedError):
            raise _positioned(text, inner.error) from None
        if isinstance(inner, RecursionError):
            raise _too_deep() from None
        raise _internal(inner) from None
    except UnexpectedInput as exc:
        raise _syntax_error(text, exc) from None
    except RecursionError:
        raise _too_deep() from None
    except LarkError as exc:
        raise KipError(ErrorCode.KIP_1001, f"Invalid KIP command: {exc}") from None
    finally:
        _reset_depth(max_nesting)
    return ParsedCommand(command, kind_of(command), frozenset(placeholder_names(command)))


_PARSED: WeightedLRU[ParsedCommand] = WeightedLRU(CACHE_MAX_BYTES, 4096)


_START_HINT = ("Send a KIP command such as FIND(...) WHERE {...}, UPSERT {...}, DELETE ..., "
               "DESCRIBE ... or SEARCH ....")


def _positioned(text: str, err: KipError) -> KipError:
    if err.line is not None and err.column is not None:
        err.snippet = snippet(text, err.line, err.column)
    return err


def _too_deep() -> KipError:
    return KipError(ErrorCode.KIP_4002, "The command is nested too deeply to parse",
                    "Flatten the command: nest fewer brackets, or split it.")


def snippet(text: str, line: int, column: int) -> str:
    """The `line`-th line of `text` with a caret under `column` (1-based, in characters).

    Lines are split on "\n" only, as Lark counts them (str.splitlines would also split on
    \r, \x0b, \u2028..., which may sit inside a string literal); a trailing \r is dropped.
    """
    lines = text.split("\n")
    if not 1 <= line <= len(lines):
        return ""
    src = safe_text(lines[line - 1])
    if src.endswith("\r"):
        src = src[:-1]
    # caret_snippet clips long lines; give it the one line with nothing it would split on.
    safe = "".join(" " if c in _LINE_BREAKS else c for c in src)
    return caret_snippet(safe, 1, column)


_LINE_BREAKS = frozenset("\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def _internal(exc: BaseException) -> KipError:
    from ..errors import internal_error
    return internal_error(exc)


# --- diagnostics -------------------------------------------------------------------------

_TERMINAL_TEXT = {
    "VAR": "a variable (?name)",
    "PARAM": "a parameter (:name)",
    "STRING": "a string",
    "NUMBER": "a number",
    "IDENT": "a key",
    "COMPARATOR": "a comparison (==, !=, <, >, <=, >=)",
    "FUNCTION": "a function (IN, IS_NULL, CONTAINS, ...)",
    "AGG_FUNC": "an aggregate (COUNT, SUM, AVG, MIN, MAX)",
    "DIRECTION": "ASC or DESC",
    "ID_KEY": "id",
    "_AND": "'&&'",
    "_OR": "'||'",
    "$END": "the end of the command",
}

# Words from other query languages (and Python) that agents write by habit.
_FOREIGN_WORDS = {
    "SELECT": "KIP queries start with FIND(...) WHERE { ... }.",
    "MATCH": "KIP queries start with FIND(...) WHERE { ... }.",
    "RETURN": "List what to return in FIND(...), e.g. FIND(?x.name) WHERE { ... }.",
    "GROUP": "KIP has no GROUP BY: plain expressions in FIND next to an aggregate form the "
             "groups, e.g. FIND(?type.name, COUNT(?x)).",
    "HAVING": "KIP has no HAVING; filter inside WHERE with FILTER(...).",
    "OFFSET": "KIP pages with CURSOR \"<next_cursor of the previous response>\", not OFFSET.",
    "AND": "Combine conditions with && (and), || (or), ! (not).",
    "OR": "Combine conditions with && (and), || (or), ! (not).",
    "INSERT": "Write knowledge with UPSERT { CONCEPT ?x { {type: \"T\", name: \"n\"} ... } }.",
    "CREATE": "Write knowledge with UPSERT { CONCEPT ?x { {type: \"T\", name: \"n\"} ... } }.",
    "MERGE": "Write knowledge with UPSERT { CONCEPT ?x { {type: \"T\", name: \"n\"} ... } }.",
    "UPDATE": "Update knowledge with UPSERT (SET ATTRIBUTES merges the keys you give).",
    "NaN": "JSON has no NaN or Infinity; use null or a finite number.",
    "Infinity": "JSON has no NaN or Infinity; use null or a finite number.",
    "True": "JSON literals are lowercase: true, false, null.",
    "False": "JSON literals are lowercase: true, false, null.",
    "None": "JSON literals are lowercase: true, false, null.",
    "TRUE": "JSON literals are lowercase: true, false, null.",
    "FALSE": "JSON literals are lowercase: true, false, null.",
    "NULL": "JSON literals are lowercase: true, false, null.",
}

_PLACEHOLDER_HINT = ("A :name placeholder stands for one whole JSON value (e.g. {name: :name}, "
                     "LIMIT :limit); it cannot be a variable, a key, a keyword or a hop count.")


def _describe_terminal(name: str) -> str:
    if name in _TERMINAL_TEXT:
        return _TERMINAL_TEXT[name]
    try:
        term = _lark().get_terminal(name)
    except KeyError:
        return name
    pattern = term.pattern
    if pattern.type == "str":
        return f"'{pattern.value}'"
    return name


def _expected_text(names: Iterable[str]) -> str:
    described = sorted({_describe_terminal(n) for n in names},
                       key=lambda s: (s.startswith("'") is False, s))
    if len(described) > 12:
        described = described[:12] + ["..."]
    return ", ".join(described)


def _word_at(text: str, pos: int) -> str:
    end = pos
    while end < len(text) and (text[end].isalnum() or text[end] in "_$"):
        end += 1
    return text[pos:end] if end > pos else text[pos:pos + 1]


def _is_word_char(c: str) -> bool:
    return c.isalnum() or c == "_"


def _inside_word(text: str, pos: int | None) -> tuple[int, str] | None:
    """(start, word) when `pos` is inside a word whose start the lexer took as a keyword or
    number (`LIMITED` read as LIMIT + ED, `0x1F` as 0 + x1F): report the whole word there."""
    if pos is None or not 0 < pos < len(text):
        return None
    if not (_is_word_char(text[pos - 1]) and _is_word_char(text[pos])):
        return None
    start = pos - 1
    while start > 0 and _is_word_char(text[start - 1]):
        start -= 1
    end = pos
    while end < len(text) and _is_word_char(text[end]):
        end += 1
    return start, text[start:end]


def _syntax_error(text: str, exc: UnexpectedInput) -> KipError:
    line = getattr(exc, "line", None) or 1
    column = getattr(exc, "column", None) or 1
    expected: set[str] = set()
    if isinstance(exc, UnexpectedToken):
        tok = exc.token
        expected = set(exc.expected or ())
        interactive = getattr(exc, "interactive_parser", None)
        if interactive is not None:
            try:  # LALR lookahead sets are merged across contexts; ask what really fits here
                expected = set(interactive.accepts()) or expected
            except Exception:  # noqa: BLE001 - diagnostics only; keep Lark's own set
                pass
        if tok.type == "$END":
            if interactive is not None and not interactive.parser_state.value_stack:
                return KipError(ErrorCode.KIP_1001,
                                "The command holds only comments: there is no statement",
                                _START_HINT, line=1, column=1, snippet=snippet(text, 1, 1))
            found, word = "end of command", ""
            line, column = _end_position(text, tok)
        else:
            word = safe_text(str(tok))
            line, column = tok.line or line, tok.column or column
            start_pos = tok.start_pos
            whole = _inside_word(text, start_pos)
            if whole is not None and start_pos is not None:
                column -= start_pos - whole[0]
                word = safe_text(whole[1])
            found = f"'{_clip(word)}'"
    elif isinstance(exc, UnexpectedCharacters):
        expected = set(exc.allowed or ())
        # Lark declares pos_in_stream as None on its base class; the lexer's error sets it.
        pos = cast(int, exc.pos_in_stream)
        word = safe_text(_word_at(text, pos))
        whole = _inside_word(text, pos)
        if whole is not None:
            column -= pos - whole[0]
            word = safe_text(whole[1])
        found = f"'{_clip(word)}'"
        if len(word) == 1 and not word.isprintable():
            found = f"character U+{ord(word):04X}"
        if word == '"':
            return KipError(
                ErrorCode.KIP_1001,
                f"Unterminated string at line {line}, column {column}: no closing '\"' on "
                f"the same line",
                "Close the string with \"; a string cannot span lines (write a line break "
                "as \\n), and a \" inside it is written \\\".",
                line=line, column=column, snippet=snippet(text, line, column),
                data={"found": '"', "expected": ['"']})
        if word == "-" and pos > 0 and (text[pos - 1].isalnum() or text[pos - 1] == "_"):
            start = pos - 1
            while start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_?"):
                start -= 1
            ident = safe_text(text[start:pos] + "-" + _word_at(text, pos + 1))
            column -= pos - start
            return KipError(
                ErrorCode.KIP_1002,
                f"Invalid identifier '{_clip(ident)}': '-' is not allowed in identifiers",
                "Identifiers must match regex [a-zA-Z_][a-zA-Z0-9_]*; use snake_case, e.g. "
                "?side_effect.",
                line=line, column=column, snippet=snippet(text, line, column))
    elif isinstance(exc, UnexpectedEOF):  # pragma: no cover - Earley only; kept for safety
        expected = set(exc.expected or ())
        found, word = "end of command", ""
        line, column = _end_position(text, None)
    else:  # pragma: no cover
        found, word = "input", ""
    message = f"Unexpected {found} at line {line}, column {column}"
    if expected:
        message += f"; expected {_expected_text(expected)}"
    return KipError(ErrorCode.KIP_1001, message, _hint_for(expected, found, word),
                    line=line, column=column, snippet=snippet(text, line, column),
                    data={"found": word if word else found,
                          "expected": sorted({_describe_terminal(n) for n in expected})})


def _clip(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[:width] + "..."


def _end_position(text: str, end_tok: Token | None) -> tuple[int, int]:
    """Where the command ends: just after its last token (trailing comments and blank lines
    are not where something is missing)."""
    if end_tok is not None and end_tok.end_line and end_tok.end_column is not None:
        return end_tok.end_line, end_tok.end_column
    stripped = text.rstrip()
    lines = stripped.split("\n")
    return len(lines), len(lines[-1]) + 1


def _hint_for(expected: set[str], found: str, word: str) -> str:
    if expected == {"DETACH"}:
        return ("DELETE CONCEPT requires the DETACH keyword: DELETE CONCEPT ?x DETACH "
                "WHERE { ... }.")
    if found == "end of command":
        for closer, opener in (("RBRACE", "{"), ("RPAR", "("), ("RSQB", "[")):
            if closer in expected:
                return (f"The command ends too early: a '{opener}' is not closed; check that "
                        f"every '{opener}' has a matching closing bracket.")
        return "The command ends too early: complete the statement."
    if len(word) == 1 and (word.isspace() or word in "\u200b\u200c\u200d\u2060\ufeff"):
        return (f"U+{ord(word):04X} is not whitespace in KIP: replace it with a plain space "
                f"(or remove it).")
    if word.upper() in KEYWORDS and word != word.upper():
        return f"KIP keywords are uppercase: write {word.upper()} instead of {word}."
    if word in _FOREIGN_WORDS:
        return _FOREIGN_WORDS[word]
    if word == "=":
        return "Compare with == (equality) or != (inequality)."
    if word == "'":
        return "Strings are JSON strings in double quotes: write \"text\", not 'text'."
    if word.startswith(":") and "PARAM" not in expected:
        return _PLACEHOLDER_HINT
    if expected == {"NUMBER"}:
        return ("A path range is {m,n}, {m,} or {n} with non-negative integers written "
                "out (m is required: {0,3}, not {,3}); placeholders cannot stand for hops.")
    if "$END" in expected:
        return ("The command can end before this: remove the trailing text, or send a second "
                "command as its own element of `commands`.")
    if "STRING" in expected and word[:1].isalpha() and word.isidentifier():
        return (f"Names and values are JSON strings in double quotes: write \"{word}\" "
                f"instead of {word}.")
    return ErrorCode.KIP_1001.default_hint


# --- placeholder names -------------------------------------------------------------------

def placeholder_names(node: object) -> list[str]:
    """Every placeholder name in a node (walks dataclass fields generically: runs once per
    distinct command text, so clarity wins over speed here)."""
    out: list[str] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, A.Param):
            out.append(item.name)
        elif isinstance(item, (tuple, list)):
            stack.extend(item)
        elif hasattr(item, "__dataclass_fields__") and not isinstance(item, (A.Literal, A.Pos)):
            stack.extend(getattr(item, f) for f in item.__dataclass_fields__ if f != "pos")
    return out
