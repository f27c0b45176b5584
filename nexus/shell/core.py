"""The shell's engine room: run one chunk (a KIP command or a shell command), show the outcome.

`Shell` holds the session state — parameters, read-only mode, `:json`, timing, `:ids`, the
page a `next_cursor` still offers (`:more`) — the schema cache used for completion and the
book of element names used to show link ends by name (`nexus.shell.names`). It is the same
for the interactive REPL and for piped scripts; the difference lives in the `UI` it is given
(`nexus.shell.terminal`). Every run returns True on success and False on an error, which the
piped mode turns into exit codes.
"""
from __future__ import annotations

import json
import time
from typing import Any, Callable

from ..language import kind_of_text
from . import entry, lexer, render
from .backend import Backend
from .layout import View
from .names import NameBook
from .terminal import PlainUI

# How many pages of DESCRIBE ... TYPES the completion cache follows at most.
_MAX_SCHEMA_PAGES = 50


class Quit(Exception):
    """Raised by `:quit` to leave the shell."""


class SchemaCache:
    """Concept type and predicate names for completion, fetched once and refreshed after
    writes. Uses DESCRIBE … TYPES, or FIND over `$ConceptType`/`$PropositionType` when the
    engine or server does not answer DESCRIBE."""

    def __init__(self, shell: "Shell") -> None:
        self.shell = shell
        self._types: list[str] | None = None
        self._predicates: list[str] | None = None

    def invalidate(self) -> None:
        self._types = self._predicates = None

    def types(self) -> list[str]:
        if self._types is None:
            self._types = self._fetch("DESCRIBE CONCEPT TYPES", "$ConceptType")
        return self._types

    def predicates(self) -> list[str]:
        if self._predicates is None:
            self._predicates = self._fetch("DESCRIBE PROPOSITION TYPES", "$PropositionType")
        return self._predicates

    def _fetch(self, describe: str, meta_type: str) -> list[str]:
        backend = self.shell.backend
        names: list[str] = []
        command = describe
        for _ in range(_MAX_SCHEMA_PAGES):
            response = backend.execute(command, {}, readonly=True)
            result = response.get("result")
            if "error" in response or not isinstance(result, list):
                break
            names.extend(str(n) for n in result if isinstance(n, str))
            cursor = response.get("next_cursor")
            if not cursor:
                return sorted(set(names))
            command = lexer.with_cursor(describe, cursor)
        if names:
            return sorted(set(names))
        find = f'FIND(?t.name) WHERE {{ ?t {{type: {json.dumps(meta_type)}}} }}'
        response = backend.execute(find, {}, readonly=True)
        result = response.get("result")
        return sorted({n for n in result if isinstance(n, str)}) if isinstance(result,
                                                                                list) else []


MetaRunner = Callable[["Shell", str], bool]


