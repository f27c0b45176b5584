"""Malformed commands (data: tests/syntax/malformed/cases.txt) are refused with the right code,
at the right line and column, with a caret snippet, a message and a hint.

The expected positions in the data file were counted by hand from the text, so this test
checks the parser's positions rather than re-asserting them.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from nexus.errors import ErrorCode, KipError
from nexus.syntax import parse

CASES_FILE = Path(__file__).parent / "malformed" / "cases.txt"
HEADER = re.compile(r"^=== (?P<id>[\w-]+) \| (?P<code>KIP_\d{4}) \| (?P<line>\d+):(?P<col>\d+)"
                    r"(?: \| (?P<contains>.+))?$")


@dataclass(frozen=True)
class Case:
    id: str
    code: str
    line: int
    column: int
    contains: str | None
    text: str


def load_cases(path: Path = CASES_FILE) -> list[Case]:
    cases: list[Case] = []
    header = None
    body: list[str] = []

    def flush() -> None:
        if header is None:
            return
        lines = list(body)
        while lines and not lines[-1].strip():
            lines.pop()
        if len(lines) == 1 and lines[0].startswith("json: "):
            text = json.loads(lines[0][len("json: "):])
        else:
            text = "\n".join(lines)
        cases.append(Case(header["id"], header["code"], int(header["line"]),
                          int(header["col"]), header["contains"], text))

    for raw in path.read_text(encoding="utf-8").split("\n"):
        if raw.startswith("=== "):
            flush()
            header = HEADER.match(raw)
            assert header, f"bad header line in {path.name}: {raw!r}"
            body = []
        elif header is not None:
            body.append(raw)
    flush()
    return cases


CASES = load_cases()


def test_corpus_is_large_and_ids_unique():
    assert len(CASES) >= 60
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    assert {c.code for c in CASES} >= {"KIP_1001", "KIP_1002", "KIP_4002"}
    assert sum(c.line >= 3 for c in CASES) >= 5, "want several errors on line 3 or later"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed(case: Case):
    with pytest.raises(KipError) as info:
        parse(case.text)
    err = info.value
    where = f"{err.code.value} at {err.line}:{err.column}: {err.message}"
    assert err.code == ErrorCode(case.code), where
    assert (err.line, err.column) == (case.line, case.column), where
    assert err.message.strip() and err.hint.strip()
    if case.contains:
        assert case.contains in err.message, where
    # The snippet is the offending line and a caret under the column.
    assert err.snippet and "\n" in err.snippet
    source_line, caret_line = err.snippet.rsplit("\n", 1)
    assert caret_line.strip() == "^"
    lines = case.text.split("\n")
    line_text = lines[case.line - 1].rstrip("\r") if case.line <= len(lines) else ""
    if len(line_text) <= 120:  # not clipped: the caret sits exactly under the column
        assert source_line == line_text.expandtabs(1)
        assert caret_line == " " * (case.column - 1) + "^"
    else:
        assert len(source_line) <= 120
    # The wire form carries the position (CONTRACT §2).
    data = err.to_dict()["data"]
    assert (data["line"], data["column"]) == (case.line, case.column)
    json.dumps(err.to_dict())  # the error is JSON-serializable, whatever the input


def test_errors_do_not_depend_on_the_cache():
    # Errors are not cached: the same bad text fails the same way every time.
    text = 'FIND(?x) WHERE { ?x {type: "A"} } LIMIT 0'
    first = second = None
    for attempt in range(2):
        with pytest.raises(KipError) as info:
            parse(text)
        if attempt == 0:
            first = info.value
        else:
            second = info.value
    assert (first.code, first.line, first.column) == (second.code, second.line, second.column)


def test_number_with_too_many_digits_is_a_syntax_error():
    text = 'FIND(?x) WHERE { ?x {type: "A"} } LIMIT ' + "9" * 5000
    with pytest.raises(KipError) as info:
        parse(text)
    assert info.value.code == ErrorCode.KIP_1001
    assert (info.value.line, info.value.column) == (1, 41)
    assert "digits" in info.value.message


def test_oversized_command_is_resource_exhausted():
    text = 'FIND(?x) WHERE { ?x {type: "A"} }' + " " * 2000
    with pytest.raises(KipError) as info:
        parse(text, max_bytes=1024)
    assert info.value.code == ErrorCode.KIP_4002
    assert "1024" in info.value.message


def test_oversized_by_utf8_bytes_not_characters():
    text = 'FIND(?x) WHERE { ?x {name: "' + "語" * 400 + '"} }'   # < 1024 chars, > 1024 bytes
    assert len(text) < 1024 < len(text.encode("utf-8"))
    with pytest.raises(KipError) as info:
        parse(text, max_bytes=1024)
    assert info.value.code == ErrorCode.KIP_4002


def test_non_string_command():
    with pytest.raises(KipError) as info:
        parse(b"DESCRIBE PRIMER")  # type: ignore[arg-type]
    assert info.value.code == ErrorCode.KIP_1001


@pytest.mark.parametrize("word, advice", [
    ("find(?x) WHERE { ?x {type: \"A\"} }", "uppercase"),
    ("FIND(?x) WHERE { ?x {type: \"A\"} FILTER(?x.name = \"a\") }", "=="),
    ("DELETE CONCEPT ?x WHERE { ?x {type: \"A\"} }", "DETACH"),
    ("FIND(?x) WHERE { ?x {type: \"A\"} } GROUP BY ?x", "GROUP BY"),
    ("FIND(?x) WHERE { ?x {type: \"A\"} } OFFSET 5", "CURSOR"),
    ("FIND(?x) WHERE { ?x {type: Drug} }", '"Drug"'),
    ("FIND(?x) WHERE { ?x {name: 'a'} }", "double quotes"),
    ("FIND(?x) WHERE { (?x, \"p\"{,3}, ?y) }", "{0,3}"),
    ("FIND(:x) WHERE { ?x {type: \"A\"} }", "placeholder"),
    ("FIND(?x) WHERE { ?x {type: \"A\"}", "not closed"),
    ("DESCRIBE PRIMER now", "trailing"),
    ("DESCRIBE\u00a0PRIMER", "plain space"),
    ("FIND(?x) WHERE { ?x {type: \"A\"} FILTER(?x.name == \"a\" AND ?x.id == \"b\") }", "&&"),
    ("FIND(?x) WHERE { ?x {type: \"A\"} FILTER(?x.name == NaN) }", "NaN"),
    ("SEARCH CONCEPT \"unclosed", "Close the string"),
])
def test_hints_say_how_to_fix(word, advice):
    with pytest.raises(KipError) as info:
        parse(word)
    assert advice in info.value.hint
