"""SEARCH answers of two trees or two databases compared, scores included (issue 18).

    python bench/lexical_same.py answers --db DIR --data bench/data/n100000 --out A.json
    python bench/lexical_same.py capnames --db DIR      # this tree's link name layout
    python bench/lexical_same.py marks --db DIR         # link entries as MARKs
    python bench/lexical_same.py tables --db DIR        # SHA-1 of the lexical tables
    python bench/lexical_same.py rows --db DIR          # SHA-256 of lex, lexdoc, gram
    python bench/lexical_same.py rows --db A --db B     # ... of two, exit 1 if they differ
    python bench/lexical_same.py postings --db A --db B # the same, posting blocks decoded
    python bench/lexical_same.py diff A.json B.json

`answers` opens an LMDB nexus read-only in spirit (`semantic="none"`, nothing written) and
runs a fixed query set made from the data set (`--seed`, default 7; the same for every
tree): SEARCH CONCEPT over exact names, prefixes, one-edit typos, single words of names and
descriptions, the type names, and each with WITH TYPE; SEARCH PROPOSITION over predicate
names, their prefixes and words, "subject predicate", end names, each with WITH TYPE its
predicate. It writes [query, [[id, score], ...]] per query (LIMIT 10 and 40).

`capnames` rewrites a database written by an earlier tree (every link's name key) into
this tree's layout (`nexus.search.lexical_names`: a name's lowest LINK_NAMES links, and its mark) by
deleting the keys past them — the same vector index on both sides, so that a comparison
tests the lexical tables alone. `marks` does the same for the link entries: each one in
the link layout (its texts) becomes MARK (`nexus.search.lexical_entry`). `tables` prints each lexical table's entry count and the
SHA-1 of its keys and values: a load by this tree equals the rewritten earlier one when
they match. `rows` prints the entry count and SHA-256 of every key and value of `aux.lex`,
`aux.lexdoc` and `aux.gram` (the rows a bulk load's lexical and gram derivation writes), of
one database or of two (then it exits 1 unless all three tables are byte-identical): the
check that a faster derivation writes the same bytes (a load by the base tree and one by
the changed tree, `python -m bench.loader load ... --db`). `postings` is `rows` with every
posting list (`lex`'s `t` keys, `gram`'s lists) decoded by this tree's `postings` and
hashed as a whole list (prefix, ids, the weights' f16 bits, groups) instead of its blocks'
bytes, and every concept's forward entry in the derived layout hashed as the full layout it
derives to from the graph: two databases whose blocks are in different layouts, or whose
concept entries are stored in full in one and derived in the other, compare equal when
they hold the same postings, the same terms and weights, and the same other rows. `diff` prints the queries whose answers differ and exits 1 if any does.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
from collections import defaultdict
from contextlib import contextmanager
from itertools import islice
from typing import Any, Iterator

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.join(_HERE, ".."))


def _rows(path: str, limit: int):
    with open(path) as f:
        for line in islice(f, limit):
            yield json.loads(line)


def _typo(rng: random.Random, s: str) -> str:
    if len(s) < 4:
        return s + "x"
    i = rng.randrange(1, len(s) - 1)
    op = rng.randrange(3)
    if op == 0:
        return s[:i] + s[i + 1:]                      # drop
    if op == 1:
        return s[:i] + s[i + 1] + s[i] + s[i + 2:]    # swap
    return s[:i] + "e" + s[i + 1:]                    # replace


def queries(data: str, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    concepts = list(_rows(os.path.join(data, "concepts.jsonl"), 20_000))
    links = list(_rows(os.path.join(data, "propositions.jsonl"), 20_000))
    picks = rng.sample(concepts, 40)
    out: list[str] = []

    def q(kind: str, text: str, typ: str | None = None, limit: int = 10) -> None:
        text = text.replace('"', "")
        with_type = f' WITH TYPE "{typ}"' if typ else ""
        out.append(f'SEARCH {kind} "{text}"{with_type} LIMIT {limit}')

    for c in picks:
        name, typ = c["name"], c["type"]
        q("CONCEPT", name)
        q("CONCEPT", name[:max(3, len(name) // 2)])
        q("CONCEPT", _typo(rng, name))
        q("CONCEPT", name.split()[0], limit=40)
        q("CONCEPT", name[:4], typ)
        desc = (c.get("attributes") or {}).get("description") or ""
        if desc:
            q("CONCEPT", rng.choice(desc.split()))
    for typ in sorted({c["type"] for c in concepts}):
        q("CONCEPT", typ)
        q("CONCEPT", typ[:3], typ, limit=40)
    preds = sorted({p["predicate"] for p in links})
    for p in preds:
        q("PROPOSITION", p)
        q("PROPOSITION", p, limit=40)
        q("PROPOSITION", p[:3])
        q("PROPOSITION", p[:4], p, limit=40)
        q("PROPOSITION", p.replace("_", " "))
        q("PROPOSITION", p.split("_")[-1], limit=40)
        q("PROPOSITION", _typo(rng, p))
        for other in preds[:3]:
            q("PROPOSITION", p[:2], other, limit=40)
    for link in rng.sample(links, 40):
        s, p, o = link["subject"]["name"], link["predicate"], link["object"]["name"]
        q("PROPOSITION", f"{s} {p.replace('_', ' ')}")
        q("PROPOSITION", f"{s} {o}")
        q("PROPOSITION", o, p)
    return out


def answers(db: str, data: str, seed: int) -> list:
    from nexus.api import Nexus
    nx = Nexus.open(db, durable=False, semantic="none")
    try:
        got = []
        for text in queries(data, seed):
            r = nx.execute_kip_readonly({"command": text, "parameters": {}})
            hits = r.get("result") or []
            got.append([text, [[h.get("id"), h["metadata"]["_score"]] for h in hits]
                        if "error" not in r else r["error"].get("code")])
        return got
    finally:
        nx.close()


@contextmanager
def _rewriting(db: str) -> Iterator[Any]:
    """A write session over `db` (its search index's tables rewritten in place), the
    database closed after."""
    from nexus.api import Nexus
    nx = Nexus.open(db, durable=False, semantic="none")
    try:
        with nx.write_session() as session:
            yield session
    finally:
        nx.close()


def capnames(db: str) -> int:
    """Delete every link name key past its name's lowest LINK_NAMES; returns how many."""
    from nexus.search.lexical_names import LINK_NAMES
    with _rewriting(db) as session:
        lex = session.txn.aux("lex")
        per: dict[bytes, list[bytes]] = defaultdict(list)
        for key, _ in lex.scan(b"np"):
            per[key[:-8]].append(key)
        gone = 0
        for prefix, keys in per.items():
            for key in keys[LINK_NAMES:]:
                lex.delete(key)
                gone += 1
            if len(keys) >= LINK_NAMES:     # the mark of a name with as many listed
                lex.put(b"Lp" + prefix[2:-1], b"")
    return gone


def marks(db: str) -> int:
    """Rewrite every link entry in the link layout as MARK; returns how many."""
    from nexus.search.lexical_entry import LINK_HEADER, MARK
    with _rewriting(db) as session:
        doc = session.txn.aux("lexdoc")
        keys = [k for k, v in doc.scan() if v[:1] == LINK_HEADER]
        session.txn.aux_put_many("lexdoc", [(k, MARK) for k in keys])
    return len(keys)


def tables(db: str) -> dict:
    import lmdb
    env = lmdb.open(db, readonly=True, lock=False, max_dbs=64)
    out = {}
    try:
        for name in ("aux.lex", "aux.lexdoc"):
            h = hashlib.sha1()
            count = 0
            with env.begin(db=env.open_db(name.encode(), create=False)) as txn:
                for k, v in txn.cursor():
                    h.update(len(k).to_bytes(2, "big") + k + len(v).to_bytes(4, "big") + v)
                    count += 1
            out[name] = [count, h.hexdigest()]
    finally:
        env.close()
    return out


ROW_TABLES = ("aux.lex", "aux.lexdoc", "aux.gram")


def _row_tables(db: str) -> Iterator[tuple[str, Any]]:
    """(name, its rows in key order as (key, value), or None when the table is absent)
    for each of ROW_TABLES, read from `db` (opened read-only, closed after)."""
    import lmdb
    env = lmdb.open(db, readonly=True, lock=False, max_dbs=64)
    try:
        for name in ROW_TABLES:
            try:
                handle = env.open_db(name.encode(), create=False)
            except lmdb.NotFoundError:
                yield name, None
                continue
            with env.begin(db=handle) as txn:
                yield name, txn.cursor()
    finally:
        env.close()


def rows(db: str) -> dict:
    """Per table of ROW_TABLES: [entries, SHA-256 of its keys and values in key order]
    (absent table: [0, None])."""
    out: dict = {}
    for name, cursor in _row_tables(db):
        if cursor is None:
            out[name] = [0, None]
            continue
        h = hashlib.sha256()
        count = 0
        for k, v in cursor:
            h.update(len(k).to_bytes(4, "big") + k + len(v).to_bytes(4, "big") + v)
            count += 1
        out[name] = [count, h.hexdigest()]
    return out


def _posting_prefix(table: str, key: bytes) -> bytes | None:
    """The list prefix of a posting block's key in `table`, None for other rows."""
    if table == "aux.lex" and key[:1] == b"t":
        return key[:-8]
    if table == "aux.gram" and key[:1] != b"\0":
        return key[:-8]
    return None


def decoded_rows(db: str) -> dict:
    """`rows` with posting lists decoded (module doc): per table [rows, lists, postings,
    SHA-256]."""
    import numpy as np

    from nexus.search import postings
    out: dict = {}
    for name, cursor in _row_tables(db):
        if cursor is None:
            out[name] = [0, 0, 0, None]
            continue
        if name == "aux.lexdoc":        # (hashed with its entries expanded, below)
            out[name] = None
            continue
        h = hashlib.sha256()
        count = lists = total = 0
        held: list[bytes] = []
        prefix: bytes | None = None

        def flush() -> None:
            nonlocal lists, total
            parts = [postings.decode(raw) for raw in held]
            ids, weights, groups = (np.concatenate([p[i] for p in parts])
                                    for i in range(3))
            h.update(b"L" + len(prefix or b"").to_bytes(4, "big") + (prefix or b"")
                     + len(ids).to_bytes(4, "big") + ids.astype("<u8").tobytes()
                     + weights.astype("<f2").tobytes() + groups.astype("<u4").tobytes())
            lists += 1
            total += len(ids)

        for k, v in cursor:
            count += 1
            p = _posting_prefix(name, k)
            if held and p != prefix:
                flush()
                held = []
            if p is not None:
                prefix = p
                held.append(v)
                continue
            h.update(len(k).to_bytes(4, "big") + k + len(v).to_bytes(4, "big") + v)
        if held:
            flush()
        out[name] = [count, lists, total, h.hexdigest()]
    out["aux.lexdoc"] = _lexdoc_expanded(db)
    return out


def _lexdoc_expanded(db: str) -> list:
    """[rows, 0, 0, SHA-256] of `aux.lexdoc` with every concept entry in the derived
    layout (`nexus.search.lexical_entry.derived_bytes`) hashed as the full layout its
    terms derive to from the graph (as its pending copy holds it): a database whose
    concept entries are derived compares equal to one that stores them in full when each
    derives to the stored one byte for byte."""
    from nexus.api import Nexus
    from nexus.search.lexical import decode
    from nexus.search.lexical_entry import is_derived, pending_copy
    nx = Nexus.open(db, durable=False, semantic="none")
    try:
        with nx.store.read() as txn:
            h = hashlib.sha256()
            count = 0
            for k, v in txn.aux("lexdoc").scan():
                if is_derived(v):
                    v = pending_copy(v, decode(txn, int.from_bytes(k, "big"), v))
                h.update(len(k).to_bytes(4, "big") + k + len(v).to_bytes(4, "big") + v)
                count += 1
    finally:
        nx.close()
    return [count, 0, 0, h.hexdigest()]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["answers", "capnames", "marks", "tables", "rows",
                                     "postings", "diff"])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--db", action="append")
    ap.add_argument("--data", default="bench/data/n10000")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.what == "answers":
        got = answers(a.db[0], a.data, a.seed)
        with open(a.out, "w") as f:
            json.dump(got, f)
        print(json.dumps({"queries": len(got), "hits": sum(len(r) for _, r in got
                                                             if isinstance(r, list))}))
    elif a.what == "capnames":
        print(json.dumps({"deleted": capnames(a.db[0])}))
    elif a.what == "marks":
        print(json.dumps({"rewritten": marks(a.db[0])}))
    elif a.what == "tables":
        print(json.dumps(tables(a.db[0])))
    elif a.what in ("rows", "postings"):
        got = [(rows if a.what == "rows" else decoded_rows)(db) for db in a.db]
        for db, r in zip(a.db, got):
            print(json.dumps({"db": db, **r}))
        if len(got) > 1:
            # (`postings`: the row counts differ with the blocks' layout only if blocks
            # are split differently; the lists, postings and hashes must not)
            same = all({t: v[1:] if a.what == "postings" else v for t, v in r.items()}
                       == {t: v[1:] if a.what == "postings" else v
                           for t, v in got[0].items()} for r in got[1:])
            print(json.dumps({"same": same}))
            return 0 if same else 1
    else:
        x, y = (json.load(open(p)) for p in a.files)
        bad = [(qa, ra, rb) for (qa, ra), (qb, rb) in zip(x, y) if qa != qb or ra != rb]
        for qa, ra, rb in bad[:20]:
            print(qa, ra, rb, sep="\n  ")
        print(json.dumps({"queries": len(x), "differ": len(bad) + abs(len(x) - len(y))}))
        return 1 if bad or len(x) != len(y) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
