"""The bulk path: turning rows of new elements into sorted index entries, fast.

Owns only the transformation (rows -> per-table lists of (key, value) in key order), for
`GraphWriteTxn.create_concepts/create_links`, which insert them. Key layouts are those of
`codec`; the link indexes are built column-wise with numpy (big-endian structured arrays,
sorted, viewed as raw bytes), because Python-level packing and sorting of millions of byte
keys is several times slower. The cyclic garbage collector is paused while the batch is
built: it would otherwise re-traverse the growing lists of tuples many times over, and
nothing built here forms a cycle.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterable, Iterator

from nexus.errors import ErrorCode, KipError
from nexus.store import codec
from nexus.store.codec import pack_n, pack_sid

U64, U32 = ">u8", ">u4"


def internal(message: str) -> KipError:
    return KipError(ErrorCode.KIP_4003, message)


@contextmanager
def gc_paused() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _maps(ids: Iterable[int], maps: Iterable, what: str) -> list[tuple[bytes, bytes]]:
    encode = codec.encode_map
    out = [(pack_n(n), encode(m, what)) for n, m in zip(ids, maps) if m]
    out.sort()
    return out


def _check_ids(ids: tuple) -> None:
    if set(map(type, ids)) != {int} or min(ids) <= 0:
        raise internal("bulk create: element ids must be positive integers")


def concept_entries(rows: Iterable[tuple]) -> dict[str, list] | None:
    """Rows (n, type_id, name, attributes, metadata) -> {table: sorted entries}, plus
    'per_type' {type_id: count} and 'max_id'. None when there are no rows. Index tables
    whose values are empty ('tid', 'name') hold bare keys."""
    rows = list(rows)
    if not rows:
        return None
    try:
        ns, types, names, attrs, metas = zip(*rows)
    except ValueError:
        raise internal("bulk create_concepts: rows must be (n, type_id, name, attributes, "
                       "metadata)") from None
    _check_ids(ns)
    encode_text, text_key, limit = codec.encode_text, codec.text_key, codec.MAX_INLINE_TEXT
    heads, tn, tid, by_name = [], [], [], []
    per_type: dict[int, int] = {}
    type_keys: dict[int, bytes] = {}
    for n, t, name in zip(ns, types, names):
        nk = pack_n(n)
        tb = type_keys.get(t)
        if tb is None:
            tb = type_keys[t] = pack_sid(t)
            per_type[t] = 0
        per_type[t] += 1
        try:
            utf8 = name.encode()
        except (AttributeError, UnicodeEncodeError):
            utf8 = encode_text(name)            # raises the proper KIP_2003
        tkey = utf8 if len(utf8) <= limit else text_key(utf8)
        heads.append((nk, b"\x01" + tb + utf8))
        tn.append((tb + tkey, nk))
        tid.append(tb + nk)
        by_name.append(tkey + b"\x00" + nk)
    for entries in (heads, tn, tid, by_name):
        entries.sort()
    return {"head": heads, "tn": tn, "tid": tid, "name": by_name,
            "attrs": _maps(ns, attrs, "attributes"), "metas": _maps(ns, metas, "metadata"),
            "per_type": per_type, "max_id": max(ns)}


def _column(values: tuple, kind: str, limit: int):
    import numpy as np
    a = np.array(values)
    if a.dtype.kind not in "iu" or (a.size and (a.min() <= 0 or a.max() >= limit)):
        raise internal(f"bulk create_links: {kind} must be positive integers below {limit}")
    return a.astype(np.uint64)


def _sorted_keys(columns: list):
    """A structured array of the big-endian columns, rows sorted like their bytes.

    When the columns' values fit in 64 bits together, one argsort of the packed integer
    orders the rows (several times faster than a lexsort); else the rows are sorted as
    fixed-width byte strings. Callers take `.view(f"V{itemsize}").tolist()` for the keys.
    """
    import numpy as np
    dtype = np.dtype([(f"f{i}", code) for i, (_, code) in enumerate(columns)])
    out = np.empty(len(columns[0][0]), dtype=dtype)
    bits = [int(col.max()).bit_length() for col, _ in columns]
    if sum(bits) <= 64:
        packed = columns[0][0].copy()
        for (col, _), b in zip(columns[1:], bits[1:]):
            packed = (packed << np.uint64(b)) | col
        order = np.argsort(packed)
        for i, (col, _) in enumerate(columns):
            out[f"f{i}"] = col[order]
        return out
    for i, (col, _) in enumerate(columns):
        out[f"f{i}"] = col
    return np.sort(out.view(f"S{dtype.itemsize}")).view(dtype)


def _as_bytes(structured) -> list[bytes]:
    return structured.view(f"V{structured.dtype.itemsize}").tolist()


def link_entries(rows: Iterable[tuple]) -> dict | None:
    """Rows (n, s, p, o, attributes, metadata) -> {table: sorted entries} (the three
    link indexes hold bare keys), plus 'per_pred', 'max_id' and 'duplicate': an (s, p, o)
    that occurs twice in the batch, or None."""
    import numpy as np
    rows = list(rows)
    if not rows:
        return None
    try:
        ns, ss, ps, os_, attrs, metas = zip(*rows)
    except ValueError:
        raise internal("bulk create_links: rows must be (n, subject, predicate_id, object, "
                       "attributes, metadata)") from None
    n = _column(ns, "ids", 2**64)
    s = _column(ss, "subjects", 2**64)
    p = _column(ps, "predicate ids", 2**32)
    o = _column(os_, "objects", 2**64)
    spo = _sorted_keys([(s, U64), (p, U32), (o, U64), (n, U64)])
    s1, p1, o1 = spo["f0"], spo["f1"], spo["f2"]    # a repeated (s, p, o) is adjacent
    same = np.flatnonzero((s1[1:] == s1[:-1]) & (p1[1:] == p1[:-1]) & (o1[1:] == o1[:-1]))
    duplicate = (int(s1[same[0]]), int(p1[same[0]]), int(o1[same[0]])) if same.size else None
    head_dtype = np.dtype([("tag", "u1"), ("s", U64), ("p", U32), ("o", U64)])
    order = np.argsort(n)
    values = np.empty(len(order), dtype=head_dtype)
    values["tag"] = codec.LINK_TAG
    values["s"], values["p"], values["o"] = s[order], p[order], o[order]
    heads = list(zip(n[order].astype(U64).view("V8").tolist(), _as_bytes(values)))
    per_pred: dict[int, int] = {}
    for pid, count in zip(*np.unique(p, return_counts=True)):
        per_pred[int(pid)] = int(count)
    return {"head": heads, "spo": _as_bytes(spo),
            "ops": _as_bytes(_sorted_keys([(o, U64), (p, U32), (s, U64), (n, U64)])),
            "pso": _as_bytes(_sorted_keys([(p, U32), (s, U64), (o, U64), (n, U64)])),
            "attrs": _maps(ns, attrs, "attributes"), "metas": _maps(ns, metas, "metadata"),
            "per_pred": per_pred, "max_id": max(ns), "duplicate": duplicate}
