"""What only the on-disk store has: persistence across reopen, durability settings, and
refusing (with a KipError) what is not a nexus store or cannot be written."""
from __future__ import annotations

import os

import lmdb
import pytest

from nexus.errors import ErrorCode, KipError
from nexus.store import ConceptHead, LinkHead, LmdbGraphStore, MemoryGraphStore, open_store


@pytest.fixture
def kind():
    return "lmdb"


def test_open_store_picks_the_implementation(tmp_path):
    mem = open_store(None)
    assert isinstance(mem, MemoryGraphStore) and mem.path is None
    disk = open_store(str(tmp_path / "s"), durable=False)
    try:
        assert isinstance(disk, LmdbGraphStore)
        assert disk.path == str(tmp_path / "s")
        assert os.path.exists(tmp_path / "s" / "data.mdb")
    finally:
        disk.close()
        mem.close()


def test_everything_persists_across_reopen(graph, make_store, snapshot_of):
    g = graph
    with g.store.write() as w:
        w.aux("audit").put(b"\x00\x01", b"entry")
        w.delete(g.l4)
    before = snapshot_of(g.store)
    again = make_store(reopen=True)
    assert snapshot_of(again) == before
    with again.read() as r:
        assert r.symbol_id("Drug") == g.drug and r.symbol_text(g.treats) == "treats"
        assert r.head(g.aspirin) == ConceptHead(g.aspirin, g.drug, "Aspirin")
        assert r.head(g.l1) == LinkHead(g.l1, g.aspirin, g.treats, g.headache)
        assert r.head(g.l4) is None
        assert r.attributes(g.l1) == {"confidence": 0.9}
        assert r.aux("audit").get(b"\x00\x01") == b"entry"


def test_id_counter_survives_reopen_without_reuse(make_store):
    s = make_store()
    with s.write() as w:
        t = w.intern("T")
        ids = [w.new_id() for _ in range(3)]
        for n in ids:
            w.create_concept(n, t, str(n), {}, {})
    with s.write() as w:
        w.delete(ids[-1])
    s = make_store(reopen=True)
    with s.write() as w:
        assert w.new_id() == ids[-1] + 1
        assert w.intern("T") == t
        assert w.intern("U") == t + 1


def test_non_durable_mode_still_commits(make_store):
    s = make_store(durable=False)
    with s.write() as w:
        w.aux("engine").put(b"k", b"v")
    s = make_store(reopen=True)
    with s.read() as r:
        assert r.aux("engine").get(b"k") == b"v"


def test_refuses_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("hello")
    with pytest.raises(KipError) as e:
        LmdbGraphStore(str(f))
    assert e.value.code is ErrorCode.KIP_4003 and "not a directory" in e.value.message


def test_refuses_a_non_empty_foreign_directory(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(KipError) as e:
        LmdbGraphStore(str(tmp_path))
    assert "no LMDB environment" in e.value.message
    assert not (tmp_path / "data.mdb").exists()


def test_refuses_garbage_data_file(tmp_path):
    (tmp_path / "data.mdb").write_bytes(b"\x00garbage" * 1000)
    with pytest.raises(KipError) as e:
        LmdbGraphStore(str(tmp_path))
    assert e.value.code is ErrorCode.KIP_4003
    assert str(tmp_path) in e.value.message


def test_refuses_a_foreign_lmdb_environment(tmp_path):
    env = lmdb.open(str(tmp_path), max_dbs=2)
    with env.begin(write=True) as t:
        t.put(b"someone", b"else")
    env.close()
    with pytest.raises(KipError) as e:
        LmdbGraphStore(str(tmp_path))
    assert "not a nexus store" in e.value.message


def test_refuses_a_second_open_in_the_same_process(make_store, tmp_path):
    make_store()
    with pytest.raises(KipError) as e:
        LmdbGraphStore(str(tmp_path / "db"))
    assert e.value.code is ErrorCode.KIP_4003 and "already open" in e.value.message
    assert e.value.hint


def test_map_full_is_kip_4003_and_store_stays_intact(make_store, snapshot_of):
    s = make_store(map_size=256 * 1024)
    with s.write() as w:
        w.aux("engine").put(b"keep", b"me")
    before = snapshot_of(s)
    with pytest.raises(KipError) as e:
        with s.write() as w:
            for i in range(10_000):
                w.aux("lex").put(b"%08d" % i, b"x" * 200)
    assert e.value.code is ErrorCode.KIP_4003 and "full" in e.value.message
    assert snapshot_of(s) == before
    with s.write() as w:                                # still writable afterwards
        w.aux("engine").put(b"after", b"ok")
    with s.read() as r:
        assert r.aux("engine").get(b"after") == b"ok"


def test_lmdb_error_inside_a_read_block_is_translated(make_store):
    s = make_store()
    with pytest.raises(KipError) as e:
        with s.read() as r:
            s.close()                       # invalidates the open LMDB transaction
            r.head(1)
    assert e.value.code is ErrorCode.KIP_4003
