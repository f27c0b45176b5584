"""`python -m bench.spaces [--count N] [--max-open K]` — many spaces behind one server.

Starts `kip serve --spaces DIR --max-open-spaces K` on a free loopback port, creates N spaces
through the admin endpoint (each a copy of the bootstrapped template; the first create
builds the template), then touches every space once through
`POST /v1/{space}/kip` in an order that makes every touch a cold open (the LRU holds K,
spaces are touched in creation order after more than K others), and reports the creation
time, the cold-request latency (median, p99) and the server's RSS, data size (VmData: what
RLIMIT_DATA counts) and threads afterwards.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "spaces"))
from conftest import start, stop  # noqa: E402

QUERY = 'FIND(?t.name) WHERE { ?t {type: "$ConceptType"} } LIMIT 1'


def status(pid: int, key: str) -> float:
    """A /proc/PID/status figure, in MB for sizes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            value = int(line.split()[1])
            return round(value / 1024, 1) if line.rstrip().endswith("kB") else value
    return float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--max-open", type=int, default=64)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        server = start(Path(tmp) / "spaces", "--max-open-spaces", str(args.max_open))
        try:
            t = time.perf_counter()
            code, body = server.request("POST", "/v1/admin/spaces", {"name": "s0"})
            assert code == 200, body
            template = time.perf_counter() - t
            started = time.perf_counter()
            for i in range(1, args.count):
                code, body = server.request("POST", "/v1/admin/spaces", {"name": f"s{i}"})
                assert code == 200, body
            created = time.perf_counter() - started
            cold = []
            for i in range(args.count):
                t = time.perf_counter()
                code, body = server.kip(f"s{i}", QUERY, readonly=True)
                cold.append((time.perf_counter() - t) * 1000)
                assert code == 200 and "error" not in body, body
            cold.sort()
            report = {
                "spaces": args.count, "max_open": args.max_open,
                "first_create_with_template_s": round(template, 2),
                "create_s": round(created, 1),
                "create_ms_each": round(created * 1000 / max(1, args.count - 1), 2),
                "cold_ms_median": round(statistics.median(cold), 2),
                "cold_ms_p99": round(cold[min(len(cold) - 1, int(len(cold) * 0.99))], 2),
                "rss_mb": status(server.proc.pid, "VmRSS"),
                "vmdata_mb": status(server.proc.pid, "VmData"),
                "threads": status(server.proc.pid, "Threads"),
            }
        finally:
            stop(server)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
