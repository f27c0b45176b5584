"""The `.kiptest` case format: parsing only (the reference is tests/cases/README.md).

A file holds cases; a case is a header of `key: value` lines and a list of steps, each
introduced by a `--- section` line. This module turns the text into `Case` and `Step`
values and id references (`@C(Type:Name)`, `@P(end|predicate|end)`, `@N(element)`) into
tuples. It runs nothing and imports nothing of the engine: kiprun.py runs the cases.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parent
GRAPHS = ROOT / "graphs"

# Where a case can run: the in-process stores under each FIND executor, and a real
# `kip serve` (an LMDB store behind HTTP). PostgreSQL has no column views (the columnar
# executor falls back to rows there), so it runs once; it needs the postgres extra.
STORES = ("memory", "lmdb", "http", "postgresql")
TARGETS = ("memory-row", "memory-columnar", "lmdb-row", "lmdb-columnar", "http",
           "postgresql-row")

NOTE_KEYS = {"spec", "contract", "decision", "note", "about"}     # free text, not checked
KEYS = {"graph", "bootstrap", "writes", "params", "options", "dry_run", "stores",
        "skip"} | NOTE_KEYS
SECTIONS = ("command", "setup", "expect", "error", "delta", "state", "reopen")
STATE_KEYS = {"attributes", "metadata", "metadata_absent", "version"}


@dataclass
class StateEntry:
    """`@C(Drug:Aspirin) {...}` or `... absent` in a `--- state` section."""
    ref: tuple
    absent: bool = False
    want: dict = field(default_factory=dict)    # keys of STATE_KEYS


@dataclass
class Step:
    kind: str                          # command | setup | reopen
    line: int
    command: str = ""
    params: dict = field(default_factory=dict)
    dry_run: bool = False
    checked: bool = False              # an `expect` or `error` section was given
    expect: Any = None
    mode: str = "ordered"              # ordered | unordered | ignore
    more: bool = False                 # a next_cursor must be present (else absent)
    unchanged: bool = False            # the graph must be exactly as before the step
    error: str | None = None
    message: list[str] = field(default_factory=list)     # substrings of error.message
    hint: list[str] = field(default_factory=list)        # substrings of error.hint
    at: tuple[int, int] | None = None                    # error.data line and column
    delta: dict | None = None          # change of the element counts
    state: list[StateEntry] = field(default_factory=list)


@dataclass
class Case:
    name: str
    file: str                          # relative to ROOT, without the suffix
    line: int
    graph: str | None = None
    bootstrap: bool = False
    writes: bool = False
    params: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    dry_run: bool = False
    stores: tuple = STORES
    skip: str | None = None
    notes: dict = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.file}:{self.name}"

    @property
    def reopens(self) -> bool:
        return any(s.kind == "reopen" for s in self.steps)

    def targets(self) -> list[str]:
        return [t for t in TARGETS if t.split("-")[0] in self.stores]


class FormatError(ValueError):
    pass


# --- files -------------------------------------------------------------------------------

def load_all(root: Path = ROOT) -> list[Case]:
    """Every case of every `*.kiptest` under `root`; case ids are unique."""
    cases: list[Case] = []
    for path in sorted(root.rglob("*.kiptest")):
        cases.extend(parse_file(path, path.relative_to(root).with_suffix("").as_posix()))
    seen: set[str] = set()
    for case in cases:
        if case.id in seen:
            raise FormatError(f"duplicate case {case.id!r}")
        seen.add(case.id)
    return cases


def parse_file(path: Path, name: str | None = None) -> list[Case]:
    return _Parser(path, name or path.stem).parse(path.read_text(encoding="utf-8"))


class _Parser:
    def __init__(self, path: Path, name: str) -> None:
        self.path, self.name = path, name
        self.defaults: dict[str, Any] = {}
        self.cases: list[Case] = []
        self.case: Case | None = None

    def fail(self, lineno: int, msg: str) -> None:
        raise FormatError(f"{self.path}:{lineno}: {msg}")

    def parse(self, text: str) -> list[Case]:
        section: tuple[str, str, int] | None = None      # (word, header rest, line)
        body: list[str] = []
        lines = text.split("\n")
        for lineno, raw in enumerate(lines, 1):
            line = raw.rstrip("\r")
            if line.startswith("#"):
                continue
            if line.startswith(("=== ", "--- ")):
                if section:
                    self.section(*section, body)
                section, body = None, []
                if line.startswith("=== "):
                    self.finish()
                    self.case = Case(name=line[4:].strip(), file=self.name, line=lineno)
                    for key, value in self.defaults.items():
                        self.key(lineno, key, value)
                    continue
                if self.case is None:
                    self.fail(lineno, "`---` before the first `=== case`")
                word, _, rest = line[4:].strip().partition(" ")
                if word not in SECTIONS:
                    self.fail(lineno, f"unknown section {word!r}")
                section = (word, rest.strip(), lineno)
                continue
            if section:
                body.append(line)
            elif self.case is None:
                m = re.fullmatch(r"@(\w+)(?:\s+(.*))?", line.strip())
                if m:
                    if m.group(1) not in KEYS - NOTE_KEYS:
                        self.fail(lineno, f"unknown file directive @{m.group(1)}")
                    self.defaults[m.group(1)] = (m.group(2) or "").strip()
                elif line.strip():
                    self.fail(lineno, "text before the first `=== case`")
            elif line.strip():
                key, sep, value = line.partition(":")
                if not sep or key.strip() not in KEYS:
                    self.fail(lineno, f"unknown case key {key.strip()!r}")
                if self.case.steps:
                    self.fail(lineno, "case keys go before the first step")
                self.key(lineno, key.strip(), value.strip())
        if section:
            self.section(*section, body)
        self.finish()
        return self.cases

    def key(self, lineno: int, key: str, value: str) -> None:
        case = self.case
        assert case is not None
        try:
            if key == "graph":
                case.graph = value or None
            elif key in ("params", "options"):
                setattr(case, key, json.loads(value))
            elif key in ("bootstrap", "writes", "dry_run"):
                setattr(case, key, _bool(value))
            elif key == "stores":
                case.stores = tuple(s.strip() for s in value.split(","))
                if not case.stores or set(case.stores) - set(STORES):
                    self.fail(lineno, f"stores: some of {', '.join(STORES)}")
            elif key == "skip":
                case.skip = value
            else:
                case.notes[key] = value
        except ValueError as exc:
            self.fail(lineno, f"bad value of {key}: {exc}")

    def step(self, lineno: int, kinds: tuple[str, ...], word: str) -> Step:
        """The step a result section belongs to: the last one, of one of `kinds`."""
        case = self.case
        assert case is not None
        if not case.steps or case.steps[-1].kind not in kinds:
            self.fail(lineno, f"`--- {word}` must follow a `--- {' / '.join(kinds)}`")
        return case.steps[-1]

    def section(self, word: str, header: str, lineno: int, body: list[str]) -> None:
        case = self.case
        assert case is not None
        text = _trim(body)
        if word in ("command", "setup"):
            step = Step(kind=word, line=lineno)
            flags, _, params = header.partition("{")
            for flag in flags.split():
                if flag not in ("dry_run", "json"):
                    self.fail(lineno, f"unknown command option {flag!r}")
            step.dry_run = "dry_run" in flags.split()
            try:
                step.params = json.loads("{" + params) if params else {}
                step.command = json.loads(text) if "json" in flags.split() else text
            except ValueError as exc:
                self.fail(lineno, f"bad JSON: {exc}")
            if not isinstance(step.command, str) or (not step.command and "json" not in flags):
                self.fail(lineno, "empty command")
            case.steps.append(step)
        elif word == "reopen":
            if header or text:
                self.fail(lineno, "`--- reopen` takes nothing")
            case.steps.append(Step(kind="reopen", line=lineno))
        elif word == "expect":
            step = self.step(lineno, ("command",), word)
            if step.checked:
                self.fail(lineno, "a step has one `expect` or `error`")
            words = header.split()
            for w in words:
                if w not in ("ordered", "unordered", "ignore", "more", "unchanged"):
                    self.fail(lineno, f"unknown expect option {w!r}")
            step.checked = True
            step.mode = next((w for w in words if w in ("unordered", "ignore")), "ordered")
            step.more, step.unchanged = "more" in words, "unchanged" in words
            if step.mode != "ignore":
                if not text:
                    self.fail(lineno, "missing expected JSON")
                try:
                    step.expect = json.loads(text)
                except ValueError as exc:
                    self.fail(lineno, f"bad expected JSON: {exc}")
        elif word == "error":
            step = self.step(lineno, ("command",), word)
            if step.checked:
                self.fail(lineno, "a step has one `expect` or `error`")
            code, _, contains = header.partition(" ")
            if not re.fullmatch(r"KIP_\d{4}", code):
                self.fail(lineno, "`--- error KIP_xxxx [message substring]`")
            step.checked, step.error = True, code
            if contains.strip():
                step.message.append(contains.strip())
            for item in text.split("\n") if text else ():
                k, sep, v = item.partition(":")
                v = v.strip()
                if k == "message" and sep and v:
                    step.message.append(v)
                elif k == "hint" and sep and v:
                    step.hint.append(v)
                elif k == "at" and re.fullmatch(r"\d+:\d+", v):
                    line, column = v.split(":")
                    step.at = (int(line), int(column))
                else:
                    self.fail(lineno, f"error lines are `message: …`, `hint: …`, `at: L:C`; "
                                      f"got {item!r}")
        elif word == "delta":
            step = self.step(lineno, ("command", "setup"), word)
            try:
                step.delta = json.loads(header or text)
            except ValueError as exc:
                self.fail(lineno, f"bad delta JSON: {exc}")
            if not isinstance(step.delta, dict) or set(step.delta) - {"concepts", "links"}:
                self.fail(lineno, 'delta is {"concepts": n, "links": n}')
        elif word == "state":
            step = self.step(lineno, ("command", "setup", "reopen"), word)
            try:
                step.state.extend(parse_state(text))
            except ValueError as exc:
                self.fail(lineno, f"bad state: {exc}")

    def finish(self) -> None:
        case = self.case
        if case is None:
            return
        if not case.steps:
            self.fail(case.line, f"case {case.name!r} has no command")
        for step in case.steps:
            if step.kind == "command" and not step.checked:
                self.fail(step.line, "a `--- command` needs an `--- expect` or `--- error`")
        if any(s.kind != "command" for s in case.steps):
            case.writes = True          # setup and reopen need a database of the case's own
        if case.reopens:
            case.stores = tuple(s for s in case.stores if s != "memory")
            if not case.stores:
                self.fail(case.line, "a memory store cannot be reopened")
        self.cases.append(case)
        self.case = None


def _bool(value: str) -> bool:
    if value not in ("true", "false", ""):
        raise ValueError("true or false")
    return value != "false"


def _trim(lines: list[str]) -> str:
    """The body without its leading and trailing blank lines (other whitespace is kept:
    error positions count it)."""
    while lines and not lines[0].strip():
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return "\n".join(lines)


def parse_state(text: str) -> list[StateEntry]:
    entries: list[StateEntry] = []
    decoder = json.JSONDecoder()
    i = 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i == len(text):
            return entries
        if not REF_START.match(text, i):
            raise ValueError(f"expected a reference at {text[i:i + 30]!r}")
        ref, i = parse_ref(text, i)
        while i < len(text) and text[i] in " \t":
            i += 1
        if text.startswith("absent", i):
            entries.append(StateEntry(ref, absent=True))
            i += len("absent")
            continue
        want, i = decoder.raw_decode(text, i)
        if not isinstance(want, dict) or set(want) - STATE_KEYS:
            raise ValueError(f"a state is `absent` or an object of {sorted(STATE_KEYS)}")
        entries.append(StateEntry(ref, want=want))


# --- id references -----------------------------------------------------------------------
#
# `@C(Type:Name)` → the concept's id; `@P(<end>|predicate|<end>)` → the link's id, where an
# end is `Type:Name` or a nested `@P(...)`; `@N(<element>)` → the bare number n of an id.
# As tuples: ("C", "Type:Name"), ("P", end, predicate, end), ("N", element).

REF_START = re.compile(r"@([CPN])\(")


def parse_ref(text: str, i: int) -> tuple[tuple, int]:
    """Parse the reference starting at text[i] == '@'; (ref, index just after it)."""
    kind = text[i + 1]
    j = i + 3
    parts: list = []
    cur: str | None = ""
    while True:
        if j >= len(text):
            raise ValueError(f"unterminated reference in {text!r}")
        if REF_START.match(text, j):
            ref, j = parse_ref(text, j)
            parts.append(ref)
            cur = None
            continue
        ch = text[j]
        j += 1
        if ch in "|)":
            if cur:
                parts.append(cur)
            cur = ""
            if ch == ")":
                break
            continue
        if cur is None:
            raise ValueError(f"text after a nested reference in {text!r}")
        cur += ch
    if kind in "CN":
        if len(parts) != 1:
            raise ValueError(f"@{kind} takes one element: {text!r}")
        return (kind, parts[0]), j
    if len(parts) != 3:
        raise ValueError(f"@P takes end|predicate|end: {text!r}")
    return ("P", *parts), j


def ref_text(ref: tuple | str) -> str:
    """A reference as it is written in a case."""
    if isinstance(ref, str):
        return ref
    if ref[0] == "P":
        return f"@P({ref_text(ref[1])}|{ref[2]}|{ref_text(ref[3])})"
    return f"@{ref[0]}({ref_text(ref[1])})"


def split_refs(text: str) -> list[str | tuple]:
    """`text` as a list of plain strings and references."""
    out: list[str | tuple] = []
    i = 0
    while (m := REF_START.search(text, i)) is not None:
        out.append(text[i:m.start()])
        ref, i = parse_ref(text, m.start())
        out.append(ref)
    out.append(text[i:])
    return out
