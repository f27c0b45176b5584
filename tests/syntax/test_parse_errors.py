"""Parse errors beyond the corpus of malformed commands (which is data: tests/cases/syntax/,
run through `execute_kip` and HTTP by tests/cases/): the parse cache, number and size limits,
non-string input, and hints that say how to fix the command.
"""
from __future__ import annotations

import pytest

from nexus.errors import ErrorCode, KipError
from nexus.syntax import parse


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
