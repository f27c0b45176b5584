"""Fixtures for the KQL tests: databases holding the test graphs, on both stores.

`kql_db(store, graph, **options)` returns an open `Nexus` (bootstrap off) holding the named
graph from `tests/kql/graphs/<graph>.kip` (or a generated graph, `GENERATED`), built once per
test session and per (store, graph, options): KQL never writes, so cases share databases.
`store` is "lmdb" (a directory under pytest's tmp dir, durable=False) or "memory".
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import kqlharness as H  # noqa: E402

from nexus.api import Nexus  # noqa: E402

STORES = ("lmdb", "memory")


def open_db(store: str, tmp_dir: Path | None, **options) -> Nexus:
    options.setdefault("bootstrap", False)
    if store == "memory":
        return Nexus.open(None, **options)
    assert tmp_dir is not None
    options.setdefault("durable", False)
    return Nexus.open(str(tmp_dir), **options)


# --- generated graphs (too big or too regular for a data file) ---------------------------

def gen_wide(nx: Nexus, n: int = 3000) -> None:
    """`n` concepts of type Node named w0..w{n-1}, each `next` → the following one."""
    with nx.store.write() as t:
        tid = t.intern("Node")
        pid = t.intern("next")
        ids = []
        for i in range(n):
            k = t.new_id()
            t.create_concept(k, tid, f"w{i}", {"i": i, "pad": "a" * 30}, {})
            ids.append(k)
        for a, b in zip(ids, ids[1:]):
            t.create_link(t.new_id(), a, pid, b, {}, {})


GENERATED = {"wide": gen_wide}


@pytest.fixture(scope="session")
def kql_db(tmp_path_factory):
    opened: dict[str, Nexus] = {}

    def get(store: str, graph: str | None, **options) -> Nexus:
        key = json.dumps([store, graph, options], sort_keys=True)
        nx = opened.get(key)
        if nx is None:
            tmp = tmp_path_factory.mktemp(f"kql-{graph or 'empty'}") if store == "lmdb" else None
            nx = open_db(store, tmp, **options)
            if graph in GENERATED:
                GENERATED[graph](nx)
            elif graph:
                H.load_graph(nx, graph)
            opened[key] = nx
        return nx

    yield get
    for nx in opened.values():
        nx.close()


@pytest.fixture(params=STORES)
def store_kind(request) -> str:
    return request.param
