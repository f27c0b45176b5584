"""Tab completion at the prompt: what may be typed here.

- Shell commands (`:describe`, `:load FILE` …) and their arguments.
- Keywords from the grammar (`nexus.language.KEYWORDS`), filtered by what was typed; at the
  start of a command only the words a statement starts with (`statement_keywords()`, the
  statement registry's, plus RC11's UPDATE, MERGE and EXPORT).
- Context-specific words, offered on Tab even before a letter is typed, including RC11's
  until the grammar has them: after SEARCH's term `WITH`, `MODE`, `THRESHOLD`, `LIMIT`; after
  `MODE` the modes `"keyword"`, `"semantic"`, `"hybrid"`; `MERGE CONCEPT ?a INTO ?b WHERE`;
  `UPDATE ?x SET ATTRIBUTES|METADATA … WHERE`; the update functions `ADD`, `MUL`, `CLAMP`,
  `COALESCE` inside an UPDATE's SET map; `EXPECT VERSION` inside an UPSERT block; `EXPORT ?x
  WHERE`.
- Concept types and predicates (from the shell's schema cache) inside `{type: "…` or after
  `{type: `, `(?a, "…`, `PROPOSITION TYPE "…`; the `?variables` already in the command; the
  fields of a dot path (`?d.na` → `name`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from prompt_toolkit.completion import CompleteEvent, Completer, Completion, PathCompleter
from prompt_toolkit.document import Document

from .. import language as syntax
from . import entry, lexer

if TYPE_CHECKING:
    from .core import Shell

SEARCH_MODES = ("keyword", "semantic", "hybrid")
UPDATE_FUNCTIONS = ("ADD", "MUL", "CLAMP", "COALESCE")
FIELDS = ("id", "type", "name", "attributes", "metadata", "subject", "predicate", "object")


def _statement_tokens(before: str) -> list[lexer.Token]:
    """The significant tokens of the statement the cursor is in (after the last top-level
    `;`)."""
    sig = lexer.significant(lexer.tokenize(before))
    d, start = 0, 0
    for i, tok in enumerate(sig):
        if tok.kind == "punct":
            if tok.text in lexer.OPENERS:
                d += 1
            elif tok.text in lexer.CLOSERS:
                d = max(0, d - 1)
            elif tok.text == ";" and d == 0:
                start = i + 1
    return sig[start:]


def next_words(before: str) -> tuple[list[str], bool] | None:
    """(words that may come next, only those) for the text before the cursor's word, or None
    when the context says nothing special. `only`: keywords in general do not fit here."""
    toks = _statement_tokens(before)
    if not toks:
        return sorted(entry.command_words()), True
    first, prev = toks[0].text, toks[-1]
    d = lexer.depth(toks)
    texts = [t.text for t in toks]
    if prev.text == "MODE":
        return [f'"{m}"' for m in SEARCH_MODES], True
    if prev.text == "EXPECT":
        return ["VERSION"], True
    if first == "SEARCH" and d == 0:
        if prev.text == "SEARCH":
            return ["CONCEPT", "PROPOSITION"], True
        if prev.text == "WITH":
            return ["TYPE"], True
        if prev.kind in ("string", "param", "number") and len(toks) > 2:
            used = set(texts)
            return [w for w in ("WITH", "MODE", "THRESHOLD", "LIMIT") if w not in used], True
    if first == "MERGE" and d == 0:
        if prev.text == "MERGE":
            return ["CONCEPT"], True
        if prev.kind == "var":
            return (["WHERE"] if "INTO" in texts else ["INTO"]), True
    if first in ("UPDATE", "EXPORT") and d == 0 and prev.kind == "var" and len(toks) == 2:
        return (["SET"] if first == "UPDATE" else ["WHERE"]), True
    if prev.text == "SET":
        return (["ATTRIBUTES", "METADATA"] if first == "UPDATE"
                else ["ATTRIBUTES", "PROPOSITIONS"]), True
    if first == "UPDATE" and d >= 1 and prev.text in (":", "(", ",") and "WHERE" not in texts:
        return list(UPDATE_FUNCTIONS), False
    if first == "UPDATE" and d == 0 and prev.text == "}" and "WHERE" not in texts:
        return ["SET", "WHERE"], True
    if first == "UPSERT" and d == 2 and prev.text in ("}", ")"):
        return ["EXPECT", "SET"], True          # after a block's identity clause
    return None


class KipCompleter(Completer):
    """Context-aware completion; see the module docstring."""

    def __init__(self, shell: "Shell") -> None:
        self.shell = shell
        self.paths = PathCompleter(expanduser=True)

    def get_completions(self, document: Document,
                        event: CompleteEvent) -> Iterable[Completion]:
        before = document.text_before_cursor
        if entry.is_meta(document.text) and "\n" not in before and \
                document.text.lstrip().startswith(":"):
            yield from self._meta(document, event)
            return
        tokens = lexer.tokenize(before)
        last = tokens[-1] if tokens else None
        if last is not None and last.kind == "comment":
            return
        if last is None or last.kind == "ws":
            if last is None or "\n" not in last.text:
                yield from self._words("", before)
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
        close = "" if after.startswith('"') else '"'
        prev = [t.text for t in lexer.words_before(before[:tok.start], 1)]
        if prev == ["MODE"]:
            for mode in SEARCH_MODES:
                if mode.startswith(prefix):
                    yield Completion(mode + close, -len(prefix), display=mode,
                                     display_meta="search mode")
            return
        want_types, want_preds = self._schema_context(before[:tok.start])
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
            seg = prefix.rpartition(".")[2]
            for f in FIELDS:
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
        context = next_words(before)
        words: list[str] = []
        if context is not None:
            words = list(context[0])
            if not context[1] and prefix:
                words += sorted(w for w in syntax.KEYWORDS if w not in words)
        elif prefix:
            words = sorted(syntax.KEYWORDS)
        upper = prefix.upper()
        for word in words:
            if word.startswith(upper) and word != prefix:
                meta = "next" if context is not None and word in context[0] else "keyword"
                yield Completion(word, -len(prefix), display_meta=meta)

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
        elif name in (":readonly", ":json", ":timing", ":pager", ":ids") and len(words) == 1:
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
