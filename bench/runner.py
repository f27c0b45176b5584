"""`python -m bench`: the one benchmark command (issue 8). See bench/__init__.py for usage.

Per N (default 10,000 and 100,000):
  1. the peers workload (`bench/workload.py`, gen.py's semantics and bytes), cached under
     bench/data/;
  2. W1 in child processes (`bench/loader.py`): the bulk path with SEARCH attached (the
     engine's default — this database is the one queried below), the bulk path with
     SEARCH detached (store and executor only), and KIP UPSERT batches; RSS and disk size;
     a fresh process serving the database (RSS probe);
  3. in this process, on the bulk-loaded database: Q1–Q6 (warm-up round, whose answers
     are checked, then timed rounds until --budget), W2 (200 durable upserts; then with
     SEARCH detached), SEARCH, the mixed agent loop;
  4. when the peer harness and packages are there: the harness for Kùzu, Oxigraph and
     (in its own process) Ladybug on the same dataset, with nexus plugged into it too up
     to N=20k (`--harness-nexus`; at 100k that would repeat the indexed bulk load).
Answers are checked against `bench.reference` (and, with the harness, `bench.reference`
against every peer, so nexus against every peer); any mismatch is printed loudly with the
query, the parameters and the differing rows, and makes the exit status 1.
Writes the full result (bench/results/full/, git-ignored), a compact JSON for tracking
(bench/results/<date>.json) and the `## Summary` of bench/RESULTS.md (only that section).
"""
from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata

from . import harness as H
from . import nexus_peer as NP
from . import reference as R
from . import report
from . import workload as W
from .mixed import mixed_loop, search_bench
from .timing import rss_mb, stats_ms, time_rounds

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_PEERS_DIR = os.path.normpath(os.path.join(ROOT, "..", "shared", "peers"))
QUERIES = R.QUERIES
DEFAULT_SIZES = [10_000, 100_000]
HARNESS_NEXUS_MAX_N = 20_000      # --harness-nexus auto: plug nexus into the harness up to this N
PACKAGES = ("nexus-kip", "lmdb", "usearch", "orjson", "msgpack", "lark", "numpy", "networkx",
            "kuzu", "ladybug", "pyoxigraph")


def log(msg: str = "") -> None:
    print(msg, flush=True)


# --- environment -------------------------------------------------------------------------------
def machine() -> dict:
    cpu = platform.processor() or "unknown CPU"
    mem = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gb": mem,
            "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
            "loadavg_start": " ".join(f"{x:.2f}" for x in os.getloadavg())}


def versions() -> dict:
    out = {"python": platform.python_version()}
    for dist in PACKAGES:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def git_describe() -> str | None:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True, timeout=10).stdout
        return (head + ("+changes" if dirty.strip() else "")) or None
    except (OSError, subprocess.SubprocessError):
        return None


def source_fingerprint() -> str:
    """sha256 (12 hex digits) of the engine's sources: a run whose start and end differ
    measured a checkout that changed under it."""
    import hashlib
    h = hashlib.sha256()
    for base in ("nexus", "grammar", "capsules"):
        for root, dirs, files in sorted(os.walk(os.path.join(ROOT, base))):
            dirs.sort()
            for name in sorted(files):
                if name.endswith((".py", ".lark", ".kip")):
                    path = os.path.join(root, name)
                    h.update(os.path.relpath(path, ROOT).encode())
                    with open(path, "rb") as f:
                        h.update(f.read())
    return h.hexdigest()[:12]


# --- child processes --------------------------------------------------------------------------
def child(what: str, data: str, db: str, out: str, *extra: str) -> dict:
    argv = [sys.executable, "-m", "bench.loader", what, "--data", data, "--db", db,
            "--out", out, *extra]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n"
                           f"{proc.stderr[-3000:]}")
    with open(out, encoding="utf-8") as f:
        return json.load(f)


def read_names(d: str) -> list[tuple[str, str]]:
    """(type, name) of every concept: what the in-process steps need of the dataset."""
    from orjson import loads
    with open(os.path.join(d, "concepts.jsonl"), "rb") as f:
        return [(c["type"], c["name"]) for c in map(loads, f)]


