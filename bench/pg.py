"""The PostgreSQL column (issue 22), first cut: the peers workload (bench/workload.py) bulk
loaded into a `postgresql://` nexus and into LMDB, then Q1–Q6 on both — median latency and,
on PostgreSQL, SQL statements (round trips) per query — the durable single UPSERT (W2), and
SEARCH per mode (keyword, semantic, hybrid, keyword WITH TYPE) over the loaded drugs: their
names exactly, their names with a typo, and words of their descriptions. The answers of
Q1–Q6 are compared between the two stores (`answers_equal`; exit status 1 when they
differ).

    python -m bench.pg [--n 5000] [--reps 20] [--url postgresql://...] [--sql] [--no-search]
    python -m bench.pg --load-only [--n 5000] [--rounds 1]
    python -m bench.pg --w2-only [--n 300] [--reps 40]

W2 (a durable single UPSERT: a drug, its attributes, two links) is timed per upsert: wall
median and p95, the calling thread's CPU (client) and the PostgreSQL server's CPU per
upsert, statements and round trips (a pipeline of statements is one). `--w2-only` loads the
data set and runs W2 alone (the figure of the write path, quick at small N).

`--load-only` measures the bulk load alone (W1 through `bulk_import`, what `kip load`
runs), each time into a fresh database: store only (the search service detached) and
with SEARCH (its postings and vectors written in the load's transactions, the HNSW
indexes built before it returns), alternating for `--rounds`, with wall time, process
CPU time and statements; LMDB store only in the same run for reference.

Without `--url` it starts a PostgreSQL of its own from the `postgres` extra (tests/pgtest.py,
fsync left on: the figures are durable commits). Prints a JSON report; `--sql` adds, per
query, the statements sent (their first 50 characters) and how often.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from bench import nexus_peer as NP
from bench import workload

ROOT = Path(__file__).resolve().parents[1]


class Statements:
    """Counts the SQL statements sent through psycopg connections (`n`: statements and
    COPYs, each pipelined statement counted), and the round trips (`trips`: a statement
    outside a pipeline, a COPY, or a whole pipeline)."""

    def __init__(self) -> None:
        import contextlib

        import psycopg
        self.n = 0
        self.trips = 0
        self.by: Counter[str] = Counter()
        original = psycopg.Connection.execute
        original_copy = psycopg.Cursor.copy
        original_pipeline = psycopg.Connection.pipeline
        outer = self
        depth = [0]

        def execute(conn: Any, query: Any, params: Any = None, **kw: Any) -> Any:
            outer.n += 1
            outer.trips += depth[0] == 0
            outer.by[str(query)[:50]] += 1
            return original(conn, query, params, **kw)

        def copy(cur: Any, statement: Any, *args: Any, **kw: Any) -> Any:
            outer.n += 1
            outer.trips += 1
            outer.by[str(statement)[:50]] += 1
            return original_copy(cur, statement, *args, **kw)

        @contextlib.contextmanager
        def pipeline(conn: Any, *args: Any, **kw: Any) -> Any:
            depth[0] += 1
            try:
                with original_pipeline(conn, *args, **kw) as p:
                    yield p
            finally:
                depth[0] -= 1
                outer.trips += depth[0] == 0
        psycopg.Connection.execute = execute  # type: ignore[method-assign]
        psycopg.Cursor.copy = copy  # type: ignore[method-assign]
        psycopg.Connection.pipeline = pipeline  # type: ignore[method-assign,assignment]


def timed(fn: Callable[[], Any], reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def search_queries(concepts: list, reps: int) -> list[str]:
    """`reps` query texts: drug names as typed, with a typo (a letter dropped), and two
    words of a description, in turn."""
    drugs = [c for c in concepts if c["type"] == "Drug"]
    out = []
    for i in range(reps):
        c = drugs[(i * 7919) % len(drugs)]
        name = c["name"]
        if i % 3 == 0:
            out.append(name)
        elif i % 3 == 1:
            out.append(name[:2] + name[3:] if len(name) > 4 else name)
        else:
            words = str(c["attributes"].get("description", name)).split()
            out.append(" ".join(words[:2]) or name)
    return out


def run_search(nx: Any, texts: list[str], counter: Statements | None) -> dict:
    """SEARCH per mode: median ms and statements per SEARCH (PostgreSQL)."""
    modes = {"keyword": 'MODE "keyword"', "semantic": 'MODE "semantic"',
             "hybrid": 'MODE "hybrid"', "keyword_with_type": 'WITH TYPE "Drug" MODE "keyword"'}
    out: dict[str, Any] = {}
    for mode, clause in modes.items():
        command = f"SEARCH CONCEPT :q {clause} LIMIT 10"

        def one(text: str, command: str = command) -> None:
            r = nx.execute_kip_readonly({"command": command, "parameters": {"q": text}})
            assert "result" in r, r
        for text in texts:                          # warm
            one(text)
        before = counter.n if counter else 0
        ms = [timed(lambda t=t: one(t), 1) for t in texts]
        entry: dict[str, Any] = {"median_ms": round(statistics.median(ms), 3),
                                 "p90_ms": round(sorted(ms)[int(len(ms) * 0.9)], 3)}
        if counter:
            entry["statements_per_search"] = round((counter.n - before) / len(texts), 1)
        out[mode] = entry
    return out


def answer(result: Any) -> Any:
    """A query's answer in a comparable form (rows in any order)."""
    if isinstance(result, list):
        return sorted(json.dumps(row, sort_keys=True) for row in result)
    return json.dumps(result, sort_keys=True)


