"""A link's name is its predicate's: the `lex` name keys of links are kept for each name's
lowest LINK_NAMES links only (`nexus.search.lexical_names`), since SEARCH's name scan
(`query.NAME_CAP` × `FILTER_FACTOR` keys from the query's prefix) never reads further
within one name. SEARCH PROPOSITION answers — name floors, WITH TYPE, prefixes shared by
several names — are those of a database with every link's name key (as written before),
through a load, deletes of listed links (the list refilled from the graph), a delete of
an end, small pending writes, and deletes that leave fewer than LINK_NAMES links; `check
--deep` accepts both layouts, a reindex writes the same keys, and finds a missing listed key."""
from __future__ import annotations

import shutil
import struct
from collections import Counter

from nexus.api import Nexus
from nexus.ops.bulk_import import bulk_import
from nexus.search import lexical, query
from nexus.search.lexical_names import LINK_NAMES
from nexus.search.text import KIND_LINK

SCHEMA = """
UPSERT {
  CONCEPT ?a { {type: "$ConceptType", name: "Person"} SET ATTRIBUTES {description: "x"} }
  CONCEPT ?b { {type: "$PropositionType", name: "likes"}
               SET ATTRIBUTES {description: "y", subject_types: ["*"], object_types: ["*"]} }
  CONCEPT ?c { {type: "$PropositionType", name: "Likes"}
               SET ATTRIBUTES {description: "z", subject_types: ["*"], object_types: ["*"]} }
  CONCEPT ?d { {type: "$PropositionType", name: "liked_by"}
               SET ATTRIBUTES {description: "w", subject_types: ["*"], object_types: ["*"]} }
}
"""
PEOPLE = [f"person {i}" for i in range(32)]
QUERIES = ['SEARCH PROPOSITION "likes" LIMIT 40', 'SEARCH PROPOSITION "like" LIMIT 40',
           'SEARCH PROPOSITION "Likes" LIMIT 40', 'SEARCH PROPOSITION "liked" LIMIT 30',
           'SEARCH PROPOSITION "liked_by" LIMIT 30', 'SEARCH PROPOSITION "lik" LIMIT 70',
           'SEARCH PROPOSITION "likes" WITH TYPE "Likes" LIMIT 40',
           'SEARCH PROPOSITION "like" WITH TYPE "liked_by" LIMIT 40',
           'SEARCH PROPOSITION "likes" WITH TYPE "likes" LIMIT 80',
           'SEARCH PROPOSITION "person 3 likes" LIMIT 20', 'SEARCH CONCEPT "person 1" LIMIT 5']


def _data() -> tuple[list[dict], list[dict]]:
    concepts = [{"type": "Person", "name": p} for p in PEOPLE]
    links = []
    for s, subj in enumerate(PEOPLE):
        for o, obj in enumerate(PEOPLE):
            if s == o:
                continue
            end = ({"type": "Person", "name": subj}, {"type": "Person", "name": obj})
            links.append({"subject": end[0], "predicate": "likes", "object": end[1]})
            if (s + o) % 4 == 0:
                links.append({"subject": end[0], "predicate": "Likes", "object": end[1]})
            if (s * o) % 3 == 0:
                links.append({"subject": end[0], "predicate": "liked_by", "object": end[1]})
    return concepts, links


def _answers(nx: Nexus, kip) -> list:
    return [[(h.get("id"), h["metadata"]["_score"]) for h in kip(nx, q)] for q in QUERIES]


def _link_keys(nx: Nexus) -> Counter:
    with nx.store.read() as txn:
        return Counter(k[:-8] for k, _ in txn.aux("lex").scan(b"np"))


def _list_every_link(nx: Nexus) -> None:
    """Write the name key of every link, as the code before the capped layout did."""
    with nx.write_session() as session:
        lex = session.txn.aux("lex")
        for key, raw in list(session.txn.aux("lexdoc").scan()):
            e = lexical.decode(session.txn, int.from_bytes(key, "big"), raw)
            if e.kind == KIND_LINK:
                lex.put(b"np" + e.names[0].encode() + b"\x00" + key,
                        struct.pack("<IB", e.group, 0))


