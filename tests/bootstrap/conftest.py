"""Fixtures for the bootstrap / capsule-loading / bulk-import tests, on both stores.

`open_nexus(**options)` opens a fresh Nexus (`name=` picks another LMDB directory); for LMDB, `open_nexus(reopen=True)` closes the
previous one and reopens the same directory (how "opening twice changes nothing" and
"never reset $self" are tested).
"""
from __future__ import annotations

import pytest

from nexus.api import Nexus


@pytest.fixture(params=["lmdb", "memory"])
def store_kind(request) -> str:
    return request.param


@pytest.fixture
def open_nexus(store_kind, tmp_path):
    opened: list[Nexus] = []

    def make(reopen: bool = False, name: str = "db", **options) -> Nexus:
        if store_kind == "memory":
            assert not reopen, "a memory nexus cannot be reopened"
            nx = Nexus.open(None, **options)
        else:
            if reopen:
                for old in opened:
                    old.close()
            nx = Nexus.open(str(tmp_path / name), **options)
        opened.append(nx)
        return nx

    yield make
    for nx in opened:
        nx.close()


@pytest.fixture
def nx(open_nexus) -> Nexus:
    return open_nexus()


@pytest.fixture
def lmdb_path(tmp_path) -> str:
    return str(tmp_path / "lmdb")
