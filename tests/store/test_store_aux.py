"""Aux tables: sorted bytes -> bytes maps inside the graph transaction (protocol AuxTable)."""
from __future__ import annotations

import pytest

from nexus.errors import ErrorCode, KipError
from nexus.store import AUX_TABLES, AuxTable

KEYS = [b"a", b"a\x00", b"a\xff", b"ab", b"abc", b"b", b"b\x01", b"\xff\xff"]


@pytest.fixture
def filled(store):
    with store.write() as w:
        lex = w.aux("lex")
        for k in KEYS:
            lex.put(k, k.upper() + b"!")
    return store


def test_every_declared_table_is_available_and_separate(store):
    with store.write() as w:
        for i, name in enumerate(AUX_TABLES):
            t = w.aux(name)
            assert isinstance(t, AuxTable)
            t.put(b"k", bytes([i]))
    with store.read() as r:
        for i, name in enumerate(AUX_TABLES):
            assert r.aux(name).get(b"k") == bytes([i])
            assert r.aux(name).count() == 1


def test_unknown_table(store):
    with store.read() as r:
        with pytest.raises(KipError) as e:
            r.aux("nope")
    assert e.value.code is ErrorCode.KIP_4003


def test_get_put_overwrite_delete(filled):
    with filled.read() as r:
        t = r.aux("lex")
        assert t.get(b"ab") == b"AB!" and t.get(b"zz") is None
    with filled.write() as w:
        t = w.aux("lex")
        t.put(b"ab", b"new")
        assert t.get(b"ab") == b"new"
        assert t.delete(b"abc") is True
        assert t.delete(b"abc") is False
        assert t.get(b"abc") is None
    with filled.read() as r:
        t = r.aux("lex")
        assert t.get(b"ab") == b"new" and t.get(b"abc") is None


def test_scan_forward_and_reverse(filled):
    a_keys = [b"a", b"a\x00", b"ab", b"abc", b"a\xff"]       # byte order: 0xff sorts last
    with filled.read() as r:
        t = r.aux("lex")
        assert [k for k, _ in t.scan()] == sorted(KEYS)
        assert [k for k, _ in t.scan(reverse=True)] == sorted(KEYS, reverse=True)
        assert list(t.scan(b"ab")) == [(b"ab", b"AB!"), (b"abc", b"ABC!")]
        assert [k for k, _ in t.scan(b"a")] == a_keys
        assert [k for k, _ in t.scan(b"a", reverse=True)] == a_keys[::-1]
        assert [k for k, _ in t.scan(b"\xff")] == [b"\xff\xff"]
        assert [k for k, _ in t.scan(b"\xff", reverse=True)] == [b"\xff\xff"]
        assert list(t.scan(b"c")) == [] and list(t.scan(b"c", reverse=True)) == []


def test_scan_with_start(filled):
    with filled.read() as r:
        t = r.aux("lex")
        # forward: keys >= start
        assert [k for k, _ in t.scan(b"a", start=b"a\xff")] == [b"a\xff"]
        assert [k for k, _ in t.scan(b"a", start=b"aa")] == [b"ab", b"abc", b"a\xff"]
        assert [k for k, _ in t.scan(start=b"b")] == [b"b", b"b\x01", b"\xff\xff"]
        assert [k for k, _ in t.scan(b"a", start=b"")] == [b"a", b"a\x00", b"ab", b"abc",
                                                           b"a\xff"]
        assert list(t.scan(b"a", start=b"b")) == []
        # reverse: keys <= start
        assert [k for k, _ in t.scan(b"a", reverse=True, start=b"ab")] == [
            b"ab", b"a\x00", b"a"]
        assert [k for k, _ in t.scan(b"a", reverse=True, start=b"aa")] == [b"a\x00", b"a"]
        assert [k for k, _ in t.scan(reverse=True, start=b"b")] == [
            b"b", b"a\xff", b"abc", b"ab", b"a\x00", b"a"]
        assert [k for k, _ in t.scan(b"a", reverse=True, start=b"zz")] == [
            b"a\xff", b"abc", b"ab", b"a\x00", b"a"]
        assert list(t.scan(b"b", reverse=True, start=b"a")) == []


def test_count(filled):
    with filled.read() as r:
        t = r.aux("lex")
        assert t.count() == len(KEYS)
        assert t.count(b"a") == 5 and t.count(b"ab") == 2 and t.count(b"q") == 0
    with filled.write() as w:
        t = w.aux("lex")
        t.delete(b"a")
        t.put(b"aa", b"")
        t.put(b"zzz", b"")
        assert t.count() == len(KEYS) + 1 and t.count(b"a") == 5


