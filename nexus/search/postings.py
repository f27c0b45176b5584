"""Blocked posting lists in an aux table: one key per block of up to BLOCK documents.

Owns the encoding of a term's postings and their updates. A term's list is a run of keys
`prefix + first_id` (8-byte big-endian), each holding the sorted ids of the block, their
BM25F weights (f16) and their groups (type or predicate id), as numpy arrays, in one of three
layouts told apart by the first byte (packed: >= 0xC0; else the count of a little-endian
u32 header):

    packed  tag, count, first id u32, id deltas, weights and groups as small dictionaries
            (`postings_packed`: ~1-2.5 B a posting)
    narrow  count | 1<<31, ids u32[count], weights f16[count], groups u16[count]   8 B a posting
    wide    count,         ids u64[count], weights f16[count], groups u32[count]  14 B a posting

Blocks written many at a time (a bulk load's lists, `Columns`; an append that fills blocks,
`_put_blocks`) are packed when their ids fit 32 bits and their groups 16 (every block in
practice: ids are a counter, groups symbol ids), else wide — unless the caller says
`pack=False` (`gram_index`: a typo query reads ~25 trigram lists of up to GRAM_CAP postings,
where decoding packed blocks cost more than their bytes save; bench/RESULTS.md, "Disk:
packed posting blocks"), then narrow. A small write's block (W2's fold
of pending documents into the last block of each list, an update's or a delete's rewrite of
one block) is narrow: its bytes are spliced (`_spliced`, `_set_in_place`, `_delete_few`),
where a packed block would be decoded and encoded again with numpy per list — a packed
block such a write touches is rewritten narrow. Blocks of older databases (wide, narrow)
are read as they are. All decode to the same arrays (u64 ids, f16 weights, u32 groups: the
stored f16 values bit for bit), so scores do not depend on the layout.

Why blocks rather than one key per (term, document): a query reads a whole list with one
`frombuffer` per 128 postings instead of one Python iteration per posting, so a term that
occurs in tens of thousands of documents is scored exactly in about a millisecond, and
conjunctions of common words (the "description words" queries) are never truncated; and a
bulk load appends to each term's last block once per transaction instead of writing one
key per posting.
"""
from __future__ import annotations

import struct
from bisect import bisect_left
from typing import Any

import numpy as np

from . import postings_cache as _cache
from . import postings_packed as packed

BLOCK = 128
_U64 = struct.Struct(">Q")
_COUNT = struct.Struct("<I")

Op = tuple[float, int] | None          # (weight, group) to set, None to delete


NARROW = 1 << 31            # header flag of the narrow layout (module doc)
_ID32 = 1 << 32
_GROUP16 = 1 << 16


def encode(ids: np.ndarray, weights: np.ndarray, groups: np.ndarray) -> bytes:
    """One block's bytes: narrow when its ids and groups fit, else wide (module doc)."""
    if len(ids) and int(ids[-1]) < _ID32 and int(groups.max()) < _GROUP16:
        return (_COUNT.pack(len(ids) | NARROW) + ids.astype("<u4").tobytes()
                + weights.astype("<f2").tobytes() + groups.astype("<u2").tobytes())
    return (_COUNT.pack(len(ids)) + ids.astype("<u8").tobytes()
            + weights.astype("<f2").tobytes() + groups.astype("<u4").tobytes())


def _narrow(raw: bytes) -> bool:
    """Whether a (non-empty) block is in the narrow layout."""
    return raw[0] < packed.TAG and bool(raw[3] & 0x80)


