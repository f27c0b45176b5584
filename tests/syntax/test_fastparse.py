"""The UPSERT fast path (nexus/syntax/fastparse.py) against the LALR parser.

For every text: either the fast path declines, or it returns exactly the AST the LALR parser
and the transformer build — positions, placeholder expectations and value types included —
for a text the LALR parser accepts. `parse()` (fast path first) and `parse_lalr()` (the
grammar alone) give the same command or the same error, field for field: errors only ever
come from the grammar. Texts: every string holding UPSERT in the test suite, the spec
examples, the RC11 spec blocks, the bundled capsules, the RC11 capsules (when ../shared is
present), the docs; then random UPSERT texts and mutations of them.
"""
from __future__ import annotations

import ast as pyast
import dataclasses
import functools
import json
import os
import re
import sys
from importlib.resources import files
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nexus.errors import KipError
from nexus.syntax import MAX_NESTING, parse
from nexus.syntax import fastparse
from nexus.syntax import ast as A
from nexus.syntax.fastclause import clause_columns, clause_upsert
from nexus.syntax.fastparse import fast_upsert
from nexus.syntax.parser import parse_lalr

from spec import rc11_blocks  # tests/spec/rc11_blocks.py (tests/ is on the path)

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
SCALE = int(os.environ.get("NEXUS_FUZZ_EXAMPLES", "0")) or None


