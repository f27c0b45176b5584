"""Runs every case of tests/kql/cases/*.kiptest on both stores and under both FIND executors
(the row path, and the columnar path forced on; format: README.md)."""
from __future__ import annotations

import json

import pytest

import kqlharness as H
from kqlsupport import MODES

CASES = H.all_cases()
PARAMS = [pytest.param(case, store, mode, id=f"{case.id}[{store}-{mode}]")
          for case in CASES for store in case.stores for mode in MODES]


@pytest.mark.parametrize("case,store,mode", PARAMS)
def test_case(case: H.Case, store: str, mode: str, kql_db) -> None:
    if "skip" in case.meta:
        pytest.skip(case.meta["skip"])
    nx = kql_db(store, case.graph, columnar=mode, **case.options)
    refs = H.Refs(nx)
    cursor = None
    for i, step in enumerate(case.steps):
        where = f"{case.file}:{step.line} (step {i + 1} of {case.name!r}, {store}, {mode})"
        text = refs.substitute_text(step.command)
        if "$CURSOR" in text:
            assert cursor is not None, f"{where}: no next_cursor from the previous step"
            text = text.replace("$CURSOR", json.dumps(cursor))
        params = refs.substitute({**case.params, **step.params})
        params = {k: (cursor if v == "$CURSOR" else v) for k, v in params.items()}
        request = {"command": text, "parameters": params}
        if case.dry_run:
            request["dry_run"] = True
        response = nx.execute_kip(request)
        if step.error is not None:
            assert "error" in response, f"{where}: expected {step.error}, got {response}"
            err = response["error"]
            assert err["code"] == step.error, f"{where}: expected {step.error}, got {err}"
            assert err.get("message") and err.get("hint"), f"{where}: {err}"
            if step.error_text:
                assert step.error_text in err["message"], f"{where}: {err['message']!r}"
            cursor = None
            continue
        assert "error" not in response, f"{where}: unexpected error {response['error']}"
        actual = H.strip_engine_meta(response["result"])
        expected = refs.substitute(step.expect)
        n_items = H.find_item_count(text)
        assert H.same_result(actual, expected, step.mode, n_items), (
            f"{where}: result differs ({step.mode})\n"
            f"  expected: {json.dumps(expected, ensure_ascii=False)}\n"
            f"  actual:   {json.dumps(actual, ensure_ascii=False)}")
        if step.more:
            assert "next_cursor" in response, f"{where}: expected a next_cursor"
            assert isinstance(response["next_cursor"], str) and response["next_cursor"]
        else:
            assert "next_cursor" not in response, \
                f"{where}: unexpected next_cursor (use `--- expect ... more`)"
        cursor = response.get("next_cursor")


def test_cases_exist() -> None:
    assert len(CASES) >= 100