def decode(raw: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids u64, weights f16, groups u32) of one block, whichever its layout."""
    if raw[0] >= packed.TAG:
        return packed.decode_many([raw])
    h = _COUNT.unpack_from(raw)[0]
    if h & NARROW:
        c = h & 0xFFFF
        return (np.frombuffer(raw, dtype="<u4", count=c, offset=4).astype(np.uint64),
                np.frombuffer(raw, dtype="<f2", count=c, offset=4 + 4 * c),
                np.frombuffer(raw, dtype="<u2", count=c, offset=4 + 6 * c).astype(np.uint32))
    c = h
    ids = np.frombuffer(raw, dtype="<u8", count=c, offset=4)
    weights = np.frombuffer(raw, dtype="<f2", count=c, offset=4 + 8 * c)
    groups = np.frombuffer(raw, dtype="<u4", count=c, offset=4 + 10 * c)
    return ids, weights, groups


def count(raw: bytes) -> int:
    """The number of postings in a block."""
    if raw[0] >= packed.TAG:
        return raw[1]
    return int(_COUNT.unpack_from(raw)[0] & 0xFFFF)


def last_id(raw: bytes) -> int:
    """The last (greatest) id of a non-empty block."""
    if raw[0] >= packed.TAG:
        return int(packed.decode_many([raw])[0][-1])
    h = _COUNT.unpack_from(raw)[0]
    if h & NARROW:
        return int(_LE32.unpack_from(raw, 4 + 4 * ((h & 0xFFFF) - 1))[0])
    return int(_LE64.unpack_from(raw, 4 + 8 * (h - 1))[0])


def apply(aux: Any, prefix: bytes, ops: dict[int, Op], pack: bool = True) -> int:
    """Set or delete the postings `ops` (id → op) of the list at `prefix`; returns the
    change in the list's length. Only the blocks whose id ranges hold an op are rewritten
    (for a bulk append: the last block, then new full blocks: packed unless `pack` is
    False)."""
    ids = sorted(ops)
    lo, hi = ids[0], ids[-1]
    if None not in ops.values():
        done = _append(aux, prefix, ids, ops, pack)
        if done is not None:
            return done
    elif len(ids) == 1:
        # One delete (a MERGE's deleted duplicate leaves ~100 lists so): it can only be in
        # the block keyed at or below it — one positioning, no scan for the next block.
        for key, raw in aux.scan(prefix, reverse=True, start=prefix + _U64.pack(lo)):
            return _delete(aux, prefix, key, raw, ids)
        return 0
    start = None
    for key, _ in aux.scan(prefix, reverse=True, start=prefix + _U64.pack(lo)):
        start = key
        break
    # The blocks whose id ranges hold an op: only those are decoded and rewritten (a MERGE
    # deleting 100 links scattered over a list of 100k postings rewrites ~100 blocks, not
    # the whole list). Block i holds the ids from its key's id up to the next block's.
    firsts: list[int] = []
    raws: list[tuple[bytes, bytes]] = []
    for key, raw in aux.scan(prefix, start=start or prefix):
        first = _U64.unpack(key[-8:])[0]
        if raws and first > hi:
            break
        firsts.append(first)
        raws.append((key, raw))
    if not raws:
        return _rewrite(aux, prefix, None, None, ids, ops)
    delta = 0
    at = 0
    for i, (key, raw) in enumerate(raws):
        end = firsts[i + 1] if i + 1 < len(raws) else None
        j = len(ids) if end is None else bisect_left(ids, end, at)
        if j > at:
            delta += _rewrite(aux, prefix, key, raw, ids[at:j], ops)
            at = j
    return delta


def _rewrite(aux: Any, prefix: bytes, key: bytes | None, raw: bytes | None,
             ids: list[int], ops: dict[int, Op]) -> int:
    """Apply the ops of `ids` (sorted) to the one block `key` (None: no block yet) and
    write the result: deleted when empty, else re-keyed by its first id and split in
    blocks of at most BLOCK. Returns the change in the number of postings."""
    if raw is not None and key is not None and all(ops[n] is None for n in ids):
        return _delete(aux, prefix, key, raw, ids)
    if raw is not None and key is not None:
        done = _set_in_place(aux, prefix, key, raw, ids, ops)
        if done is not None:
            return done
    # On the block's arrays, no Python step per posting it holds (an update of a
    # document's terms sets one id in each of ~20 blocks of up to BLOCK postings): the
    # old postings minus those `ids` name, plus those set, in id order — the same blocks
    # as a dict of every posting would give (weights rounded to float32 as `_arrays` does).
    op_ids = np.asarray(ids, dtype=np.uint64)
    sets = [n for n in ids if ops[n] is not None]
    vals = _set(sets, ops)
    s_ids = np.asarray(sets, dtype=np.uint64)
    s_w = np.fromiter((v[0] for v in vals), dtype=np.float32, count=len(vals))
    s_g = np.fromiter((v[1] for v in vals), dtype=np.uint32, count=len(vals))
    if raw is None:
        before = 0
        new_ids, new_w, new_g = s_ids, s_w, s_g
    else:
        b_ids, b_w, b_g = decode(raw)
        before = len(b_ids)
        at = np.searchsorted(op_ids, b_ids)
        named = at < len(op_ids)
        named[named] = op_ids[at[named]] == b_ids[named]
        if key is not None and not sets and not named.any():
            return 0                    # only deletes of ids the block does not hold
        keep = ~named
        new_ids = np.concatenate([b_ids[keep].astype(np.uint64), s_ids])
        new_w = np.concatenate([b_w[keep].astype(np.float32), s_w])
        new_g = np.concatenate([b_g[keep].astype(np.uint32), s_g])
        order = np.argsort(new_ids, kind="stable")
        new_ids, new_w, new_g = new_ids[order], new_w[order], new_g[order]
    written: dict[bytes, bytes] = {}
    for i in range(0, len(new_ids), BLOCK):
        written[prefix + _U64.pack(int(new_ids[i]))] = encode(
            new_ids[i:i + BLOCK], new_w[i:i + BLOCK], new_g[i:i + BLOCK])
    if key is not None and key not in written:
        aux.delete(key)
    for k, value in written.items():
        if k != key or value != raw:
            aux.put(k, value)
    return len(new_ids) - before


def _set_in_place(aux: Any, prefix: bytes, key: bytes, raw: bytes, ids: list[int],
                  ops: dict[int, Op]) -> int | None:
    """`_rewrite` of sets only on a narrow block that stays narrow and within BLOCK (an
    updated document's new terms and weights: one id in each of its lists' blocks): the
    block's bytes spliced, as `_spliced` does for appends — the same bytes as `encode`.
    None when the case does not apply."""
    if not _narrow(raw):
        return None
    h = _COUNT.unpack_from(raw)[0]
    vals = _set(ids, ops)
    if None in vals or ids[-1] >= _ID32 or max(v[1] for v in vals) >= _GROUP16:
        return None
    c = h & 0xFFFF
    held = struct.unpack_from(f"<{c}I", raw, 4)
    ib = bytearray(raw[4:4 + 4 * c])
    wb = bytearray(raw[4 + 4 * c:4 + 6 * c])
    gb = bytearray(raw[4 + 6 * c:4 + 8 * c])
    added = 0
    for n, (w, g) in zip(reversed(ids), reversed(vals)):
        # Descending ids, positions in the block as it was: a change at a position never
        # moves the positions before it.
        p = bisect_left(held, n)
        wv = struct.pack("<e", _F32.unpack(_F32.pack(w))[0])
        gv = _LE16.pack(g)
        if p < c and held[p] == n:
            wb[2 * p:2 * p + 2] = wv
            gb[2 * p:2 * p + 2] = gv
        else:
            ib[4 * p:4 * p] = _LE32.pack(n)
            wb[2 * p:2 * p] = wv
            gb[2 * p:2 * p] = gv
            added += 1
    if c + added > BLOCK:
        return None
    value = b"".join((_COUNT.pack((c + added) | NARROW), ib, wb, gb))
    new_key = prefix + _U64.pack(min(held[0], ids[0]) if c else ids[0])
    if new_key != key:
        aux.delete(key)
    if new_key != key or value != raw:
        aux.put(new_key, value)
    return added


def _delete(aux: Any, prefix: bytes, key: bytes, raw: bytes, ids: list[int]) -> int:
    """`_rewrite` of deletes only, on the block's arrays (no Python step per posting: a
    MERGE deletes its duplicates' postings from ~100 blocks of the big lists at once);
    the same bytes as the general path."""
    if len(ids) <= FEW_DELETES and _narrow(raw):
        return _delete_few(aux, prefix, key, raw, ids)
    b_ids, b_w, b_g = decode(raw)
    gone = np.asarray(ids, dtype=np.uint64)
    at = np.searchsorted(b_ids, gone)
    held = at < len(b_ids)
    held[held] = b_ids[at[held]] == gone[held]
    if not held.any():
        return 0                        # only deletes of ids the block does not hold
    keep = np.ones(len(b_ids), dtype=bool)
    keep[at[held]] = False
    left = int(keep.sum())
    if left == 0:
        aux.delete(key)
        return -len(b_ids)
    k_ids = b_ids[keep]
    new_key = prefix + _U64.pack(int(k_ids[0]))
    if new_key != key:
        aux.delete(key)
    aux.put(new_key, encode(k_ids, b_w[keep], b_g[keep]))
    return left - len(b_ids)


# Up to this many deletes from a narrow block are cut out of its bytes (`_delete_few`):
# a MERGE's deleted duplicates each leave ~100 small lists (their other end's name) one
# posting at a time, where numpy's per-call overhead was most of the work.
FEW_DELETES = 8
_IDS32: dict[int, struct.Struct] = {}


def _delete_few(aux: Any, prefix: bytes, key: bytes, raw: bytes, ids: list[int]) -> int:
    """`_delete` of a few ids from a narrow block, by slicing its bytes: each column of
    the narrow layout (ids u32, weights f16, groups u16) without the deleted positions is
    what `encode` of the kept arrays writes (a subset of a narrow block is narrow), so
    the bytes are the same."""
    c = _COUNT.unpack_from(raw)[0] & 0xFFFF
    unpack = _IDS32.get(c)
    if unpack is None:
        unpack = _IDS32[c] = struct.Struct(f"<{c}I")
    b_ids = unpack.unpack_from(raw, 4)
    at: list[int] = []
    for n in ids:                       # sorted, distinct: `at` comes out sorted
        i = bisect_left(b_ids, n)
        if i < c and b_ids[i] == n:
            at.append(i)
    if not at:
        return 0                        # only deletes of ids the block does not hold
    left = c - len(at)
    if left == 0:
        aux.delete(key)
        return -c
    # the kept runs of positions [lo, hi), between the deleted ones
    runs: list[tuple[int, int]] = []
    lo = 0
    for i in at:
        if i > lo:
            runs.append((lo, i))
        lo = i + 1
    if lo < c:
        runs.append((lo, c))
    w0, g0 = 4 + 4 * c, 4 + 6 * c
    value = b"".join([_COUNT.pack(left | NARROW)]
                     + [raw[4 + 4 * a:4 + 4 * b] for a, b in runs]
                     + [raw[w0 + 2 * a:w0 + 2 * b] for a, b in runs]
                     + [raw[g0 + 2 * a:g0 + 2 * b] for a, b in runs])
    new_key = prefix + _U64.pack(b_ids[runs[0][0]])
    if new_key != key:
        aux.delete(key)
    aux.put(new_key, value)
    return -len(at)


def read(aux: Any, prefix: bytes, cap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """(ids, weights, groups, complete) of the list at `prefix`, at most about `cap` postings
    (whole blocks, in id order); `complete` is False when the list was cut. A list of at
    least `postings_cache.MIN_BLOCKS` blocks is answered from the cache of decoded lists
    when its blocks' bytes are those it was decoded from (`postings_cache`: a common word's
    list is read by every query over it), else decoded (`_decode_blocks`) and kept."""
    raws: list[bytes] = []
    total = 0
    complete = True
    tag = packed.TAG
    unpack = _COUNT.unpack_from
    for _, raw in aux.scan(prefix):
        if total >= cap:
            complete = False
            break
        raws.append(raw)
        total += raw[1] if raw[0] >= tag else unpack(raw)[0] & 0xFFFF
    if len(raws) < _cache.MIN_BLOCKS:
        return (*_decode_blocks(raws), complete)
    blob = b"".join(raws)
    got = _cache.CACHE.get(prefix, blob, complete)
    if got is not None:
        return got
    return _cache.CACHE.put(prefix, blob, (*_decode_blocks(raws), complete))


def _decode_blocks(raws: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, weights, groups) of a list's blocks, in their order. A run of packed blocks
    is decoded together (`packed.decode_many`: one numpy pass per distinct block header),
    and so is a run of full narrow or wide blocks (one numpy record array over their
    joined bytes); other blocks one by one."""
    full: list[bytes] = []
    full_len = 0                # the byte length of the blocks in `full` (one layout)
    packs: list[bytes] = []     # a run of packed blocks
    parts = []
    tag = packed.TAG
    for raw in raws:
        if raw[0] >= tag:
            if full:            # keep id order: the blocks before this one first
                parts.append(_decode_full(full))
                full = []
            packs.append(raw)
            continue
        if packs:
            parts.append(packed.decode_many(packs))
            packs = []
        n = len(raw)
        if n == _FULL_NARROW_BYTES or n == _FULL_BYTES:
            if full and n != full_len:      # keep id order: a layout's run at a time
                parts.append(_decode_full(full))
                full = []
            full.append(raw)
            full_len = n
            continue
        if full:                # keep id order: the full blocks before this one first
            parts.append(_decode_full(full))
            full = []
        parts.append(decode(raw))
    if full:
        parts.append(_decode_full(full))
    if packs:
        parts.append(packed.decode_many(packs))
    if not parts:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.float16), np.zeros(
            0, dtype=np.uint32)
    if len(parts) == 1:
        return parts[0]
    return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
            np.concatenate([p[2] for p in parts]))


