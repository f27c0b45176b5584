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
one: it lists the first LINK_NAMES of a name and skips the rest); a delete that leaves a
name fewer than LINK_NAMES listed while the graph holds more links of it lists its lowest
LINK_NAMES again from the graph (`links_of_predicate` of the predicates with that name:
one read of their links, only then).
"""
from __future__ import annotations

import struct
from itertools import islice
from typing import Any, Iterable

from .lexical_terms import cached_norm_name

LINK_NAMES = 512        # a name's lowest link ids listed (≥ query.NAME_CAP × FILTER_FACTOR)
_NAMEV = struct.Struct("<IB")
_LINK_NAME = b"np"


def capped(txn: Any, lex: Any, puts: list[tuple[bytes, bytes]],
           new: list[tuple[bytes, bytes]], cleared: Iterable[str] = ()
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
        listed = [k[-8:] for k, _ in islice(lex.scan(prefix), LINK_NAMES)]
        count = len(listed)
        if count < LINK_NAMES:
            top = listed[-1] if listed else b""
        else:
            top = next(lex.scan(prefix, reverse=True))[0][-8:]
        have = set(listed)
        for key, value, which in sorted(per[prefix]):
            idb = key[-8:]
            if idb < top or count < LINK_NAMES or idb in have:
                out[which].append((key, value))
                if idb not in have:
                    have.add(idb)
                    count += 1
                    top = max(top, idb)
        if count < LINK_NAMES:
            out[0].extend(_refill(txn, prefix, have))
    return out


def _refill(txn: Any, prefix: bytes, have: set[bytes]) -> list[tuple[bytes, bytes]]:
    """The keys of the lowest LINK_NAMES links named by `prefix` that `have` lacks: none
    when the graph holds no more links of that name than are listed."""
    nn = prefix[2:-1].decode()
    preds = [p for p in txn.link_predicates() if cached_norm_name(txn.symbol_text(p)) == nn]
    if sum(txn.count_predicate(p) for p in preds) <= len(have):
        return []
    links = sorted((n, p) for p in preds for _, _, n in txn.links_of_predicate(p))
    out = []
    for n, p in links[:LINK_NAMES]:
        idb = n.to_bytes(8, "big")
        if idb not in have:
            out.append((prefix + idb, _NAMEV.pack(p, 0)))
    return out


def first_per_name(names: list[str], limit: int = LINK_NAMES) -> list[int]:
    """The positions of the first `limit` of each distinct value of `names` (a load's
    links in id order, by their names): the only ones of a chunk `capped` can keep, since
    its ids are above every listed one."""
    seen: dict[str, int] = {}
    out = []
    for i, nn in enumerate(names):
        c = seen.get(nn, 0)
        if c < limit:
            seen[nn] = c + 1
            out.append(i)
    return out


__all__ = ["LINK_NAMES", "capped", "first_per_name"]
