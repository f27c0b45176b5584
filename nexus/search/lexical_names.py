"""The links' name keys, kept for a name's lowest LINK_NAMES links only (`capped`).

Owns which `lex` name keys of links (`b"np" normname 0x00 id`, layout: `lexical`'s module
doc) are stored. A link's only name is its predicate's, so one predicate's links share one
name: at 100k concepts 503,863 keys under a dozen names (17.6 MB of the file). SEARCH
reads those keys only through `lexical.names_from`, which scans at most NAME_CAP ×
FILTER_FACTOR (`query`: 512) keys in (name, id) order from the query's prefix; within one
name it therefore never reaches past that name's 512 lowest ids. So the keys of a name are
kept for a *prefix* of its links in id order at least LINK_NAMES long (or all of them,
when fewer): every scan of at most LINK_NAMES keys reads the same keys as with every link
listed — the same answers. A database written before (every link listed) keeps the rule:
its lists are longer prefixes.

Keeping it: a new link is listed when its id is below the name's highest listed id, or
while the name has fewer than LINK_NAMES listed (a load's new ids are above every listed
one: it lists the first LINK_NAMES of a name and skips the rest). A name with LINK_NAMES
or more listed is marked (`b"Lp" normname`), so that a write adding a link to it reads the
mark and the last key, not LINK_NAMES keys to count them (an agent's small upsert). A delete
that leaves a marked name fewer than LINK_NAMES listed lists its lowest LINK_NAMES again
from the graph (`links_of_predicate` of the predicates with that name: one read of their
links, only then) and unmarks it when the graph has fewer. An unmarked name with fewer
than LINK_NAMES listed has every link listed; one with more (written before) is marked by
the first write that counts it.
"""
from __future__ import annotations

import struct
from itertools import islice
from typing import AbstractSet, Any

from .lexical_terms import cached_norm_name

LINK_NAMES = 512        # a name's lowest link ids listed (≥ query.NAME_CAP × FILTER_FACTOR)
_NAMEV = struct.Struct("<IB")
_LINK_NAME = b"np"
_MARK = b"Lp"           # + normname -> b"": that name has LINK_NAMES links listed or more


def capped(txn: Any, lex: Any, puts: list[tuple[bytes, bytes]],
           new: list[tuple[bytes, bytes]], cleared: AbstractSet[str] = frozenset()
           ) -> tuple[list[tuple[bytes, bytes]], list[tuple[bytes, bytes]]]:
    """`puts` and `new` (name keys and values to put, of any kind; `new`: keys without a
    value yet) less the link name keys the capped layout does not store; `puts` gets the
    keys that list again the lowest links of the names in `cleared` (link names whose keys
    this write deleted) where too few are left. Reads the listed keys of the names it is
    given (deleted keys already gone)."""
    out: tuple[list[tuple[bytes, bytes]], list[tuple[bytes, bytes]]] = ([], [])
    per: dict[bytes, list[tuple[bytes, bytes, int]]] = {}
    for which, rows in enumerate((puts, new)):
        keep = out[which]
        for key, value in rows:
            if key[:2] == _LINK_NAME:
                per.setdefault(key[:-8], []).append((key, value, which))
            else:
                keep.append((key, value))
    for nn in cleared:
        per.setdefault(_LINK_NAME + nn.encode() + b"\x00", [])
    for prefix in sorted(per):
        name = prefix[2:-1]
        mark = _MARK + name
        full = lex.get(mark) is not None
        listed: set[bytes] = set()
        if full and name.decode() not in cleared:
            count = LINK_NAMES          # (counted only when a delete may leave too few)
        else:
            listed = {k for k, _ in islice(lex.scan(prefix), LINK_NAMES)}
            count = len(listed)
        if count >= LINK_NAMES or not listed:
            last = next(lex.scan(prefix, reverse=True), None)
            top = last[0] if last else prefix
        else:
            top = max(listed)
        planned = set()
        for key, value, which in sorted(per[prefix]):
            if key <= top or count < LINK_NAMES:
                out[which].append((key, value))
                planned.add(key)
                if key not in listed:
                    count += 1
                    top = max(top, key)
        if count < LINK_NAMES and full:
            more = _refill(txn, prefix, lex, planned)
            out[0].extend(more)
            count += len(more)
        if (count >= LINK_NAMES) != full:
            if full:
                lex.delete(mark)
            else:
                out[0].append((mark, b""))
    return out


def _refill(txn: Any, prefix: bytes, lex: Any, planned: set[bytes]
            ) -> list[tuple[bytes, bytes]]:
    """The keys of the lowest LINK_NAMES links named by `prefix` that are neither listed
    nor `planned` (to be put by the same write)."""
    nn = prefix[2:-1].decode()
    have = {k for k, _ in lex.scan(prefix)} | planned
    preds = [p for p in txn.link_predicates() if cached_norm_name(txn.symbol_text(p)) == nn]
    links = sorted((n, p) for p in preds for _, _, n in txn.links_of_predicate(p))
    out = []
    for n, p in links[:LINK_NAMES]:
        key = prefix + n.to_bytes(8, "big")
        if key not in have:
            out.append((key, _NAMEV.pack(p, 0)))
    return out


__all__ = ["LINK_NAMES", "capped"]
