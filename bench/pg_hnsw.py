"""The HNSW build options of the pgvector tables (issue 22, W2): what an index insert costs a
durable single UPSERT, and what the options do to SEARCH's answers.

    python -m bench.pg_hnsw --cost [--n 5000] [--burst 40] [--rounds 3] [--table vectors]
    python -m bench.pg_hnsw --answers [--n 20000] [--queries 300] [--table vectors] [--options A,B,C]

Both load the peers workload (bench/workload.py) into a PostgreSQL of their own (pgserver,
as bench/pg.py) with SEARCH attached, then rebuild the concepts' HNSW index of one vector
table (`vectors`: the n-gram one; `semantic`: the semantic embedder's) with each option of
`OPTIONS` in turn, on the same database:

`--cost` (fsync on, autovacuum off after the load so that the server's CPU is the
upserts'): bursts of `--burst` new-concept W2 upserts (bench/pg.py's items, re-upserts left
out: they write no index entry), the options alternated A B none B A none … for
`--rounds`; per option the server's CPU per upsert (all its processes), the client
thread's CPU median and the wall median. "none" is the table without its index (the
insert's cost is the difference).

`--answers` (a throwaway server: fsync off; nothing is timed): for each option the
nearest 10 concepts of the table (`ORDER BY embedding <=> q LIMIT 10` at `ef_search` 256,
as SEARCH) against an exact scan (the index dropped) — recall@10, and tie-aware (an id at
the exact 10th distance or nearer counts) — and, for the n-gram table, the answers of
SEARCH itself (`MODE "keyword"`, with and without `WITH TYPE "Drug"`, LIMIT 10: names and
`_score`s) compared with those of the exact scan and of the first option. Query texts:
bench/pg.py's (names as typed, with a typo, two words of a description).

Prints one JSON object per result line.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import nexus_peer as NP
from bench import pg as B
from bench import workload

ROOT = Path(__file__).resolve().parents[1]
OPTIONS = {"A": "m = 16, ef_construction = 32", "B": "m = 8, ef_construction = 16",
           "C": "m = 12, ef_construction = 24", "none": None}


def _server(fast: bool) -> Any:
    sys.path.insert(0, str(ROOT / "tests"))
    from pgtest import PgServer
    return PgServer(fast=fast)


def _loaded(n: int, fast: bool) -> tuple[Any, str, Any, list, dict]:
    data = tempfile.mkdtemp(prefix="nexus-pg-hnsw-")
    concepts, props, meta, _ = workload.read(workload.write(workload.generate(n), data))
    server = _server(fast)
    url = server.fresh_database("bench")
    nx = NP.open_nexus(url)
    NP.load_into(nx, concepts, props)
    return server, url, nx, concepts, meta


def _table(nx: Any, which: str) -> Any:
    table = nx.search.pg_vectors if which == "vectors" else nx.search.pg_semantic
    if table is None:
        raise SystemExit(f"no {which} vector table (is the semantic extra installed?)")
    return table


class _Index:
    """The concepts' HNSW index of `table`, rebuilt with given options (or dropped)."""

    def __init__(self, conn: Any, table: Any) -> None:
        self.conn = conn
        self.name = table.index_names[0]
        row = conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s",
                           (self.name,)).fetchone()
        if row is None:
            raise SystemExit("the space has no HNSW index (too few concepts: raise --n)")
        head, rest = row[0].split(" WITH (", 1)
        self.head, self.where = head, rest.split(" WHERE ", 1)[1]

    def build(self, options: str | None) -> None:
        self.conn.execute(f'DROP INDEX IF EXISTS "{self.name}"')
        if options:
            self.conn.execute(f"{self.head} WITH ({options}) WHERE {self.where}")