def w2(q: Any, ups: list[dict], counter: Statements | None, server: Any = None) -> dict:
    """The durable single UPSERTs `ups` (after 3 of them unmeasured): wall time (median,
    p95), the calling thread's CPU time, the PostgreSQL server's CPU time per upsert
    (total over all of them / count: its clock ticks are 10 ms), statements and round
    trips per upsert."""
    for item in ups[:3]:
        q.upsert(item)
    ups = ups[3:]
    before, trips = (counter.n, counter.trips) if counter else (0, 0)
    wall, cpu = [], []
    s0 = server_cpu(server)
    for item in ups:
        c0, t0 = time.thread_time(), time.perf_counter()
        q.upsert(item)
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.thread_time() - c0) * 1000)
    s1 = server_cpu(server)
    out: dict[str, Any] = {
        "median_ms": round(statistics.median(wall), 3),
        "p95_ms": round(sorted(wall)[int(len(wall) * 0.95)], 3),
        "client_cpu_median_ms": round(statistics.median(cpu), 3),
        "client_cpu_p95_ms": round(sorted(cpu)[int(len(cpu) * 0.95)], 3),
        "load_average": round(os.getloadavg()[0], 1)}
    if s0 is not None and s1 is not None:
        out["server_cpu_ms"] = round((s1 - s0) * 1000 / len(ups), 2)
    if counter:
        out["statements_per_upsert"] = round((counter.n - before) / len(ups), 1)
        out["round_trips_per_upsert"] = round((counter.trips - trips) / len(ups), 2)
    return out


def run(location: str, concepts: list, props: list, meta: dict, reps: int,
        counter: Statements | None, sql: bool = False, search: bool = True,
        answers: dict | None = None, server: Any = None, w2_only: bool = False) -> dict:
    """The figures of one store; `answers` (when given) receives each query's answers."""
    t0 = time.perf_counter()
    nx = NP.open_nexus(location)
    NP.load_into(nx, concepts, props)
    load_s = time.perf_counter() - t0
    settle_s = NP.settle(nx)
    q = NP.NexusQueries(nx)
    params = meta["params"]
    calls = {
        "Q1": lambda p: q.q1(p["type"], p["name"]),
        "Q2": lambda p: q.q2(p["symptom"]),
        "Q3": lambda p: q.q3(p["symptom"], p["max_risk"], p["excluded_class"]),
        "Q4": lambda p: q.q4(p["drug_class"], p["min_hops"], p["max_hops"]),
        "Q5": lambda p: q.q5(),
        "Q6": lambda p: q.q6(),
    }
    out: dict[str, Any] = {"load_s": round(load_s, 2), "settle_s": settle_s,
                           "items": len(concepts) + len(props)}
    for name, call in calls.items():
        if w2_only:
            break
        pool = params.get(name) or [{}]             # Q5, Q6 take no parameters
        sample = [pool[i % len(pool)] for i in range(reps)]
        got = [answer(call(p)) for p in sample]     # warm (parse, plan caches)
        if answers is not None:
            answers[name] = got
        before = counter.n if counter else 0
        by = Counter(counter.by) if counter else Counter()
        ms = [timed(lambda p=p: call(p), 1) for p in sample]
        entry: dict[str, Any] = {"median_ms": round(statistics.median(ms), 3)}
        if counter:
            entry["statements_per_query"] = round((counter.n - before) / len(sample), 1)
            if sql:
                entry["sql"] = {k: round(v / len(sample), 1)
                                for k, v in (counter.by - by).most_common()}
        out[name] = entry
    out["W2"] = w2(q, workload.make_upserts(concepts, meta, k=reps + 3), counter, server)
    if search and not w2_only:
        out["SEARCH"] = run_search(nx, search_queries(concepts, reps), counter)
    nx.close()
    return out


