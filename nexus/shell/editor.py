"""The line editor: prompt_toolkit session, highlighting, completion, Enter, history file.

- `KipHighlighter` colours keywords, strings, numbers, `?variables`, `:parameters`, comments
  and `:commands`, from the shell's forgiving tokenizer (half-typed text colours fine).
- `KipCompleter` completes `:commands` (and their arguments), keywords, concept types and
  predicates (from the shell's schema cache) and the `?variables` already in the command.
- Enter runs the buffer when `lexer.is_complete` says so, and opens a new line otherwise;
  Esc-Enter runs it regardless (to see the error of an unfinished command).
- `history_path()`: `$KIP_HISTORY_FILE`, else `$XDG_STATE_HOME/kip/history`, else
  `~/.kip_history`.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable, Iterable

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import CompleteEvent, Completer, Completion, PathCompleter
from prompt_toolkit.document import Document
from prompt_toolkit.formatted_text import StyleAndTextTuples
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.lexers import Lexer
from prompt_toolkit.styles import Style

from .. import language as syntax
from . import lexer

if TYPE_CHECKING:
    from .core import Shell

LITERALS = frozenset(("true", "false", "null"))

STYLE = Style.from_dict({
    "kip.keyword": "bold ansiblue",
    "kip.string": "ansigreen",
    "kip.number": "ansicyan",
    "kip.variable": "ansimagenta",
    "kip.param": "ansiyellow",
    "kip.comment": "italic ansibrightblack",
    "kip.literal": "ansicyan",
    "kip.meta": "bold ansiyellow",
    "prompt": "bold",
    "prompt.readonly": "bold ansiyellow",
    "continuation": "ansibrightblack",
})


def history_path() -> str:
    explicit = os.environ.get("KIP_HISTORY_FILE")
    if explicit:
        return os.path.expanduser(explicit)
    state = os.environ.get("XDG_STATE_HOME")
    if state:
        return os.path.join(state, "kip", "history")
    return os.path.expanduser("~/.kip_history")


def token_style(tok: lexer.Token) -> str:
    kind = tok.kind
    if kind == "word":
        if tok.text in syntax.KEYWORDS:
            return "class:kip.keyword"
        if tok.text in LITERALS:
            return "class:kip.literal"
        return ""
    return {"string": "class:kip.string", "number": "class:kip.number",
            "var": "class:kip.variable", "param": "class:kip.param",
            "comment": "class:kip.comment"}.get(kind, "")


class KipHighlighter(Lexer):
    def lex_document(self, document: Document) -> Callable[[int], StyleAndTextTuples]:
        text = document.text
        meta = lexer.is_meta(text)
        lines: list[StyleAndTextTuples] = [[]]
        for tok in lexer.tokenize(text):
            style = token_style(tok)
            if meta and tok.kind == "param" and not any(lines[0]):
                style = "class:kip.meta"
            parts = tok.text.split("\n")
            for i, part in enumerate(parts):
                if i:
                    lines.append([])
                if part:
                    lines[-1].append((style, part))
        return lambda n: lines[n] if n < len(lines) else []


class KipCompleter(Completer):
    """Context-aware completion; see the module docstring."""

    def __init__(self, shell: "Shell") -> None:
        self.shell = shell
        self.paths = PathCompleter(expanduser=True)

    def get_completions(self, document: Document,
                        event: CompleteEvent) -> Iterable[Completion]:
        before = document.text_before_cursor
        if lexer.is_meta(document.text) and "\n" not in before:
            yield from self._meta(document, event)
            return
        tokens = lexer.tokenize(before)
        last = tokens[-1] if tokens else None
        if last is None or last.kind == "comment":
            return
        if last.kind == "ws":
            yield from self._words("", before) if "\n" not in last.text else ()
            return
        if last.kind == "string" and not last.closed:
            yield from self._in_string(before, last, document.text_after_cursor)
        elif last.kind == "var":
            yield from self._variables(last.text, document.text)
        elif last.kind == "word":
            yield from self._words(last.text, before[:last.start])

    # --- KIP text -------------------------------------------------------------------------
    def _schema_context(self, before: str) -> tuple[bool, bool]:
        """(types wanted, predicates wanted) for a string that starts after `before`."""
        prev = [t.text for t in lexer.words_before(before, 3)]
        prev += [""] * (3 - len(prev))
        if prev[0] == ":" and prev[1] in ("type", '"type"'):
            return True, False
        if prev[0] == "TYPE":
            if prev[1] == "CONCEPT":
                return True, False
            if prev[1] == "PROPOSITION":
                return False, True
            return True, True                        # WITH TYPE (SEARCH)
        if prev[0] in ("(", ",", "|"):
            return False, True
        if prev[0] == ":" and prev[1] in ("name", '"name"'):
            return False, False
        return True, True

    def _in_string(self, before: str, tok: lexer.Token, after: str) -> Iterable[Completion]:
        prefix = tok.text[1:]
        want_types, want_preds = self._schema_context(before[:tok.start])
        close = "" if after.startswith('"') else '"'
        names: list[tuple[str, str]] = []
        if want_types:
            names += [(n, "type") for n in self.shell.schema.types()]
        if want_preds:
            names += [(n, "predicate") for n in self.shell.schema.predicates()]
        seen = set()
        for name, what in names:
            if name.startswith(prefix) and name not in seen:
                seen.add(name)
                yield Completion(name + close, -len(prefix), display=name, display_meta=what)

    def _variables(self, prefix: str, text: str) -> Iterable[Completion]:
        if "." in prefix:
            var, _, seg = prefix.rpartition(".")
            fields = ("id", "type", "name", "attributes", "metadata", "subject", "predicate",
                      "object")
            for f in fields:
                if f.startswith(seg) and f != seg:
                    yield Completion(f, -len(seg), display_meta="field")
            return
        for var in lexer.variables(text):
            if var.startswith(prefix) and var != prefix:
                yield Completion(var, -len(prefix), display_meta="variable")

    def _words(self, prefix: str, before: str) -> Iterable[Completion]:
        prev = [t.text for t in lexer.words_before(before, 2)]
        if len(prev) == 2 and prev[0] == ":" and prev[1] == "type":   # {type: Wid<Tab>
            for name in self.shell.schema.types():
                if name.startswith(prefix):
                    yield Completion(f'"{name}"', -len(prefix), display=name,
                                     display_meta="type")
            return
        if not prefix:
            return          # Tab after a blank offers nothing but {type: <Tab>
        upper = prefix.upper()
        for word in sorted(syntax.KEYWORDS):
            if word.startswith(upper) and word != prefix:
                yield Completion(word, -len(prefix), display_meta="keyword")

    # --- :commands ------------------------------------------------------------------------
    def _meta(self, document: Document, event: CompleteEvent) -> Iterable[Completion]:
        from .commands import COMMANDS, DESCRIBE_TOPICS
        text = document.text_before_cursor.lstrip()
        if " " not in text:
            for name, (_, usage, help_text) in COMMANDS.items():
                if name.startswith(text) and name != text:
                    yield Completion(name, -len(text), display_meta=help_text)
            return
        name, _, arg = text.partition(" ")
        words = arg.split(" ")
        current = words[-1]
        if name == ":load":
            sub = Document(arg, len(arg))
            yield from self.paths.get_completions(sub, event)
        elif name in (":readonly", ":json", ":timing", ":pager") and len(words) == 1:
            yield from _choices(("on", "off"), current)
        elif name == ":unparam" and len(words) == 1:
            yield from _choices(sorted(self.shell.params), current)
        elif name == ":describe":
            if len(words) == 1:
                yield from _choices(DESCRIBE_TOPICS, current)
            elif len(words) == 2 and words[0] == "type":
                yield from _choices(self.shell.schema.types(), current)
            elif len(words) == 2 and words[0] == "predicate":
                yield from _choices(self.shell.schema.predicates(), current)
        elif name == ":explain":
            yield from self._words(current, "") if current else ()


def _choices(options: Iterable[str], current: str) -> Iterable[Completion]:
    for option in options:
        if option.startswith(current) and option != current:
            yield Completion(option, -len(current))


def key_bindings() -> KeyBindings:
    kb = KeyBindings()

    @kb.add("enter")
    def _enter(event: KeyPressEvent) -> None:
        buf = event.current_buffer
        if buf.complete_state and buf.complete_state.current_completion is not None:
            buf.complete_state = None       # Enter picks the highlighted completion
            return
        if lexer.is_complete(buf.text):
            buf.validate_and_handle()
        else:
            buf.insert_text("\n")

    @kb.add("escape", "enter")
    def _run_now(event: KeyPressEvent) -> None:
        if event.current_buffer.text.strip():
            event.current_buffer.validate_and_handle()

    return kb


def make_session(shell: "Shell", *, history: bool = True) -> PromptSession[str]:
    hist: History
    if history:
        path = history_path()
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            hist = FileHistory(path)
        except OSError:
            hist = InMemoryHistory()
    else:
        hist = InMemoryHistory()

    def prompt() -> StyleAndTextTuples:
        if shell.readonly:
            return [("class:prompt.readonly", "kip(ro)> ")]
        return [("class:prompt", "kip> ")]

    def continuation(width: int, line_number: int, wrap_count: int) -> StyleAndTextTuples:
        return [("class:continuation", "...> ".rjust(width))]

    return PromptSession(
        message=prompt, multiline=True, history=hist, lexer=KipHighlighter(),
        completer=KipCompleter(shell), complete_while_typing=False,
        key_bindings=key_bindings(), prompt_continuation=continuation, style=STYLE,
        include_default_pygments_style=False, enable_history_search=False,
        color_depth=None)
