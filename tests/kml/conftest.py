"""Fixtures for the KML tests: every test runs on both stores (LMDB in a tmp dir, memory).

Verification reads the store directly (`nexus.store.read()`), not through FIND, so that these
tests state what KML wrote independently of the query engine.
"""
from __future__ import annotations

import os
import sys

import pytest

# The suite runs with --import-mode=importlib: make this directory's helper module
# (kml_support) importable by the test modules.
sys.path.insert(0, os.path.dirname(__file__))

from nexus.api import Nexus


@pytest.fixture(params=["lmdb", "memory"])
def store_kind(request) -> str:
    return request.param


@pytest.fixture
def open_nexus(store_kind, tmp_path):
    """`open_nexus(**options)` → a fresh Nexus of the parametrized kind (closed at teardown)."""
    opened = []

    def make(**options) -> Nexus:
        path = str(tmp_path / f"db{len(opened)}") if store_kind == "lmdb" else None
        nx = Nexus.open(path, **options)
        opened.append(nx)
        return nx

    yield make
    for nx in opened:
        nx.close()


@pytest.fixture
def nx(open_nexus) -> Nexus:
    return open_nexus()
