"""Storage and KML benchmark: bulk load (W1) and single durable UPSERT (W2) of the peers
dataset (`../shared/peers`), database size on disk and RSS.

    python bench/load.py --n 100000 [--n 10000] [--data /tmp/nexus-peers]
                                       [--with-search 10000] [--upserts 200]
                                       [--batch-size 1000000] [--write]

* W1 — from the parsed JSONL (parse time reported apart, as the peers harness does) to a
  queryable, committed, durable nexus: the five types and six predicates are defined by one
  UPSERT, then `nexus.ops.capsules.bulk_import` loads the concepts and links (one transaction per
  batch). items/s = (concepts + links) / seconds.
* W2 — the peers README's upsert (one Drug with all attributes and metadata, `treats` and
  `is_class_of` links with metadata), 200 in a row through `execute_kip`, each its own
  durable (fsync'd) transaction; every 4th re-upserts an earlier one with new values (the
  peers harness's `make_upserts`, same seed). Median and p95 latency.
* Disk = allocated size of the LMDB directory; RSS = resident set after the load (and its
  growth over the load).
* Storage and KML are measured with the SEARCH index detached (`nexus.detach_search()` on this
  throwaway database): indexing every element for SEARCH is the search layer's cost, reported
  apart — `--with-search N` loads size N with the index attached too (slow), and
  W2 is always also timed with the index attached.

The dataset is generated into `--data` when missing (`bench.workload`, gen.py's output byte
for byte, so `../shared` is not needed). As in the peers harness,
the parsed dataset is `gc.freeze()`d so that collections do not rescan it. `--write` replaces
the `## Storage and KML` section of bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# Run as a script, this folder is sys.path[0], where a sibling script could shadow a module
# of the standard library (a bench/http.py once hid `http` from usearch, silently detaching
# SEARCH): put the repository there instead.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.join(_HERE, ".."))

from nexus.api import Nexus  # noqa: E402
from nexus.ops.bulk_import import bulk_import  # noqa: E402
from nexus.ops.bulk_import import DEFAULT_BATCH  # noqa: E402

from bench import workload  # noqa: E402
from bench.results_md import replace_section  # noqa: E402
from bench.nexus_peer import W2, w2_params  # noqa: E402  (the peers README's W2 command)
from bench.timing import disk_mb, rss_mb  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")
SECTION = "## Storage and KML"

SCHEMA = """
UPSERT {
  CONCEPT ?drug { {type: "$ConceptType", name: "Drug"} SET ATTRIBUTES { description: "A drug" } }
  CONCEPT ?symptom { {type: "$ConceptType", name: "Symptom"} SET ATTRIBUTES { description: "A symptom" } }
  CONCEPT ?cls { {type: "$ConceptType", name: "DrugClass"} SET ATTRIBUTES { description: "A drug class" } }
  CONCEPT ?person { {type: "$ConceptType", name: "Person"} }
  CONCEPT ?event { {type: "$ConceptType", name: "Event"} }
  CONCEPT ?p1 { {type: "$PropositionType", name: "treats"} SET ATTRIBUTES { subject_types: ["Drug"], object_types: ["Symptom"] } }
  CONCEPT ?p2 { {type: "$PropositionType", name: "has_side_effect"} SET ATTRIBUTES { subject_types: ["Drug"], object_types: ["Symptom"] } }
  CONCEPT ?p3 { {type: "$PropositionType", name: "is_class_of"} SET ATTRIBUTES { subject_types: ["Drug"], object_types: ["DrugClass"] } }
  CONCEPT ?p4 { {type: "$PropositionType", name: "is_subclass_of"} SET ATTRIBUTES { subject_types: ["DrugClass"], object_types: ["DrugClass"] } }
  CONCEPT ?p5 { {type: "$PropositionType", name: "mentions"} }
  CONCEPT ?p6 { {type: "$PropositionType", name: "knows"} SET ATTRIBUTES { subject_types: ["Person"], object_types: ["Person"] } }
}
WITH METADATA { source: "bench" }
"""



def load_dataset(n: int, data: str) -> tuple[list, list, dict, float]:
    """The peers workload of size n (generated into `data` when missing): concepts,
    propositions, meta and the JSONL parse seconds."""
    return workload.read(workload.ensure(n, data))


def make_upserts(concepts: list, meta: dict, k: int) -> list[dict]:
    """The peers harness's W2 items (bench_peers.make_upserts, same seed), as KIP parameters."""
    return [w2_params(item) for item in workload.make_upserts(concepts, meta, k)]


