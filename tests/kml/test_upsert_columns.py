"""Loader-shaped UPSERT commands run column-wise (`nexus.exec.upsert_columns`) write what
the block-by-block path writes, and fail the same way.

KIP states one meaning for an UPSERT (spec §4.1, CONTRACT §3, §7): the column-wise executor
is an implementation of it, not a second semantics. The differential test sends the same
random commands — loader-shaped most of the time, with existing concepts, repeated
concepts and links, bad types, unknown predicates, missing targets, `_` keys, empty names,
nested values — to two databases, one with the column path and one without, and requires
the same answers (result or error code and message), the same graph (ids, heads, attributes,
metadata with `_version` / `_created_at` / `_updated_at`) and the same version-log record.

The column side is the whole columnar path: the parser reads a loader-shaped text into
columns (`ast.ColumnUpsert`, nexus/syntax/fastclause.py) and the executor consumes them.
The normal side parses every text into a tree (the columnar reader switched off, the parse
cache emptied) and runs it block by block.
"""
from __future__ import annotations

from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nexus import engine
from nexus.api import Nexus
from nexus.exec import upsert_columns
from nexus import history
from nexus.syntax import ast as A
from nexus.timestamps import stamp_ms, stamp_text
from nexus.syntax import fastparse, parse, parser

SCHEMA = """
UPSERT {
  CONCEPT ?drug { {type: "$ConceptType", name: "Drug"} SET ATTRIBUTES { description: "a drug" } }
  CONCEPT ?sym { {type: "$ConceptType", name: "Symptom"} SET ATTRIBUTES { description: "s" } }
  CONCEPT ?empty { {type: "$ConceptType", name: "Unused"} SET ATTRIBUTES { description: "u" } }
  CONCEPT ?treats { {type: "$PropositionType", name: "treats"} SET ATTRIBUTES { description: "t" } }
  CONCEPT ?causes { {type: "$PropositionType", name: "causes"} SET ATTRIBUTES { description: "c" } }
}
"""
SEED = """
UPSERT {
  CONCEPT ?a { {type: "Drug", name: "a"} SET ATTRIBUTES { x: 1, keep: "yes" } }
  CONCEPT ?s { {type: "Symptom", name: "s"} SET PROPOSITIONS { ("causes", {type: "Drug", name: "a"}) } }
  CONCEPT ?b { {type: "Drug", name: "b"} SET PROPOSITIONS { ("treats", {type: "Symptom", name: "s"}) } }
} WITH METADATA { source: "seed", confidence: 0.5 }
"""

TYPES = ["Drug", "Drug", "Symptom", "Symptom", "Unused", "Nope", "$ConceptType", "Person",
         "Domain"]
NAMES = ["a", "b", "c", "d", "s", "t", "", " ", "$self", "CoreSchema", "Drug"]
PREDICATES = ["treats", "treats", "causes", "nope", "belongs_to_domain"]
KEYS = ["x", "y", "keep", "source", "_z", "bad key"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text("ab", max_size=3),
                    st.sampled_from([0.5, 1e300, 2 ** 64, -2 ** 63]))
VALUES = st.one_of(SCALARS, SCALARS, SCALARS, st.lists(st.integers(0, 3), max_size=2),
                   st.dictionaries(st.sampled_from(["k"]), st.integers(0, 2), max_size=1))
MAPS = st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=3)
# A loader's command: defined types and predicates, identifier keys, scalar values.
CLEAN = {"types": ["Drug", "Symptom"], "names": ["a", "b", "c", "d", "s", "t"],
         "predicates": ["treats", "causes"],
         "maps": st.dictionaries(st.sampled_from(["x", "y", "keep", "source"]),
                                 st.one_of(st.none(), st.booleans(), st.integers(-5, 5),
                                           st.text("ab", max_size=3)), max_size=3)}


