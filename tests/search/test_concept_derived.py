"""A concept's forward entry on LMDB (and in memory) holds its names, its vector-text crc
and a digest of its document, not its terms (`nexus.search.lexical_entry.derived_bytes`):
its postings are those of its document in the graph as the index last saw it. Every write
that changes or removes a concept's document after the graph changed — UPDATE of its
attributes (SET ATTRIBUTES, aliases, DELETE ATTRIBUTES), an UPSERT of it, a DELETE, a
MERGE (its source and its target), several of them in one session, a REVERT, small writes
left pending, with and without the version log — must remove exactly the postings it
wrote: `check --deep` stays clean, and SEARCH answers as a reindex of the same data does.
A write that overwrites a concept's attributes without keeping them is refused."""
from __future__ import annotations

import msgpack
import pytest
from index_in_step import answers, assert_in_step, deep_ok, run_writes

from nexus.search import lexical
from nexus.search.lexical_entry import is_derived, pending_copy
from nexus.search.text import KIND_CONCEPT

SCHEMA = """
UPSERT {
  CONCEPT ?d { {type: "$ConceptType", name: "Drug"} SET ATTRIBUTES {description: "A medicine"} }
  CONCEPT ?s { {type: "$ConceptType", name: "Symptom"} SET ATTRIBUTES {description: "A sign"} }
  CONCEPT ?t { {type: "$PropositionType", name: "treats"} SET ATTRIBUTES {description: "cures"} }
}
"""
WORDS = ("bitter", "willow", "bark", "chalky", "tablet", "syrup", "herbal", "orange")
QUERIES = ['SEARCH CONCEPT "bitter willow" LIMIT 40', 'SEARCH CONCEPT "chalky tablet" LIMIT 40',
           'SEARCH CONCEPT "syrup" LIMIT 40', 'SEARCH CONCEPT "herbal orange" LIMIT 40',
           'SEARCH CONCEPT "aspirin" LIMIT 40', 'SEARCH CONCEPT "acetyl" LIMIT 40',
           'SEARCH CONCEPT "fever" LIMIT 40', 'SEARCH CONCEPT "minty" LIMIT 40',
           'SEARCH CONCEPT "medicine" WITH TYPE "Drug" LIMIT 40',
           'SEARCH PROPOSITION "treats fever" LIMIT 40']
MERGE = ('MERGE CONCEPT ?a INTO ?b WHERE { ?a {type: "Drug", name: :a} '
         '?b {type: "Drug", name: :b} }')


def _load(nx, kip, reindex: bool = True):
    kip(nx, SCHEMA)
    for s in ("Fever", "Headache"):
        kip(nx, 'UPSERT { CONCEPT ?s { {type: "Symptom", name: :s} } }', s=s)
    for i in range(30):
        drug = ["Aspirin", "Willow Bark", "Ibuprofen"][i % 3] + f" {i}"
        desc = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(3))
        kip(nx, 'UPSERT { CONCEPT ?d { {type: "Drug", name: :d} '
                'SET ATTRIBUTES { description: :desc, aliases: [:alias] } '
                'SET PROPOSITIONS { ("treats", {type: "Symptom", name: :s}) } } }',
            d=drug, desc=desc, alias=f"acetyl {i}", s=("Fever", "Headache")[i % 2])
    if reindex:
        nx.reindex()                # every posting in the lists, none pending


def _derived(nx) -> int:
    with nx.store.read() as txn:
        return sum(1 for _, v in txn.aux("lexdoc").scan() if is_derived(v))


def _id(nx, kip, name: str) -> int:
    with nx.store.read() as txn:
        return txn.concept_id(txn.symbol_id("Drug"), name)


