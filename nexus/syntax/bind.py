"""Parameter binding on the AST: `:name` placeholders become typed literal values.

Binding never touches the command text, so a parameter value can never change the structure
of a command (a value that contains KIP syntax is just a string). A parsed command can be
bound many times with different values. After binding, objects and arrays whose members are
all literal are folded into one `Literal`, so later stages see plain Python values.

Errors: a placeholder with no value → `KIP_1001` naming it; a value of the wrong kind for its
position (a LIMIT that is not a positive integer, a type name that is not a string, a list as a
FILTER operand...) → `KIP_1001` naming the parameter and what it must be — the same error the
value would give written in the text; a key that is not an identifier (in a SET ATTRIBUTES /
WITH METADATA map, or a DELETE key) → `KIP_1002`; a value that is not JSON at all (NaN, a set,
an arbitrary object, from the Python API) → `KIP_2003`.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import fields, is_dataclass
from typing import Any, Callable, Mapping, Union, overload

from ..errors import ErrorCode, KipError
from . import ast as A
from .parser import ParsedCommand

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

Params = Mapping[str, Any]
# A compiled binder: params -> the node rebuilt with its placeholders bound. A node binds to
# a node of its own class (a Value to a Literal), which Python's types cannot say of the
# generic rebuild below: `bind()`'s overloads state it at the boundary.
Binder = Callable[[Params], Any]


@overload
def bind(parsed: Union[ParsedCommand, A.Command], parameters: Params | None = None
         ) -> A.Command: ...
@overload
def bind(parsed: A.Value, parameters: Params | None = None) -> A.Literal: ...


def bind(parsed: Union[ParsedCommand, A.Command, A.Value], parameters: Params | None = None
         ) -> Union[A.Command, A.Literal]:
    """Return the command with every placeholder replaced by its value from `parameters`.

    Accepts a `ParsedCommand` (returns the bound `Command`), a bare command node, or a value
    node (returns its `Literal`). Unused parameters are ignored (a batch shares one parameter
    object among its commands).
    """
    bound: Union[A.Command, A.Literal]
    if isinstance(parsed, ParsedCommand):
        if not parsed.parameters:
            return parsed.command
        params = parameters if parameters is not None else {}
        try:
            complete = parsed.parameters <= params.keys()
        except AttributeError:  # a Mapping without a keys() view that supports <=
            complete = all(name in params for name in parsed.parameters)
        if not complete:
            raise _missing(sorted(n for n in parsed.parameters if n not in params),
                           parsed.command)
        bound = _binder(parsed.command)(params)
        return bound
    bound = _binder(parsed)(parameters if parameters is not None else {})
    return bound


def _binder(node: object) -> Binder:
    """The compiled binder of a command node, built once per (cached, immutable) parse."""
    hit = _BINDERS.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    fn = _compile(node)
    if fn is None:
        def fn(params: Params, _node: object = node) -> object:   # no placeholder anywhere
            return _node
    if len(_BINDERS) > 8192:
        _BINDERS.clear()
    _BINDERS[id(node)] = (node, fn)
    return fn


# id(command) -> (command, binder). Holding the command keeps its id from being reused.
_BINDERS: dict[int, tuple[object, Binder]] = {}

# Kinds whose check a `str` value passes without further ado (the common case).
_STR_OK = frozenset((A.EXPECT_ANY, A.EXPECT_STRING, A.EXPECT_PRIMITIVE))


def check_values(node: object, parameters: Params) -> None:
    """Check every placeholder's value in `node` as `bind` would — the same checks, in the
    same order, so the same first error — without rebuilding anything.

    For statements that read their parameter values at execution (`late_binding`): a big
    UPSERT binds each value where it is used (`value_of`) instead of rebuilding a tree of
    thousands of nodes per command, yet refuses a bad value before anything is written.
    One loop over the placeholders (no function compiled per placeholder: a loader's
    commands are each checked once, so compiling would cost more than it saves).
    """
    str_ok, is_str, is_dict, plain = _STR_OK, str, dict, _plain_map
    for param in _params_in(node):
        try:
            value = parameters[param.name]
        except KeyError:
            raise _missing([param.name], param) from None
        kind = type(value)
        expect = param.expect
        if kind is is_str and expect in str_ok:
            continue
        if kind is is_dict and expect == A.EXPECT_OBJECT and plain(value):
            continue
        _bind_param(param, value)


def value_of(value: Any, parameters: Params) -> Any:
    """The plain value of a value node under `parameters` (a value `check_values` passed):
    a Literal's value, a placeholder's parameter, an object/array with placeholders folded."""
    kind = type(value)
    if kind is A.Literal:
        return value.value
    if kind is A.Param:
        return parameters[value.name]
    if kind is A.ObjectValue:
        flat = _flat_entries(value)
        if flat is not None:
            # What binding folds it into (each placeholder's value as given, checked),
            # without a Literal per entry: an UPSERT's SET ATTRIBUTES / WITH METADATA.
            return {k: parameters[v.name] if type(v) is A.Param else v.value
                    for k, v in flat}
    return bind(value, parameters).value


def _flat_entries(node: A.ObjectValue) -> tuple[tuple[str, Any], ...] | None:
    """The entries of an object whose values are all placeholders or literals (None when
    one is nested: bound in full), found once per cached parse."""
    hit = _FLAT.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    entries = node.entries
    flat = entries if all(type(v) is A.Param or type(v) is A.Literal
                          for _, v in entries) else None
    if len(_FLAT) > 8192:
        _FLAT.clear()
    _FLAT[id(node)] = (node, flat)
    return flat


_FLAT: dict[int, tuple[A.ObjectValue, tuple[tuple[str, Any], ...] | None]] = {}


def _params_in(node: object) -> list[A.Param]:
    """The placeholders under `node`, in binding order (collected once per cached parse,
    like `_binder`)."""
    hit = _PARAMS.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    params: list[A.Param] = []
    _collect_params(node, params)
    if len(_PARAMS) > 8192:
        _PARAMS.clear()
    _PARAMS[id(node)] = (node, params)
    return params


_PARAMS: dict[int, tuple[object, list[A.Param]]] = {}


def _collect_params(node: object, out: list[A.Param]) -> None:
    """The placeholders under `node` in the order `_compile` binds them."""
    kind = type(node)
    if kind is A.Param:
        out.append(node)  # type: ignore[arg-type]
    elif kind in _LEAVES:
        return
    elif kind is tuple:
        for item in node:  # type: ignore[attr-defined]
            _collect_params(item, out)
    elif kind is A.ObjectValue:
        for _, v in node.entries:  # type: ignore[attr-defined]
            _collect_params(v, out)
    elif kind is A.ArrayValue:
        for item in node.items:  # type: ignore[attr-defined]
            _collect_params(item, out)
    else:
        names = _FIELDS.get(kind)
        if names is None:
            if isinstance(node, (A.Param, A.Literal, str, int, A.Pos, tuple, A.ObjectValue,
                                 A.ArrayValue)) or not is_dataclass(node) \
                    or isinstance(node, type):
                _collect_params_slow(node, out)     # a subclass (never from the parser)
                return
            names = _FIELDS[kind] = tuple(f.name for f in fields(node))
        for name in names:
            _collect_params(getattr(node, name), out)


# Node classes without placeholders below them, and each dataclass's fields in order.
_LEAVES = frozenset((type(None), A.Literal, str, int, bool, A.Pos))
_FIELDS: dict[type, tuple[str, ...]] = {}


def _collect_params_slow(node: object, out: list[A.Param]) -> None:
    if isinstance(node, A.Param):
        out.append(node)
    elif node is None or isinstance(node, (A.Literal, str, int, A.Pos)):
        return
    elif isinstance(node, tuple):
        for item in node:
            _collect_params(item, out)
    elif isinstance(node, A.ObjectValue):
        for _, v in node.entries:
            _collect_params(v, out)
    elif isinstance(node, A.ArrayValue):
        for item in node.items:
            _collect_params(item, out)
    elif is_dataclass(node) and not isinstance(node, type):
        for f in fields(node):
            _collect_params(getattr(node, f.name), out)


# Types of a value that passes `_check_json` at once (a float also needs to be finite).
_SCALARS = frozenset((str, int, bool, type(None)))
# Keys already seen to be identifiers: maps of one load share a handful of keys.
_KEYS_OK: set[str] = set()


def _plain_map(value: dict[Any, Any]) -> bool:
    """True when `_bind_param` would accept this attribute/metadata map — identifier keys,
    scalar values — decided without its general walk; False: let it decide (and raise)."""
    for key, item in value.items():
        if key not in _KEYS_OK:
            if type(key) is not str or not _IDENTIFIER.match(key):
                return False
            if len(_KEYS_OK) < 4096:
                _KEYS_OK.add(key)
        kind = type(item)
        if kind not in _SCALARS and (kind is not float or not math.isfinite(item)):
            return False
    return True


def _compile(node: object) -> Binder | None:
    """A function params -> bound node, or None when `node` holds no placeholder.

    Only the spine above each placeholder is rebuilt on every call; constant subtrees are
    shared with the parse. Each rebuilt node copies a precomputed argument list and fills in
    just its placeholder-bearing fields (this is the hot path of a cached command).
    """
    if isinstance(node, A.Param):
        return _compile_param(node)
    if node is None or isinstance(node, (A.Literal, str, int, A.Pos)):
        return None
    if isinstance(node, tuple):
        members = _compile_sequence(list(node))
        return None if members is None else (lambda params: tuple(members(params)))
    if isinstance(node, A.ObjectValue):
        keys = [k for k, _ in node.entries]
        values = _compile_members([v for _, v in node.entries])
        pos = node.pos
        return lambda params: A.Literal(
            {k: v.value for k, v in zip(keys, values(params))}, pos)
    if isinstance(node, A.ArrayValue):
        items = _compile_members(list(node.items))
        pos = node.pos
        return lambda params: A.Literal([v.value for v in items(params)], pos)
    if not is_dataclass(node) or isinstance(node, type):
        return None
    cls = getattr(type(node), "built_as", type(node))     # (ast.ColumnUpsert: an Upsert)
    build = _compile_sequence([getattr(node, f.name) for f in fields(node)])
    return None if build is None else (lambda params: cls(*build(params)))


def _compile_members(items: list[Any]) -> Callable[[Params], list[Any]]:
    """`_compile_sequence` for the members of an ObjectValue/ArrayValue, which are rebuilt
    (folded into one Literal) even when none of them is a placeholder."""
    build = _compile_sequence(items)
    return build if build is not None else (lambda params: items)


def _compile_sequence(items: list[Any]) -> Callable[[Params], list[Any]] | None:
    """params -> a copy of `items` with its placeholders bound; None when `items` holds no
    placeholder."""
    dynamic = [(i, fn) for i, fn in enumerate(map(_compile, items)) if fn is not None]
    if not dynamic:
        return None
    if len(dynamic) == 1:
        (index, fn), = dynamic

        def one(params: Params) -> list[Any]:
            out = items.copy()
            out[index] = fn(params)
            return out
        return one

    def many(params: Params) -> list[Any]:
        out = items.copy()
        for i, f in dynamic:
            out[i] = f(params)
        return out
    return many


def _compile_param(param: A.Param) -> Binder:
    name, expect, pos = param.name, param.expect, param.pos
    fast = expect in _STR_OK

    def bind_param(params: Params) -> A.Literal:
        try:
            value = params[name]
        except KeyError:
            raise _missing([name], param) from None
        if fast and type(value) is str:
            return A.Literal(value, pos)
        return _bind_param(param, value)
    return bind_param


def _missing(names: list[str], node: object) -> KipError:
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


def _first_param_pos(node: object, name: str) -> A.Pos | None:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, A.Param) and item.name == name:
            return item.pos
        if isinstance(item, (tuple, list)):
            stack.extend(reversed(item))
        elif is_dataclass(item) and not isinstance(item, (A.Literal, A.Pos, type)):
            stack.extend(reversed([getattr(item, f.name) for f in fields(item)]))
    return None


def _bind_param(param: A.Param, value: Any) -> A.Literal:
    _check_json(value, param)
    expect = param.expect
    ok = A.suits(expect, value)
    if ok and expect == A.EXPECT_KEY and not _IDENTIFIER.match(value):
        raise _bad_key(param, value)
    if not ok:
        shown = json.dumps(value, ensure_ascii=False, default=str)
        if len(shown) > 60:
            shown = shown[:60] + "..."
        raise KipError(
            ErrorCode.KIP_1001,
            f"Parameter :{param.name} must be {A.article(expect)} in this position, got "
            f"{shown}",
            f"Pass {A.article(expect)} as \"{param.name}\" in `parameters`.",
            line=param.pos.line if param.pos else None,
            column=param.pos.column if param.pos else None,
            data={"parameter": param.name},
        )
    if expect == A.EXPECT_OBJECT:  # an attribute/metadata map: its keys are identifiers
        for key in value:
            if not _IDENTIFIER.match(key):
                raise _bad_key(param, key)
    return A.Literal(value, param.pos)


def _bad_key(param: A.Param, key: str) -> KipError:
    return KipError(
        ErrorCode.KIP_1002,
        f"Parameter :{param.name} holds the key {json.dumps(key, ensure_ascii=False)}, which "
        f"is not a valid attribute or metadata key",
        "Attribute and metadata keys must match regex [a-zA-Z_][a-zA-Z0-9_]* "
        "(snake_case, e.g. risk_level).",
        line=param.pos.line if param.pos else None,
        column=param.pos.column if param.pos else None,
        data={"parameter": param.name})


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
                    "arrays and objects.",
                    line=param.pos.line if param.pos else None,
                    column=param.pos.column if param.pos else None,
                    data={"parameter": param.name})
