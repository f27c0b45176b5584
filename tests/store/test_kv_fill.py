"""Sorted inserts between keys of a table fill their pages (`kv.put_filled`): the same
table contents and added counts as LMDB's putmulti, and a run inserted between two keys
takes about the pages an append would (LMDB alone leaves them about half full)."""
from __future__ import annotations

import random
import struct

import lmdb
import pytest

from nexus.store import kv


def key(prefix: bytes, i: int) -> bytes:
    return prefix + struct.pack(">Q", i)


@pytest.fixture
def env(tmp_path):
    e = lmdb.open(str(tmp_path), max_dbs=8, map_size=1 << 30)
    yield e
    e.close()


def table(env, name: bytes):
    db = env.open_db(name)
    with env.begin(write=True) as txn:
        txn.cursor(db).putmulti([(key(b"a", i), b"x" * 5) for i in range(20_000)] +
                                [(key(b"c", i), b"z" * 5) for i in range(20_000)],
                                append=True)
    return db


def leaf_pages(env, db) -> int:
    with env.begin() as txn:
        return int(txn.stat(db)["leaf_pages"])


def test_a_run_between_keys_fills_its_pages_as_an_append(env):
    runs = [sorted((key(b"b" + p + b"\x00", i), b"y" * 5) for p in (b"knows", b"treats")
                   for i in range(c * 20_000, (c + 1) * 20_000)) for c in range(3)]
    pages = {}
    for name, put in ((b"plain", lambda cur, items: cur.putmulti(items, overwrite=False)[1]),
                      (b"filled", lambda cur, items: kv.put_filled(cur, items, False))):
        db = table(env, name)
        start = leaf_pages(env, db)
        with env.begin(write=True, db=db) as txn:
            for items in runs:
                assert put(txn.cursor(db), items) == len(items)
        pages[name] = leaf_pages(env, db) - start
    fresh = env.open_db(b"fresh")
    with env.begin(write=True) as txn:
        txn.cursor(fresh).putmulti(sorted(kv for items in runs for kv in items), append=True)
    appended = leaf_pages(env, fresh)
    assert pages[b"filled"] <= appended * 1.1 < pages[b"plain"] * 0.7
    with env.begin() as txn:
        assert list(txn.cursor(env.open_db(b"plain"))) == \
            list(txn.cursor(env.open_db(b"filled")))


@pytest.mark.parametrize("overwrite", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_the_same_contents_and_counts_as_putmulti(env, overwrite, seed):
    rng = random.Random(seed)
    # runs, single keys, keys already in the table, and keys past its last one
    items = {}
    for _ in range(rng.randrange(1, 6)):
        prefix = rng.choice([b"a", b"b", b"c", b"d", b""])
        lo = rng.randrange(0, 25_000)
        for i in range(lo, lo + rng.choice([1, 5, 40, 3000])):
            items[key(prefix, i)] = bytes([rng.randrange(256)]) * rng.randrange(1, 3000)
    for i in rng.sample(range(30_000), 300):
        items[key(b"a", i)] = b"new"
    pairs = sorted(items.items())
    got = []
    for name, put in ((b"p" + bytes([seed]), lambda cur: cur.putmulti(
                          pairs, overwrite=overwrite)[1]),
                      (b"f" + bytes([seed]), lambda cur: kv.put_filled(cur, iter(pairs),
                                                                       overwrite))):
        db = table(env, name)
        with env.begin(write=True) as txn:
            added = put(txn.cursor(db))
        with env.begin() as txn:
            got.append((added, list(txn.cursor(db))))
    assert got[0] == got[1]


@pytest.mark.parametrize("tail", [0, 1, 7, 300])
def test_a_run_before_the_tables_last_few_keys(env, tail):
    # The keys taken out of the run's way reach the end of the table (fewer than 8 KB).
    items = [(key(b"b", i), b"y" * 7) for i in range(500)]
    got = []
    for name, put in ((b"p%d" % tail, lambda cur: cur.putmulti(items, overwrite=False)[1]),
                      (b"f%d" % tail, lambda cur: kv.put_filled(cur, items, False))):
        db = env.open_db(name)
        with env.begin(write=True) as txn:
            txn.cursor(db).putmulti([(key(b"a", i), b"x") for i in range(3000)] +
                                    [(key(b"c", i), b"z" * i) for i in range(tail)],
                                    append=True)
        with env.begin(write=True) as txn:
            added = put(txn.cursor(db))
        with env.begin() as txn:
            got.append((added, list(txn.cursor(db))))
    assert got[0] == got[1] and got[0][0] == len(items)