ONE = 'WHERE { ?d {type: "Drug", name: "Aspirin 0"} }'
CASES = {
    "set attributes": [f'UPDATE ?d SET ATTRIBUTES {{ description: "minty syrup" }} {ONE}'],
    "aliases": [f'UPDATE ?d SET ATTRIBUTES {{ aliases: ["fever reducer", "minty"] }} {ONE}'],
    "many updated": ['UPDATE ?d SET ATTRIBUTES { description: "minty" } WHERE '
                     '{ ?d {type: "Drug"} }'],
    "delete attributes": [f'DELETE ATTRIBUTES {{"description", "aliases"}} FROM ?d {ONE}'],
    "upsert": ['UPSERT { CONCEPT ?d { {type: "Drug", name: "Aspirin 0"} '
               'SET ATTRIBUTES { description: "minty syrup" } } }'],
    # (blocks without handles: run as columns, `nexus.exec.upsert_columns`)
    "upsert many": ['UPSERT { ' + " ".join(
        f'CONCEPT {{ {{type: "Drug", name: "Aspirin {i}"}} '
        f'SET ATTRIBUTES {{ description: "minty {i}" }} }}' for i in range(0, 30, 3))
        + ' }'],
    "delete": [f'DELETE CONCEPT ?d DETACH {ONE}'],
    "delete many": ['DELETE CONCEPT ?d DETACH WHERE { ?d {type: "Drug"} '
                    '(?d, "treats", {type: "Symptom", name: "Fever"}) }'],
    "merge": [(MERGE, {"a": "Aspirin 0", "b": "Willow Bark 1"})],
    "merge twice": [(MERGE, {"a": "Aspirin 0", "b": "Willow Bark 1"}),
                    (MERGE, {"a": "Willow Bark 1", "b": "Ibuprofen 2"})],
    "update, then merge": [
        f'UPDATE ?d SET ATTRIBUTES {{ description: "minty syrup" }} {ONE}',
        (MERGE, {"a": "Willow Bark 1", "b": "Aspirin 0"})],
}


@pytest.mark.parametrize("history", [True, False])
@pytest.mark.parametrize("case", list(CASES))
def test_every_write_removes_the_postings_written(nexus, kip, case, history):
    _load(nexus, kip)
    if not history:
        nexus.set_history(False)
    assert _derived(nexus) >= 30
    run_writes(nexus, kip, CASES[case])
    assert_in_step(nexus, kip, QUERIES)


def test_several_writes_of_one_concept_in_one_session(nexus, kip):
    # The attributes kept are the first ones since the session last staged: what the
    # index last saw, however many writes followed.
    _load(nexus, kip)
    with nexus.write_session() as w:
        w.run(f'UPDATE ?d SET ATTRIBUTES {{ description: "minty" }} {ONE}')
        w.run(f'UPDATE ?d SET ATTRIBUTES {{ aliases: ["orange syrup"] }} {ONE}')
        w.run(f'DELETE ATTRIBUTES {{"description"}} FROM ?d {ONE}')
        w.run(MERGE, {"a": "Willow Bark 1", "b": "Aspirin 0"})
        w.run('DELETE CONCEPT ?d DETACH WHERE { ?d {type: "Drug", name: "Ibuprofen 2"} }')
    assert_in_step(nexus, kip, QUERIES)


@pytest.mark.parametrize("what", ["update", "delete", "merge"])
def test_a_revert_puts_back_the_postings(nexus, kip, what):
    _load(nexus, kip)
    before = answers(nexus, kip, QUERIES)
    if what == "update":
        kip(nexus, f'UPDATE ?d SET ATTRIBUTES {{ description: "minty" }} {ONE}')
    elif what == "delete":
        kip(nexus, f'DELETE CONCEPT ?d DETACH {ONE}')
    else:
        kip(nexus, MERGE, a="Aspirin 0", b="Willow Bark 1")
    assert answers(nexus, kip, QUERIES) != before
    seq = kip(nexus, "DESCRIBE HISTORY LIMIT 1")[0]["seq"]
    kip(nexus, 'REVERT COMMAND :s REASON "undo"', s=seq)
    assert deep_ok(nexus)
    assert answers(nexus, kip, QUERIES) == before
    assert_in_step(nexus, kip, QUERIES)


