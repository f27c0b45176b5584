"""The two layouts of a posting block (postings.py): blocks are written narrow (u32 ids, u16
groups) when they fit, else wide; both read back as the same postings, so keyword SEARCH
scores the same; blocks of a database written before the narrow layout (all wide) are read
as before, updated in place, and the database checks clean."""
from __future__ import annotations

import random

import numpy as np

from nexus.search import postings

from .test_lexical_scoring import _Aux


def wide(ids, weights, groups) -> bytes:
    """A block as the code before the narrow layout wrote it."""
    return (postings._COUNT.pack(len(ids)) + np.asarray(ids, dtype="<u8").tobytes()
            + np.asarray(weights, dtype=np.float32).astype("<f2").tobytes()
            + np.asarray(groups, dtype="<u4").tobytes())


def test_narrow_when_it_fits_wide_otherwise_and_both_decode_alike():
    ids = np.asarray([3, 70_000, 2**31 + 5], dtype=np.uint64)
    w = np.asarray([0.5, 1.25, 2.0], dtype=np.float32)
    for groups, narrow in (([1, 2, 65_535], True), ([1, 2, 65_536], False)):
        g = np.asarray(groups, dtype=np.uint32)
        raw = postings.encode(ids, w, g)
        assert bool(postings._COUNT.unpack_from(raw)[0] & postings.NARROW) == narrow
        assert len(raw) == 4 + (8 if narrow else 14) * 3
        d_ids, d_w, d_g = postings.decode(raw)
        assert d_ids.dtype == np.uint64 and d_g.dtype == np.uint32
        assert d_ids.tolist() == ids.tolist() and d_g.tolist() == groups
        assert d_w.tolist() == w.astype(np.float16).tolist()
        assert postings.decode(wide(ids, w, g))[2].tolist() == groups
    big = postings.encode(np.asarray([2**32], dtype=np.uint64), w[:1], np.ones(1, np.uint32))
    assert not postings._COUNT.unpack_from(big)[0] & postings.NARROW


def test_a_list_of_old_wide_blocks_reads_and_updates_like_a_new_one():
    r = random.Random(7)
    ids = sorted(r.sample(range(1, 100_000), 1000))
    stored = {n: (float(np.float16(r.random() * 2)), n % 11) for n in ids}
    old, new = _Aux(), _Aux()
    for i in range(0, len(ids), postings.BLOCK):           # the old layout, full blocks too
        chunk = ids[i:i + postings.BLOCK]
        old.put(b"t" + postings._U64.pack(chunk[0]),
                wide(chunk, [stored[n][0] for n in chunk], [stored[n][1] for n in chunk]))
    postings.create(new, b"t", dict(stored))
    assert all(raw[0] >= postings.packed.TAG for raw in new.d.values())     # (written packed)

    def same() -> None:
        a, b = postings.read(old, b"t", 10**9), postings.read(new, b"t", 10**9)
        assert a[3] and b[3]
        for x, y in zip(a[:3], b[:3]):
            assert x.dtype == y.dtype and x.tolist() == y.tolist()
        assert a[0].tolist() == sorted(stored)

    same()
    for ops in ({ids[5]: None, ids[700]: None},            # deletes inside blocks
                {ids[3] + 1: (0.5, 3)} if ids[4] > ids[3] + 1 else {},
                {200_000: (0.25, 70_000)},                  # an append with a wide group
                {200_001: (0.75, 1), 200_002: (1.0, 2)}):   # appends after it
        if not ops:
            continue
        for aux in (old, new):
            postings.apply(aux, b"t", dict(ops))
        for n, op in ops.items():
            if op is None:
                stored.pop(n)
            else:
                stored[n] = op
        same()
    # a mix of narrow and wide full blocks in one list reads in id order
    layouts = {len(raw) for raw in old.d.values()}
    assert postings._FULL_BYTES in layouts and postings._FULL_NARROW_BYTES in layouts


SCHEMA = """
UPSERT {
  CONCEPT ?d { {type: "$ConceptType", name: "Drug"} }
  CONCEPT ?p { {type: "$PropositionType", name: "treats"} }
}
"""


def test_a_database_with_wide_blocks_searches_checks_and_writes(disk_nexus, kip):
    nx = disk_nexus()
    kip(nx, SCHEMA)
    names = [f"Drug{i} aspirin" if i % 3 else f"Drug{i} ibuprofen" for i in range(400)]
    kip(nx, "UPSERT { " + " ".join(
        f'CONCEPT ?c{i} {{ {{type: "Drug", name: "{name}"}} }}' for i, name in enumerate(names))
        + " }")
    query = 'SEARCH CONCEPT "aspirin" LIMIT 20'
    before = kip(nx, query)
    with nx.write_session() as session:                    # rewrite every block wide
        aux = session.txn.aux("lex")
        blocks = [(k, v) for k, v in aux.scan(b"t")]
        assert blocks
        for key, raw in blocks:
            aux.put(key, wide(*postings.decode(raw)))
    nx = disk_nexus()
    with nx.store.read() as txn:
        assert not any(postings._COUNT.unpack_from(v)[0] & postings.NARROW
                       for _, v in txn.aux("lex").scan(b"t"))
    assert kip(nx, query) == before
    assert nx.check(deep=True)["ok"] is True
    kip(nx, 'UPSERT { CONCEPT ?x { {type: "Drug", name: "Aspirin extra"} } }')
    assert "Aspirin extra" in [h["name"] for h in kip(nx, 'SEARCH CONCEPT "aspirin" LIMIT 500')]
    assert nx.check(deep=True)["ok"] is True