def _lex(nx: Nexus) -> list:
    with nx.store.read() as txn:
        return list(txn.aux("lex").scan(b"n")) + list(txn.aux("lex").scan(b"L"))


def _totals(nx: Nexus) -> Counter:
    with nx.store.read() as txn:
        entries = [lexical.decode(txn, int.from_bytes(k, "big"), raw)
                   for k, raw in txn.aux("lexdoc").scan()]
        return Counter(e.names[0] for e in entries if e.kind == KIND_LINK)


def _same(capped: Nexus, every: Nexus, kip) -> None:
    assert _answers(capped, kip) == _answers(every, kip)
    for nx in (capped, every):
        assert nx.search.check(deep=True)["ok"]
        assert nx.check(deep=True)["ok"] is True
    keys, totals = _link_keys(capped), _totals(capped)
    assert {k[2:-1].decode(): c for k, c in keys.items()} == \
        {nn: min(LINK_NAMES, c) for nn, c in totals.items()}
    with capped.store.read() as txn:        # the names with LINK_NAMES listed are marked
        marks = {k[2:].decode() for k, _ in txn.aux("lex").scan(b"Lp")}
    assert marks == {nn for nn, c in totals.items() if c >= LINK_NAMES}


def test_the_name_scan_never_reads_past_a_names_listed_links():
    assert query.NAME_CAP * query.FILTER_FACTOR <= LINK_NAMES


def test_capped_link_names_answer_as_every_link_listed(tmp_path, kip):
    a, b = str(tmp_path / "capped"), str(tmp_path / "every")
    nx = Nexus.open(a, durable=False, semantic="none")
    kip(nx, SCHEMA)
    bulk_import(nx, *_data(), chunk_size=700)
    nx.close()
    shutil.copytree(a, b)
    capped = Nexus.open(a, durable=False, semantic="none")
    every = Nexus.open(b, durable=False, semantic="none")
    try:
        _list_every_link(every)
        totals = _totals(capped)
        assert totals["likes"] > 32 * 31 > LINK_NAMES     # "likes" and "Likes": one name
        assert sum(_link_keys(every).values()) == sum(totals.values())
        assert sum(_link_keys(capped).values()) < sum(totals.values())
        _same(capped, every, kip)
        steps = [
            # listed links deleted: the list refilled from the graph
            'DELETE PROPOSITIONS ?l WHERE { ?l ({type: "Person", name: "person 0"}, '
            '"likes", ?o) }',
            'DELETE CONCEPT ?p DETACH WHERE { ?p {type: "Person", name: "person 1"} }',
            # small writes: pending documents
            'UPSERT { CONCEPT ?p { {type: "Person", name: "person 40"} SET PROPOSITIONS { '
            '("likes", {type: "Person", name: "person 2"}) ("Likes", {type: "Person", '
            'name: "person 3"}) } } }',
            # fewer than LINK_NAMES left of a name
            'DELETE PROPOSITIONS ?l WHERE { ?l (?s, "likes", ?o) '
            'FILTER(?s.name < "person 2") }',
        ]
        for step in steps:
            for nx in (capped, every):
                kip(nx, step)
            _same(capped, every, kip)
        for i in range(3, 24):
            step = ('DELETE PROPOSITIONS ?l WHERE { ?l ({type: "Person", name: :s}, '
                    '"likes", ?o) }')
            for nx in (capped, every):
                kip(nx, step, s=f"person {i}")
        assert _totals(capped)["likes"] < LINK_NAMES
        _same(capped, every, kip)
        # a reindex lists the same name keys as the writes did (its rebuilt vector index
        # may order ties otherwise, and its blocks are cut otherwise: the keys are compared)
        before = _lex(capped)
        capped.reindex()
        capped.search.drain()
        assert _lex(capped) == before
        assert capped.check(deep=True)["ok"] is True
        # a listed key missing is found by the check
        with capped.write_session() as session:
            lex = session.txn.aux("lex")
            key = next(k for k, _ in lex.scan(b"np"))
            lex.delete(key)
        report = capped.check(deep=True)
        assert report["ok"] is False, report
    finally:
        capped.close()
        every.close()
