#!/usr/bin/env python3
"""What 4-byte element ids would save in the per-element tables (an estimate, nothing built):

    python bench/id4_tables.py --db D [--work W]

Reads `head`, `attrs` and `metas` of a loaded database D (read-only) and writes each twice,
in key order with MDB_APPEND, into a scratch environment W: as it is (8-byte id keys), and
with 4-byte id keys (the link heads' values `02 s p o` with 4-byte ends too). Prints the MB of
pages of each (bench/RESULTS.md, "Disk: the link indexes as 16-byte keys").
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import tempfile

import lmdb

LINK_HEAD8, LINK_HEAD4 = struct.Struct(">QIQ"), struct.Struct(">III")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="id4-")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = lmdb.open(args.db, readonly=True, lock=False, max_dbs=64)
    out = lmdb.open(work, max_dbs=64, map_size=1 << 36, sync=False, metasync=False)

    def narrow(k: bytes, v: bytes) -> tuple[bytes, bytes]:
        if v[:1] == b"\x02" and len(v) == 21:
            v = b"\x02" + LINK_HEAD4.pack(*LINK_HEAD8.unpack(v[1:]))
        return k[4:], v

    res = {}
    try:
        with env.begin() as rt:
            for name in ("head", "attrs", "metas"):
                items = list(rt.cursor(env.open_db(name.encode(), txn=rt)))
                for tag, fn in (("8", None), ("4", narrow)):
                    db = out.open_db(f"{name}{tag}".encode())
                    with out.begin(write=True) as wt:
                        wt.cursor(db).putmulti(items if fn is None else
                                               (fn(k, v) for k, v in items), append=True)
                        st = wt.stat(db)
                    pages = st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
                    res[f"{name} ({tag}-byte ids)"] = round(pages * st["psize"] / 1e6, 1)
    finally:
        env.close()
        out.close()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
