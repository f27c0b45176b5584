"""Keeps `python -m bench` working: the whole benchmark end to end at a tiny N (not a
benchmark: no figure is asserted), that it fails loudly on a wrong answer and runs from a
clone without ../shared, plus the pieces that must stay exact — the workload generator
(gen.py's bytes), the section-preserving RESULTS.md update and the summary's units/ratios."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import harness, reference, report, runner, workload  # noqa: E402
from bench import nexus_peer  # noqa: E402

PEERS_DIR = ROOT.parent / "shared" / "peers"
GEN_PY = PEERS_DIR / "gen.py"
# With the peer harness beside the repository, the smoke run includes it (Oxigraph only:
# the quickest peer to import), so the plug-in and the cross-check keep working too.
WITH_HARNESS = (PEERS_DIR / "bench_peers.py").is_file() and harness.installed("oxigraph")
TINY = ["--n", "300", "--budget", "0.02", "--min-reps", "2", "--hard-cap", "0.5",
        "--upserts", "12", "--search-queries", "6", "--search-passes", "1",
        "--mixed-iterations", "5"]
ROW_LABELS = ("Q1 point lookup", "Q2 one hop", "Q3 two hops", "Q4 `{1,5}` path",
              "Q5 group-by", "Q6 OPTIONAL", "W1 bulk load (", "W1 bulk load, store only",
              "W1 KIP UPSERT", "W2 durable upsert", "SEARCH (", "mixed agent loop",
              "RSS after loading", "disk size after loading")


def table_rows(text: str) -> dict[str, list[str]]:
    """{row label: cells} of the markdown tables in `text`."""
    out = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| item"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            out[cells[0]] = cells
    return out


def test_bench_end_to_end_tiny(tmp_path):
    before = (ROOT / "bench" / "RESULTS.md").read_bytes()
    peers = ["--peers", "oxigraph", "--peers-dir", str(PEERS_DIR)] if WITH_HARNESS \
        else ["--peers", "none"]
    out = tmp_path / "result.json"
    argv = [sys.executable, "-m", "bench", *TINY, "--no-write", "--out", str(out),
            "--data", str(tmp_path / "data"), "--workdir", str(tmp_path / "work"), *peers]
    proc = subprocess.run(argv, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    result = json.loads((tmp_path / "full" / "result.json").read_text(encoding="utf-8"))
    small = json.loads(out.read_text(encoding="utf-8"))
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
    assert (ROOT / "bench" / "RESULTS.md").read_bytes() == before     # --no-write
    # the printed section, and the same section from the full and from the compact JSON
    text = report.section(result)
    assert text.startswith("## Summary\n") and text in proc.stdout
    assert report.section(small) == text
    assert len(out.read_bytes()) < len((tmp_path / "full" / "result.json").read_bytes())
    cells = table_rows(text)
    for label in ROW_LABELS:
        assert any(k.startswith(label) for k in cells), (label, list(cells))
    if WITH_HARNESS:     # a best peer and a ratio on the query rows
        q1 = next(v for k, v in cells.items() if k.startswith("Q1 point lookup"))
        assert q1[1] == "µs ↓" and q1[5] != "–" and q1[6].endswith("×"), q1


def test_wrong_answer_fails_the_run_and_no_harness_is_fine(tmp_path, monkeypatch, capsys):
    """A clone without ../shared: peers skipped with a note, everything else measured; and a
    wrong answer from nexus makes the run fail, naming the query, parameters and rows."""
    original = nexus_peer.NexusQueries.q3
    monkeypatch.setattr(nexus_peer.NexusQueries, "q3",
                        lambda self, **p: original(self, **p) + ["Not a drug"])
    md = tmp_path / "RESULTS.md"
    other = "# nexus benchmark results\n\n## Parsing\n\nkept as is\n"
    md.write_text(other, encoding="utf-8")
    out = tmp_path / "r.json"
    status = runner.main([*TINY, "--peers", "auto", "--peers-dir", str(tmp_path / "no-peers"),
                          "--skip-store-only", "--out", str(out), "--results-md", str(md),
                          "--data", str(tmp_path / "data"), "--workdir", str(tmp_path / "w")])
    printed = capsys.readouterr().out
    assert status == 1
    result = json.loads(out.read_text(encoding="utf-8"))
    run = result["runs"]["300"]
    assert run["harness_runs"] == [] and not run["verification"]["ok"]
    assert run["verification"]["direct_mismatches"] == ["Q3"]
    assert run["verification"]["upsert_load_mismatches"] == []      # the loader is unpatched
    assert any("peers: skipped" in n and "no peer harness" in n for n in result["notes"])
    assert any("nexus Q3 with {" in p and "unexpected 1" in p and "Not a drug" in p
               for p in result["problems"]), result["problems"]
    assert "PROBLEM" in printed
    text = md.read_text(encoding="utf-8")
    assert text.startswith("# nexus benchmark results\n\n## Summary\n")
    assert text.endswith("## Parsing\n\nkept as is\n")
    assert "**MISMATCH**" in text and "peers: skipped" in text
    assert "W1 bulk load, store only" not in text                 # --skip-store-only


def without_summary(text: str) -> str:
    start = text.find("## Summary\n")
    if start < 0:
        return text
    end = text.find("\n## ", start)
    return text[:start] + (text[end + 1:] if end >= 0 else "")


def test_summary_replaces_only_its_section(tmp_path):
    md = tmp_path / "RESULTS.md"
    real = (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    md.write_text(real, encoding="utf-8")
    report.write(str(md), "## Summary\n\nfirst summary\n")
    report.write(str(md), "## Summary\n\nsecond\n\n### N = 1\n\nrow\n")
    text = md.read_text(encoding="utf-8")
    assert "first summary" not in text and "second\n\n### N = 1\n\nrow\n" in text
    assert text.count("## Summary") == 1
    assert without_summary(text) == without_summary(real)   # the rest, byte for byte
    md.write_text("# t\n\n## Parsing\n\np\n\n## KQL queries\n\nk\n", encoding="utf-8")
    report.write(str(md), "## Summary\n\nx\n")
    assert md.read_text(encoding="utf-8") == \
        "# t\n\n## Summary\n\nx\n\n## Parsing\n\np\n\n## KQL queries\n\nk\n"
    md.write_text("# t\n\n## Parsing\n\np\n\n## Summary\n\nold\n", encoding="utf-8")
    report.write(str(md), "## Summary\n\nnew\n")
    assert md.read_text(encoding="utf-8") == "# t\n\n## Parsing\n\np\n\n## Summary\n\nnew\n"


def test_summary_units_ratios_and_targets():
    """Q1 in µs, W1 in items/s with the ratio the right way round, met? against the
    issue's bounds at N=100k (and the Ladybug ratio bound)."""
    def q(median):
        return {"median_ms": median, "p95_ms": median * 2, "rows_avg": 1.0,
                "ordinary": {"median_ms": median, "p95_ms": median * 2},
                "hub": {"median_ms": median * 10, "p95_ms": median * 20},
                "per_param": [{"param": {"symptom": "Headache"}, "median_ms": median * 10},
                              {"param": {"symptom": "x"}, "median_ms": median}]}
    lad = {"queries": {k: q(v) for k, v in (("Q1", 0.06), ("Q2", 0.1), ("Q3", 1.0),
                                            ("Q4", 0.5), ("Q5", 2.5), ("Q6", 170.0))},
           "W1": {"load_s": 3.0, "items_per_s": 200_000, "rss_delta_mb": 150, "disk_mb": 45},
           "W2": {"median_ms": 2.0, "p95_ms": 3.0}}
    run = {"n": 100_000,
           "queries": {k: q(v) for k, v in (("Q1", 0.04), ("Q2", 0.15), ("Q3", 1.6),
                                            ("Q4", 0.3), ("Q5", 12.0), ("Q6", 100.0))},
           "w1_bulk": {"load_s": 6.0, "items": 600_000, "items_per_s": 100_000,
                       "rss_engine_mb": 250, "rss_base_mb": 40, "rss_delta_mb": 210,
                       "disk_mb": 90},
           "w1_upsert": {"load_s": 60.0, "items": 600_000, "items_per_s": 10_000,
                         "search": "detached"},
           "w2": {"median_ms": 0.8, "p95_ms": 1.5},
           "harness_runs": [{"result": {"peers": {"ladybug": lad,
                                                  "networkx": {"W1": {"items_per_s": 10**7}}}}}]}
    rows = {r["key"]: r for r in report.rows(run)}
    assert rows["Q1"]["unit"] == "µs" and rows["Q1"]["nexus"] == pytest.approx(40)
    assert rows["Q1"]["best"] == ("ladybug", pytest.approx(60))
    assert report.met(rows["Q1"]) == "yes / yes"
    assert report.met(rows["Q2"]) == "yes / **no**"          # 0.15 ms, 1.5× Ladybug
    assert report.met(rows["Q3"]) == "yes / **no**"          # 1.6 ≤ 2 ms, 1.6× > 1.5×
    assert report.met(rows["Q5"]) == "**no** / **no**"      # 12 ms > 10, 4.8× > 4×
    assert rows["Q5"]["ratio_ladybug"] == pytest.approx(4.8)
    assert report.met(rows["Q6"]) == "yes / yes"
    w1 = rows["W1"]                                          # networkx is not a "best peer"
    assert w1["unit"] == "items/s" and w1["best"] == ("ladybug", 200_000)
    assert w1["ratio_best"] == pytest.approx(0.5)             # nexus items/s ÷ peer items/s
    assert report.met(w1) == "**no**"
    assert report.met(rows["W2"]) == "yes / yes"             # 0.8 ms, 0.4× Ladybug
    assert report.met(rows["RSS"]) == "yes"
    assert "RSSF" not in rows                                # no probe in this run
    run["w1_bulk"].update(rss_engine_anon_mb=180, rss_engine_file_mb=70)
    run["probe"] = {"rss_serving_mb": 160, "rss_open_mb": 60,
                    **{f"{phase}_{part}_mb": v for phase, parts in (
                        ("open", (60, 35, 25)), ("queries", (90, 50, 40)),
                        ("searches", (160, 110, 50)))
                       for part, v in zip(("rss", "anon", "file"), parts)}}
    rows = {r["key"]: r for r in report.rows(run)}
    assert "(anon 180 + file 70)" in rows["RSS"]["note"]
    fresh = rows["RSSF"]                     # the "fresh serving process ≤ 150 MB"
    assert fresh["nexus"] == 160 and report.met(fresh) == "**no**"
    assert "(anon 110 + file 50)" in fresh["note"]
    assert "before any query 60 (anon 35 + file 25)" in fresh["note"]
    assert "after Q1–Q6 90 (anon 50 + file 40)" in fresh["note"]
    text = "\n".join(report.summary_table(run))
    assert "| items/s ↑ |" in text and "| µs ↓ |" in text and "met? (abs / Ladybug)" in text


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
    assert [r["nexus"] for r in harness.plan(["kuzu", "ladybug", "oxigraph"])] == [False, True]
    assert [r["nexus"] for r in harness.plan(["oxigraph"])] == [True]
    assert not any(r["nexus"] for r in harness.plan(["kuzu", "ladybug"], nexus=False))


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
