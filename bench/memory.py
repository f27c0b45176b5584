"""Memory of a serving process: RSS of `kip serve` fresh, after queries, after a load.

    python bench/memory.py --db DIR [--load 10000] [--searches 100] [--settle 20]
                           [--record bench/RESULTS.md]

`--db` is a database to serve (e.g. the N=100k bench graph with SEARCH); it is copied to a
temporary directory first, so the original is never written. The server runs as its own
process (`python -m nexus.cli serve`, default options but the access log), and the figures
are read from its /proc/PID/status: VmRSS (what the issue's targets name), split into
RssAnon (the process's own heap: Python objects, numpy, in-memory indexes, models) and
RssFile (file pages mapped into it: libraries, the memory-mapped vector indexes and the LMDB
file — shared page cache the kernel may drop), and VmHWM (the peak). Phases:

1. fresh — as soon as /healthz answers;
2. after one SEARCH (the default mode: hybrid when the database has a semantic embedder)
   and a few FINDs;
3. after `--searches` more SEARCHes (names of its Drug concepts, every other one with a
   typo, default mode);
4. after a load: `--load` new concepts (their own type) with descriptions and two links each,
   sent as UPSERT commands of 500 blocks over HTTP (`bench.loader.upsert_batches`), right
   after the last command and again once the server settled (`--settle` seconds: the vector
   indexer caught up and saved); the last loaded name is then searched with a typo.

`--record` replaces the `## Memory of a serving process` section of RESULTS_MD.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import loader as L  # noqa: E402
from bench.results_md import replace_section  # noqa: E402

SECTION = "## Memory of a serving process"
KEY = "memory-bench-key"
SCHEMA = """UPSERT {
  CONCEPT ?t { {type: "$ConceptType", name: "Memdrug"}
               SET ATTRIBUTES {description: "a medicine of the memory bench"} }
  CONCEPT ?p { {type: "$PropositionType", name: "mem_related"}
               SET ATTRIBUTES {description: "one memory-bench medicine is related to another"} }
}"""


def status(pid: int) -> dict[str, float]:
    """VmRSS, RssAnon, RssFile, VmHWM of `pid`, in MB."""
    out: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                out[name] = int(value.split()[0]) / 1024
    return out


class Client:
    def __init__(self, host: str, port: int) -> None:
        self.conn = http.client.HTTPConnection(host, port, timeout=600)

    def __call__(self, nx: object, command: str, **params: object) -> object:
        body = json.dumps({"method": "execute_kip",
                           "params": {"command": command, "parameters": params}})
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}
        try:
            self.conn.request("POST", "/kip", body, headers)
            raw = self.conn.getresponse().read()
        except (ConnectionError, http.client.HTTPException):   # idle keep-alive closed
            self.conn.close()
            self.conn.request("POST", "/kip", body, headers)
            raw = self.conn.getresponse().read()
        response = json.loads(raw)
        if "error" in response:
            raise RuntimeError(f"{response['error']['code']}: {response['error']['message']}")
        return response["result"]


def start(db: Path, log: Path) -> tuple[subprocess.Popen, Client]:
    err_path = log.with_suffix(".stderr")
    err = open(err_path, "wb")
    proc = subprocess.Popen([sys.executable, "-m", "nexus.cli", "serve", "--db", str(db),
                             "--port", "0", "--api-key", KEY, "--access-log", str(log)],
                            stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        m = re.search(rb"on http://([^/]+):(\d+)/kip", err_path.read_bytes())
        if m:
            import urllib.request
            host, port = m.group(1).decode(), int(m.group(2))
            while time.monotonic() < deadline:
                try:
                    urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=5).read()
                    return proc, Client(host, port)
                except OSError:
                    time.sleep(0.1)
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("server did not start: " + err_path.read_text())


def typo(name: str, i: int) -> str:
    if i % 2 == 0 or len(name) < 5:
        return name
    k = len(name) // 2
    return name[:k] + name[k + 1:]


def run(args) -> list[tuple[str, dict[str, float], str]]:
    rows: list[tuple[str, dict[str, float], str]] = []
    work = Path(tempfile.mkdtemp(prefix="nexus-memory-"))
    db = work / "db"
    shutil.copytree(args.db, db, ignore=shutil.ignore_patterns("owner.lock", "lock.mdb"))
    proc, kip = start(db, work / "access.log")
    try:
        rows.append(("fresh (/healthz answers)", status(proc.pid), ""))
        names = [r for r in kip(None, 'FIND(?d.name) WHERE { ?d {type: "Drug"} } LIMIT :n',
                                n=max(args.searches, 10))]
        hits = kip(None, "SEARCH CONCEPT :q LIMIT 10", q=typo(str(names[1]), 1))
        kip(None, 'FIND(?s.name) WHERE { ?d {type: "Drug", name: :n} (?d, "treats", ?s) }',
            n=names[0])
        kip(None, 'FIND(COUNT(?d)) WHERE { ?d {type: "Drug"} }')
        rows.append(("after 1 SEARCH and 3 FINDs", status(proc.pid),
                     f"top hit {hits[0]['name']!r} for {typo(str(names[1]), 1)!r}"))
        t0 = time.perf_counter()
        for i in range(args.searches):
            kip(None, "SEARCH CONCEPT :q LIMIT 10", q=typo(str(names[i % len(names)]), i))
        rows.append((f"after {args.searches} more SEARCHes", status(proc.pid),
                     f"{(time.perf_counter() - t0) / max(args.searches, 1) * 1000:.1f} ms each "
                     "over HTTP"))
        if args.load:
            kip(None, SCHEMA)
            concepts = [{"type": "Memdrug", "name": f"Memoprofen {i}",
                         "attributes": {"description": f"a test medicine number {i} that "
                                        "relieves aches and calms a fever"},
                         "metadata": {"source": "bench/memory"}} for i in range(args.load)]
            props = [{"subject": {"type": "Memdrug", "name": c["name"]},
                      "predicate": "mem_related",
                      "object": {"type": "Memdrug", "name": f"Memoprofen {(i + k) % args.load}"},
                      "metadata": {"source": "bench/memory"}}
                     for i, c in enumerate(concepts) for k in (1, 2)]
            original = L.kip
            L.kip = kip                       # upsert_batches sends through bench.loader.kip
            peak = 0.0
            try:
                t0 = time.perf_counter()
                L.upsert_batches(None, concepts, props, 500)
                load_s = time.perf_counter() - t0
            finally:
                L.kip = original
            items = len(concepts) + len(props)
            rows.append((f"right after a load of {items:,} items", status(proc.pid),
                         f"{len(concepts):,} concepts + {len(props):,} links, UPSERT over "
                         f"HTTP, {load_s:.1f} s"))
            for _ in range(int(args.settle)):
                time.sleep(1.0)
                peak = max(peak, status(proc.pid)["VmRSS"])
            last = concepts[-1]["name"]
            found = kip(None, "SEARCH CONCEPT :q LIMIT 3", q=typo(last, 1))
            rows.append((f"after the load, {args.settle:.0f} s later", status(proc.pid),
                         f"peak VmRSS while settling {peak:.0f} MB; SEARCH {typo(last, 1)!r}"
                         f" → {found[0]['name']!r}"))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(work, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True, help="database to serve (copied first)")
    ap.add_argument("--load", type=int, default=10_000, help="concepts to load (0: none)")
    ap.add_argument("--searches", type=int, default=100)
    ap.add_argument("--settle", type=float, default=20.0)
    ap.add_argument("--label", default="", help="a note for the recorded table")
    ap.add_argument("--record", metavar="RESULTS_MD")
    args = ap.parse_args(argv)
    rows = run(args)
    command = "python bench/memory.py " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = [SECTION, "",
             f"`{command.strip()}` — {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
             f"{platform.machine()} {os.cpu_count()} cores (shared), Python "
             f"{platform.python_version()}. {args.label}".rstrip(), "",
             "| phase | VmRSS MB | RssAnon MB | RssFile MB | VmHWM MB | note |",
             "|---|---:|---:|---:|---:|---|"]
    for phase, st, note in rows:
        lines.append(f"| {phase} | {st['VmRSS']:.0f} | {st['RssAnon']:.0f} | "
                     f"{st['RssFile']:.0f} | {st['VmHWM']:.0f} | {note} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.record:
        replace_section(args.record, SECTION, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
