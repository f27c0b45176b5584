"""A bulk load with SEARCH on PostgreSQL (issue 22) indexes exactly what the same data
written one UPSERT at a time does: SEARCH gives the same answers, with the same `_score`s,
in both databases and on LMDB, when the load returns (nothing caught up afterwards).

The load runs in many small chunks, with the write transaction's caches made small, so
that its paths for a big load (postings appended chunk after chunk, caches that overflow,
vectors by COPY) run on a small data set."""
from __future__ import annotations

import pytest

from nexus import Nexus

pytest.importorskip("psycopg", reason="the postgres extra is not installed")

TYPES = ("Mineral", "Quarry")
PREDICATES = ("found_in", "near")
SCHEMA = "UPSERT {\n" + "".join(
    f'  CONCEPT {{ {{type: "$ConceptType", name: "{t}"}} '
    f'SET ATTRIBUTES {{ description: "a kind of thing: {t}" }} }}\n' for t in TYPES) + "".join(
    f'  CONCEPT {{ {{type: "$PropositionType", name: "{p}"}} SET ATTRIBUTES {{ description: '
    f'"a relation: {p}", subject_types: ["*"], object_types: ["*"] }} }}\n'
    for p in PREDICATES) + "}"

WORDS = ("blue", "granite", "quartz", "shale", "lighthouse", "ember", "marrow", "vexmoor",
         "tinder", "brook", "salt", "copper")


def _data() -> tuple[list[dict], list[dict]]:
    concepts = []
    for i in range(240):
        t = TYPES[i % 2]
        a, b = WORDS[i % len(WORDS)], WORDS[(i * 7 + 3) % len(WORDS)]
        attrs: dict = {"description": f"a {a} {t.lower()} by the {b} road, number {i}"}
        if i % 5 == 0:
            attrs["aliases"] = [f"{b.title()} {a.title()} {i}"]
        concepts.append({"type": t, "name": f"{a.title()}{b} {i:03d}", "attributes": attrs})
    links = []
    for i in range(480):
        s, o = concepts[(i * 13) % 240], concepts[(i * 29 + 1) % 240]
        if s is o:
            continue
        links.append({"subject": {"type": s["type"], "name": s["name"]},
                      "predicate": PREDICATES[i % 2],
                      "object": {"type": o["type"], "name": o["name"]},
                      "attributes": {"note": f"seen at {WORDS[i % len(WORDS)]} dawn"}})
    seen: set = set()
    unique = []
    for link in links:
        key = (link["subject"]["name"], link["predicate"], link["object"]["name"])
        if key not in seen:
            seen.add(key)
            unique.append(link)
    return concepts, unique


QUERIES = [
    'SEARCH CONCEPT "Blueshale 000" LIMIT 5',
    'SEARCH CONCEPT "blueshal" LIMIT 8',                    # a typo: the n-gram vectors
    'SEARCH CONCEPT "quartz lighthouse" LIMIT 10',
    'SEARCH CONCEPT "copper road" WITH TYPE "Quarry" LIMIT 10',
    'SEARCH CONCEPT "Granite Blue" LIMIT 5',                # an alias
    'SEARCH CONCEPT "marow vexmor" LIMIT 10',
    'SEARCH PROPOSITION "found_in ember dawn" LIMIT 10',
    'SEARCH PROPOSITION "near salt" LIMIT 10',
]

TYPOS = ('SEARCH CONCEPT "blueshal" LIMIT 8', 'SEARCH CONCEPT "marow vexmor" LIMIT 10')


def _answers(nx: Nexus) -> list:
    out = []
    for q in QUERIES:
        got = nx.execute_kip_readonly({"command": q})
        assert "result" in got, (q, got)
        rows = []
        for r in got["result"]:
            if "name" in r:
                label = (r["type"], r["name"])
            else:           # a proposition: its ends and predicate, not its id
                label = (r["predicate"], str(r["subject"]), str(r["object"]))
            rows.append((label, round(r["metadata"]["_score"], 5)))
        out.append((q, rows))
    return out


def _kip(nx: Nexus, command: str, **params) -> None:
    got = nx.execute_kip({"command": command, "parameters": params})
    assert "result" in got, got


