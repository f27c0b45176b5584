"""HTTP benchmark of `kip serve`: requests/s and latency of a small FIND over keep-alive
connections with 1, 4 and 16 concurrent clients — or of a mix of read shapes (`--mix`).

    python bench/http_bench.py [--seconds 10] [--clients 1,4,16] [--tool auto|wrk|python]
                         [--concepts 1000] [--stacks auto,h11] [--record bench/RESULTS.md]
    python bench/http_bench.py --mix [--weights Q1=4,Q2=2,Q3=1,Q4=1,DESCRIBE=1,SEARCH=1]
                         [--db PATH | --data bench/data/n100000] [--probe] ...

The server runs as its own process (`python -m nexus.cli serve`, default options: access log
to a file, audit on) over a fresh bootstrapped database holding `--concepts` Person concepts.
The load generator is a separate process so that it does not share the server's GIL:
`wrk` (C, event-driven: one thread, N connections, `--latency` percentiles) when it is on
PATH, else a multiprocess Python client (one process per connection, `http.client`
keep-alive). Every request is `execute_kip_readonly` of

    FIND(?p.name, ?p.attributes.age) WHERE { ?p {type: "Person", name: :name} }

with a Bearer key, the shape an agent sends. `--record` replaces the `## HTTP server`
section of the results file (creating the file if needed).

`--mix` sends instead the benchmark's read shapes over the generated data set (bench/data,
the peers' generator), each `execute_kip_readonly` with its parameters varied over the data
set's own (`meta.json`): Q1 point lookup, Q2 one hop, Q3 two hops + FILTER + NOT, Q4 a
path of 1-5 hops (bench/nexus_peer.py's texts), a DESCRIBE (PRIMER, the type lists, one
concept type or predicate) and `SEARCH CONCEPT :q LIMIT 10` (the heavy one) — in the
proportions of `--weights` (per cycle; `SEARCH=0` leaves it out), interleaved in a fixed
shuffled order. The database is `--db` (one made by `python -m bench.loader load`; it is
served as it is: nothing is written to it but the audit log) or one loaded from `--data`
into a temporary directory. Every answer is checked: HTTP 200 and a body that starts with
`{"result":` (wrk: in its `response()` hook), or it counts as an error. wrk cannot say
which request an answer belongs to; `--probe` runs one more client beside it that sends
the same mix one request at a time (2 ms apart) and reports each shape's latency under
the load (the Python client reports them always).
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
MIX_WEIGHTS = "Q1=4,Q2=2,Q3=1,Q4=1,DESCRIBE=1,SEARCH=1"


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


# --- the mix of read shapes ----------------------------------------------------------------

def _readonly(command: str, parameters: dict | None = None) -> str:
    params: dict = {"command": command}
    if parameters:
        params["parameters"] = parameters
    return json.dumps({"method": "execute_kip_readonly", "params": params})


def mix_variants(data: Path) -> dict[str, list[str]]:
    """Each shape's request bodies, one per parameter set of the data set's `meta.json`."""
    from bench import nexus_peer as NP
    params = json.loads((data / "meta.json").read_text())["params"]
    return {
        "Q1": [_readonly(NP.Q1, {"type": p["type"], "name": p["name"]}) for p in params["Q1"]],
        "Q2": [_readonly(NP.Q2, {"symptom": p["symptom"]}) for p in params["Q2"]],
        "Q3": [_readonly(NP.Q3, p) for p in params["Q3"]],
        "Q4": [_readonly(NP.Q4 % (p["min_hops"], p["max_hops"]),
                         {"drug_class": p["drug_class"]}) for p in params["Q4"]],
        "DESCRIBE": [_readonly(t) for t in (
            "DESCRIBE PRIMER", "DESCRIBE CONCEPT TYPES", "DESCRIBE PROPOSITION TYPES",
            *(f'DESCRIBE CONCEPT TYPE "{t}"' for t in NP.TYPES),
            *(f'DESCRIBE PROPOSITION TYPE "{p}"' for p in NP.PREDICATES))],
        "SEARCH": [_readonly("SEARCH CONCEPT :q LIMIT 10", {"q": p["name"]})
                   for p in params["Q1"]],
    }


def parse_weights(text: str) -> dict[str, int]:
    weights = {}
    for part in text.split(","):
        name, _, n = part.partition("=")
        weights[name.strip().upper()] = int(n)
    return {k: v for k, v in weights.items() if v > 0}


def mix_bodies(data: Path, weights: dict[str, int], cycles: int = 64
               ) -> list[tuple[str, str]]:
    """(shape, body) in the order sent: `cycles` cycles of the weighted shapes, each cycle
    shuffled (fixed seed), each shape's parameters taken in turn."""
    import random
    variants = mix_variants(data)
    unknown = set(weights) - set(variants)
    if unknown:
        raise SystemExit(f"unknown shapes in --weights: {', '.join(sorted(unknown))} "
                         f"(known: {', '.join(variants)})")
    rng = random.Random(18)
    turn = dict.fromkeys(weights, 0)
    out = []
    for _ in range(cycles):
        cycle = [shape for shape, w in weights.items() for _ in range(w)]
        rng.shuffle(cycle)
        for shape in cycle:
            bodies = variants[shape]
            out.append((shape, bodies[turn[shape] % len(bodies)]))
            turn[shape] += 1
    return out


