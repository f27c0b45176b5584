"""The packed layout of a posting block (postings_packed.py): blocks written many at a time
(a bulk load's lists, appends that fill blocks) hold ids as deltas and weights and groups as
small dictionaries; they decode to exactly the postings given (the f16 weights bit for bit,
so scores do not change), are told apart from the narrow and wide layouts by their first
byte, read in id order among blocks of the other layouts, and a database whose blocks are
packed answers SEARCH as the same database with every block narrow, checks clean and
takes writes."""
from __future__ import annotations

import random

import numpy as np

from nexus.ops.bulk_import import bulk_import
from nexus.search import gram_index, postings
from nexus.search import postings_packed as packed

from .test_lexical_scoring import _Aux
from .test_deferred_postings import SCHEMA, WORDS
from .test_postings_layout import wide


def _columns(rng: random.Random, blocks: int):
    """Random blocks (ids ascending within each, gaps of every delta width; weights and
    groups of 1 to 200 distinct values) as columns and the blocks' starts."""
    ids, weights, groups, starts = [], [], [], []
    for _ in range(blocks):
        c = rng.randint(1, postings.BLOCK)
        gap = rng.choice([2, 200, 60_000, 2**23, 2**25])
        first = rng.randrange(1, 2**20)
        block = sorted({min(first + rng.randrange(1, gap) * i, 2**32 - 1) for i in range(c)})
        w_pool = [rng.random() * 3 for _ in range(rng.choice([1, 2, 4, 5, 16, 17, 200]))]
        g_pool = [rng.randrange(2**16) for _ in range(rng.choice([1, 3, 4, 16, 40]))]
        starts.append(len(ids))
        ids += block
        weights += [rng.choice(w_pool) for _ in block]
        groups += [rng.choice(g_pool) for _ in block]
    return (np.asarray(ids, dtype=np.uint64), np.asarray(weights, dtype=np.float32),
            np.asarray(groups, dtype=np.uint32), np.asarray(starts, dtype=np.int64))


def test_packed_blocks_decode_to_the_postings_given_bit_for_bit():
    rng = random.Random(5)
    tags: set[int] = set()
    for _ in range(40):
        ids, weights, groups, starts = _columns(rng, rng.randint(1, 30))
        values = packed.encode_many(ids, weights, groups, starts)
        ends = [*starts[1:].tolist(), len(ids)]
        for value, s, e in zip(values, starts.tolist(), ends):
            tags.add(value[0])
            got = postings.decode(value)                    # one block
            assert got[0].dtype == np.uint64 and got[1].dtype == np.float16
            assert got[2].dtype == np.uint32
            assert got[0].tolist() == ids[s:e].tolist()
            assert (got[1].view(np.uint16).tolist()
                    == weights[s:e].astype(np.float16).view(np.uint16).tolist())
            assert got[2].tolist() == groups[s:e].tolist()
            assert postings.count(value) == e - s and postings.last_id(value) == ids[e - 1]
        order = list(range(len(values)))                    # many at once, any order
        rng.shuffle(order)
        got = packed.decode_many([values[i] for i in order])
        want = np.concatenate([np.arange(s, e) for s, e in
                               ((starts[i], ends[i]) for i in order)])
        assert got[0].tolist() == ids[want].tolist()
        assert got[1].view(np.uint16).tolist() == (
            weights[want].astype(np.float16).view(np.uint16).tolist())
        assert got[2].tolist() == groups[want].tolist()
    # every delta width and every mode of weights and groups was written
    assert {(t >> 4) & 3 for t in tags} == {0, 1, 2, 3}
    assert {(t >> 2) & 3 for t in tags} == {0, 1, 2, 3}
    assert {t & 3 for t in tags} == {0, 1, 2, 3}


