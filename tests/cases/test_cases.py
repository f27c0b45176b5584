"""Runs every `.kiptest` case under tests/cases/ (format: README.md) on each target it
allows: memory and LMDB stores in this process, each under the row and the columnar FIND
executor, and over HTTP against a real `kip serve` (marker `http`)."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from kiprun import run_case
from kiptest import Case, load_all, parse_file

CASES = load_all()


@pytest.mark.parametrize("case,target", [
    pytest.param(case, target, id=f"{case.id}[{target}]",
                 marks=[pytest.mark.http] if target == "http" else [])
    for case in CASES for target in case.targets()])
def test_case(case: Case, target: str, databases) -> None:
    if case.skip:
        pytest.skip(case.skip)
    with databases.target(case, target) as t:
        run_case(case, t)


def test_the_suite_covers_its_topics() -> None:
    by_topic = Counter(case.file.split("/")[0] for case in CASES)
    assert by_topic["kql"] >= 291 and by_topic["kml"] >= 14 and by_topic["syntax"] >= 137
    syntax = [c for c in CASES if c.file.startswith("syntax/")]
    codes = {s.error for c in syntax for s in c.steps}
    assert codes >= {"KIP_1001", "KIP_1002", "KIP_4002"}
    assert sum(s.at is not None and s.at[0] >= 3 for c in syntax for s in c.steps) >= 5, \
        "want several syntax errors on line 3 or later"
    assert any(case.reopens for case in CASES)


def test_the_readme_examples_parse(tmp_path) -> None:
    readme = (Path(__file__).parent / "README.md").read_text(encoding="utf-8")
    examples = [block for block in readme.split("```")[1::2]
                if "=== " in block and "  # " not in block]
    assert len(examples) >= 7
    for n, block in enumerate(examples):
        path = tmp_path / f"example{n}.kiptest"
        path.write_text(block, encoding="utf-8")
        assert parse_file(path)
