"""FILTER expressions compiled once per plan into callables `fn(row, env) -> value`.

Semantics (spec §3.4.3, CONTRACT §4), decided where the spec is silent:
* A row passes a FILTER when the expression evaluates to exactly `true`.
* `==` / `!=` compare within one JSON kind (1 == 1.0, but true != 1 and "1" != 1); `null`
  equals only `null`. Ordering (`< > <= >=`) holds only between two numbers, two strings or
  two booleans; with `null` or mixed kinds it is false. Two strings that are both ISO 8601
  datetimes compare as instants (so "…T00:00:00Z" and "…T00:00:00.000Z" are equal).
* `&&`, `||`, `!` treat anything but `true` as false.
* `IN(x, [..])` is `==` against each element. `IS_NULL(x)`: x is null, missing, or an unbound
  OPTIONAL variable. `CONTAINS`/`STARTS_WITH`/`ENDS_WITH` on strings (false otherwise);
  `CONTAINS(array, x)` tests membership (an extension for tag lists).
* `REGEX(s, pattern[, flags])`: Python-`regex` syntax, `search` semantics, flags from "imsx";
  patterns are compiled once per distinct text, length-capped and matched with a timeout
  (`Limits.max_regex_length`, `Limits.regex_timeout`) so a pathological pattern cannot hang
  the engine (`KIP_4001` on timeout, `KIP_1001` for an invalid or over-long pattern).
* A bare `?x` evaluates to its wire id ("C:12"), so `?a == ?b` compares identity.
"""
from __future__ import annotations

import functools
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable

from ..errors import ErrorCode, KipError
from ..syntax import ast as A

if TYPE_CHECKING:  # both import this module
    from .env import Env
    from .rows import Row

# A compiled expression: its value for one solution row (FILTER keeps rows where it is True).
Fn = Callable[["Row", "Env"], Any]
Test = Fn


def compile_filter(expr: A.Expr, layout: list[str]) -> Fn:
    return _compile(expr, layout)


def paths_read(expr: A.Expr) -> list[A.Path]:
    """The `?var...` paths an expression reads (what a stage may prefetch for a chunk of
    rows before testing them)."""
    if isinstance(expr, A.Path):
        return [expr]
    if isinstance(expr, A.Compare):
        return paths_read(expr.left) + paths_read(expr.right)
    if isinstance(expr, A.BoolOp):
        return [p for o in expr.operands for p in paths_read(o)]
    if isinstance(expr, A.NotOp):
        return paths_read(expr.operand)
    if isinstance(expr, A.Call):
        return [p for a in expr.args for p in paths_read(a)]
    return []


def _compile(e: A.Expr, layout: list[str]) -> Fn:
    if isinstance(e, A.Path):
        if e.var not in layout:
            return lambda row, env: None       # bound only in another UNION branch
        i = layout.index(e.var)
        segments = e.segments
        return lambda row, env: env.path_value(row[i], segments)
    if isinstance(e, A.Literal):
        value = e.value
        return lambda row, env: value
    if isinstance(e, (A.Param, A.ObjectValue, A.ArrayValue)):
        return lambda row, env: env.value(e)
    if isinstance(e, A.Compare):
        test = _COMPARE[e.op]
        fast = _compare_map_path(e, layout, test)
        if fast is not None:
            return fast
        left, right = _compile(e.left, layout), _compile(e.right, layout)
        return lambda row, env: test(left(row, env), right(row, env))
    if isinstance(e, A.BoolOp):
        parts = [_compile(o, layout) for o in e.operands]
        if e.op == "&&":
            return lambda row, env: all(p(row, env) is True for p in parts)
        return lambda row, env: any(p(row, env) is True for p in parts)
    if isinstance(e, A.NotOp):
        inner = _compile(e.operand, layout)
        return lambda row, env: inner(row, env) is not True
    if isinstance(e, A.Call):
        return _compile_call(e, layout)
    raise TypeError(f"not a FILTER expression: {e!r}")  # pragma: no cover


# Values that are the same on every row of an execution.
_ROW_FREE = (A.Literal, A.Param, A.ObjectValue, A.ArrayValue)


def _map_path(e: A.Compare) -> tuple[A.Path, A.Value, bool] | None:
    """(path, row-free other side, flipped) of `?x.attributes.k… op v` / `?x.metadata.k… op
    v` (either side), or None for any other comparison."""
    path: A.Path
    other: A.Value
    if isinstance(e.left, A.Path) and isinstance(e.right, _ROW_FREE):
        path, other, flipped = e.left, e.right, False
    elif isinstance(e.right, A.Path) and isinstance(e.left, _ROW_FREE):
        path, other, flipped = e.right, e.left, True
    else:
        return None
    if len(path.segments) < 2 or path.segments[0] not in ("attributes", "metadata"):
        return None
    return path, other, flipped


def _compare_map_path(e: A.Compare, layout: list[str],
                      test: Callable[[Any, Any], bool]) -> Fn | None:
    """`?x.attributes.k… op v` or `?x.metadata.k… op v` (either side) with `v` the same on
    every row — the common FILTER, run once per candidate row of a hub — as one closure:
    the map read (`Env.attributes` / `Env.metadata`, memoised per execution) and the key
    walk inline instead of `Env.path_value` behind two more calls. Same values as the
    general form: a null row value, a predicate variable or a missing key reads as null."""
    parts = _map_path(e)
    if parts is None or parts[0].var not in layout:
        return None
    path, other, flipped = parts
    segments = path.segments
    i = layout.index(path.var)
    meta = segments[0] == "metadata"
    first, rest = segments[1], segments[2:]

    # A literal is read once here; a parameter (or another row-free value) per call.
    literal = isinstance(other, A.Literal)
    const = other.value if isinstance(other, A.Literal) else None

    def compare(row: Row, env: Env) -> bool:
        n = row[i]
        if n is None or n < 0:
            v: Any = None
        else:
            v = (env.metadata(n) if meta else env.attributes(n)).get(first)
            for key in rest:
                if not isinstance(v, dict):
                    v = None
                    break
                v = v.get(key)
        c = const if literal else env.value(other)
        return test(c, v) if flipped else test(v, c)
    return compare


