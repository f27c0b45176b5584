"""`kip shell`: an interactive KIP shell on a nexus database or a running `kip serve`.

Modules, from the outside in: `app` (arguments, interactive and piped runs), `editor` (the
prompt_toolkit line editor: highlighting, completion, Enter, history), `commands` (the
`:commands`), `core` (runs a command and shows its response), `render` (responses → text),
`terminal` (pager, questions, progress), `backend` (local database or HTTP), `lexer` (a
forgiving tokenizer: completeness, splitting scripts, variables, cursors).

Entry point: `main(argv) -> exit status`; `python -m nexus.shell` runs it.
"""
from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    from .app import main as _main
    return _main(argv)


__all__ = ["main"]
