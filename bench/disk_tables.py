"""Disk by table after a bulk load with SEARCH (issue 18).

    python bench/disk_tables.py --n 100000 --db /tmp/disk100k [--semantic none|wordllama]
                                [--sorted]

Loads the peers data set (`bench/load.py`'s, generated into --data when missing) into a
fresh LMDB nexus with SEARCH attached (`bulk_import`, `durable=False`, the schema UPSERT
first), closes it, and prints JSON: the load's wall and CPU seconds, every file's allocated
size, the LMDB file's free pages, and per LMDB table its size (`txn.stat`: pages x page
size, as `kip check` reports), entries, raw bytes (keys + values) and the fill of its
leaf pages. `--sorted` also writes each table in key order with
MDB_APPEND into a scratch environment and reports those sizes: what the same data takes
with full pages (a bulk load's interleaved inserts leave the lexical tables' pages about
half full). Nothing is written to bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.join(_HERE, ".."))

import lmdb  # noqa: E402

from nexus.api import Nexus  # noqa: E402
from nexus.ops.bulk_import import bulk_import  # noqa: E402

from bench import load as L  # noqa: E402


def tables(path: str) -> dict[str, tuple[float, int, float, float]]:
    """name -> (MB of pages, entries, MB of keys + values, fill of its leaf pages: the
    bytes its leaf nodes take — keys, values, LMDB's 8-byte node header and 2-byte slot —
    over the room of its leaf and overflow pages)."""
    env = lmdb.open(path, readonly=True, lock=False, max_dbs=64)
    out = {}
    try:
        with env.begin() as txn:
            for name in [k for k, _ in txn.cursor()]:
                db = env.open_db(name, txn=txn, create=False)
                st = txn.stat(db)
                raw = sum(len(k) + len(v) for k, v in txn.cursor(db))
                pages = st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
                room = (st["leaf_pages"] + st["overflow_pages"]) * (st["psize"] - 16)
                out[name.decode()] = (round(pages * st["psize"] / 1e6, 1), st["entries"],
                                      round(raw / 1e6, 1),
                                      round((raw + 10 * st["entries"]) / room, 3) if room
                                      else 0.0)
    finally:
        env.close()
    return dict(sorted(out.items(), key=lambda kv: -kv[1][0]))


def free_mb(path: str) -> float:
    """MB of the file's pages that no table holds (LMDB's free list, and its own tree)."""
    env = lmdb.open(path, readonly=True, lock=False, max_dbs=64)
    try:
        with env.begin() as txn:
            st = env.stat()
            held = 2 + st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
            for name in [k for k, _ in txn.cursor()]:
                t = txn.stat(env.open_db(name, txn=txn, create=False))
                held += t["branch_pages"] + t["leaf_pages"] + t["overflow_pages"]
            return round((env.info()["last_pgno"] + 1 - held) * st["psize"] / 1e6, 1)
    finally:
        env.close()


def sorted_sizes(path: str) -> dict[str, float]:
    """name -> MB of pages when the table is written in key order with MDB_APPEND."""
    env = lmdb.open(path, readonly=True, lock=False, max_dbs=64)
    scratch = tempfile.mkdtemp(prefix="nexus-sorted-")
    out_env = lmdb.open(scratch, map_size=1 << 34, max_dbs=64, sync=False)
    out = {}
    try:
        with env.begin() as txn:
            for name in [k for k, _ in txn.cursor()]:
                db = env.open_db(name, txn=txn, create=False)
                odb = out_env.open_db(name)
                with out_env.begin(write=True) as otxn:
                    otxn.cursor(odb).putmulti(txn.cursor(db).iternext(), append=True)
                    st = otxn.stat(odb)
                out[name.decode()] = round((st["branch_pages"] + st["leaf_pages"]
                                            + st["overflow_pages"]) * st["psize"] / 1e6, 1)
    finally:
        env.close()
        out_env.close()
        shutil.rmtree(scratch)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--db", required=True, help="directory of the database (replaced)")
    ap.add_argument("--data", default="/tmp/nexus-peers")
    ap.add_argument("--semantic", default="none")
    ap.add_argument("--sorted", action="store_true")
    args = ap.parse_args()
    concepts, links, _, _ = L.load_dataset(args.n, args.data)
    gc.collect()
    gc.freeze()
    shutil.rmtree(args.db, ignore_errors=True)
    nx = Nexus.open(args.db, durable=False, semantic=args.semantic)
    assert "error" not in nx.execute_kip({"command": L.SCHEMA})
    load0 = os.getloadavg()[0]
    t0, c0 = time.perf_counter(), time.process_time()
    bulk_import(nx, concepts, links)
    t1, c1 = time.perf_counter(), time.process_time()
    nx.close()
    files = {f: round(os.stat(os.path.join(args.db, f)).st_blocks * 512 / 1e6, 1)
             for f in sorted(os.listdir(args.db))}
    report = {"n": args.n, "items": len(concepts) + len(links), "load_s": round(t1 - t0, 1),
              "load_cpu_s": round(c1 - c0, 1), "loadavg": [load0, os.getloadavg()[0]],
              "files_mb": files, "total_mb": round(sum(files.values()), 1),
              "free_pages_mb": free_mb(args.db),
              "tables_mb_entries_raw_fill": tables(args.db)}
    if args.sorted:
        report["tables_sorted_mb"] = sorted_sizes(args.db)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