_FULL_BYTES = 4 + 14 * BLOCK
_FULL_NARROW_BYTES = 4 + 8 * BLOCK      # no wide block has this length, nor narrow _FULL_BYTES
_FULL = np.dtype([("count", "<u4"), ("ids", "<u8", (BLOCK,)), ("weights", "<f2", (BLOCK,)),
                  ("groups", "<u4", (BLOCK,))])
_FULL_NARROW = np.dtype([("count", "<u4"), ("ids", "<u4", (BLOCK,)),
                         ("weights", "<f2", (BLOCK,)), ("groups", "<u2", (BLOCK,))])


def _decode_full(raws: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """decode() of blocks of BLOCK postings each, all of one layout, at once."""
    if len(raws[0]) == _FULL_NARROW_BYTES:
        rec = np.frombuffer(b"".join(raws), dtype=_FULL_NARROW)
        return (rec["ids"].ravel().astype(np.uint64), rec["weights"].ravel(),
                rec["groups"].ravel().astype(np.uint32))
    rec = np.frombuffer(b"".join(raws), dtype=_FULL)
    return rec["ids"].ravel(), rec["weights"].ravel(), rec["groups"].ravel()


def _append(aux: Any, prefix: bytes, ids: list[int], ops: dict[int, Op],
            pack: bool = True) -> int | None:
    """The common case of `apply`: only new postings, all after the list's last one (new
    documents get the highest ids). Tops up the last block and appends full blocks, with
    one read and numpy, no per-posting Python work. None when the case does not apply."""
    for last, raw in aux.scan(prefix, reverse=True):     # the list's last block
        c = count(raw)
        if ids[0] <= last_id(raw):
            return None
        if c + len(ids) <= BLOCK:           # a small write: splice the bytes, no numpy
            aux.put(last, _spliced(raw, c, ids, ops))
            return len(ids)
        b_ids, b_w, b_g = decode(raw)
        break
    else:
        last = None
        if len(ids) <= BLOCK:
            aux.put(prefix + _U64.pack(ids[0]), _spliced(b"\0\0\0\0", 0, ids, ops))
            return len(ids)
    new_ids, new_w, new_g = _arrays(ids, ops)
    if last is not None and len(b_ids) < BLOCK:
        new_ids = np.concatenate([b_ids.astype(np.uint64), new_ids])
        new_w = np.concatenate([b_w.astype(np.float32), new_w])
        new_g = np.concatenate([b_g.astype(np.uint32), new_g])
    _put_blocks(aux, prefix, new_ids, new_w, new_g, pack)   # (the first key may be `last`)
    return len(ids)


def _arrays(ids: list[int], ops: dict[int, Op]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The postings `ids` (sorted, all set by `ops`) as id, weight and group columns."""
    vals = _set(ids, ops)
    return (np.asarray(ids, dtype=np.uint64),
            np.fromiter((v[0] for v in vals), dtype=np.float32, count=len(vals)),
            np.fromiter((v[1] for v in vals), dtype=np.uint32, count=len(vals)))


def _put_blocks(aux: Any, prefix: bytes, ids: np.ndarray, weights: np.ndarray,
                groups: np.ndarray, pack: bool = True) -> None:
    """Write sorted postings as blocks of BLOCK, each keyed by its first id: packed when
    `pack` and the ids and groups fit (module doc), else as `encode` chooses per block."""
    if pack and len(ids) and int(ids[-1]) < _ID32 and int(groups.max()) < _GROUP16:
        starts = np.arange(0, len(ids), BLOCK)
        runs = np.zeros(len(starts), dtype=np.int64)       # (one list)
        for i, value in zip(starts.tolist(),
                            packed.encode_many(ids, weights, groups, starts, runs)):
            aux.put(prefix + _U64.pack(int(ids[i])), value)
        return
    for i in range(0, len(ids), BLOCK):
        aux.put(prefix + _U64.pack(int(ids[i])),
                encode(ids[i:i + BLOCK], weights[i:i + BLOCK], groups[i:i + BLOCK]))


def _set(ids: list[int], ops: dict[int, Op]) -> list[tuple[float, int]]:
    """The (weight, group) of postings the caller knows `ops` sets (none is a delete)."""
    return [ops[n] for n in ids]  # type: ignore[misc]  # the callers' precondition


_LE64 = struct.Struct("<Q")
_LE32 = struct.Struct("<I")
_LE16 = struct.Struct("<H")
_F32 = struct.Struct("<f")


def _spliced(raw: bytes, c: int, ids: list[int], ops: dict[int, Op]) -> bytes:
    """Block `raw` (of `c` postings) with `ids` appended — byte-identical to `encode` of
    the concatenated arrays (weights rounded to float32 first, then to float16, as numpy
    does there). The bytes are spliced when the result is narrow and `raw` is narrow or
    empty (every append but the first to a block of the wide layout)."""
    k = len(ids)
    vals = _set(ids, ops)
    narrow = ids[-1] < _ID32 and max(v[1] for v in vals) < _GROUP16
    if narrow and c and raw[0] >= packed.TAG:
        # (W2's fold into a bulk load's packed last block: made narrow, then spliced —
        # the same bytes as the arrays' path below, with fewer numpy steps)
        raw = encode(*decode(raw))
    if not narrow or (c and not _narrow(raw)):
        b_ids, b_w, b_g = decode(raw) if c else (np.zeros(0, np.uint64),) * 3
        new_ids, new_w, new_g = _arrays(ids, ops)
        return encode(np.concatenate([b_ids.astype(np.uint64), new_ids]),
                      np.concatenate([b_w.astype(np.float32), new_w]),
                      np.concatenate([b_g.astype(np.uint32), new_g]))
    f32 = [_F32.unpack(_F32.pack(v[0]))[0] for v in vals]
    return b"".join((_COUNT.pack((c + k) | NARROW), raw[4:4 + 4 * c],
                     struct.pack(f"<{k}I", *ids),
                     raw[4 + 4 * c:4 + 6 * c], struct.pack(f"<{k}e", *f32),
                     raw[4 + 6 * c:4 + 8 * c], struct.pack(f"<{k}H", *(v[1] for v in vals))))


def create_columns(aux: Any, prefix: bytes, ids: np.ndarray, weights: np.ndarray,
                   groups: np.ndarray, pack: bool = True) -> int:
    """`create` of postings given as columns (ids ascending, uint64; weights float32;
    groups uint32): the same blocks, byte for byte, with no Python work per posting (a
    bulk load's new documents, indexed column-wise: `lexical._Writer.add_new`)."""
    _put_blocks(aux, prefix, ids, weights, groups, pack)
    return len(ids)


class Columns:
    """The postings of many terms' new lists as three columns (ids uint64, weights
    float32, groups uint32), each term's a run of them with ascending ids (`starts`: the
    runs' first positions, ascending from 0, when the caller knows them): `create` writes
    a run's blocks, packed for all runs at once (`packed.encode_many`) — the same bytes as
    `create_columns` of the run, without numpy work per term (a bulk load's terms are
    mostly rare: names, numbers, words of one description)."""

    __slots__ = ("ids", "weights", "groups", "narrow", "firsts", "_ib", "_wb", "_gb",
                 "starts", "_packed", "pack")

    def __init__(self, ids: np.ndarray, weights: np.ndarray, groups: np.ndarray,
                 starts: np.ndarray | None = None, pack: bool = True) -> None:
        self.ids, self.weights, self.groups = ids, weights, groups
        self.starts, self.pack = starts, pack
        self._packed: tuple[dict[int, tuple[int, int]], list[bytes]] | None = None
        # Every block narrow when all ids and groups fit (else `encode` chooses per block).
        self.narrow = not len(ids) or (int(ids.max()) < _ID32 and int(groups.max()) < _GROUP16)
        if self.narrow:
            self._ib = ids.astype("<u4").tobytes()
            self._wb = weights.astype("<f2").tobytes()
            self._gb = groups.astype("<u2").tobytes()
        self.firsts = ids.tolist()

    def create(self, aux: Any, prefix: bytes, start: int, end: int) -> int:
        """`create_columns` of the run [start, end): returns its length."""
        if not self.narrow or not self.pack:
            return self._create_narrow(aux, prefix, start, end)
        if self.starts is None:
            return create_columns(aux, prefix, self.ids[start:end],
                                  self.weights[start:end], self.groups[start:end])
        if self._packed is None:
            self._packed = self._encode()
        runs, values = self._packed
        got = runs.get(start)
        if got is None or got[1] != end:     # (not a whole run: `append`'s rest)
            return create_columns(aux, prefix, self.ids[start:end],
                                  self.weights[start:end], self.groups[start:end])
        firsts = self.firsts
        at = got[0]
        for i in range(start, end, BLOCK):
            aux.put(prefix + _U64.pack(firsts[i]), values[at])
            at += 1
        return end - start

    def _create_narrow(self, aux: Any, prefix: bytes, start: int, end: int) -> int:
        """`create_columns` of the run [start, end) without packing: narrow blocks sliced
        from the columns' bytes (when the ids and groups fit, else as `encode` chooses)."""
        if not self.narrow:
            return create_columns(aux, prefix, self.ids[start:end], self.weights[start:end],
                                  self.groups[start:end], False)
        ib, wb, gb, firsts = self._ib, self._wb, self._gb, self.firsts
        for i in range(start, end, BLOCK):
            j = min(i + BLOCK, end)
            aux.put(prefix + _U64.pack(firsts[i]),
                    b"".join((_COUNT.pack((j - i) | NARROW), ib[4 * i:4 * j],
                              wb[2 * i:2 * j], gb[2 * i:2 * j])))
        return end - start

    def _encode(self) -> tuple[dict[int, tuple[int, int]], list[bytes]]:
        """The packed blocks of every run, and per run start (its first block's index
        among them, its end)."""
        assert self.starts is not None
        starts = np.asarray(self.starts, dtype=np.int64)
        ends = np.append(starts[1:], len(self.ids))
        nblocks = (ends - starts + BLOCK - 1) // BLOCK
        first_block = np.cumsum(nblocks) - nblocks
        within = np.arange(int(nblocks.sum())) - np.repeat(first_block, nblocks)
        blocks = np.repeat(starts, nblocks) + within * BLOCK
        values = packed.encode_many(self.ids, self.weights, self.groups, blocks,
                                    np.repeat(np.arange(len(starts)), nblocks))
        runs = dict(zip(starts.tolist(), zip(first_block.tolist(), ends.tolist())))
        return runs, values


    def append(self, aux: Any, prefix: bytes, start: int, end: int) -> int | None:
        """`append_columns` of the run [start, end), the same bytes: a narrow last block
        is topped up by splicing its bytes with the run's (no decode, no numpy work per
        term: a command's postings top up the last block of thousands of lists)."""
        if not self.narrow:
            return append_columns(aux, prefix, self.ids[start:end],
                                  self.weights[start:end], self.groups[start:end], self.pack)
        for key, raw in aux.scan(prefix, reverse=True):     # the list's last block
            if self.firsts[start] <= last_id(raw):
                return None
            c = count(raw)
            if c >= BLOCK:
                break
            if raw[0] >= packed.TAG:
                # A packed last block the run does not fill: narrow, for later splices
                # (the module doc); a run that fills it: packed blocks.
                if c + end - start >= BLOCK:
                    return append_columns(aux, prefix, self.ids[start:end],
                                          self.weights[start:end], self.groups[start:end],
                                          self.pack)
                raw = encode(*decode(raw))
            h = _COUNT.unpack_from(raw)[0]
            if not h & NARROW:
                return append_columns(aux, prefix, self.ids[start:end],
                                      self.weights[start:end], self.groups[start:end],
                                      self.pack)
            j = min(end, start + BLOCK - c)
            ib, wb, gb = self._ib, self._wb, self._gb
            aux.put(key, b"".join((_COUNT.pack((c + j - start) | NARROW),
                                   raw[4:4 + 4 * c], ib[4 * start:4 * j],
                                   raw[4 + 4 * c:4 + 6 * c], wb[2 * start:2 * j],
                                   raw[4 + 6 * c:4 + 8 * c], gb[2 * start:2 * j])))
            if j < end:
                self.create(aux, prefix, j, end)
            return end - start
        return self.create(aux, prefix, start, end)


def append_columns(aux: Any, prefix: bytes, ids: np.ndarray, weights: np.ndarray,
                   groups: np.ndarray, pack: bool = True) -> int | None:
    """`_append` of postings given as columns (as `create_columns`): tops up the list's
    last block and appends full blocks — the same bytes as `apply` writes for them. None
    when some id is not after the list's last one (the caller then takes `apply`)."""
    added = len(ids)
    for last, raw in aux.scan(prefix, reverse=True):     # the list's last block
        if int(ids[0]) <= last_id(raw):
            return None
        if count(raw) < BLOCK:
            b_ids, b_w, b_g = decode(raw)
            ids = np.concatenate([b_ids.astype(np.uint64), ids])
            weights = np.concatenate([b_w.astype(np.float32), weights])
            groups = np.concatenate([b_g.astype(np.uint32), groups])
        break
    _put_blocks(aux, prefix, ids, weights, groups, pack)   # (the first key may be `last`)
    return added


def create(aux: Any, prefix: bytes, ops: dict[int, Op], pack: bool = True) -> int:
    """`apply` for a list known to be empty (all ops set postings): its blocks written
    directly. Returns the list's length."""
    ids = sorted(ops)
    if len(ids) <= BLOCK:
        aux.put(prefix + _U64.pack(ids[0]), _spliced(b"\0\0\0\0", 0, ids, ops))
        return len(ids)
    _put_blocks(aux, prefix, *_arrays(ids, ops), pack)
    return len(ids)
