"""The gram postings (`nexus.search.gram_index`), the default embedder's typo candidates:
written in the data's own transaction (a typo finds what was just written, with no indexer
running), kept exact through alias changes, DELETE and MERGE, filtered by WITH TYPE,
written column-wise by a bulk load, counted by `check`, rebuilt by `reindex`, and built at
open for a database written before they existed."""
from __future__ import annotations

import os

import msgpack
import numpy as np
import pytest

from nexus.ops.bulk_import import bulk_import
from nexus.search import gram_index, postings
from nexus.search.gram_index import SLOTS, TABLE, trigrams

SCHEMA = ('UPSERT { CONCEPT ?t { {type: "$ConceptType", name: "Drug"} '
          'SET ATTRIBUTES {description: "d"} } '
          'CONCEPT ?s { {type: "$ConceptType", name: "Symptom"} '
          'SET ATTRIBUTES {description: "s"} } }')


def names(hits):
    return [h["name"] for h in hits]


def _keys(nx, pending: bool = True) -> dict[str, set[int]]:
    """gram → the posting keys (id * SLOTS + slot) of its list, with those the pending
    names stand for (`pending`)."""
    out: dict[str, set[int]] = {}
    with nx.store.read() as txn:
        for key, raw in txn.aux(TABLE).scan():
            if key[:1] == b"\0":
                continue
            gram = key[:key.index(b"\0")].decode()
            out.setdefault(gram, set()).update(postings.decode(raw)[0].tolist())
        for n, _, slots in gram_index.pending(txn) if pending else ():
            for slot, name in enumerate(slots):
                for g in trigrams(name):
                    out.setdefault(g, set()).add(n * SLOTS + slot)
    return out


def _pending_ids(nx) -> list[int]:
    with nx.store.read() as txn:
        return [n for n, _, _ in gram_index.pending(txn)]


