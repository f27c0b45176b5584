"""Durable writes through the write-ahead log (issue 18): W2 with and without it, same run.

1. The physical floor of the machine: `pwrite` of 256 bytes + `fdatasync`, median of 1,000,
   into blocks the file already has (what a log append costs) and growing the file.
2. The peers data set of `--n` items bulk-loaded into one database (SEARCH attached); then W2
   (the peers README's upsert: one Drug, all attributes and metadata, `treats` and
   `has_side_effect` links; durable `execute_kip`, SEARCH attached) in rounds that alternate
   plain LMDB durability (`wal=False`: LMDB fsyncs data and meta pages) and the write-ahead
   log (`wal=True`), reopening the database for each mode, so that both see the same
   machine load. Reports the median and p95 wall time and the median CPU time of the
   calling thread per mode.

    python bench/wal.py --n 10000 [--rounds 6 --upserts 60]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.load import SCHEMA, load_dataset, make_upserts, machine  # noqa: E402
from bench.nexus_peer import W2  # noqa: E402
from nexus import Nexus  # noqa: E402
from nexus.ops.bulk_import import bulk_import  # noqa: E402


def floor(directory: str, count: int = 1000) -> dict[str, float]:
    path = os.path.join(directory, "floor.log")
    out = {}
    for kind in ("overwrite", "append"):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        if kind == "overwrite":
            os.write(fd, bytes(256 * count))
            os.fsync(fd)
        buf, times = os.urandom(256), []
        for i in range(count):
            t = time.perf_counter()
            os.pwrite(fd, buf, 256 * i)
            os.fdatasync(fd)
            times.append(time.perf_counter() - t)
        os.close(fd)
        times.sort()
        out[kind] = statistics.median(times) * 1e3
        out[kind + "_p95"] = times[int(count * 0.95)] * 1e3
    os.remove(path)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--upserts", type=int, default=60)
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "nexus-peers"))
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="nexus-wal-", dir=args.dir)
    try:
        print("floor (ms):", {k: round(v, 3) for k, v in floor(work).items()}, flush=True)
        concepts, links, meta, _ = load_dataset(args.n, args.data)
        path = os.path.join(work, "db")
        with Nexus.open(path) as nx:
            assert "error" not in nx.execute_kip({"command": SCHEMA})
            bulk_import(nx, concepts, links)
            nx.search.drain()
        upserts = make_upserts(concepts, meta, args.upserts * args.rounds * 2)
        wall: dict[bool, list[float]] = {False: [], True: []}
        cpu: dict[bool, list[float]] = {False: [], True: []}
        k = 0
        for r in range(args.rounds):
            for use_wal in ((False, True) if r % 2 == 0 else (True, False)):
                with Nexus.open(path, wal=use_wal) as nx:
                    nx.search.drain()
                    for _ in range(args.upserts):
                        params = dict(upserts[k], name=upserts[k]["name"] + f" w{k}")
                        k += 1
                        t, c = time.perf_counter(), time.thread_time()
                        response = nx.execute_kip({"command": W2, "parameters": params})
                        wall[use_wal].append(time.perf_counter() - t)
                        cpu[use_wal].append(time.thread_time() - c)
                        assert "error" not in response, response
                    nx.search.drain()
        for use_wal in (False, True):
            w = sorted(wall[use_wal])
            print(f"W2 {'wal ' if use_wal else 'lmdb'}: median {statistics.median(w) * 1e3:.2f} "
                  f"ms, p95 {w[int(len(w) * 0.95)] * 1e3:.2f} ms, cpu median "
                  f"{statistics.median(cpu[use_wal]) * 1e3:.2f} ms ({len(w)} upserts)")
        print("machine:", machine(), "load", os.getloadavg())
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
