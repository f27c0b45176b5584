"""Fixtures for the KQL tests: databases holding the test graphs, on both stores.

`kql_db(store, graph, **options)` returns an open `Nexus` (bootstrap off) holding the named
graph from `tests/cases/graphs/<graph>.kip` (or a generated graph, `GENERATED`), built once per
test session and per (store, graph, options): KQL never writes, so cases share databases.
`store` is "lmdb" (a directory under pytest's tmp dir, durable=False) or "memory".
`columnar` ("never" | "always" | None → the default) selects the FIND executor for the
test (nexus.exec.columnar); the database is shared by both, only the switch is set.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from kqlsupport import GENERATED, MODES, STORES, open_db  # noqa: E402,F401

from nexus.api import Nexus  # noqa: E402
from nexus.exec.columnar import default_mode  # noqa: E402

# The test graphs, shared with the `.kiptest` cases.
GRAPHS = Path(__file__).parents[1] / "cases" / "graphs"

@pytest.fixture(scope="session")
def kql_db(tmp_path_factory):
    opened: dict[str, Nexus] = {}

    def get(store: str, graph: str | None, columnar: str | None = None, **options) -> Nexus:
        key = json.dumps([store, graph, options], sort_keys=True)
        nx = opened.get(key)
        if nx is None:
            tmp = tmp_path_factory.mktemp(f"kql-{graph or 'empty'}") if store == "lmdb" else None
            nx = open_db(store, tmp, **options)
            if graph in GENERATED:
                GENERATED[graph](nx)
            elif graph:
                response = nx.execute_kip({"command": (GRAPHS / f"{graph}.kip").read_text()})
                assert "error" not in response, response
            opened[key] = nx
        nx.columnar = columnar or default_mode()
        return nx

    yield get
    for nx in opened.values():
        nx.close()


@pytest.fixture(params=STORES)
def store_kind(request) -> str:
    return request.param


@pytest.fixture(params=MODES)
def columnar(request) -> str:
    return request.param
