"""`nexus.ops.check.verify` and `kip check [--repair]`: every kind of drift between the base
records and the indexes is found, named and — where it is derived data — repaired, on both
stores; a check never writes; a repair never changes a base record."""
from __future__ import annotations

import json

import numpy as np
import pytest
from reliability_support import dump

from nexus.ops import check
from nexus.ops.check import REPAIRABLE, UNREPAIRABLE, format_problems, verify
from nexus.search import gram_index, lexical, postings
from nexus.store import codec
from nexus.store.codec import OPS, PSO, SPO, pack_n, pack_sid

BASE_TABLES = ("head", "attrs", "metas", "sym")

QUERIES = (
    'FIND(?d.name) WHERE { ?d {type: "Drug"} } ORDER BY ?d.name',
    'FIND(?d.attributes) WHERE { ?d {type: "Drug", name: "Aspirin"} }',
    'FIND(?d.name, ?s.name) WHERE { ?d {type: "Drug"} (?d, "treats", ?s) } ORDER BY ?d.name',
    'FIND(?s.name) WHERE { (?d, "treats", ?s) ?d {name: "Ibuprofen"} }',
    'FIND(?l, ?c.name) WHERE { ?l (?t, "about", ?c) }',
    'FIND(COUNT(?c)) WHERE { ?c {type: "Symptom"} }',
    'DESCRIBE CONCEPT TYPE "Drug"',
    'SEARCH CONCEPT "aspirin" LIMIT 3',
)


def answers(nx) -> list:
    out = []
    for q in QUERIES:
        r = nx.execute_kip_readonly({"command": q})
        if isinstance(r.get("result"), list) and r["result"] and isinstance(
                r["result"][0], dict) and "metadata" in r["result"][0]:
            for hit in r["result"]:
                hit["metadata"].pop("_score", None)
        out.append(r)
    return out


def ids(nx, command: str) -> list[int]:
    r = nx.execute_kip_readonly({"command": command})
    assert "result" in r, r
    return [int(x["id"].split(":")[1]) for x in r["result"]]


def raw_write(nx, fn) -> None:
    """Write below the engine (as a bug or a damaged disk would): fn(kv, tables)."""
    with nx.write_session() as _session:
        txn = _session.store_txn
        fn(txn.kv, txn.tables)


def _concept_keys(nx, n: int) -> tuple[bytes, bytes, bytes]:
    with nx.store.read() as txn:
        h = txn.head(n)
    tb = pack_sid(h.type_id)
    tkey = codec.text_key(h.name.encode())
    return tb + tkey, tb + pack_n(n), tkey + b"\x00" + pack_n(n)


def _link_keys(nx, n: int) -> tuple[bytes, bytes, bytes]:
    with nx.store.read() as txn:
        h = txn.head(n)
    s, p, o = h.subject, h.predicate_id, h.object
    return SPO.pack(s, p, o, n), OPS.pack(o, p, s, n), PSO.pack(p, s, o, n)


ASPIRIN = 'FIND(?d) WHERE { ?d {type: "Drug", name: "Aspirin"} }'
IBUPROFEN = 'FIND(?d) WHERE { ?d {type: "Drug", name: "Ibuprofen"} }'
TREATS = 'FIND(?l) WHERE { ?l ({type: "Drug", name: "Aspirin"}, "treats", ?s) }'


def _delete(table: str, which: int, query: str = ASPIRIN):
    def corrupt(nx):
        n = ids(nx, query)[0]
        key = (_concept_keys if table in ("tn", "tid", "name") else _link_keys)(nx, n)[which]
        raw_write(nx, lambda kv, d: kv.delete(key, db=getattr(d, table)))
    return corrupt


def _put(table: str, key_of, value: bytes = b""):
    def corrupt(nx):
        key = key_of(nx)
        raw_write(nx, lambda kv, d: kv.put(key, value, db=getattr(d, table)))
    return corrupt


