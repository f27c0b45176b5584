"""Backends by name: `open_store(location)` picks the backend a location names — a plain
path or `lmdb://` is LMDB, `memory://` a fresh in-memory store — refuses what names none
with KIP_4003 and a hint listing the known schemes, and opens a backend registered later
the same way."""
from __future__ import annotations

import os

import pytest

from nexus.errors import ErrorCode, KipError
from nexus.store import (GraphStore, LmdbGraphStore, MemoryGraphStore, backends, open_store,
                         register_backend, split_location)


@pytest.fixture
def opened():
    stores: list[GraphStore] = []
    yield stores
    for s in stores:
        s.close()


def _roundtrip(store: GraphStore) -> None:
    """A store that works: what one transaction writes, the next reads."""
    with store.write() as w:
        w.aux("engine").put(b"k", b"v")
    with store.read() as r:
        assert r.aux("engine").get(b"k") == b"v"


def test_the_builtin_backends_are_registered():
    assert {"lmdb", "memory"} <= set(backends())


def test_a_plain_path_is_an_lmdb_store(tmp_path, opened):
    s = open_store(str(tmp_path / "plain"))
    opened.append(s)
    assert isinstance(s, LmdbGraphStore) and s.path == str(tmp_path / "plain")
    assert os.path.exists(tmp_path / "plain" / "data.mdb")
    _roundtrip(s)


def test_a_path_object_is_an_lmdb_store(tmp_path, opened):
    s = open_store(tmp_path / "pathlib")
    opened.append(s)
    assert isinstance(s, LmdbGraphStore) and s.path == str(tmp_path / "pathlib")


def test_lmdb_url_with_an_absolute_path(tmp_path, opened):
    target = tmp_path / "abs"
    s = open_store(f"lmdb://{target}")              # lmdb:///tmp/.../abs
    opened.append(s)
    assert isinstance(s, LmdbGraphStore) and s.path == str(target)
    _roundtrip(s)


def test_lmdb_url_with_a_relative_path(tmp_path, monkeypatch, opened):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rel").mkdir()
    s = open_store("lmdb://rel/db")                 # relative to the working directory
    opened.append(s)
    assert isinstance(s, LmdbGraphStore) and s.path == str(tmp_path / "rel" / "db")
    assert os.path.exists(tmp_path / "rel" / "db" / "data.mdb")


def test_a_missing_parent_directory_is_kip_4003(tmp_path):
    with pytest.raises(KipError) as e:              # not the OSError of the open
        open_store(f"lmdb://{tmp_path / 'no' / 'such' / 'db'}")
    assert e.value.code is ErrorCode.KIP_4003 and "cannot open the store" in e.value.message


def test_the_scheme_is_case_insensitive(tmp_path, opened):
    s = open_store(f"LMDB://{tmp_path / 'upper'}")
    opened.append(s)
    assert isinstance(s, LmdbGraphStore)


def test_lmdb_url_without_a_path_is_refused():
    with pytest.raises(KipError) as e:
        open_store("lmdb://")
    assert e.value.code is ErrorCode.KIP_4003 and "lmdb:///" in e.value.hint


def test_memory_url_and_none_are_fresh_memory_stores(opened):
    a, b = open_store("memory://"), open_store(None)
    opened += [a, b]
    assert isinstance(a, MemoryGraphStore) and isinstance(b, MemoryGraphStore)
    assert a.path is None and b.path is None
    _roundtrip(a)
    with b.read() as r:                             # each open is its own store
        assert r.aux("engine").get(b"k") is None


def test_memory_ignores_durability_options(opened):
    s = open_store("memory://", durable=False)
    opened.append(s)
    _roundtrip(s)


@pytest.mark.parametrize("location", ["memory://something", "memory://db/x"])
def test_memory_url_with_a_path_is_refused(location):
    with pytest.raises(KipError) as e:
        open_store(location)
    assert e.value.code is ErrorCode.KIP_4003 and "memory://" in e.value.message


def test_unknown_scheme_is_kip_4003_naming_the_known_ones():
    with pytest.raises(KipError) as e:
        open_store("postgres://localhost/nexus")
    err = e.value
    assert err.code is ErrorCode.KIP_4003 and "postgres://" in err.message
    for scheme in backends():
        assert scheme in err.hint
    assert "plain directory path" in err.hint


def test_split_location():
    assert split_location("/data/nexus") == ("lmdb", "/data/nexus")
    assert split_location("lmdb:///data/nexus") == ("lmdb", "/data/nexus")
    assert split_location("Memory://") == ("memory", "")


def test_a_registered_backend_opens_by_its_scheme(monkeypatch, opened):
    import nexus.store
    # the registry as it was is put back after the test
    monkeypatch.setattr(nexus.store, "_BACKENDS", dict(nexus.store._BACKENDS))
    seen = []

    def opener(rest: str, **options):
        seen.append((rest, options))
        return MemoryGraphStore()

    register_backend("Scratch", opener)
    assert "scratch" in backends()
    s = open_store("scratch://anything", durable=False)
    opened.append(s)
    assert seen == [("anything", {"durable": False})]
    _roundtrip(s)
