"""The stored form of metadata (codec module doc): a map ending with the engine's metadata
(`_version`, `_created_at`, `_updated_at`) keeps those three in a fixed binary layout
(narrow when they fit), and its other keys as codes when all are KIP's recommended ones;
every map reads back with the same items, types and order; and a database written in an
earlier layout (plain msgpack maps, or the wide header before a msgpack map) opens, reads,
checks clean and is rewritten on its next update."""
from __future__ import annotations

import struct

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


# --- the narrow header and the keyed rest ---------------------------------------------------

ENGINE_KEYS = ("_version", "_created_at", "_updated_at")


def wide_layout(m: dict) -> bytes:
    """`m` as the previous code stored it: the wide header, then a msgpack map."""
    version, created, updated = m["_version"], stamp_ms(m["_created_at"]), \
        stamp_ms(m["_updated_at"])
    head = struct.pack(">BBIq", 0xC1, int(updated != created), version, created)
    if updated != created:
        head += struct.pack(">q", updated)
    rest = {k: v for k, v in m.items() if k not in ENGINE_KEYS}
    return head + msgpack.packb(rest, use_bin_type=True)


KEYED = [
    {"source": "user_chat", "confidence": 0.642, "created_at": "2024-12-28T19:51:49Z",
     **ENGINE},
    {"confidence": 1, "evidence": ["a", {"b": None}], "superseded": False,
     "_merged_from": ["Drug:A"], "_version": 255, "_created_at": "1969-12-31T23:59:59.999Z",
     "_updated_at": TS},
    {**{k: i for i, k in enumerate(codec.META_KEYS)}, **ENGINE},
    {"expires_at": None, "_version": 2, "_created_at": "9999-12-31T23:59:59.999Z",
     "_updated_at": "9999-12-31T23:59:59.999Z"},
]
NOT_KEYED = [
    {"source": "x", "colour": "red", **ENGINE},     # a key without a code
    dict(ENGINE),                                   # no other key
]


@pytest.mark.parametrize("m", KEYED + NOT_KEYED)
def test_the_keyed_and_narrow_forms_read_back_the_same(m):
    stored = codec.encode_map(m)
    assert stored is not None and stored[0] == codec.COMPACT_TAG
    back = codec.decode_map(stored)
    assert back == m and list(back) == list(m)
    assert [type(v) for v in back.values()] == [type(v) for v in m.values()]
    flag = stored[1]
    assert bool(flag & 2) == (m in KEYED)
    # narrow when the version fits a byte and the times 48 bits (not the year 9999)
    assert bool(flag & 4) == (m["_version"] < 256 and not m["_created_at"].startswith("9999"))
    assert len(stored) < len(wide_layout(m)) or m in NOT_KEYED[1:]
    # the bulk column gives the same bytes
    user = {k: v for k, v in m.items() if k not in ENGINE_KEYS}
    extra = {k: m[k] for k in ENGINE_KEYS}
    assert codec.encode_maps([user, user], "metadata", extra) == [stored, stored]
    assert codec.encode_maps([m], "metadata") == [stored]


def test_a_loaded_links_metadata_takes_a_quarter_of_its_msgpack():
    m = KEYED[0]
    # header 9, count and key codes 4, an array of 3: the string as msgpack, 0.642 as 642
    # in a fixext 2 (4 bytes), the timestamp as seconds in a fixext 4 (6): value_codes
    assert len(codec.encode_map(m)) == 9 + 4 + 1 + len(msgpack.packb("user_chat")) + 4 + 6
    assert len(codec.encode_map(m)) < len(msgpack.packb(m, use_bin_type=True)) / 4


@pytest.mark.parametrize("m", MAPS[:5] + KEYED + NOT_KEYED)
def test_the_wide_layout_still_reads_and_bumps(m):
    old = wide_layout(m)
    assert old[0] == codec.COMPACT_TAG and not old[1] & 6
    back = codec.decode_map(old)
    assert back == m and list(back) == list(m)
    assert codec.decode_maps([old]) == [m]
    if m["_version"] + 1 < 2**32:
        done = codec.bump_compact(old, stamp_ms(NOW))
        assert done is not None
        assert (done[1], stamp_text(done[2])) == (m["_version"], m["_updated_at"])
        bumped = {**m, "_version": m["_version"] + 1, "_updated_at": NOW}
        assert list(codec.decode_map(done[0]).items()) == list(bumped.items())


@pytest.mark.parametrize("data", [
    b"\xc1\x06\x01\x00\x00\x00\x00\x00\x00\x01\x00\x91\xa1x",     # key code 0
    b"\xc1\x06\x01\x00\x00\x00\x00\x00\x00\x01\x63\x91\xa1x",     # code past the keys
    b"\xc1\x06\x01\x00\x00\x00\x00\x00\x00\x02\x01\x02\x91\xa1x",  # 2 keys, 1 value
])
def test_a_damaged_keyed_value_is_reported(data):
    with pytest.raises(codec.KipError):
        codec.decode_map(data)


def test_a_database_of_the_wide_layout_opens_reads_checks_and_updates(tmp_path):
    path = str(tmp_path / "db")
    nx = Nexus.open(path, durable=False, semantic="none")
    assert "error" not in nx.execute_kip({"command": """
        UPSERT { CONCEPT ?d { {type: "$ConceptType", name: "Drug"} }
                 CONCEPT ?a { {type: "Drug", name: "Aspirin"}
                              SET PROPOSITIONS { ("belongs_to_domain", {type: "Domain",
                                                                        name: "CoreSchema"}) } }
                 WITH METADATA {source: "test", confidence: 0.9} }"""})
    query = 'FIND(?a.metadata, ?l.metadata) WHERE { ?a {name: "Aspirin"} ?l (?a, ?p, ?o) }'
    before = nx.execute_kip({"command": query})["result"]
    nx.close()
    env = lmdb.open(path, max_dbs=64)
    metas = env.open_db(b"metas")
    with env.begin(write=True) as txn:
        rewritten = 0
        for key, value in txn.cursor(metas):
            m = codec.decode_map(value)
            if value[0] == codec.COMPACT_TAG:
                assert value[1] & 4                      # written narrow by this code
                txn.put(key, wide_layout(m), db=metas)
                rewritten += 1
    env.close()
    assert rewritten > 3
    nx = Nexus.open(path, durable=False, semantic="none")
    try:
        assert nx.execute_kip({"command": query})["result"] == before
        assert nx.check(deep=True)["ok"] is True
        assert "error" not in nx.execute_kip({"command": """
            UPSERT { CONCEPT ?a { {type: "Drug", name: "Aspirin"} }
                     WITH METADATA {confidence: 0.8} }"""})
        meta = nx.execute_kip({"command": query})["result"][0][0]
        assert meta["_version"] == 2 and meta["confidence"] == 0.8
        assert meta["source"] == "test" and nx.check(deep=True)["ok"] is True
    finally:
        nx.close()