def server_cpu(server: Any) -> float | None:
    """CPU seconds the PostgreSQL server's processes have used so far (the postmaster,
    its live children, and the children it reaped: backends that ended), when the bench
    runs that server itself and psutil is installed; else None."""
    if server is None:
        return None
    try:
        import psutil
        main = psutil.Process(server.pid())
        t = main.cpu_times()
        total = t.user + t.system + t.children_user + t.children_system
        for child in main.children(recursive=True):
            try:
                c = child.cpu_times()
                total += c.user + c.system
            except psutil.Error:
                pass
        return total
    except Exception:  # noqa: BLE001 - no psutil, or the server went away
        return None


def load_only(fresh: Callable[[], str], concepts: list, props: list, data: str,
              counter: Statements, rounds: int, server: Any = None) -> dict:
    """Bulk loads only (see the module doc): a list of runs per kind."""
    import shutil
    out: dict[str, list] = {"postgresql_store_only": [], "postgresql_with_search": [],
                            "lmdb_store_only": []}
    items = len(concepts) + len(props)

    def one(location: str, search: bool) -> dict:
        nx = NP.open_nexus(location)
        if not search:
            nx.detach_search()
        before = counter.n
        pg = server if location.startswith("postgresql:") else None
        s0, c0, t0 = server_cpu(pg), time.process_time(), time.perf_counter()
        NP.load_into(nx, concepts, props)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        s1 = server_cpu(pg)
        statements = counter.n - before
        nx.close()
        run = {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
               "items_per_s": round(items / wall), "load_average":
               round(os.getloadavg()[0], 1)}
        if pg is not None:
            run["statements"] = statements
            if s0 is not None and s1 is not None:
                run["server_cpu_s"] = round(s1 - s0, 2)
                run["items_per_cpu_s"] = round(items / (cpu + s1 - s0))
        return run
    for i in range(rounds):
        for search in (False, True):
            where = fresh()
            key = "postgresql_with_search" if search else "postgresql_store_only"
            out[key].append(one(where, search))
        db = os.path.join(data, f"load{i}")
        out["lmdb_store_only"].append(one(db, False))
        shutil.rmtree(db, ignore_errors=True)
    return {"items": items, **out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--url", default=None)
    ap.add_argument("--sql", action="store_true", help="list the statements of each query")
    ap.add_argument("--no-search", action="store_true", help="skip the SEARCH figures")
    ap.add_argument("--load-only", action="store_true",
                    help="measure the bulk load alone (store only and with SEARCH)")
    ap.add_argument("--rounds", type=int, default=1, help="--load-only: loads of each kind")
    ap.add_argument("--w2-only", action="store_true",
                    help="after the load, only W2 (no Q1-Q6, no SEARCH, no LMDB run)")
    args = ap.parse_args(argv)
    data = tempfile.mkdtemp(prefix="nexus-pg-bench-")
    concepts, props, meta, _ = workload.read(workload.write(workload.generate(args.n), data))
    server = None
    url = args.url
    if url is None:
        sys.path.insert(0, str(ROOT / "tests"))
        from pgtest import PgServer
        server = PgServer(fast=False)
        url = server.fresh_database("bench")
    counter = Statements()
    if args.load_only:
        try:
            spaces = iter(range(1, 1 << 30))
            fresh = ((lambda: server.fresh_database("bench")) if server is not None else
                     lambda: f"{url}{'&' if '?' in url else '?'}space=load-{os.getpid()}-"
                     f"{next(spaces)}")     # (--url: a new space of that database each time)
            report = {"n": args.n, **load_only(fresh, concepts, props, data, counter,
                                               args.rounds, server)}
        finally:
            if server is not None:
                server.stop()
        print(json.dumps(report, indent=2))
        return 0
    pg_answers: dict = {}
    lmdb_answers: dict = {}
    try:
        report = {"n": args.n,
                  "postgresql": run(url, concepts, props, meta, args.reps, counter,
                                    args.sql, not args.no_search, pg_answers, server,
                                    args.w2_only)}
        if args.w2_only:
            print(json.dumps(report, indent=2))
            return 0
        report["lmdb"] = run(os.path.join(data, "db"), concepts, props, meta, args.reps,
                              None, search=not args.no_search, answers=lmdb_answers)
    finally:
        if server is not None:
            server.stop()
    # The same answers from both stores, query by query (Q1-Q6 over the same parameters).
    differ = [q for q in lmdb_answers if pg_answers.get(q) != lmdb_answers[q]]
    report["answers_equal"] = not differ
    if differ:
        report["answers_differ"] = differ
    print(json.dumps(report, indent=2))
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