class Shell:
    """The session: runs KIP commands through its backend and `:commands` through
    `meta_runner` (nexus.shell.commands.run_meta, given by the app: the commands module
    builds on this one, not the other way round)."""

    def __init__(self, backend: Backend, ui: PlainUI | None = None, *, color: bool = False,
                 readonly: bool = False, json_output: bool = False,
                 timing: bool = True, meta_runner: MetaRunner | None = None,
                 ids: bool = False) -> None:
        self.backend = backend
        self.meta_runner = meta_runner
        self.ui = ui or PlainUI()
        self.paint = render.Painter(color)
        self.readonly = readonly
        self.json_output = json_output
        self.timing = timing
        self.ids = ids
        self.params: dict[str, Any] = {}
        self.schema = SchemaCache(self)
        self.names = NameBook(backend)
        self.more: str | None = None      # the next page's command, when one was offered

    # --- entry points -----------------------------------------------------------------------
    def run_text(self, text: str, *, stop_on_error: bool = False, join: bool = False) -> bool:
        """Run every command and shell command in `text`; False if any failed. `join`: an
        entry typed at the prompt, where statements the parser lets continue (a pasted
        capsule of UPSERTs) run as one command (`nexus.shell.entry.split_commands`)."""
        ok = True
        for chunk in entry.split_commands(text, join=join):
            if not self.run_chunk(chunk):
                ok = False
                if stop_on_error:
                    break
        return ok

    def run_chunk(self, chunk: entry.Chunk) -> bool:
        if chunk.kind == "meta":
            if self.meta_runner is None:
                return self.error(f"Shell commands are not available here: {chunk.text}")
            return self.meta_runner(self, chunk.text)
        return self.run_kip(chunk.text)

    # --- KIP commands ---------------------------------------------------------------------
    def run_kip(self, command: str) -> bool:
        """Send one command, show the result, and offer the next page when there is one."""
        while True:
            started = time.perf_counter()
            try:
                response = self.backend.execute(command, self.params, readonly=self.readonly)
            except KeyboardInterrupt:
                self.show_lines([self.paint("warn", "interrupted")])
                return False
            elapsed = time.perf_counter() - started
            ok = self.show_response(command, response, elapsed)
            if ok and _is_write(command):
                self.schema.invalidate()
                self.names.invalidate()
            cursor = response.get("next_cursor") if ok else None
            self.more = lexer.with_cursor(command, cursor) if isinstance(cursor, str) else None
            if self.more is None:
                return ok
            if not self.ui.interactive:
                if not self.json_output:
                    self.show_lines([self.paint("dim", f"-- more rows: CURSOR "
                                                       f"{json.dumps(cursor)}")])
                return ok
            if not self.ui.ask("--more-- fetch the next page?"):
                self.info(self.paint("dim", "(:more fetches it later)"))
                return ok
            command = self.more

    def run_more(self) -> bool:
        """The next page of the last command that had one (`:more`)."""
        if self.more is None:
            return self.error("No more rows to fetch", "`:more` follows the next_cursor of "
                              "the last FIND, DESCRIBE or EXPORT that had more.",
                              name="NothingMore")
        return self.run_kip(self.more)

    def view(self, names: dict[str, Any] | None = None) -> View:
        return View(self.paint, self.ui.width, names or {}, self.ids)

    def show_response(self, command: str, response: dict[str, Any], elapsed: float) -> bool:
        ok = "error" not in response
        if self.json_output:
            text = (json.dumps(response, ensure_ascii=False, indent=2) if self.ui.interactive
                    else json.dumps(response, ensure_ascii=False))
            self.show_lines(text.splitlines())
            return ok
        names = self.names.lookup(response.get("result")) if "result" in response else {}
        shown = render.render(command, response, self.view(names))
        lines = list(shown.lines)
        footer = [shown.summary] if shown.summary else []
        if self.timing:
            footer.append(duration_text(elapsed))
        if footer:
            lines.append(self.paint("dim", f"({', '.join(footer)})"))
        hint = response.get("hint") if ok else None
        if isinstance(hint, str):       # e.g. a SEARCH MODE served as "keyword"
            lines.append(self.paint("warn", f"hint: {hint}"))
        self.show_lines(lines)
        return ok

    def show_lines(self, lines: list[str]) -> None:
        self.ui.show(lines)

    def info(self, text: str) -> None:
        self.show_lines([text])

    def error(self, message: str, hint: str | None = None, name: str = "ShellError") -> bool:
        err: dict[str, Any] = {"code": "SHELL", "name": name, "message": message}
        if hint:
            err["hint"] = hint
        self.show_lines(render.render_error(err, self.paint, self.ui.width))
        return False


def _is_write(command: str) -> bool:
    """Whether the command may write (the statement registry's kind of its first word; an
    unknown word counts as a write, as for the engine's read-only method)."""
    kind = kind_of_text(command)
    return kind is None or kind.writes


def duration_text(seconds: float) -> str:
    ms = seconds * 1000
    return f"{ms:.1f} ms" if ms < 1000 else f"{seconds:.2f} s"
