"""Crash safety (see `crash_harness`): SIGKILL a writer of mixed KML at random moments; after
every reopen each acknowledged command is present whole, no unacknowledged command is
present in part, and every index agrees with the data. CI runs a short seeded form;
`NEXUS_FULL=1` (or `python tests/reliability/crash_harness.py --full`) runs ≥ 100 kills."""
from __future__ import annotations

import pytest
from reliability_support import FULL, full_or
from crash_harness import run_harness
from crash_ops import SCHEMA, Model, make_op, read_state

from nexus.api import Nexus
from nexus.ops.check import verify


def test_the_model_agrees_with_the_engine():
    """The harness's model of KML (merge rules, metadata precedence, cascades) against the
    engine, op by op, without crashes: a wrong model would make the crash test meaningless
    (or flaky)."""
    seed, ops, big = 11, full_or(120, 600), 40
    with Nexus.open(None) as nx:
        assert "result" in nx.execute_kip({"command": SCHEMA})
        model = Model()
        kinds = set()
        for i in range(ops):
            op = make_op(seed, i, model, big)
            response = nx.execute_kip(op.request())
            assert "result" in response, (i, op.kind, response, op.command[:500])
            op.apply(model)
            kinds.add(op.kind)
            if i % 10 == 9 or i == ops - 1:
                state, problems = read_state(nx)
                assert not problems, problems[:3]
                assert state == model.canonical(), f"op {i} ({op.kind}) diverged"
        assert kinds == {"upsert", "large", "del_concept", "del_group", "del_props",
                         "del_attr", "del_meta"}
        assert verify(nx, deep=True)["ok"]


@pytest.mark.slow
def test_sigkill_at_random_points(tmp_path):
    kills = full_or(4, 120)
    # LMDB's own synced commits (the log is the default: its run is the next test)
    summary = run_harness(str(tmp_path / "db"), seed=full_or(20261122, 7), kills=kills,
                          big=full_or(200, 300), window=full_or(1.0, 1.5), wal=False)
    print(summary)
    assert summary.kills == kills
    # every run killed after its first acknowledgement verified at least one op (how many
    # more depends on the machine's speed)
    assert summary.after_ack_kills >= 1
    assert summary.acknowledged_ops >= summary.after_ack_kills
    assert summary.op_kinds.get("large", 0) >= 1
    assert summary.vectors_compared >= summary.max_concepts      # vector content checked
    assert summary.history_checked >= 1         # the version log agrees with the graph too
    if FULL:
        assert summary.inflight_committed >= 1 and summary.early_kills >= 1


@pytest.mark.slow
def test_sigkill_with_the_write_ahead_log(tmp_path):
    """With the write-ahead log (LMDB without sync, one log append per commit, recovery on
    open) a killed writer loses nothing acknowledged and leaves no index drift either."""
    kills = full_or(3, 120)
    summary = run_harness(str(tmp_path / "db"), seed=full_or(41, 42), kills=kills,
                          big=full_or(150, 300), window=full_or(1.0, 1.5), wal=True)
    print(summary)
    assert summary.kills == kills
    assert summary.after_ack_kills >= 1
    assert summary.acknowledged_ops >= summary.after_ack_kills


@pytest.mark.slow
def test_sigkill_without_fsync_loses_nothing_acknowledged(tmp_path):
    """`durable=False` skips the fsync of each commit: an operating-system crash may lose
    the latest commits, but a killed process may not — its commits are in the page cache."""
    kills = full_or(2, 20)
    summary = run_harness(str(tmp_path / "db"), seed=full_or(31, 32), kills=kills, big=100,
                          window=0.6, early_share=0.0, durable=False)
    print(summary)
    assert summary.kills == kills and summary.acknowledged_ops >= 1


def test_acknowledgements_written_together_are_all_counted():
    """A writer that prints "ready" and two acknowledgements in one write before it is
    killed: the harness must count both. (A buffered reader's `readline()` read them all
    ahead and `communicate()` then read the pipe without them, so the second
    acknowledgement was lost and its committed request looked like one past the request in
    flight: "the database matches no prefix" on a busy machine.)"""
    import random
    import sys

    from crash_harness import _kill_cycle, _popen
    child = _popen([sys.executable, "-c",
                    "import os, time; os.write(1, b'ready\\nack 4\\nack 5\\n'); time.sleep(60)"])
    acks, before_ready = _kill_cycle(child, random.Random(1), early=False, after_ack=True,
                                     window=0.3)
    assert acks == [4, 5] and not before_ready


def test_the_generated_upserts_define_every_handle_they_use():
    """An UPSERT of the op generator that skips a repeated concept still names its handles
    by their blocks: every `?hN` a PROPOSITION uses is defined by a CONCEPT block of the same
    statement (seed 203's op 48 used an undefined ?h1, which the engine rightly refused)."""
    import re
    for seed in (203, *range(1, 25)):
        model = Model()
        for i in range(60):
            op = make_op(seed, i, model, 40)
            for statement in op.command.split("\nUPSERT")[:1]:
                defined = set(re.findall(r"CONCEPT (\?h\d+)", statement))
                used = set(re.findall(r"\?h\d+", statement))
                assert used <= defined, (seed, i, sorted(used - defined))
            op.apply(model)
