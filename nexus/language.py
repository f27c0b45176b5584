"""The KIP language for tools: parsing, printing and the statement registry, public.

Front ends that work on command *text* — the shell's highlighting, completion and result
rendering, the server's logs — use this module (with `nexus.api` for running commands)
instead of reaching into the engine's packages. It re-exports `nexus.syntax`'s public
names: `parse(text) -> ParsedCommand`, `to_text(command)`, the AST classes (`ast`), the
language's `KEYWORDS`, and the statement registry (`StatementKind`, `kind_of`,
`kind_of_text`, `statement_keywords`).
"""
from __future__ import annotations

from .syntax import (KEYWORDS, ParsedCommand, StatementKind, ast, bind, kind_of, kind_of_text,
                     parse, registered, statement_keywords, to_text, value_text)

__all__ = ["KEYWORDS", "ParsedCommand", "StatementKind", "ast", "bind", "kind_of",
           "kind_of_text", "parse", "registered", "statement_keywords", "to_text",
           "value_text", "command_label"]


def command_label(text: object) -> str:
    """KQL / KML / META (the kind's label) of a command text from its leading keyword, or
    `?` when no statement starts with that word — for logs."""
    kind = kind_of_text(text)
    return "?" if kind is None else kind.label
