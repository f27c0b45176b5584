"""The version log's `swept` block (docs/history.md): an UPDATE's metadata-only changes are
kept as columns, not a "u" change per element — and every reader of the log answers
exactly as with the per-element form. Differential: the same random command sequence run
twice under a fixed clock, once with the block (`log.SWEPT_BLOCK`) and once without (the
record format before it, which old logs hold): the decoded records, `FIND … AS OF VERSION`
at every version, each element's `DESCRIBE HISTORY`, REVERT of each UPDATE, the log
check and retention must give the same answers; a record without the block stays readable.
"""
from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nexus import Nexus, engine
from nexus.history import log

SCHEMA = '''UPSERT {
  CONCEPT ?d { {type: "$ConceptType", name: "Drug"} SET ATTRIBUTES { description: "a drug" } }
  CONCEPT ?t { {type: "$PropositionType", name: "treats"} SET ATTRIBUTES { description: "t" } }
}'''
NAMES = ["A", "B", "C", "D"]
KEYS = ["memory_strength", "source", "tag"]
VALUES = ["0", "1", "0.5", '"x"', '"y"', "null", "[1, 2]", '{"k": 1}']

upsert = st.builds(
    lambda name, key, value: (f'UPSERT {{ CONCEPT ?x {{ {{type: "Drug", name: "{name}"}} '
                              f'SET ATTRIBUTES {{ w: 1 }} }} }} WITH METADATA {{ {key}: {value} }}'),
    st.sampled_from(NAMES), st.sampled_from(KEYS), st.sampled_from(VALUES))
link = st.builds(
    lambda s, o, key, value: (
        f'UPSERT {{ CONCEPT ?s {{ {{type: "Drug", name: "{s}"}} }} '
        f'CONCEPT ?o {{ {{type: "Drug", name: "{o}"}} }} '
        f'PROPOSITION ?l {{ (?s, "treats", ?o) }} }} WITH METADATA {{ {key}: {value} }}'),
    st.sampled_from(NAMES), st.sampled_from(NAMES), st.sampled_from(KEYS),
    st.sampled_from(VALUES))
sets = st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(
    VALUES + ["CLAMP(MUL(COALESCE(?t.metadata.memory_strength, 0.7), 0.9), 0.0, 1.0)",
              "ADD(?t.metadata.memory_strength, 1)"])), min_size=1, max_size=3,
    unique_by=lambda kv: kv[0])
update = st.builds(
    lambda kvs, on_links: (
        "UPDATE ?t SET METADATA { " + ", ".join(f"{k}: {v}" for k, v in kvs) + " } WHERE { "
        + ('?t (?s, "treats", ?o)' if on_links else '?t {type: "Drug"}') + " }"),
    sets, st.booleans())
also_attributes = st.builds(
    lambda key: f'UPDATE ?t SET ATTRIBUTES {{ w: 2 }} SET METADATA {{ {key}: "z" }} '
                f'WHERE {{ ?t {{type: "Drug"}} }}',
    st.sampled_from(KEYS))
drop_link = st.builds(
    lambda s: f'DELETE PROPOSITIONS ?l WHERE {{ ?l ({{type: "Drug", name: "{s}"}}, "treats", ?o) }}',
    st.sampled_from(NAMES))
commands = st.lists(st.one_of(upsert, link, link, update, update, update, also_attributes,
                              drop_link), min_size=1, max_size=10)

NODES = 'FIND(?d.name, ?d.attributes, ?d.metadata) WHERE { ?d {type: "Drug"} }'
LINKS = 'FIND(?s.name, ?o.name, ?l.metadata) WHERE { ?l (?s, "treats", ?o) ?s {type: "Drug"} }'


def answer(nx: Nexus, command: str, **params) -> str:
    """The whole response, as canonical text (errors included: they must agree too)."""
    return json.dumps(nx.execute_kip({"command": command, "parameters": params}),
                      sort_keys=True)


def run(sequence: list[str], block: bool, monkeypatch: pytest.MonkeyPatch,
        path: str | None = None) -> dict[str, object]:
    """Everything the log's readers answer after `sequence`, with or without the block."""
    ticks = itertools.count()
    monkeypatch.setattr(engine, "now_iso",
                        lambda: f"2026-11-28T12:{next(ticks) // 60:02d}:{next(ticks) % 60:02d}.000Z")
    monkeypatch.setattr(log, "SWEPT_BLOCK", block)
    nx = Nexus.open(path)
    try:
        out: dict[str, object] = {"schema": answer(nx, SCHEMA)}
        out["commands"] = [answer(nx, c) for c in sequence]
        with nx.read_session() as ctx:
            last = log.last_seq(ctx.txn)
            entries = [log.read_entry(ctx.txn, s) for s in range(1, last + 1)]
            out["entries"] = [None if e is None else (e.seq, e.kind, e.changes, e.fresh, e.runs)
                              for e in entries]
            ids = sorted({c[0] for e in entries if e is not None for c in e.changes})
            out["last_change"] = [log.last_change(ctx.txn, n) for n in ids]
            out["check"] = log.check_log(ctx.txn)
        out["as_of"] = [(answer(nx, f"{NODES} AS OF VERSION {s}"),
                         answer(nx, f"{LINKS} AS OF VERSION {s}")) for s in range(1, last + 1)]
        out["log"] = answer(nx, "DESCRIBE HISTORY LIMIT 100")
        out["histories"] = [answer(nx, f'DESCRIBE HISTORY {{id: "C:{n}"}}') for n in ids] + \
            [answer(nx, f'DESCRIBE HISTORY (id: "P:{n}:treats")') for n in ids]
        # REVERT of the newest command, then of every UPDATE the log still allows.
        out["reverts"] = [answer(nx, 'REVERT COMMAND :s REASON "r"', s=s)
                          for s in range(last, 1, -1)]
        out["after"] = (answer(nx, NODES), answer(nx, LINKS), nx.check()["ok"])
        nx.compact_history(-3600)
        out["compacted"] = answer(nx, "DESCRIBE HISTORY LIMIT 100")
        return out
    finally:
        nx.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(commands)