def exactly(a: Any, b: Any, path: str = "$") -> str | None:
    """None when `a` and `b` are equal with positions and exact types (AST equality leaves
    positions out); else where they differ. An UPSERT read as columns (`ColumnUpsert`) is
    compared as the `Upsert` its tree makes."""
    if isinstance(a, A.ColumnUpsert):
        a = A.Upsert(a.statements, a.pos)
    if isinstance(b, A.ColumnUpsert):
        b = A.Upsert(b.statements, b.pos)
    if type(a) is not type(b):
        return f"{path}: {type(a).__name__} != {type(b).__name__}"
    if dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            diff = exactly(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
            if diff:
                return diff
        return None
    if isinstance(a, (tuple, list)):
        if len(a) != len(b):
            return f"{path}: {len(a)} items != {len(b)}"
        for n, (x, y) in enumerate(zip(a, b)):
            diff = exactly(x, y, f"{path}[{n}]")
            if diff:
                return diff
        return None
    if isinstance(a, dict):
        if list(a) != list(b):
            return f"{path}: keys {list(a)} != {list(b)}"
        for k in a:
            diff = exactly(a[k], b[k], f"{path}.{k}")
            if diff:
                return diff
        return None
    if repr(a) != repr(b):
        return f"{path}: {a!r} != {b!r}"
    return None


def _error(exc: KipError) -> tuple[Any, ...]:
    return (exc.code, exc.message, exc.hint, exc.line, exc.column, exc.snippet, exc.data)


def columns_of(command: A.Upsert) -> A.UpsertColumns:
    """The columnar form of a loader-shaped UPSERT, derived from its tree."""
    def slot(v: Any) -> A.Slot:
        return v.name if type(v) is A.Param else (v.value,)

    def name(v: Any) -> str | None:
        return None if v is None else v.name
    blocks = command.statements[0].blocks
    links = [e for b in blocks for e in (b.propositions or ())]
    ends, n = [], 0
    for b in blocks:
        n += len(b.propositions or ())
        ends.append(n)
    return A.UpsertColumns(
        tuple(slot(b.match.type) for b in blocks), tuple(slot(b.match.name) for b in blocks),
        tuple(name(b.attributes) for b in blocks), tuple(name(b.metadata) for b in blocks),
        tuple(ends), tuple(slot(e.predicate) for e in links),
        tuple(slot(e.target.type) for e in links), tuple(slot(e.target.name) for e in links),
        tuple(name(e.metadata) for e in links))


def check_columns(text: str, max_nesting: int, clause: Any) -> None:
    """The columnar reader reads what the clause reader reads (a statement with blocks),
    into the columns of that tree, and builds that tree when asked for it."""
    read = clause_columns(text, max_nesting)
    if clause is None or not clause[0].statements[0].blocks:
        assert read is None, f"the columnar reader read what the clause reader did not\n{text}"
        return
    assert read is not None, f"the columnar reader declined what the clause reader read\n{text}"
    command, names = read
    assert type(command) is A.ColumnUpsert and names == clause[1]
    assert command.columns == columns_of(clause[0])
    assert command.pos == clause[0].pos
    assert exactly(command, clause[0]) is None
    assert command == clause[0] and clause[0] == command and hash(command) == hash(clause[0])


def check(text: str, max_nesting: int = MAX_NESTING) -> bool:
    """The property; True when the fast path read the text. The clause reader (tried first
    by the fast path) is held to the same property on its own, and the columnar reader to
    the clause reader."""
    fast = fast_upsert(text, max_nesting)
    clause = clause_upsert(text, max_nesting)
    check_columns(text, max_nesting, clause)
    try:
        reference = parse_lalr(text, max_nesting=max_nesting)
    except KipError as exc:
        assert fast is None, f"the fast path accepted a text the grammar refuses: {exc}"
        assert clause is None, f"the clause reader accepted a text the grammar refuses: {exc}"
        with pytest.raises(KipError) as caught:
            parse(text, max_nesting=max_nesting)
        assert _error(caught.value) == _error(exc)
        return False
    if fast is None:
        return False
    if clause is not None:
        diff = exactly(clause[0], reference.command)
        assert diff is None, f"clause reader: {diff}\n{text}"
        assert clause[1] == reference.parameters
    command, names = fast
    diff = exactly(command, reference.command)
    assert diff is None, f"{diff}\n{text}"
    assert names == reference.parameters
    parsed = parse(text, max_nesting=max_nesting)
    assert exactly(parsed.command, reference.command) is None
    assert (parsed.kind, parsed.parameters, parsed.writes, parsed.late_binding) == (
        reference.kind, reference.parameters, reference.writes, reference.late_binding)
    return True


# --- the corpora -------------------------------------------------------------------------

def _strings_in_tests() -> list[str]:
    """Every string constant holding UPSERT in the test suite (commands and fragments)."""
    found: list[str] = []
    for path in sorted((ROOT / "tests").glob("**/*.py")):
        tree = pyast.parse(path.read_text(encoding="utf-8"))
        for node in pyast.walk(tree):
            if isinstance(node, pyast.Constant) and isinstance(node.value, str) \
                    and "UPSERT" in node.value:
                found.append(node.value)
    return found


def _files(*patterns: tuple[Path, str]) -> list[str]:
    return [p.read_text(encoding="utf-8") for base, pattern in patterns
            for p in sorted(base.glob(pattern))]


_FENCE = re.compile(r"^```[a-z]*[ \t]*\n(.*?)^```", re.S | re.M)


def _doc_blocks() -> list[str]:
    texts = _files((ROOT, "README.md"), (ROOT / "docs", "**/*.md"))
    return [m.group(1) for t in texts for m in _FENCE.finditer(t) if "UPSERT" in m.group(1)]


SHARED_CAPSULES = ROOT.parent / "shared" / "spec" / "capsules-v1.0-RC11"
# Read when a test asks (not at import: every xdist worker imports every test module, and
# parsing the whole test tree here cost each of them seconds).
CORPORA: dict[str, Callable[[], list[str]]] = {
    "tests": _strings_in_tests,
    "spec examples": lambda: _files((HERE / "spec_examples", "*.kip")),
    "rc11 blocks": lambda: [b.text for b in rc11_blocks.blocks()],
    "bundled": lambda: _files((Path(str(files("nexus.bundled"))), "**/*.kip")),
    "rc11 capsules": lambda: _files((SHARED_CAPSULES, "**/*.kip")),
    "docs": _doc_blocks,
}


@pytest.mark.parametrize("corpus", sorted(CORPORA))
def test_corpus(corpus: str) -> None:
    texts = CORPORA[corpus]()
    if not texts and corpus.startswith("rc11"):
        pytest.skip("../shared/spec is not present")
    read = sum(check(text) for text in texts)
    if corpus in ("bundled", "rc11 capsules", "tests"):
        assert read, f"the fast path read none of the {len(texts)} texts of {corpus}"


def test_the_bundled_capsules_take_the_fast_path() -> None:
    for text in CORPORA["bundled"]():
        assert fast_upsert(text, MAX_NESTING) is not None, text[:200]


def test_other_statements_are_declined_before_any_tokenizing(monkeypatch) -> None:
    def tokenize(*args: object) -> None:
        raise AssertionError("tokenized a text that does not start with UPSERT")
    monkeypatch.setattr(fastparse, "_tokenize", tokenize)
    for text in ('FIND(?x) WHERE { ?x {type: "T"} }', "UPSERTED {}", " // UPSERT\nFIND(?x)",
                 "upsert { }", "DESCRIBE PRIMER"):
        assert fast_upsert(text, MAX_NESTING) is None


def test_a_text_past_the_size_bound_goes_to_the_grammar_untokenized(monkeypatch) -> None:
    """Tokenizing cannot look at the deadline, so a text over MAX_CHARS is the grammar's
    (which stops at the deadline); one just under it still takes the fast path."""
    block = 'CONCEPT ?c{} {{ {{type: "Drug", name: "many {}"}} }} '

    def upsert_of(size: int) -> str:
        body, i, length = [], 0, 0
        while length < size - 40:           # (a running length: summing each time is quadratic)
            body.append(block.format(i, i))
            length += len(body[-1])
            i += 1
        return "UPSERT { " + "".join(body) + "}"
    under = upsert_of(fastparse.MAX_CHARS - 100)
    assert len(under) <= fastparse.MAX_CHARS
    assert fast_upsert(under, MAX_NESTING) is not None
    over = under[:-1] + " " * (fastparse.MAX_CHARS - len(under) + 1) + "}"
    assert len(over) == fastparse.MAX_CHARS + 1

    def tokenize(*args: object) -> None:
        raise AssertionError("tokenized a text over the size bound")
    monkeypatch.setattr(fastparse, "_tokenize", tokenize)
    assert fast_upsert(over, MAX_NESTING) is None


def test_nesting_beyond_the_budget_is_the_grammars_error() -> None:
    text = 'UPSERT { CONCEPT ?a { {type: "T", name: "n"} SET ATTRIBUTES {a: [[[[1]]]]} } }'
    assert check(text, max_nesting=8)
    assert not check(text, max_nesting=6)


def test_subtle_texts() -> None:
    """Shapes where the grammar is subtle: read exactly, or declined."""
    c = 'CONCEPT ?a { {type: "T", name: "n"} '
    for text in (
            'UPSERT { ' + c + 'SET ATTRIBUTES {a: 1, a: 2} } }',          # duplicate key
            'UPSERT { ' + c + 'SET ATTRIBUTES {"a b": 1} } }',            # not an identifier
            'UPSERT { ' + c + 'SET ATTRIBUTES {"a": 1, "b": {"c d": 2}} } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {é: 1} } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {a: "\\ud800"} } }',        # lone surrogate
            'UPSERT { ' + c + 'SET ATTRIBUTES {a: "\\ud83d\\ude00 \\u00e9\\n\\"\\/"} } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {a: "\\x41"} } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {a: "tab\tinside"} } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {a: -0, b: -0.0, c: 1E400, d: 1e-400} } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {a: 01} } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {a: 1.} } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {a: 12abc} } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {a: ' + "9" * 5000 + '} } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {a: True} } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {a: trueish} } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {true: null, null: false} } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {a: :b, c: [:d, {e: :f}]} } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {a::b} } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {a:1, b:true, c:1e5, d:null, "e":0} } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {a:0123} } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {a:1.5} } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {a:truex} } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {a:x} } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {a:1e} } }',
            'UPSERT { CONCEPT ?a { {type:"T", name:1} } }',
            'UPSERT { PROPOSITION ?p { (id:"x") } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {a::1b} } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {a: $b} } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES :a SET ATTRIBUTES :b } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {}, } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {,} } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {a: [,]} } }',
            'UPSERT { ' + c + 'SET ATTRIBUTES {a: [1,]} } }',
            'UPSERT { ' + c + 'SET PROPOSITIONS { ("p", ?b) ("q", ?c),, } } }',
            'UPSERT { ' + c + 'SET PROPOSITIONS { ("p", ?b) ("q", ?c), } } }',
            'UPSERT { ' + c + 'SET PROPOSITIONS { ("p" | "q", ?b) } } }',
            'UPSERT { ' + c + 'SET PROPOSITIONS { ("p", ?b.name) } } }',
            'UPSERT { ' + c + 'SET PROPOSITIONS { ("p", {type: "T"}) } } }',
            'UPSERT { ' + c + 'SET PROPOSITIONS { ("p", (?a, "q"{1,2}, ?b)) } } }',
            'UPSERT { ' + c + 'SET PROPOSITIONS { ("p", (?a, ?q, ?b)) } } }',
            'UPSERT { ' + c + 'SET PROPOSITIONS { (:p, (id: :i)) WITH METADATA {} } } }',
            'UPSERT { ' + c + 'EXPECT VERSION 0 } }',
            'UPSERT { ' + c + 'EXPECT VERSION -1 } }',
            'UPSERT { ' + c + 'EXPECT VERSION 1.0 } }',
            'UPSERT { ' + c + 'EXPECT VERSION :v SET ATTRIBUTES {} } }',
            'UPSERT { CONCEPT ?a { {type: "T"} } }',
            'UPSERT { CONCEPT ?a { {id: "C:1", name: "n"} } }',
            'UPSERT { CONCEPT ?a { {type: "T", name: 1} } }',
            'UPSERT { CONCEPT ?a.b { {id: "C:1"} } }',
            'UPSERT { CONCEPT ?1a { {id: "C:1"} } }',
            'UPSERT { CONCEPT { {"type": "T", "name": "n",} } }',
            'UPSERT { CONCEPT { {type: "T", type: "n"} } }',
            'UPSERT { CONCEPT { {kind: "T", name: "n"} } }',
            'UPSERT { PROPOSITION ?p { (?a, "p", ?b) SET PROPOSITIONS {} } }',
            'UPSERT { PROPOSITION ?p { (idx: "x") } }',
            'UPSERT { PROPOSITION ?p { (id: "x") EXPECT VERSION 2 } } WITH METADATA {a: 1}',
            'UPSERT{CONCEPT?a{{type:"T",name:"n"}SET ATTRIBUTES{a:1}}}UPSERT{};;',
            'UPSERT {} ; UPSERT {}',
            'UPSERT {} // end',
            'UPSERT {}\r\n// a comment\r\n',
            'UPSERT {} \x0b',
            'UPSERT { CONCEPT ?a { {type: "T", name: "n"\n} } }',
            'UPSERT { concept ?a { {type: "T", name: "n"} } }',
            'UPSERT { CONCEPT ?a { {type: "T", name: "line\nbreak"} } }',
            'UPSERT { CONCEPT ?a { {type: "T", name: "n"} } } FIND',
            'UPSERT { CONCEPT ?a { {type: "T", name: "n"} }',
            'UPSERT',
    ):
        check(text)


# --- random texts ------------------------------------------------------------------------

def fuzz_settings(default_examples: int) -> settings:
    return settings(max_examples=SCALE or default_examples, deadline=None,
                    derandomize=SCALE is None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


BLANK = st.sampled_from([" ", "", "\n", "  ", "\t", " // note\n", "\r\n", "\n\n  "])
NAME = st.sampled_from(["a", "x1", "_b", "Type", "name", "id", "true", "CONCEPT", "é", "1a"])
STRING = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters='"\\\n\r'),
            max_size=8).map(lambda s: f'"{s}"'),
    st.text(max_size=6).map(json.dumps),
    st.text(max_size=6).map(lambda s: json.dumps(s, ensure_ascii=False)),
    st.sampled_from(['"\\u00e9"', '"\\ud83d\\ude00"', '"\\ud800"', '"\\q"', '"\\/\\b"',
                     '"a\\"b"', '"\\\\"']),
)


