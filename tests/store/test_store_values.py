"""Values: JSON maps round-trip exactly (CONTRACT §3: 2 stays 2, 2.0 stays 2.0), names of
any length and script work, and what cannot be stored is KIP_2003 — on both stores."""
from __future__ import annotations

import math

import pytest

from nexus.errors import ErrorCode, KipError
from nexus.store import ConceptHead

NESTED = {
    "int": 2, "float": 2.0, "neg": -7, "big": 2**63 - 1, "small": -(2**63), "pi": math.pi,
    "true": True, "false": False, "null": None, "text": "héllo wörld 🧪 中文",
    "list": [1, 2.5, "x", None, [True, {"deep": {"deeper": [0.0, 0]}}]],
    "map": {"a": {"b": {"c": [1, {"d": "e"}]}}}, "empty_list": [], "empty_map": {},
    "emoji key 🔑": "v", "": "empty key",
}


def roundtrip(store, attributes, metadata=None):
    with store.write() as w:
        t = w.intern("T")
        n = w.new_id()
        w.create_concept(n, t, f"c{n}", attributes, metadata or {})
    with store.read() as r:
        return r.attributes(n), r.metadata(n)


def test_nested_json_round_trips_with_exact_number_types(store):
    attrs, meta = roundtrip(store, NESTED, {"_version": 1, "_created_at": "2024-01-01T00:00Z"})
    assert attrs == NESTED
    assert meta == {"_version": 1, "_created_at": "2024-01-01T00:00Z"}
    assert type(attrs["int"]) is int and type(attrs["float"]) is float
    assert type(attrs["list"][4][1]["deep"]["deeper"][0]) is float
    assert type(attrs["list"][4][1]["deep"]["deeper"][1]) is int
    assert type(attrs["true"]) is bool


def test_unicode_and_emoji_names(store):
    names = ["Aspirin", "Ünïcödé", "中文名字", "🧪💊 mixed ✓", "tab\tnew\nline", "a" * 400]
    with store.write() as w:
        t = w.intern("Thing 🧩")
        ids = {name: w.new_id() for name in names}
        for name, n in ids.items():
            w.create_concept(n, t, name, {}, {})
    with store.read() as r:
        assert r.symbol_text(t) == "Thing 🧩"
        for name, n in ids.items():
            assert r.head(n) == ConceptHead(n, t, name)
            assert r.concept_id(t, name) == n
            assert list(r.concepts_named(name)) == [n]


@pytest.mark.parametrize("length", [399, 400, 401, 511, 512, 10_000])
def test_long_names(store, length):
    name = "é" * (length // 2) + "x" * (length - length // 2)   # multi-byte UTF-8
    twin = name[:-1] + "y"                                      # differs only at the end
    with store.write() as w:
        t = w.intern("Long")
        a, b = w.new_id(), w.new_id()
        w.create_concept(a, t, name, {"n": 1}, {})
        w.create_concept(b, t, twin, {}, {})
    with store.read() as r:
        assert r.head(a).name == name
        assert r.concept_id(t, name) == a and r.concept_id(t, twin) == b
        assert r.concept_id(t, name + "z") is None
        assert list(r.concepts_named(name)) == [a]
        assert list(r.concepts_named(twin)) == [b]
    with pytest.raises(KipError) as e:
        with store.write() as w:
            w.create_concept(w.new_id(), t, name, {}, {})
    assert e.value.code is ErrorCode.KIP_3003
    with store.write() as w:
        w.delete(a)
    with store.read() as r:
        assert r.concept_id(t, name) is None and list(r.concepts_named(name)) == []
        assert r.concept_id(t, twin) == b


@pytest.mark.parametrize("value, problem", [
    ({"x": 2**64}, "64-bit"),
    ({"x": -(2**63) - 1}, "64-bit"),
    ({"x": {"y": [1, 2**100]}}, "64-bit"),
    ({"x": object()}, "object"),
    ({"x": {1, 2}}, "set"),
    ({"x": b"bytes"}, "bytes"),
    ({"x": (1, 2)}, "tuple"),
    ({"x": {1: "int key"}}, "not a string"),
    ({"x": [{"ok": 1}, {2: "bad"}]}, "not a string"),
    ({1: "top-level int key"}, "not a string"),
])
def test_unencodable_values_are_kip_2003(store, snapshot_of, value, problem):
    before = snapshot_of(store)
    for setter in ("attributes", "metadata"):
        with pytest.raises(KipError) as e:
            with store.write() as w:
                t = w.intern("T")
                n = w.new_id()
                if setter == "attributes":
                    w.create_concept(n, t, "x", value, {})
                else:
                    w.create_concept(n, t, "x", {}, value)
        assert e.value.code is ErrorCode.KIP_2003
        assert problem in e.value.message
    assert snapshot_of(store) == before


def test_unencodable_value_in_set_attributes(graph):
    with pytest.raises(KipError) as e:
        with graph.store.write() as w:
            w.set_attributes(graph.aspirin, {"when": object()})
    assert e.value.code is ErrorCode.KIP_2003
    with graph.store.read() as r:
        assert r.attributes(graph.aspirin) == {"label": "Aspirin"}


def test_invalid_unicode_name_is_kip_2003(store):
    with pytest.raises(KipError) as e:
        with store.write() as w:
            w.create_concept(w.new_id(), w.intern("T"), "bad \ud800 surrogate", {}, {})
    assert e.value.code is ErrorCode.KIP_2003
    with store.read() as r:
        assert r.concept_id(1, "bad \ud800 surrogate") is None


def test_empty_maps_read_back_empty(store):
    attrs, meta = roundtrip(store, {}, {})
    assert attrs == {} and meta == {}