def test_the_smallest_mode_is_chosen():
    ids = np.arange(10, 10 + 128, dtype=np.uint64)
    one = packed.encode_many(ids, np.full(128, 0.5, np.float32), np.full(128, 7, np.uint32),
                             np.zeros(1, np.int64))[0]
    assert len(one) == 2 + 4 + 127 + 2 + 2              # 1-byte deltas, one weight, one group
    few = packed.encode_many(ids, np.arange(128, dtype=np.float32) % 3,
                             np.arange(128, dtype=np.uint32) % 2, np.zeros(1, np.int64))[0]
    assert len(few) == 2 + 4 + 127 + (8 + 32) + (8 + 32)     # two 4-value dictionaries
    single = packed.encode_many(ids[:1], np.ones(1, np.float32), np.ones(1, np.uint32),
                                np.zeros(1, np.int64))[0]
    assert len(single) == 10


def test_a_packed_block_is_never_taken_for_an_old_one():
    w, g = np.ones(128, np.float32), np.ones(128, np.uint32)
    for c in range(1, postings.BLOCK + 1):
        ids = np.arange(1, c + 1, dtype=np.uint64)
        assert postings.encode(ids, w[:c], g[:c])[0] < packed.TAG           # narrow
        assert wide(ids, w[:c], g[:c])[0] < packed.TAG
        assert packed.encode_many(ids, w[:c], g[:c], np.zeros(1, np.int64))[0][0] >= packed.TAG


def test_a_list_of_mixed_layouts_reads_in_id_order_and_cuts_at_whole_blocks():
    rng = random.Random(9)
    for _ in range(30):
        ids, weights, groups, starts = _columns(rng, 12)
        order = np.argsort(ids, kind="stable")               # one list: ids ascending
        ids = np.unique(ids)
        weights, groups = weights[order][:len(ids)], groups[order][:len(ids)]
        cuts = sorted(set(rng.sample(range(1, len(ids)), min(10, len(ids) - 1))) | {0})
        aux = _Aux()
        bounds = [*cuts, len(ids)]
        for s, e in zip(bounds, bounds[1:]):
            e = min(e, s + postings.BLOCK)
            part = ids[s:e], weights[s:e], groups[s:e]
            layout = rng.choice(["packed", "narrow", "wide"])
            raw = (packed.encode_many(*part, np.zeros(1, np.int64))[0] if layout == "packed"
                   else postings.encode(*part) if layout == "narrow" else wide(*part))
            aux.put(b"t" + postings._U64.pack(int(ids[s])), raw)
        blocks = [postings.decode(raw) for _, raw in aux.scan(b"t")]
        want = [np.concatenate([b[i] for b in blocks]) for i in range(3)]
        got = postings.read(aux, b"t", 10**9)
        assert got[3] is True
        for x, y in zip(got[:3], want):
            assert x.dtype == y.dtype and x.tolist() == y.tolist()
        cap = rng.randint(1, len(want[0]))
        cut = postings.read(aux, b"t", cap)
        sizes = np.cumsum([len(b[0]) for b in blocks])
        whole = int(sizes[np.searchsorted(sizes, cap)])      # whole blocks up to >= cap
        assert cut[0].tolist() == want[0][:whole].tolist()
        assert cut[3] is (whole == len(want[0]))


def test_columns_write_packed_blocks_with_the_postings_of_create_columns():
    rng = random.Random(2)
    ids, weights, groups, starts = _columns(rng, 40)
    runs = starts[::3]                                      # runs of several blocks' postings
    ids = np.concatenate([np.sort(ids[s:e]) for s, e in
                          zip(runs, [*runs[1:].tolist(), len(ids)])])
    cols = postings.Columns(ids, weights, groups, runs)
    a, b = _Aux(), _Aux()
    for s, e in zip(runs.tolist(), [*runs[1:].tolist(), len(ids)]):
        if len(set(ids[s:e].tolist())) != e - s:
            continue
        prefix = b"t%d\x00" % s
        assert cols.create(a, prefix, s, e) == e - s
        postings.create_columns(b, prefix, ids[s:e], weights[s:e], groups[s:e])
    assert a.d == b.d and all(v[0] >= packed.TAG for v in a.d.values())


QUERIES = ['SEARCH CONCEPT "willow bark" LIMIT 20', 'SEARCH CONCEPT "drug 17" LIMIT 5',
           'SEARCH CONCEPT "relief" WITH TYPE "Drug" LIMIT 30', 'SEARCH CONCEPT "Drgu 12" LIMIT 5',
           'SEARCH PROPOSITION "treats symptom 3" LIMIT 20', 'SEARCH CONCEPT "aspirin" LIMIT 300']


