"""The columnar FIND executor (nexus.exec.columnar) and its store side (nexus.store.columns).

Every language test already runs under both executors (the .kiptest cases, test_budgets, and the
differential test, which also requires identical responses). These tests cover what those
cannot see: snapshot ids and their caches never serving stale arrays after a write; the
column arrays being exactly the indexes in index order; the streaming fallback at every
step (a tiny batch cap); the cost model's choice; write transactions and huge ids staying
on the row path; the cache budget.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

from kqlsupport import STORES, open_db

from nexus.exec import batch, columnar
from nexus.plan import cost
from nexus.store.columns import ElementInfo, store_columns

DRUGS_BY_CLASS = 'FIND(?c.name, COUNT(?d)) WHERE { ?d {type: "Drug"} ?c {type: "DrugClass"} ' \
                 '(?d, "is_class_of", ?c) }'
SIDE_EFFECTS = 'FIND(?d.name, ?s.name) WHERE { ?d {type: "Drug"} ' \
               'OPTIONAL { (?d, "has_side_effect", ?s) } }'
TREATS = 'FIND(?d.name) WHERE { ?d {type: "Drug"} (?d, "treats", {type: "Symptom", name: :s}) }'


def run(nx, command, mode, **params):
    nx.columnar = mode
    response = nx.execute_kip({"command": command, "parameters": params})
    assert "error" not in response, response
    return response


def both(nx, command, **params):
    """The response under both executors; they must be identical."""
    a = run(nx, command, "never", **params)
    b = run(nx, command, "always", **params)
    assert a == b, f"{command}\nrow: {a}\ncolumnar: {b}"
    return a["result"]


def small_graph(nx, drugs=40, classes=5, symptoms=8, seed=3) -> None:
    rng = random.Random(seed)
    with nx.store.write() as t:
        tid = {name: t.intern(name) for name in ("Drug", "DrugClass", "Symptom")}
        pid = {name: t.intern(name) for name in ("treats", "has_side_effect", "is_class_of")}
        ids = {k: [] for k in tid}
        for kind, count in (("DrugClass", classes), ("Symptom", symptoms), ("Drug", drugs)):
            for i in range(count):
                n = t.new_id()
                t.create_concept(n, tid[kind], f"{kind[0]}{i}", {"i": i}, {})
                ids[kind].append(n)
        seen = set()
        for d in ids["Drug"]:
            for pred, pool, k in (("treats", "Symptom", rng.randint(1, 3)),
                                  ("has_side_effect", "Symptom", rng.randint(0, 2)),
                                  ("is_class_of", "DrugClass", rng.randint(1, 2))):
                for o in rng.sample(ids[pool], k):
                    if (d, pred, o) not in seen:
                        seen.add((d, pred, o))
                        t.create_link(t.new_id(), d, pid[pred], o, {}, {})


@pytest.fixture(params=STORES)
def graph(request, tmp_path):
    nx = open_db(request.param, tmp_path if request.param == "lmdb" else None)
    small_graph(nx)
    yield nx
    nx.close()


# --- snapshots ---------------------------------------------------------------------------

@pytest.mark.parametrize("store", STORES)
def test_snapshot_id_names_the_committed_state(store, tmp_path):
    nx = open_db(store, tmp_path if store == "lmdb" else None)
    try:
        with nx.store.read() as t:
            first = t.snapshot_id()
        with nx.store.read() as t:
            assert t.snapshot_id() == first            # no commit: same snapshot
        with nx.store.write() as t:
            assert t.snapshot_id() is None              # a write is not a snapshot
            assert t.columns() is None
            t.create_concept(t.new_id(), t.intern("X"), "x", {}, {})
        with nx.store.read() as t:
            second = t.snapshot_id()
        assert second != first
        with nx.store.write() as t:                     # an aborted write changes nothing
            t.create_concept(t.new_id(), t.intern("X"), "y", {}, {})
            t.abort()
        with nx.store.read() as t:
            assert t.snapshot_id() == second
        with nx.store.read() as old:                    # a reader keeps its snapshot
            with nx.store.write() as t:
                t.create_concept(t.new_id(), t.intern("X"), "z", {}, {})
            assert old.snapshot_id() == second
            with nx.store.read() as new:
                assert new.snapshot_id() != second
    finally:
        nx.close()


def test_no_stale_arrays_after_writes(graph):
    """Writes between queries: the columnar answers follow every commit (new links, deleted
    links, a new class, a deleted drug), identical to the row path's."""
    nx = graph
    before = both(nx, DRUGS_BY_CLASS)
    both(nx, SIDE_EFFECTS)
    with nx.store.read() as t:
        assert store_columns(nx.store)._snaps            # arrays were cached
        pid = t.symbol_id("is_class_of")
        d0 = t.concept_id(t.symbol_id("Drug"), "D0")
        c0 = t.concept_id(t.symbol_id("DrugClass"), "D0")
        links = list(t.out_links(d0, pid))
    with nx.store.write() as t:
        for _, _, link in links:
            t.delete(link)
        n = t.new_id()
        t.create_concept(n, t.symbol_id("DrugClass"), "Brand new", {}, {})
        t.create_link(t.new_id(), d0, pid, n, {}, {})
        if not any(o == c0 for _, o, _ in links):
            t.create_link(t.new_id(), d0, pid, c0, {}, {})
    after = both(nx, DRUGS_BY_CLASS)
    assert after != before
    assert "Brand new" in after[0]
    assert after[1][after[0].index("Brand new")] == 1
    # KML too (the path agents use): a drug and its links deleted.
    response = nx.execute_kip({"command": 'DELETE CONCEPT ?d DETACH WHERE { ?d {type: "Drug", '
                                          'name: "D1"} }'})
    assert "error" not in response, response
    rows = both(nx, SIDE_EFFECTS)
    assert "D1" not in rows[0]


