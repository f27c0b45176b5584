"""`kip shell`: an interactive KIP shell on a nexus database or a running `kip serve`.

Modules, from the outside in: `app` (arguments, interactive and piped runs), `editor` (the
prompt_toolkit line editor: highlighting, Enter, prompts, history), `completion` (Tab),
`commands` (the shell commands and the habits of other shells: `\\q`, `quit`, `help` …),
`core` (runs a command and shows its response), `names` (link ends by name, asked of the
backend), `render` (responses → text), `people` (nodes and links as people read them),
`layout` (tables, wrapping), `terminal` (pager, questions), `progress` (bars and counts, also
used by the `kip` CLI), `backend` (local database or HTTP), `entry` (when an entry is
complete — the parser decides — and how it splits into commands), `lexer` (a forgiving
tokenizer: brackets, variables, cursors).

Entry point: `main(argv) -> exit status`; `python -m nexus.shell` runs it.
"""
from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    from .app import main as _main
    return _main(argv)


__all__ = ["main"]