def _of(nx, n: int) -> dict[str, set[int]]:
    """gram → the slots of concept `n` in its list."""
    return {g: {k - n * SLOTS for k in ks if k // SLOTS == n}
            for g, ks in _keys(nx).items() if any(k // SLOTS == n for k in ks)}


def _id(nx, type_: str, name: str) -> int:
    with nx.store.read() as txn:
        return txn.concept_id(txn.symbol_id(type_), name)


def _expected(*slots: str) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for slot, name in enumerate(slots):
        for g in trigrams(name):
            out.setdefault(g, set()).add(slot)
    return out


def test_trigrams_are_the_word_boundary_3grams_of_each_word():
    assert trigrams("asa") == ["<as", "asa", "sa>"]
    assert trigrams("a bc") == ["<a>", "<bc", "bc>"]
    assert trigrams("") == []


def test_a_typo_finds_what_was_just_written_without_an_indexer(nexus, kip):
    kip(nexus, SCHEMA)
    for index in nexus.search.vector_indexes():
        index.stop()                    # nothing runs beside the writes
    nexus.search.wait_backlog = 0       # ... and no SEARCH waits for anything
    kip(nexus, 'UPSERT { CONCEPT ?d { {type: "Drug", name: "Ketorolac"} '
               'SET ATTRIBUTES { aliases: ["Toradol"] } } }')
    assert names(kip(nexus, 'SEARCH CONCEPT "ketorlac" LIMIT 1')) == ["Ketorolac"]
    assert names(kip(nexus, 'SEARCH CONCEPT "toradl" LIMIT 1')) == ["Ketorolac"]
    n = _id(nexus, "Drug", "Ketorolac")
    assert _of(nexus, n) == _expected("ketorolac", "toradol")
    assert nexus.search.check(deep=True, wait=0)["ok"]


def test_alias_changes_delete_and_merge_keep_the_postings_exact(nexus, kip):
    kip(nexus, SCHEMA)
    kip(nexus, 'UPSERT { CONCEPT ?d { {type: "Drug", name: "Ketorolac"} '
               'SET ATTRIBUTES { aliases: ["Toradol", "Sprix"] } } }')
    n = _id(nexus, "Drug", "Ketorolac")
    kip(nexus, 'UPSERT { CONCEPT ?d { {type: "Drug", name: "Ketorolac"} '
               'SET ATTRIBUTES { aliases: ["Acular"] } } }')
    assert _of(nexus, n) == _expected("ketorolac", "acular")
    assert "Ketorolac" not in names(kip(nexus, 'SEARCH CONCEPT "toradl" LIMIT 5'))
    assert names(kip(nexus, 'SEARCH CONCEPT "acullar" LIMIT 1')) == ["Ketorolac"]
    assert nexus.search.check(deep=True)["ok"]

    kip(nexus, 'UPSERT { CONCEPT ?a { {type: "Drug", name: "Aspirin"} } '
               'CONCEPT ?b { {type: "Drug", name: "ASA"} } }')
    asa = _id(nexus, "Drug", "ASA")
    assert _of(nexus, asa)
    kip(nexus, 'MERGE CONCEPT ?s INTO ?t WHERE { ?s {type: "Drug", name: "ASA"} '
               '?t {type: "Drug", name: "Aspirin"} }')
    assert not _of(nexus, asa)
    assert nexus.search.check(deep=True)["ok"]

    kip(nexus, 'DELETE CONCEPT ?d DETACH WHERE { ?d {type: "Drug", name: "Ketorolac"} }')
    assert not _of(nexus, n)
    assert "Ketorolac" not in names(kip(nexus, 'SEARCH CONCEPT "ketorlac" LIMIT 10'))
    assert nexus.search.check(deep=True)["ok"]


def test_with_type_takes_candidates_of_that_type_only(nexus, kip):
    kip(nexus, SCHEMA)
    kip(nexus, "UPSERT { " + " ".join(
        f'CONCEPT ?d{i} {{ {{type: "Drug", name: "Fevarin {i}"}} }}' for i in range(40))
        + ' CONCEPT ?s { {type: "Symptom", name: "Fever"} } }')
    hits = kip(nexus, 'SEARCH CONCEPT "fevr" WITH TYPE "Symptom" LIMIT 5')
    assert names(hits) == ["Fever"]
    drugs = kip(nexus, 'SEARCH CONCEPT "fevarn 7" WITH TYPE "Drug" LIMIT 5')
    assert names(drugs)[0] == "Fevarin 7" and all(h["type"] == "Drug" for h in drugs)
    with nexus.store.read() as txn:
        source = nexus.search.keyword_source(txn)
        qvec = source.query_vector("fevr")
        symptom = txn.symbol_id("Symptom")
        found = source.knn(0, qvec, 10, group=symptom)
        assert set(found) == {_id(nexus, "Symptom", "Fever")}


def test_a_bulk_load_writes_them_sorted_and_check_and_reindex_agree(disk_nexus, kip):
    nx = disk_nexus()
    kip(nx, SCHEMA)
    kip(nx, 'UPSERT { CONCEPT ?d { {type: "Drug", name: "Oxaprozine 0"} } }')   # before
    bulk_import(nx, [{"type": "Drug", "name": f"Oxaprozine {i}",
                      "attributes": {"aliases": [f"Daypro {i}"]} if i % 3 == 0 else {}}
                     for i in range(600)], batch_size=250, chunk_size=100)
    assert names(kip(nx, 'SEARCH CONCEPT "oxaprozin 417" LIMIT 1')) == ["Oxaprozine 417"]
    assert names(kip(nx, 'SEARCH CONCEPT "daypo 417" LIMIT 1')) == ["Oxaprozine 417"]
    assert _of(nx, _id(nx, "Drug", "Oxaprozine 3")) == _expected("oxaprozine 3", "daypro 3")
    # (the concept written before the load and upserted by it: aliases added)
    assert _of(nx, _id(nx, "Drug", "Oxaprozine 0")) == _expected("oxaprozine 0", "daypro 0")
    with nx.store.read() as txn:           # every list's ids ascending, each once
        for _, raw in txn.aux(TABLE).scan(b"<ox"):
            ids = postings.decode(raw)[0]
            assert (np.diff(ids.astype(np.int64)) > 0).all()
    report = nx.search.check(deep=True)
    assert report["ok"] and report["gram_postings_wrong"] == 0, report
    before = _keys(nx)
    nx.search.reindex()
    assert _keys(nx) == before
    # No n-gram vector file: the default embedder has none.
    assert not os.path.exists(os.path.join(nx.store.path, "vectors.concepts.usearch"))


def test_a_database_without_gram_postings_gets_them_at_open(disk_nexus, kip, monkeypatch):
    # A database written as before: the n-gram HNSW index and its file, no gram postings.
    monkeypatch.setattr(gram_index, "in_use", lambda embedder: False)
    nx = disk_nexus()
    kip(nx, SCHEMA)
    kip(nx, 'UPSERT { CONCEPT ?d { {type: "Drug", name: "Ketorolac"} } }')
    nx.close()
    path = nx.store.path
    assert os.path.exists(os.path.join(path, "vectors.concepts.usearch"))
    monkeypatch.undo()
    nx = disk_nexus()
    assert nx.search.grams
    assert names(kip(nx, 'SEARCH CONCEPT "ketorlac" LIMIT 1')) == ["Ketorolac"]
    assert _of(nx, _id(nx, "Drug", "Ketorolac")) == _expected("ketorolac")
    assert nx.search.check(deep=True)["ok"]
    # The unused n-gram vector file is gone (the watermark saved alone).
    assert not os.path.exists(os.path.join(path, "vectors.concepts.usearch"))


@pytest.mark.parametrize("target", ["CONCEPT", "PROPOSITION"])
def test_search_proposition_takes_its_ends_from_the_gram_postings(nexus, kip, target):
    kip(nexus, SCHEMA)
    kip(nexus, 'UPSERT { CONCEPT ?p { {type: "$PropositionType", name: "treats"} } '
               'CONCEPT ?d { {type: "Drug", name: "Ketorolac"} } '
               'CONCEPT ?s { {type: "Symptom", name: "Migraine"} } '
               'PROPOSITION ?l { (?d, "treats", ?s) } }')
    hits = kip(nexus, f'SEARCH {target} "ketorlac" LIMIT 3')
    assert hits, hits
    if target == "CONCEPT":
        assert names(hits)[0] == "Ketorolac"
    else:
        assert hits[0]["predicate"] == "treats"


def test_a_long_query_reads_at_most_query_grams_lists(nexus, kip, monkeypatch):
    """A SEARCH text may have 4,096 characters: the candidates come from its first
    QUERY_GRAMS trigrams' lists, not one list per trigram of the whole text."""
    kip(nexus, SCHEMA)
    kip(nexus, 'UPSERT { CONCEPT ?d { {type: "Drug", name: "Ketorolac"} } }')
    lists = []
    real = postings.read

    def spied(aux, prefix, *args, **kwargs):
        if aux is not None and prefix.endswith(b"\0") and len(prefix) == 4:
            lists.append(prefix)
        return real(aux, prefix, *args, **kwargs)
    monkeypatch.setattr(postings, "read", spied)
    words = " ".join(f"w{i:04d}x" for i in range(600))      # ~4,200 distinct trigrams
    text = "ketorlac " + words[:3_900]
    kip(nexus, f'SEARCH CONCEPT "{text}" LIMIT 3 MODE "keyword"')
    assert 0 < len(set(lists)) <= gram_index.QUERY_GRAMS
    assert len(trigrams(text)) > 4 * gram_index.QUERY_GRAMS


def _knn(nx, text: str, group: str | None = None) -> dict[int, float]:
    with nx.store.read() as txn:
        source = nx.search.keyword_source(txn)
        gid = txn.symbol_id(group) if group else None
        return source.knn(0, source.query_vector(text), 10, group=gid)


def test_a_small_write_leaves_its_names_pending_and_a_query_reads_them(nexus, kip):
    kip(nexus, SCHEMA)
    kip(nexus, 'UPSERT { CONCEPT ?s { {type: "Symptom", name: "Ketosis"} } }')
    nexus.search.reindex()              # (everything in the lists: nothing pending)
    assert _pending_ids(nexus) == []
    kip(nexus, 'UPSERT { CONCEPT ?d { {type: "Drug", name: "Ketorolac"} '
               'SET ATTRIBUTES { aliases: ["Toradol"] } } }')
    n = _id(nexus, "Drug", "Ketorolac")
    # One key written, no list touched: its postings are in no list yet ...
    assert _pending_ids(nexus) == [n]
    assert not any(k // SLOTS == n for ks in _keys(nexus, pending=False).values() for k in ks)
    # ... and a query counts them as if they were: the same candidates and estimates as
    # once they are folded in.
    assert names(kip(nexus, 'SEARCH CONCEPT "ketorlac" LIMIT 1')) == ["Ketorolac"]
    assert names(kip(nexus, 'SEARCH CONCEPT "toradl" LIMIT 1')) == ["Ketorolac"]
    assert names(kip(nexus, 'SEARCH CONCEPT "ketorlac" WITH TYPE "Symptom" LIMIT 1')) \
        == ["Ketosis"]
    pending = [_knn(nexus, "ketorlac"), _knn(nexus, "toradl"),
               _knn(nexus, "keto", "Drug"), _knn(nexus, "keto", "Symptom")]
    assert n in pending[0] and n in pending[1] and n in pending[2] and n not in pending[3]
    report = nexus.search.check(deep=True)
    assert report["ok"] and report["gram_postings_wrong"] == 0, report
    nexus.search.reindex()              # folded: the same postings, all in the lists
    assert _pending_ids(nexus) == []
    assert _of(nexus, n) == _expected("ketorolac", "toradol")
    assert [_knn(nexus, "ketorlac"), _knn(nexus, "toradl"), _knn(nexus, "keto", "Drug"),
            _knn(nexus, "keto", "Symptom")] == pending


def test_check_deep_compares_the_pending_names_with_the_concepts(nexus, kip):
    kip(nexus, SCHEMA)
    kip(nexus, 'UPSERT { CONCEPT ?d { {type: "Drug", name: "Ketorolac"} } }')
    n = _id(nexus, "Drug", "Ketorolac")
    assert n in _pending_ids(nexus)
    with nexus.store.write() as txn:    # a pending entry that drifted from the name
        group, _ = msgpack.unpackb(txn.aux(TABLE).get(gram_index.PENDING + n.to_bytes(8, "big")))
        txn.aux(TABLE).put(gram_index.PENDING + n.to_bytes(8, "big"),
                           msgpack.packb([group, ["ketorolak"]]))
    report = nexus.search.check(deep=True)
    assert not report["ok"] and report["gram_postings_wrong"] == 4, report   # lac, ac> / lak, ak>
    nexus.search.reindex()
    assert nexus.search.check(deep=True)["ok"]
    assert _of(nexus, n) == _expected("ketorolac")


def test_pending_names_are_folded_once_their_ids_span_pending_max(nexus, kip):
    kip(nexus, SCHEMA)
    made, sizes = [], []
    for i in range(3 * gram_index.PENDING_MAX):
        kip(nexus, f'UPSERT {{ CONCEPT ?d {{ {{type: "Drug", name: "Zafirlukast {i}"}} }} }}')
        made.append(_id(nexus, "Drug", f"Zafirlukast {i}"))
        ids = _pending_ids(nexus)
        assert not ids or max(ids) - min(ids) < gram_index.PENDING_MAX   # never more
        sizes.append(len(ids))
        # Every concept's postings, pending or in the lists, exactly once.
        assert _of(nexus, made[-1]) == _expected(f"zafirlukast {i}")
        assert names(kip(nexus, f'SEARCH CONCEPT "zafirlukst {i}" LIMIT 1')) \
            == [f"Zafirlukast {i}"]
    assert max(sizes) > 1 and sizes.count(0) >= 2       # held pending, then folded
    folded = _keys(nexus, pending=False)
    assert any(made[0] * SLOTS in ks for ks in folded.values())
    mine = {g: {k for k in ks if k // SLOTS in set(made)} for g, ks in _keys(nexus).items()}
    assert {g: ks for g, ks in mine.items() if ks} == _expected_of(nexus, made)
    assert nexus.search.check(deep=True)["ok"]
    before = _keys(nexus)
    nexus.search.reindex()
    assert _keys(nexus) == before and _pending_ids(nexus) == []


def _expected_of(nx, ids: list[int]) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    with nx.store.read() as txn:
        for n in ids:
            for slot, name in enumerate(gram_index.lexical.names(txn, n)):
                for g in trigrams(name):
                    out.setdefault(g, set()).add(n * SLOTS + slot)
    return out


def test_alias_change_delete_and_merge_of_a_pending_concept(nexus, kip):
    kip(nexus, SCHEMA)
    kip(nexus, 'UPSERT { CONCEPT ?d { {type: "Drug", name: "Ketorolac"} '
               'SET ATTRIBUTES { aliases: ["Toradol"] } } }')
    n = _id(nexus, "Drug", "Ketorolac")
    assert n in _pending_ids(nexus)
    kip(nexus, 'UPSERT { CONCEPT ?d { {type: "Drug", name: "Ketorolac"} '
               'SET ATTRIBUTES { aliases: ["Acular"] } } }')
    assert n not in _pending_ids(nexus)                 # its new names in the lists
    assert _of(nexus, n) == _expected("ketorolac", "acular")
    assert "Ketorolac" not in names(kip(nexus, 'SEARCH CONCEPT "toradl" LIMIT 5'))
    assert nexus.search.check(deep=True)["ok"]

    kip(nexus, 'UPSERT { CONCEPT ?a { {type: "Drug", name: "Aspirin"} } }')
    kip(nexus, 'UPSERT { CONCEPT ?b { {type: "Drug", name: "ASA"} } }')
    asa = _id(nexus, "Drug", "ASA")
    assert asa in _pending_ids(nexus)
    kip(nexus, 'MERGE CONCEPT ?s INTO ?t WHERE { ?s {type: "Drug", name: "ASA"} '
               '?t {type: "Drug", name: "Aspirin"} }')
    assert asa not in _pending_ids(nexus) and not _of(nexus, asa)
    assert nexus.search.check(deep=True)["ok"]

    kip(nexus, 'UPSERT { CONCEPT ?d { {type: "Drug", name: "Oxaprozin"} } }')
    ox = _id(nexus, "Drug", "Oxaprozin")
    assert ox in _pending_ids(nexus)
    kip(nexus, 'DELETE CONCEPT ?d DETACH WHERE { ?d {type: "Drug", name: "Oxaprozin"} }')
    assert ox not in _pending_ids(nexus) and not _of(nexus, ox)
    assert "Oxaprozin" not in names(kip(nexus, 'SEARCH CONCEPT "oxaprozn" LIMIT 10'))
    assert nexus.search.check(deep=True)["ok"]


def test_pending_names_are_stored_with_the_write(disk_nexus, kip):
    nx = disk_nexus()
    kip(nx, SCHEMA)
    kip(nx, 'UPSERT { CONCEPT ?d { {type: "Drug", name: "Ketorolac"} } }')
    n = _id(nx, "Drug", "Ketorolac")
    assert n in _pending_ids(nx)
    nx = disk_nexus()       # reopened: still pending, still found
    assert n in _pending_ids(nx)
    assert names(kip(nx, 'SEARCH CONCEPT "ketorlac" LIMIT 1')) == ["Ketorolac"]
    assert nx.search.check(deep=True)["ok"]


def _lists(nx) -> dict[bytes, tuple]:
    """list prefix → its postings decoded (ids, weights, groups)."""
    out: dict[bytes, list] = {}
    with nx.store.read() as txn:
        for key, raw in txn.aux(TABLE).scan():
            if key[:1] != b"\0":
                out.setdefault(key[:-8], []).extend(zip(*(a.tolist() for a in
                                                          postings.decode(raw))))
    return {k: tuple(v) for k, v in out.items()}


def test_a_bulk_load_fills_the_pages_of_the_gram_table(disk_nexus, kip):
    """A load's lists are put in key order with the lists already there taken out and put
    back (`lexical_bulk.Tail`): appended, the table's leaf pages are full (inserted in
    the trigrams' first-seen order between those lists, LMDB split them: ~0.6 full), and
    the lists are what a reindex writes."""
    import lmdb
    nx = disk_nexus()
    kip(nx, SCHEMA)
    kip(nx, 'UPSERT { CONCEPT ?d { {type: "Drug", name: "Oxaprozine 0"} } }')   # before
    bulk_import(nx, [{"type": "Drug" if i % 2 else "Symptom", "name": f"Zelmo{i} quartz {i}x",
                      "attributes": {"aliases": [f"Daypro {i}"]} if i % 3 == 0 else {}}
                     for i in range(4000)])
    loaded = _lists(nx)
    assert nx.search.check(deep=True)["ok"]
    path = nx.store.path
    nx.close()
    env = lmdb.open(path, readonly=True, lock=False, max_dbs=64)
    try:
        with env.begin() as txn:
            db = env.open_db(b"aux." + TABLE.encode(), txn=txn, create=False)
            st = txn.stat(db)
            used = sum(len(k) + len(v) + 10 for k, v in txn.cursor(db))
    finally:
        env.close()
    # (three full narrow blocks of 1,028 bytes a page: ~0.78 at most for those)
    assert used / (st["leaf_pages"] * (st["psize"] - 16)) > 0.75
    nx = disk_nexus()
    nx.search.reindex()
    assert _lists(nx) == loaded