NUMBER = st.one_of(
    st.integers(-10**6, 10**6).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["0", "-0", "1e5", "1E-3", "2.50", "-0.0", "1e999", "007", "1.", ".5"]),
)
PARAM = NAME.map(lambda n: ":" + n)
SCALAR = st.one_of(STRING, NUMBER, PARAM, st.sampled_from(["true", "false", "null"]))


def _join(draw: Any, parts: list[str], open_: str, close: str) -> str:
    comma = draw(COMMA)
    trailing = draw(TRAILING) if parts else ""
    return (open_ + draw(BLANK) + comma.join(parts) + trailing + draw(BLANK) + close)


# The strategies are built once and reused (functools.cache on the depth): building a fresh
# nested strategy at every draw made Hypothesis re-validate it each time, which cost most of
# the fuzz tests' time. The draws, hence the texts, are the same.
COMMA = st.sampled_from([",", ", ", " ,\n"])
TRAILING = st.sampled_from(["", ","])
STRING_OR_PARAM = st.one_of(STRING, PARAM)
KEY = st.one_of(NAME, NAME.map(json.dumps))
KEYS = st.lists(KEY, max_size=3)


@functools.cache
def value(depth: int = 0) -> st.SearchStrategy[str]:
    return _value(depth)


@functools.cache
def obj(depth: int = 0) -> st.SearchStrategy[str]:
    return _obj(depth)