def cost(args: argparse.Namespace) -> None:
    import psycopg
    server, url, nx, concepts, meta = _loaded(args.n, fast=False)
    try:
        q = NP.NexusQueries(nx)
        seq = ["A", "B", "none", "B", "A", "none"]
        total = args.burst * len(seq) * args.rounds + 10
        ups = [u for i, u in enumerate(workload.make_upserts(concepts, meta,
                                                             k=total * 4 // 3 + 20))
               if i % 4 != 3]                   # new concepts only
        for item in ups[:10]:
            q.upsert(item)
        ups = ups[10:]
        server.sql("ALTER SYSTEM SET autovacuum = off")
        server.sql("SELECT pg_reload_conf()")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
            index = _Index(conn, _table(nx, args.table))
            runs: dict[str, list[dict]] = {k: [] for k in seq}
            at = 0
            for _ in range(args.rounds):
                for key in seq:
                    index.build(OPTIONS[key])
                    conn.execute("CHECKPOINT")
                    wall, cpu = [], []
                    s0 = B.server_cpu(server)
                    for item in ups[at:at + args.burst]:
                        c0, t0 = time.thread_time(), time.perf_counter()
                        q.upsert(item)
                        wall.append((time.perf_counter() - t0) * 1000)
                        cpu.append((time.thread_time() - c0) * 1000)
                    s1 = B.server_cpu(server)
                    at += args.burst
                    runs[key].append({"server": ((s1 or 0.0) - (s0 or 0.0)) * 1000 / args.burst,
                                      "cpu": statistics.median(cpu),
                                      "wall": statistics.median(wall),
                                      "load": os.getloadavg()[0]})
        for key, rs in runs.items():
            print(json.dumps({
                "table": args.table, "n": args.n, "options": OPTIONS[key], "bursts": len(rs),
                "server_cpu_ms_per_upsert": round(statistics.mean(r["server"] for r in rs), 3),
                "client_cpu_median_ms": round(statistics.median(r["cpu"] for r in rs), 3),
                "wall_median_ms": round(statistics.median(r["wall"] for r in rs), 3),
                "load_average": round(statistics.mean(r["load"] for r in rs), 1)}))
        nx.close()
    finally:
        server.stop()


def answers(args: argparse.Namespace) -> None:
    import numpy as np
    import psycopg

    from nexus.search import pg_vectors as PV
    server, url, nx, concepts, _ = _loaded(args.n, fast=True)
    texts = B.search_queries(concepts, args.queries)
    try:
        table = _table(nx, args.table)
        emb = table.embedder
        embed_query = getattr(emb, "embed_query", None)
        qv = [PV.vector_literal(np.asarray(embed_query(x) if embed_query else emb.embed([x])[0],
                                           dtype=np.float32)) for x in texts]
        knn = (f"SELECT id, embedding <=> %s::vector FROM {table.table} WHERE space = "
               f"{table.space_lit} AND kind = 0 ORDER BY 2 LIMIT 10")

        def search_all() -> list:
            if args.table != "vectors":
                return []
            out = []
            for text in texts:
                for clause in ('MODE "keyword"', 'WITH TYPE "Drug" MODE "keyword"'):
                    r = nx.execute_kip_readonly({
                        "command": f"SEARCH CONCEPT :q {clause} LIMIT 10",
                        "parameters": {"q": text}})
                    out.append([(h["name"], round(h["metadata"]["_score"], 6))
                                for h in r["result"]])
            return out
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SET maintenance_work_mem = '512MB'")
            index = _Index(conn, table)
            index.build(None)
            exact = [conn.execute(knn, (v,)).fetchall() for v in qv]
            exact_answers = search_all()
            first: list | None = None
            for key in args.options.split(","):
                index.build(OPTIONS[key])
                with conn.transaction():
                    conn.execute("SELECT set_config('hnsw.ef_search', '256', true)")
                    got = [conn.execute(knn, (v,)).fetchall() for v in qv]
                recall = np.mean([len({i for i, _ in g} & {i for i, _ in e})
                                  / len({i for i, _ in e}) for g, e in zip(got, exact)])
                tie = np.mean([sum(1 for _, d in g if d <= e[-1][1] + 1e-6) / len(e)
                               for g, e in zip(got, exact)])
                found = search_all()
                count = conn.execute(f"SELECT count(*) FROM {table.table} WHERE space = "
                                     f"{table.space_lit} AND kind = 0").fetchone()
                line: dict[str, Any] = {
                    "table": args.table, "n": args.n, "vectors": count[0] if count else 0,
                    "options": OPTIONS[key], "recall@10": round(float(recall), 4),
                    "tie_aware_recall@10": round(float(tie), 4)}
                if found:
                    line["searches"] = len(found)
                    line["answers_as_exact_scan"] = round(float(np.mean(
                        [a == b for a, b in zip(found, exact_answers)])), 4)
                    if first is None:
                        first = found
                    else:
                        line["answers_as_first_option"] = round(float(np.mean(
                            [a == b for a, b in zip(found, first)])), 4)
                print(json.dumps(line), flush=True)
        nx.close()
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--cost", action="store_true", help="server CPU of the index insert")
    mode.add_argument("--answers", action="store_true", help="recall and SEARCH answers")
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--table", choices=["vectors", "semantic"], default="vectors")
    ap.add_argument("--burst", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--options", default="A,B,C", help="--answers: keys of OPTIONS, in order")
    args = ap.parse_args(argv)
    cost(args) if args.cost else answers(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
