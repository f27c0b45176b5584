"""HTTP benchmark of `kip serve`: requests/s and latency of a small FIND over keep-alive
connections with 1, 4 and 16 concurrent clients.

    python bench/http_bench.py [--seconds 10] [--clients 1,4,16] [--tool auto|wrk|python]
                         [--concepts 1000] [--stacks auto,h11] [--record bench/RESULTS.md]

The server runs as its own process (`python -m nexus.cli serve`, default options: access log
to a file, audit on) over a fresh bootstrapped database holding `--concepts` Person concepts.
The load generator is a separate process so that it does not share the server's GIL:
`wrk` (C, event-driven: one thread, N connections, `--latency` percentiles) when it is on
PATH, else a multiprocess Python client (one process per connection, `http.client`
keep-alive). Every request is `execute_kip_readonly` of

    FIND(?p.name, ?p.attributes.age) WHERE { ?p {type: "Person", name: :name} }

with a Bearer key, the shape an agent sends. `--record` replaces the `## HTTP server`
section of the results file (creating the file if needed).
"""
from __future__ import annotations

import os
import sys

# Run as a script, this file's folder is sys.path[0] and this file would shadow the standard
# library's `http` package (urllib and http.client import it): drop the folder first.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))     # the repository, for bench.results_md

import argparse  # noqa: E402
import json  # noqa: E402
import multiprocessing as mp  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from pathlib import Path  # noqa: E402

from bench.results_md import replace_section  # noqa: E402

KEY = "bench-key"
QUERY = 'FIND(?p.name, ?p.attributes.age) WHERE { ?p {type: "Person", name: :name} }'
BODY = json.dumps({"method": "execute_kip_readonly",
                   "params": {"command": QUERY, "parameters": {"name": "person-42"}}})
SECTION = "## HTTP server"


def make_db(path: Path, concepts: int) -> None:
    from nexus.api import Nexus
    from nexus.ops.bulk_import import bulk_import
    with Nexus.open(str(path)) as nx:
        bulk_import(nx, [{"type": "Person", "name": f"person-{i}",
                          "attributes": {"person_class": "Human", "age": 20 + i % 60}}
                         for i in range(concepts)])


def start_server(db: Path, log: Path, extra: list[str] = ()) -> tuple[subprocess.Popen, str, int]:
    err = open(log.with_suffix(".stderr"), "wb")
    proc = subprocess.Popen([sys.executable, "-m", "nexus.cli", "serve", "--db", str(db),
                             "--port", "0", "--api-key", KEY, "--access-log", str(log),
                             *extra],
                            stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = re.search(rb"on http://([^/]+):(\d+)/kip", log.with_suffix(".stderr").read_bytes())
        if m:
            import urllib.request
            host, port = m.group(1).decode(), int(m.group(2))
            while time.monotonic() < deadline:
                try:
                    urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=5).read()
                    return proc, host, port
                except OSError:
                    time.sleep(0.1)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("server did not start: " + log.with_suffix(".stderr").read_text())


# --- wrk -------------------------------------------------------------------------------------

_LUA = """
wrk.method = "POST"
wrk.body = {body}
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer {key}"
"""


def run_wrk(host: str, port: int, clients: int, seconds: float, tmp: Path) -> dict:
    script = tmp / "post.lua"
    script.write_text(_LUA.format(body=json.dumps(BODY), key=KEY))
    out = subprocess.run(["wrk", "-t1", f"-c{clients}", f"-d{int(seconds)}s", "--latency",
                          "-s", str(script), f"http://{host}:{port}/kip"],
                         capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    lat = dict(re.findall(r"^\s+(50|75|90|99)%\s+([\d.]+\w+)", out, re.M))
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    total = int(re.search(r"(\d+) requests in", out).group(1))
    return {"rps": rps, "p50_ms": _ms(lat["50"]), "p99_ms": _ms(lat["99"]),
            "requests": total, "errors": int(errors.group(1)) if errors else 0}


def _ms(text: str) -> float:
    value, unit = re.match(r"([\d.]+)(\w+)", text).groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


# --- multiprocess Python client ---------------------------------------------------------------

def _client(host: str, port: int, seconds: float, start_at: float, queue) -> None:
    import http.client
    conn = http.client.HTTPConnection(host, port)
    body = BODY.encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}
    lat, errors = [], 0
    while time.time() < start_at:
        time.sleep(0.001)
    end = start_at + seconds
    while True:
        t0 = time.perf_counter()
        if time.time() >= end:
            break
        conn.request("POST", "/kip", body, headers)
        resp = conn.getresponse()
        resp.read()
        lat.append(time.perf_counter() - t0)
        errors += resp.status != 200
    queue.put((lat, errors))