@functools.cache
def _items(depth: int) -> st.SearchStrategy[list[str]]:
    return st.lists(value(depth), max_size=3)


@st.composite
def _value(draw: Any, depth: int = 0) -> str:
    if depth >= 3 or draw(st.booleans()):
        return draw(SCALAR)
    if draw(st.booleans()):
        items = draw(_items(depth + 1))
        return _join(draw, items, "[", "]")
    return draw(obj(depth + 1))


@st.composite
def _obj(draw: Any, depth: int = 0) -> str:
    keys = draw(KEYS)
    return _join(draw, [f"{k}{draw(BLANK)}:{draw(BLANK)}{draw(value(depth))}" for k in keys],
                 "{", "}")


@st.composite
def _concept_ref(draw: Any) -> str:
    if draw(ZERO_TO_FIVE) == 0:
        return "{id: " + draw(STRING_OR_PARAM) + "}"
    t, n = draw(STRING_OR_PARAM), draw(STRING_OR_PARAM)
    return f"{{type: {t},{draw(BLANK)}name: {n}}}"


ZERO_TO_FIVE = st.integers(0, 5)
CONCEPT_REF = _concept_ref()


def concept_ref() -> st.SearchStrategy[str]:
    return CONCEPT_REF


@functools.cache
def term(depth: int = 0) -> st.SearchStrategy[str]:
    return _term(depth)