def test_arrays_are_the_indexes_in_index_order(graph):
    with graph.store.read() as t:
        cx = t.columns()
        assert cx is not None
        for name in ("treats", "has_side_effect", "is_class_of"):
            pid = t.symbol_id(name)
            links = cx.links(pid)
            scanned = list(t.links_of_predicate(pid))
            assert list(zip(links.s.tolist(), links.o.tolist(), links.n.tolist())) == scanned
            o, s, n = links.by_object()
            by_object = [(obj, subj, link) for obj in sorted({x for _, x, _ in scanned})
                         for _, subj, link in t.in_links(obj, pid)]
            assert list(zip(o.tolist(), s.tolist(), n.tolist())) == by_object
            for subject in {x for x, _, _ in scanned} | {0, 10**6}:
                lo, count = links.ranges(links.s, np.array([subject]))
                got = links.o[lo[0]:lo[0] + count[0]].tolist()
                assert got == [x for _, x, _ in t.out_links(subject, pid)]
        for name in ("Drug", "Symptom"):
            tid = t.symbol_id(name)
            assert cx.type_ids(tid).tolist() == list(t.concepts_of_type(tid))
        assert cx.type_ids(10**5).tolist() == []


# --- the streaming fallback ---------------------------------------------------------------

QUERIES = [
    DRUGS_BY_CLASS,
    SIDE_EFFECTS,
    'FIND(?d.name, ?s.name) WHERE { ?d {type: "Drug"} (?d, "treats", ?s) '
    'NOT { (?d, "has_side_effect", ?s) } }',
    'FIND(?d, ?c.name) WHERE { ?d {type: "Drug"} OPTIONAL { (?d, "is_class_of", ?c) '
    'FILTER(?c.name != "D1") } } ORDER BY ?c.name DESC LIMIT 7',
    'FIND(?s.name, COUNT(DISTINCT ?d)) WHERE { ?l (?d, "treats" | "has_side_effect", ?s) }',
    'FIND(?d.name) WHERE { ?d {type: "Drug"} FILTER(?d.attributes.i < 20) '
    'OPTIONAL { (?d, "has_side_effect", ?x) } NOT { ?x {name: "S1"} } }',
    'FIND(?a.name, ?b.name) WHERE { ?a {type: "DrugClass"} ?b {type: "Symptom"} } LIMIT 9',
    'FIND(?x.name) WHERE { ?x {type: "DrugClass"} UNION { ?x {type: "Symptom"} } }',
    'FIND(?d.name, ?l) WHERE { ?l (?d, "treats", {type: "Symptom", name: "S2"}) }',
]