def w2(nx: Nexus, upserts: list[dict], suffix: str = "") -> tuple[float, float]:
    """Median and p95 (ms) of the W2 upserts, each committed durably by execute_kip."""
    latencies = []
    for params in upserts:
        params = dict(params, name=params["name"] + suffix)
        t = time.perf_counter()
        response = nx.execute_kip({"command": W2, "parameters": params})
        latencies.append(time.perf_counter() - t)
        assert "error" not in response, response
    latencies.sort()
    return (statistics.median(latencies) * 1e3,
            latencies[int(len(latencies) * 0.95) - 1] * 1e3)


def run(n: int, args, with_search: bool = False) -> dict:
    concepts, links, meta, parse_s = load_dataset(n, args.data)
    gc.collect()
    gc.freeze()
    workdir = tempfile.mkdtemp(prefix=f"nexus-load-{n}-", dir=args.dir)
    path = os.path.join(workdir, "db")
    try:
        nx = Nexus.open(path)
        search = nx.search
        if not with_search:
            nx.detach_search()
        rss0 = rss_mb()
        t0, c0 = time.perf_counter(), time.process_time()
        response = nx.execute_kip({"command": SCHEMA})
        assert "error" not in response, response
        marks: dict[str, float] = {}
        counts = bulk_import(nx, concepts, links, batch_size=args.batch_size,
                             progress=lambda kind, done: marks.__setitem__(
                                 kind, time.perf_counter()))
        load_s, load_cpu_s = time.perf_counter() - t0, time.process_time() - c0
        concepts_s = marks["concepts"] - t0
        links_s = t0 + load_s - marks["concepts"]
        rss1 = rss_mb()
        drain_s = vectors = None
        if with_search:         # the vectors are built by the background indexer: wait
            t1 = time.perf_counter()
            nx.search.drain()
            drain_s = time.perf_counter() - t1
            vectors = sum(len(ix) for ix in nx.search.vectors.indexes)
        items = len(concepts) + len(links)
        assert counts["concepts_created"] == len(concepts), counts
        assert counts["propositions_created"] == len(links), counts
        upserts = make_upserts(concepts, meta, args.upserts)
        nx.detach_search()
        w2_median, w2_p95 = w2(nx, upserts)
        if search is not None:      # a new service: the closed one has freed its vectors
            nx.attach_search()      # (the store loaded without SEARCH: indexed at this open)
        w2s_median, w2s_p95 = w2(nx, upserts, " (s)") if search is not None else (None, None)
        size = disk_mb(path)
        nx.close()
        # The same upserts without fsync: what the engine costs apart from the disk flush.
        nx = Nexus.open(path, durable=False)
        search = nx.search
        nx.detach_search()
        w2_nosync, _ = w2(nx, upserts, " (n)")
        if search is not None:
            nx.attach_search()
        w2s_nosync, _ = w2(nx, upserts, " (ns)") if search is not None else (None, None)
        nx.close()
        result = {
            "n": n, "search": with_search, "concepts": len(concepts), "links": len(links),
            "items": items, "parse_s": parse_s, "load_s": load_s, "load_cpu_s": load_cpu_s,
            "concepts_s": concepts_s, "links_s": links_s, "w2_nosync_median_ms": w2_nosync,
            "items_per_s": items / load_s, "batches": counts["batches"],
            "w2_median_ms": w2_median, "w2_p95_ms": w2_p95,
            "w2_search_median_ms": w2s_median, "w2_search_p95_ms": w2s_p95,
            "w2_search_nosync_median_ms": w2s_nosync,
            "vector_drain_s": drain_s, "vectors": vectors,
            "disk_mb": size, "rss_mb": rss1, "rss_delta_mb": rss1 - rss0,
            "load_avg": os.getloadavg()[0],
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        gc.unfreeze()
    return result


def rss_child(n: int, data: str, with_search: bool) -> dict:
    """In a fresh process: stream the JSONL files into a new nexus (the dataset is never held
    whole) and report the engine's memory: VmRSS after the load and its peak (VmHWM)."""
    import orjson
    d = os.path.join(data, f"n{n}")
    workdir = tempfile.mkdtemp(prefix=f"nexus-rss-{n}-")
    path = os.path.join(workdir, "db")

    def stream(name):
        with open(os.path.join(d, name), "rb") as f:
            for line in f:
                yield orjson.loads(line)
    try:
        nx = Nexus.open(path)
        if not with_search:
            nx.detach_search()
        rss0 = rss_mb()
        t0 = time.perf_counter()
        assert "error" not in nx.execute_kip({"command": SCHEMA})
        counts = bulk_import(nx, stream("concepts.jsonl"), stream("propositions.jsonl"))
        load_s = time.perf_counter() - t0
        gc.collect()
        out = {"n": n, "search": with_search, "rss_before_mb": rss0, "rss_mb": rss_mb(),
               "hwm_mb": status_mb("VmHWM"), "load_s": load_s,
               "items": counts["concepts_created"] + counts["propositions_created"],
               "disk_mb": disk_mb(path)}
        if with_search:
            # What SEARCH holds once the vectors are built: the usearch indexes (their own
            # accounting) and the lexical module's bounded token caches.
            from nexus.search import lexical_terms
            t1 = time.perf_counter()
            nx.search.drain()
            gc.collect()
            out.update(drain_s=time.perf_counter() - t1, rss_drained_mb=rss_mb(),
                       hwm_drained_mb=status_mb("VmHWM"),
                       usearch_mb=sum(ix.memory_usage for ix in nx.search.vectors.indexes)
                       / 2**20,
                       vectors=sum(len(ix) for ix in nx.search.vectors.indexes),
                       lexical_cache_entries=len(lexical_terms.FIELD_CACHE)
                       + len(lexical_terms.NAME_CACHE))
        nx.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return out


def status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def rss_run(n: int, args, with_search: bool = False) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--rss-child", str(n), "--data", args.data]
    if with_search:
        cmd.append("--rss-search")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def machine() -> str:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (f"Python {platform.python_version()} ({platform.python_implementation()}), "
            f"{platform.system()} {platform.machine()}, {cpu}, {os.cpu_count()} CPUs")


def markdown(results: list[dict], command: str, rss: list[dict] | None = None) -> str:
    lines = [SECTION, "",
             f"`{command}` on {datetime.date.today().isoformat()}, {machine()}. "
             f"LMDB on local disk, durable (fsync per commit).", "",
             "| N | SEARCH index in W1 | concepts + links | W1 s (items/s) | W1 CPU s | "
             "concepts s / links s | JSONL parse s (not in W1) | W2 median / p95 ms | "
             "W2 without fsync, median ms | W2 with SEARCH, median / p95 ms | "
             "W2 with SEARCH without fsync, median ms | disk MB | "
             "RSS after load MB (Δ over load) | load avg |",
             "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
             "| ---: | ---: |"]
    for r in results:
        with_search = (f"{r['w2_search_median_ms']:.2f} / {r['w2_search_p95_ms']:.2f}"
                       if r["w2_search_median_ms"] is not None else "n/a")
        s_nosync = (f"{r['w2_search_nosync_median_ms']:.2f}"
                    if r.get("w2_search_nosync_median_ms") is not None else "n/a")
        lines.append(
            f"| {r['n']:,} | {'attached' if r['search'] else 'detached'} | {r['concepts']:,} + "
            f"{r['links']:,} | {r['load_s']:.2f} ({r['items_per_s'] / 1000:.0f}k) | "
            f"{r['load_cpu_s']:.2f} | {r['concepts_s']:.2f} / {r['links_s']:.2f} | "
            f"{r['parse_s']:.2f} | {r['w2_median_ms']:.2f} / {r['w2_p95_ms']:.2f} | "
            f"{r['w2_nosync_median_ms']:.2f} | {with_search} | {s_nosync} | "
            f"{r['disk_mb']:.0f} | {r['rss_mb']:.0f} ({r['rss_delta_mb']:+.0f}) | "
            f"{r['load_avg']:.1f} |")
    drained = [r for r in results if r.get("vector_drain_s") is not None]
    if drained:
        lines += ["", "Vectors after a load with SEARCH attached: W1 above includes them (the "
                  "load builds them before it returns, issue 18); what the drain still waits "
                  "for (≈ 0):", "",
                  "| N | vectors | drain s | elements/s | vectors/s |", "| ---: | ---: | ---: "
                  "| ---: | ---: |"]
        for r in drained:
            d = r["vector_drain_s"]
            rate = ((f"{r['items'] / d:,.0f}", f"{r['vectors'] / d:,.0f}") if d >= 0.5
                    else ("–", "–"))
            lines.append(f"| {r['n']:,} | {r['vectors']:,} | {d:.1f} | {rate[0]} | "
                         f"{rate[1]} |")
    if rss:
        lines += ["", "Engine memory in a process that streams the JSONL files into the load "
                  "(`--rss`: nothing of the dataset is held but the chunk being written):", "",
                  "| N | SEARCH | W1 s | RSS before / after load MB | peak RSS (VmHWM) MB | "
                  "disk MB |", "| ---: | --- | ---: | ---: | ---: | ---: |"]
        for r in rss:
            lines.append(f"| {r['n']:,} | {'attached' if r['search'] else 'detached'} | "
                         f"{r['load_s']:.2f} | {r['rss_before_mb']:.0f} / {r['rss_mb']:.0f} | "
                         f"{r['hwm_mb']:.0f} | {r['disk_mb']:.0f} |")
        drained = [r for r in rss if r.get("drain_s") is not None]
        if drained:
            lines += ["", "The same processes with SEARCH attached, once the background "
                      "indexer has built every vector:", "",
                      "| N | vectors | drain s | RSS MB | peak RSS MB | usearch indexes MB "
                      "(`memory_usage`) | lexical token-cache entries |",
                      "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
            for r in drained:
                lines.append(f"| {r['n']:,} | {r['vectors']:,} | {r['drain_s']:.1f} | "
                             f"{r['rss_drained_mb']:.0f} | {r['hwm_drained_mb']:.0f} | "
                             f"{r['usearch_mb']:.0f} | {r['lexical_cache_entries']:,} |")
    lines += ["", "Targets (issue 8): W1 ≥ 150k items/s at N=100k; W2 median ≤ 1 ms (with "
              "SEARCH attached); RSS after loading N=100k ≤ 300 MB.", ""]
    lines += NOTES
    return "\n".join(lines)


NOTES = [
    "Reading the figures:",
    "",
    "* W1 is `nexus.ops.capsules.bulk_import` (UPSERT semantics, no KIP parse per item) plus the "
    "schema UPSERT; one transaction per batch of 1M items, consumed 50k items at a time. "
    "W1 s is wall time, W1 CPU s the process's CPU time: on this shared 2-core VM the gap "
    "between them is time the process waited for a CPU (see the load average), not I/O (the "
    "disk writes 200 MB with fdatasync in ~0.4 s). Per link: two dict look-ups for its ends "
    "(cache misses on the parsed dataset dominate), one msgpack call for its metadata with "
    "the engine keys spliced in as bytes, numpy for every index key, LMDB appends; the "
    "ops/pso index entries of the whole transaction are sorted and appended once, at commit.",
    "* RSS in the first table includes the parsed dataset held by the benchmark (≈ 0.7 GB of "
    "Python dicts at N=100k); the `--rss` table is the engine's own memory (dataset streamed). "
    "After a commit that grew the file by 64 MB the LMDB store reopens its environment: LMDB "
    "otherwise keeps every dirty-page buffer of its largest write transaction (≈ the database "
    "size after a bulk load) allocated until the environment is closed "
    "(`nexus.store.lmdb_store`, \"Memory\"). The peak (VmHWM) is those page buffers plus the "
    "chunk being written.",
    "* W2 is dominated by the two synchronous flushes of an LMDB durable commit (fdatasync of "
    "the data file, then the meta page written through an O_DSYNC descriptor): the same "
    "upserts without fsync take the \"W2 without fsync\" column. With SEARCH attached a write "
    "also updates the lexical postings and its names' trigram postings in its transaction "
    "(posting blocks and counters for W2's three elements: the extra dirty pages are also "
    "flushed); semantic vectors (with the extra) are only queued "
    "and built by the background indexer, which waits for a pause in the commits (or a "
    "reader that wants them) so that it does not take the GIL from the writer.",
    "* With SEARCH attached, W1 includes the lexical postings written in the load's "
    "transactions (≈ 75 µs of Python per element: rebuilding each element's document, its "
    "BM25F terms, the forward entry), the names' trigram postings (SEARCH's typo "
    "candidates) and, with the semantic extra, the semantic vectors, built before the load "
    "returns (the indexer is paused during the load; an inverted file whose lists are "
    "trained at the load's end).",
    "* The VM is shared (other benchmarks and test suites run beside it): the load average "
    "column says how busy it was; figures move by ±50% between runs.",
    "",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, action="append", help="dataset sizes (default 100000)")
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "nexus-peers"))
    ap.add_argument("--dir", default=None, help="parent directory of the temporary databases")
    ap.add_argument("--upserts", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=DEFAULT_BATCH)
    ap.add_argument("--with-search", type=int, action="append", default=[], metavar="N",
                    help="also load size N with the SEARCH index attached (slow)")
    ap.add_argument("--write", action="store_true", help="update bench/RESULTS.md")
    ap.add_argument("--rss", action="store_true",
                    help="also measure the engine's RSS in a process that streams the files")
    ap.add_argument("--rss-child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--rss-search", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rss_child is not None:
        print(json.dumps(rss_child(args.rss_child, args.data, args.rss_search)))
        return
    results = []
    rss = []
    for n in sorted(args.n or [100_000]):      # small first: RSS grows with the datasets
        results.append(run(n, args))
        if n in args.with_search:
            results.append(run(n, args, with_search=True))
        if args.rss:
            rss.append(rss_run(n, args))
            if n in args.with_search:
                rss.append(rss_run(n, args, with_search=True))
    command = "python bench/load.py " + " ".join(sys.argv[1:])
    text = markdown(results, command.strip(), rss)
    print(text)
    if args.write:
        replace_section(RESULTS, SECTION, text)


if __name__ == "__main__":
    main()
