"""The shell commands: help, load, parameters, explain, describe shortcuts and settings.

Each command is a function `(shell, arg) -> bool` (True on success) registered in
`COMMANDS` with its usage line and a one-line description; `:help` and tab completion read
the same table, so a new command is one function and one entry.

The words people bring from other shells are aliases (`ALIASES`): psql's `\\q` and `\\?`,
sqlite3's `.quit`, `.exit` and `.help`, and `quit`, `exit` and `help` typed alone. An unknown
`:`, `\\` or `.` command answers with the commands that exist.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Callable

from . import render
from .core import Quit, Shell, duration_text

Handler = Callable[[Shell, str], bool]
COMMANDS: dict[str, tuple[Handler, str, str]] = {}
ALIASES = {":q": ":quit", ":exit": ":quit", ":h": ":help", ":?": ":help",
           # psql
           "\\q": ":quit", "\\quit": ":quit", "\\?": ":help", "\\h": ":help",
           "\\help": ":help",
           # sqlite3
           ".quit": ":quit", ".exit": ":quit", ".q": ":quit", ".help": ":help",
           # typed alone, in any case (cypher-shell's :exit and :help are above)
           "quit": ":quit", "exit": ":quit", "help": ":help"}
DESCRIBE_TOPICS = ("primer", "domains", "types", "predicates", "type", "predicate")


def command(name: str, usage: str, text: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        COMMANDS[name] = (fn, usage, text)
        return fn
    return register


def run_meta(shell: Shell, line: str) -> bool:
    name, _, arg = line.strip().partition(" ")
    if name.rstrip(";").lower() in ("quit", "exit", "help") and not arg.strip(" ;"):
        name, arg = name.rstrip(";").lower(), ""
    name = ALIASES.get(name, name)
    found = COMMANDS.get(name)
    if found is None:
        return shell.error(f"Unknown command {name}", known_commands(), name="UnknownCommand")
    return found[0](shell, arg.strip())


def known_commands() -> str:
    """The hint of an unknown command: what exists, in one paragraph."""
    names = " ".join(COMMANDS)
    return (f"Shell commands: {names}. From other shells: \\q, quit, exit or .quit to "
            f"leave; \\?, help or .help for help. KIP commands (FIND, UPSERT, ...) are "
            f"typed as they are.")


def _on_off(shell: Shell, arg: str, current: bool, what: str) -> bool | None:
    """Parse on/off (no argument toggles); None after reporting a bad argument."""
    if not arg:
        return not current
    if arg.lower() in ("on", "true", "yes", "1"):
        return True
    if arg.lower() in ("off", "false", "no", "0"):
        return False
    shell.error(f"{what} takes on or off, not {arg!r}", name="BadArgument")
    return None


@command(":help", ":help", "this help")
def _help(shell: Shell, arg: str) -> bool:
    p = shell.paint
    lines = [p("header", "KIP commands"),
             "  FIND(...) WHERE {...}, UPSERT {...}, UPDATE, MERGE, DELETE, DESCRIBE, SEARCH,",
             "  EXPORT. A command runs when the parser says it is complete; an UPSERT waits",
             "  for a WITH METADATA or another UPSERT on the next line. An empty line, or ';'",
             "  at the end of a line, runs what you typed; Esc then Enter runs it as it is.",
             "  Tab completes keywords, types, predicates, variables and :commands; Up/Down",
             "  walk the history.",
             "", p("header", "Shell commands")]
    width = max(len(usage) for _, usage, _ in COMMANDS.values())
    for _, usage, text in COMMANDS.values():
        lines.append(f"  {usage.ljust(width)}  {text}")
    lines += ["", "Also \\q, quit or exit to leave, \\? or help for this help. Ctrl-C clears "
              "the input,", "Ctrl-D on an empty line quits."]
    shell.show_lines(lines)
    return True


@command(":quit", ":quit", "leave the shell (also \\q, quit, exit, Ctrl-D)")
def _quit(shell: Shell, arg: str) -> bool:
    raise Quit()


@command(":load", ":load FILE", "apply a capsule file (.kip) to the database")
def _load(shell: Shell, arg: str) -> bool:
    if not arg:
        return shell.error(":load needs a file", "Example: :load capsules/person.kip",
                           name="BadArgument")
    path = os.path.expanduser(arg.strip().strip('"'))
    if not os.path.isfile(path):
        return shell.error(f"No such file: {path}", name="FileError")
    started = time.perf_counter()
    try:
        report = shell.backend.load(path, shell.ui.progress)
    finally:
        shell.ui.end_progress()
    shell.schema.invalidate()
    if report.error is not None:
        shell.show_lines(render.render_error(report.error.get("error"), shell.paint,
                                             shell.ui.width))
        return False
    timing = f" in {duration_text(time.perf_counter() - started)}" if shell.timing else ""
    shell.info(shell.paint("ok", f"Loaded {path}: {report.summary()}{timing}"))
    return True


def parse_value(text: str) -> Any:
    """A JSON value, or the text itself when it is not JSON (`:param name Alice`)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


