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
from nexus.check import verify


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
    kills = full_or(8, 120)
    summary = run_harness(str(tmp_path / "db"), seed=full_or(20261122, 7), kills=kills,
                          big=full_or(200, 300), window=full_or(1.0, 1.5))
    print(summary)
    assert summary.kills == kills
    assert summary.acknowledged_ops >= full_or(20, 1000)
    assert summary.op_kinds.get("large", 0) >= 1
    if FULL:
        assert summary.inflight_committed >= 1 and summary.early_kills >= 1
