"""Text → AST: the LALR parser (built once), the parse cache, and syntax diagnostics.

`parse(text)` returns a `ParsedCommand` or raises `KipError` — `KIP_1001` (with line, column,
the offending token, what was expected and a caret snippet), `KIP_1002` for identifiers that
break spec §2.8.1, or `KIP_4002` for input that is too long or nested too deeply. No Lark
exception escapes. Parses are cached by text (they are immutable), so an agent loop that
sends the same command with different parameters parses it once.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from lark import Lark, Token
from lark.exceptions import (LarkError, UnexpectedCharacters, UnexpectedEOF,
                             UnexpectedInput, UnexpectedToken, VisitError)

from ..errors import ErrorCode, KipError, caret_snippet
from . import ast as A
from .transformer import KipTransformer, PositionedError

# Limits on what the parser accepts; the engine's configuration may lower them.
MAX_COMMAND_BYTES = 8 * 1024 * 1024
MAX_NESTING = 64

KEYWORDS = frozenset("""
FIND WHERE ORDER BY ASC DESC LIMIT CURSOR FILTER NOT OPTIONAL UNION EXPLAIN
UPSERT CONCEPT PROPOSITION SET ATTRIBUTES PROPOSITIONS WITH METADATA
DELETE FROM DETACH DESCRIBE PRIMER DOMAINS TYPES TYPE SEARCH
COUNT DISTINCT SUM AVG MIN MAX IN IS_NULL IS_NOT_NULL CONTAINS STARTS_WITH ENDS_WITH REGEX
""".split())


@dataclass(frozen=True, slots=True)
class ParsedCommand:
    """A parsed command and what later stages want to know without walking it again."""
    command: A.Command
    kind: str                     # KQL | KML | META
    parameters: frozenset[str]    # placeholder names used anywhere in the command


_OPENERS = {"LBRACE", "LPAR", "LSQB"}
_CLOSERS = {"RBRACE", "RPAR", "RSQB"}
_depth = threading.local()


class _TooDeep(Exception):
    def __init__(self, tok: Token) -> None:
        self.tok = tok


def _open(tok: Token) -> Token:
    depth = getattr(_depth, "n", 0) + 1
    _depth.n = depth
    if depth > _depth.limit:
        raise _TooDeep(tok)
    return tok


def _close(tok: Token) -> Token:
    _depth.n = getattr(_depth, "n", 0) - 1
    return tok


def _bang(tok: Token) -> Token:
    # `!!!!…x` nests without brackets; count it like an opener for the depth budget.
    _depth.bangs = getattr(_depth, "bangs", 0) + 1
    if _depth.bangs > _depth.limit:
        raise _TooDeep(tok)
    return tok


@lru_cache(maxsize=1)
def _lark() -> Lark:
    grammar = resources.files("nexus.grammar").joinpath("kip.lark").read_text("utf-8")
    callbacks = {name: _open for name in _OPENERS}
    callbacks.update({name: _close for name in _CLOSERS})
    callbacks["BANG"] = _bang
    # Lark cannot pass positions (meta) to a transformer embedded in the LALR parser, so the
    # tree is built and then transformed; positions matter more than the ~2x on a cold parse.
    return Lark(grammar, parser="lalr", lexer="contextual", propagate_positions=True,
                maybe_placeholders=True, lexer_callbacks=callbacks, cache=False)


_TRANSFORMER = KipTransformer()


def parse(text: str, *, max_bytes: int = MAX_COMMAND_BYTES,
          max_nesting: int = MAX_NESTING) -> ParsedCommand:
    """Parse one KIP command (cached by text and limits)."""
    if not isinstance(text, str):
        raise KipError(ErrorCode.KIP_1001, "The command must be a string",
                       "Send the KIP command text as a JSON string.")
    return _parse_cached(text, max_bytes, max_nesting)


@lru_cache(maxsize=4096)
def _parse_cached(text: str, max_bytes: int, max_nesting: int) -> ParsedCommand:
    if len(text) > max_bytes or len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise KipError(ErrorCode.KIP_4002,
                       f"The command is {len(text)} characters long, over the limit of "
                       f"{max_bytes} bytes",
                       "Split the command: send several smaller UPSERT commands in a "
                       "`commands` batch, or load large capsules with `kip load`.")
    if not text.strip():
        raise KipError(ErrorCode.KIP_1001, "The command is empty",
                       "Send a KIP command such as FIND(...) WHERE {...}, UPSERT {...}, "
                       "DELETE ..., DESCRIBE ... or SEARCH ....")
    _depth.n = 0
    _depth.bangs = 0
    _depth.limit = max_nesting
    try:
        command = _TRANSFORMER.transform(_lark().parse(text))
    except _TooDeep as exc:
        raise KipError(ErrorCode.KIP_4002,
                       f"The command is nested more than {max_nesting} levels deep",
                       "Flatten the command: nest fewer brackets, or split it.").with_position(
            text, exc.tok.line, exc.tok.column) from None
    except PositionedError as exc:
        err = exc.error
        if err.line is not None:
            err.snippet = caret_snippet(text, err.line, err.column)
        raise err from None
    except VisitError as exc:  # a transformer error Lark wrapped
        inner = exc.orig_exc
        if isinstance(inner, PositionedError):
            err = inner.error
            if err.line is not None:
                err.snippet = caret_snippet(text, err.line, err.column)
            raise err from None
        raise _internal(inner) from None
    except UnexpectedInput as exc:
        raise _syntax_error(text, exc) from None
    except RecursionError:
        raise KipError(ErrorCode.KIP_4002, "The command is nested too deeply to parse",
                       "Flatten the command: nest fewer brackets, or split it.") from None
    except LarkError as exc:
        raise KipError(ErrorCode.KIP_1001, f"Invalid KIP command: {exc}") from None
    finally:
        _depth.n = 0
        _depth.bangs = 0
    return ParsedCommand(command, A.command_kind(command), frozenset(_params(command)))


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
    "$END": "the end of the command",
}


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


def _expected_text(names) -> str:
    described = sorted({_describe_terminal(n) for n in names if not n.startswith("_")},
                       key=lambda s: (s.startswith("'") is False, s))
    if len(described) > 12:
        described = described[:12] + ["..."]
    return ", ".join(described)


def _word_at(text: str, pos: int) -> str:
    end = pos
    while end < len(text) and (text[end].isalnum() or text[end] in "_$"):
        end += 1
    return text[pos:end] if end > pos else text[pos:pos + 1]


def _syntax_error(text: str, exc: UnexpectedInput) -> KipError:
    line = getattr(exc, "line", None) or 1
    column = getattr(exc, "column", None) or 1
    expected: set[str] = set()
    hint = None
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
            found = "the end of the command"
            line, column = _end_position(text)
        else:
            found = f"'{tok}'"
            line, column = tok.line, tok.column
    elif isinstance(exc, UnexpectedCharacters):
        expected = set(exc.allowed or ())
        found = f"'{_word_at(text, exc.pos_in_stream)}'"
        word = _word_at(text, exc.pos_in_stream)
        if word.upper() in KEYWORDS and word != word.upper():
            hint = f"KIP keywords are uppercase: write {word.upper()} instead of {word}."
        elif word == "=":
            hint = "Compare with == (equality) or != (inequality)."
        elif word == "-" and exc.pos_in_stream > 0 and (
                text[exc.pos_in_stream - 1].isalnum() or text[exc.pos_in_stream - 1] == "_"):
            start = exc.pos_in_stream - 1
            while start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_?"):
                start -= 1
            ident = text[start:exc.pos_in_stream] + "-" + _word_at(text, exc.pos_in_stream + 1)
            return KipError(
                ErrorCode.KIP_1002,
                f"Invalid identifier '{ident}': '-' is not allowed in identifiers",
                "Identifiers must match regex [a-zA-Z_][a-zA-Z0-9_]*; use snake_case, e.g. "
                "?side_effect.",
                line=line, column=column - (exc.pos_in_stream - start),
                snippet=caret_snippet(text, line, column - (exc.pos_in_stream - start)))
    elif isinstance(exc, UnexpectedEOF):
        expected = set(exc.expected or ())
        found = "the end of the command"
        line, column = _end_position(text)
    else:
        found = "input"
    if hint is None:
        hint = _hint_for(expected, found)
    message = f"Unexpected {found} at line {line}, column {column}"
    if expected:
        message += f"; expected {_expected_text(expected)}"
    return KipError(ErrorCode.KIP_1001, message, hint, line=line, column=column,
                    snippet=caret_snippet(text, line, column),
                    data={"found": found.strip("'"),
                          "expected": sorted(_describe_terminal(n) for n in expected)})


def _end_position(text: str) -> tuple[int, int]:
    stripped = text.rstrip()
    lines = stripped.splitlines() or [""]
    return len(lines), len(lines[-1]) + 1


def _hint_for(expected: set[str], found: str) -> str:
    if expected == {"DETACH"}:
        return ("DELETE CONCEPT requires the DETACH keyword: DELETE CONCEPT ?x DETACH "
                "WHERE { ... }.")
    if "RBRACE" in expected and found == "the end of the command":
        return "A '{' is not closed: check that every '{' has a matching '}'."
    if "RPAR" in expected and found == "the end of the command":
        return "A '(' is not closed: check that every '(' has a matching ')'."
    if found.strip("'").upper() in KEYWORDS and found.strip("'") != found.strip("'").upper():
        return f"KIP keywords are uppercase: write {found.strip(chr(39)).upper()}."
    return ErrorCode.KIP_1001.default_hint


# --- placeholder names -------------------------------------------------------------------

def _params(node) -> list[str]:
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