@functools.cache
def triple(depth: int = 0) -> st.SearchStrategy[str]:
    return _triple(depth)


TERM_KIND = {True: st.integers(0, 4), False: st.integers(0, 2)}


@st.composite
def _term(draw: Any, depth: int = 0) -> str:
    kind = draw(TERM_KIND[depth < 2])
    if kind == 0:
        return "?" + draw(NAME)
    if kind <= 2:
        return draw(concept_ref())
    if kind == 3:
        return "(id: " + draw(STRING_OR_PARAM) + ")"
    return draw(triple(depth + 1))


@st.composite
def _triple(draw: Any, depth: int = 0) -> str:
    b = draw(BLANK)
    pred = draw(STRING_OR_PARAM)
    return f"({b}{draw(term(depth))},{b}{pred}, {draw(term(depth))}{b})"


PARAM_OR_OBJ = st.one_of(PARAM, obj())


def meta(draw: Any) -> str:
    if draw(st.booleans()):
        return ""
    return f" WITH METADATA {draw(PARAM_OR_OBJ)}"


HANDLE = st.sampled_from(["", "?h ", "?h2 "])
EXPECT = st.sampled_from(["", " EXPECT VERSION 0", " EXPECT VERSION :v", " EXPECT VERSION 2"])
ZERO_TO_THREE = st.integers(0, 3)
SEPARATOR = st.sampled_from([",", " ", ",\n"])


@st.composite
def block(draw: Any) -> str:
    b = draw(BLANK)
    handle = draw(HANDLE)
    expect = draw(EXPECT)
    attrs = f" SET ATTRIBUTES {draw(PARAM_OR_OBJ)}" if draw(st.booleans()) else ""
    if draw(st.booleans()):
        props = ""
        if draw(st.booleans()):
            entries = [f"({draw(STRING_OR_PARAM)}, {draw(term())}){meta(draw)}"
                       for _ in range(draw(ZERO_TO_THREE))]
            sep = draw(SEPARATOR)
            props = f" SET PROPOSITIONS {{{b}{sep.join(entries)}{b}}}"
        clauses = [attrs, props] if draw(st.booleans()) else [props, attrs]
        return (f"CONCEPT {handle}{{{b}{draw(concept_ref())}{expect}{''.join(clauses)}{b}}}"
                f"{meta(draw)}")
    return f"PROPOSITION {handle}{{{b}{draw(triple())}{expect}{attrs}{b}}}{meta(draw)}"


