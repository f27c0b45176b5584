"""An UPDATE decay sweep over more targets than one write batch (RC11 §4.3 with the version
log, docs/history.md): one statement is one transaction and one log record — every link
decayed once, its `_version` bumped once, the whole sweep reverted by one REVERT COMMAND,
and a statement failing late leaves nothing written — on the memory and LMDB stores."""
from __future__ import annotations

import pytest

from nexus import Nexus
from nexus.exec import update

SCHEMA = '''UPSERT {
  CONCEPT ?t { {type: "$ConceptType", name: "Item"} SET ATTRIBUTES { description: "an item" } }
  CONCEPT ?p { {type: "$PropositionType", name: "next"} SET ATTRIBUTES { description: "n" } }
}'''
SWEEP = ('UPDATE ?l SET METADATA { memory_strength: CLAMP(MUL(COALESCE('
         '?l.metadata.memory_strength, 0.7), 0.9), 0.0, 1.0), decay_applied_at: :t } '
         'WHERE { ?l (?a, "next", ?b) }')
N = 260                 # links: more than two write batches of BATCH targets
BATCH = 100


@pytest.fixture(params=["memory", "lmdb"])
def nx(request, tmp_path):
    db = Nexus.open(None if request.param == "memory" else str(tmp_path / "db"))
    ok(db, SCHEMA)
    db.bulk_import(({"type": "Item", "name": f"item{i}"} for i in range(N + 1)),
                   ({"subject": {"type": "Item", "name": f"item{i}"}, "predicate": "next",
                     "object": {"type": "Item", "name": f"item{i + 1}"}} for i in range(N)))
    yield db
    db.close()


def ok(nx, command, **params):
    response = nx.execute_kip({"command": command, "parameters": params})
    assert "result" in response, response
    return response["result"]


def strengths(nx):
    rows = ok(nx, 'FIND(?l.metadata.memory_strength, ?l.metadata._version) '
                  'WHERE { ?l (?a, "next", ?b) } LIMIT 10000')
    assert len(rows[0]) == N                # one column per FIND item
    return {(None if s is None else round(s, 9), v) for s, v in zip(*rows)}


@pytest.fixture(autouse=True)
def small_batches(monkeypatch):
    monkeypatch.setattr(update, "CHUNK", BATCH)


def test_a_sweep_is_one_transaction_and_one_log_record(nx):
    assert N > 2 * update.CHUNK
    assert ok(nx, SWEEP, t="2026-11-25") == {"updated": N, "matched": N}
    assert strengths(nx) == {(0.63, 2)}
    assert ok(nx, SWEEP, t="2026-11-26") == {"updated": N, "matched": N}
    assert strengths(nx) == {(0.567, 3)}
    entry = ok(nx, "DESCRIBE HISTORY LIMIT 1")[0]
    assert entry["kind"] == "UPDATE"
    result = ok(nx, 'REVERT COMMAND :s REASON "decayed twice"', s=entry["seq"])
    assert result == {"reverted": entry["seq"], "restored": N, "removed": 0}
    assert strengths(nx) == {(0.63, 4)}
    assert nx.check()["ok"]


def test_a_sweep_failing_in_a_later_batch_writes_nothing(nx):
    # the protected CoreSchema domain comes after the links: the statement fails (KIP_3004)
    # once earlier batches were written — and none of them stays
    response = nx.execute_kip({"command": (
        'UPDATE ?x SET METADATA { memory_strength: 0.1 } WHERE { ?x (?a, "next", ?b) '
        'UNION { ?x {type: "Domain", name: "CoreSchema"} } }')})
    assert response["error"]["code"] == "KIP_3004", response
    assert strengths(nx) == {(None, 1)}
    assert ok(nx, "DESCRIBE HISTORY LIMIT 1")[0]["kind"] != "UPDATE"