class Writer:
    """Text and parameters of one command, each value a literal or a placeholder."""

    def __init__(self, draw: Any, clean: bool) -> None:
        self.draw = draw
        self.clean = clean
        self.params: dict[str, Any] = {}

    def pick(self, pool: list[str], kind: str) -> str:
        return self.value(self.draw(st.sampled_from(CLEAN[kind] if self.clean else pool)))

    def value(self, value: Any, literal_ok: bool = True) -> str:
        if literal_ok and self.draw(st.booleans()):
            return _literal(value)
        name = f"v{len(self.params)}"
        self.params[name] = value
        return ":" + name

    def map(self) -> str:
        data = self.draw(CLEAN["maps"] if self.clean else MAPS)
        if self.draw(st.booleans()):
            return self.value(data, literal_ok=False)
        return "{" + ", ".join(f"{k}: {self.value(v)}" if k.isidentifier() else
                               f"{_literal(k)}: {self.value(v)}"
                               for k, v in data.items()) + "}"


def _literal(value: Any) -> str:
    import json
    return json.dumps(value)


@st.composite
def commands(draw: Any) -> tuple[str, dict]:
    clean = draw(st.integers(0, 3)) > 0       # mostly what a loader sends
    w = Writer(draw, clean)
    statements = []
    for _ in range(draw(st.integers(1, 2))):
        blocks = []
        links = draw(st.integers(0, 2)) == 0     # the other loader shape: PROPOSITION blocks
        for b in range(draw(st.integers(1, 5))):
            if links or (not clean and draw(st.integers(0, 8)) == 0):
                blocks.append(_proposition_block(draw, w, clean, b))
                continue
            head = f"{{type: {w.pick(TYPES, 'types')}, name: {w.pick(NAMES, 'names')}}}"
            if not clean and draw(st.integers(0, 10)) == 0:
                head = f'{{id: {w.value("C:1")}}}'
            handle = f"?h{b} " if not clean and draw(st.integers(0, 5)) == 0 else ""
            parts = [f"CONCEPT {handle}{{ {head}"]
            if not clean and draw(st.integers(0, 8)) == 0:
                parts.append(f"EXPECT VERSION {draw(st.integers(0, 2))}")
            if draw(st.booleans()):
                parts.append(f"SET ATTRIBUTES {w.map()}")
            if draw(st.booleans()):
                entries = []
                for _ in range(draw(st.integers(1, 4))):
                    target = (f"{{type: {w.pick(TYPES, 'types')}, "
                              f"name: {w.pick(NAMES, 'names')}}}")
                    entry = f"({w.pick(PREDICATES, 'predicates')}, {target})"
                    if draw(st.booleans()):
                        entry += f" WITH METADATA {w.map()}"
                    entries.append(entry)
                parts.append("SET PROPOSITIONS { " + ", ".join(entries) + " }")
            parts.append("}")
            if draw(st.booleans()):
                parts.append(f"WITH METADATA {w.map()}")
            blocks.append(" ".join(parts))
        text = "UPSERT { " + "\n".join(blocks) + " }"
        if draw(st.booleans()):
            text += f" WITH METADATA {w.map()}"
        statements.append(text)
    # One statement per command most of the time (the loader's), sometimes two.
    return "\n".join(statements[:1] if draw(st.booleans()) else statements), w.params


def _proposition_block(draw: Any, w: Writer, clean: bool, b: int) -> str:
    ends = [f"{{type: {w.pick(TYPES, 'types')}, name: {w.pick(NAMES, 'names')}}}"
            for _ in range(2)]
    handle = f"?h{b} " if not clean and draw(st.integers(0, 5)) == 0 else ""
    parts = [f"PROPOSITION {handle}{{ ({ends[0]}, {w.pick(PREDICATES, 'predicates')}, "
             f"{ends[1]})"]
    if not clean and draw(st.integers(0, 8)) == 0:
        parts.append(f"EXPECT VERSION {draw(st.integers(0, 2))}")
    if draw(st.booleans()):
        parts.append(f"SET ATTRIBUTES {w.map()}")
    parts.append("}")
    if draw(st.booleans()):
        parts.append(f"WITH METADATA {w.map()}")
    return " ".join(parts)