BLOCKS = st.lists(block(), max_size=4)
ONE_OR_TWO = st.integers(1, 2)
END = st.sampled_from(["", ";", " ;;"])


@st.composite
def upsert(draw: Any) -> str:
    statements = []
    for _ in range(draw(ONE_OR_TWO)):
        blocks = draw(BLOCKS)
        statements.append(f"UPSERT {{{draw(BLANK)}{draw(BLANK).join(blocks)}{draw(BLANK)}}}"
                          f"{meta(draw)}")
    return draw(BLANK) + draw(BLANK).join(statements) + draw(END)


@given(upsert())
@fuzz_settings(400)
@pytest.mark.slow
def test_random_upserts(text: str) -> None:
    check(text)


NOISE = st.sampled_from(list("{}()[],:;\"\\?$. \n") + ["//", "UPSERT", "SET", "WITH", "1e",
                                                       "\u00a0", "\u200b", "\x00", "'"])


@given(upsert(), st.data())
@fuzz_settings(400)
@pytest.mark.slow
def test_mutated_upserts(text: str, data: Any) -> None:
    check(_mutated(text, data))


def _mutated(text: str, data: Any) -> str:
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(text)))
        how = data.draw(st.integers(0, 3))
        if how == 0:
            text = text[:at]                                         # truncated
        elif how == 1:
            text = text[:at] + text[at + 1:]                         # a character dropped
        elif how == 2:
            text = text[:at] + data.draw(NOISE) + text[at:]          # something inserted
        else:
            end = data.draw(st.integers(at, len(text)))
            text = text[:at] + text[at:end] + text[at:]              # a span repeated
    return text


# --- the loader's shape (nexus/syntax/fastclause.py) ---------------------------------------

LOADER_BLANK = st.sampled_from([" ", "", "\n", "  ", "\t", " // note\n", "\r\n", "\n\n  ",
                                "//x\n", "\f"])
SLOT = st.one_of(PARAM, STRING)


@st.composite
def loader_link(draw: Any) -> str:
    b = lambda: draw(LOADER_BLANK)  # noqa: E731
    meta = f"{b()}WITH{b()} METADATA {b()}{draw(PARAM)}" if draw(st.booleans()) else ""
    return (f"({b()}{draw(SLOT)}{b()},{b()}{{{b()}type{b()}:{b()}{draw(SLOT)}{b()},{b()}"
            f"name{b()}:{b()}{draw(SLOT)}{b()}}}{b()}){meta}{draw(TRAILING)}")


LOADER_LINKS = st.lists(loader_link(), max_size=4)


@st.composite
def loader_block(draw: Any) -> str:
    b = lambda: draw(LOADER_BLANK)  # noqa: E731
    head = (f"CONCEPT{b()} {{{b()}{{type:{b()}{draw(SLOT)},{b()}name: {draw(SLOT)}{b()}}}"
            f"{b()}")
    if draw(st.booleans()):
        head += f"SET ATTRIBUTES{b()} {draw(PARAM)}{b()}"
    if draw(st.booleans()):
        links = draw(LOADER_LINKS)
        head += f"SET PROPOSITIONS {b()}{{{b()}{b().join(links)}{b()}}}{b()}"
    meta = f"{b()}WITH METADATA {draw(PARAM)}" if draw(st.booleans()) else ""
    return head + "}" + meta


LOADER_BLOCKS = st.lists(loader_block(), max_size=4)
LOADER_END = st.sampled_from(["", ";", " ;;", ";\n"])


@st.composite
def loader_upsert(draw: Any) -> str:
    """The shape of a KIP load (bench/kipload_grouped.py), blanks, comments and the choice
    of strings or placeholders drawn."""
    blocks = draw(LOADER_BLOCKS)
    return (f"{draw(LOADER_BLANK)}UPSERT{draw(LOADER_BLANK)}{{{draw(LOADER_BLANK)}"
            f"{draw(LOADER_BLANK).join(blocks)}{draw(LOADER_BLANK)}}}"
            + draw(LOADER_END))


@given(loader_upsert())
@fuzz_settings(400)
def test_random_loader_upserts(text: str) -> None:
    check(text)


