"""bench/predvars.py at a tiny size: it runs, answers the neighbours it built (three links out
of an item), plans them without a link scan, and replaces only its own RESULTS.md section."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import predvars  # noqa: E402


def test_predvars_bench_tiny(tmp_path):
    md = tmp_path / "RESULTS.md"
    md.write_text("# nexus benchmark results\n\n## Other\n\nkept\n")
    assert predvars.main(["--n", "300", "--queries", "20", "--record", str(md)]) == 0
    text = md.read_text()
    assert "## Other\n\nkept\n" in text and "## Predicate variables" in text
    assert "ExpandOut ?#1 -[?p]-> ?n" in text and "ScanLinks" not in text
    out_row = next(line for line in text.splitlines() if line.startswith("| out:"))
    assert out_row.split("|")[4].strip() == "3.0"        # next, related, tagged