# --- the in-process measurements ---------------------------------------------------------------
def measure_queries(h: "NP.NexusQueries", meta: dict, args, check: dict,
                    answers: dict | None = None) -> dict:
    """Q1–Q6: the warm-up round's answer digests go into `check` (and the canonical answers
    into `answers`, to explain a mismatch), then the timed rounds."""
    fns = {"Q1": h.q1, "Q2": h.q2, "Q3": h.q3, "Q4": h.q4, "Q5": h.q5, "Q6": h.q6}
    out = {}
    for q in QUERIES:
        params = meta["params"][q]
        fn = fns[q]
        canon, rows = [], []
        t0 = time.perf_counter_ns()
        for p in params:                              # warm-up round; its answers are checked
            res = fn(**p)
            canon.append(R.canon(q, res))
            rows.append(0 if res is None else 1 if q == "Q1" else len(res))
        first_round_ms = (time.perf_counter_ns() - t0) / 1e6
        check[q] = [R.digest(c) for c in canon]
        if answers is not None:             # as text: nothing for the cyclic GC to scan
            answers[q] = [json.dumps(c, ensure_ascii=False) for c in canon]
        gc.collect()
        times, per = time_rounds(fn, params, args.budget, args.min_reps, args.max_reps,
                                 args.hard_cap)
        st = stats_ms(times)
        st["warmup_round_ms"] = round(first_round_ms, 3)
        st["rows_avg"] = round(sum(rows) / len(rows), 1)
        st["per_param"] = [{"param": p, **stats_ms(t), "rows": r}
                           for p, t, r in zip(params, per, rows)]
        if q in ("Q2", "Q3"):
            for part, hub in (("ordinary", False), ("hub", True)):
                calls = [x for p, t in zip(params, per)
                         if (p["symptom"] in report.HUBS) == hub for x in t]
                st[part] = {"median_ms": round(report.split_median(st["per_param"], hub), 4),
                            "p95_ms": stats_ms(calls)["p95_ms"],
                            "median_of_all_calls_ms": stats_ms(calls)["median_ms"]}
        out[q] = st
        extra = (f"  ordinary {st['ordinary']['median_ms']:.3f}  hub "
                 f"{st['hub']['median_ms']:.3f}" if "ordinary" in st else "")
        log(f"    {q}  median {st['median_ms']:.3f} ms  p95 {st['p95_ms']:.3f} ms  "
            f"reps {st['reps']}  rows~{st['rows_avg']}{extra}")
    return out


def measure_w2(h: "NP.NexusQueries", items: list) -> dict:
    times = []
    pc = time.perf_counter_ns
    for item in items:
        t0 = pc()
        h.upsert(item)
        times.append(pc() - t0)
    st = stats_ms(times)
    st["ops_per_s"] = round(len(times) / (sum(times) / 1e9)) if times else 0
    st["times_ms"] = [round(t / 1e6, 4) for t in times]
    return st


def renamed(items: list, suffix: str) -> list:
    """The same upserts on other drugs (so that a second W2 run creates, then updates)."""
    return [{**it, "concept": {**it["concept"], "name": it["concept"]["name"] + suffix}}
            for it in items]


def explain(n: int, data: str, meta: dict, answers: dict, keys: list[str],
            problems: list) -> None:
    """For each mismatching query, the first parameter set whose answer differs from the
    reference evaluator's: what to put in an engine bug report."""
    concepts, props, _meta, _ = W.read(data)
    ref = R.Reference(concepts, props)
    for q in keys:
        for p, text in zip(meta["params"].get(q, ()), answers.get(q, ())):
            got = json.loads(text)
            want = json.loads(json.dumps(R.canon(q, ref.run(q, **p)), ensure_ascii=False))
            if got != want:
                problems.append(f"N={n} nexus {q} with {json.dumps(p, ensure_ascii=False)}: "
                                f"{R.describe_diff(got, want)}")
                log(f"  !!! {problems[-1]}")
                break


def compare(label: str, got: dict, want: dict, problems: list) -> list[str]:
    bad = []
    for key, digests in want.items():
        if key not in got:
            continue
        if got[key] != digests:
            idx = [i for i, (a, b) in enumerate(zip(got[key], digests)) if a != b]
            bad.append(key)
            problems.append(f"{label}: {key} differs from the reference "
                            f"(parameter indexes {idx or 'count'})")
            log(f"  !!! MISMATCH: {problems[-1]}")
    return bad