@given(loader_upsert(), st.data())
@fuzz_settings(400)
def test_mutated_loader_upserts(text: str, data: Any) -> None:
    check(_mutated(text, data))


def test_the_loader_shape_is_read_clause_by_clause() -> None:
    """The commands of bench/kipload_grouped.py take the clause reader."""
    concepts = ("UPSERT {\n" + "\n".join(
        f"CONCEPT {{ {{type: :t{j}, name: :n{j}}} SET ATTRIBUTES :a{j} }} WITH METADATA :m{j}"
        for j in range(3)) + "\n}")
    links = ("UPSERT {\n  CONCEPT { {type: :st0, name: :sn0} SET PROPOSITIONS {\n"
             + ",\n".join(f"    (:p{k}, {{type: :ot{k}, name: :on{k}}}) WITH METADATA :m{k}"
                          for k in range(3)) + "\n  } }\n}")
    for text in (concepts, links, 'UPSERT { CONCEPT { {type: "T", name: "n"} } }'):
        assert clause_upsert(text, MAX_NESTING) is not None, text
        assert check(text)


def test_the_clause_reader_declines_what_is_not_its_shape() -> None:
    c = "CONCEPT { {type: :t, name: :n} "
    for text in (
            "UPSERT { CONCEPT ?h { {type: :t, name: :n} } }",               # a handle
            "UPSERT { CONCEPT { {id: :i} } }",
            "UPSERT { CONCEPT { {name: :n, type: :t} } }",                  # other order
            "UPSERT { CONCEPT { {type: :t, name: :n,} } }",                 # trailing comma
            "UPSERT { " + c + "SET ATTRIBUTES {a: 1} } }",                  # a literal map
            "UPSERT { " + c + "EXPECT VERSION 1 } }",
            "UPSERT { " + c + "SET PROPOSITIONS { (:p, ?x) } } }",
            "UPSERT { " + c + "SET PROPOSITIONS { (:p, {type: :t, name: :n}) } "
            "SET ATTRIBUTES :a } }",
            'UPSERT { CONCEPT { {type: "a\\"b", name: :n} } }',            # an escape
            "UPSERT { CONCEPT { {type: :t, name: :né} } }",
            "UPSERT { " + c + "} } WITH METADATA :m",                        # statement metadata
            "UPSERT { " + c + "} } UPSERT { }",
            "UPSERT { " + c + "SETATTRIBUTES :a } }",
    ):
        assert clause_upsert(text, MAX_NESTING) is None, text
        check(text)
    assert clause_upsert("UPSERT { " + c + "} }", 4) is None       # under the shape's depth


# --- the blanks before a token, on every Python -------------------------------------------
# Python before 3.11 has no possessive quantifiers; there the fast readers take the blanks
# and comments with lookaheads instead (fastclause.BLANKS_LOOKAHEAD). Both forms must accept
# the same texts with the same matches, or a 3.10 install would read UPSERTs differently.
_BLANK_TEXT = st.lists(st.sampled_from([" ", "\n", "\t", "\r", "/", "//", "\x00", "a", "{",
                                        '"', ":", ",", "UPSERT", "type"]),
                        max_size=20).map("".join)


@pytest.mark.skipif(sys.version_info < (3, 11),
                    reason="the possessive form compiles from Python 3.11 on")
@settings(max_examples=600, deadline=None)
@given(_BLANK_TEXT)
def test_the_lookahead_blanks_match_as_the_possessive_ones(text):
    from nexus.syntax import fastclause
    for follow in ("", r"UPSERT(?!\w)", r"\{", r"type(?!\w)", r"\Z"):
        want = re.compile(fastclause.BLANKS_POSSESSIVE + follow).match(text)
        got = re.compile(fastclause.BLANKS_LOOKAHEAD + follow).match(text)
        assert (got and got.span()) == (want and want.span()), (follow, text)
    token = fastparse._TOKEN.pattern
    lookahead = re.compile(token.replace(fastclause.BLANKS, fastclause.BLANKS_LOOKAHEAD),
                           re.VERBOSE)
    possessive = re.compile(token.replace(fastclause.BLANKS, fastclause.BLANKS_POSSESSIVE),
                            re.VERBOSE)
    assert [m.span() for m in lookahead.finditer(text + "\x00")] == \
        [m.span() for m in possessive.finditer(text + "\x00")], text
