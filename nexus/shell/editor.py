"""The line editor: prompt_toolkit session, highlighting, Enter, prompts, history file.

- `KipHighlighter` colours keywords, strings, numbers, `?variables`, `:parameters`, comments
  and shell commands, from the shell's forgiving tokenizer (half-typed text colours fine).
- Completion is `nexus.shell.completion.KipCompleter`.
- Enter runs the entry when `entry.is_complete` says so (the parser decides), and opens a new
  line otherwise; Enter on an empty last line, or Esc then Enter, runs it as it stands (to
  run an UPSERT that waits for a WITH METADATA, or to see the error of an unfinished
  command). A pasted text arrives whole (bracketed paste) and runs on the next Enter.
- The prompt is `kip> ` (`kip(ro)> ` read-only); continuation lines show what is still open:
  `..{> ` inside braces, `..(> ` inside parentheses, `...> ` when the brackets balance.
- `history_path()`: `$KIP_HISTORY_FILE`, else `$XDG_STATE_HOME/kip/history`, else
  `~/.kip_history`.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable

from prompt_toolkit import PromptSession
from prompt_toolkit.document import Document
from prompt_toolkit.formatted_text import StyleAndTextTuples
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.lexers import Lexer
from prompt_toolkit.styles import Style

from .. import language as syntax
from . import entry, lexer
from .completion import KipCompleter

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
        meta = entry.is_meta(text)
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


def key_bindings() -> KeyBindings:
    kb = KeyBindings()

    @kb.add("enter")
    def _enter(event: KeyPressEvent) -> None:
        buf = event.current_buffer
        if buf.complete_state and buf.complete_state.current_completion is not None:
            buf.complete_state = None       # Enter picks the highlighted completion
            return
        doc = buf.document
        text = buf.text
        if not text.strip():
            buf.text = ""                   # nothing typed: a new prompt
            buf.validate_and_handle()
        elif doc.is_cursor_at_the_end and not doc.current_line.strip() and "\n" in text:
            buf.text = text.rstrip()        # an empty line runs the entry as it stands
            buf.validate_and_handle()
        elif entry.is_complete(text):
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
        try:
            lines = session.default_buffer.document.lines[:line_number]
        except (AttributeError, NameError):      # not built yet
            lines = []
        return [("class:continuation", continuation_text("\n".join(lines), width))]

    session: PromptSession[str] = PromptSession(
        message=prompt, multiline=True, history=hist, lexer=KipHighlighter(),
        completer=KipCompleter(shell), complete_while_typing=False,
        key_bindings=key_bindings(), prompt_continuation=continuation, style=STYLE,
        include_default_pygments_style=False, enable_history_search=False,
        color_depth=None)
    return session


def continuation_text(before: str, width: int) -> str:
    """The prompt of a continuation line after the text `before`: the innermost bracket
    still open (`..{> `), or `...> `, right-aligned to the prompt's width."""
    opened = lexer.open_brackets(lexer.significant(lexer.tokenize(before)))
    mark = f"..{opened[-1]}> " if opened else "...> "
    return mark.rjust(width)
