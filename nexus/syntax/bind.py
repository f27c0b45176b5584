"""Parameter binding on the AST: `:name` placeholders become typed literal values.

Binding never touches the command text, so a parameter value can never change the structure
of a command (a value that contains KIP syntax is just a string). A parsed command can be
bound many times with different values. After binding, objects and arrays whose members are
all literal are folded into one `Literal`, so later stages see plain Python values.

Errors: a placeholder with no value → `KIP_1001` naming it; a value of the wrong kind for its
position (a LIMIT that is not a positive integer, a type name that is not a string...) →
`KIP_1001` naming the parameter and what it must be.
"""
from __future__ import annotations

import json
import math
from dataclasses import fields
from typing import Any, Mapping

from ..errors import ErrorCode, KipError
from . import ast as A
from .parser import ParsedCommand


def bind(parsed: ParsedCommand | A.Command, parameters: Mapping[str, Any] | None = None):
    """Return the command with every placeholder replaced by its value from `parameters`.

    Accepts a `ParsedCommand` (returns the bound `Command`) or a bare command node. Unused
    parameters are ignored (a batch shares one parameter object among its commands).
    """
    if isinstance(parsed, ParsedCommand):
        if not parsed.parameters:
            return parsed.command
        params = parameters or {}
        for name in parsed.parameters:
            if name not in params:
                raise _missing(sorted(n for n in parsed.parameters if n not in params),
                               parsed.command)
        return _binder(parsed.command)(params)
    return _binder(parsed)(parameters or {})


def _binder(node: Any):
    """The compiled binder of a command node, built once per (cached, immutable) parse."""
    hit = _BINDERS.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    fn = _compile(node)
    if fn is None:
        fn = lambda params, _node=node: _node  # noqa: E731 - no placeholder anywhere
    if len(_BINDERS) > 8192:
        _BINDERS.clear()
    _BINDERS[id(node)] = (node, fn)
    return fn


_BINDERS: dict[int, tuple[Any, Any]] = {}


def _compile(node: Any):
    """A function params -> bound node, or None when `node` holds no placeholder.

    Only the spine above each placeholder is rebuilt on every call; constant subtrees are
    shared with the parse.
    """
    if isinstance(node, A.Param):
        return lambda params, _p=node: _bind_param(_p, params)
    if node is None or isinstance(node, (A.Literal, str, int, A.Pos)):
        return None
    if isinstance(node, tuple):
        parts = [(_compile(item), item) for item in node]
        if all(f is None for f, _ in parts):
            return None
        return lambda params: tuple(v if f is None else f(params) for f, v in parts)
    if isinstance(node, A.ObjectValue):
        entries = [(k, _compile(v), v) for k, v in node.entries]
        return lambda params: A.Literal(
            {k: (v.value if f is None else f(params).value) for k, f, v in entries}, node.pos)
    if isinstance(node, A.ArrayValue):
        items = [(_compile(v), v) for v in node.items]
        return lambda params: A.Literal(
            [v.value if f is None else f(params).value for f, v in items], node.pos)
    if not hasattr(node, "__dataclass_fields__"):
        return None
    cls = type(node)
    parts = [(_compile(getattr(node, f.name)), getattr(node, f.name)) for f in fields(node)]
    if all(f is None for f, _ in parts):
        return None
    return lambda params: cls(*[v if f is None else f(params) for f, v in parts])


def _missing(names: list[str], node: A.Command) -> KipError:
    listed = ", ".join(f":{n}" for n in names)
    pos = _first_param_pos(node, names[0])
    return KipError(
        ErrorCode.KIP_1001,
        f"No value was given for parameter {listed}",
        f"Add {', '.join(repr(n) for n in names)} to the request's `parameters` object, "
        f"e.g. \"parameters\": {{\"{names[0]}\": ...}}.",
        line=pos.line if pos else None, column=pos.column if pos else None,
        data={"missing_parameters": names},
    )


def _first_param_pos(node: Any, name: str) -> A.Pos | None:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, A.Param) and item.name == name:
            return item.pos
        if isinstance(item, (tuple, list)):
            stack.extend(reversed(item))
        elif hasattr(item, "__dataclass_fields__") and not isinstance(item, (A.Literal, A.Pos)):
            stack.extend(reversed([getattr(item, f.name) for f in fields(item)]))
    return None


def _bind_param(param: A.Param, params: Mapping[str, Any]) -> A.Literal:
    if param.name not in params:
        raise KipError(ErrorCode.KIP_1001, f"No value was given for parameter :{param.name}",
                       f"Add \"{param.name}\" to the request's `parameters` object.",
                       line=param.pos.line if param.pos else None,
                       column=param.pos.column if param.pos else None,
                       data={"missing_parameters": [param.name]})
    value = params[param.name]
    _check_json(value, param)
    expect = param.expect
    ok = True
    if expect == A.EXPECT_STRING:
        ok = isinstance(value, str)
    elif expect == A.EXPECT_OBJECT:
        ok = isinstance(value, dict)
    elif expect == A.EXPECT_ARRAY:
        ok = isinstance(value, list)
    elif expect == A.EXPECT_POSITIVE_INT:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    if not ok:
        shown = json.dumps(value, ensure_ascii=False, default=str)[:60]
        raise KipError(
            ErrorCode.KIP_1001,
            f"Parameter :{param.name} must be a {expect} in this position, got {shown}",
            f"Pass a {expect} as \"{param.name}\" in `parameters`.",
            line=param.pos.line if param.pos else None,
            column=param.pos.column if param.pos else None,
        )
    return A.Literal(value, param.pos)


def _check_json(value: Any, param: A.Param, depth: int = 0) -> None:
    """Parameter values must be JSON values (what arrives over the wire always is; the
    Python API could pass anything)."""
    if depth > 64:
        raise _bad(param, "is nested too deeply")
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise _bad(param, "is NaN or infinite, which JSON cannot represent")
        return
    if isinstance(value, list):
        for item in value:
            _check_json(item, param, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise _bad(param, "has a non-string object key")
            _check_json(item, param, depth + 1)
        return
    raise _bad(param, f"is a {type(value).__name__}, not a JSON value")


def _bad(param: A.Param, why: str) -> KipError:
    return KipError(ErrorCode.KIP_2003, f"Parameter :{param.name} {why}",
                    "Parameter values must be JSON values: null, booleans, numbers, strings, "
                    "arrays and objects.")
