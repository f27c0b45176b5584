"""`WriteTxn.set_metadata_many` (the UPDATE sweep's batched write).

Every test runs against every registered backend (conftest.py). What the protocol says: the
same as `set_metadata(n, map)` for every pair — the whole map replaced, `{}` removing it —
in one call; every element must exist, else KIP_3002 and nothing of the batch is written;
a repeated id keeps its last map.
"""
from __future__ import annotations

import pytest

from nexus.errors import ErrorCode, KipError


def test_replaces_the_maps_of_many_elements(graph):
    g = graph
    with g.store.write() as w:
        w.set_metadata_many([(g.l3, {"memory_strength": 0.5}), (g.aspirin, {"k": [1, "x"]}),
                             (g.l1, {"memory_strength": 0.25, "at": "2026-11-25"})])
        assert w.metadata(g.l3) == {"memory_strength": 0.5}      # the writer sees its writes
    with g.store.read() as r:
        assert r.metadata(g.l1) == {"memory_strength": 0.25, "at": "2026-11-25"}
        assert r.metadata(g.l3) == {"memory_strength": 0.5}
        assert r.metadata(g.aspirin) == {"k": [1, "x"]}
        assert r.metadata(g.ibu) == {"_version": 1}               # not in the batch
        assert r.attributes(g.l1) == {"confidence": 0.9}          # attributes untouched
        report = g.store.check_tables(r).report
        assert report["ok"], report


def test_an_empty_map_removes_it_and_a_repeated_id_keeps_its_last_map(graph):
    g = graph
    with g.store.write() as w:
        w.set_metadata_many([(g.aspirin, {}), (g.l2, {"a": 1}), (g.l2, {"a": 2})])
    with g.store.read() as r:
        assert r.metadata(g.aspirin) == {}
        assert r.metadata(g.l2) == {"a": 2}


@pytest.mark.parametrize("missing", [10_000, -1, 0])
def test_a_missing_element_fails_the_whole_batch(graph, missing):
    g = graph
    with g.store.write() as w:
        with pytest.raises(KipError) as err:
            w.set_metadata_many([(g.l1, {"a": 1}), (missing, {"a": 2}), (g.l2, {"a": 3})])
        assert err.value.code == ErrorCode.KIP_3002
        assert w.metadata(g.l1) == {}                             # nothing of the batch
        assert w.metadata(g.l2) == {}


def test_an_aborted_write_leaves_nothing(graph):
    g = graph
    w = g.store.write()
    with w:
        w.set_metadata_many([(g.l1, {"a": 1})])
        w.abort()
    with g.store.read() as r:
        assert r.metadata(g.l1) == {}