def test_pending_concepts_changed_before_and_after_the_fold(nexus, kip):
    # Small writes leave their concepts pending (the full entry under a `q` key).
    _load(nexus, kip)
    for i in range(4):
        kip(nexus, 'UPSERT { CONCEPT ?d { {type: "Drug", name: :d} '
                   'SET ATTRIBUTES { description: "orange syrup" } } }', d=f"Quinine {i}")
    with nexus.store.read() as txn:
        assert any(True for _ in txn.aux("lex").scan(b"qc"))
    kip(nexus, 'UPDATE ?d SET ATTRIBUTES { description: "minty" } WHERE '
               '{ ?d {type: "Drug", name: "Quinine 0"} }')
    kip(nexus, 'DELETE CONCEPT ?d DETACH WHERE { ?d {type: "Drug", name: "Quinine 1"} }')
    assert deep_ok(nexus)
    for i in range(4, 40):                                  # folds
        kip(nexus, 'UPSERT { CONCEPT ?d { {type: "Drug", name: :d} '
                   'SET ATTRIBUTES { description: "herbal" } } }', d=f"Quinine {i}")
    kip(nexus, 'UPDATE ?d SET ATTRIBUTES { description: "bitter" } WHERE '
               '{ ?d {type: "Drug", name: "Quinine 2"} }')
    assert_in_step(nexus, kip, QUERIES)


def test_entries_derive_the_full_layout(nexus, kip):
    # The derived entry, its terms taken from the graph, is the full entry byte for byte.
    _load(nexus, kip)
    with nexus.store.read() as txn:
        for key, raw in txn.aux("lexdoc").scan():
            n = int.from_bytes(key, "big")
            if txn.head(n) is None or not is_derived(raw):
                continue
            e = lexical.entry(txn, n)
            assert e.kind == KIND_CONCEPT and e.terms
            doc = lexical.element_doc(txn, n)
            full = lexical.entry_bytes(doc, lexical.doc_terms(doc), lexical.doc_names(doc))
            assert pending_copy(raw, e) == full
            assert len(raw) < len(full)
        with pytest.raises(ValueError):
            lexical.Entry(raw)                  # (terms only from a document)


def test_a_concept_rewritten_without_its_old_attributes_is_refused(nexus, kip):
    # The write hook must know what a concept's postings were: an attribute write that did
    # not keep the old attributes (not through `writes`) fails rather than leave them.
    _load(nexus, kip)
    n = _id(nexus, kip, "Aspirin 0")
    with nexus.store.read() as txn:
        before = {t: list(txn.aux(t).scan()) for t in ("lex", "lexdoc")}
        old = txn.attributes(n)
    with pytest.raises(RuntimeError):
        with nexus.store.write() as txn:
            txn.set_attributes(n, {**old, "description": "minty"})
            lexical.write(txn, [n], [])
    with nexus.store.read() as txn:
        assert {t: list(txn.aux(t).scan()) for t in ("lex", "lexdoc")} == before
        assert txn.attributes(n) == old
    with nexus.store.write() as txn:            # given them, the same write is exact
        txn.set_attributes(n, {**old, "description": "minty"})     # (the same names)
        lexical.write(txn, [n], [], before_attributes={n: old})
    assert deep_ok(nexus)
    assert_in_step(nexus, kip, QUERIES)


def test_full_entries_of_an_earlier_database_read_and_convert(nexus, kip):
    # A database written before the derived layout has every concept's entry in full: it
    # answers the same, checks clean, and a write rewrites what it touches derived.
    _load(nexus, kip)
    before = answers(nexus, kip, QUERIES)
    with nexus.store.write() as txn:
        fwd = txn.aux("lexdoc")
        full = [(k, pending_copy(v, lexical.decode(txn, int.from_bytes(k, "big"), v)))
                for k, v in fwd.scan() if is_derived(v)]
        txn.aux_put_many("lexdoc", full)
    assert _derived(nexus) == 0
    assert type(msgpack.unpackb(full[0][1])[4]) is list
    assert answers(nexus, kip, QUERIES) == before
    assert deep_ok(nexus)
    kip(nexus, f'UPDATE ?d SET ATTRIBUTES {{ description: "minty syrup" }} {ONE}')
    kip(nexus, MERGE, a="Willow Bark 1", b="Ibuprofen 2")
    with nexus.store.read() as txn:     # (what the writes touched: derived)
        assert is_derived(txn.aux("lexdoc").get(
            _id(nexus, kip, "Aspirin 0").to_bytes(8, "big")))
    assert_in_step(nexus, kip, QUERIES)