# --- one N -------------------------------------------------------------------------------------
def run_n(n: int, args, peers: list[str], work: str, problems: list) -> dict:
    log(f"\n== N = {n:,}")
    t_n = time.perf_counter()
    t0 = time.perf_counter()
    data = W.ensure(n, args.data)
    with open(os.path.join(data, "meta.json"), encoding="utf-8") as f:
        meta = json.load(f)
    gen_s = time.perf_counter() - t0
    rec: dict = {"n": n, "dataset": {"dir": data, "concepts": meta["concepts"],
                                     "propositions": meta["propositions"],
                                     "sha256": meta["sha256"], "seed": meta["seed"],
                                     "generator": "bench/workload.py (" + meta["generator"] + ")",
                                     "prepare_s": round(gen_s, 1)}}
    gen_py = os.path.join(args.peers_dir, "gen.py") if args.peers_dir else None
    if (n, meta["seed"]) in W.KNOWN_SHA256:
        rec["dataset"]["identical_to_gen_py"] = "sha256 = the published gen.py output"
    elif gen_py and os.path.isfile(gen_py) and n <= 20_000:
        same = W.verify_against(gen_py, n, meta["seed"])
        rec["dataset"]["identical_to_gen_py"] = "byte-identical" if all(same.values()) else same
        if not all(same.values()):
            problems.append(f"N={n}: bench/workload.py output differs from gen.py: {same}")
    log(f"  dataset {data}: {meta['concepts']:,} concepts, {meta['propositions']:,} "
        f"propositions ({gen_s:.1f} s)")
    wd = os.path.join(work, f"n{n}")
    os.makedirs(wd, exist_ok=True)
    db = os.path.join(wd, "nexus-bulk")
    u = str(args.upserts)

    log("  W1 bulk_import (SEARCH attached) ...")
    w1 = child("load", data, db, os.path.join(wd, "w1-bulk.json"), "--mode", "bulk",
               "--search", "attached", "--reference", "--upserts", u)
    reference = w1.pop("reference")
    rec["w1_bulk"] = w1
    log(f"    {w1['load_s']:.2f} s, {w1['items_per_s']:,} items/s; RSS {w1['rss_engine_mb']:.0f}"
        f" MB (Δ {w1['rss_delta_mb']:.0f}); disk {w1['disk_mb']:.0f} MB; vector index caught "
        f"up {w1.get('close_s', 0):.1f} s later")
    if not args.skip_store_only:
        log("  W1 bulk_import (SEARCH detached) ...")
        db2 = os.path.join(wd, "nexus-store")
        rec["w1_bulk_store"] = child("load", data, db2, os.path.join(wd, "w1-store.json"),
                                     "--mode", "bulk", "--search", "detached")
        shutil.rmtree(db2, ignore_errors=True)
        log(f"    {rec['w1_bulk_store']['load_s']:.2f} s, "
            f"{rec['w1_bulk_store']['items_per_s']:,} items/s")
    log(f"  W1 KIP UPSERT batches (SEARCH {args.upsert_search}) ...")
    db3 = os.path.join(wd, "nexus-upsert")
    w1u = child("load", data, db3, os.path.join(wd, "w1-upsert.json"), "--mode", "upsert",
                "--search", args.upsert_search, "--answers", "--batch", str(args.upsert_batch))
    shutil.rmtree(db3, ignore_errors=True)
    upsert_answers = w1u.pop("answers")
    rec["w1_upsert"] = w1u
    log(f"    {w1u['load_s']:.2f} s, {w1u['items_per_s']:,} items/s")
    rec["probe"] = child("probe", data, db, os.path.join(wd, "probe.json"))
    pr = rec["probe"]
    log(f"  RSS of a fresh process serving it: {pr['rss_open_mb']:.0f} MB at open, "
        f"{pr['queries_rss_mb']:.0f} after Q1–Q6, {pr['rss_serving_mb']:.0f} after 10 SEARCHes "
        f"(anon {pr.get('searches_anon_mb', float('nan')):.0f} + file "
        f"{pr.get('searches_file_mb', float('nan')):.0f})")

    # --- in this process ---------------------------------------------------------------------
    from nexus.api import Nexus
    names = read_names(data)
    gc.collect()
    nx = Nexus.open(db)
    gc.collect()
    gc.freeze()
    direct: dict = {}
    answers: dict = {}
    try:
        h = NP.NexusQueries(nx)
        log("  Q1–Q6 ...")
        rec["queries"] = measure_queries(h, meta, args, direct, answers)
        items = W.make_upserts([{"type": t, "name": nm} for t, nm in names], meta, args.upserts)
        log(f"  W2 ({len(items)} durable upserts) ...")
        rec["w2"] = measure_w2(h, items)
        run = lambda q, **p: getattr(h, q.lower())(**p)  # noqa: E731
        direct.update(R.post_w2_checks(run, items))
        log(f"    median {rec['w2']['median_ms']:.3f} ms  p95 {rec['w2']['p95_ms']:.3f} ms")
        # Detaching closes the search service (its vectors freed): a new one is attached
        # after, opened from the saved files. (Putting the closed one back, as this did from
        # 1c62737, left SEARCH with no vectors — typos unfound, hit@10 0.99 → 0.80 — and
        # the mixed loop's writes unindexed.)
        attached = nx.search is not None
        nx.detach_search()
        try:
            rec["w2_store"] = measure_w2(h, renamed(items, " (store only)"))
        finally:
            if attached:
                nx.attach_search()
        log(f"    store only: median {rec['w2_store']['median_ms']:.3f} ms")
        if nx.search is not None:
            log(f"  SEARCH ({args.search_queries} queries × {args.search_passes}) ...")
            rec["search"] = search_bench(nx, names, meta["seed"], args.search_queries,
                                         args.search_passes)
            log(f"    median {rec['search']['median_ms']:.3f} ms  p95 "
                f"{rec['search']['p95_ms']:.3f} ms  hit@10 {rec['search']['hit_at_10']}")
            log(f"  mixed agent loop ({args.mixed_iterations} iterations) ...")
            drugs = [nm for t, nm in names if t == "Drug"]
            rec["mixed"] = mixed_loop(nx, drugs, meta["seed"], args.mixed_iterations)
            log(f"    {rec['mixed']['iterations_per_s']} iterations/s, median "
                f"{rec['mixed']['iteration']['median_ms']:.2f} ms per iteration")
        else:
            problems.append(f"N={n}: nexus.search is not attached; SEARCH and the mixed loop "
                            "were skipped")
        rec["rss_main_mb"] = round(rss_mb(), 1)
    finally:
        gc.unfreeze()
        nx.close()
    if not args.keep_db:
        shutil.rmtree(db, ignore_errors=True)

    # --- answers -----------------------------------------------------------------------------
    bad_direct = compare(f"N={n} nexus", direct, reference, problems)
    bad_upsert = compare(f"N={n} nexus loaded by UPSERT", upsert_answers, reference, problems)
    if bad_direct:
        explain(n, data, meta, answers, [k for k in bad_direct if k in answers], problems)
    answers.clear()
    checked = [k for k in reference if k in direct]

    # --- the peers ---------------------------------------------------------------------------
    rec["harness_runs"] = []
    if peers:
        plug = args.harness_nexus == "yes" or (args.harness_nexus == "auto"
                                                and n <= HARNESS_NEXUS_MAX_N)
        for spec in H.plan(peers, nexus=plug):
            log(f"  peer harness: {', '.join(spec['peers'])}"
                f"{' + nexus plug-in' if spec['nexus'] else ''}")
            rec["harness_runs"].append(H.run(
                spec, n, os.path.dirname(data), wd, os.path.join(wd, "peers-results"),
                args.peers_dir, {"budget": args.budget, "min_reps": args.min_reps,
                                 "hard_cap": args.hard_cap, "upserts": args.upserts}, log))
        harness_problems = H.mismatches(rec["harness_runs"], reference)
        for p in harness_problems:
            problems.append(f"N={n} harness: {p}")
            log(f"  !!! MISMATCH: {problems[-1]}")
    else:
        harness_problems = []
    ok = not (bad_direct or bad_upsert or harness_problems)
    engines = ["nexus", "nexus loaded by UPSERT", "bench.reference"] + sorted(
        H.peer_figures(rec["harness_runs"]))
    rec["verification"] = {
        "ok": ok, "checked": checked, "direct_mismatches": bad_direct,
        "upsert_load_mismatches": bad_upsert, "harness_problems": harness_problems,
        "reference_digests": reference,
        "summary": (f"identical across {', '.join(engines)} on {', '.join(checked)} "
                    "(every parameter)" if ok else
                    "**MISMATCH** — see Problems below")}
    rec["seconds"] = round(time.perf_counter() - t_n, 1)
    log(f"  N = {n:,} done in {rec['seconds'] / 60:.1f} min")
    return rec


