"""Benchmark of the KIP syntax layer: parse (+ bind) per command, cold and cached.

    python bench/parse.py [--quick] [--no-write]

Three commands:
  (a) a short FIND with two placeholders,
  (b) a 30-line UPSERT capsule block (two concepts, a proposition, metadata),
  (c) the whole Genesis capsule (capsules/genesis.kip; the spec's Appendix 2 text from
      tests/syntax/spec_examples/ when the bundled capsule is absent).
"cold" clears the parse cache (`_PARSED.clear()`) before every parse, so each run
lexes, parses, transforms and compiles a fresh binder; "cached" is `bind(parse(text), params)`
on a text seen before — what the engine does for an agent that re-sends a command. Figures are
medians of per-call times (the cached path is timed in batches of calls). The markdown table is
printed and written into bench/RESULTS.md under `## Parsing` (other sections are kept).
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.results_md import replace_section  # noqa: E402
from nexus.syntax import bind, parse  # noqa: E402
from nexus.syntax.parser import _PARSED  # noqa: E402

SHORT_FIND = "FIND(?c) WHERE { ?c {type: :type, name: :name} }"
SHORT_PARAMS = {"type": "Drug", "name": "Aspirin"}

UPSERT_BLOCK = """\
// A 30-line capsule block: a symptom, a drug that treats it, and a sourced claim.
UPSERT {
  CONCEPT ?neural_bloom {
    {type: "Symptom", name: "Neural Bloom"}
    SET ATTRIBUTES {
      description: "A rare side effect: a temporary burst of creative thoughts.",
      severity: 2,
      aliases: ["creative surge", "idea flood"]
    }
  }
  CONCEPT ?cognizine {
    {type: "Drug", name: "Cognizine"}
    SET ATTRIBUTES {
      molecular_formula: "C12H15N5O3",
      dosage_form: { "type": "tablet", "strength": "500mg" },
      risk_level: 2,
      description: "A novel nootropic drug designed to enhance cognitive functions."
    }
    SET PROPOSITIONS {
      ("is_class_of", {type: "DrugClass", name: "Nootropic"})
      ("treats", {type: "Symptom", name: "Brain Fog"}) WITH METADATA { confidence: 0.8 }
      ("has_side_effect", ?neural_bloom)
    }
  }
  PROPOSITION ?claim {
    (?cognizine, "treats", {type: "Symptom", name: "Fatigue"})
    SET ATTRIBUTES { evidence_level: "anecdotal" }
  } WITH METADATA { confidence: 0.4 }
}
WITH METADATA { source: :source, author: "$self", confidence: 0.95, status: "reviewed" }
"""
UPSERT_PARAMS = {"source": "KnowledgeCapsule:Nootropics_v1.0"}


def genesis_text() -> tuple[str, str]:
    bundled = ROOT / "capsules" / "genesis.kip"
    if bundled.exists():
        return bundled.read_text(encoding="utf-8"), "capsules/genesis.kip"
    for path in sorted((ROOT / "tests" / "syntax" / "spec_examples").glob("*genesis*.kip")):
        return path.read_text(encoding="utf-8"), str(path.relative_to(ROOT))
    raise SystemExit("no Genesis capsule found (capsules/genesis.kip or a spec example)")


def cold_us(text: str, params: dict, runs: int) -> tuple[float, float]:
    """(median, best) µs of one uncached parse+bind."""
    times = []
    for _ in range(runs):
        _PARSED.clear()
        t0 = time.perf_counter_ns()
        bind(parse(text), params)
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1000, min(times) / 1000


def cached_us(text: str, params: dict, calls: int, batch: int = 50) -> tuple[float, float]:
    """(median, best) µs per cached parse+bind, over many short batches (short, so that a
    burst of load from other processes spoils few of them)."""
    bind(parse(text), params)  # warm: parsed, binder compiled
    times = []
    for _ in range(max(1, calls // batch)):
        t0 = time.perf_counter_ns()
        for _ in range(batch):
            bind(parse(text), params)
        times.append((time.perf_counter_ns() - t0) / batch)
    return statistics.median(times) / 1000, min(times) / 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer runs (a smoke test)")
    ap.add_argument("--no-write", action="store_true", help="do not update bench/RESULTS.md")
    args = ap.parse_args()
    scale = 0.1 if args.quick else 1.0

    load = os.getloadavg()[0]
    genesis, genesis_source = genesis_text()
    cases = [
        ("(a) short FIND, 2 placeholders", SHORT_FIND, SHORT_PARAMS, 2000, 50_000),
        ("(b) 30-line UPSERT capsule block", UPSERT_BLOCK, UPSERT_PARAMS, 300, 20_000),
        (f"(c) Genesis capsule ({genesis_source})", genesis, {}, 60, 20_000),
    ]
    parse("DESCRIBE PRIMER")  # build the LALR tables outside the timings

    rows = []
    for label, text, params, cold_runs, cached_calls in cases:
        cold = cold_us(text, params, max(5, int(cold_runs * scale)))
        cached = cached_us(text, params, max(500, int(cached_calls * scale)))
        lines = text.count("\n") + (not text.endswith("\n"))
        rows.append((label, lines, len(text.encode("utf-8")), cold, cached))

    short_cold, short_cached = rows[0][3][0], rows[0][4][0]
    table = [
        "| command | lines | bytes | cold parse+bind, median (best) µs "
        "| cached parse+bind, median (best) µs |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for label, lines, size, cold, cached in rows:
        table.append(f"| {label} | {lines} | {size} | {cold[0]:,.1f} ({cold[1]:,.1f}) "
                     f"| {cached[0]:,.2f} ({cached[1]:,.2f}) |")
    verdict = (
        f"Targets: cached parse+bind of the short FIND < 20 µs — "
        f"{'met' if short_cached < 20 else 'MISSED'} ({short_cached:.2f} µs); uncached short "
        f"FIND < 1 ms — {'met' if short_cold < 1000 else 'MISSED'} ({short_cold:.0f} µs)."
    )
    run = (f"`{Path(sys.executable).name} bench/parse.py{' --quick' if args.quick else ''}` on "
           f"{datetime.date.today().isoformat()}, Python {platform.python_version()} "
           f"({platform.python_implementation()}), {platform.system()} {platform.machine()}, "
           f"{platform.processor() or 'unknown CPU'}, {os.cpu_count()} CPUs, load average "
           f"{load:.2f} at the start (a shared machine: expect noise).")
    section = "\n".join([
        "## Parsing",
        "",
        run,
        "Per command: the median, and in parentheses the best run. Cold = parse cache cleared "
        "before each run (lex, parse, transform, compile the binder); cached = "
        "`bind(parse(text), params)` on a text parsed before (the Genesis capsule has no "
        "placeholder, so its cached figure is the cache lookup alone).",
        "",
        *table,
        "",
        verdict,
        "",
    ])
    print(section)
    if not args.no_write:
        replace_section(ROOT / "bench" / "RESULTS.md", "## Parsing", section)
        print(f"written to {ROOT / 'bench' / 'RESULTS.md'}")


if __name__ == "__main__":
    main()