def run_python(host: str, port: int, clients: int, seconds: float, tmp: Path) -> dict:
    queue = mp.Queue()
    start_at = time.time() + 0.5
    procs = [mp.Process(target=_client, args=(host, port, seconds, start_at, queue))
             for _ in range(clients)]
    for p in procs:
        p.start()
    results = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    lat = sorted(x for r, _ in results for x in r)
    return {"rps": len(lat) / seconds, "p50_ms": lat[len(lat) // 2] * 1000,
            "p99_ms": lat[int(len(lat) * 0.99)] * 1000, "requests": len(lat),
            "errors": sum(e for _, e in results)}


# --- main ---------------------------------------------------------------------------------------

STACKS = {
    "auto": [],                                      # httptools + uvloop when installed
    "h11": ["--http", "h11", "--loop", "asyncio"],   # uvicorn's pure-Python fallback
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--tool", choices=["auto", "wrk", "python"], default="auto")
    ap.add_argument("--concepts", type=int, default=1000)
    ap.add_argument("--stacks", default="auto,h11",
                    help="server HTTP stacks to measure: auto (httptools+uvloop when "
                    "installed), h11 (h11+asyncio)")
    ap.add_argument("--record", metavar="FILE", help="write the results section into FILE")
    ap.add_argument("--server-args", default="", help="extra `kip serve` options (quoted)")
    args = ap.parse_args()
    tool = args.tool
    if tool == "auto":
        tool = "wrk" if shutil.which("wrk") else "python"
    runner = run_wrk if tool == "wrk" else run_python
    rows = []
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        make_db(tmp / "db", args.concepts)
        for stack in args.stacks.split(","):
            proc, host, port = start_server(tmp / "db", tmp / f"access-{stack}.log",
                                            STACKS[stack] + args.server_args.split())
            try:
                runner(host, port, 4, 2, tmp)                              # warm-up
                for clients in [int(c) for c in args.clients.split(",")]:
                    row = {"stack": _stack_name(stack), "clients": clients,
                           **runner(host, port, clients, args.seconds, tmp)}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(60)
    if args.record:
        record(Path(args.record), rows, tool, args, load_before)
    return 0


def _stack_name(stack: str) -> str:
    if stack == "h11":
        return "h11 + asyncio"
    import importlib.util
    parser = "httptools" if importlib.util.find_spec("httptools") else "h11"
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    return f"{parser} + {loop}"


def record(path: Path, rows: list[dict], tool: str, args: argparse.Namespace,
           load_before: float) -> None:
    import uvicorn
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gen = ("wrk 4.1 (1 thread, N keep-alive connections)" if tool == "wrk"
           else "multiprocess Python client, one process per keep-alive connection")
    lines = [
        SECTION, "",
        f"`python bench/http_bench.py --seconds {args.seconds:g} --clients {args.clients} "
        f"--concepts {args.concepts} --stacks {args.stacks}` — "
        f"{datetime.now(timezone.utc):%Y-%m-%d}, {os.cpu_count()} cores ({cpu}), "
        f"Python {platform.python_version()}, uvicorn {uvicorn.__version__}; load average "
        f"{load_before:.2f} at the start (a shared machine: other work was running).",
        "",
        f"One `kip serve` process (default options: access log to a file, audit on, Bearer "
        f"key, worker threads min(32, CPUs + 4)) over a bootstrapped database with "
        f"{args.concepts} Person concepts; load from a separate process ({gen}). Each "
        f"request: `execute_kip_readonly` of `{QUERY}` with `name` as a parameter. "
        f"Target: ≥ 2,000 req/s with 16 clients, p99 ≤ 20 ms.",
        "",
        "| HTTP stack | clients | req/s | p50 ms | p99 ms | requests | non-200 |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(f"| {r['stack']} | {r['clients']} | {r['rps']:,.0f} | "
                     f"{r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['requests']:,} | "
                     f"{r['errors']} |")
    lines += ["", "httptools and uvloop (`uvicorn[standard]`) are what `kip serve` picks when "
              "they are installed; without them uvicorn falls back to h11 and asyncio. The "
              "server freezes its start-up heap out of the cyclic GC (`gc.freeze()`), which "
              "took p99 at 16 clients from ~25–40 ms down to ~10 ms here."]
    section = "\n".join(lines) + "\n"
    replace_section(path, SECTION, section)


if __name__ == "__main__":
    sys.exit(main())