@pytest.mark.parametrize("cap", [0, 1, 3, 40, 10**6])
def test_streaming_fallback_at_every_size(graph, monkeypatch, cap):
    """With a batch cap that every (or some) step exceeds, the run streams through the
    row path from that step on; answers, order and pages stay the same."""
    monkeypatch.setattr(columnar, "MAX_BATCH", cap)
    for q in QUERIES:
        both(graph, q)
    first = both(graph, SIDE_EFFECTS + " LIMIT 10")
    assert len(first[0]) == 10


def test_differential_with_a_tiny_batch_cap(monkeypatch, tmp_path):
    """A slice of the differential test with batch caps that force every kind of switch
    from columns to rows (different caps per graph)."""
    import test_differential as D
    rng = random.Random(7)
    pairs = 0
    graphs = 0
    while pairs < 120:
        monkeypatch.setattr(columnar, "MAX_BATCH", rng.choice([0, 1, 2, 5, 20]))
        graph_seed = rng.randrange(2**32)
        grng = random.Random(graph_seed)
        g = D.Graph(grng)
        nx = open_db("memory", None)
        try:
            ids = g.write_to(nx)
            graphs += 1
            for _ in range(8):
                query = D.Gen(grng, g).query()
                if query is None:
                    continue
                ref = D.Reference(g)
                try:
                    solutions = ref.solutions(query.where)
                except D.TooBig:
                    continue
                except D.NotFound:
                    solutions = None
                D.check_pair(nx, ref, query, solutions, ids, f"graph_seed={graph_seed}")
                pairs += 1
        finally:
            nx.close()


# --- choosing -----------------------------------------------------------------------------

def test_auto_keeps_anchored_queries_on_the_row_path(graph, monkeypatch):
    ran = []
    real = columnar.execute
    monkeypatch.setattr(columnar, "execute", lambda *a: ran.append(1) or real(*a))
    graph.columnar = "auto"
    for s in ("S0", "S1", "S2"):
        assert "error" not in graph.execute_kip({"command": TREATS, "parameters": {"s": s}})
    assert not ran
    run(graph, "FIND(?d) WHERE { ?d {type: \"Drug\", name: \"D3\"} }", "auto")
    assert not ran


def test_auto_choice_follows_the_cost_model(tmp_path, monkeypatch):
    """A scan of a big type with a one-hop OPTIONAL goes columnar in `auto`; the choice
    is a comparison of the two cost estimates."""
    nx = open_db("memory", None)
    try:
        small_graph(nx, drugs=2000, classes=20, symptoms=50)
        ran = []
        real = columnar.execute
        monkeypatch.setattr(columnar, "execute", lambda *a: ran.append(1) or real(*a))
        auto = run(nx, SIDE_EFFECTS, "auto")
        assert ran, "the whole-type scan should run columnar"
        assert auto == run(nx, SIDE_EFFECTS, "never")
        ran.clear()
        monkeypatch.setattr(cost, "COL_FIXED", 1e12)         # columns made hopeless
        run(nx, SIDE_EFFECTS, "auto")
        assert ran, "a columnar choice is remembered for the same snapshot and parameters"
        ran.clear()
        with nx.store.write() as t:
            t.create_concept(t.new_id(), t.symbol_id("Drug"), "new one", {}, {})
        run(nx, SIDE_EFFECTS, "auto")                       # a new snapshot: estimated again
        assert not ran
    finally:
        nx.close()


# --- where columns do not apply -----------------------------------------------------------

def test_delete_where_runs_in_the_write_transaction(graph):
    """KML's DELETE … WHERE matches inside a write transaction: no snapshot, row path."""
    graph.columnar = "always"
    before = both(graph, 'FIND(COUNT(?l)) WHERE { ?l (?d, "has_side_effect", ?s) }')
    graph.columnar = "always"
    response = graph.execute_kip({"command": 'DELETE PROPOSITIONS ?l WHERE { '
                                             '?l (?d, "has_side_effect", ?s) }'})
    assert "error" not in response, response
    assert before > 0
    assert both(graph, 'FIND(COUNT(?l)) WHERE { ?l (?d, "has_side_effect", ?s) }') == 0