def test_a_big_sweep_indexes_its_runs_of_ids_and_stays_readable(nx, monkeypatch):
    # a sweep over more than BULK_INDEX elements indexes runs of consecutive ids as ranges
    # (docs/history.md): every element's history, REVERT, the log check and retention
    # behave as with one index key per element
    from nexus.history import log
    monkeypatch.setattr(log, "BULK_INDEX", 50)
    monkeypatch.setattr(log, "RUN_MIN", 8)
    assert ok(nx, SWEEP, t="2026-11-25") == {"updated": N, "matched": N}
    seq = ok(nx, "DESCRIBE HISTORY LIMIT 1")[0]["seq"]
    with nx.read_session() as ctx:
        entry = log.read_entry(ctx.txn, seq)
        assert entry is not None and sum(b - a for a, b in entry.runs) == N
        assert ok(nx, "DESCRIBE HISTORY LIMIT 1")[0]["elements"] == N
        links = [c[0] for c in entry.changes]
        assert all(log.last_change(ctx.txn, n) == seq for n in links)
    link = ok(nx, 'FIND(?l) WHERE { ?l (?a, "next", ?b) } LIMIT 1')[0]
    versions = ok(nx, "DESCRIBE HISTORY (id: :id)", id=link["id"])["versions"]
    assert [v.get("version") for v in versions][:2] == [2, 1]
    assert nx.check()["ok"]
    assert ok(nx, SWEEP, t="2026-11-26") == {"updated": N, "matched": N}
    later = ok(nx, "DESCRIBE HISTORY LIMIT 1")[0]["seq"]
    refused = nx.execute_kip({"command": 'REVERT COMMAND :s REASON "r"',
                              "parameters": {"s": seq}})
    assert refused["error"]["code"] == "KIP_3005"      # changed since: the later sweep
    assert ok(nx, 'REVERT COMMAND :s REASON "r"', s=later)["restored"] == N
    assert strengths(nx) == {(0.63, 4)}
    assert nx.check()["ok"]
    nx.compact_history(-3600)               # everything older than an hour from now
    with nx.read_session() as ctx:
        assert list(ctx.txn.aux(log.BULK_CREATED).scan()) == []
        assert all(log.last_change(ctx.txn, n) is None for n in links)


def test_a_capped_sweep_and_its_marker_reruns_update_every_link_once(nx):
    # RC11 §4.3 "Iterating large sweeps": LIMIT caps the updates; a marker written by the
    # same statement and excluded by a FILTER lets re-runs traverse the rest, each link
    # once; the graph before the sweep stays readable AS OF the record before it
    before = ok(nx, "DESCRIBE HISTORY LIMIT 1")[0]["seq"]
    assert ok(nx, SWEEP + " LIMIT 7", t="c1") == {"updated": 7, "matched": 7}
    guarded = SWEEP.replace("WHERE { ?l (?a, \"next\", ?b) }", (
        'WHERE { ?l (?a, "next", ?b) FILTER(IS_NULL(?l.metadata.decay_applied_at) || '
        '?l.metadata.decay_applied_at != :t) }')) + " LIMIT :cap"
    assert guarded != SWEEP + " LIMIT :cap"
    total = 7
    while True:
        got = ok(nx, guarded, t="c1", cap=100)
        total += got["updated"]
        if got["updated"] < 100:
            break
    assert total == N
    assert strengths(nx) == {(0.63, 2)}
    old = ok(nx, 'FIND(?l.metadata.memory_strength) WHERE { ?l (?a, "next", ?b) } '
                 f'LIMIT 10000 AS OF VERSION {before}')
    assert old == [None] * N
    assert nx.check()["ok"]


def test_links_of_the_core_predicate_are_protected_from_a_sweep(nx):
    # RC11 §4.3: a protected match fails the whole statement (the CoreSchema's
    # belongs_to_domain links are protected system definitions, CONTRACT)
    response = nx.execute_kip({"command": 'UPDATE ?l SET METADATA { x: 1 } '
                                          'WHERE { ?l (?a, "belongs_to_domain", ?d) }'})
    assert response["error"]["code"] == "KIP_3004", response


def test_a_session_that_sweeps_then_deletes_a_link_logs_its_whole_state(nx):
    # the recorder does not read the heads of the elements a batch write leaves in place;
    # one deleted later in the same session is still logged (and restored) with its head
    link = ok(nx, 'FIND(?l) WHERE { ?l (?a, "next", ?b) } LIMIT 1')[0]["id"]
    n = int(link.split(":")[1])
    with nx.write_session() as session:
        txn = session.txn
        meta = txn.metadata(n)
        meta["memory_strength"] = 0.5
        txn.set_metadata_many([(n, meta)])
        assert txn.delete(n)
    seq = ok(nx, "DESCRIBE HISTORY LIMIT 1")[0]["seq"]
    assert ok(nx, 'FIND(COUNT(?l)) WHERE { ?l (?a, "next", ?b) }') == N - 1
    assert ok(nx, 'REVERT COMMAND :s REASON "undo"', s=seq)["restored"] == 1
    assert ok(nx, 'FIND(COUNT(?l)) WHERE { ?l (?a, "next", ?b) }') == N
    assert {s for s, _ in strengths(nx)} == {None}     # as it was before the session
    assert nx.check()["ok"]
