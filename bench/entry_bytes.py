#!/usr/bin/env python3
"""Where an entry's bytes go in the per-element tables of a loaded LMDB database (a
measurement, nothing written):

    python bench/entry_bytes.py --db D [--tables head,attrs,metas,name,tn,tid]

For each table (read-only): entries, MB of pages (branch, leaf, overflow), and of the leaf
pages' room (4,096 bytes less LMDB's 16-byte page header) what the keys, the values, LMDB's
8-byte node headers and 2-byte slots take, and what is left empty (the page fill). For
`head`, the values by kind (concept, link: wide 8-byte ends or narrow 4-byte ones); for
`metas` (and `attrs`), the values by part: the C1 header (tag, flag, version, times), the
keyed form's count and key codes, the msgpack array header, and each key's value bytes, and
the distinct short strings (what a per-database dictionary of texts would code).
`--what-if` also writes `head` and `metas` appended into a scratch environment in other
layouts (`what_if`: nothing of it is built). Prints JSON (bench/RESULTS.md, "Disk: the
per-element tables' entries").
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.join(_HERE, ".."))

import lmdb  # noqa: E402
import msgpack  # noqa: E402

from nexus.store import codec  # noqa: E402

MB = 1e6


def _header_len(v: bytes) -> int:
    flag = v[1]
    narrow, updated = flag & 4, flag & 1
    return (9 + 6 * bool(updated)) if narrow else (14 + 8 * bool(updated))


def map_parts(values: list[bytes]) -> dict[str, object]:
    """Bytes of the stored maps by part (module doc)."""
    parts: collections.Counter[str] = collections.Counter()
    forms: collections.Counter[str] = collections.Counter()
    strings: collections.Counter[str] = collections.Counter()
    for v in values:
        if v[:1] != b"\xc1":
            forms["msgpack"] += 1
            parts["plain msgpack"] += len(v)
            continue
        at = _header_len(v)
        parts["header"] += at
        if v[1] & 2:                                        # keyed
            n = v[at]
            keys = [codec.META_KEYS[c - 1] for c in v[at + 1:at + 1 + n]]
            parts["count + key codes"] += 1 + n
            at += 1 + n
            forms[f"keyed {n}"] += 1
            up = msgpack.Unpacker(raw=False, ext_hook=codec.ext_value)
            up.feed(v[at:])
            parts["array header"] += 1 if n < 16 else 3
            pos = 1 if n < 16 else 3
            up = msgpack.Unpacker(raw=False, ext_hook=codec.ext_value)
            up.feed(v[at + pos:])
            for key in keys:
                start = up.tell()
                item = up.unpack()
                parts[f"value {key}"] += up.tell() - start
                if type(item) is str and len(item) <= 31 and v[at + pos + start] >> 5 == 5:
                    strings[item] += 1
        else:
            forms["map"] += 1
            parts["rest (msgpack map)"] += len(v) - at
    n = len(values) or 1
    short = sum(strings.values())
    return {"forms": dict(forms),
            "bytes_per_value": {k: round(b / n, 2) for k, b in sorted(parts.items())},
            "mb": {k: round(b / MB, 2) for k, b in sorted(parts.items())},
            "short_strings": {"distinct": len(strings), "values": short,
                              "mb": round(sum((1 + len(s.encode())) * c
                                              for s, c in strings.items()) / MB, 2),
                              "top": strings.most_common(12)}}


def head_parts(values: list[bytes]) -> dict[str, object]:
    kinds: collections.Counter[str] = collections.Counter()
    size: collections.Counter[str] = collections.Counter()
    for v in values:
        kind = ("concept" if v[0] == codec.CONCEPT_TAG else
                "link (wide)" if len(v) == 21 else f"link ({len(v)} bytes)")
        kinds[kind] += 1
        size[kind] += len(v)
    return {k: {"entries": c, "bytes_per_value": round(size[k] / c, 2)} for k, c in
            kinds.items()}


def table(txn: lmdb.Transaction, env: lmdb.Environment, name: str) -> dict[str, object]:
    db = env.open_db(name.encode(), txn=txn, create=False)
    st = txn.stat(db)
    keys = vals = 0
    values: list[bytes] = []
    keep = name in ("head", "metas", "attrs")
    for k, v in txn.cursor(db):
        keys += len(k)
        vals += len(v)
        if keep:
            values.append(v)
    e = st["entries"]
    psize = st["psize"]
    leaf_room = st["leaf_pages"] * (psize - 16)
    used = keys + vals + 10 * e
    out: dict[str, object] = {
        "entries": e,
        "pages_mb": {"branch": round(st["branch_pages"] * psize / MB, 2),
                     "leaf": round(st["leaf_pages"] * psize / MB, 2),
                     "overflow": round(st["overflow_pages"] * psize / MB, 2)},
        "per_entry": {"key": round(keys / max(e, 1), 2), "value": round(vals / max(e, 1), 2),
                      "node header + slot": 10,
                      "empty room of its leaf pages": round((leaf_room - used) / max(e, 1), 2)
                      if not st["overflow_pages"] else None,
                      "page headers + branch pages": round(
                          (st["leaf_pages"] * 16 + st["branch_pages"] * psize) / max(e, 1), 2)},
        "mb": {"keys": round(keys / MB, 2), "values": round(vals / MB, 2),
               "node headers + slots": round(10 * e / MB, 2)},
        "leaf_fill": round(used / leaf_room, 3) if leaf_room and not st["overflow_pages"]
        else None}
    if name == "head":
        out["values"] = head_parts(values)
    elif keep:
        out["values"] = map_parts(values)
    return out


def _interned(v: bytes, codes: dict[bytes, int]) -> bytes:
    """A keyed C1 value with each short string of `codes` as a 3-byte fixext 1 (what a
    per-database dictionary of texts would store), else `v`."""
    if v[:1] != b"\xc1" or not v[1] & 2:
        return v
    at = _header_len(v)
    n = v[at]
    at += 2 + n                                             # count, codes, array header
    up = msgpack.Unpacker(raw=False, ext_hook=codec.ext_value)
    up.feed(v[at:])
    out = [v[:at]]
    for _ in range(n):
        start = up.tell()
        up.skip()
        raw = v[at + start:at + up.tell()]
        code = codes.get(raw)
        out.append(raw if code is None else bytes((0xD4, 0x7F, code)))
    return b"".join(out)


def what_if(path: str, work: str) -> dict[str, float]:
    """MB of pages of `head` and `metas` rewritten appended in other layouts (nothing
    built): as they are; link heads narrow; both in ONE table (value: head then metadata);
    metadata with the short strings interned; the last two together."""
    import shutil
    import tempfile
    work = work or tempfile.mkdtemp(prefix="entry-bytes-")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = lmdb.open(path, readonly=True, lock=False, max_dbs=64)
    out = lmdb.open(work, max_dbs=64, map_size=1 << 36, sync=False, metasync=False)
    wide = codec.LINK_HEAD_WIDE

    def narrow(v: bytes) -> bytes:
        if v[0] == codec.LINK_TAG_WIDE:
            return codec.link_head_value(*wide.unpack(v)[1:])
        return v
    res = {}
    try:
        with env.begin() as rt:
            heads = list(rt.cursor(env.open_db(b"head", txn=rt)))
            metas = dict(rt.cursor(env.open_db(b"metas", txn=rt)))
            counts: collections.Counter[bytes] = collections.Counter()
            for v in metas.values():
                if v[:1] == b"\xc1" and v[1] & 2:
                    at = _header_len(v)
                    n = v[at]
                    up = msgpack.Unpacker(raw=False)
                    up.feed(v[at + 2 + n:])
                    for _ in range(n):
                        start = up.tell()
                        up.skip()
                        raw = v[at + 2 + n + start:at + 2 + n + up.tell()]
                        if raw[0] >> 5 == 5:                # a fixstr
                            counts[raw] += 1
            codes = {raw: i for i, (raw, c) in enumerate(counts.most_common(255)) if c > 1}
            interned = {k: _interned(v, codes) for k, v in metas.items()}
            layouts = {
                "head": heads,
                "head, link heads narrow": [(k, narrow(v)) for k, v in heads],
                "metas": sorted(metas.items()),
                "metas, short strings interned": sorted(interned.items()),
                "head + metas in one table (narrow heads)":
                    [(k, narrow(v) + metas.get(k, b"")) for k, v in heads],
                "head + metas in one table, strings interned":
                    [(k, narrow(v) + interned.get(k, b"")) for k, v in heads]}
            for name, items in layouts.items():
                db = out.open_db(name.encode())
                with out.begin(write=True) as wt:
                    wt.cursor(db).putmulti(items, append=True)
                    st = wt.stat(db)
                pages = st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
                res[name] = round(pages * st["psize"] / MB, 1)
            res["interned texts"] = len(codes)
    finally:
        env.close()
        out.close()
        shutil.rmtree(work, ignore_errors=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--tables", default="head,attrs,metas,name,tn,tid")
    ap.add_argument("--what-if", action="store_true",
                    help="also rewrite head and metas in other layouts (what_if)")
    ap.add_argument("--work", default="", help="scratch directory of --what-if")
    args = ap.parse_args()
    env = lmdb.open(args.db, readonly=True, lock=False, max_dbs=64)
    try:
        with env.begin() as txn:
            res: dict[str, object] = {name: table(txn, env, name)
                                      for name in args.tables.split(",")}
    finally:
        env.close()
    if args.what_if:
        res["what_if_mb"] = what_if(args.db, args.work)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
