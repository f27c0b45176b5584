"""The data-driven KQL test harness: case files, graph loading, id references, comparison.

See tests/kql/README.md for the `.kiptest` format. Nothing here uses engine code to decide
an expected answer: graphs are loaded through the public API (KIP UPSERT text) when KML is
available, else written through the store protocol by the small interpreter below; ids are
looked up through the store protocol; comparison is plain JSON equality after the
normalisation documented in the README.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
GRAPHS = HERE / "graphs"
CASES = HERE / "cases"

# Engine-maintained metadata (CONTRACT §3): dropped from actual results before comparing,
# because timestamps differ per run and interim graphs (written without KML) lack them.
ENGINE_META = ("_version", "_created_at", "_updated_at")


# --- case files --------------------------------------------------------------------------

@dataclass
class Step:
    command: str
    params: dict = field(default_factory=dict)
    expect: Any = None               # JSON value (when error is None)
    mode: str = "ordered"            # ordered | unordered | ignore
    more: bool = False               # a next_cursor must be present (else absent)
    error: str | None = None         # expected error code
    error_text: str | None = None    # substring expected in the error message
    line: int = 0


@dataclass
class Case:
    name: str
    file: str
    line: int
    graph: str | None = None
    params: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    dry_run: bool = False
    stores: tuple = ("lmdb", "memory")
    steps: list = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{Path(self.file).stem}:{self.name}"


_KEYS = {"graph", "params", "options", "dry_run", "stores", "spec", "contract", "note",
         "decision", "skip"}


def parse_case_file(path: Path) -> list[Case]:
    """Parse one `.kiptest` file (format: tests/kql/README.md)."""
    cases: list[Case] = []
    default_graph: str | None = None
    case: Case | None = None
    section: str | None = None          # command | expect | error | None (header)
    header: str = ""
    buf: list[str] = []
    step: Step | None = None

    def fail(lineno: int, msg: str) -> None:
        raise ValueError(f"{path}:{lineno}: {msg}")

    def flush(lineno: int) -> None:
        nonlocal section, buf, step
        text = "\n".join(buf).strip()
        if section == "command":
            if not text:
                fail(lineno, "empty command")
            assert case is not None
            params = json.loads(header) if header.strip() else {}
            step = Step(command=text, params=params, line=lineno)
            case.steps.append(step)
        elif section == "expect":
            if step is None or step.error is not None or step.expect is not None:
                fail(lineno, "`--- expect` must follow a `--- command`")
            words = header.split()
            for w in words:
                if w not in ("ordered", "unordered", "more", "ignore"):
                    fail(lineno, f"unknown expect option {w!r}")
            step.mode = ("unordered" if "unordered" in words else
                         "ignore" if "ignore" in words else "ordered")
            step.more = "more" in words
            try:
                step.expect = json.loads(text) if text else None
            except json.JSONDecodeError as exc:
                fail(lineno, f"bad expected JSON: {exc}")
            if step.expect is None and text != "null" and step.mode != "ignore":
                fail(lineno, "missing expected JSON")
        elif section == "error":
            if step is None or step.expect is not None or step.error is not None:
                fail(lineno, "`--- error` must follow a `--- command`")
            parts = header.split(None, 1)
            if not parts or not re.fullmatch(r"KIP_\d{4}", parts[0]):
                fail(lineno, "`--- error KIP_xxxx [message substring]`")
            step.error = parts[0]
            step.error_text = parts[1].strip() if len(parts) > 1 else None
        section, buf = None, []

    lines = path.read_text(encoding="utf-8").splitlines()
    for lineno, raw in enumerate(lines, 1):
        line = raw.rstrip()
        if line.startswith("#"):
            continue
        if line.startswith("=== "):
            flush(lineno)
            if case is not None:
                cases.append(case)
            case = Case(name=line[4:].strip(), file=str(path), line=lineno, graph=default_graph)
            section, step = "header", None
            continue
        if line.startswith("--- "):
            if case is None:
                fail(lineno, "`---` before the first `=== case`")
            if section != "header":
                flush(lineno)
            word, _, rest = line[4:].partition(" ")
            if word not in ("command", "expect", "error"):
                fail(lineno, f"unknown section {word!r}")
            section, header, buf = word, rest, []
            continue
        if case is None:
            m = re.fullmatch(r"@graph\s+(\S+)", line)
            if m:
                default_graph = m.group(1)
            elif line.strip():
                fail(lineno, "text before the first `=== case`")
            continue
        if section == "header":
            if not line.strip():
                continue
            key, sep, value = line.partition(":")
            key = key.strip()
            if not sep or key not in _KEYS:
                fail(lineno, f"unknown case key {key!r}")
            value = value.strip()
            if key == "graph":
                case.graph = value or None
            elif key in ("params", "options"):
                setattr(case, key, json.loads(value))
            elif key == "dry_run":
                case.dry_run = json.loads(value)
            elif key == "stores":
                case.stores = tuple(s.strip() for s in value.split(","))
            else:
                case.meta[key] = value
            continue
        buf.append(raw)
    flush(len(lines) + 1)
    if case is not None:
        cases.append(case)
    for c in cases:
        if not c.steps:
            raise ValueError(f"{path}:{c.line}: case {c.name!r} has no command")
        for s in c.steps:
            if s.error is None and s.expect is None and s.mode != "ignore":
                raise ValueError(f"{path}:{s.line}: command without expect/error")
    return cases


def all_cases() -> list[Case]:
    out: list[Case] = []
    for path in sorted(CASES.glob("*.kiptest")):
        out.extend(parse_case_file(path))
    names = [c.id for c in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"duplicate case names: {sorted(dup)}")
    return out


# --- graph loading -----------------------------------------------------------------------

def kml_available() -> bool:
    forced = os.environ.get("KQL_TEST_LOADER")
    if forced:
        return forced == "kml"
    return importlib.util.find_spec("nexus.exec.kml") is not None


def load_graph(nx: Any, name: str) -> None:
    text = (GRAPHS / f"{name}.kip").read_text(encoding="utf-8")
    load_graph_text(nx, text)


def load_graph_text(nx: Any, text: str) -> None:
    if kml_available():
        response = nx.execute_kip({"command": text})
        if "error" in response:
            raise AssertionError(f"loading graph failed: {response['error']}")
        return
    from nexus import syntax
    parsed = syntax.parse(text)
    command = syntax.bind(parsed, {})
    with nx.store.write() as txn:
        _Interim(txn).upsert(command)


class _Interim:
    """A minimal UPSERT interpreter over the store protocol, used only until KML lands:
    {type,name} match-or-create, SET ATTRIBUTES (shallow merge), SET PROPOSITIONS and
    PROPOSITION blocks (match-or-create, higher-order), metadata precedence (statement ⊕
    block ⊕ entry). No schema checks, no engine metadata."""

    def __init__(self, txn: Any) -> None:
        self.t = txn

    def upsert(self, command: Any) -> None:
        from nexus.syntax import ast as A
        for st in command.statements:
            handles: dict[str, int] = {}
            smeta = _lit(st.metadata)
            for block in st.blocks:
                bmeta = {**smeta, **_lit(block.metadata)}
                if isinstance(block, A.ConceptBlock):
                    n = self.concept(block.match, create=True)
                    self.write(n, _lit(block.attributes), bmeta)
                    for entry in block.propositions or ():
                        target = self.term(entry.target, handles)
                        emeta = {**bmeta, **_lit(entry.metadata)}
                        link = self.link(n, entry.predicate.value, target)
                        self.write(link, {}, emeta)
                else:
                    m = block.match
                    if isinstance(m, A.PropositionIdMatch):
                        raise NotImplementedError("(id:) in interim graphs")
                    s = self.term(m.subject, handles)
                    o = self.term(m.object, handles)
                    n = self.link(s, m.predicate.names[0].value, o)
                    self.write(n, _lit(block.attributes), bmeta)
                if block.handle:
                    handles[block.handle] = n

    def concept(self, match: Any, create: bool) -> int:
        t = self.t
        if match.id is not None:
            n = int(match.id.value.split(":")[1])
            assert t.head(n) is not None, match
            return n
        tid = t.intern(match.type.value)
        name = match.name.value
        n = t.concept_id(tid, name)
        if n is None:
            assert create, f"concept {match} not found"
            n = t.new_id()
            t.create_concept(n, tid, name, {}, {})
        return n

    def term(self, term: Any, handles: dict) -> int:
        from nexus.syntax import ast as A
        if isinstance(term, A.VarTerm):
            return handles[term.name]
        if isinstance(term, A.ConceptMatch):
            return self.concept(term, create=False)
        s = self.term(term.subject, handles)
        o = self.term(term.object, handles)
        pid = self.t.symbol_id(term.predicate.names[0].value)
        n = self.t.link_id(s, pid, o) if pid else None
        assert n is not None, f"link {term} not found"
        return n

    def link(self, s: int, predicate: str, o: int) -> int:
        pid = self.t.intern(predicate)
        n = self.t.link_id(s, pid, o)
        if n is None:
            n = self.t.new_id()
            self.t.create_link(n, s, pid, o, {}, {})
        return n

    def write(self, n: int, attributes: dict, metadata: dict) -> None:
        if attributes:
            self.t.set_attributes(n, {**self.t.attributes(n), **attributes})
        if metadata:
            self.t.set_metadata(n, {**self.t.metadata(n), **metadata})


def _lit(value: Any) -> dict:
    return {} if value is None else dict(value.value)


# --- id references -----------------------------------------------------------------------
#
# `@C(Type:Name)` → the concept's id; `@P(<end>|predicate|<end>)` → the link's id, where an
# end is `Type:Name` or a nested `@P(...)`; `@N(<element>)` → the bare number n of an element.
# Usable in command text, params and expected JSON.

_REF_START = re.compile(r"@([CPN])\(")


def _parse_ref(text: str, i: int) -> tuple[tuple, int]:
    """Parse a reference starting at text[i] == '@'; returns (ref, index after it)."""
    kind = text[i + 1]
    j = i + 3
    parts: list = []
    cur = ""
    while True:
        if j >= len(text):
            raise ValueError(f"unterminated reference in {text!r}")
        ch = text[j]
        if _REF_START.match(text, j):
            ref, j = _parse_ref(text, j)
            parts.append(ref)
            cur = None
            continue
        if ch == "|" or ch == ")":
            if cur is not None:
                parts.append(cur)
            cur = ""
            j += 1
            if ch == ")":
                break
            continue
        if cur is None:
            raise ValueError(f"text after a nested reference in {text!r}")
        cur += ch
        j += 1
    if kind in "CN":
        parts = [p for p in parts if p != ""]
        if len(parts) != 1:
            raise ValueError(f"@{kind} takes one element: {text!r}")
        return (kind, parts[0]), j
    parts = [p for p in parts if p != ""]
    if len(parts) != 3:
        raise ValueError(f"@P takes end|predicate|end: {text!r}")
    return ("P", parts[0], parts[1], parts[2]), j


class Refs:
    """Resolves references against one database (ids differ between loaders)."""

    def __init__(self, nx: Any) -> None:
        self.nx = nx
        self.cache: dict[str, str] = {}

    def element(self, txn: Any, ref: Any) -> tuple[int, str]:
        if isinstance(ref, str):
            ref = ("C", ref)
        if ref[0] == "N":
            n, _ = self.element(txn, ref[1])
            return n, str(n)
        if ref[0] == "C":
            type_, _, name = ref[1].partition(":")
            tid = txn.symbol_id(type_)
            n = txn.concept_id(tid, name) if tid else None
            if n is None:
                raise KeyError(f"no concept {ref[1]!r} in the test graph")
            return n, f"C:{n}"
        s, _ = self.element(txn, ref[1])
        o, _ = self.element(txn, ref[3])
        pid = txn.symbol_id(ref[2])
        n = txn.link_id(s, pid, o) if pid else None
        if n is None:
            raise KeyError(f"no link {ref!r} in the test graph")
        return n, f"P:{n}:{ref[2]}"

    def substitute_text(self, text: str) -> str:
        if "@" not in text:
            return text
        out = []
        i = 0
        with self.nx.store.read() as txn:
            while True:
                m = _REF_START.search(text, i)
                if m is None:
                    out.append(text[i:])
                    break
                out.append(text[i:m.start()])
                ref, end = _parse_ref(text, m.start())
                out.append(self.element(txn, ref)[1])
                i = end
        return "".join(out)

    def substitute(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.substitute_text(value)
        if isinstance(value, list):
            return [self.substitute(v) for v in value]
        if isinstance(value, dict):
            return {k: self.substitute(v) for k, v in value.items()}
        return value


# --- comparison --------------------------------------------------------------------------

def strip_engine_meta(value: Any) -> Any:
    if isinstance(value, list):
        return [strip_engine_meta(v) for v in value]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in ENGINE_META:
                continue
            v = strip_engine_meta(v)
            if k == "metadata" and v == {} and "_type" in value:
                continue        # an element whose only metadata was engine-maintained
            out[k] = v
        return out
    return value


def canon(value: Any) -> str:
    """A total order over JSON values, with 1 == 1.0 kept apart (JSON types matter)."""
    return json.dumps(_typed(value), sort_keys=True, ensure_ascii=False)


def _typed(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return {"#int": value}
    if isinstance(value, float):
        return {"#float": value}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    return value


def as_rows(result: Any, n_items: int) -> list | None:
    """Columns → rows (None when the shape is not n_items aligned columns)."""
    if n_items == 1:
        return result if isinstance(result, list) else None
    if not isinstance(result, list) or len(result) != n_items:
        return None
    if not all(isinstance(c, list) for c in result):
        return None
    lengths = {len(c) for c in result}
    if len(lengths) > 1:
        return None
    return [list(r) for r in zip(*result)]


def same_result(actual: Any, expected: Any, mode: str, n_items: int) -> bool:
    if mode == "ignore":
        return True
    if mode == "ordered":
        return canon(actual) == canon(expected)
    a, e = as_rows(actual, n_items), as_rows(expected, n_items)
    if a is None or e is None:
        return canon(actual) == canon(expected)
    return sorted(map(canon, a)) == sorted(map(canon, e))


def find_item_count(text: str) -> int:
    from nexus import syntax
    from nexus.syntax import ast as A
    try:
        cmd = syntax.parse(text).command
    except Exception:  # noqa: BLE001 - a case expecting a syntax error
        return 1
    if isinstance(cmd, A.Explain):
        return 1
    return len(cmd.items) if isinstance(cmd, A.Find) else 1