def _dump(nx: Nexus) -> list[tuple]:
    with nx.store.read() as txn:
        return [(n, txn.head(n), txn.attributes(n), txn.metadata(n))
                for n in sorted(txn.elements())]


SEARCH_TABLES = ("lex", "lexdoc", "gram")     # the SEARCH index's rows (nexus.search)


def _search_rows(nx: Nexus) -> list[tuple[str, list]]:
    """Every row of the SEARCH index's tables: the column path indexes what it creates
    from its own columns (lexical_cols), the block path reads each element back; both
    must write the same rows."""
    with nx.store.read() as txn:
        return [(table, list(txn.aux(table).scan())) for table in SEARCH_TABLES]


def _last_log(nx: Nexus) -> Any:
    with nx.store.read() as txn:
        if not history.is_enabled(txn):
            return None
        entry = history.read_entry(txn, history.last_seq(txn))
        return None if entry is None else (entry.changes, entry.fresh)


def _declined(*args: Any) -> None:
    return None


def _run(nx: Nexus, column_path: bool, text: str, params: dict) -> dict:
    """Run a command on the column path (columns read by the parser, run column-wise) or
    on the normal one (a tree from the parser, run block by block)."""
    upsert_columns.ENABLED = column_path
    reader = fastparse.clause_columns
    parser._PARSED.clear()
    if not column_path:
        fastparse.clause_columns = _declined      # type: ignore[assignment]
    try:
        response = nx.execute_kip({"command": text, "parameters": params})
    finally:
        upsert_columns.ENABLED = True
        fastparse.clause_columns = reader       # type: ignore[assignment]
        parser._PARSED.clear()
    response.pop("metrics", None)
    return response


# The pair's clock: the engine's format (milliseconds), moved on by each example, the same
# for both databases (so `_updated_at` both equals and differs from the time of a write).
_CLOCK = [stamp_ms("2026-11-28T12:00:00.000Z") or 0]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Nexus, Nexus]]:
    mp = pytest.MonkeyPatch()
    mp.setattr(engine, "now_iso", lambda: stamp_text(_CLOCK[0]))
    base = tmp_path_factory.mktemp("columns")
    fast, normal = Nexus.open(str(base / "fast")), Nexus.open(str(base / "normal"))
    for nx in (fast, normal):
        for text in (SCHEMA, SEED):
            assert "error" not in nx.execute_kip({"command": text}), text
    yield fast, normal
    fast.close()
    normal.close()
    mp.undo()


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(command=commands())
def test_column_path_equals_block_path(pair: tuple[Nexus, Nexus],
                                       command: tuple[str, dict]) -> None:
    fast, normal = pair
    text, params = command
    _CLOCK[0] += 250
    answer = _run(fast, True, text, params)
    expected = _run(normal, False, text, params)
    assert answer == expected, text
    assert _dump(fast) == _dump(normal), text
    assert _search_rows(fast) == _search_rows(normal), text
    assert _last_log(fast) == _last_log(normal), text


