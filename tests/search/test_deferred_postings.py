"""A bulk load's postings are written once per list at the end of its transaction
(`nexus.search.lexical.Deferred`): the lexical tables hold exactly what writing every
document in one go holds, a later chunk that changes an earlier chunk's document is
indexed as it ends up, and SEARCH and the deep check agree."""
from __future__ import annotations

from nexus.ops.bulk_import import bulk_import
from nexus.search import lexical, postings

SCHEMA = """
UPSERT {
  CONCEPT ?d { {type: "$ConceptType", name: "Drug"} SET ATTRIBUTES {description: "A medicine"} }
  CONCEPT ?s { {type: "$ConceptType", name: "Symptom"} SET ATTRIBUTES {description: "A sign"} }
  CONCEPT ?t { {type: "$PropositionType", name: "treats"} SET ATTRIBUTES {description: "cures"} }
}
"""
WORDS = ["willow", "bark", "pain", "relief", "fever", "aspirin", "tablet", "syrup", "dose"]


def _items(n: int):
    concepts = [{"type": "Symptom", "name": f"Symptom {i}",
                 "attributes": {"description": f"{WORDS[i % 9]} sign {i}"}} for i in range(20)]
    concepts += [{"type": "Drug", "name": f"Drug {i}",
                  "attributes": {"description": f"{WORDS[i % 7]} {WORDS[i % 5]} drug {i}"}}
                 for i in range(n)]
    links = [{"subject": {"type": "Drug", "name": f"Drug {i}"}, "predicate": "treats",
              "object": {"type": "Symptom", "name": f"Symptom {i % 20}"}} for i in range(n)]
    return concepts, links


def _tables(nx):
    """The lexical tables' rows, posting blocks as their decoded postings (a block's
    layout depends on how it was written: packed by a bulk write, narrow when a small
    write spliced it — `postings`' module doc)."""
    def row(key, raw):
        if key[:1] != b"t":
            return key, raw
        return key, tuple(tuple(a.tolist()) for a in postings.decode(raw))

    with nx.store.read() as txn:
        return {t: [row(k, v) for k, v in txn.aux(t).scan()] for t in ("lex", "lexdoc")}


QUERIES = ['SEARCH CONCEPT "willow bark" LIMIT 20', 'SEARCH CONCEPT "drug 17" LIMIT 5',
           'SEARCH CONCEPT "relief" WITH TYPE "Drug" LIMIT 30',
           'SEARCH PROPOSITION "treats symptom 3" LIMIT 20', 'SEARCH CONCEPT "lozenge" LIMIT 5']


def _answers(nx, kip):
    return [[(h.get("name") or h.get("predicate"), h["metadata"]["_score"])
             for h in kip(nx, q)] for q in QUERIES]


def test_a_chunked_load_writes_the_lists_of_one_write(disk_nexus, kip):
    nx = disk_nexus()
    kip(nx, SCHEMA)
    concepts, links = _items(700)
    bulk_import(nx, concepts, links, chunk_size=37)     # many stages, one transaction
    loaded = _tables(nx)
    answers = _answers(nx, kip)
    assert nx.search.check(deep=True)["ok"]
    # The same documents written by one `write` without holding anything back.
    with nx.store.read() as txn:
        ids = list(txn.elements())
    with nx.store.write() as txn:
        lexical.clear(txn)
        lexical.write(txn, ids, ())
    assert _tables(nx) == loaded
    assert _answers(nx, kip) == answers


def test_a_later_chunk_changes_a_held_document(disk_nexus, kip):
    nx = disk_nexus()
    kip(nx, SCHEMA)
    concepts, links = _items(200)
    # Drug 5 again after its first chunk was staged: a new description and an alias.
    again = [{"type": "Drug", "name": "Drug 5",
              "attributes": {"description": "lozenge", "aliases": ["Throat Drop"]}}]
    bulk_import(nx, concepts + again, links, chunk_size=25)
    assert nx.search.check(deep=True)["ok"]
    hits = kip(nx, 'SEARCH CONCEPT "lozenge" LIMIT 5')
    assert [h["name"] for h in hits] == ["Drug 5"]
    assert [h["name"] for h in kip(nx, 'SEARCH CONCEPT "throat drop" LIMIT 1')] == ["Drug 5"]
    assert nx.check(deep=True)["ok"] is True            # the postings match the entries
    loaded = _tables(nx)
    with nx.store.read() as txn:
        ids = list(txn.elements())
    with nx.store.write() as txn:                       # as one write, nothing held
        lexical.clear(txn)
        lexical.write(txn, ids, ())
    assert _tables(nx) == loaded


def test_a_failed_load_leaves_no_postings(disk_nexus, kip):
    nx = disk_nexus()
    kip(nx, SCHEMA)
    before = _tables(nx)
    concepts, _ = _items(100)
    bad = concepts + [{"type": "NoSuchType", "name": "x"}]
    try:
        bulk_import(nx, bad, [], chunk_size=30)
    except Exception:  # noqa: BLE001 - the load fails: KIP_2001
        pass
    assert _tables(nx) == before
    assert nx.search.check(deep=True)["ok"]
    bulk_import(nx, concepts, [], chunk_size=30)
    assert [h["name"] for h in kip(nx, 'SEARCH CONCEPT "drug 17" LIMIT 1')] == ["Drug 17"]


def test_the_held_postings_come_out_by_term_then_id_whatever_the_ids():
    # ids below 2**32 are sorted with their terms in one integer; larger ones by `lexsort`:
    # the same runs either way, each term's ids ascending, terms in key order.
    import random

    import numpy as np

    from nexus.search.lexical_bulk import Deferred

    rng = random.Random(5)
    for top in (1 << 20, 1 << 40):
        docs = sorted(rng.sample(range(top - 5000, top), 300))
        held = Deferred()
        want: dict[bytes, list[int]] = {}
        for lo in range(0, len(docs), 100):
            terms, weights, ids, groups, counts = [], [], [], [], []
            for n in docs[lo:lo + 100]:
                mine = rng.sample(WORDS + ["zeta", "alpha", "mu"], rng.randrange(1, 6))
                terms += mine
                weights += [1.0] * len(mine)
                ids.append(n)
                groups.append(1)
                counts.append(len(mine))
                for t in mine:
                    want.setdefault(b"c" + t.encode(), []).append(n)
            held.take(((terms, weights, ids, groups, counts), ([], [], [], [], [])))
        got: dict[bytes, list[int]] = {}
        for run in held.runs(0):
            for key, (cols, start, end) in run.items():
                got[key] = np.asarray(cols.ids[start:end]).tolist()
        assert list(got) == sorted(want)
        assert got == {k: sorted(v) for k, v in want.items()}