def test_write_txn_scans_see_pending_changes(filled):
    with filled.write() as w:
        t = w.aux("lex")
        t.delete(b"ab")
        t.put(b"aa", b"AA")
        assert [k for k, _ in t.scan(b"a")] == [b"a", b"a\x00", b"aa", b"abc", b"a\xff"]
        assert [k for k, _ in t.scan(b"a", reverse=True)] == [
            b"a\xff", b"abc", b"aa", b"a\x00", b"a"]
        w.abort()
    with filled.read() as r:
        assert r.aux("lex").get(b"aa") is None and r.aux("lex").get(b"ab") == b"AB!"


def test_read_txn_cannot_write(filled):
    with filled.read() as r:
        with pytest.raises(KipError) as e:
            r.aux("lex").put(b"x", b"y")
        assert e.value.code is ErrorCode.KIP_4003
        with pytest.raises(KipError):
            r.aux("lex").delete(b"a")


@pytest.mark.parametrize("key", [b"", b"k" * 512])
def test_bad_keys(store, key):
    with pytest.raises(KipError) as e:
        with store.write() as w:
            w.aux("engine").put(key, b"v")
    assert e.value.code is ErrorCode.KIP_4003


def test_largest_key_and_large_value(store):
    key, value = b"k" * 511, b"v" * 1_000_000
    with store.write() as w:
        w.aux("engine").put(key, value)
    with store.read() as r:
        assert r.aux("engine").get(key) == value


def test_put_many_is_the_same_as_one_put_per_pair(filled):
    # Pairs before, between and after the existing keys, unsorted, one repeated (last wins),
    # one overwriting an existing key.
    pairs = [(b"zz", b"1"), (b"0", b"2"), (b"ab", b"new"), (b"aa", b"3"), (b"zz", b"4")]
    with filled.write() as w:
        w.aux_put_many("lex", pairs)
        lex = w.aux("lex")
        assert lex.get(b"zz") == b"4" and lex.get(b"ab") == b"new"   # seen in the txn
    with filled.read() as r:
        got = dict(r.aux("lex").scan())
    expected = {k: k.upper() + b"!" for k in KEYS}
    expected.update(dict(pairs))
    assert got == expected


def test_put_many_refuses_keys_an_aux_table_cannot_hold(store):
    with store.write() as w:
        w.aux("lex").put(b"keep", b"1")
    for bad in ([(b"", b"x")], [(b"k", b"x"), (b"x" * 600, b"y")]):
        with pytest.raises(KipError) as e:
            with store.write() as w:
                w.aux_put_many("lex", bad)
        assert e.value.code is ErrorCode.KIP_4003
    with store.read() as r:
        assert dict(r.aux("lex").scan()) == {b"keep": b"1"}


def _last(t, prefix):
    return next(iter(t.scan(prefix, reverse=True)), None)


def test_prefetch_is_a_hint_that_changes_no_answer(filled):
    """AuxTable.prefetch: `get` and the reverse scans it was told about answer as without
    it, in a read, and in a write whose own puts and deletes come after the prefetch."""
    prefixes = [b"a", b"ab", b"b", b"c", b"\xff", b""]
    with filled.read() as r:
        t = r.aux("lex")
        plain = ([t.get(k) for k in KEYS + [b"zz"]],
                 [list(t.scan(p, reverse=True)) for p in prefixes])
    with filled.read() as r:
        t = r.aux("lex")
        t.prefetch(KEYS + [b"zz"], prefixes)
        assert ([t.get(k) for k in KEYS + [b"zz"]],
                [list(t.scan(p, reverse=True)) for p in prefixes]) == plain
    with filled.write() as w:
        t = w.aux("lex")
        t.put(b"b\x00", b"pending")                 # written before the prefetch
        t.prefetch([b"ab", b"b\x00", b"zz"], prefixes)
        assert t.get(b"b\x00") == b"pending" and t.get(b"zz") is None
        assert _last(t, b"b") == (b"b\x01", b"B\x01!")
        t.put(b"abz", b"after")                     # the new last pair under b"ab"
        assert _last(t, b"ab") == (b"abz", b"after")
        assert _last(t, b"a") == (b"a\xff", b"A\xff!")
        t.put(b"aa", b"early")                      # before the last pair: no change
        assert _last(t, b"a") == (b"a\xff", b"A\xff!")
        assert t.delete(b"abz") is True             # the last pair goes: the one before
        assert _last(t, b"ab") == (b"abc", b"ABC!")
        assert t.delete(b"a\xff") is True
        assert list(t.scan(b"a", reverse=True))[:2] == [(b"abc", b"ABC!"), (b"ab", b"AB!")]
        assert t.delete(b"b\x01") and t.delete(b"b\x00") and t.delete(b"b")
        assert _last(t, b"b") is None
        t.put(b"c1", b"new")
        assert _last(t, b"c") == (b"c1", b"new")
        assert t.get(b"zz") is None
    with filled.read() as r:
        t = r.aux("lex")
        assert _last(t, b"a") == (b"abc", b"ABC!") and _last(t, b"b") is None
        assert _last(t, b"ab") == (b"abc", b"ABC!")
        assert t.get(b"aa") == b"early" and t.get(b"c1") == b"new"