def load_db(data: Path, db: Path) -> None:
    """The data set bulk-loaded with SEARCH attached (bench.loader, its own process)."""
    subprocess.run([sys.executable, "-m", "bench.loader", "load", "--data", str(data),
                    "--search", "attached", "--db", str(db), "--out", str(db) + ".json"],
                   check=True, cwd=os.path.dirname(_HERE), stdout=subprocess.DEVNULL)


def _answered(status: int, body: bytes) -> bool:
    return status == 200 and body.startswith(b'{"result":')


# --- wrk -------------------------------------------------------------------------------------

_LUA = """
wrk.method = "POST"
wrk.body = {body}
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer {key}"
"""


# The mix: bodies sent in turn; every answer checked (200 and a `{"result":` body); the
# count of failures read from the thread's state when wrk is done.
_MIX_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer {key}"
local bodies = {{ {bodies} }}
local n, i = #bodies, 0
failed, first = 0, ""          -- globals: what done() reads with thread:get
local threads = {{}}
function setup(thread) table.insert(threads, thread) end
function request()
  i = i % n + 1
  return wrk.format(nil, nil, nil, bodies[i])
end
function response(status, headers, body)
  if status ~= 200 or body:sub(1, 10) ~= '{{"result":' then
    failed = failed + 1
    if first == "" then first = status .. " " .. body:sub(1, 200) end
  end
end
function done(summary, latency, requests)
  for _, t in ipairs(threads) do
    io.write("MIX failed " .. t:get("failed") .. "\\n")
    io.write("MIX first " .. t:get("first") .. "\\n")
  end
