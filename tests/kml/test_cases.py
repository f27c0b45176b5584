"""Data-driven KML tests: every `cases/*.toml` file, on both stores.

A case file states what KIP specifies, as data:

    about = "what the case checks (spec / CONTRACT reference)"
    bootstrap = true                 # open with the bundled capsules (default)
    setup = ["@medical", '''UPSERT { ... }''']   # commands that must succeed;
                                     # "@medical" = kml_support.MEDICAL_SCHEMA
    [[step]]
    command = '''UPSERT { ... }'''
    parameters = '{"name": "x"}'     # JSON (optional)
    dry_run = false                  # optional
    privileged = false               # optional: run through the privileged path
    result = '{"blocks": 1, ...}'    # JSON, exact; ids may be written "C:*" / "P:*:pred"
    error = "KIP_3002"               # instead of result; implies the store is unchanged
    message_contains = ["..."]       # optional, for errors
    hint_contains = ["..."]
    unchanged = true                 # optional: store byte-identical after the step
    delta = '{"concepts": 1, "links": 2}'   # optional: change of the element counts
    expect = '''[ {"ref": {"type": "Drug", "name": "X"},
                   "attributes": {...},          # exact
                   "metadata": {...},            # these keys, these values
                   "version": 2},                # metadata._version
                  {"ref": [{"type": ...}, "treats", {...}], "absent": true} ]'''

Values in TOML strings are JSON so that `null` can be written. A link ref is
[subject, "predicate", object] where subject/object are concept refs or link refs.
Ids depend on what the bundled capsules created, so commands, parameters and results name
them by placeholder: `<<Type:Name>>` → "C:12", `<<Type:Name|pred|Type:Name>>` → "P:13:pred",
`<<#...>>` → the bare number (commands and parameters are filled in before the step runs,
results after it).
"""
from __future__ import annotations

import json
import pathlib
import re

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore

from kml_support import MEDICAL_SCHEMA, counts, element, raw_dump, run

CASES = sorted((pathlib.Path(__file__).parent / "cases").glob("*.toml"))
MACROS = {"@medical": MEDICAL_SCHEMA}


def _json(value, default=None):
    if value is None:
        return default
    return json.loads(value) if isinstance(value, str) else value


def _match(expected, actual) -> bool:
    """Exact equality, except that "C:*" and "P:*:pred" match any id of that shape."""
    if isinstance(expected, str) and "*" in expected and isinstance(actual, str):
        return re.fullmatch(re.escape(expected).replace(r"\*", r"\d+"), actual) is not None
    if isinstance(expected, dict):
        return (isinstance(actual, dict) and expected.keys() == actual.keys()
                and all(_match(v, actual[k]) for k, v in expected.items()))
    if isinstance(expected, list):
        return (isinstance(actual, list) and len(expected) == len(actual)
                and all(_match(e, a) for e, a in zip(expected, actual)))
    return type(expected) is type(actual) and expected == actual


_PLACEHOLDER = re.compile(r"<<(#?)(.+?)>>")


def _ref(text: str):
    parts = text.split("|")     # "a|p|b|q|c" nests to the left: ((a p b) q c)
    if len(parts) >= 3:
        return [_ref("|".join(parts[:-2])), parts[-2], _ref(parts[-1])]
    type_, name = text.split(":", 1)
    return {"type": type_, "name": name}


def _fill(nx, text):
    """Replace id placeholders in `text` (a string, or JSON text) by ids from the store."""
    if not isinstance(text, str):
        return text

    def one(m):
        ref = _ref(m.group(2))
        got = element(nx, ref)
        assert got is not None, f"placeholder {m.group(0)}: no such element"
        n = got["id"]
        if m.group(1):
            return str(n)
        return f"C:{n}" if isinstance(ref, dict) else f"P:{n}:{ref[1]}"
    return _PLACEHOLDER.sub(one, text)


def _check_expect(nx, expectations: list) -> None:
    for exp in expectations:
        got = element(nx, exp["ref"])
        if exp.get("absent"):
            assert got is None, f"{exp['ref']} should not exist: {got}"
            continue
        assert got is not None, f"{exp['ref']} should exist"
        if "attributes" in exp:
            assert got["attributes"] == exp["attributes"], (exp["ref"], got["attributes"])
            for k, v in exp["attributes"].items():
                assert type(got["attributes"][k]) is type(v), (k, got["attributes"][k])
        for key, value in exp.get("metadata", {}).items():
            assert key in got["metadata"], (exp["ref"], key, got["metadata"])
            assert got["metadata"][key] == value, (exp["ref"], key, got["metadata"])
        for key in exp.get("metadata_absent", []):
            assert key not in got["metadata"], (exp["ref"], key, got["metadata"])
        if "version" in exp:
            assert got["metadata"]["_version"] == exp["version"], (exp["ref"], got["metadata"])
        for key in ("_created_at", "_updated_at"):
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z",
                                got["metadata"][key]), got["metadata"]


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_case(path, open_nexus):
    case = tomllib.loads(path.read_text("utf-8"))
    nx = open_nexus(bootstrap=case.get("bootstrap", True))
    for command in case.get("setup", []):
        response = run(nx, MACROS.get(command, command), privileged=case.get(
            "setup_privileged", False))
        assert "error" not in response, (command[:80], response)
    for i, step in enumerate(case["step"]):
        where = f"{path.name} step {i + 1}"
        before_dump = raw_dump(nx)
        before_counts = counts(nx)
        response = run(nx, _fill(nx, step["command"]),
                       _json(_fill(nx, step.get("parameters")), {}),
                       dry_run=step.get("dry_run", False),
                       privileged=step.get("privileged", False))
        if "error" in step:
            assert "error" in response, (where, response)
            error = response["error"]
            assert error["code"] == step["error"], (where, error)
            for text in step.get("message_contains", []):
                assert text in error["message"], (where, text, error["message"])
            for text in step.get("hint_contains", []):
                assert text in error["hint"], (where, text, error["hint"])
            assert raw_dump(nx) == before_dump, f"{where}: a failed command changed the store"
        else:
            assert "error" not in response, (where, response)
            if "result" in step:
                expected = _json(_fill(nx, step["result"]))
                assert _match(expected, response["result"]), (where, response["result"])
        if step.get("unchanged"):
            assert raw_dump(nx) == before_dump, f"{where}: the store changed"
        if "delta" in step:
            delta = _json(step["delta"])
            after = counts(nx)
            assert (after[0] - before_counts[0], after[1] - before_counts[1]) == (
                delta.get("concepts", 0), delta.get("links", 0)), (where, before_counts, after)
        _check_expect(nx, _json(step.get("expect"), []))