@pytest.mark.parametrize("store", STORES)
def test_huge_ids_stay_on_the_row_path(store, tmp_path):
    nx = open_db(store, tmp_path if store == "lmdb" else None)
    try:
        small_graph(nx, drugs=5)
        with nx.store.write() as t:
            # the largest id a store allows (2**32 - 1): past MAX_COLUMN_ID (2**31)
            t.create_concept(2**32 - 1, t.symbol_id("Drug"), "far away", {}, {})
        with nx.store.read() as t:
            assert t.columns() is None
        rows = both(nx, 'FIND(?d.name) WHERE { ?d {type: "Drug"} }')
        assert "far away" in rows
    finally:
        nx.close()


def test_element_info_keeps_its_heads_out_of_the_head_cache(graph):
    """The columnar executor reads each concept's type and name once into the element
    info's arrays; the heads it decodes for that are not also kept in the store's head
    cache (they would be held twice). The answers stay those of the row path."""
    nx = graph
    cache = store_columns(nx.store)
    cache.info = ElementInfo()
    nx.store.head_cache.clear()
    columnar_rows = run(nx, SIDE_EFFECTS, "always")["result"]
    run(nx, DRUGS_BY_CLASS, "always")
    assert not nx.store.head_cache
    with nx.store.read() as t:
        drugs = list(t.concepts_of_type(t.symbol_id("Drug")))
        assert cache.info.names(np.array(drugs), t.known_head).tolist() == \
            [t.head(n).name for n in drugs]
        assert (cache.info.tid_of[drugs] == t.symbol_id("Drug")).all()
    assert columnar_rows == both(nx, SIDE_EFFECTS)


def test_element_info_names_types_and_links_across_growth():
    """ElementInfo answers each id's type id (-1 a link, 0 for the null id) and name (None
    for links and 0) whatever order the ids come in and however often the arrays grow; an
    id filled twice keeps one name slot."""
    from nexus.store.model import ConceptHead, LinkHead
    heads = {n: ConceptHead(n, 7 + n % 3, f"c{n}") if n % 4 else LinkHead(n, 1, 2, 3)
             for n in range(1, 5000)}
    asked: list[int] = []

    def known_head(n):
        asked.append(n)
        return heads[n]

    info = ElementInfo()
    rng = random.Random(5)
    for chunk in ([3, 0, 1, 2], rng.sample(range(1, 5000), 1500), list(range(4999, 0, -1))):
        info.ensure(max(chunk))
        ids = np.array(chunk, dtype=np.int64)
        got = info.names(ids, known_head).tolist()
        assert got == [None if n == 0 or n % 4 == 0 else f"c{n}" for n in chunk]
        assert info.tid_of[ids].tolist() == [0 if n == 0 else -1 if n % 4 == 0 else 7 + n % 3
                                             for n in chunk]
    assert sorted(asked) == list(range(1, 5000))          # each head read once
    before = info.name_at.copy()
    info.fill(np.array([5, 6, 7]), known_head)            # filled already: nothing changes
    assert info.name_at.tolist() == before.tolist()


def test_cache_budget_bounds_the_cache(graph):
    cache = store_columns(graph.store)
    cache.clear()
    cache.budget = 0
    try:
        both(graph, DRUGS_BY_CLASS)
        assert cache._bytes == 0 and not any(cache._snaps.values())
    finally:
        cache.budget = columnar_budget()


def columnar_budget() -> int:
    from nexus.store.columns import DEFAULT_BUDGET
    return DEFAULT_BUDGET


def test_group_ids_over_sorted_runs_match_the_general_grouping():
    """Grouping numbers groups in first-seen order whatever the path: a column that is
    already in ascending runs (a type scan then expands) takes a linear pass, any other
    column a sort; both must give the same groups and first rows."""
    rng = np.random.default_rng(7)
    for size in (0, 1, 2, 5, 200):
        for col in (np.sort(rng.integers(1, 6, size)), rng.integers(0, 6, size)):
            group, firsts = batch.group_ids([col], size)
            order: dict = {}
            for v in col.tolist():
                order.setdefault(v, len(order))
            assert group.tolist() == [order[v] for v in col.tolist()]
            assert firsts.tolist() == [col.tolist().index(v) for v in order]
