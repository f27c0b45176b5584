"""Value codes of stored metadata (nexus/store/value_codes.py): in the C1 form, an ISO 8601
UTC timestamp of the forms "YYYY-MM-DDTHH:MM:SSZ" / "YYYY-MM-DDTHH:MM:SS.mmmZ" is stored as
an integer and a float with few decimals as a scaled integer. Whatever is stored decodes to
exactly the JSON value written (type, text, order of keys); what is not exactly one of
those shapes is stored as before; a bulk column gives the same bytes as map by map; values
written before (the keyed form with plain msgpack values) still read and bump; the values
survive a database's updates, history and EXPORT."""
from __future__ import annotations

import json
import math
import random
from datetime import datetime, timedelta, timezone

import msgpack
import pytest

from nexus.api import Nexus
from nexus.store import codec
from nexus.timestamps import stamp_ms, stamp_text

TS = "2026-11-28T11:24:17.402Z"
ENGINE = {"_version": 1, "_created_at": TS, "_updated_at": TS}
NOW = "2026-11-29T08:00:00.000Z"

CODED_TEXTS = [
    "2025-06-21T13:37:42Z", "1970-01-01T00:00:00Z", "1969-12-31T23:59:59Z",
    "0001-01-01T00:00:00Z", "0999-12-31T23:59:59Z", "9999-12-31T23:59:59Z",
    "2024-02-29T12:00:00Z", "2000-02-29T00:00:00Z", "2106-02-07T06:28:15Z",
    "2106-02-07T06:28:16Z", "2025-06-21T13:37:42.000Z", "2025-06-21T13:37:42.999Z",
    "1900-01-01T00:00:00.001Z", "0001-01-01T00:00:00.000Z", "9999-12-31T23:59:59.999Z",
]
PLAIN_TEXTS = [
    "2025-06-21T13:37:42+00:00", "2025-06-21T13:37:42-05:00", "2025-06-21T13:37:42",
    "2025-06-21T13:37:42.5Z", "2025-06-21T13:37:42.12Z", "2025-06-21T13:37:42.1234Z",
    "2025-06-21T13:37:42z", "2025-06-21t13:37:42Z", "2025-06-21 13:37:42Z",
    "2025-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2025-04-31T00:00:00Z",
    "2025-13-01T00:00:00Z", "2025-00-10T00:00:00Z", "2025-06-00T00:00:00Z",
    "2025-06-21T24:00:00Z", "2025-06-21T23:60:00Z", "2016-12-31T23:59:60Z",
    "0000-01-01T00:00:00Z", "+2025-06-21T13:37:42Z", "10000-01-01T00:00:00Z",
    "２０２５-06-21T13:37:42Z", "2025-06-21T13:37:4２Z", "2025-06-21T13:37:42Zé",
    "2025-6-21T13:37:42Z", "2025-06-21T13:37:42Z ", " 2025-06-21T13:37:42Z",
    "xxxxxxxxxxxxxxxxxxxx", "2025-06-21T13:37:42.000+00:00", "", "wikidata",
]
CODED_FLOATS = [0.865, 0.59, 0.5, 0.0, 1.0, -1.5, 1e-7, 1e-15, 0.001, -0.001, 3.14159,
                123456.789, 127.0, 128.0, -128.0, -129.0, 32767.0, 32768.0, 2147483647.0,
                -2147483648.0, 0.1, 0.7, 2.675, 1e9]
PLAIN_FLOATS = [0.1 + 0.2, -0.0, 1.5e-15, 2147483648.0, -2147483649.0, 1e15, 2.0 ** 53,
                1e300, -1e300, 5e-324, 1.7976931348623157e308, math.pi, 1 / 3]
OTHERS = [0, 1, -1, 2**63 - 1, -2**63, 2**64 - 1, True, False, None, [], {},
          ["2025-06-21T13:37:42Z", 0.5], {"at": "2025-06-21T13:37:42Z", "p": 0.25}]
VALUES = CODED_TEXTS + PLAIN_TEXTS + CODED_FLOATS + PLAIN_FLOATS + OTHERS


