"""REGEX patterns with a compile budget and a cache bounded by bytes.

The `regex` module (FILTER's `REGEX`: Python-`regex` syntax, search semantics, flags "imsx")
unrolls counted repetition when it compiles: `a{1000000000}` grew a server past 20 GB, and
`(?:(?:a|b){1000}){1000}` takes 400 MB and a second. Matching is bounded already (the module's
match timeout, `Limits.regex_timeout`); compiling is bounded here, *before* the module
compiles anything: the pattern is parsed with the module's own parser (cheap: it unrolls
nothing) and its *expanded size* — every node counted once per copy the counted repeats
around it make (`(ab){3}` is 1 + 3 × 3) — must stay within `MAX_EXPANDED` (about 400 bytes
and 1–3 µs of compiling per unit). Should the module's parser internals change, a
conservative bound is used instead: the pattern's length times the product of every count
written in it.

Compiled patterns are kept in one process-wide cache bounded by bytes (`nexus.bounded`),
weighed by their expanded size.

Why not RE2 (`google-re2`, linear-time matching)? Measured here: RE2's DFA gives up on
large programs and falls back to its NFA, whose cost is text length × program size and
cannot be interrupted — a 4,000-instruction pattern (`.{500}Q`) ran 13 s on a 1 MB value,
`(?:.{0,9}){50}Q` 31 s — whereas the `regex` module's match timeout stops any match. RE2
would also drop backreferences and look-around, and its `\\w`, `\\d`, `\\b` are ASCII-only
(docs/decisions.md).
"""
from __future__ import annotations

import importlib
import re as _re
from typing import Any

import regex

from ..bounded import WeightedLRU
from ..errors import ErrorCode, KipError

MAX_EXPANDED = 20_000          # nodes of a pattern once counted repeats are unrolled
BYTES_PER_NODE = 400           # what a compiled node costs the `regex` module (measured)
CACHE_BYTES = 64 << 20         # the process-wide cache of compiled patterns
CACHE_ENTRIES = 4096

FLAG_BITS = {"i": regex.IGNORECASE, "m": regex.MULTILINE, "s": regex.DOTALL,
             "x": regex.VERBOSE}

_COMPILED: WeightedLRU[Any] = WeightedLRU(CACHE_BYTES, CACHE_ENTRIES)


def compile_regex(pattern: str, flags: str, max_length: int) -> Any:
    """The compiled `pattern` (from the cache when it is there), or KIP_1001 for a pattern
    that is too long, too big once expanded, invalid, or has an unknown flag."""
    if len(pattern) > max_length:
        raise KipError(ErrorCode.KIP_1001,
                       f"The REGEX pattern is {len(pattern)} characters, over the limit of "
                       f"{max_length}", "Use a shorter pattern, or CONTAINS/STARTS_WITH.")
    bits = 0
    for f in flags:
        if f not in FLAG_BITS:
            raise KipError(ErrorCode.KIP_1001, f"Unknown REGEX flag {f!r}",
                           "REGEX flags are any of \"imsx\".")
        bits |= FLAG_BITS[f]
    key = (pattern, bits)
    hit = _COMPILED.get(key)
    if hit is not None:
        return hit
    try:
        size = expanded_size(pattern, bits)
        if size > MAX_EXPANDED:
            raise KipError(
                ErrorCode.KIP_1001,
                f"The REGEX pattern {pattern[:80]!r} expands to about {size:,} elements once "
                f"its repetition counts are multiplied out, over the limit of "
                f"{MAX_EXPANDED:,}",
                "Lower the repetition counts (x{n,m}), especially nested ones, or use "
                "+ and * instead of large counts.")
        compiled = regex.compile(pattern, bits)
    except (regex.error, ValueError, OverflowError, TypeError) as exc:
        raise KipError(ErrorCode.KIP_1001, f"Invalid REGEX pattern {pattern[:80]!r}: {exc}",
                       "Check the pattern's brackets and escapes (backslashes must be "
                       "doubled inside a KIP string).") from None
    except RecursionError:
        raise KipError(ErrorCode.KIP_1001, f"The REGEX pattern {pattern[:80]!r} is nested "
                       "too deeply", "Nest fewer groups.") from None
    _COMPILED.put(key, compiled, BYTES_PER_NODE * size + 2048)
    return compiled


def expanded_size(pattern: str, bits: int = 0) -> int:
    """How many nodes `pattern` compiles to once counted repeats are unrolled (an estimate
    that never undercounts). Raises `regex.error` for an invalid pattern."""
    try:
        parsed = _parse(pattern, bits)
    except (AttributeError, ImportError, TypeError, NameError):
        return _conservative_size(pattern)      # the module's internals moved
    return _size(parsed)


def _parse(pattern: str, bits: int) -> Any:
    """The `regex` module's parse tree of `pattern` (what `regex.compile` does first,
    flags found inside the pattern included), without compiling it."""
    # The module's parser is internal API (`regex._regex_core`), read by name so that its
    # absence in some version is the AttributeError `expanded_size` falls back on.
    core: Any = importlib.import_module("regex._regex_core")
    parse_pattern = getattr(core, "_parse_pattern")
    unscoped_flags = getattr(core, "_UnscopedFlagSet")
    flags = bits
    while True:
        source = core.Source(pattern)
        info = core.Info(flags, source.char_type, {})
        source.ignore_space = bool(info.flags & regex.VERBOSE)
        try:
            return parse_pattern(source, info)
        except unscoped_flags:
            flags = info.global_flags


_CHILD = ("subpattern", "yes_item", "no_item")
_CHILDREN = ("items", "branches")


def _size(node: Any) -> int:
    """1 per node, times the count of every counted repeat around it (iterative: a deep
    pattern must not exhaust the stack)."""
    total = 0
    stack: list[tuple[Any, int]] = [(node, 1)]
    while stack:
        item, mult = stack.pop()
        total += mult
        if total > 100 * MAX_EXPANDED:
            return total
        count = getattr(item, "max_count", 0) if hasattr(item, "min_count") else 1
        if count is None:                       # {m,}: m copies, then a loop
            count = max(1, item.min_count)
        inner = mult * max(1, int(count))
        for name in _CHILD:
            child = getattr(item, name, None)
            if child is not None and not isinstance(child, (int, str, bool)):
                stack.append((child, inner))
        for name in _CHILDREN:
            for child in getattr(item, name, None) or ():
                stack.append((child, inner))
        chars = getattr(item, "characters", None)
        if isinstance(chars, (list, tuple)):
            total += mult * max(0, len(chars) - 1)
    return total


_COUNT = _re.compile(r"\{\s*(\d*)\s*(?:,\s*(\d*)\s*)?\}")


def _conservative_size(pattern: str) -> int:
    product = 1
    for m in _COUNT.finditer(pattern):
        for g in m.groups():
            if g:
                product *= max(1, min(int(g[:12]), 10**12))
        if product > 10**12:
            break
    return len(pattern) * product
