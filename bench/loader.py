"""Child processes of `python -m bench`: W1 loads and the RSS probe.

Each load runs in a fresh interpreter so that its time and memory are not coloured by what
the parent holds (earlier datasets, other databases, the GC's view of them):

    python -m bench.loader load  --data DIR --db PATH --mode bulk|upsert
                                 --search attached|detached --out FILE.json
                                 [--answers] [--reference] [--upserts K] [--batch 500]
    python -m bench.loader probe --data DIR --db PATH --out FILE.json

load — W1 as the peers harness defines it: from the parsed JSONL (parse timed apart) to a
committed, durable, queryable nexus. Timed: `Nexus.open` (fresh directory, bootstrap
capsules), the definition of the five types and six predicates (one UPSERT, as KIP is
define-before-use), then either the engine's bulk path (`nexus.ops.capsules.bulk_import`) or
KIP UPSERT batches through `execute_kip` (`--batch` concepts, then propositions, per
command). `--search detached` sets `nexus.detach_search()` first: the store and executor
alone, without SEARCH's lexical and vector indexing. RSS: the process's resident size
right after start-up (`rss_base_mb`), before the timed load with the dataset parsed and
frozen (`rss_before_mb`) and after it (`rss_after_mb`: the moment the load returned, all
its vectors built); `rss_engine_mb` = base + growth over the load, i.e. the process without
the benchmark's parsed dataset, and `rss_engine_anon_mb` / `rss_engine_file_mb` the same
for its two parts (RssAnon: own memory; RssFile: mapped file pages, see `probe`). `--answers` also
returns the digests of Q1–Q6 on the loaded database; `--reference` the digests of the
reference evaluator (`bench.reference`) over the same data, before and after W2.

`close_s` is how long closing took: with SEARCH attached, the wait for the background
vector indexer to catch up with the load (SEARCH answers from the lexical index and the
vectors indexed so far meanwhile; not part of W1, reported beside it).

probe — RSS of a fresh process serving the loaded database, in three phases: right after
`Nexus.open` (`open_*`: ready to serve, before any query), after every Q1–Q6 parameter once
(`queries_*`), and after 10 SEARCHes in the default mode (`searches_*`; hybrid when the
database has the semantic embedder: the first one loads WordLlama and WordNet). Each phase is
split as /proc/self/status splits it (`bench.timing.rss_parts`): `*_rss_mb` (VmRSS) =
`*_anon_mb` (the process's own memory) + `*_file_mb` (mapped file pages: libraries, LMDB,
the memory-mapped vector indexes — page cache, shared and reclaimable).
`rss_serving_mb` is the last phase's VmRSS, `rss_open_mb` the first's.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import time

from . import nexus_peer as NP
from . import reference as R
from . import workload as W
from .timing import disk_mb, peak_rss_mb, rss_mb, rss_parts


def kip(nx, command: str, **params) -> dict:
    response = nx.execute_kip({"command": command, "parameters": params})
    if "error" in response:
        raise RuntimeError(f"{response['error']['code']}: {response['error']['message']}")
    return response["result"]


def upsert_batches(nx, concepts: list, props: list, batch: int = 500) -> int:
    """W1 through KIP: UPSERT commands of `batch` CONCEPT blocks, then of `batch` PROPOSITION
    blocks, every value a parameter (the shape of `bench/nexus_peer.py`'s fallback loader).
    Returns the number of commands. Full batches share one text, so it is parsed once."""
    commands = 0
    texts: dict[int, str] = {}
    for i in range(0, len(concepts), batch):
        chunk = concepts[i:i + batch]
        text = texts.get(len(chunk))
        if text is None:
            text = texts[len(chunk)] = "UPSERT {\n" + "\n".join(
                f"CONCEPT {{ {{type: :t{j}, name: :n{j}}} SET ATTRIBUTES :a{j} }} "
                f"WITH METADATA :m{j}" for j in range(len(chunk))) + "\n}"
        params = {}
        for j, c in enumerate(chunk):
            params[f"t{j}"], params[f"n{j}"] = c["type"], c["name"]
            params[f"a{j}"], params[f"m{j}"] = c["attributes"], c["metadata"]
        kip(nx, text, **params)
        commands += 1
    texts.clear()
    for i in range(0, len(props), batch):
        chunk = props[i:i + batch]
        text = texts.get(len(chunk))
        if text is None:
            text = texts[len(chunk)] = "UPSERT {\n" + "\n".join(
                f"PROPOSITION {{ ({{type: :st{j}, name: :sn{j}}}, :p{j}, "
                f"{{type: :ot{j}, name: :on{j}}}) }} WITH METADATA :m{j}"
                for j in range(len(chunk))) + "\n}"
        params = {}
        for j, p in enumerate(chunk):
            params[f"st{j}"], params[f"sn{j}"] = p["subject"]["type"], p["subject"]["name"]
            params[f"p{j}"], params[f"m{j}"] = p["predicate"], p["metadata"]
            params[f"ot{j}"], params[f"on{j}"] = p["object"]["type"], p["object"]["name"]
        kip(nx, text, **params)
        commands += 1
    return commands


def query_runner(h: "NP.NexusQueries"):
    fns = {"Q1": h.q1, "Q2": h.q2, "Q3": h.q3, "Q4": h.q4, "Q5": h.q5, "Q6": h.q6}
    return lambda q, **p: fns[q](**p)


def load(args) -> dict:
    from nexus.api import Nexus
    from nexus.ops.bulk_import import bulk_import

    base = rss_parts()
    rss_base = base["rss"]
    concepts, props, meta, parse_s = W.read(args.data)
    gc.collect()
    gc.freeze()                         # the dataset is long-lived: keep it out of GC scans
    shutil.rmtree(args.db, ignore_errors=True)
    before = rss_parts()
    rss0 = before["rss"]
    t0, c0 = time.perf_counter(), time.process_time()
    nx = Nexus.open(args.db)
    if args.search == "detached":
        nx.detach_search()
    kip(nx, NP.SCHEMA)
    t1, c1 = time.perf_counter(), time.process_time()
    marks: dict = {}
    if args.mode == "bulk":
        counts = bulk_import(nx, concepts, props,
                             progress=lambda kind, done: marks.__setitem__(kind,
                                                                           time.perf_counter()))
        if (counts.get("concepts_created"), counts.get("propositions_created")) != \
                (len(concepts), len(props)):
            raise RuntimeError(f"bulk_import created {counts}, expected {len(concepts)} "
                               f"concepts and {len(props)} propositions")
        detail = {"batches": counts.get("batches")}
        if "concepts" in marks:
            detail["concepts_s"] = round(marks["concepts"] - t1, 3)
            detail["links_s"] = round(time.perf_counter() - marks["concepts"], 3)
    else:
        detail = {"commands": upsert_batches(nx, concepts, props, args.batch),
                  "batch": args.batch}
    t2, c2 = time.perf_counter(), time.process_time()
    after = rss_parts()
    rss1 = after["rss"]
    items = len(concepts) + len(props)
    out = {"mode": args.mode, "search": args.search, "concepts": len(concepts),
           "propositions": len(props), "items": items, "parse_s": round(parse_s, 3),
           "open_and_schema_s": round(t1 - t0, 3), "import_s": round(t2 - t1, 3),
           "load_s": round(t2 - t0, 3), "load_cpu_s": round(c2 - c0, 3),
           "import_cpu_s": round(c2 - c1, 3),
           "items_per_s": round(items / (t2 - t0)), **detail,
           "rss_base_mb": round(rss_base, 1), "rss_before_mb": round(rss0, 1),
           "rss_after_mb": round(rss1, 1), "rss_delta_mb": round(rss1 - rss0, 1),
           "rss_engine_mb": round(rss_base + rss1 - rss0, 1),
           **{f"rss_engine_{k}_mb": round(base[k] + after[k] - before[k], 1)
              for k in ("anon", "file") if k in after}}
    if args.answers:
        out["answers"] = R.answer_digests(query_runner(NP.NexusQueries(nx)), meta["params"])
    t3 = time.perf_counter()
    nx.close()                # waits for the background vector indexer to catch up
    out["close_s"] = round(time.perf_counter() - t3, 3)
    out["disk_mb"] = round(disk_mb(args.db), 1)
    out["peak_rss_mb"] = round(peak_rss_mb(), 1)
    if args.reference:
        gc.unfreeze()
        ref = R.Reference(concepts, props)
        out["reference"] = R.answer_digests(ref.run, meta["params"])
        upserts = W.make_upserts(concepts, meta, args.upserts)
        for item in upserts:
            ref.upsert(item)
        out["reference"].update(R.post_w2_checks(ref.run, upserts))
    return out


def probe(args) -> dict:
    from nexus.api import Nexus

    rss_base = rss_mb()
    with open(os.path.join(args.data, "meta.json"), encoding="utf-8") as f:
        meta = json.load(f)
    t0 = time.perf_counter()
    nx = Nexus.open(args.db)
    open_s = time.perf_counter() - t0
    gc.collect()
    phases = {"open": rss_parts()}
    run = query_runner(NP.NexusQueries(nx))
    for q in R.QUERIES:
        for p in meta["params"][q]:
            run(q, **p)
    gc.collect()
    phases["queries"] = rss_parts()
    for p in meta["params"]["Q1"][:10]:
        nx.execute_kip_readonly({"command": "SEARCH CONCEPT :q LIMIT 10",
                                 "parameters": {"q": p["name"]}})
    gc.collect()
    phases["searches"] = rss_parts()
    opened = getattr(nx.search, "opened", None)
    nx.close()
    out = {"rss_base_mb": round(rss_base, 1), "open_s": round(open_s, 3),
           "rss_open_mb": phases["open"]["rss"], "rss_serving_mb": phases["searches"]["rss"],
           "peak_rss_mb": round(peak_rss_mb(), 1), "search_opened": opened}
    for phase, parts in phases.items():
        for k, v in parts.items():
            out[f"{phase}_{k}_mb"] = v
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.loader", description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=("load", "probe"))
    ap.add_argument("--data", required=True, help="dataset directory (…/n<N>)")
    ap.add_argument("--db", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--mode", choices=("bulk", "upsert"), default="bulk")
    ap.add_argument("--search", choices=("attached", "detached"), default="attached")
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--answers", action="store_true")
    ap.add_argument("--reference", action="store_true")
    ap.add_argument("--upserts", type=int, default=200)
    args = ap.parse_args(argv)
    result = load(args) if args.what == "load" else probe(args)
    with open(args.out + ".tmp", "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    os.replace(args.out + ".tmp", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
