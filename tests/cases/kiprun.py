"""Running `.kiptest` cases (kiptest.py parses them; tests/cases/README.md documents both).

A case runs against a `Target`, something that answers KIP requests: `Local`, an open
`Nexus` in this process (memory or LMDB, row or columnar FIND executor), or `Http`, a real
`kip serve` on a loopback port (started by tests/reliability/kipserver.py, which uses
tests/serving.py). Both see the same requests and are held to the same expectations; over
HTTP the status code is checked as well (CONTRACT §1).

Nothing here reads the store or uses engine internals: test graphs are loaded as UPSERT
text, id references are looked up with FIND, and the graph is compared before and after a
step (`unchanged`, `delta`, and every error of a case that writes) by listing every concept
of every type and every link of every predicate, with FIND.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, Callable, TypeVar

from kiptest import GRAPHS, Case, StateEntry, Step, ref_text, split_refs

from nexus import Nexus

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reliability"))
from kipserver import KipServer  # noqa: E402

# Engine-maintained metadata (CONTRACT §3): dropped from results before comparing them,
# since timestamps differ per run; `--- state` checks `_version` and the timestamps' form.
ENGINE_META = ("_version", "_created_at", "_updated_at")
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
# CONTRACT §1: HTTP status by error code; 200 on success, 400 for the other codes.
STATUS = {"KIP_3002": 404, "KIP_3003": 409, "KIP_3004": 403, "KIP_3005": 409,
          "KIP_4001": 408, "KIP_4003": 500}

Send = Callable[[dict], tuple[int | None, dict]]
T = TypeVar("T", bound="Target")


# --- targets -----------------------------------------------------------------------------

class Target:
    """Answers KIP requests: `send` → (HTTP status or None, KIP response)."""

    def send(self, request: dict, readonly: bool) -> tuple[int | None, dict]:
        raise NotImplementedError

    def reopen(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


_PG: list[str] = []           # the cases' database on the session's PostgreSQL server
_PG_SPACES = iter(range(1, 1 << 62))


def pg_location() -> str:
    """A `postgresql://` location of a fresh, empty space (skips without the extra)."""
    from pgtest import shared_server
    server = shared_server()
    if not _PG:
        _PG.append(server.fresh_database("cases"))
    return f"{_PG[0]}&space=c{next(_PG_SPACES)}"


class Local(Target):
    """A `Nexus` in this process; `path` None is a memory store (which cannot reopen), a
    str a store URL (postgresql://)."""

    def __init__(self, path: Path | str | None, options: dict) -> None:
        self.path, self.options = path, options
        self.nx = Nexus.open(None if path is None else str(path), **options)

    def executor(self, name: str) -> None:
        self.nx.columnar = {"row": "never", "columnar": "always"}[name]

    def send(self, request: dict, readonly: bool) -> tuple[int | None, dict]:
        run = self.nx.execute_kip_readonly if readonly else self.nx.execute_kip
        return None, run(request)

    def reopen(self) -> None:
        assert self.path is not None, "a memory store cannot be reopened"
        self.nx.close()
        self.nx = Nexus.open(str(self.path), **self.options)

    def close(self) -> None:
        self.nx.close()


class Http(Target):
    """`kip serve` over the LMDB directory `path`; engine limits go in as `KIP_*` variables."""

    def __init__(self, path: Path, bootstrap: bool, options: dict) -> None:
        self.path = path
        self.flags = () if bootstrap else ("--no-bootstrap",)
        self.env = {f"KIP_{k.upper()}": str(v) for k, v in options.items()}
        self.server = KipServer.start(path, *self.flags, env=self.env)

    def send(self, request: dict, readonly: bool) -> tuple[int | None, dict]:
        return self.server.kip(request, "execute_kip_readonly" if readonly else "execute_kip")

    def reopen(self) -> None:
        assert self.server.stop() == 0, "kip serve did not stop cleanly"
        self.server = KipServer.start(self.path, *self.flags, env=self.env)

    def close(self) -> None:
        self.server.stop()


def open_target(store: str, directory: Path, case: Case) -> Local | Http:
    """A new database for `case` (its store, bootstrap, options), holding its graph."""
    if store == "http":
        return load_graph(Http(directory / "db", case.bootstrap, case.options), case.graph)
    options = {"bootstrap": case.bootstrap, **case.options}
    if store == "lmdb":
        options.setdefault("durable", False)
    if store == "postgresql":       # a fresh space in the session's server (tests/pgtest.py)
        return load_graph(Local(pg_location(), options), case.graph)
    target = Local(directory / "db" if store == "lmdb" else None, options)
    return load_graph(target, case.graph)


def load_graph(target: T, graph: str | None) -> T:
    """`target` after running the graph file tests/cases/graphs/<graph>.kip on it."""
    if graph:
        text = (GRAPHS / f"{graph}.kip").read_text(encoding="utf-8")
        _, response = target.send({"command": text}, readonly=False)
        assert "error" not in response, f"loading graph {graph}: {response['error']}"
    return target


# --- running -----------------------------------------------------------------------------

def run_case(case: Case, target: Target) -> None:
    """Run every step of `case`; an AssertionError says which step and why."""
    readonly = not case.writes          # shared databases are guarded by the read-only method

    def send(request: dict) -> tuple[int | None, dict]:
        return target.send(request, readonly)

    refs = Refs(send, cache=readonly)
    cursor = None
    for n, step in enumerate(case.steps, 1):
        where = f"{case.file}.kiptest:{step.line} (step {n} of {case.name!r})"
        if step.kind == "reopen":       # closing and opening again changes nothing
            before = snapshot(send)
            target.reopen()
            after = snapshot(send)
            assert after == before, f"{where}: the reopen changed {diff(before, after)}"
            cursor = None
        else:
            cursor = run_step(case, step, send, refs, cursor, where)
        check_state(step.state, refs, where)


def run_step(case: Case, step: Step, send: Send, refs: Refs, cursor: str | None,
             where: str) -> str | None:
    """Send one command and check its response; the next_cursor it gave."""
    snap = step.unchanged or step.delta is not None or (case.writes and step.error)
    before = snapshot(send) if snap else None
    text = refs.text(step.command)
    params = refs.value({**case.params, **step.params})
    if "$CURSOR" in text or "$CURSOR" in params.values():
        assert cursor is not None, f"{where}: no next_cursor from the previous step"
        text = text.replace("$CURSOR", json.dumps(cursor))
        params = {k: (cursor if v == "$CURSOR" else v) for k, v in params.items()}
    request: dict[str, Any] = {"command": text, "parameters": params}
    if case.dry_run or step.dry_run:
        request["dry_run"] = True
    status, response = send(request)
    if step.kind == "setup":
        assert "error" not in response, f"{where}: setup failed: {response['error']}"
    elif step.error is not None:
        check_error(step, response, text, where)
    else:
        check_result(step, response, text, refs, where)
    if status is not None:
        code = response["error"]["code"] if "error" in response else None
        want = 200 if code is None else STATUS.get(code, 400)
        assert status == want, f"{where}: HTTP {status} for {code or 'a result'}, want {want}"
    if before is not None:
        after = snapshot(send)
        if step.unchanged or step.error:
            assert after == before, f"{where}: the graph changed: {diff(before, after)}"
        if step.delta is not None:
            got = {kind: count(after, kind) - count(before, kind) for kind in ("concepts", "links")}
            want_delta = {"concepts": 0, "links": 0, **step.delta}
            assert got == want_delta, f"{where}: element counts changed by {got}"
    return None if "error" in response else response.get("next_cursor")


def check_result(step: Step, response: dict, text: str, refs: Refs, where: str) -> None:
    assert "error" not in response, f"{where}: unexpected error {response['error']}"
    if step.more:
        cursor = response.get("next_cursor")
        assert isinstance(cursor, str) and cursor, f"{where}: expected a next_cursor"
    else:
        assert "next_cursor" not in response, \
            f"{where}: unexpected next_cursor (use `--- expect ... more`)"
    if step.mode == "ignore":
        return
    actual = strip_engine_meta(response["result"])
    expected = refs.value(step.expect)
    assert same_result(actual, expected, step.mode, find_items(text)), (
        f"{where}: result differs ({step.mode})\n"
        f"  expected: {json.dumps(expected, ensure_ascii=False)}\n"
        f"  actual:   {json.dumps(actual, ensure_ascii=False)}")


def check_error(step: Step, response: dict, text: str, where: str) -> None:
    err = response.get("error")
    assert err is not None, f"{where}: expected {step.error}, got {response}"
    assert err["code"] == step.error, f"{where}: expected {step.error}, got {err}"
    assert err.get("message") and err.get("hint"), f"{where}: {err}"
    for part in step.message:
        assert part in err["message"], f"{where}: {part!r} not in {err['message']!r}"
    for part in step.hint:
        assert part in err["hint"], f"{where}: {part!r} not in {err['hint']!r}"
    if step.at is not None:
        check_position(err, text, step.at, where)


def check_position(err: dict, text: str, at: tuple[int, int], where: str) -> None:
    """`data` has the line and column, and a snippet: the line, a caret under the column."""
    data = err.get("data") or {}
    assert (data.get("line"), data.get("column")) == at, f"{where}: at {data}, want {at}"
    snippet = data.get("snippet")
    assert isinstance(snippet, str) and "\n" in snippet, f"{where}: snippet {snippet!r}"
    source, caret = snippet.rsplit("\n", 1)
    assert caret.strip() == "^", f"{where}: snippet {snippet!r}"
    lines = text.split("\n")
    line = lines[at[0] - 1].rstrip("\r") if at[0] <= len(lines) else ""
    if len(line) <= 120:        # not clipped: the caret sits exactly under the column
        assert source == line.expandtabs(1), f"{where}: snippet {snippet!r}"
        assert caret == " " * (at[1] - 1) + "^", f"{where}: snippet {snippet!r}"
    else:
        assert len(source) <= 120, f"{where}: snippet line not clipped: {source!r}"


def check_state(entries: list[StateEntry], refs: Refs, where: str) -> None:
    for entry in entries:
        element = refs.element(entry.ref)
        name = f"{where}: state of {ref_text(entry.ref)}"
        if entry.absent:
            assert element is None, f"{name}: should be absent, is {element}"
            continue
        assert element is not None, f"{name}: should exist"
        attributes = element.get("attributes", {})
        metadata = element.get("metadata", {})
        want = entry.want
        if "attributes" in want:
            assert canon(attributes) == canon(want["attributes"]), f"{name}: {attributes}"
        for key, value in want.get("metadata", {}).items():
            assert key in metadata and canon(metadata[key]) == canon(value), \
                f"{name}: metadata {key} in {metadata}"
        for key in want.get("metadata_absent", ()):
            assert key not in metadata, f"{name}: metadata {key} in {metadata}"
        if "version" in want:
            assert metadata.get("_version") == want["version"], f"{name}: {metadata}"
        for key in ("_created_at", "_updated_at"):
            assert TIMESTAMP.fullmatch(str(metadata.get(key))), f"{name}: {metadata}"


# --- id references, resolved with FIND ---------------------------------------------------

class Refs:
    """Resolves `@C(...)` / `@P(...)` / `@N(...)` against the target. Lookups are cached
    only on shared (read-only) databases: in a case that writes, an element can come and go."""

    def __init__(self, send: Send, cache: bool) -> None:
        self.send = send
        self.cache: dict[tuple, dict | None] | None = {} if cache else None

    def element(self, ref: tuple | str) -> dict | None:
        """The element (as FIND returns it) that `ref` names, or None."""
        if isinstance(ref, str):
            ref = ("C", ref)
        if ref[0] == "N":
            return self.element(ref[1])
        if self.cache is not None and ref in self.cache:
            return self.cache[ref]
        if ref[0] == "C":
            type_, _, name = ref[1].partition(":")
            found = self.find("FIND(?x) WHERE { ?x {type: :t, name: :n} }",
                              {"t": type_, "n": name})
        else:
            ends = [self.element(end) for end in (ref[1], ref[3])]
            if None in ends:
                found = []
            else:
                s, o = (f"{{id: :{v}}}" if e["id"].startswith("C:") else f"(id: :{v})"
                        for e, v in zip(ends, "so"))
                found = self.find(f"FIND(?x) WHERE {{ ?x ({s}, :p, {o}) }}",
                                  {"s": ends[0]["id"], "p": ref[2], "o": ends[1]["id"]})
        element = found[0] if found else None
        if self.cache is not None:
            self.cache[ref] = element
        return element

    def find(self, command: str, params: dict) -> list:
        _, response = self.send({"command": command, "parameters": params})
        if response.get("error", {}).get("code") == "KIP_3002":
            return []           # a mandatory {type, name} clause that matches nothing
        assert "error" not in response, f"looking up {params}: {response}"
        return response["result"]

    def id(self, ref: tuple) -> str:
        element = self.element(ref)
        if element is None:
            raise AssertionError(f"no element {ref_text(ref)} in the database")
        return element["id"].split(":")[1] if ref[0] == "N" else element["id"]

    def text(self, text: str) -> str:
        if "@" not in text:
            return text
        return "".join(p if isinstance(p, str) else self.id(p) for p in split_refs(text))

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        return value


# --- the whole graph, with FIND ----------------------------------------------------------

def snapshot(send: Send) -> dict[str, dict]:
    """Every concept of every defined type and every link of every defined predicate, by id
    (two batch requests: the names, then one FIND per name)."""
    names = "FIND(?d.name) WHERE { ?d {type: :t} }"
    kinds = {"$ConceptType": "?x {type: :t}", "$PropositionType": "?x (?s, :t, ?o)"}
    listed = _batch(send, [(names, meta) for meta in kinds])
    finds = [(f"FIND(?x) WHERE {{ {pattern} }}", name)
             for pattern, found in zip(kinds.values(), listed) for name in found]
    return {x["id"]: x for found in _batch(send, finds) for x in found}


def _batch(send: Send, commands: list[tuple[str, str]]) -> list[list]:
    if not commands:
        return []
    _, response = send({"commands": [{"command": c, "parameters": {"t": t}}
                                     for c, t in commands]})
    assert "error" not in response, response
    for one in response["result"]:
        assert "error" not in one and "next_cursor" not in one, one
    return [one["result"] for one in response["result"]]


def count(snap: dict[str, dict], kind: str) -> int:
    return sum(1 for k in snap if k.startswith("C:" if kind == "concepts" else "P:"))


def diff(before: dict, after: dict) -> str:
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    return "; ".join(f"{k}: {before.get(k)} → {after.get(k)}" for k in changed[:5])


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
    """A total order over JSON values that keeps 1, 1.0 and true apart (JSON types matter)."""
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
    if not all(isinstance(c, list) for c in result) or len({len(c) for c in result}) > 1:
        return None
    return [list(r) for r in zip(*result)]


def same_result(actual: Any, expected: Any, mode: str, n_items: int) -> bool:
    if mode == "ordered":
        return canon(actual) == canon(expected)
    a, e = as_rows(actual, n_items), as_rows(expected, n_items)
    if a is None or e is None:
        return canon(actual) == canon(expected)
    return sorted(map(canon, a)) == sorted(map(canon, e))


_FIND = re.compile(r"\s*(?://[^\n]*\s*)*FIND\s*\(")


def find_items(text: str) -> int:
    """How many expressions a FIND command projects (1 for anything else): the top-level
    commas inside `FIND( ... )`, read from the text."""
    m = _FIND.match(text)
    if m is None:
        return 1
    depth, items, i, quoted = 1, 1, m.end(), False
    while i < len(text) and depth:
        ch = text[i]
        if quoted:
            if ch == "\\":
                i += 1
            elif ch == '"':
                quoted = False
        elif ch == '"':
            quoted = True
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 1 and text[i + 1:].lstrip()[:1] != ")":
            items += 1
        i += 1
    return items
