"""Keeps `python -m bench` working: the whole benchmark end to end at a tiny N (not a
benchmark: no figure is asserted), plus the pieces that must stay exact — the workload
generator (gen.py's bytes) and the section-preserving RESULTS.md update."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import reference, report, workload  # noqa: E402

from bench import harness  # noqa: E402

PEERS_DIR = ROOT.parent / "shared" / "peers"
GEN_PY = PEERS_DIR / "gen.py"
# With the peer harness beside the repository, the smoke run includes it (Oxigraph only:
# the quickest peer to import), so the plug-in and the cross-check keep working too.
WITH_HARNESS = (PEERS_DIR / "bench_peers.py").is_file() and harness.installed("oxigraph")


def run_bench(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "result.json"
    argv = [sys.executable, "-m", "bench", "--n", "300", "--no-write", "--out", str(out),
            "--data", str(tmp_path / "data"), "--workdir", str(tmp_path / "work"),
            "--budget", "0.02", "--min-reps", "2", "--hard-cap", "0.5", "--upserts", "12",
            "--search-queries", "6", "--search-passes", "1", "--mixed-iterations", "5",
            *extra]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc, json.loads(out.read_text(encoding="utf-8"))


def test_bench_end_to_end_tiny(tmp_path):
    before = (ROOT / "bench" / "RESULTS.md").read_bytes()
    peers = ["--peers", "oxigraph", "--peers-dir", str(PEERS_DIR)] if WITH_HARNESS \
        else ["--peers", "none"]
    proc, result = run_bench(tmp_path, *peers)
    run = result["runs"]["300"]
    assert run["verification"]["ok"], run["verification"]
    if WITH_HARNESS:
        assert [r["returncode"] for r in run["harness_runs"]] == [0]
        assert {"networkx", "oxigraph", "nexus (harness)"} <= \
            set(harness.peer_figures(run["harness_runs"]))
    assert set(run["verification"]["checked"]) >= {"Q1", "Q2", "Q3", "Q4", "Q5", "Q6",
                                                   "W2.Q1", "W2.Q2", "W2.Q5"}
    for q in reference.QUERIES:
        st = run["queries"][q]
        assert st["reps"] > 0 and st["median_ms"] > 0
        assert len(st["per_param"]) == len(workload.generate(300).meta["params"][q])
    assert run["queries"]["Q2"]["ordinary"]["median_ms"] > 0
    for key in ("w1_bulk", "w1_bulk_store", "w1_upsert"):
        assert run[key]["items"] == 300 + run["dataset"]["propositions"]
        assert run[key]["items_per_s"] > 0
    assert run["w2"]["reps"] == 12 and run["w2_store"]["reps"] == 12
    assert run["search"]["reps"] == 6 and run["mixed"]["iterations"] == 5
    assert run["probe"]["rss_serving_mb"] > 0
    assert result["problems"] == []
    assert "## Summary" in proc.stdout and "Q6 OPTIONAL" in proc.stdout
    assert (ROOT / "bench" / "RESULTS.md").read_bytes() == before     # --no-write
    # the section renders from the saved JSON alone (how the file is regenerated)
    text = report.section(result)
    assert text.startswith("## Summary\n") and "| W2 durable upsert" in text


def test_summary_replaces_only_its_section(tmp_path):
    md = tmp_path / "RESULTS.md"
    md.write_text("# nexus benchmark results\n\n## Parsing\n\nparse text\n\n"
                  "## KQL queries\n\nkql text\n", encoding="utf-8")
    report.write(str(md), "## Summary\n\nfirst\n")
    text = md.read_text(encoding="utf-8")
    assert text.index("## Summary") < text.index("## Parsing") < text.index("## KQL")
    report.write(str(md), "## Summary\n\nsecond\n\n### N = 1\n\nrow\n")
    text = md.read_text(encoding="utf-8")
    assert "first" not in text and "second" in text and "### N = 1" in text
    assert text.count("## Summary") == 1
    assert "parse text" in text and "kql text" in text


def test_harness_mismatch_detection():
    ok = {"status": "ok", "reference": "networkx", "answer_digests": ["a", "b"],
          "peers": {"networkx": "ok", "nexus": "ok"}}
    bad = {"status": "MISMATCH", "reference": "networkx", "answer_digests": ["a", "b"],
           "peers": {"networkx": "ok", "nexus": {"mismatches": [{"param_index": 1}]}}}
    runs = [{"peers": ["networkx"], "returncode": 0, "log": "-",
             "result": {"verification": {"Q1": ok, "Q2": bad}}}]
    problems = harness.mismatches(runs, {"Q1": ["a", "b"], "Q2": ["a", "x"]})
    assert any("Q2: nexus differs" in p for p in problems)
    assert any("Q2: bench.reference differs" in p for p in problems)
    assert not any(p.startswith("Q1") for p in problems)
    failed = [{"peers": ["networkx", "kuzu"], "returncode": 1, "log": "-", "result": None}]
    assert "failed" in harness.mismatches(failed, None)[0]


def test_workload_matches_published_hashes_and_harness_upserts(tmp_path):
    d = workload.ensure(10_000, str(tmp_path))          # checked against KNOWN_SHA256 inside
    meta = json.loads(Path(d, "meta.json").read_text(encoding="utf-8"))
    assert meta["sha256"] == workload.KNOWN_SHA256[(10_000, 42)]
    assert meta["propositions"] == 49_993              # the peers README's figure
    concepts, props, meta, _ = workload.read(d)
    items = workload.make_upserts(concepts, meta, 200)
    assert len({it["concept"]["name"] for it in items}) == 150     # every 4th re-upserts
    ref = reference.Reference(concepts, props)
    assert ref.run("Q1", **meta["params"]["Q1"][0]) is not None


@pytest.mark.skipif(not GEN_PY.is_file(), reason="../shared/peers/gen.py not present")
def test_workload_is_byte_identical_to_gen_py():
    for n, seed in ((300, 42), (1234, 7)):
        assert all(workload.verify_against(str(GEN_PY), n, seed).values())