def _answers(nx, kip):
    return [[(h.get("name") or h.get("predicate"), h["metadata"]["_score"])
             for h in kip(nx, q)] for q in QUERIES]


def test_a_packed_database_answers_as_a_narrow_one_checks_clean_and_takes_writes(
        disk_nexus, kip):
    nx = disk_nexus()
    kip(nx, SCHEMA)
    concepts = [{"type": "Symptom", "name": f"Symptom {i}",
                 "attributes": {"description": f"{WORDS[i % 9]} sign {i}"}} for i in range(20)]
    concepts += [{"type": "Drug", "name": f"Drug {i}",
                  "attributes": {"description": f"{WORDS[i % 7]} {WORDS[i % 5]} drug {i}"}}
                 for i in range(600)]
    links = [{"subject": {"type": "Drug", "name": f"Drug {i}"}, "predicate": "treats",
              "object": {"type": "Symptom", "name": f"Symptom {i % 20}"}} for i in range(600)]
    bulk_import(nx, concepts, links)
    with nx.store.read() as txn:
        blocks = [v for k, v in txn.aux("lex").scan(b"t")]
        grams = [v for k, v in txn.aux(gram_index.TABLE).scan() if k[:1] != b"\0"]
    # (the narrow ones: the bootstrap's and the schema's lists, written by small writes)
    assert sum(v[0] >= packed.TAG for v in blocks) >= 1200
    assert grams and not any(v[0] >= packed.TAG for v in grams)  # (gram lists: narrow)
    assert all(_answers(nx, kip)) and nx.check(deep=True)["ok"] is True
    # writes into packed lists: a small one (its block spliced narrow), a delete, a bulk
    # append
    kip(nx, 'UPSERT { CONCEPT ?x { {type: "Drug", name: "Willow extra"} '
            'SET ATTRIBUTES {description: "willow bark relief"} } }')
    kip(nx, 'DELETE CONCEPT ?d DETACH WHERE { ?d {type: "Drug", name: "Drug 3"} }')
    bulk_import(nx, [{"type": "Drug", "name": f"Drug b{i}",
                      "attributes": {"description": "willow bark aspirin"}} for i in range(300)],
                [])
    hits = [h["name"] for h in kip(nx, 'SEARCH CONCEPT "willow bark" LIMIT 1000')]
    assert "Willow extra" in hits and "Drug b7" in hits and "Drug 3" not in hits
    assert nx.check(deep=True)["ok"] is True
    answers = _answers(nx, kip)
    with nx.write_session() as session:                     # every block rewritten narrow
        for table in ("lex", gram_index.TABLE):
            aux = session.txn.aux(table)
            for key, raw in list(aux.scan()):
                if (table == "lex" and key[:1] == b"t") or (table != "lex" and key[:1] != b"\0"):
                    aux.put(key, postings.encode(*postings.decode(raw)))
    nx = disk_nexus()
    with nx.store.read() as txn:
        assert not any(v[0] >= packed.TAG for _, v in txn.aux("lex").scan(b"t"))
    assert _answers(nx, kip) == answers
    assert nx.check(deep=True)["ok"] is True


