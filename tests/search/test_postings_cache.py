"""Decoded posting lists kept between reads (postings_cache.py): a list read again with the
same blocks is answered from the cache, equal to decoding it; a list changed by any write
(an append, an update of one posting's weight, a delete), cut at another cap, or read from
another store is decoded afresh — never an answer of bytes the reader does not see; the
cache stays within its bound in bytes and hands out read-only arrays."""
from __future__ import annotations

import random

import numpy as np
import pytest

from nexus.search import postings
from nexus.search import postings_cache as pc

from .test_lexical_scoring import _Aux


@pytest.fixture(autouse=True)
def _fresh_cache(monkeypatch):
    monkeypatch.setattr(pc, "CACHE", pc.DecodedLists())
    yield


def _list(aux: _Aux, prefix: bytes, n: int, seed: int) -> dict[int, tuple[float, int]]:
    r = random.Random(seed)
    ids = sorted(r.sample(range(1, 10 * n), n))
    stored = {i: (round(r.random() * 3, 3), r.randrange(5)) for i in ids}
    ids_a = np.asarray(ids, dtype=np.uint64)
    w = np.asarray([stored[i][0] for i in ids], dtype=np.float32)
    g = np.asarray([stored[i][1] for i in ids], dtype=np.uint32)
    postings.create_columns(aux, prefix, ids_a, w, g)       # packed full blocks
    return stored


def _decoded(aux: _Aux, prefix: bytes, cap: int = 10**9):
    """The list as decoding its blocks gives it, without the cache."""
    raws = []
    total = 0
    complete = True
    for _, raw in aux.scan(prefix):
        if total >= cap:
            complete = False
            break
        raws.append(raw)
        total += postings.count(raw)
    return (*postings._decode_blocks(raws), complete)


def _same(got, want) -> None:
    assert got[3] is want[3]
    for x, y in zip(got[:3], want[:3]):
        assert x.dtype == y.dtype
        assert x.view(np.uint8).tobytes() == y.view(np.uint8).tobytes()


def test_a_long_list_read_again_is_served_from_the_cache_equal_to_its_decode():
    aux = _Aux()
    _list(aux, b"tx\0", 3000, 1)
    first = postings.read(aux, b"tx\0", 10**9)
    assert pc.CACHE.misses == 1 and pc.CACHE.hits == 0
    again = postings.read(aux, b"tx\0", 10**9)
    assert pc.CACHE.hits == 1
    assert again[0] is first[0]                     # the same arrays, not decoded again
    _same(again, _decoded(aux, b"tx\0"))
    for a in again[:3]:
        assert not a.flags.writeable                # shared between readers
        with pytest.raises(ValueError):
            a[0] = 0


def test_a_short_list_is_not_kept():
    aux = _Aux()
    _list(aux, b"ty\0", postings.BLOCK * (pc.MIN_BLOCKS - 1), 2)
    postings.read(aux, b"ty\0", 10**9)
    postings.read(aux, b"ty\0", 10**9)
    assert pc.CACHE.hits == pc.CACHE.misses == 0 and pc.CACHE.size == 0


@pytest.mark.parametrize("change", ["append", "update", "delete", "insert"])
def test_a_write_to_the_list_is_seen_at_once(change):
    aux = _Aux()
    stored = _list(aux, b"tz\0", 2000, 3)
    postings.read(aux, b"tz\0", 10**9)
    ids = sorted(stored)
    if change == "append":
        postings.apply(aux, b"tz\0", {ids[-1] + 5: (1.25, 2)})
    elif change == "update":                        # one weight, same length: same block size
        n = ids[700]
        postings.apply(aux, b"tz\0", {n: (stored[n][0] + 0.5, stored[n][1])})
    elif change == "delete":
        postings.apply(aux, b"tz\0", {ids[900]: None})
    else:
        gap = next(i + 1 for i, j in zip(ids, ids[1:]) if j > i + 1)
        postings.apply(aux, b"tz\0", {gap: (0.75, 1)})
    got = postings.read(aux, b"tz\0", 10**9)
    want = _decoded(aux, b"tz\0")
    _same(got, want)
    assert pc.CACHE.hits == 0
    if change == "update":
        at = ids.index(ids[700])
        assert float(got[1][at]) == float(np.float16(stored[ids[700]][0] + 0.5))


def test_a_list_cut_at_another_cap_is_cut_there():
    aux = _Aux()
    _list(aux, b"tc\0", 3000, 4)
    whole = postings.read(aux, b"tc\0", 10**9)
    cut = postings.read(aux, b"tc\0", 1500)
    assert cut[3] is False and len(cut[0]) < len(whole[0])
    _same(cut, _decoded(aux, b"tc\0", 1500))
    _same(postings.read(aux, b"tc\0", 10**9), _decoded(aux, b"tc\0"))


def test_the_same_prefix_in_another_store_reads_that_store():
    a, b = _Aux(), _Aux()
    _list(a, b"ts\0", 2000, 5)
    _list(b, b"ts\0", 2000, 6)
    for aux in (a, b, a, b):
        _same(postings.read(aux, b"ts\0", 10**9), _decoded(aux, b"ts\0"))


def test_the_cache_stays_within_its_bound_least_recently_used_first():
    aux = _Aux()
    for i in range(6):
        _list(aux, b"t%d\0" % i, 2000, 10 + i)
    one = pc.CACHE.put(b"probe", b"x", _decoded(aux, b"t0\0"))
    cost = len(b"x") + sum(x.nbytes for x in one[:3])
    pc.CACHE.clear()
    pc.CACHE.max_bytes = int(3.5 * (cost + 20_000))     # room for three lists or so
    for i in range(6):
        postings.read(aux, b"t%d\0" % i, 10**9)
        assert pc.CACHE.size <= pc.CACHE.max_bytes
    assert pc.CACHE.misses == 6
    postings.read(aux, b"t5\0", 10**9)              # the last read: still there
    assert pc.CACHE.hits == 1
    postings.read(aux, b"t0\0", 10**9)              # the first: evicted
    assert pc.CACHE.misses == 7
    pc.CACHE.max_bytes = 100                        # a list bigger than the bound: not kept
    pc.CACHE.clear()
    got = postings.read(aux, b"t1\0", 10**9)
    assert pc.CACHE.size == 0
    _same(got, _decoded(aux, b"t1\0"))


def test_the_same_blocks_as_a_cut_list_and_as_a_whole_one_say_so():
    a = _Aux()
    _list(a, b"tw\0", 3000, 7)
    cut = postings.read(a, b"tw\0", 1500)
    assert cut[3] is False
    b = _Aux()                                      # the same blocks, and no more
    for key, raw in a.scan(b"tw\0"):
        if key <= b"tw\0" + postings._U64.pack(int(cut[0][-1])):
            b.put(key, raw)
    whole = postings.read(b, b"tw\0", 10**9)
    assert whole[3] is True and whole[0].tolist() == cut[0].tolist()