def test_loader_commands_take_the_column_path(tmp_path: Any, monkeypatch: Any) -> None:
    """The loader's two shapes (concepts with maps; links grouped by subject) are taken,
    applied twice (idempotent but for `_version`), and give the block path's graph."""
    taken: list[bool] = []
    run = upsert_columns.run_columns

    def spy(*args: Any) -> Any:
        out = run(*args)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(upsert_columns, "run_columns", spy)
    monkeypatch.setattr(engine, "now_iso", lambda: "2026-11-28T12:00:00Z")
    concepts = ("UPSERT { " + " ".join(
        f"CONCEPT {{ {{type: :t{j}, name: :n{j}}} SET ATTRIBUTES :a{j} }} WITH METADATA :m{j}"
        for j in range(4)) + " }",
        {**{f"t{j}": "Drug" if j % 2 else "Symptom" for j in range(4)},
         **{f"n{j}": f"e{j}" for j in range(4)},
         **{f"a{j}": {"rank": j, "label": f"l{j}"} for j in range(4)},
         **{f"m{j}": {"source": "load", "confidence": 0.9} for j in range(4)}})
    links = ("UPSERT { CONCEPT { {type: :st, name: :sn} SET PROPOSITIONS { "
             "(:p0, {type: :ot0, name: :on0}) WITH METADATA :m0, "
             "(:p1, {type: :ot1, name: :on1}) WITH METADATA :m1 } } }",
             {"st": "Drug", "sn": "e1", "p0": "treats", "ot0": "Symptom", "on0": "e0",
              "m0": {"source": "load"}, "p1": "causes", "ot1": "Symptom", "on1": "e2",
              "m1": {"source": "load", "confidence": 0.3}})
    # bench.loader.upsert_batches' links: PROPOSITION blocks between existing concepts.
    props = ("UPSERT { " + " ".join(
        f"PROPOSITION {{ ({{type: :st{j}, name: :sn{j}}}, :p{j}, {{type: :ot{j}, name: :on{j}}}) "
        f"}} WITH METADATA :m{j}" for j in range(2)) + " }",
        {"st0": "Drug", "sn0": "e3", "p0": "treats", "ot0": "Symptom", "on0": "e2",
         "m0": {"source": "load"}, "st1": "Drug", "sn1": "e1", "p1": "treats",
         "ot1": "Symptom", "on1": "e0", "m1": {"source": "again"}})
    # The concept commands and the grouped links are read as columns by the parser.
    assert type(parse(concepts[0]).command) is A.ColumnUpsert
    assert type(parse(links[0]).command) is A.ColumnUpsert
    dumps, rows = [], []
    for column_path in (True, False):
        nx = Nexus.open(str(tmp_path / f"db{column_path}"))
        try:
            assert "error" not in nx.execute_kip({"command": SCHEMA})
            taken.clear()
            for _ in range(2):
                for text, params in (concepts, links, props):
                    assert "error" not in _run(nx, column_path, text, params)
            dumps.append(_dump(nx))
            rows.append(_search_rows(nx))
            if column_path:
                assert taken == [True] * 6
        finally:
            nx.close()
    assert dumps[0] == dumps[1]
    assert rows[0] == rows[1]
    versions = [meta["_version"] for _, head, _, meta in dumps[0]
                if getattr(head, "name", None) in ("e0", "e1")]
    assert versions == [2, 4]     # e0: by the two concept commands; e1: by all four
    link = [meta for _, head, _, meta in dumps[0] if getattr(head, "object", None) ==
            next(n for n, h, _, _ in dumps[0] if getattr(h, "name", None) == "e0")]
    assert [m["source"] for m in link] == ["again"] and link[0]["_version"] == 4


@st.composite
def loader_commands(draw: Any) -> tuple[str, dict]:
    """Texts the parser reads as columns (one statement of `{type, name}` CONCEPT blocks,
    object placeholders for the maps), with values good and bad: undefined types and
    predicates, missing targets, protected names, repeated concepts and links, `_` keys,
    nested or out-of-range values, a number where a string goes, a missing parameter."""
    clean = draw(st.integers(0, 2)) > 0
    w = Writer(draw, clean)

    def obj() -> str:
        name = f"v{len(w.params)}"
        w.params[name] = draw(CLEAN["maps"] if clean else st.one_of(MAPS, st.integers()))
        return ":" + name

    def text(pool: list[str], kind: str) -> str:
        if not clean and draw(st.integers(0, 20)) == 0:
            return w.value(draw(st.sampled_from([5, None, ["a"]])), literal_ok=False)
        return w.pick(pool, kind)
    blocks = []
    for _ in range(draw(st.integers(1, 6))):
        parts = [f"CONCEPT {{ {{type: {text(TYPES, 'types')}, name: {text(NAMES, 'names')}}}"]
        if draw(st.booleans()):
            parts.append(f"SET ATTRIBUTES {obj()}")
        if draw(st.booleans()):
            entries = []
            for _ in range(draw(st.integers(0, 4))):
                entry = (f"({text(PREDICATES, 'predicates')}, {{type: {text(TYPES, 'types')}, "
                         f"name: {text(NAMES, 'names')}}})")
                if draw(st.booleans()):
                    entry += f" WITH METADATA {obj()}"
                entries.append(entry)
            parts.append("SET PROPOSITIONS { " + ",\n ".join(entries) + " }")
        parts.append("}")
        if draw(st.booleans()):
            parts.append(f"WITH METADATA {obj()}")
        blocks.append(" ".join(parts))
    if not clean and w.params and draw(st.integers(0, 10)) == 0:
        w.params.pop(draw(st.sampled_from(sorted(w.params))))
    return "UPSERT {\n" + "\n".join(blocks) + "\n}", w.params


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(command=loader_commands())
def test_columns_from_the_parser_equal_the_tree(pair: tuple[Nexus, Nexus],
                                                command: tuple[str, dict]) -> None:
    """The parser reads these texts as columns; run from them, they answer, write and log
    what the tree run block by block does (errors included: codes, messages, positions)."""
    fast, normal = pair
    text, params = command
    assert type(parse(text).command) is A.ColumnUpsert, text
    answer = _run(fast, True, text, params)
    expected = _run(normal, False, text, params)
    assert answer == expected, text
    assert _dump(fast) == _dump(normal), text
    assert _search_rows(fast) == _search_rows(normal), text
    assert _last_log(fast) == _last_log(normal), text