def test_the_append_splice_is_byte_identical_to_encode_in_both_layouts():
    rng = random.Random(3)
    for _ in range(300):
        c = rng.randint(0, 127)
        k = rng.randint(1, 128 - c)
        ids = sorted(rng.sample(range(1, rng.choice([10**6, 2**33])), c + k))
        w = [rng.random() * 2.2 for _ in ids]
        g = [rng.randrange(rng.choice([300, 2**16, 2**20])) for _ in ids]
        for old_layout in (False, True):
            if not c:
                raw = b"\0\0\0\0"
            elif old_layout:
                raw = wide(ids[:c], w[:c], g[:c])
            else:
                raw = postings.encode(np.asarray(ids[:c], dtype=np.uint64),
                                      np.asarray(w[:c], dtype=np.float32),
                                      np.asarray(g[:c], dtype=np.uint32))
            ops = {n: (a, b) for n, a, b in zip(ids[c:], w[c:], g[c:])}
            want = postings.encode(np.asarray(ids, dtype=np.uint64),
                                   np.asarray(w, dtype=np.float32),
                                   np.asarray(g, dtype=np.uint32))
            assert postings._spliced(raw, c, ids[c:], ops) == want


def test_a_few_deletes_cut_from_a_narrow_block_write_what_the_array_path_writes():
    """`_delete_few` (a MERGE's deleted duplicates: one posting out of many small lists)
    leaves the same keys and bytes as the numpy path, whichever positions go (first, last,
    all, ids the block does not hold), and the postings read back are the others."""
    rng = random.Random(11)
    for _ in range(400):
        c = rng.randint(1, 128)
        ids = sorted(rng.sample(range(1, 10**6), c))
        w = np.asarray([rng.random() * 2.2 for _ in ids], dtype=np.float32)
        g = np.asarray([rng.randrange(300) for _ in ids], dtype=np.uint32)
        raw = postings.encode(np.asarray(ids, dtype=np.uint64), w, g)
        k = rng.randint(1, min(c, postings.FEW_DELETES))
        gone = set(rng.sample(ids, k))
        if rng.random() < 0.3:
            gone.add(rng.randrange(1, 10**6))       # maybe not in the block
        if rng.random() < 0.05:
            gone = set(ids) if c <= postings.FEW_DELETES else gone
        gone_ids = sorted(gone)[:postings.FEW_DELETES]
        prefix = b"tpx\x00"
        key = prefix + postings._U64.pack(ids[0])
        few, arrays = _Aux(), _Aux()
        few.put(key, raw)
        arrays.put(key, raw)
        got = postings._delete_few(few, prefix, key, raw, gone_ids)
        # the array path, as `_delete` took it before the byte cut
        b_ids, b_w, b_g = postings.decode(raw)
        keep = ~np.isin(b_ids, np.asarray(gone_ids, dtype=np.uint64))
        want = int(keep.sum()) - c
        if want:
            arrays.delete(key)
            if keep.any():
                arrays.put(prefix + postings._U64.pack(int(b_ids[keep][0])),
                           postings.encode(b_ids[keep], b_w[keep], b_g[keep]))
        assert got == want
        assert few.d == arrays.d
        left = [n for n in ids if n not in gone_ids]
        assert [n for v in few.d.values() for n in postings.decode(v)[0].tolist()] == left


def _rewritten(raw: bytes | None, ids: list[int], ops: dict) -> list[bytes]:
    """The blocks an update of one block gives, as a dict of every posting makes them
    (the code before `postings._rewrite` worked on the block's arrays)."""
    entries: dict[int, tuple[float, int]] = {}
    if raw is not None:
        b_ids, b_w, b_g = postings.decode(raw)
        entries.update(zip(b_ids.tolist(), zip(b_w.tolist(), b_g.tolist())))
    for n in ids:
        if ops[n] is None:
            entries.pop(n, None)
        else:
            entries[n] = ops[n]
    new_ids = sorted(entries)
    out = []
    for i in range(0, len(new_ids), postings.BLOCK):
        chunk = new_ids[i:i + postings.BLOCK]
        out.append(postings.encode(
            np.asarray(chunk, dtype=np.uint64),
            np.fromiter((entries[n][0] for n in chunk), dtype=np.float32, count=len(chunk)),
            np.fromiter((entries[n][1] for n in chunk), dtype=np.uint32, count=len(chunk))))
    return out


