"""The packed layout of a posting block: ids as deltas, weights and groups as small
dictionaries, encoded and decoded many blocks at a time with numpy.

Owns the bytes of the third block layout of `postings` (the narrow and wide ones are
there). A packed block is

    tag u8 | count u8 | first id u32 | deltas | weights | groups

where `tag` = 0xC0 | width-1 << 4 | weight mode << 2 | group mode (an old block's first
byte is its count, at most BLOCK = 128: a tag is never one), the deltas are the count-1
differences of consecutive ids, each `width` bytes (1-4, the least that holds the block's
largest), and weights (f16) and groups (u16) are each stored in one of four modes:

    ONE     the block's one value                                   2 bytes
    DICT4   4 values, then a 2-bit index a posting                  8 + ceil(count/4)
    DICT16  16 values, then a 4-bit index a posting                32 + ceil(count/2)
    RAW     a value a posting                                       2 x count

(the smallest that holds the block's distinct values; unused dictionary slots are 0).
So the bytes of a block are fixed by its first two bytes: blocks with the same two are
decoded together as one numpy record array (`decode_many`), whatever their position in a
list, and encoded together the same way (`encode_many`) — no Python step per posting, one
per block. The decoded weights are the stored f16 values, bit for bit, so scores do not
depend on the layout.

A list's postings mostly share one type or predicate (group ONE) and a handful of weights
(BM25F's saturated tf over a few field lengths: DICT4), and the ids of a common term are
close (1-2-byte deltas): a full block of 128 postings takes ~150-450 bytes instead of the
narrow layout's 1,028 (bench/RESULTS.md, "Disk: packed posting blocks"). The full blocks of
one list share one layout (the widest any of them needs: `encode_many`'s `runs`), so that a
long list is decoded in two numpy passes (its full blocks, its last) rather than one per
layout among its blocks.
"""
from __future__ import annotations

import numpy as np

TAG = 0xC0                  # a packed block's first byte is >= TAG (module doc)
ONE, DICT4, DICT16, RAW = 0, 1, 2, 3
BLOCK = 128                 # postings.BLOCK: a full block
_U64 = np.uint64
_DTYPES: dict[int, np.dtype] = {}