@command(":param", ":param NAME VALUE", "set :NAME for every command (JSON, else text)")
def _param(shell: Shell, arg: str) -> bool:
    name, _, value = arg.partition(" ")
    name = name.lstrip(":")
    if not name.isidentifier():
        return shell.error(f"Bad parameter name {name!r}", "Example: :param name \"Aspirin\"",
                           name="BadArgument")
    if not value.strip():
        if name not in shell.params:
            return shell.error(f"Parameter :{name} is not set", name="BadArgument")
        shell.info(f":{name} = {json.dumps(shell.params[name], ensure_ascii=False)}")
        return True
    shell.params[name] = parse_value(value.strip())
    shell.info(f":{name} = {json.dumps(shell.params[name], ensure_ascii=False)}")
    return True


@command(":params", ":params", "list the parameters that are set")
def _params(shell: Shell, arg: str) -> bool:
    if not shell.params:
        shell.info(shell.paint("dim", "(no parameters)"))
    for name, value in sorted(shell.params.items()):
        shell.info(f":{name} = {json.dumps(value, ensure_ascii=False)}")
    return True


@command(":unparam", ":unparam NAME", "forget a parameter")
def _unparam(shell: Shell, arg: str) -> bool:
    name = arg.strip().lstrip(":")
    if name not in shell.params:
        return shell.error(f"Parameter :{name} is not set", name="BadArgument")
    del shell.params[name]
    shell.info(f":{name} unset")
    return True


@command(":explain", ":explain FIND ...", "show the query plan of a FIND")
def _explain(shell: Shell, arg: str) -> bool:
    if not arg:
        return shell.error(":explain needs a query", "Example: :explain FIND(?x) WHERE "
                           "{ ?x {type: \"Person\"} }", name="BadArgument")
    query = arg if arg.lstrip().startswith("EXPLAIN") else f"EXPLAIN {arg}"
    return shell.run_kip(query)


def describe_command(arg: str) -> str | None:
    topic, _, name = arg.strip().partition(" ")
    topic = topic.lower() or "primer"
    name = name.strip().strip('"')
    simple = {"primer": "DESCRIBE PRIMER", "domains": "DESCRIBE DOMAINS",
              "types": "DESCRIBE CONCEPT TYPES", "predicates": "DESCRIBE PROPOSITION TYPES"}
    if topic in simple and not name:
        return simple[topic]
    if topic == "type" and name:
        return f"DESCRIBE CONCEPT TYPE {json.dumps(name)}"
    if topic == "predicate" and name:
        return f"DESCRIBE PROPOSITION TYPE {json.dumps(name)}"
    return None


@command(":describe", ":describe [WHAT]",
         "DESCRIBE shortcuts: primer, domains, types, predicates, type T, predicate p")
def _describe(shell: Shell, arg: str) -> bool:
    text = describe_command(arg)
    if text is None:
        return shell.error(f"Cannot describe {arg!r}", "Use :describe types, :describe type "
                           "Person, :describe predicate knows, domains or primer.",
                           name="BadArgument")
    return shell.run_kip(text)


def setting(name: str, attr: str, label: str, text: str) -> None:
    """Register `:name [on|off]`, which sets the shell's boolean `attr` (no argument:
    toggles) and says so (`label on`)."""
    def handler(shell: Shell, arg: str) -> bool:
        value = _on_off(shell, arg, bool(getattr(shell, attr)), name)
        if value is None:
            return False
        setattr(shell, attr, value)
        shell.info(f"{label} {'on' if value else 'off'}")
        return True
    command(name, f"{name} [on|off]", text)(handler)


setting(":readonly", "readonly", "read-only", "send commands with execute_kip_readonly")
setting(":json", "json_output", "JSON output", "show raw JSON responses instead of tables")
setting(":timing", "timing", "timing", "show how long each command took")


@command(":more", ":more", "the next page of the last result that had more rows")
def _more(shell: Shell, arg: str) -> bool:
    return shell.run_more()


setting(":ids", "ids", "ids", "show element ids beside names")


@command(":pager", ":pager [on|off]", "page long results with --more--")
def _pager(shell: Shell, arg: str) -> bool:
    current = bool(getattr(shell.ui, "pager", False))
    value = _on_off(shell, arg, current, ":pager")
    if value is None:
        return False
    if hasattr(shell.ui, "pager"):
        shell.ui.pager = value
    shell.info(f"pager {'on' if value else 'off'}")
    return True