def test_an_update_inside_a_block_writes_the_blocks_a_posting_map_would():
    """Sets (new ids and new weights of held ones) and deletes inside a block, in both
    layouts, splitting it past BLOCK, and sets or deletes alone (spliced into a narrow block): the
    blocks written are byte for byte those of the block's postings updated one by one."""
    r = random.Random(11)
    for trial in range(300):
        held = sorted(r.sample(range(1, 5000), r.randint(0, postings.BLOCK)))
        group_top = 70_000 if trial % 5 == 0 else 50
        raw = None
        if held:
            w = [r.random() * 3 for _ in held]
            g = [r.randrange(group_top) for _ in held]
            raw = (wide(held, w, g) if trial % 3 == 0 else postings.encode(
                np.asarray(held, dtype=np.uint64), np.asarray(w, dtype=np.float32),
                np.asarray(g, dtype=np.uint32)))
        ops: dict = {}
        for n in r.sample(held, min(len(held), r.randint(0, 10))):
            ops[n] = None if r.random() < 0.5 else (r.random() * 3, r.randrange(group_top))
        for n in r.sample(range(1, 5000), r.randint(0 if ops else 1, 40)):
            ops.setdefault(n, None if r.random() < 0.2 else (r.random() * 3, r.randrange(50)))
        if trial % 4 == 1:      # sets only (an updated document's terms): spliced in place
            ops = {n: op or (0.25, 7) for n, op in ops.items()}
        if trial % 4 == 2:      # deletes only (an updated document's old terms): `_delete`
            # a few, one held at least (a block no delete touches is not rewritten)
            ops = {n: None for n in r.sample(held, min(len(held), r.randint(1, 6)))}
            ops.update((n, None) for n in r.sample(range(1, 5000), r.randint(0, 3)))
        ids = sorted(ops)
        key = None if raw is None else b"t" + postings._U64.pack(held[0])
        aux = _Aux()
        if raw is not None:
            aux.put(key, raw)
        delta = postings._rewrite(aux, b"t", key, raw, ids, ops)
        expected = _rewritten(raw, ids, ops)
        assert [v for _, v in sorted(aux.d.items())] == expected
        assert sorted(aux.d) == sorted(b"t" + postings._U64.pack(int(postings.decode(b)[0][0]))
                                       for b in expected)
        assert delta == sum(postings.count(b) for b in expected) - len(held)


def test_columns_append_writes_what_append_columns_writes():
    """`Columns.append` (a command's postings, spliced onto each list's last block) writes
    the blocks `append_columns` (decode, concatenate, encode) writes — the same keys and
    postings, a packed last block the run does not fill made narrow for later splices: lists
    whose last block is narrow, wide, full or absent, appends of one posting to several
    blocks, runs whose ids or groups do not fit the narrow layout; and it declines (None)
    where `append_columns` does (an id not after the list's last)."""
    rng = random.Random(11)
    for _ in range(200):
        base = rng.choice([0, 33_000])     # (ids whose second byte has its top bit set too)
        before = sorted(rng.sample(range(1 + base, 5000 + base),
                                   rng.choice([0, 1, 5, 127, 128, 300])))
        top = (before[-1] if before else 0) + 1
        new = sorted(rng.sample(range(max(1, top - rng.choice([0, 0, 0, 2])),
                                      top + rng.choice([400, 2**33])), rng.randint(1, 260)))
        big_group = rng.random() < 0.2
        lists = []
        for _layout in ("spliced", "arrays"):
            aux = _Aux()
            if before:
                w0 = [rng.random() for _ in before]
                g0 = [n % 9 for n in before]
                if rng.random() < 0.3:      # a list of old wide blocks
                    for i in range(0, len(before), 128):
                        aux.put(b"t" + postings._U64.pack(before[i]),
                                wide(before[i:i + 128], w0[i:i + 128], g0[i:i + 128]))
                else:
                    postings.create(aux, b"t", {n: (w, g) for n, w, g in zip(before, w0, g0)})
            lists.append(aux)
        # (the same starting blocks in both: the random draws above differ per layout)
        lists[1].d = dict(lists[0].d)
        ids = np.asarray(new, dtype=np.uint64)
        weights = np.asarray([rng.random() for _ in new], dtype=np.float32)
        groups = np.asarray([(2**17 if big_group else n % 5) for n in new], dtype=np.uint32)
        pad = rng.randint(0, 3)         # the run inside bigger columns, as `finish` has it
        cols = postings.Columns(np.concatenate([np.zeros(pad, np.uint64), ids]),
                                np.concatenate([np.zeros(pad, np.float32), weights]),
                                np.concatenate([np.zeros(pad, np.uint32), groups]))
        got = cols.append(lists[0], b"t", pad, pad + len(new))
        want = postings.append_columns(lists[1], b"t", ids, weights, groups)
        assert got == want
        assert lists[0].d.keys() == lists[1].d.keys()
        for key, raw in lists[0].d.items():
            for x, y in zip(postings.decode(raw), postings.decode(lists[1].d[key])):
                assert x.dtype == y.dtype and x.tolist() == y.tolist()
