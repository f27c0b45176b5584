"""Fixtures for the META tests: a bootstrap database, and one with a capsule loaded."""
from __future__ import annotations

import os

import pytest

from nexus.api import Nexus

MEDICAL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "medical.kip")


@pytest.fixture
def boot():
    """A fresh in-memory nexus holding only the bundled bootstrap capsules."""
    nx = Nexus.open(None)
    yield nx
    nx.close()


@pytest.fixture
def medical(boot):
    """The bootstrap database plus `medical.kip` (a Medical domain, Drug/Symptom, treats)."""
    from nexus.ops.capsules import load_capsules
    [report] = load_capsules(boot, [MEDICAL])
    assert "error" not in report, report
    return boot


@pytest.fixture
def kip():
    """`kip(nx, command, **parameters)` → the whole response (result or error)."""
    def run(nx, command, **parameters):
        return nx.execute_kip_readonly({"command": command, "parameters": parameters})
    return run


@pytest.fixture
def ok(kip):
    """`ok(nx, command, **parameters)` → the result (an error fails the test)."""
    def run(nx, command, **parameters):
        response = kip(nx, command, **parameters)
        assert "error" not in response, response
        return response["result"]
    return run