def test_the_full_blocks_of_a_list_share_one_layout_and_decode_the_same():
    """`encode_many` with `runs`: a list's full blocks take the widest layout any of them
    needs (a block of one weight written with another's dictionary, 1-byte deltas as
    another's 2), so that a long list decodes in few numpy passes; the postings are the
    same."""
    rng = random.Random(4)
    ids, weights, groups, starts, runs = [], [], [], [], []
    for run in range(6):
        top = rng.randrange(1, 2**20)
        for b in range(rng.randint(1, 4)):
            c = postings.BLOCK if rng.random() < 0.8 else rng.randint(1, 127)
            gap = rng.choice([2, 300])
            block = [top + 1 + gap * i for i in range(c)]
            top = block[-1]
            starts.append(len(ids))
            runs.append(run)
            ids += block
            nw = rng.choice([1, 3, 12, 40])
            weights += [float(1 + i % nw) for i in range(c)]
            groups += [rng.choice([7, 7, 7, 9]) if b % 2 else 7 for _ in range(c)]
    cols = (np.asarray(ids, dtype=np.uint64), np.asarray(weights, dtype=np.float32),
            np.asarray(groups, dtype=np.uint32), np.asarray(starts, dtype=np.int64))
    values = packed.encode_many(*cols, np.asarray(runs))
    alone = packed.encode_many(*cols)
    for run in set(runs):
        heads = {values[i][:2] for i, r in enumerate(runs)
                 if r == run and values[i][1] == postings.BLOCK}
        assert len(heads) <= 1
    for a, b in zip(values, alone):
        for x, y in zip(postings.decode(a), postings.decode(b)):
            assert x.dtype == y.dtype and x.tolist() == y.tolist()
    got = packed.decode_many(values)
    assert got[0].tolist() == ids
    assert got[1].tolist() == np.asarray(weights, np.float32).astype(np.float16).tolist()
    assert got[2].tolist() == groups
    assert sum(map(len, values)) >= sum(map(len, alone))


def test_a_small_append_to_a_packed_block_writes_the_narrow_block_of_all_its_postings():
    rng = random.Random(8)
    for _ in range(200):
        c = rng.randint(1, 127)
        k = rng.randint(1, 128 - c)
        ids = sorted(rng.sample(range(1, 10**6), c + k))
        w = [rng.choice([0.5, 1.25, rng.random() * 2]) for _ in ids]
        g = [rng.choice([3, 3, rng.randrange(300)]) for _ in ids]
        raw = packed.encode_many(np.asarray(ids[:c], dtype=np.uint64),
                                 np.asarray(w[:c], dtype=np.float32),
                                 np.asarray(g[:c], dtype=np.uint32), np.zeros(1, np.int64))[0]
        ops = {n: (a, b) for n, a, b in zip(ids[c:], w[c:], g[c:])}
        want = postings.encode(np.asarray(ids, dtype=np.uint64), np.asarray(w, dtype=np.float32),
                               np.asarray(g, dtype=np.uint32))
        assert postings._spliced(raw, c, ids[c:], ops) == want


def test_runs_of_one_layout_with_another_block_anywhere_decode_in_block_order():
    rng = random.Random(11)
    for c, w_pool, g_pool in ((128, 3, 2), (128, 9, 1), (126, 4, 17), (33, 200, 4)):
        blocks = []
        for b in range(6):
            ids = np.arange(1000 * b, 1000 * b + 3 * c, 3, dtype=np.uint64)
            w = np.asarray([rng.choice(range(w_pool)) / 7 for _ in range(c)], np.float32)
            g = np.asarray([rng.choice(range(g_pool)) for _ in range(c)], np.uint32)
            blocks.append((ids, w, g))
        values = [packed.encode_many(*b, np.zeros(1, np.int64))[0] for b in blocks]
        odd = packed.encode_many(np.arange(50_000, 50_005, dtype=np.uint64),
                                 np.ones(5, np.float32), np.ones(5, np.uint32),
                                 np.zeros(1, np.int64))[0]
        heads = {v[:2] for v in values}
        assert len(heads) == 1 and odd[:2] not in heads
        for at in (6, 5, 3, 0):                     # at the end (a list's last block), inside
            raws = values[:at] + [odd] + values[at:]
            want = [np.concatenate([postings.decode(r)[i] for r in raws]) for i in range(3)]
            got = packed.decode_many(raws)
            for x, y in zip(got, want):
                assert x.dtype == y.dtype
                assert x.view(np.uint8).tobytes() == y.view(np.uint8).tobytes()
        got = packed.decode_many(values)            # all of one layout
        assert got[0].tolist() == np.concatenate([b[0] for b in blocks]).tolist()
        assert got[1].view(np.uint16).tolist() == np.concatenate(
            [b[1] for b in blocks]).astype(np.float16).view(np.uint16).tolist()
        assert got[2].tolist() == np.concatenate([b[2] for b in blocks]).tolist()