def compile_attribute_test(e: A.Expr) -> Callable[[Any, Env], bool] | None:
    """For `?x.attributes.k… op v` with v the same on every row: `fn(value, env)`, the
    FILTER's answer for an element whose attribute `k` is `value` (None when it has no such
    key) — what the columnar run evaluates once per distinct value of an attribute column.
    None for any other expression."""
    if not isinstance(e, A.Compare):
        return None
    parts = _map_path(e)
    if parts is None or parts[0].segments[0] != "attributes":
        return None
    path, other, flipped = parts
    rest = path.segments[2:]
    test = _COMPARE[e.op]

    def on_value(v: Any, env: Env) -> bool:
        for key in rest:
            if not isinstance(v, dict):
                v = None
                break
            v = v.get(key)
        c = env.value(other)
        return (test(c, v) if flipped else test(v, c)) is True
    return on_value


def _compile_call(e: A.Call, layout: list[str]) -> Fn:
    args = [_compile(a, layout) for a in e.args]
    f = e.func
    if f == "IS_NULL":
        a = args[0]
        return lambda row, env: a(row, env) is None
    if f == "IS_NOT_NULL":
        a = args[0]
        return lambda row, env: a(row, env) is not None
    if f == "IN":
        a, b = args

        def is_in(row: Row, env: Env) -> bool:
            x, items = a(row, env), b(row, env)
            return isinstance(items, list) and any(equal(x, item) for item in items)
        return is_in
    if f == "CONTAINS":
        a, b = args

        def contains(row: Row, env: Env) -> bool:
            x, y = a(row, env), b(row, env)
            if isinstance(x, str):
                return isinstance(y, str) and y in x
            if isinstance(x, list):
                return any(equal(item, y) for item in x)
            return False
        return contains
    if f == "STARTS_WITH":
        a, b = args
        return lambda row, env: _strs(a(row, env), b(row, env)) and \
            a(row, env).startswith(b(row, env))
    if f == "ENDS_WITH":
        a, b = args
        return lambda row, env: _strs(a(row, env), b(row, env)) and \
            a(row, env).endswith(b(row, env))
    if f == "REGEX":
        a, b = args[0], args[1]
        flags = args[2] if len(args) == 3 else (lambda row, env: "")

        def regex_match(row: Row, env: Env) -> bool:
            text, pattern, fl = a(row, env), b(row, env), flags(row, env)
            if not isinstance(text, str):
                return False
            if not isinstance(pattern, str) or not isinstance(fl, str):
                raise KipError(ErrorCode.KIP_1001, "REGEX needs a string pattern and flags",
                               "Write REGEX(?x.name, \"^As\") or REGEX(?x.name, \"as\", \"i\").")
            timeout = env.ctx.limits.regex_timeout
            try:
                return env.regex(pattern, fl).search(text, timeout=timeout) is not None
            except TimeoutError:
                raise KipError(
                    ErrorCode.KIP_4001,
                    f"REGEX {pattern[:80]!r} took longer than {timeout:g} s on one value",
                    "Simplify the pattern (avoid nested repetition such as (a+)+), anchor "
                    "it, or use CONTAINS / STARTS_WITH / ENDS_WITH.") from None
        return regex_match
    raise TypeError(f"unknown function {f}")  # pragma: no cover


def _strs(x: Any, y: Any) -> bool:
    return isinstance(x, str) and isinstance(y, str)


# --- comparison --------------------------------------------------------------------------

def kind(v: Any) -> int:
    """0 null, 1 boolean, 2 number, 3 string, 4 array/object."""
    if v is None:
        return 0
    if v is True or v is False:
        return 1
    if isinstance(v, (int, float)):
        return 2
    if isinstance(v, str):
        return 3
    return 4


@functools.lru_cache(maxsize=65536)
def _instant(text: str) -> datetime | None:
    if len(text) < 10 or text[4] != "-" or text[7] != "-":
        return None
    try:
        value = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        return None
    if value.tzinfo is None:
        from datetime import timezone
        value = value.replace(tzinfo=timezone.utc)
    return value


def _norm_pair(a: Any, b: Any) -> tuple[Any, Any]:
    if type(a) is str and type(b) is str and a != b:
        ia, ib = _instant(a), _instant(b)
        if ia is not None and ib is not None:
            return ia, ib
    return a, b


def equal(a: Any, b: Any) -> bool:
    ka = kind(a)
    if ka != kind(b):
        return False
    if ka == 3:
        a, b = _norm_pair(a, b)
    same: bool = a == b
    return same


def _ordered(op: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    def test(a: Any, b: Any) -> bool:
        ta, tb = type(a), type(b)
        if (ta is int or ta is float) and (tb is int or tb is float):
            return op(a, b)             # two numbers (bool is neither type): the common case
        ka = kind(a)
        if ka == 0 or ka == 4 or ka != kind(b):
            return False
        if ka == 3:
            a, b = _norm_pair(a, b)
        return op(a, b)
    return test


_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "==": equal,
    "!=": lambda a, b: not equal(a, b),
    "<": _ordered(lambda a, b: a < b),
    ">": _ordered(lambda a, b: a > b),
    "<=": _ordered(lambda a, b: a <= b),
    ">=": _ordered(lambda a, b: a >= b),
}
