"""W1 through KIP over HTTP: the upsert load of `bench/loader.py` sent to `kip serve`.

    python -m bench.kipload_http --data DIR [--batch 500] [--shape grouped] [--out FILE.json]

Starts `python -m nexus.cli serve` over a fresh database (its own process, as in
bench/http_bench.py), defines the benchmark's types and predicates, then sends the dataset
as UPSERT commands of `--batch` CONCEPT blocks, then of `--batch` PROPOSITION blocks, every
value a parameter (`bench.loader.upsert_batches`), one `execute_kip` POST each over one
keep-alive connection. `--shape grouped`: the commands of bench/kipload_grouped.py
instead (500 CONCEPT blocks per command, then the links grouped by subject, 250 subjects per
command with SET PROPOSITIONS to `{type, name}` objects: issue 18's shape). Reports wall
time, items/s and the server process's CPU seconds over the load (the machine is shared:
CPU time is the steadier figure). The server runs with SEARCH attached (`kip serve` has no
switch to detach it).
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import kipload_grouped as G
from . import loader as L
from . import nexus_peer as NP
from . import workload as W

KEY = "kipload-bench-key"


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Client:
    def __init__(self, host: str, port: int) -> None:
        self.conn = http.client.HTTPConnection(host, port, timeout=600)

    def __call__(self, nx: object, command: str, **params: object) -> dict:
        body = json.dumps({"method": "execute_kip",
                           "params": {"command": command, "parameters": params}})
        self.conn.request("POST", "/kip", body, {"Content-Type": "application/json",
                                                 "Authorization": f"Bearer {KEY}"})
        response = json.loads(self.conn.getresponse().read())
        if "error" in response:
            raise RuntimeError(f"{response['error']['code']}: {response['error']['message']}")
        return response["result"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--shape", choices=("blocks", "grouped"), default="blocks")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    concepts, props, _, _ = W.read(args.data)
    # Built before the server starts: an idle keep-alive connection is closed by the server.
    grouped = (G.concept_commands(concepts, args.batch) + G.grouped_link_commands(props)
               if args.shape == "grouped" else [])
    tmp = Path(tempfile.mkdtemp(prefix="kipload-http-"))
    db, log = tmp / "db", tmp / "access.log"
    err = open(log.with_suffix(".stderr"), "wb")
    proc = subprocess.Popen([sys.executable, "-m", "nexus.cli", "serve", "--db", str(db),
                             "--port", "0", "--api-key", KEY, "--access-log", str(log),
                             ], stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 120
        m = None
        while time.monotonic() < deadline and m is None and proc.poll() is None:
            m = re.search(rb"on http://([^/]+):(\d+)/kip", log.with_suffix(".stderr").read_bytes())
            time.sleep(0.1)
        if m is None:
            raise SystemExit("server did not start: " + log.with_suffix(".stderr").read_text())
        client = _Client(m.group(1).decode(), int(m.group(2)))
        client(None, NP.SCHEMA)
        original = L.kip
        L.kip = client                  # upsert_batches sends through bench.loader.kip
        try:
            cpu0, t0 = _cpu_seconds(proc.pid), time.perf_counter()
            if args.shape == "grouped":
                for text, params in grouped:
                    client(None, text, **params)
                commands = len(grouped)
            else:
                commands = L.upsert_batches(None, concepts, props, args.batch)
            t1, cpu1 = time.perf_counter(), _cpu_seconds(proc.pid)
        finally:
            L.kip = original
        items = len(concepts) + len(props)
        out = {"search": "attached", "shape": args.shape, "items": items, "commands": commands,
               "load_s": round(t1 - t0, 3), "server_cpu_s": round(cpu1 - cpu0, 3),
               "items_per_s": round(items / (t1 - t0)),
               "items_per_server_cpu_s": round(items / max(cpu1 - cpu0, 1e-9))}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out, indent=1))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