def test_the_swept_block_reads_back_as_the_per_element_changes(monkeypatch, sequence):
    assert run(sequence, True, monkeypatch) == run(sequence, False, monkeypatch)


def test_a_sweep_on_disk_reads_back_the_same_and_the_block_is_used(monkeypatch, tmp_path):
    sequence = [
        'UPSERT { CONCEPT ?s { {type: "Drug", name: "A"} } CONCEPT ?o { {type: "Drug", '
        'name: "B"} } PROPOSITION ?l { (?s, "treats", ?o) } } WITH METADATA { tag: "x" }',
        'UPDATE ?t SET METADATA { memory_strength: CLAMP(MUL(COALESCE('
        '?t.metadata.memory_strength, 0.7), 0.9), 0.0, 1.0), tag: "x" } WHERE { ?t {type: "Drug"} }',
        'UPDATE ?t SET METADATA { memory_strength: ADD(?t.metadata.memory_strength, 1) } '
        'WHERE { ?t (?s, "treats", ?o) }',
    ]
    new = run(sequence, True, monkeypatch, str(tmp_path / "new"))
    old = run(sequence, False, monkeypatch, str(tmp_path / "old"))
    assert new == old
    assert json.loads(new["commands"][1])["result"]["updated"] == 2
    # the block is what the new record holds; the old form, a "u" change per element
    for block, path in ((True, "new2"), (False, "old2")):
        monkeypatch.setattr(log, "SWEPT_BLOCK", block)
        with Nexus.open(str(tmp_path / path)) as nx:
            for command in [SCHEMA] + sequence:
                assert "result" in nx.execute_kip({"command": command})
            with nx.read_session() as ctx:
                raw = ctx.txn.aux(log.LOG).get(log._SEQ.pack(log.last_seq(ctx.txn)))
            import msgpack
            record = msgpack.unpackb(raw, raw=False)
            assert ("swept" in record) is block
            assert (record["changes"] == []) is block


def dump(path: str) -> dict[bytes, list[tuple[bytes, bytes]]]:
    """Every table of a closed LMDB database, key by key (its raw bytes)."""
    import lmdb
    env = lmdb.open(path, readonly=True, lock=False, max_dbs=64, subdir=True)
    try:
        with env.begin() as txn:
            names = [k for k, _ in txn.cursor()]
        out = {}
        for name in names:
            db = env.open_db(name, create=False)
            with env.begin(db=db) as txn:
                out[name] = list(txn.cursor())
        return out
    finally:
        env.close()


def test_a_failed_sweep_leaves_the_store_byte_identical(tmp_path):
    # a sweep committed with the block, then a sweep failing in a later batch (a protected
    # CoreSchema domain among its targets, KIP_3004): no table differs by a byte
    path = str(tmp_path / "db")
    with Nexus.open(path) as nx:
        assert "result" in nx.execute_kip({"command": SCHEMA})
        nx.bulk_import(({"type": "Drug", "name": f"d{i}"} for i in range(300)),
                       ({"subject": {"type": "Drug", "name": f"d{i}"}, "predicate": "treats",
                         "object": {"type": "Drug", "name": f"d{i + 1}"}} for i in range(299)))
        assert nx.execute_kip({"command": 'UPDATE ?t SET METADATA { tag: "a" } '
                               'WHERE { ?t (?s, "treats", ?o) }'})["result"]["updated"] == 299
    before = dump(path)
    assert any(b"history" in name for name in before)
    with Nexus.open(path) as nx, nx.read_session() as ctx:
        import msgpack
        raw = ctx.txn.aux(log.LOG).get(log._SEQ.pack(log.last_seq(ctx.txn)))
        block = msgpack.unpackb(raw, raw=False)["swept"]
        # one shape: a column per restored key; the old `_updated_at`s as distinct values
        assert len(block["n"]) == 299 and len(block["k"]) == 1 and "x" not in block
        assert any(type(c) is dict and len(c["d"]) == 1 for c in block["c"])
    before = dump(path)
    with Nexus.open(path) as nx:
        response = nx.execute_kip({"command": (
            'UPDATE ?x SET METADATA { tag: "b" } WHERE { ?x (?a, "treats", ?b) '
            'UNION { ?x {type: "Domain", name: "CoreSchema"} } }')})
        assert response["error"]["code"] == "KIP_3004", response
    assert dump(path) == before