def _upsert_one_by_one(nx: Nexus, concepts: list[dict], links: list[dict]) -> None:
    for c in concepts:
        _kip(nx, "UPSERT { CONCEPT ?c { {type: :t, name: :n} SET ATTRIBUTES :a } }",
             t=c["type"], n=c["name"], a=c["attributes"])
    for link in links:
        s, o = link["subject"], link["object"]
        _kip(nx, "UPSERT { CONCEPT ?s { {type: :st, name: :sn} } "
                 "CONCEPT ?o { {type: :ot, name: :on} } "
                 "PROPOSITION ?l { (?s, :p, ?o) SET ATTRIBUTES :a } }",
             st=s["type"], sn=s["name"], ot=o["type"], on=o["name"], p=link["predicate"],
             a=link["attributes"])


def test_a_bulk_load_searches_like_the_same_data_upserted_one_by_one(pg_server, tmp_path,
                                                                     monkeypatch):
    from nexus.search import pg_vectors
    from nexus.store import pg_aux, pg_aux_write, pg_pipeline
    # Caches far smaller than the load: every overflow path of a big load runs here.
    for module in (pg_aux, pg_aux_write, pg_pipeline):
        monkeypatch.setattr(module, "LOCAL_AUX", 300)
    # A chunk's new documents' index keys go in by COPY (as a big load's do).
    monkeypatch.setattr(pg_aux_write, "COPY_NEW_MIN", 10)
    # Big enough for an HNSW index, built while the links load (`bulk_loading`).
    monkeypatch.setattr(pg_vectors, "INDEX_AT", 100)
    monkeypatch.setattr(pg_vectors, "INDEX_CHECK", 50)
    concepts, links = _data()
    with Nexus.open(pg_server.fresh_database("bulks")) as bulk:
        _kip(bulk, SCHEMA)
        report = bulk.bulk_import(concepts, links, chunk_size=70)
        assert report["concepts_created"] == len(concepts)
        assert report["propositions_created"] == len(links)
        loaded = _answers(bulk)                 # right away: nothing left to catch up
        table = bulk.search.pg_vectors
        with bulk.store.read() as txn:          # the index is there, and valid
            assert txn.rows("SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON "
                            "c.oid = i.indexrelid WHERE c.relname = ANY(%s)",
                            (table.index_names,)) == [(True,)]
        assert bulk.search.check()["ok"], bulk.search.check()
        deep = bulk.check(deep=True)
        assert deep["ok"], deep
        assert deep["search"]["vectors_compared"] >= len(concepts)
    with Nexus.open(pg_server.fresh_database("singles")) as single:
        _kip(single, SCHEMA)
        _upsert_one_by_one(single, concepts, links)
        upserted = _answers(single)
    with Nexus.open(str(tmp_path / "lmdb")) as lmdb:
        _kip(lmdb, SCHEMA)
        lmdb.bulk_import(concepts, links)
        lmdb.search.drain(None)
        on_lmdb = _answers(lmdb)
    assert all(rows for _, rows in loaded), loaded      # (every query finds something)
    assert loaded == upserted
    # On LMDB: the queries without a typo (a typo's candidates come from the vector
    # index, there an approximate one in the process, here exact scoring of a small
    # space), hits of equal score in its own order (so a tie may be cut at the LIMIT
    # elsewhere): the same scores, and the same hits above the last score — or, where the
    # approximate index missed one of many equally similar names that the hybrid side also
    # takes candidates from (seen about once in ten runs: "quartz lighthouse" without one
    # of its six 0.52046 hits), the same score for every hit both answers hold, the same
    # best score, and all but one hit shared.
    exact = [i for i, q in enumerate(QUERIES) if q not in TYPOS]
    for i in exact:
        if _tie_free(loaded[i]) != _tie_free(on_lmdb[i]):
            _nearly_same(loaded[i], on_lmdb[i])


def _nearly_same(exact: tuple, approximate: tuple) -> None:
    q, rows = exact
    mine = dict(rows)
    theirs = dict(approximate[1])
    shared = mine.keys() & theirs.keys()
    assert all(mine[k] == theirs[k] for k in shared), (q, rows, approximate[1])
    assert rows[0][1] == approximate[1][0][1], (q, rows, approximate[1])
    assert len(shared) >= len(rows) - 1, (q, rows, approximate[1])


def _tie_free(answer: tuple) -> tuple:
    q, rows = answer
    last = rows[-1][1] if rows else None
    return q, [score for _, score in rows], sorted(row for row in rows if row[1] != last)
