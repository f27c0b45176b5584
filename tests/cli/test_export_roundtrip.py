"""`kip export` → `kip load` into a fresh database reproduces a 10k-concept graph exactly,
ids aside: same elements by identity, same attributes, same metadata minus engine `_` keys,
same links (higher-order ones included)."""
from __future__ import annotations

import json

from .conftest import build_graph, canonical_dump, run_kip


def test_export_load_round_trip_10k(tmp_path):
    src, dst, capsule = tmp_path / "src", tmp_path / "dst", tmp_path / "graph.kip"
    src.mkdir()
    counts = build_graph(src, concepts=10_000)
    assert counts["concepts_created"] == 10_000
    proc = run_kip("export", "--db", str(src), "-o", str(capsule))
    assert proc.returncode == 0, proc.stderr
    proc = run_kip("load", "--db", str(dst), str(capsule), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)[0]["concepts_created"] >= 10_000
    before, after = canonical_dump(src), canonical_dump(dst)
    assert len(before) > 15_000
    assert before.keys() == after.keys()
    assert [k for k in before if before[k] != after[k]] == []
    higher_order = [k for k in before if k.startswith('["L", ["L"')]
    assert len(higher_order) == 31