def _stat(key: bytes, value: int | None):
    def corrupt(nx):
        def fn(kv, d):
            if value is None:
                kv.delete(key, db=d.stats)
            else:
                kv.put(key, pack_n(value), db=d.stats)
        raw_write(nx, fn)
    return corrupt


def _drug_stat_key(nx) -> bytes:
    with nx.store.read() as txn:
        return codec.ST_TYPE + pack_sid(txn.symbol_id("Drug"))


CASES = {
    "tn entry missing": (_delete("tn", 0), {"tn_missing": 1}),
    "tid entry missing": (_delete("tid", 1), {"tid_missing": 1}),
    "name entry missing": (_delete("name", 2), {"name_missing": 1}),
    "spo entry missing": (_delete("spo", 0, TREATS), {"spo_missing": 1}),
    "ops entry missing": (_delete("ops", 1, TREATS), {"ops_missing": 1}),
    "pso entry missing": (_delete("pso", 2, TREATS), {"pso_missing": 1}),
    "tn entry points at another concept": (
        _put("tn", lambda nx: _concept_keys(nx, ids(nx, ASPIRIN)[0])[0],
             pack_n(10**6)), {"tn_missing": 1, "tn_orphans": 1}),
    "tn entry for a name nobody has": (
        _put("tn", lambda nx: _drug_stat_key(nx)[1:] + b"Ghost", pack_n(1)), {"tn_orphans": 1}),
    "tid entry of a deleted concept": (
        _put("tid", lambda nx: _drug_stat_key(nx)[1:] + pack_n(10**6)), {"tid_orphans": 1}),
    "name entry of the wrong concept": (
        _put("name", lambda nx: b"Aspirin\x00" + pack_n(ids(nx, IBUPROFEN)[0])),
        {"name_orphans": 1}),
    "spo entry of no link": (_put("spo", lambda nx: SPO.pack(1, 1, 2, 10**6)), {"spo_orphans": 1}),
    "ops entry with the wrong ends": (
        _put("ops", lambda nx: OPS.pack(1, 1, 2, ids(nx, TREATS)[0])), {"ops_orphans": 1}),
    "pso entry of a concept": (
        _put("pso", lambda nx: PSO.pack(1, 1, 2, ids(nx, ASPIRIN)[0])), {"pso_orphans": 1}),
    "attributes of a missing element": (_put("attrs", lambda nx: pack_n(10**6), b"\x80"),
                                        {"attrs_orphans": 1}),
    "metadata of a missing element": (_put("metas", lambda nx: pack_n(10**6), b"\x80"),
                                      {"metas_orphans": 1}),
    "concept count wrong": (_stat(codec.ST_CONCEPTS, 3), {"stats_drift": 1}),
    "link count missing": (_stat(codec.ST_LINKS, None), {"stats_drift": 1}),
    "type count wrong": (lambda nx: _stat(_drug_stat_key(nx), 7)(nx), {"stats_drift": 1}),
    "count of an unused predicate": (_stat(codec.ST_PRED + pack_sid(9999), 2),
                                     {"stats_drift": 1}),
    "id counter behind": (_put("meta", lambda nx: codec.META_MAX_ID, pack_n(3)),
                          {"max_id_behind": 1}),
    "symbol counter behind": (_put("meta", lambda nx: codec.META_MAX_SYM, pack_sid(1)),
                              {"max_sym_behind": 1}),
    "symbol lookup missing": (lambda nx: raw_write(nx, lambda kv, d: kv.delete(b"Drug", db=d.symx)),
                              {"symx_missing": 1}),
    "symbol lookup of nothing": (_put("symx", lambda nx: b"Nothing", pack_sid(9999)),
                                 {"symx_orphans": 1}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_drift_is_found_named_and_repaired(any_nx, case):
    nx = any_nx
    corrupt, expected = CASES[case]
    # Store drift: the search indexes' deep comparison (test_search_drift_... below) adds
    # nothing here but time, so these checks are shallow.
    before = answers(nx)
    base = {t: dump(nx)[t] for t in BASE_TABLES}
    clean = verify(nx, deep=False)
    assert clean["ok"], list(format_problems(clean))

    corrupt(nx)
    tables = dump(nx)
    found = verify(nx, deep=False)
    assert not found["ok"]
    drift = {k: v for k, v in found["store"].items() if k in REPAIRABLE + UNREPAIRABLE and v}
    assert drift == expected, (drift, found["store"]["examples"])
    assert all(found["store"]["examples"][k] for k in expected)
    assert dump(nx) == tables                       # the check itself wrote nothing

    fixed = verify(nx, deep=False, repair=True)
    assert fixed["repaired"]["ok"], fixed["repaired"]
    assert fixed["repaired"]["store_fixes"] >= sum(expected.values())
    assert verify(nx, deep=False)["ok"]
    assert {t: dump(nx)[t] for t in BASE_TABLES} == base      # base records untouched
    assert answers(nx) == before
    # the engine keeps working on the repaired store (ids keep growing past every element)
    r = nx.execute_kip({"command": 'UPSERT { CONCEPT ?x { {type: "Drug", name: "Naproxen"} '
                        'SET PROPOSITIONS { ("treats", {type: "Symptom", name: "Fever"}) } } }'})
    assert "result" in r, r
    assert verify(nx, deep=False)["ok"]


def test_a_check_writes_nothing(any_nx):
    before = dump(any_nx)
    report = verify(any_nx, deep=True)
    assert report["ok"], list(format_problems(report))
    assert dump(any_nx) == before
    store = report["store"]
    assert store["elements"] == store["concepts"] + store["links"] > 30
    assert all(store[k] == 0 for k in REPAIRABLE + UNREPAIRABLE)


def test_repair_of_a_clean_store_changes_nothing(any_nx):
    before = dump(any_nx)
    report = verify(any_nx, repair=True)
    assert report["ok"] and report["repaired"] == {**report["repaired"], "store_fixes": 0,
                                                   "search_reindexed": False, "ok": True}
    assert dump(any_nx) == before


def test_every_index_of_a_concept_lost_at_once(any_nx):
    nx = any_nx
    before = answers(nx)
    n = ids(nx, ASPIRIN)[0]
    keys = _concept_keys(nx, n)

    def fn(kv, d):
        for table, key in zip(("tn", "tid", "name"), keys):
            kv.delete(key, db=getattr(d, table))
        kv.delete(codec.ST_CONCEPTS, db=d.stats)
    raw_write(nx, fn)
    assert nx.execute_kip_readonly({"command": ASPIRIN})["error"]["code"] == "KIP_3002"
    report = verify(nx, repair=True)
    assert {k for k in REPAIRABLE if report["store"][k]} == {
        "tn_missing", "tid_missing", "name_missing", "stats_drift"}
    assert report["repaired"]["ok"]
    assert answers(nx) == before


def test_damaged_base_records_are_reported_not_repaired(any_nx):
    """A head deleted below the engine leaves orphaned index entries (repaired) and links
    whose subject is gone (reported: no index rebuild can mend the data itself)."""
    nx = any_nx
    n = ids(nx, IBUPROFEN)[0]
    raw_write(nx, lambda kv, d: kv.delete(pack_n(n), db=d.head))
    report = verify(nx, repair=True)
    store = report["store"]
    assert store["tn_orphans"] == store["tid_orphans"] == store["name_orphans"] == 1
    assert store["attrs_orphans"] == store["metas_orphans"] == 1
    assert store["dangling_links"] == 1 and "refers to missing element" in \
        store["examples"]["dangling_links"][0]
    after = report["repaired"]
    assert not after["ok"]
    assert [k for k in REPAIRABLE + UNREPAIRABLE if after["store"][k]] == ["dangling_links"]


def test_duplicate_identity_and_undecodable_values(any_nx):
    nx = any_nx
    n = ids(nx, ASPIRIN)[0]
    with nx.store.read() as txn:
        head_value = txn.kv.get(pack_n(n), None, txn.tables.head)

    def fn(kv, d):
        kv.put(pack_n(10**5), head_value, db=d.head)          # a second Aspirin
        kv.put(pack_n(n), b"\xc1not msgpack", db=d.attrs)
        kv.put(pack_n(10**5 + 1), b"\x09junk", db=d.head)
    raw_write(nx, fn)
    report = verify(nx, deep=False)
    store = report["store"]
    assert store["duplicate_concepts"] == 1 and store["values_undecodable"] == 1
    assert store["heads_undecodable"] == 1
    assert "are both" in store["examples"]["duplicate_concepts"][0]



def test_damaged_links_are_reported_where_the_damage_is(any_nx):
    """Links have no vectors: the vector checks never read their documents. A link whose
    end is gone is still found (the store's dangling link, and in a deep check the link's
    search document, which names an end that is no longer there); a link whose attributes
    cannot be decoded is the store's undecodable value, not a missing vector."""
    nx = any_nx
    n = ids(nx, IBUPROFEN)[0]
    raw_write(nx, lambda kv, d: kv.delete(pack_n(n), db=d.head))
    report = verify(nx, deep=True)
    assert not report["ok"] and report["store"]["dangling_links"] == 1
    assert report["search"]["lexical_stale"] == 1
    assert not report["search"]["vector_missing"] and not report["search"].get("vector_stale")
    link = ids(nx, TREATS)[0]
    raw_write(nx, lambda kv, d: kv.put(pack_n(link), b"\xc1not msgpack", db=d.attrs))
    report = verify(nx, deep=False)
    assert not report["ok"] and report["store"]["values_undecodable"] == 1
    assert not report["search"]["vector_missing"]


def test_a_deep_check_reports_undecodable_attributes_instead_of_failing(any_nx):
    """A record the engine cannot decode is damage to report: a deep check (which derives
    every element's search document from its record) names it and does not raise."""
    nx = any_nx
    for name in (ASPIRIN, TREATS):
        n = ids(nx, name)[0]
        raw_write(nx, lambda kv, d, n=n: kv.put(pack_n(n), b"\xc1not msgpack", db=d.attrs))
    report = verify(nx, deep=True)
    assert not report["ok"] and report["store"]["values_undecodable"] == 2
    assert report["search"]["lexical_stale"] == 2

# --- search indexes ---------------------------------------------------------------------------

def _lex_delete(prefix: bytes, table: str = "lex"):
    def corrupt(nx):
        with nx.write_session() as _session:
            txn = _session.txn
            aux = txn.aux(table)
            key = next(k for k, _ in aux.scan(prefix))
            aux.delete(key)
    return corrupt


def _aspirin_lexdoc(nx):
    n = ids(nx, ASPIRIN)[0]
    with nx.write_session() as _session:
        txn = _session.txn
        txn.aux("lexdoc").delete(pack_n(n))


SEARCH_CASES = {
    "forward entry lost": (_aspirin_lexdoc, "lexical_missing"),
    "posting block lost": (_lex_delete(b"tc"), "postings_missing"),
    "document frequency lost": (_lex_delete(b"dc"), "doc_freq_drift"),
    "name key lost": (_lex_delete(b"nc"), "names_missing"),
    "document count lost": (_lex_delete(b"Nc"), "doc_count_drift"),
}


@pytest.mark.parametrize("case", sorted(SEARCH_CASES))
def test_search_drift_is_found_and_reindexed(any_nx, case):
    nx = any_nx
    corrupt, category = SEARCH_CASES[case]
    before = answers(nx)
    corrupt(nx)
    report = verify(nx, deep=True)
    assert not report["ok"] and report["store"]["ok"]
    assert report["search"][category] >= 1, report["search"]
    fixed = verify(nx, deep=True, repair=True)
    assert fixed["repaired"]["search_reindexed"] and fixed["repaired"]["ok"], fixed["repaired"]
    assert answers(nx) == before


def test_posting_check_sees_a_wrong_weight(any_nx):
    from nexus.search import postings
    nx = any_nx
    with nx.write_session() as _session:
        txn = _session.txn
        aux = txn.aux("lex")
        key, raw = next(iter(aux.scan(b"tc")))
        ids_, weights, groups = postings.decode(raw)
        aux.put(key, postings.encode(ids_, weights + 1.0, groups))
    report = verify(nx, deep=True)
    assert report["search"]["postings_wrong"] >= 1
    assert not verify(nx, deep=False)["search"].get("postings_wrong")   # deep only


@pytest.fixture
def ngram_vectors(monkeypatch):
    """The default embedder with the n-gram HNSW vector index every other embedder has
    (by default its typo candidates are the gram postings: `nexus.search.gram_index`)."""
    monkeypatch.setattr(gram_index, "in_use", lambda embedder: False)


def _gram_postings(nx, n: int, names: list[str] | None = None) -> None:
    """Delete every gram posting of concept `n`'s names (in the lists, and its pending
    entry), or with `names` add postings of those for `n`, in a write of its own."""
    with nx.write_session(privileged=True) as session:
        txn = session.store_txn
        if not names:
            txn.aux(gram_index.TABLE).delete(gram_index.PENDING + n.to_bytes(8, "big"))
        for slot, name in enumerate(names or lexical.names(txn, n)):
            for g in gram_index.trigrams(name):
                postings.apply(txn.aux(gram_index.TABLE), g.encode() + b"\0",
                               {n * gram_index.SLOTS + slot: (3.0, 1) if names else None})


def test_gram_postings_drift_is_found_and_reindexed(any_nx):
    """The default embedder's typo candidates (gram postings, written with the data): a
    concept without its postings is `vector_missing`, postings of no element are
    `vector_orphans`, one too many is found by a deep check; a repair rebuilds them."""
    nx = any_nx
    assert nx.search.grams
    before = answers(nx)
    n = ids(nx, ASPIRIN)[0]
    assert verify(nx, deep=True)["ok"]
    _gram_postings(nx, n)
    report = verify(nx, deep=False)
    assert report["search"]["vector_missing"] == 1, report["search"]
    assert verify(nx, repair=True)["repaired"]["ok"]
    assert answers(nx) == before
    _gram_postings(nx, 10 ** 6, ["ghost"])           # an element that does not exist
    report = verify(nx, deep=False)
    assert report["search"]["vector_orphans"] == 1, report["search"]
    assert verify(nx, repair=True)["repaired"]["ok"]
    with nx.write_session(privileged=True) as session:    # one posting too many
        key = n * gram_index.SLOTS
        session.store_txn.aux(gram_index.TABLE).put(
            b"zzq\0" + key.to_bytes(8, "big"),
            postings.encode(np.array([key], dtype=np.uint64),
                            np.array([3.0], dtype=np.float32), np.array([1], dtype=np.uint32)))
    assert verify(nx, deep=False)["ok"]
    report = verify(nx, deep=True)
    assert report["search"]["gram_postings_wrong"] == 1, report["search"]
    assert report["search"]["grams_compared"] == report["store"]["concepts"]
    assert verify(nx, deep=True, repair=True)["repaired"]["ok"]


def test_vector_index_drift_is_found_and_reindexed(ngram_vectors, any_nx):
    nx = any_nx
    n = ids(nx, ASPIRIN)[0]
    # Vectors are indexed in the background: let the indexer finish, or it would add the
    # vector back after the drop and there would be no drift to find.
    assert nx.search.vectors.drain(timeout=30)
    nx.search.vectors._drop([n])
    report = verify(nx, deep=False)
    assert report["search"]["vector_missing"] == 1
    assert verify(nx, repair=True)["repaired"]["ok"]


def _replace_vectors(nx, query: str, texts: list[str]) -> int:
    """Give the element `query` finds the vectors of `texts` instead of its own (as a lost
    or misapplied change would), once the indexer has caught up."""
    from nexus.search.text import KIND_CONCEPT
    n = ids(nx, query)[0]
    vectors = nx.search.vectors
    assert vectors.drain(timeout=30)
    vectors._drop([n])
    vectors._add([(KIND_CONCEPT, n, texts)])
    return n


@pytest.mark.parametrize("texts, category", [
    (["Paracetamol"], "vector_stale"),                   # the vector of another text
    (["Aspirin", "ASA", "acetylsalicylic acid"], "vector_slots_wrong"),   # aliases it lacks
])
def test_stale_vectors_are_found_by_a_deep_check_and_reindexed(ngram_vectors, any_nx, texts,
                                                               category):
    nx = any_nx
    before = answers(nx)
    n = _replace_vectors(nx, ASPIRIN, texts)
    shallow = verify(nx, deep=False)
    assert shallow["ok"], list(format_problems(shallow))     # present: only deep compares
    report = verify(nx, deep=True)
    assert not report["ok"] and report["store"]["ok"]
    assert report["search"][category] == 1, report["search"]
    assert f"C:{n}" in report["search"]["examples"][category][0]
    assert report["search"]["vectors_compared"] == report["store"]["concepts"]
    fixed = verify(nx, deep=True, repair=True)
    assert fixed["repaired"]["search_reindexed"] and fixed["repaired"]["ok"], fixed["repaired"]
    assert answers(nx) == before


def test_a_deep_check_compares_every_vector(ngram_vectors, any_nx):
    """An alias written by KML reaches the vectors: the deep check agrees after the indexer
    ran, and sees every concept's vectors (links have none)."""
    nx = any_nx
    r = nx.execute_kip({"command": 'UPSERT { CONCEPT ?d { {type: "Drug", name: "Aspirin"} '
                        'SET ATTRIBUTES { aliases: ["ASA", "acetylsalicylic acid"] } } }'})
    assert "result" in r, r
    report = verify(nx, deep=True)
    assert report["ok"], list(format_problems(report))
    assert report["search"]["vectors_compared"] == report["store"]["concepts"] > 30


# --- kip check ---------------------------------------------------------------------------------

def test_kip_check_reports_and_repairs(tmp_path, kip_main):
    from nexus.api import Nexus
    from reliability_support import seeded
    db = tmp_path / "db"
    with Nexus.open(str(db)) as nx:
        seeded(nx)
        _delete("tn", 0)(nx)
    code, out, err = kip_main("check", "--db", str(db))
    report = json.loads(out)
    assert code == 1 and report["store"]["tn_missing"] == 1 and not report["ok"]
    assert "store.tn_missing: 1" in err and "--repair" in err
    code, out, err = kip_main("check", "--db", str(db), "--repair")
    report = json.loads(out)
    assert code == 0 and report["repaired"]["ok"] and report["repaired"]["store_fixes"] == 1
    assert "repaired" in err
    code, out, _ = kip_main("check", "--db", str(db), "--deep")
    assert code == 0 and json.loads(out)["ok"]


def test_kip_check_exit_status_when_the_data_itself_is_damaged(tmp_path, kip_main):
    from nexus.api import Nexus
    from reliability_support import seeded
    db = tmp_path / "db"
    with Nexus.open(str(db)) as nx:
        seeded(nx)
        n = ids(nx, IBUPROFEN)[0]
        raw_write(nx, lambda kv, d: kv.delete(pack_n(n), db=d.head))
    code, out, err = kip_main("check", "--db", str(db), "--repair")
    assert code == 1
    assert json.loads(out)["repaired"]["store"]["dangling_links"] == 1
    assert "cannot be repaired" in err


@pytest.fixture
def kip_main(capsys):
    from nexus.cli import main

    def call(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out = capsys.readouterr()
        return code, out.out, out.err
    return call


def test_module_surface():
    assert set(check.__all__) >= {"verify", "repair_store", "format_problems"}