end
"""


def run_wrk(host: str, port: int, clients: int, seconds: float, tmp: Path,
            mix: list[tuple[str, str]] | None = None) -> dict:
    script = tmp / "post.lua"
    if mix is None:
        script.write_text(_LUA.format(body=json.dumps(BODY), key=KEY))
    else:
        script.write_text(_MIX_LUA.format(
            key=KEY, bodies=", ".join(json.dumps(body) for _, body in mix)))
    out = subprocess.run(["wrk", "-t1", f"-c{clients}", f"-d{int(seconds)}s", "--latency",
                          "-s", str(script), f"http://{host}:{port}/kip"],
                         capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    lat = dict(re.findall(r"^\s+(50|75|90|99)%\s+([\d.]+\w+)", out, re.M))
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    total = int(re.search(r"(\d+) requests in", out).group(1))
    row = {"rps": rps, "p50_ms": _ms(lat["50"]), "p99_ms": _ms(lat["99"]),
           "requests": total, "errors": int(errors.group(1)) if errors else 0}
    if mix is not None:
        failed = re.search(r"^MIX failed (\d+)", out, re.M)
        if failed is None:
            raise SystemExit("wrk did not report the mix's checks:\n" + out)
        row["errors"] = int(failed.group(1))
        if row["errors"]:
            row["first_error"] = re.search(r"^MIX first (.*)$", out, re.M).group(1)
    return row


def _ms(text: str) -> float:
    value, unit = re.match(r"([\d.]+)(\w+)", text).groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


# --- multiprocess Python client ---------------------------------------------------------------

def _client(host: str, port: int, seconds: float, start_at: float, queue,
            mix: list[tuple[str, str]] | None = None, offset: int = 0,
            pause: float = 0.0) -> None:
    """Requests one after the other until `start_at + seconds`; puts ([(shape, seconds)],
    errors). `mix`: bodies sent in turn from `offset`, each answer checked."""
    import http.client
    conn = http.client.HTTPConnection(host, port)
    sends = [(shape, body.encode()) for shape, body in mix] if mix else [("FIND", BODY.encode())]
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}
    lat, errors, i = [], 0, offset
    while time.time() < start_at:
        time.sleep(0.001)
    end = start_at + seconds
    while True:
        shape, body = sends[i % len(sends)]
        i += 1
        t0 = time.perf_counter()
        if time.time() >= end:
            break
        conn.request("POST", "/kip", body, headers)
        resp = conn.getresponse()
        data = resp.read()
        lat.append((shape, time.perf_counter() - t0))
        errors += not _answered(resp.status, data) if mix else resp.status != 200
        if pause:
            time.sleep(pause)
    queue.put((lat, errors))


def _summary(lat: list[float]) -> dict:
    lat = sorted(lat)
    return {"n": len(lat), "p50_ms": round(lat[len(lat) // 2] * 1000, 2),
            "p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 2)}


def _by_shape(results: list) -> dict[str, dict]:
    shapes: dict[str, list[float]] = {}
    for r, _ in results:
        for shape, dt in r:
            shapes.setdefault(shape, []).append(dt)
    return {shape: _summary(v) for shape, v in shapes.items()}


def run_python(host: str, port: int, clients: int, seconds: float, tmp: Path,
               mix: list[tuple[str, str]] | None = None) -> dict:
    queue = mp.Queue()
    start_at = time.time() + 0.5
    procs = [mp.Process(target=_client, args=(host, port, seconds, start_at, queue, mix,
                                              k * 37))
             for k in range(clients)]
    for p in procs:
        p.start()
    results = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    lat = sorted(x for r, _ in results for _, x in r)
    row = {"rps": len(lat) / seconds, "p50_ms": lat[len(lat) // 2] * 1000,
           "p99_ms": lat[int(len(lat) * 0.99)] * 1000, "requests": len(lat),
           "errors": sum(e for _, e in results)}
    if mix:
        row["shapes"] = _by_shape(results)
    return row


def with_probe(runner, host: str, port: int, clients: int, seconds: float, tmp: Path,
               mix: list[tuple[str, str]]) -> dict:
    """`runner`'s row, and each shape's latency as one more client saw it meanwhile (the
    mix one request at a time, 2 ms apart)."""
    queue = mp.Queue()
    probe = mp.Process(target=_client, args=(host, port, seconds - 1, time.time() + 0.5,
                                             queue, mix, 0, 0.002))
    probe.start()
    row = runner(host, port, clients, seconds, tmp, mix)
    result = queue.get()
    probe.join()
    row["probe"] = _by_shape([result])
    row["probe_errors"] = result[1]
    return row


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
    ap.add_argument("--mix", action="store_true",
                    help="send the benchmark's read shapes over a generated data set")
    ap.add_argument("--weights", default=MIX_WEIGHTS,
                    help=f"--mix: requests of each shape per cycle (default {MIX_WEIGHTS})")
    ap.add_argument("--db", help="--mix: an existing database of the data set (bench.loader)")
    ap.add_argument("--data", default=os.path.join(_HERE, "data", "n100000"),
                    help="--mix: the data set (its meta.json gives the parameters)")
    ap.add_argument("--probe", action="store_true",
                    help="--mix: each shape's latency from one more client beside the load")
    args = ap.parse_args()
    if args.record and args.mix:
        ap.error("--record writes the point FIND's table: record a --mix run by hand")
    tool = args.tool
    if tool == "auto":
        tool = "wrk" if shutil.which("wrk") else "python"
    runner = run_wrk if tool == "wrk" else run_python
    mix = mix_bodies(Path(args.data), parse_weights(args.weights)) if args.mix else None
    rows = []
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        db = Path(args.db) if args.db and args.mix else tmp / "db"
        if not (args.db and args.mix):
            if args.mix:
                load_db(Path(args.data), db)
            else:
                make_db(db, args.concepts)
        for stack in args.stacks.split(","):
            proc, host, port = start_server(db, tmp / f"access-{stack}.log",
                                            STACKS[stack] + args.server_args.split())
            try:
                runner(host, port, 4, 2, tmp, mix)                         # warm-up
                for clients in [int(c) for c in args.clients.split(",")]:
                    cpu0, own0 = _server_cpu(proc.pid), _server_cpu(proc.pid, children=False)
                    load0 = os.getloadavg()[0]
                    if args.probe and mix:
                        result = with_probe(runner, host, port, clients, args.seconds, tmp,
                                            mix)
                    else:
                        result = runner(host, port, clients, args.seconds, tmp, mix)
                    cpu = _server_cpu(proc.pid) - cpu0
                    own = _server_cpu(proc.pid, children=False) - own0
                    row = {"stack": _stack_name(stack), "clients": clients, **result,
                           "server_cpu_us_per_req": round(cpu / max(1, result["requests"])
                                                          * 1e6),
                           # the owner process's share (the rest: `--workers` followers)
                           "owner_cpu_us_per_req": round(own / max(1, result["requests"])
                                                         * 1e6),
                           "load": [round(load0, 2), round(os.getloadavg()[0], 2)]}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(60)
    if args.record:
        record(Path(args.record), rows, tool, args, load_before)
    return 0


def _server_cpu(pid: int, children: bool = True) -> float:
    """CPU seconds (user + system) of the server process and its children so far (the
    `--workers` followers are its children; not with `children=False`), from /proc; 0
    where there is none."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    pending = [pid]
    while pending:
        p = pending.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            if not children:
                continue
            for task in Path(f"/proc/{p}/task").iterdir():
                kids = (task / "children").read_text().split()
                pending.extend(int(k) for k in kids)
        except (OSError, ValueError, IndexError):
            pass
    return total


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