def same(a: object, b: object) -> bool:
    """Equal as JSON values, with the same types (1 is not 1.0, -0.0 is not 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (  # type: ignore[arg-type]
            a == b and math.copysign(1, a) == math.copysign(1, b))  # type: ignore[arg-type]
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)  # type: ignore
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same, a, b))  # type: ignore[arg-type]
    return a == b


def round_trip(m: dict) -> bytes:
    stored = codec.encode_map(m)
    assert stored is not None
    back = codec.decode_map(stored)
    assert same(back, m), (m, back)
    assert same(codec.decode_maps([stored])[0], m)
    return stored


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_every_value_reads_back_the_same_keyed_and_not(value):
    for m in ({"source": "s", "confidence": value, **ENGINE},        # keyed
              {"created_at": value, "colour": value, **ENGINE},       # a key without a code
              {"valid_from": value, "valid_until": value, "status": value, **ENGINE}):
        round_trip(m)


@pytest.mark.parametrize("value", CODED_TEXTS + CODED_FLOATS, ids=repr)
def test_the_common_shapes_are_stored_shorter(value):
    plain = len(msgpack.packb(value))
    stored = round_trip({"observed_at": value, **ENGINE})
    ext = len(stored) - len(round_trip({"observed_at": None, **ENGINE})) + 1
    if isinstance(value, str):
        # seconds: 6 bytes (10 outside 1970-2106), milliseconds 10 — instead of 21 or 25
        assert ext == (10 if len(value) == 24 or not "1970" <= value[:4] <= "2106"
                       or value == "2106-02-07T06:28:16Z" else 6)
    else:
        m = next(m for e in range(16) if (m := round(value * 10**e)) / 10**e == value)
        assert ext == (3 if -128 <= m < 128 else 4 if -32768 <= m < 32768 else 6)
    assert ext < plain


@pytest.mark.parametrize("value", PLAIN_TEXTS + PLAIN_FLOATS + OTHERS, ids=repr)
def test_other_values_keep_their_msgpack(value):
    stored = round_trip({"source": value, **ENGINE})
    assert stored.endswith(b"\x91" + msgpack.packb(value, use_bin_type=True))


def test_nan_and_infinities_read_back():
    for value in (math.nan, math.inf, -math.inf):
        round_trip({"confidence": value, "x": value, **ENGINE})


def test_bulk_columns_give_the_bytes_of_map_by_map():
    rng = random.Random(16)
    shapes = [("source", "confidence", "created_at"), ("confidence",), ("created_at", "x"),
              ("observed_at", "memory_strength", "expires_at", "status")]
    maps: list[dict | None] = [None, {}]
    for _ in range(3_000):
        keys = rng.choice(shapes)
        maps.append({k: rng.choice(VALUES if rng.random() < 0.2 else
                                    CODED_TEXTS + CODED_FLOATS) for k in keys})
    for column in (maps, [m for m in maps if m and tuple(m) == shapes[0]]):
        bulk = codec.encode_maps(column, "metadata", ENGINE)
        assert bulk == [codec.encode_map({**(m or {}), **ENGINE}) for m in column]
        for m, stored in zip(column, bulk):
            assert same(codec.decode_map(stored), {**(m or {}), **ENGINE})
    # one value repeated down a whole column, and columns of one kind mixed with another;
    # short ones (a command's) and long ones (a load's: value_codes codes them in numpy)
    for value in VALUES:
        for column in ([{"confidence": value}] * 5, [{"confidence": value}] * 70,
                       [{"confidence": v} for v in (value, 1, 0.5, "2025-06-21T13:37:42Z")],
                       [{"confidence": v} for v in (value, 1, 0.5, "2025-06-21T13:37:42Z",
                                                    "2025-06-21T13:37:42.123Z") * 15]):
            assert codec.encode_maps(column, "metadata", ENGINE) == \
                [codec.encode_map({**m, **ENGINE}) for m in column]
    stamped = [{**(m or {}), **ENGINE} for m in maps]
    assert codec.encode_maps(stamped, "metadata") == [codec.encode_map(m) for m in stamped]


def test_random_timestamps_and_decimals_read_back():
    rng = random.Random(7)
    first = datetime(1, 1, 1, tzinfo=timezone.utc)
    texts, floats = [], []
    for _ in range(2_000):
        when = first + timedelta(seconds=rng.randrange(315_537_897_600),
                                 milliseconds=rng.randrange(1000))
        texts.append(when.strftime("%Y-%m-%dT%H:%M:%S").rjust(19, "0") + (
            f".{when.microsecond // 1000:03d}Z" if rng.random() < 0.5 else "Z"))
        floats.append(round(rng.uniform(-1e4, 1e4), rng.randrange(8)))
        floats.append(rng.random())
    maps = [{"created_at": t, "confidence": f} for t, f in zip(texts, floats)]
    bulk = codec.encode_maps(maps, "metadata", ENGINE)
    assert bulk == [codec.encode_map({**m, **ENGINE}) for m in maps]
    for m, stored in zip(maps, bulk):
        assert same(codec.decode_map(stored), {**m, **ENGINE})
    # every sampled timestamp is of a coded form: 6 or 10 bytes instead of 21 or 25
    for m, stored in zip(maps, bulk):
        assert len(previous_keyed({**m, **ENGINE})) - len(stored) >= 11


def previous_keyed(m: dict) -> bytes:
    """`m` as the previous code stored it: the narrow header, key codes, plain msgpack."""
    stored = codec.encode_map(m)
    assert stored is not None and stored[1] == 6       # keyed, narrow, created = updated
    n = stored[9]
    user = [v for k, v in m.items() if k not in ENGINE]
    return stored[:10 + n] + msgpack.packb(user, use_bin_type=True)


@pytest.mark.parametrize("value", CODED_TEXTS[:3] + CODED_FLOATS[:3], ids=repr)
def test_values_of_the_previous_keyed_form_read_and_bump(value):
    m = {"source": "pubmed", "confidence": value, "created_at": value, **ENGINE}
    old = previous_keyed(m)
    assert old != codec.encode_map(m) and same(codec.decode_map(old), m)
    assert same(codec.decode_maps([old, None])[0], m)
    for stored in (old, codec.encode_map(m)):
        done = codec.bump_compact(stored, stamp_ms(NOW))
        assert done is not None and (done[1], stamp_text(done[2])) == (1, TS)
        assert same(codec.decode_map(done[0]), {**m, "_version": 2, "_updated_at": NOW})
        # the bump patches the header only: the values' bytes are the same
        assert done[0].endswith(stored[9:])


@pytest.mark.parametrize("data", [
    b"\xc1\x06\x01\x00\x00\x00\x00\x00\x00\x01\x03\x91\xd4\x05\x01",        # type 5
    b"\xc1\x06\x01\x00\x00\x00\x00\x00\x00\x01\x03\x91\xd4\x30\x01",        # decimal e 32
    b"\xc1\x06\x01\x00\x00\x00\x00\x00\x00\x01\x03\x91\xd7\x10" + bytes(8),  # decimal, 8 bytes
    b"\xc1\x06\x01\x00\x00\x00\x00\x00\x00\x01\x06\x91\xd5\x01\x00\x01",    # seconds, 2 bytes
    b"\xc1\x06\x01\x00\x00\x00\x00\x00\x00\x01\x06\x91\xd6\x02\x00\x00\x00\x01",  # ms, 4 bytes
    b"\xc1\x06\x01\x00\x00\x00\x00\x00\x00\x01\x06\x91\xd7\x01" + b"\x7f" + bytes(7),  # year
])
def test_a_damaged_value_code_is_reported(data):
    with pytest.raises(codec.KipError):
        codec.decode_map(data)


def test_a_database_keeps_the_values_through_updates_history_and_export(tmp_path):
    meta = {"source": "wikidata", "confidence": 0.865, "created_at": "2025-06-21T13:37:42Z",
            "observed_at": "0999-01-02T03:04:05.678Z", "expires_at": "2030-01-01T00:00:00+00:00",
            "memory_strength": 0.1 + 0.2, "valid_from": "2024-02-30T00:00:00Z"}
    nx = Nexus.open(str(tmp_path / "db"), durable=False, semantic="none")
    try:
        def ok(command: str, **params: object) -> object:
            response = nx.execute_kip({"command": command, "parameters": params})
            assert "result" in response, response
            return response["result"]

        ok('UPSERT { CONCEPT ?d { {type: "$ConceptType", name: "Drug"} } }')
        ok('UPSERT { CONCEPT ?a { {type: "Drug", name: "Aspirin"} } WITH METADATA :m }',
           m=meta)
        find = 'FIND(?a.metadata) WHERE { ?a {type: "Drug", name: "Aspirin"} }'

        def user(m: dict) -> dict:
            return {k: v for k, v in m.items() if not k.startswith("_")}

        first = ok(find)[0]  # type: ignore[index]
        assert same(user(first), meta)
        ok('UPSERT { CONCEPT ?a { {type: "Drug", name: "Aspirin"} SET ATTRIBUTES { r: 1 } } }')
        second = ok(find)[0]  # type: ignore[index]
        assert same(user(second), meta) and second["_version"] == first["_version"] + 1
        seq = ok("DESCRIBE HISTORY LIMIT 1")[0]["seq"]  # type: ignore[index]
        assert same(user(ok(find + f" AS OF VERSION {seq - 1}")[0]), meta)  # type: ignore
        capsule = ok('EXPORT ?a WHERE { ?a {type: "Drug"} }')["capsule"]  # type: ignore
        assert "WITH METADATA { " + ", ".join(
            f"{key}: {json.dumps(value)}" for key, value in meta.items()) + " }" in capsule
    finally:
        nx.close()
