"""Fixtures for the storage tests: every test runs against every registered backend.

`kind` is a backend's scheme (`nexus.store.backends()`: a backend registered later is tested
without touching this file, provided it can live in a fresh local directory — else add its
test location to `location`). `store` is a fresh store; `make_store()` builds one and, for a
persistent backend, can reopen the same location (`make_store(reopen=True)`), which is how
persistence is tested.
"""
from __future__ import annotations

import itertools

import pytest

from nexus.store import AUX_TABLES, backends, open_store

# Backends whose every open is a fresh, empty store (nothing to reopen).
TRANSIENT = {"memory"}
_SPACES = itertools.count(1)


def location(kind: str, tmp_path, request=None) -> str:
    """The location of a test store of backend `kind`: memory:// takes no path; postgresql://
    a fresh space in the module's database of the session's server (tests/pgtest.py); the
    others get a directory in the test's temporary directory (`lmdb:///tmp/...`)."""
    if kind in TRANSIENT:
        return f"{kind}://"
    if kind == "postgresql":
        assert request is not None, "a postgresql:// test store needs the test's request"
        return f"{request.getfixturevalue('pg_database')}&space=s{next(_SPACES)}"
    return f"{kind}://{tmp_path / 'db'}"


@pytest.fixture(params=backends())
def kind(request) -> str:
    return request.param


@pytest.fixture
def make_store(kind, tmp_path, request):
    opened = []
    where: list[str] = []

    def make(reopen: bool = False, **options):
        if reopen:
            assert kind not in TRANSIENT, f"a {kind}:// store cannot be reopened"
            for s in opened:
                s.close()
        else:       # (a new space for postgresql; the same directory for lmdb)
            base = tmp_path / f"s{len(where)}" if where else tmp_path
            base.mkdir(exist_ok=True)
            where.append(location(kind, base, request))
        s = open_store(where[-1], **options)
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


@pytest.fixture
def store(make_store):
    return make_store()


@pytest.fixture
def snapshot_of():
    """`snapshot_of(store)`: the store's state as read through the protocol, and its raw
    tables (`dump()`), so that "unchanged" can be asserted both ways."""
    return lambda s: (_snapshot(s), s.dump())


def _snapshot(store) -> dict:
    """Everything the protocol exposes, read back through it (for before/after checks)."""
    with store.read() as r:
        out = {"max_id": r.max_id(), "concepts": r.count_concepts(), "links": r.count_links(),
               "elements": {}}
        for n in r.elements():
            h = r.head(n)
            entry = {"head": h, "attributes": r.attributes(n), "metadata": r.metadata(n)}
            if hasattr(h, "type_id"):
                entry["by_name"] = r.concept_id(h.type_id, h.name)
                entry["count_type"] = r.count_type(h.type_id)
            else:
                entry["out"] = list(r.out_links(h.subject))
                entry["in"] = list(r.in_links(h.object))
                entry["pred"] = list(r.links_of_predicate(h.predicate_id))
                entry["count_pred"] = r.count_predicate(h.predicate_id)
            out["elements"][n] = entry
        out["aux"] = {}
        for t in AUX_TABLES:
            out["aux"][t] = list(r.aux(t).scan())
    return out


class Graph:
    """A small graph: Drug Aspirin/Ibuprofen, Symptom Headache/Fever, links
    Aspirin-treats->Headache, Aspirin-treats->Fever, Ibuprofen-treats->Headache,
    Aspirin-interacts->Ibuprofen, and a higher-order link (link about a link)."""


@pytest.fixture
def graph(store):
    g = Graph()
    with store.write() as w:
        g.drug, g.symptom = w.intern("Drug"), w.intern("Symptom")
        g.treats, g.interacts, g.source = (w.intern("treats"), w.intern("interacts_with"),
                                           w.intern("stated_by"))
        for attr, t, name in [("aspirin", g.drug, "Aspirin"), ("ibu", g.drug, "Ibuprofen"),
                              ("headache", g.symptom, "Headache"),
                              ("fever", g.symptom, "Fever")]:
            n = w.new_id()
            w.create_concept(n, t, name, {"label": name}, {"_version": 1})
            setattr(g, attr, n)
        g.l1, g.l2, g.l3, g.l4 = (w.new_id() for _ in range(4))
        w.create_link(g.l1, g.aspirin, g.treats, g.headache, {"confidence": 0.9}, {})
        w.create_link(g.l2, g.aspirin, g.treats, g.fever, {}, {})
        w.create_link(g.l3, g.ibu, g.treats, g.headache, {}, {})
        w.create_link(g.l4, g.aspirin, g.interacts, g.ibu, {}, {})
        g.meta_link = w.new_id()
        w.create_link(g.meta_link, g.l1, g.source, g.fever, {}, {})
    g.store = store
    return g
