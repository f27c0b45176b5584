"""Loading through KIP in the issue's own shape (issue 18), the UPSERT fast path A/B.

    python -m bench.kipload_grouped --data /tmp/fp/data/n10000 [--rounds 2] [--out FILE]

The data set as `Nexus.execute_kip` UPSERT commands: 500 CONCEPT blocks per command, then
the links grouped by subject, 250 subjects per command, each a CONCEPT block naming its
subject with `SET PROPOSITIONS { (:p, {type: :ot, name: :on}) WITH METADATA :m ... }`, every
value a parameter. The number of links per subject varies, so every links command has a text
of its own (and most are over the parse cache's size bound): each one is parsed.

Two variants, alternated round by round in one process, each over a fresh database with
SEARCH detached: `lalr` (the fast path switched off: nexus.syntax.parser.fast_upsert
replaced by a function that declines) and `fast` (as shipped). The parse cache is cleared
before each run. Reported per run: wall seconds, CPU seconds of the loading thread, items/s
and items per CPU-second; and the parse alone of the first links command, both ways.
"""
from __future__ import annotations

import argparse
import gc
import json
import platform
import shutil
import tempfile
import time
from itertools import groupby
from typing import Any, Callable

from . import nexus_peer as NP
from . import workload as W
from .loader import kip


def concept_commands(concepts: list, batch: int = 500) -> list[tuple[str, dict]]:
    out = []
    for i in range(0, len(concepts), batch):
        chunk = concepts[i:i + batch]
        text = "UPSERT {\n" + "\n".join(
            f"CONCEPT {{ {{type: :t{j}, name: :n{j}}} SET ATTRIBUTES :a{j} }} "
            f"WITH METADATA :m{j}" for j in range(len(chunk))) + "\n}"
        params: dict[str, Any] = {}
        for j, c in enumerate(chunk):
            params[f"t{j}"], params[f"n{j}"] = c["type"], c["name"]
            params[f"a{j}"], params[f"m{j}"] = c["attributes"], c["metadata"]
        out.append((text, params))
    return out


def grouped_link_commands(props: list, subjects: int = 250) -> list[tuple[str, dict]]:
    """Links grouped by subject, `subjects` CONCEPT blocks per command."""
    def key(p: dict) -> tuple[str, str]:
        return p["subject"]["type"], p["subject"]["name"]
    groups = [(k, list(g)) for k, g in groupby(sorted(props, key=key), key=key)]
    out = []
    for i in range(0, len(groups), subjects):
        lines, params = [], {}
        k = 0
        for j, ((st, sn), links) in enumerate(groups[i:i + subjects]):
            params[f"st{j}"], params[f"sn{j}"] = st, sn
            entries = []
            for p in links:
                entries.append(f"    (:p{k}, {{type: :ot{k}, name: :on{k}}}) WITH METADATA :m{k}")
                params[f"p{k}"], params[f"m{k}"] = p["predicate"], p["metadata"]
                params[f"ot{k}"], params[f"on{k}"] = p["object"]["type"], p["object"]["name"]
                k += 1
            lines.append(f"  CONCEPT {{ {{type: :st{j}, name: :sn{j}}} SET PROPOSITIONS {{\n"
                         + ",\n".join(entries) + "\n  } }")
        out.append(("UPSERT {\n" + "\n".join(lines) + "\n}", params))
    return out


def _declined(*args: Any, **kwargs: Any) -> None:
    return None


def _variant(name: str) -> None:
    """Switch the fast path on (`fast`) or off (`lalr`) and clear the parse cache."""
    from nexus.syntax import parser
    parser.fast_upsert = _SHIPPED if name == "fast" else _declined  # type: ignore[assignment]
    parser._PARSED.clear()


def _shipped() -> Callable[..., Any]:
    from nexus.syntax import parser
    return parser.fast_upsert


_SHIPPED = _shipped()   # taken once, before any switch


def run_once(variant: str, commands: list[tuple[str, dict]], items: int) -> dict:
    from nexus.api import Nexus
    _variant(variant)
    db = tempfile.mkdtemp(prefix="kipload-grouped-")
    try:
        nx = Nexus.open(db)
        nx.detach_search()
        kip(nx, NP.SCHEMA)
        gc.collect()
        t0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
        for text, params in commands:
            kip(nx, text, **params)
        t1, c1, p1 = time.perf_counter(), time.thread_time(), time.process_time()
        nx.close()
    finally:
        shutil.rmtree(db, ignore_errors=True)
        _variant("fast")
    wall, cpu = t1 - t0, c1 - c0
    return {"variant": variant, "wall_s": round(wall, 2), "thread_cpu_s": round(cpu, 2),
            "process_cpu_s": round(p1 - p0, 2), "items_per_s": round(items / wall),
            "items_per_cpu_s": round(items / cpu)}


def parse_alone(text: str, repeat: int = 3) -> dict:
    from nexus.syntax.fastparse import fast_upsert
    from nexus.syntax.parser import MAX_NESTING, parse_lalr
    lalr, fast = [], []
    for _ in range(repeat):
        c0 = time.thread_time()
        parse_lalr(text)
        c1 = time.thread_time()
        fast_upsert(text, MAX_NESTING)
        fast.append(time.thread_time() - c1)
        lalr.append(c1 - c0)
    return {"characters": len(text), "lalr_cpu_ms": round(1000 * min(lalr), 1),
            "fast_cpu_ms": round(1000 * min(fast), 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--subjects", type=int, default=250)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    concepts, props, _meta, _ = W.read(args.data)
    gc.collect()
    gc.freeze()                         # the dataset is long-lived: keep it out of GC scans
    first = concept_commands(concepts)
    links = grouped_link_commands(props, args.subjects)
    commands = first + links
    items = len(concepts) + len(props)
    report: dict[str, Any] = {
        "machine": f"{platform.processor() or platform.machine()}, {platform.python_version()}",
        "concepts": len(concepts), "propositions": len(props), "items": items,
        "commands": len(commands), "link_commands": len(links),
        "parse_first_links_command": parse_alone(links[0][0]), "runs": []}
    print(json.dumps(report["parse_first_links_command"]), flush=True)
    for r in range(args.rounds):
        order = ("lalr", "fast") if r % 2 == 0 else ("fast", "lalr")
        for variant in order:
            result = run_once(variant, commands, items)
            result["round"] = r + 1
            report["runs"].append(result)
            print(json.dumps(result), flush=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
