"""Fixtures for the reliability suites (crash safety, load/soak, hostile input, access
control, limits, `kip check`).

Every suite runs in a short, seeded form by default; `NEXUS_FULL=1` selects the full form
(≥ 100 SIGKILLs, a 60 s soak, thousands of fuzz inputs). The crash harness and the soak are
also scripts: `python tests/reliability/crash_harness.py --full`, `python
tests/reliability/soak.py --full`.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from nexus.api import Nexus  # noqa: E402
from reliability_support import seeded  # noqa: E402


@pytest.fixture(params=["memory", "lmdb"])
def any_nx(request, tmp_path):
    """A bootstrapped nexus with the fixture graph, on each store."""
    path = None if request.param == "memory" else str(tmp_path / "db")
    nx = Nexus.open(path, durable=False) if path else Nexus.open(None)
    yield seeded(nx)
    nx.close()


@pytest.fixture
def nx():
    with Nexus.open(None) as nexus:
        yield seeded(nexus)


@pytest.fixture(scope="module")
def shared_nx():
    """One seeded in-memory nexus for a module whose tests must leave it unchanged."""
    with Nexus.open(None) as nexus:
        yield seeded(nexus)
