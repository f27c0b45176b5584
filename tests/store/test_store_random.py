"""Random operation sequences applied to both stores must leave them byte-identical, with
write-transaction reads agreeing along the way and pinned readers keeping their snapshot."""
from __future__ import annotations

import random

import pytest

from nexus.errors import ErrorCode, KipError
from nexus.store import LmdbGraphStore, MemoryGraphStore


def random_write(rng: random.Random, w, log: list) -> None:
    """One random write transaction's worth of operations; `log` collects what was read."""
    types = [w.intern(t) for t in ("A", "B", "C")]
    preds = [w.intern(p) for p in ("p", "q")]
    for _ in range(rng.randint(1, 12)):
        ids = list(w.elements())
        concepts = [n for n in ids if hasattr(w.head(n), "name")]
        op = rng.random()
        if op < 0.35 or len(concepts) < 2:
            t = rng.choice(types)
            name = rng.choice(["x", "y", "z", "x\x00", "é" * rng.randint(1, 300)])
            if w.concept_id(t, name) is None:
                w.create_concept(w.new_id(), t, name, {"v": rng.randint(0, 9)}
                                 if rng.random() < .5 else {}, {})
        elif op < 0.6:
            s, o = rng.choice(ids), rng.choice(concepts)
            p = rng.choice(preds)
            if w.link_id(s, p, o) is None:
                w.create_link(w.new_id(), s, p, o, {}, {"m": rng.random()})
        elif op < 0.75:
            n = rng.choice(ids)
            links = list(w.out_links(n)) + list(w.in_links(n))
            if not links:
                w.delete(n)
            else:
                w.delete(rng.choice(links)[2])
        elif op < 0.85:
            w.set_attributes(rng.choice(ids), {"r": rng.randint(0, 3)} if rng.random() < .7
                             else {})
        else:
            t = w.aux("lex")
            key = bytes([rng.randint(0, 3), rng.randint(0, 3)])
            if rng.random() < 0.6:
                t.put(key, b"v%d" % rng.randint(0, 9))
            else:
                t.delete(key)
        log.append((sorted(w.elements()), [list(w.out_links(n)) for n in w.elements()],
                    [list(w.concepts_of_type(t)) for t in types],
                    [list(w.links_of_predicate(p)) for p in preds],
                    list(w.aux("lex").scan()), list(w.aux("lex").scan(b"\x01", reverse=True)),
                    w.count_concepts(), w.count_links()))


@pytest.mark.parametrize("seed", range(6))
def test_random_sequences_agree(tmp_path, seed):
    rng_disk, rng_mem = random.Random(seed), random.Random(seed)
    disk = LmdbGraphStore(str(tmp_path / "db"), durable=False)
    mem = MemoryGraphStore()
    pinned = []
    try:
        for step in range(25):
            logs = []
            for store, rng in ((disk, rng_disk), (mem, rng_mem)):
                log = []
                outcome = rng.random()
                try:
                    with store.write() as w:
                        random_write(rng, w, log)
                        if outcome < 0.2:
                            w.abort()
                        elif outcome < 0.3:
                            raise KipError(ErrorCode.KIP_2002, "any error aborts")
                except KipError:
                    pass
                logs.append(log)
            assert logs[0] == logs[1], f"write-txn reads differ at step {step}"
            assert disk.dump() == mem.dump(), f"stores differ after step {step}"
            if step % 5 == 0:
                r = mem.read().__enter__()
                pinned.append((r, disk.dump()))
        for r, expected in pinned:          # memory readers pinned at earlier steps
            assert list(r.aux("lex").scan()) == expected["aux.lex"]
            assert list(r.elements()) == [int.from_bytes(k, "big") for k, _ in expected["head"]]
    finally:
        for r, _ in pinned:
            r.__exit__(None, None, None)
        disk.close()
        mem.close()