def test_subjects_bumped_in_place_or_as_maps(tmp_path: Any, monkeypatch: Any) -> None:
    """A links command bumps each subject's `_version` once: patched in the stored bytes
    when they are in the engine's fixed layout, as a map when not (here: a `_version` the
    patch cannot hold in 32 bits) — the same graph and version-log record as the block
    path, for both subjects of one command, at the time they were last written and later."""
    clock = ["2026-11-28T12:00:00.000Z"]       # (the engine's clock: milliseconds)
    monkeypatch.setattr(engine, "now_iso", lambda: clock[0])
    text = ("UPSERT { CONCEPT { {type: :s0t, name: :s0} SET PROPOSITIONS { "
            "(:p, {type: :ot, name: :on}) WITH METADATA :m } } "
            "CONCEPT { {type: :s1t, name: :s1} SET PROPOSITIONS { "
            "(:p, {type: :ot, name: :on}) } } }")
    params = {"s0t": "Drug", "s0": "a", "s1t": "Drug", "s1": "b", "p": "causes",
              "ot": "Symptom", "on": "s", "m": {"source": "x"}}
    assert type(parse(text).command) is A.ColumnUpsert
    seen = []
    for column_path in (True, False):
        nx = Nexus.open(str(tmp_path / f"db{column_path}"))
        try:
            for t in (SCHEMA, SEED):
                assert "error" not in nx.execute_kip({"command": t})
            with nx.store.write() as w:
                drug = w.intern("Drug")
                n = w.concept_id(drug, "a")
                meta = w.metadata(n)
                meta["_version"] = 2 ** 32 - 1
                w.set_metadata(n, meta)
            logs = []
            for later in ("2026-11-28T12:00:00.000Z", "2026-11-28T12:00:01.250Z"):
                clock[0] = later
                answer = _run(nx, column_path, text, params)
                assert "error" not in answer, answer
                logs.append(_last_log(nx))
            clock[0] = "2026-11-28T12:00:00.000Z"
            seen.append((answer, _dump(nx), logs))
            with nx.store.read() as r:
                versions = [r.metadata(r.concept_id(drug, name))["_version"]
                            for name in ("a", "b")]
        finally:
            nx.close()
        assert versions == [2 ** 32 + 1, 3], versions
    assert seen[0] == seen[1]


