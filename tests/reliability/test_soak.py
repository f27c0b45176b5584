"""Load and soak against a real `kip serve` (see `soak`): 16 clients plus a garbage client;
no 5xx, no lost acknowledged write, no dry-run leak, bounded memory, clean shutdown, clean
indexes. CI runs ~8 s; `NEXUS_FULL=1` (or `python tests/reliability/soak.py --full`) 60 s."""
from __future__ import annotations

import pytest
from reliability_support import FULL, full_or
from soak import run_soak

MIB = 1024


@pytest.mark.slow
def test_soak(tmp_path):
    seconds = full_or(8.0, 60.0)
    summary = run_soak(str(tmp_path / "db"), seconds=seconds, clients=16)
    print(summary)
    assert summary.failures == []
    # Floors that say the soak did its work, far below what a slow, busy 2-core machine
    # serves (about 80 requests/s): the garbage client went through every kind of garbage
    # (34 of them) at least once.
    assert set(summary.statuses) == {200} and summary.requests >= full_or(100, 1000)
    assert not any(int(s) >= 500 for s in summary.garbage_statuses)
    assert summary.garbage_requests + summary.garbage_disconnects >= full_or(34, 340)
    assert summary.acknowledged_writes >= full_or(30, 300)
    assert summary.lost_writes == 0 and summary.dry_run_leaks == 0 and summary.dry_runs > 0
    assert summary.shutdown_status == 0 and summary.check_ok
    rss = summary.rss_kib
    # Anonymous memory (LMDB's file pages aside): caches fill up during the first seconds,
    # then growth must level off.
    assert rss["anon_growth"] < full_or(160, 200) * MIB, rss
    if FULL:
        assert rss["anon_growth_second_half"] < 64 * MIB, rss