# --- main --------------------------------------------------------------------------------------
def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="python -m bench",
        description="The nexus benchmark: the peers workload through nexus (W1 bulk and "
                    "UPSERT, Q1–Q6, W2, SEARCH, a mixed agent loop) and, when available, "
                    "the peer harness (Kùzu, Ladybug, Oxigraph) in the same invocation.")
    ap.add_argument("--n", default=None, help="comma list of sizes (default 10000,100000)")
    ap.add_argument("--quick", action="store_true", help="N=2000, short budgets, few reps")
    ap.add_argument("--peers", default="auto", help="auto | none | kuzu,ladybug,oxigraph")
    ap.add_argument("--peers-dir", default=None,
                    help=f"the peer harness directory (default {DEFAULT_PEERS_DIR} if it exists)")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds of timed rounds per query (default 1.5; quick 0.2)")
    ap.add_argument("--min-reps", type=int, default=None, help="default 30 (quick 5)")
    ap.add_argument("--max-reps", type=int, default=5000)
    ap.add_argument("--hard-cap", type=float, default=None,
                    help="max seconds per query (default 10; quick 2)")
    ap.add_argument("--upserts", type=int, default=None, help="W2 upserts (default 200)")
    ap.add_argument("--search-queries", type=int, default=None, help="default 100")
    ap.add_argument("--search-passes", type=int, default=None, help="default 3")
    ap.add_argument("--mixed-iterations", type=int, default=None, help="default 200")
    ap.add_argument("--upsert-search", choices=("attached", "detached"), default="detached",
                    help="SEARCH index during the W1 UPSERT load (default detached: attached "
                         "adds the same indexing cost as the bulk row shows, and is slow)")
    ap.add_argument("--upsert-batch", type=int, default=500, help="blocks per UPSERT command")
    ap.add_argument("--harness-nexus", choices=("auto", "yes", "no"), default="auto",
                    help="also plug nexus into the peer harness (its own timing loop, beside "
                         f"Ladybug); auto: only for N ≤ {HARNESS_NEXUS_MAX_N:,} (at 100k it "
                         "repeats the minutes-long indexed bulk load; the answers are "
                         "cross-checked without it)")
    ap.add_argument("--skip-store-only", action="store_true",
                    help="skip the W1 bulk load with SEARCH detached")
    ap.add_argument("--data", default=os.path.join(HERE, "data"),
                    help="dataset cache (default bench/data, git-ignored)")
    ap.add_argument("--workdir", default=None, help="databases and harness output "
                    "(default: a temporary directory, removed at the end)")
    ap.add_argument("--keep-db", action="store_true")
    ap.add_argument("--out", default=None,
                    help="result JSON (default bench/results/<date>[-n<N>...].json)")
    ap.add_argument("--no-write", action="store_true", help="do not touch bench/RESULTS.md")
    ap.add_argument("--from-json", metavar="FILE",
                    help="only re-render the Summary of RESULTS.md from a result JSON")
    ap.add_argument("--results-md", default=os.path.join(HERE, "RESULTS.md"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    quick = args.quick
    defaults = {"budget": (1.5, 0.2), "min_reps": (30, 5), "hard_cap": (10.0, 2.0),
                "upserts": (200, 40), "search_queries": (100, 30), "search_passes": (3, 1),
                "mixed_iterations": (200, 30)}
    for key, (full, short) in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, short if quick else full)
    if args.n is None:
        args.n = "2000" if quick else ",".join(map(str, DEFAULT_SIZES))
    args.sizes = sorted({int(x.replace("_", "")) for x in args.n.split(",") if x.strip()})
    if args.peers_dir is None and os.path.isdir(DEFAULT_PEERS_DIR):
        args.peers_dir = DEFAULT_PEERS_DIR
    return args


def shown(path: str) -> str:
    path = os.path.abspath(path)
    return os.path.relpath(path, ROOT) if path.startswith(ROOT + os.sep) else path


def default_out(args) -> str:
    """bench/results/<date>.json for the default sizes (the compact JSON that is committed
    for tracking), <date>-n<N>….json for other sizes (git-ignored)."""
    day = dt.datetime.now(dt.timezone.utc).date().isoformat()
    suffix = "" if args.sizes == DEFAULT_SIZES else "-n" + "-".join(map(str, args.sizes))
    return os.path.join(HERE, "results", f"{day}{suffix}.json")


def full_out(out: str) -> str:
    """Where the full result (every call's and parameter's figures, answer digests, the
    harness's own JSON) goes: `full/` beside the compact file (git-ignored)."""
    return os.path.join(os.path.dirname(os.path.abspath(out)), "full", os.path.basename(out))


def write_json(path: str, data: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, ensure_ascii=False, default=str)
        f.write("\n")
    os.replace(path + ".tmp", path)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.from_json:
        with open(args.from_json, encoding="utf-8") as f:
            text = report.section(json.load(f))
        log(text)
        if not args.no_write:
            report.write(args.results_md, text)
        return 0
    started = time.perf_counter()
    command = "python -m bench" + ("" if not argv else " " + shlex.join(argv))
    mach = machine()
    log(f"{command}\n{mach['cpu']}, {mach['cores']} cores, load average {mach['loadavg_start']}")
    try:
        peers, notes = H.select(args.peers, args.peers_dir)
    except ValueError as exc:
        log(f"error: {exc}")
        return 2
    for note in notes:
        log(note)
    if peers:
        log(f"peers: {', '.join(peers)} (harness {args.peers_dir})")
    out = args.out or default_out(args)
    full = full_out(out)
    work = args.workdir or tempfile.mkdtemp(prefix="nexus-bench-")
    os.makedirs(work, exist_ok=True)
    problems: list[str] = []
    result = {"meta": {"command": command, "argv": argv,
                       "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                       "git": git_describe(), "engine_sources": source_fingerprint(),
                       "machine": mach, "versions": versions(),
                       "peers": peers, "peers_dir": args.peers_dir,
                       "options": {k: v for k, v in vars(args).items()
                                   if k not in ("results_md",)},
                       "out": shown(out), "full_out": shown(full)},
              "runs": {}, "notes": list(notes), "problems": problems}
    status = 0
    try:
        for n in args.sizes:
            result["runs"][str(n)] = run_n(n, args, peers, work, problems)
    except Exception as exc:                       # report what was measured, then fail
        import traceback
        traceback.print_exc()
        problems.append(f"aborted: {type(exc).__name__}: {exc}")
        status = 1
    finally:
        if not args.workdir and not args.keep_db:
            shutil.rmtree(work, ignore_errors=True)
    result["meta"]["machine"]["loadavg_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    result["meta"]["total_s"] = round(time.perf_counter() - started, 1)
    end_sources = source_fingerprint()
    if end_sources != result["meta"]["engine_sources"]:
        result["meta"]["engine_sources_end"] = end_sources
        result["notes"].append("the engine's sources changed during this run (a shared "
                               "checkout): figures may mix two versions")
        log("note: the engine's sources changed during this run")
    peer_versions = {}
    for run in result["runs"].values():
        peer_versions.update(H.versions(run.get("harness_runs") or []))
    result["meta"]["harness_versions"] = peer_versions
    write_json(full, result)
    write_json(out, report.compact(result))
    log(f"\nwrote {out} (compact) and {full} (full)")
    if result["runs"]:
        text = report.section(result)
        log("\n" + text)
        if not args.no_write:
            report.write(args.results_md, text)
            log(f"wrote the {report.SECTION} of {args.results_md}")
    if problems:
        bar = "!" * 78
        log(f"\n{bar}\n{len(problems)} PROBLEM(S):")
        for p in problems:
            log(f"  - {p}")
        log(bar)
        status = 1
    return status