def _big_commands(n: int) -> list[tuple[str, dict]]:
    """A load's two command shapes, each over SMALL_WRITE elements (so that the search
    index derives the new documents from the command's columns, not left pending): `n`
    concepts with descriptions, then links grouped by subject to new and seeded ends."""
    concepts = ("UPSERT { " + " ".join(
        f"CONCEPT {{ {{type: :t{j}, name: :n{j}}} SET ATTRIBUTES :a{j} }} WITH METADATA :m{j}"
        for j in range(n)) + " }",
        {**{f"t{j}": "Drug" if j % 3 else "Symptom" for j in range(n)},
         **{f"n{j}": f"item {j} {'pain' if j % 2 else 'fever'}" for j in range(n)},
         **{f"a{j}": {"description": f"word{j % 5} shared", "rank": j} for j in range(n)},
         **{f"m{j}": {"source": "load", "confidence": 0.5} for j in range(n)}})
    blocks, params = [], {}
    for j in range(1, n, 3):        # Drug subjects: treats a Symptom, causes the seed's
        params |= {f"sn{j}": f"item {j} {'pain' if j % 2 else 'fever'}",
                   f"on{j}": f"item {j - 1} {'fever' if j % 2 else 'pain'}",
                   f"m{j}": {"source": "load"}}
        blocks.append(f"CONCEPT {{ {{type: \"Drug\", name: :sn{j}}} SET PROPOSITIONS {{ "
                      f"(\"treats\", {{type: \"Symptom\", name: :on{j}}}) WITH METADATA :m{j}, "
                      f"(\"causes\", {{type: \"Symptom\", name: \"s\"}}) }} }}")
    return [concepts, ("UPSERT { " + " ".join(blocks) + " }", params)]


def test_big_loader_commands_index_what_the_block_path_indexes(tmp_path: Any,
                                                                monkeypatch: Any) -> None:
    """Commands over SMALL_WRITE elements hand the search index their new elements'
    columns (`WriteContext.new_docs`): the rows it writes from them — postings, names,
    forward entries, trigram postings — are the block path's, byte for byte, when the
    commands create and when they run again and update."""
    from nexus.search.lexical import SMALL_WRITE
    monkeypatch.setattr(engine, "now_iso", lambda: "2026-11-28T12:00:00Z")
    commands = _big_commands(45)
    assert len(commands[1][1]) // 3 * 2 > SMALL_WRITE       # links created
    dumps, rows = [], []
    for column_path in (True, False):
        nx = Nexus.open(str(tmp_path / f"db{column_path}"))
        try:
            for text in (SCHEMA, SEED):
                assert "error" not in nx.execute_kip({"command": text})
            for _ in range(2):
                for text, params in commands:
                    assert "error" not in _run(nx, column_path, text, params)
            dumps.append(_dump(nx))
            rows.append(_search_rows(nx))
            found = nx.execute_kip({"command": 'SEARCH CONCEPT "word3" LIMIT 50'})["result"]
            assert len(found) == 9                  # items 3, 8, ..., 43
            assert nx.check(deep=True)["ok"] is True
        finally:
            nx.close()
    assert dumps[0] == dumps[1]
    assert rows[0] == rows[1]


def test_a_later_command_of_a_session_sees_its_own_changes_indexed(tmp_path: Any) -> None:
    """In one write session (a capsule load runs its statements so), a command that
    changes what an earlier column-wise command created: the search index indexes the
    elements as they are at the commit, not as the earlier command's columns had them."""
    nx = Nexus.open(str(tmp_path / "db"))
    try:
        for text in (SCHEMA, SEED):
            assert "error" not in nx.execute_kip({"command": text})
        (text, params), _ = _big_commands(30)
        with nx.write_session() as session:
            session.run(text, params)
            session.run('UPSERT { CONCEPT ?c { {type: "Drug", name: "item 4 fever"} '
                        'SET ATTRIBUTES { description: "omega" } } }')
            session.run('DELETE CONCEPT ?d DETACH WHERE { ?d {type: "Drug", name: "item 5 pain"} }')
        hits = nx.execute_kip({"command": 'SEARCH CONCEPT "omega" LIMIT 5'})["result"]
        assert [h["name"] for h in hits] == ["item 4 fever"]
        gone = nx.execute_kip({"command": 'SEARCH CONCEPT "item 5 pain" LIMIT 50'})["result"]
        assert "item 5 pain" not in [h["name"] for h in gone]
        assert nx.check(deep=True)["ok"] is True
    finally:
        nx.close()
