"""The stored form of metadata (codec module doc): a map ending with the engine's metadata
(`_version`, `_created_at`, `_updated_at`) keeps those three in a fixed binary layout; every
map reads back with the same items, types and order; and a database written before that
layout (plain msgpack maps) opens, reads, checks clean and is rewritten on its next update."""
from __future__ import annotations

import lmdb
import msgpack
import pytest

from nexus.api import Nexus
from nexus.store import codec
from nexus.timestamps import stamp_ms, stamp_text

TS = "2026-11-28T11:24:17.402Z"
ENGINE = {"_version": 1, "_created_at": TS, "_updated_at": TS}

MAPS = [
    {"source": "pubmed", "confidence": 0.75, "created_at": "2025-02-05T20:58:04Z", **ENGINE},
    dict(ENGINE),
    {"_version": 300, "_created_at": TS, "_updated_at": "2026-11-28T12:00:00.000Z"},
    {"x": [1, {"y": None}], "_version": 70_000, "_created_at": "1969-12-31T23:59:59.999Z",
     "_updated_at": TS},
    {**{f"k{i}": i for i in range(20)}, "_version": 2**32 - 1, "_created_at": TS,
     "_updated_at": TS},
    # Not the engine's tail, or not its value types: stored as msgpack, as before.
    {"_created_at": TS, "_version": 1, "_updated_at": TS},
    {"_version": True, "_created_at": TS, "_updated_at": TS},
    {"_version": 2**32, "_created_at": TS, "_updated_at": TS},
    {"_version": 1, "_created_at": "2026-02-30T11:24:17.402Z", "_updated_at": TS},
    {"_version": 1, "_created_at": "2026-11-28T11:24:17Z", "_updated_at": TS},
    {"_version": 1, "_created_at": TS, "_updated_at": TS, "later": "key"},
]


@pytest.mark.parametrize("i", range(len(MAPS)))
def test_maps_read_back_with_the_same_items_types_and_order(i):
    m = MAPS[i]
    stored = codec.encode_map(m)
    assert stored is not None
    back = codec.decode_map(stored)
    assert back == m and list(back) == list(m)
    assert [type(v) for v in back.values()] == [type(v) for v in m.values()]
    assert codec.decode_maps([stored, None]) == [m, {}]
    compact = stored[0] == codec.COMPACT_TAG
    assert compact == (i < 5)
    if compact:
        assert len(stored) <= len(msgpack.packb(m)) - 60


def test_the_bulk_columns_encode_as_map_by_map():
    maps = [{"source": "a", "confidence": 0.5}, None, {}, {"n": 1}]
    assert codec.encode_maps(maps, "metadata", ENGINE) == \
        [codec.encode_map({**(m or {}), **ENGINE}) for m in maps]
    stamped = [{**(m or {}), **ENGINE} for m in maps] + [{"n": 1}]
    assert codec.encode_maps(stamped, "metadata") == [codec.encode_map(m) for m in stamped]


def test_the_previous_layout_still_reads():
    for m in MAPS:
        assert codec.decode_map(msgpack.packb(m, use_bin_type=True)) == m


def test_a_database_of_the_previous_layout_opens_reads_checks_and_updates(tmp_path):
    path = str(tmp_path / "db")
    nx = Nexus.open(path, durable=False, semantic="none")
    assert "error" not in nx.execute_kip({"command": """
        UPSERT { CONCEPT ?d { {type: "$ConceptType", name: "Drug"} }
                 CONCEPT ?a { {type: "Drug", name: "Aspirin"} }
                 WITH METADATA {source: "test", confidence: 0.9} }"""})
    nx.close()
    # Rewrite every stored metadata map as the previous code wrote it: plain msgpack.
    env = lmdb.open(path, max_dbs=64)
    metas = env.open_db(b"metas")
    with env.begin(write=True) as txn:
        old = {}
        for key, value in txn.cursor(metas):
            old[key] = codec.decode_map(value)
            txn.put(key, msgpack.packb(old[key], use_bin_type=True), db=metas)
    env.close()
    assert any(m.get("source") == "test" for m in old.values())

    nx = Nexus.open(path, durable=False, semantic="none")
    try:
        found = nx.execute_kip({"command": 'FIND(?a.metadata) WHERE { ?a {name: "Aspirin"} }'})
        meta = found["result"][0]
        assert meta["source"] == "test" and meta["_version"] == 1
        assert nx.check(deep=True)["ok"] is True
        assert "error" not in nx.execute_kip({"command": """
            UPSERT { CONCEPT ?a { {type: "Drug", name: "Aspirin"} }
                     WITH METADATA {source: "test", confidence: 0.8} }"""})
        found = nx.execute_kip({"command": 'FIND(?a.metadata) WHERE { ?a {name: "Aspirin"} }'})
        meta = found["result"][0]
        assert meta["_version"] == 2 and meta["confidence"] == 0.8
        assert meta["_created_at"] != "" and nx.check(deep=True)["ok"] is True
    finally:
        nx.close()


NOW = "2026-11-28T20:00:00.125Z"


@pytest.mark.parametrize("i", range(len(MAPS)))
def test_a_bump_in_place_reads_as_the_map_bumped(i):
    # `codec.bump_compact` (MERGE's moved links): `_version` +1 and `_updated_at` now on a
    # value in the fixed layout, every other item as it was; None for any other form.
    m = MAPS[i]
    stored = codec.encode_map(m)
    assert stored is not None
    done = codec.bump_compact(stored, stamp_ms(NOW))
    if stored[:1] != b"\xc1" or m["_version"] == 2**32 - 1:
        assert done is None
        return
    assert done is not None
    value, version, updated = done
    assert (version, stamp_text(updated)) == (m["_version"], m["_updated_at"])
    assert list(codec.decode_map(value).items()) == \
        list({**m, "_version": m["_version"] + 1, "_updated_at": NOW}.items())
    # the same bytes as encoding the bumped map
    assert value == codec.encode_map({**m, "_version": m["_version"] + 1, "_updated_at": NOW})


def test_a_bump_to_the_creation_time_keeps_the_short_header():
    m = {"a": 1, "_version": 4, "_created_at": TS, "_updated_at": NOW}
    done = codec.bump_compact(codec.encode_map(m), stamp_ms(TS))
    assert done is not None
    assert done[0] == codec.encode_map({"a": 1, "_version": 5, "_created_at": TS,
                                        "_updated_at": TS})
