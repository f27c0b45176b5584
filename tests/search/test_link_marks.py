"""A link's forward entry on LMDB is MARK: its postings are those of its texts in the graph
as the index last saw it (`nexus.search.lexical_entry.MARK`). Every write that removes or
changes such a link's postings after the graph changed — a DELETE of the link, a DETACH
delete of an end, a MERGE that repoints it (alone, or after another write of it in the same
session), an UPDATE of its attributes, a small write's pending links, a REVERT, and all of
them without the version log — must remove exactly the postings it wrote: `check --deep`
(the postings against the entries, the entries against the graph) stays clean, and SEARCH
answers as a reindex of the same data does."""
from __future__ import annotations

import pytest
from index_in_step import answers, assert_in_step, deep_ok, run_writes

from nexus.search import lexical
from nexus.search.text import KIND_LINK

SCHEMA = """
UPSERT {
  CONCEPT ?d { {type: "$ConceptType", name: "Drug"} SET ATTRIBUTES {description: "A medicine"} }
  CONCEPT ?s { {type: "$ConceptType", name: "Symptom"} SET ATTRIBUTES {description: "A sign"} }
  CONCEPT ?t { {type: "$PropositionType", name: "treats"} SET ATTRIBUTES {description: "cures"} }
  CONCEPT ?c { {type: "$PropositionType", name: "cited_by"} SET ATTRIBUTES {description: "src"} }
}
"""
SYMPTOMS = ("Fever", "Headache", "Sore Throat", "Night Sweats")
QUERIES = ['SEARCH PROPOSITION "treats fever" LIMIT 40',
           'SEARCH PROPOSITION "sore throat" LIMIT 40',
           'SEARCH PROPOSITION "headache" LIMIT 40', 'SEARCH PROPOSITION "aspirin" LIMIT 40',
           'SEARCH PROPOSITION "treats" LIMIT 40', 'SEARCH PROPOSITION "cited" LIMIT 40',
           'SEARCH PROPOSITION "night sweats willow" LIMIT 40',
           'SEARCH CONCEPT "headache" LIMIT 5']
MERGE = ('MERGE CONCEPT ?a INTO ?b WHERE { ?a {type: "Symptom", name: :a} '
         '?b {type: "Symptom", name: :b} }')


def _load(nx, kip, reindex: bool = True):
    kip(nx, SCHEMA)
    for s in SYMPTOMS:
        kip(nx, 'UPSERT { CONCEPT ?s { {type: "Symptom", name: :s} } }', s=s)
    for i in range(40):
        drug = ["Aspirin", "Willow Bark", "Ibuprofen", "Sore Throat Lozenge"][i % 4] + f" {i}"
        kip(nx, 'UPSERT { CONCEPT ?d { {type: "Drug", name: :d} '
                'SET PROPOSITIONS { ("treats", {type: "Symptom", name: :s}) } } }',
            d=drug, s=SYMPTOMS[i % 4])
    # a higher-order link: (a treats link) cited_by a drug
    kip(nx, 'UPSERT { PROPOSITION ?l { ({type: "Drug", name: "Aspirin 0"}, "treats", '
            '{type: "Symptom", name: "Fever"}) } '
            'PROPOSITION ?c { (?l, "cited_by", {type: "Drug", name: "Willow Bark 1"}) } }')
    if reindex:
        nx.reindex()                # every posting in the lists, none pending


def _marks(nx) -> int:
    with nx.store.read() as txn:
        return sum(1 for _, v in txn.aux("lexdoc").scan() if v == lexical.MARK)


CASES = {
    "delete links": ['DELETE PROPOSITIONS ?l WHERE { ?l (?d, "treats", '
                     '{type: "Symptom", name: "Headache"}) }'],
    "delete an end, detach": ['DELETE CONCEPT ?s DETACH WHERE { ?s {type: "Symptom", '
                              'name: "Fever"} }'],
    "delete an end of a higher-order link": [
        'DELETE CONCEPT ?d DETACH WHERE { ?d {type: "Drug", name: "Aspirin 0"} }'],
    "merge": [(MERGE, {"a": "Sore Throat", "b": "Headache"})],
    "merge twice": [(MERGE, {"a": "Sore Throat", "b": "Headache"}),
                    (MERGE, {"a": "Headache", "b": "Night Sweats"})],
    "text attribute added, then removed": [
        'UPDATE ?l SET ATTRIBUTES { note: "swallowed whole" } WHERE { ?l (?d, "treats", '
        '{type: "Symptom", name: "Fever"}) }',
        'DELETE ATTRIBUTES {"note"} FROM ?l WHERE { ?l (?d, "treats", '
        '{type: "Symptom", name: "Fever"}) }'],
    "text attribute, then merge": [
        'UPDATE ?l SET ATTRIBUTES { note: "swallowed whole" } WHERE { ?l (?d, "treats", '
        '{type: "Symptom", name: "Fever"}) }',
        (MERGE, {"a": "Fever", "b": "Headache"})],
}


