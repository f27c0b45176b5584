"""KIP syntax: grammar-driven parsing into a typed AST, parameter binding, and printing.

Public names: `parse(text) -> ParsedCommand`, `bind(parsed, parameters) -> Command`,
`to_text(command) -> str`, and the AST node classes in `nexus.syntax.ast`.
This package imports nothing else of nexus but `nexus.errors`.
"""
from . import ast
from .bind import bind
from .parser import (KEYWORDS, MAX_COMMAND_BYTES, MAX_NESTING, ParsedCommand, parse,
                     parsed_before)
from .printer import to_text, value_text
from .statements import (StatementInfo, StatementKind, kind_of, kind_of_text, registered,
                         statement, statement_keywords)

__all__ = ["ast", "bind", "parse", "parsed_before", "ParsedCommand", "to_text", "value_text", "KEYWORDS",
           "MAX_COMMAND_BYTES", "MAX_NESTING", "StatementInfo", "StatementKind", "kind_of",
           "kind_of_text", "registered", "statement", "statement_keywords"]
