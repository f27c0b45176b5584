"""Predicate-variable benchmark (RC11 §3.4.2): the neighbours of one concept over all predicates.

    python bench/predvars.py [--n 100000] [--queries 2000] [--record bench/RESULTS.md]

A fresh on-disk database (durable) gets `--n` Item concepts and 100 Tag concepts, bulk
imported with three predicates per item: `next` (item i → i+1), `related` (i → a scattered
item) and `tagged` (i → one of the tags) — about 3 links out and 2 in per item, 1,000 in
per tag, 3·N links in all. Then, warm, each query runs `--queries` times on random items
through `execute_kip` (parse cache, prepared plan, LMDB read, result shaping):

- out: `FIND(?p, ?n.name) WHERE { ({type: "Item", name: :name}, ?p, ?n) } LIMIT 50` — the
  spec's associative-recall shape; planned as a constant lookup and one prefix range of
  the subject-predicate-object index (no scan of all links);
- in: the same from the object end, `(?n, ?p, {type: "Item", name: :name})`;
- both: the two directions in one command (`UNION`).

Reported: median and p99 in milliseconds. The target (issue 15): out ≤ 1 ms median at
N=100k. `--record` replaces the `## Predicate variables` section of the results file.
"""
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import argparse  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from datetime import datetime, timezone  # noqa: E402

from bench.results_md import replace_section  # noqa: E402
from nexus import Nexus  # noqa: E402

SECTION = "## Predicate variables"
TAGS = 100
SCHEMA = '''UPSERT {
  CONCEPT ?t { {type: "$ConceptType", name: "Item"} SET ATTRIBUTES { description: "an item" } }
  CONCEPT ?g { {type: "$ConceptType", name: "Tag"} SET ATTRIBUTES { description: "a tag" } }
  CONCEPT ?n { {type: "$PropositionType", name: "next"} SET ATTRIBUTES { description: "n" } }
  CONCEPT ?r { {type: "$PropositionType", name: "related"} SET ATTRIBUTES { description: "r" } }
  CONCEPT ?a { {type: "$PropositionType", name: "tagged"} SET ATTRIBUTES { description: "t" } }
}'''
QUERIES = {
    "out": 'FIND(?p, ?n.name) WHERE { ({type: "Item", name: :name}, ?p, ?n) } LIMIT 50',
    "in": 'FIND(?p, ?n.name) WHERE { (?n, ?p, {type: "Item", name: :name}) } LIMIT 50',
    "both": ('FIND(?p, ?n.name) WHERE { ({type: "Item", name: :name}, ?p, ?n) '
             'UNION { (?n, ?p, {type: "Item", name: :name}) } } LIMIT 50'),
}


def _item(i: int) -> dict:
    return {"type": "Item", "name": f"item{i}"}


def build(nx: Nexus, n: int) -> None:
    nx.execute_kip({"command": SCHEMA})
    concepts = [*({"type": "Tag", "name": f"tag{t}"} for t in range(TAGS)),
                *(_item(i) for i in range(n))]

    def links():
        for i in range(n):
            if i + 1 < n:
                yield {"subject": _item(i), "predicate": "next", "object": _item(i + 1)}
            j = (i * 7919 + 13) % n
            if j != i:
                yield {"subject": _item(i), "predicate": "related", "object": _item(j)}
            yield {"subject": _item(i), "predicate": "tagged",
                   "object": {"type": "Tag", "name": f"tag{i % TAGS}"}}
    nx.bulk_import(iter(concepts), links())


def measure(nx: Nexus, command: str, n: int, queries: int, rng: random.Random
            ) -> tuple[float, float, float]:
    """(median ms, p99 ms, mean rows) over `queries` runs on random items (after a warm-up)."""
    for i in range(200):
        nx.execute_kip({"command": command, "parameters": {"name": f"item{rng.randrange(n)}"}})
    times: list[float] = []
    rows = 0
    for _ in range(queries):
        params = {"name": f"item{rng.randrange(n)}"}
        started = time.perf_counter()
        response = nx.execute_kip({"command": command, "parameters": params})
        times.append((time.perf_counter() - started) * 1000)
        assert "result" in response, response
        rows += len(response["result"][0])
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99) - 1], rows / queries


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--record", metavar="RESULTS_MD")
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="nexus-predvars-")
    rng = random.Random(15)
    try:
        with Nexus.open(os.path.join(work, "db")) as nx:
            nx.detach_search()          # FIND alone: no vector indexer sharing the GIL
            build(nx, args.n)
            links = nx.execute_kip({"command": 'FIND(COUNT(?l)) WHERE { ?l (?s, "related", ?o) }'})
            plan = nx.execute_kip({"command": "EXPLAIN " + QUERIES["out"],
                                   "parameters": {"name": "item1"}})["result"]["text"]
            figures = {k: measure(nx, q, args.n, args.queries, rng) for k, q in QUERIES.items()}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert "ScanLinks" not in plan, plan
    command = "python bench/predvars.py " + " ".join(argv if argv is not None else sys.argv[1:])
    targets = {"out": "≤ 1 ms median", "in": "—", "both": "—"}
    text = "\n".join([
        SECTION, "",
        f"`{command.strip()}` — {datetime.now(timezone.utc):%Y-%m-%d}, {platform.machine()} "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, LMDB on disk, durable, "
        f"warm, search indexes detached, row executor (an anchored plan). {args.n:,} items + {TAGS} tags, three "
        f"predicates, ~{3 * args.n:,} links ({links.get('result'):,} `related`); "
        f"{args.queries:,} queries per row on random items, through `execute_kip`.", "",
        "Plan of `out` (EXPLAIN):", "", "```", plan, "```", "",
        "| neighbours of one concept over all predicates | median ms | p99 ms | rows | target |",
        "|---|---:|---:|---:|---|",
        *(f"| {k}: `{QUERIES[k]}` | {m:.3f} | {p:.3f} | {r:.1f} | {targets[k]} |"
          for k, (m, p, r) in figures.items()),
    ]) + "\n"
    print(text)
    if args.record:
        replace_section(args.record, SECTION, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