@pytest.mark.parametrize("history", [True, False])
@pytest.mark.parametrize("case", list(CASES))
def test_every_removal_removes_the_postings_written(nexus, kip, case, history):
    _load(nexus, kip)
    if not history:
        nexus.set_history(False)
    assert _marks(nexus) >= 40
    run_writes(nexus, kip, CASES[case])
    assert_in_step(nexus, kip, QUERIES)


def test_a_merge_after_another_write_of_its_links_in_one_session(nexus, kip):
    # The links are touched before the MERGE in the same session (their _version bumped
    # through a metadata-free attribute write): the MERGE cannot say "only an end moved",
    # so their documents are derived in full, from the heads they had before the session.
    _load(nexus, kip)
    with nexus.write_session() as w:
        w.run('UPDATE ?l SET ATTRIBUTES { weight: 3 } WHERE { ?l (?d, "treats", '
              '{type: "Symptom", name: "Fever"}) }')
        w.run(MERGE, {"a": "Fever", "b": "Sore Throat"})
        w.run('DELETE PROPOSITIONS ?l WHERE { ?l ({type: "Drug", name: "Aspirin 4"}, '
              '"treats", ?s) }')
    assert_in_step(nexus, kip, QUERIES)


@pytest.mark.parametrize("what", ["merge", "detach"])
def test_a_revert_puts_back_the_postings(nexus, kip, what):
    _load(nexus, kip)
    before = answers(nexus, kip, QUERIES)
    if what == "merge":
        kip(nexus, MERGE, a="Sore Throat", b="Headache")
    else:
        kip(nexus, 'DELETE CONCEPT ?s DETACH WHERE { ?s {type: "Symptom", name: "Fever"} }')
    assert deep_ok(nexus)
    seq = kip(nexus, "DESCRIBE HISTORY LIMIT 1")[0]["seq"]
    kip(nexus, 'REVERT COMMAND :s REASON "undo"', s=seq)
    assert deep_ok(nexus)
    assert answers(nexus, kip, QUERIES) == before
    assert_in_step(nexus, kip, QUERIES)


def test_pending_links_removed_before_and_after_the_fold(nexus, kip):
    # Small writes leave their links pending (a copy of the texts under a `q` key): a
    # delete of a pending link, of an end with pending links, and a fold with a MARK in it.
    _load(nexus, kip)
    for i in range(6):
        kip(nexus, 'UPSERT { CONCEPT ?d { {type: "Drug", name: :d} '
                   'SET PROPOSITIONS { ("treats", {type: "Symptom", name: "Night Sweats"}), '
                   '("treats", {type: "Symptom", name: "Fever"}) } } }', d=f"Quinine {i}")
    with nexus.store.read() as txn:
        assert any(True for _ in txn.aux("lex").scan(b"qp"))
    assert deep_ok(nexus)
    kip(nexus, 'DELETE PROPOSITIONS ?l WHERE { ?l ({type: "Drug", name: "Quinine 0"}, '
               '"treats", ?s) }')
    assert deep_ok(nexus)
    kip(nexus, 'DELETE CONCEPT ?d DETACH WHERE { ?d {type: "Drug", name: "Quinine 1"} }')
    assert deep_ok(nexus)
    kip(nexus, MERGE, a="Night Sweats", b="Headache")      # pending links repointed
    assert deep_ok(nexus)
    for i in range(6, 30):                                  # folds
        kip(nexus, 'UPSERT { CONCEPT ?d { {type: "Drug", name: :d} '
                   'SET PROPOSITIONS { ("treats", {type: "Symptom", name: "Fever"}) } } }',
            d=f"Quinine {i}")
    assert_in_step(nexus, kip, QUERIES)


def test_a_link_removed_without_its_old_head_is_refused_and_nothing_changes(nexus, kip):
    # The write hook must know what a MARKed link's postings were: a delete that did not
    # record the link's head (not through `writes.delete`) fails rather than leave them.
    _load(nexus, kip)
    with nexus.store.read() as txn:
        link = next(n for n in txn.elements()
                    if (e := lexical.entry(txn, n)) is not None and e.kind == KIND_LINK
                    and txn.aux("lexdoc").get(n.to_bytes(8, "big")) == lexical.MARK)
        before = {t: list(txn.aux(t).scan()) for t in ("lex", "lexdoc")}
    with pytest.raises(RuntimeError):
        with nexus.store.write() as txn:
            txn.delete(link)
            lexical.write(txn, [], [link])
    with nexus.store.read() as txn:
        assert {t: list(txn.aux(t).scan()) for t in ("lex", "lexdoc")} == before
        assert txn.head(link) is not None
    with nexus.store.write() as txn:            # given the head, the same write is exact
        head = txn.head(link)
        txn.delete(link)
        lexical.write(txn, [], [link], before={link: head})
    assert deep_ok(nexus)