def _part(mode: int, name: str, c: int) -> list[tuple]:
    if mode == ONE:
        return [(name, "<u2")]
    if mode == DICT4:
        return [(name + "d", "<u2", (4,)), (name + "i", "u1", ((c + 3) // 4,))]
    if mode == DICT16:
        return [(name + "d", "<u2", (16,)), (name + "i", "u1", ((c + 1) // 2,))]
    return [(name, "<u2", (c,))]


def dtype(head: int) -> np.dtype:
    """The record dtype of the blocks whose first two bytes are `head` (tag << 8 | count)."""
    got = _DTYPES.get(head)
    if got is None:
        tag, c = head >> 8, head & 0xFF
        width = ((tag >> 4) & 3) + 1
        fields: list[tuple] = [("h", "u1", (2,)), ("first", "<u4")]
        if c > 1:
            fields.append(("d", {1: "u1", 2: "<u2", 3: "u1", 4: "<u4"}[width],
                           (c - 1, 3) if width == 3 else (c - 1,)))
        fields += _part((tag >> 2) & 3, "w", c) + _part(tag & 3, "g", c)
        got = _DTYPES[head] = np.dtype(fields)
    return got


# a byte's 2-bit and 4-bit indices, lowest bits first (a DICT4 / DICT16 part's indices)
_SPLIT4 = np.array([[b & 3, b >> 2 & 3, b >> 4 & 3, b >> 6] for b in range(256)], np.uint8)
_SPLIT16 = np.array([[b & 15, b >> 4] for b in range(256)], dtype=np.uint8)


# a DICT4 part's 4-bit nibble (two 2-bit indices, lowest first) as the positions in the
# dictionary of its two values (`_values`: a block's 16 pairs looked up per nibble)
_NIB_LO = np.arange(16) & 3
_NIB_HI = np.arange(16) >> 2
_U32 = np.dtype("<u4")


def _values(rec: np.ndarray, name: str, mode: int, c: int) -> np.ndarray:
    """The B x c values of a weights or groups part, flat, as u16 bit patterns. (Array
    methods and ufuncs rather than numpy's Python-level functions: a query decodes
    thousands of small blocks, where their call overhead was most of the time.)
    A DICT4 part is read a nibble at a time: each block's 16 pairs of values as u32,
    gathered by nibble and viewed as u16 (half the gathers of one value an index, and no
    table of split bytes: ~2.5x faster on a long list's blocks); a DICT16 part's nibbles
    are its indices."""
    if mode == ONE:
        return rec[name].repeat(c)
    if mode == RAW:
        return rec[name].reshape(-1)
    d = rec[name + "d"]
    i = rec[name + "i"]
    b = len(rec)
    nib = np.empty((b, 2 * i.shape[1]), dtype=np.intp)
    np.bitwise_and(i, 15, out=nib[:, 0::2])
    np.right_shift(i, 4, out=nib[:, 1::2])
    if mode == DICT4:
        table = d[:, _NIB_LO].astype(_U32)
        table |= d[:, _NIB_HI].astype(_U32) << 16
        k = 16
    else:
        table, k = d, 16
    if b > 1:
        nib += np.arange(0, b * k, k)[:, None]
    out = table.reshape(-1)[nib]
    if mode == DICT4:
        out = out.view(_U16)
    return out[:, :c].reshape(-1) if out.shape[1] != c else out.reshape(-1)


def _decode_group(head: int, raws: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids u64, weights f16, groups u16) of blocks that all start with `head`, flat."""
    tag, c = head >> 8, head & 0xFF
    rec = np.frombuffer(raws[0] if len(raws) == 1 else b"".join(raws), dtype=dtype(head))
    ids = np.empty((len(rec), c), dtype=_U64)
    ids[:, 0] = rec["first"]
    if c > 1:
        d = rec["d"]
        if d.ndim == 3:
            d = (d[..., 0].astype(np.uint32) | d[..., 1].astype(np.uint32) << 8
                 | d[..., 2].astype(np.uint32) << 16)
        ids[:, 1:] = d
        np.add.accumulate(ids, axis=1, out=ids)
    return (ids.reshape(-1), _values(rec, "w", (tag >> 2) & 3, c).view(np.float16),
            _values(rec, "g", tag & 3, c))


_PLANS: dict[int, tuple] = {}
_ADD = np.add
_DELTA = {1: np.dtype("u1"), 2: np.dtype("<u2"), 4: np.dtype("<u4")}
_U16, _F16, _U8 = np.dtype("<u2"), np.dtype("<f2"), np.dtype("u1")


def _plan(head: int) -> tuple:
    """(delta dtype or None for 3 bytes, and per part (mode, offset, dictionary size,
    index offset)) of the blocks starting with `head`: where `_decode_one` reads."""
    got = _PLANS.get(head)
    if got is None:
        tag, c = head >> 8, head & 0xFF
        width = ((tag >> 4) & 3) + 1
        at = 6 + width * (c - 1)
        parts = []
        for mode in ((tag >> 2) & 3, tag & 3):
            k = 4 if mode == DICT4 else 16
            parts.append((mode, at, k, at + 2 * k))
            at += (2 if mode == ONE else 2 * c if mode == RAW
                   else 2 * k + (c + 3) // 4 if mode == DICT4 else 2 * k + (c + 1) // 2)
        got = _PLANS[head] = (_DELTA.get(width), parts[0], parts[1])
    return got


def _part_at(raw: bytes, c: int, plan: tuple) -> np.ndarray:
    """One block's weights or groups part (u16 bit patterns), as `_plan` places it."""
    mode, at, k, iat = plan
    if mode == ONE:
        return np.frombuffer(raw, _U16, 1, at).repeat(c)
    if mode == RAW:
        return np.frombuffer(raw, _U16, c, at)
    split = _SPLIT4 if mode == DICT4 else _SPLIT16
    idx = split[np.frombuffer(raw, _U8, (c + 3) // 4 if mode == DICT4 else (c + 1) // 2,
                              iat)].reshape(-1)[:c]
    return np.frombuffer(raw, _U16, k, at)[idx]


def _decode_one(raw: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`decode_many` of one block of more than one posting, read at its offsets (no
    record array: the common case of a term of a few postings)."""
    c = raw[1]
    delta, wp, gp = _plan(raw[0] << 8 | c)
    if delta is None:
        ids, w, g = _decode_group(raw[0] << 8 | c, [raw])
        return ids, w, g.astype(np.uint32)
    ids = np.empty(c, dtype=_U64)
    ids[0] = int.from_bytes(raw[2:6], "little")
    ids[1:] = np.frombuffer(raw, delta, c - 1, 6)
    _ADD.accumulate(ids, out=ids)
    return ids, _part_at(raw, c, wp).view(np.float16), _part_at(raw, c, gp).astype(np.uint32)


def decode_many(raws: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids u64, weights f16, groups u32) of packed blocks, in their order (one numpy
    decode per distinct first two bytes among them)."""
    if len(raws) == 1:
        raw = raws[0]
        if raw[1] == 1:         # (a rare term's one posting: always tag TAG)
            return (np.frombuffer(raw, "<u4", 1, 2).astype(_U64),
                    np.frombuffer(raw, "<f2", 1, 6), np.frombuffer(raw, "<u2", 1, 8)
                    .astype(np.uint32))
        return _decode_one(raw)
    # The common case: a list's full blocks, all of one layout (`encode_many`'s `runs`),
    # then its last block: told without a Python step per block beyond a 2-byte compare.
    lead = raws[0][:2]
    same = 0
    for raw in raws:
        if raw[:2] != lead:
            break
        same += 1
    if same >= len(raws) - 1:
        ids, w, g = _decode_group(lead[0] << 8 | lead[1], raws[:same] if same < len(raws)
                                  else raws)
        if same == len(raws):
            return ids, w, g.astype(np.uint32)
        li, lw, lg = decode_many(raws[same:])
        return (np.concatenate([ids, li]), np.concatenate([w, lw]),
                np.concatenate([g.astype(np.uint32), lg]))
    groups: dict[int, list[int]] = {}
    for i, raw in enumerate(raws):
        groups.setdefault(raw[0] << 8 | raw[1], []).append(i)
    if len(groups) == 1:
        ids, w, g = _decode_group(next(iter(groups)), raws)
        return ids, w, g.astype(np.uint32)
    parts = []
    order: list[int] = []
    for head, at in groups.items():
        parts.append(_decode_group(head, [raws[i] for i in at]))
        order += at
    cat_i = np.concatenate([p[0] for p in parts])
    cat_w = np.concatenate([p[1] for p in parts])
    cat_g = np.concatenate([p[2] for p in parts]).astype(np.uint32)
    if order == sorted(order):      # (the groups in block order: a list's full blocks, its last)
        return cat_i, cat_w, cat_g
    counts = np.fromiter((raw[1] for raw in raws), dtype=np.int64, count=len(raws))
    starts = counts.cumsum() - counts
    moved = np.asarray(order)
    n = counts[moved]
    dest = (starts[moved] - (n.cumsum() - n)).repeat(n) + np.arange(len(cat_i))
    out_i = np.empty(len(dest), dtype=_U64)
    out_w = np.empty(len(dest), dtype=np.float16)
    out_g = np.empty(len(dest), dtype=np.uint32)
    out_i[dest], out_w[dest], out_g[dest] = cat_i, cat_w, cat_g
    return out_i, out_w, out_g


def _modes(values: np.ndarray, blk: np.ndarray, starts: np.ndarray, counts: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per block the cheapest mode of a u16 part (module doc); the rank of each posting's
    value among its block's distinct values; the distinct values of the blocks of more
    than one (sorted per block, as one array), each block's start in it, their number, and
    whether the block has one value.
    Blocks of one value (most groups, many weights: told by their min and max) are left
    out of the sort."""
    one = np.minimum.reduceat(values, starts) == np.maximum.reduceat(values, starts)
    many = ~one[blk]
    key = blk[many].astype(_U64) << _U64(16) | values[many].astype(_U64)
    uniq = np.sort(key)
    if len(uniq):
        uniq = uniq[np.concatenate(([True], uniq[1:] != uniq[:-1]))]
    nd = np.bincount((uniq >> _U64(16)).astype(np.int64), minlength=len(starts))
    ustart = np.cumsum(nd) - nd
    rank = np.zeros(len(values), dtype=np.int64)
    rank[many] = np.searchsorted(uniq, key) - ustart[blk[many]]
    nd[one] = 1
    cost = np.stack([np.where(one, 2, 1 << 30),
                     np.where(nd <= 4, 8 + (counts + 3) // 4, 1 << 30),
                     np.where(nd <= 16, 32 + (counts + 1) // 2, 1 << 30),
                     2 * counts])
    return (np.argmin(cost, axis=0), rank, (uniq & _U64(0xFFFF)).astype(np.uint16), ustart,
            nd, one)


def _fill(rec: np.ndarray, name: str, mode: int, c: int, pos: np.ndarray,
          values: np.ndarray, rank: np.ndarray, uniq: np.ndarray, ustart: np.ndarray,
          sel: np.ndarray, nd: np.ndarray, one: np.ndarray) -> None:
    """Write a weights or groups part of the records `rec` (blocks `sel`, postings `pos`:
    (B, c) positions in the columns; `one`: the blocks of one value, whose value is not
    among `uniq`)."""
    if mode == ONE:
        rec[name] = values[pos[:, 0]]
        return
    if mode == RAW:
        rec[name] = values[pos]
        return
    k = 4 if mode == DICT4 else 16
    slots = np.arange(k)
    at = ustart[sel][:, None] + slots
    used = slots < nd[sel][:, None]
    d = np.where(used, uniq[np.minimum(at, len(uniq) - 1)], 0) if len(uniq) else (
        np.zeros((len(sel), k), dtype=np.uint16))
    o = one[sel]
    if o.any():
        d[o, 0] = values[pos[o, 0]]
    rec[name + "d"] = d
    r = rank[pos].astype(np.uint8)
    per = 4 if mode == DICT4 else 2
    bits = 8 // per
    pad = (-c) % per
    if pad:
        r = np.concatenate([r, np.zeros((len(r), pad), dtype=np.uint8)], axis=1)
    r = r.reshape(len(r), -1, per)
    packed = r[..., 0].copy()
    for j in range(1, per):
        packed |= r[..., j] << (bits * j)
    rec[name + "i"] = packed


def encode_many(ids: np.ndarray, weights: np.ndarray, groups: np.ndarray,
                starts: np.ndarray, runs: np.ndarray | None = None) -> list[bytes]:
    """The packed bytes of the blocks [starts[i], starts[i+1]) of the columns (ids u64,
    ascending within a block, all < 2**32; weights float32, rounded to f16 as `encode`
    does; groups u32, all < 2**16), each of 1..BLOCK postings. One numpy pass per
    distinct (layout, count) among the blocks, no Python step per posting."""
    n = len(ids)
    starts = np.asarray(starts, dtype=np.int64)
    counts = np.diff(np.append(starts, n))
    blk = np.repeat(np.arange(len(starts)), counts)
    ids = ids.astype(_U64, copy=False)
    deltas = np.zeros(n, dtype=_U64)
    deltas[1:] = ids[1:] - ids[:-1]
    deltas[starts] = 0
    top = np.maximum.reduceat(deltas, starts)
    width = 1 + (top >= 1 << 8) + (top >= 1 << 16) + (top >= 1 << 24)
    wv = weights.astype("<f2").view(np.uint16)
    gv = groups.astype(np.uint16)
    wm, wr, wu, ws, wn, wo = _modes(wv, blk, starts, counts)
    gm, gr, gu, gs, gn, go = _modes(gv, blk, starts, counts)
    if runs is not None:
        # The full blocks of a list (`runs`: each block's list, lists contiguous) take
        # one layout, the widest any of them needs (the modes are ordered so that each
        # holds what the ones before it hold): a long list is then decoded in two numpy
        # passes, its full blocks and its last, instead of one per layout among them.
        full = np.flatnonzero(counts == BLOCK)
        if len(full):
            r = np.asarray(runs)[full]
            bounds = np.concatenate(([0], np.flatnonzero(np.diff(r)) + 1))
            sizes = np.diff(np.append(bounds, len(full)))
            for part in (width, wm, gm):
                part[full] = np.maximum.reduceat(part[full], bounds).repeat(sizes)
    tags = TAG | (width - 1) << 4 | wm << 2 | gm
    heads = tags << 8 | counts
    out: list[bytes] = [b""] * len(starts)
    order = np.argsort(heads, kind="stable")
    sorted_heads = heads[order]
    cuts = np.flatnonzero(np.diff(sorted_heads)) + 1
    for sel in np.split(order, cuts):
        head = int(heads[sel[0]])
        tag, c = head >> 8, head & 0xFF
        dt = dtype(head)
        rec = np.zeros(len(sel), dtype=dt)
        rec["h"] = (tag, c)
        pos = starts[sel][:, None] + np.arange(c)
        rec["first"] = ids[pos[:, 0]]
        if c > 1:
            d = deltas[pos[:, 1:]]
            if (tag >> 4) & 3 == 2:       # 3-byte deltas
                rec["d"] = np.stack([d & _U64(0xFF), d >> _U64(8) & _U64(0xFF),
                                     d >> _U64(16) & _U64(0xFF)], axis=2)
            else:
                rec["d"] = d
        _fill(rec, "w", (tag >> 2) & 3, c, pos, wv, wr, wu, ws, sel, wn, wo)
        _fill(rec, "g", tag & 3, c, pos, gv, gr, gu, gs, sel, gn, go)
        raw = rec.tobytes()
        size = dt.itemsize
        for j, b in enumerate(sel.tolist()):
            out[b] = raw[j * size:(j + 1) * size]
    return out
