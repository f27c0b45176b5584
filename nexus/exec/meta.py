"""META: every DESCRIBE form and SEARCH (spec §5, CONTRACT §8).

`run_meta(ctx, command) -> (result, next_cursor)` runs in the read transaction the API
opened. This module owns the result shapes, the paging of the DESCRIBE lists and the
`usage` statistics of one type or predicate; ranking for PRIMER is `nexus.exec.primer`'s and
retrieval for SEARCH is `nexus.search`'s.

Decisions where the spec is silent:
* Lists (`DOMAINS`, `CONCEPT TYPES`, `PROPOSITION TYPES`) are sorted by name (code point
  order) and paged by keyset: the opaque cursor holds the list kind and the last name
  returned, so pages stay consistent while definitions are added. A cursor from another
  list or query → KIP_1001. Without LIMIT the whole list is returned.
* `usage` is computed from a bounded sample (the first USAGE_SAMPLE instances or links in
  id order, at most USAGE_LINKS links per instance and direction), so DESCRIBE stays fast on
  any size of type; `instance_count` / `link_count` are exact. Lists are ordered by how often
  each key / predicate / type was seen, most frequent first. The answer is kept per snapshot
  (`_DESCRIBED`): the sample still reads ~500 elements and their links, 6-8 ms at 100k.
* SEARCH `LIMIT` above `Limits.max_search_limit` is capped to it; an unknown WITH TYPE
  matches nothing (like FIND, CONTRACT §4); a blank term returns [].
"""
from __future__ import annotations

import base64
import copy
import difflib
import json
from collections import Counter
from itertools import islice
from typing import Any

from ..bounded import WeightedLRU
from ..errors import ErrorCode, KipError
from ..store.protocol import ConceptHead
from ..syntax import ast as A
from .context import ExecContext
from .registry import executes
from .values import definition_json, element_json

CONCEPT_TYPE, PROPOSITION_TYPE, DOMAIN = "$ConceptType", "$PropositionType", "Domain"
USAGE_SAMPLE = 500
USAGE_LINKS = 50
PREDICATE_SAMPLE = 2000
# DESCRIBE CONCEPT TYPE / PROPOSITION TYPE answers by (store, snapshot, form, name): one
# snapshot gives one answer, and the usage sample was the dearest read of a mix of agent
# reads over HTTP (bench/http_bench.py --mix: 6-8 ms against tens of µs for a FIND).
_DESCRIBED: WeightedLRU[dict] = WeightedLRU(16 << 20, 4096)


@executes(A.Search, A.DescribePrimer, A.DescribeDomains, A.DescribeConceptTypes,
          A.DescribePropositionTypes, A.DescribeConceptType, A.DescribePropositionType)
def run_meta(ctx: ExecContext, command: A.Command, params: Any = None
             ) -> tuple[Any, str | None]:
    txn = ctx.txn
    if isinstance(command, A.Search):
        return _search(ctx, command), None
    if isinstance(command, A.DescribePrimer):
        from .primer import describe_primer
        return describe_primer(ctx), None
    if isinstance(command, A.DescribeDomains):
        return _page(txn, "domains", DOMAIN, command, objects=True)
    if isinstance(command, A.DescribeConceptTypes):
        return _page(txn, "concept_types", CONCEPT_TYPE, command, objects=False)
    if isinstance(command, A.DescribePropositionTypes):
        return _page(txn, "proposition_types", PROPOSITION_TYPE, command, objects=False)
    if isinstance(command, A.DescribeConceptType):
        return _described(txn, _describe_type, _string(command.name, "type name")), None
    if isinstance(command, A.DescribePropositionType):
        return _described(txn, _describe_predicate, _string(command.name, "predicate")), None
    raise KipError(ErrorCode.KIP_4003,
                   f"run_meta got a non-META command: {type(command).__name__}")


# --- values ------------------------------------------------------------------------------

def _value(v: Any) -> Any:
    return v.value if isinstance(v, A.Literal) else v


def _string(v: Any, what: str) -> str:
    value = _value(v)
    if not isinstance(value, str):
        raise KipError(ErrorCode.KIP_1001, f"The {what} must be a string",
                       f"Write the {what} as a quoted string.")
    return value


def _positive(v: Any, what: str = "LIMIT") -> int | None:
    value = _value(v)
    if value is None:
        return None
    if type(value) is not int or value < 1:
        raise KipError(ErrorCode.KIP_1001, f"{what} must be a positive integer",
                       f"Write {what} n with n ≥ 1.")
    return value


# --- lists -------------------------------------------------------------------------------

def _page(txn: Any, list_kind: str, type_name: str, command: Any, *, objects: bool
          ) -> tuple[list, str | None]:
    limit = _positive(command.limit)
    after = _decode_cursor(_value(command.cursor), list_kind) if command.cursor else None
    tid = txn.symbol_id(type_name)
    heads = [] if tid is None else sorted(
        (txn.known_head(n) for n in txn.concepts_of_type(tid)), key=lambda h: (h.name, h.n))
    if after is not None:
        heads = [h for h in heads if (h.name, h.n) > after]
    more = limit is not None and len(heads) > limit
    if limit is not None:
        heads = heads[:limit]
    result = [definition_json(txn, h) if objects else h.name for h in heads]
    cursor = _encode_cursor(list_kind, heads[-1]) if more else None
    return result, cursor


def _encode_cursor(list_kind: str, head: ConceptHead) -> str:
    raw = json.dumps({"m": list_kind, "a": head.name, "n": head.n}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_cursor(token: Any, list_kind: str) -> tuple[str, int]:
    bad = KipError(ErrorCode.KIP_1001, "Invalid CURSOR: it does not belong to this DESCRIBE",
                   "Pass the `next_cursor` returned by the previous page of the same "
                   "DESCRIBE command, or drop CURSOR to start over.")
    if not isinstance(token, str) or len(token) > 2048:
        raise bad
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        kind, name, n = data["m"], data["a"], data["n"]
    except (ValueError, KeyError, TypeError):
        raise bad from None
    if kind != list_kind or not isinstance(name, str) or type(n) is not int:
        raise bad
    return name, n


# --- one type / predicate ----------------------------------------------------------------

def _definition(txn: Any, meta_type: str, name: str) -> ConceptHead:
    mt = txn.symbol_id(meta_type)
    n = txn.concept_id(mt, name) if mt is not None else None
    if n is None:
        raise _not_defined(txn, meta_type, name)
    return txn.known_head(n)


def _not_defined(txn: Any, meta_type: str, name: str) -> KipError:
    is_concept = meta_type == CONCEPT_TYPE
    what = "concept type" if is_concept else "proposition type"
    listing = "DESCRIBE CONCEPT TYPES" if is_concept else "DESCRIBE PROPOSITION TYPES"
    names = _names_of(txn, meta_type)
    folded = [x for x in names if x.casefold() == name.casefold()]
    data: dict[str, Any] = {"name": name}
    if folded:
        hint = (f"Did you mean \"{folded[0]}\"? {what.capitalize()} names are "
                f"case-sensitive.")
        data["suggestions"] = folded[:5]
    else:
        other = PROPOSITION_TYPE if is_concept else CONCEPT_TYPE
        ot = txn.symbol_id(other)
        if ot is not None and txn.concept_id(ot, name) is not None:
            form = "PROPOSITION TYPE" if is_concept else "CONCEPT TYPE"
            hint = (f"\"{name}\" is a {'proposition' if is_concept else 'concept'} type: "
                    f"use DESCRIBE {form} \"{name}\".")
        else:
            close = difflib.get_close_matches(name, names, n=3, cutoff=0.75)
            if close:
                hint = "Did you mean " + " or ".join(f"\"{c}\"" for c in close) + "?"
                data["suggestions"] = close
            else:
                hint = f"Use {listing} to see what is defined."
    return KipError(ErrorCode.KIP_3002, f"The {what} \"{name}\" is not defined", hint,
                    data=data)


def _names_of(txn: Any, meta_type: str) -> list[str]:
    mt = txn.symbol_id(meta_type)
    if mt is None:
        return []
    return [txn.known_head(n).name for n in islice(txn.concepts_of_type(mt), 100_000)]


def _described(txn: Any, describe: Any, name: str) -> dict:
    """`describe(txn, name)`, kept per committed snapshot (`_DESCRIBED`); the caller gets
    its own copy. A write transaction (no snapshot id) describes afresh."""
    snap = txn.snapshot_id()
    if snap is None:
        out: dict = describe(txn, name)
        return out
    key = (txn.store_token(), snap, describe.__name__, name)
    hit = _DESCRIBED.get(key)
    if hit is None:
        hit = describe(txn, name)
        _DESCRIBED.put(key, hit, 512 + len(json.dumps(hit, default=str)))
    return copy.deepcopy(hit)


def _describe_type(txn: Any, name: str) -> dict:
    head = _definition(txn, CONCEPT_TYPE, name)
    out = definition_json(txn, head)
    tid = txn.symbol_id(name)
    keys: Counter = Counter()
    out_p: Counter = Counter()
    in_p: Counter = Counter()
    sample = list(islice(txn.concepts_of_type(tid), USAGE_SAMPLE)) if tid is not None else []
    for n in sample:
        keys.update(txn.attributes(n).keys())
        for p, _, _ in islice(txn.out_links(n), USAGE_LINKS):
            out_p[p] += 1
        for p, _, _ in islice(txn.in_links(n), USAGE_LINKS):
            in_p[p] += 1
    text = txn.symbol_text
    out["usage"] = {
        "instance_count": txn.count_type(tid) if tid is not None else 0,
        "sample_size": len(sample),
        "attribute_keys": _ranked(keys),
        "outgoing_predicates": _ranked(Counter({text(p): c for p, c in out_p.items()})),
        "incoming_predicates": _ranked(Counter({text(p): c for p, c in in_p.items()})),
    }
    return out


def _describe_predicate(txn: Any, name: str) -> dict:
    head = _definition(txn, PROPOSITION_TYPE, name)
    out = definition_json(txn, head)
    pid = txn.symbol_id(name)
    subj: Counter = Counter()
    obj: Counter = Counter()
    sample = list(islice(txn.links_of_predicate(pid), PREDICATE_SAMPLE)) \
        if pid is not None else []
    for s, o, _ in sample:
        subj[_type_of(txn, s)] += 1
        obj[_type_of(txn, o)] += 1
    out["usage"] = {
        "link_count": txn.count_predicate(pid) if pid is not None else 0,
        "sample_size": len(sample),
        "subject_types": _ranked(subj),
        "object_types": _ranked(obj),
    }
    return out


def _type_of(txn: Any, n: int) -> str:
    head = txn.head(n)
    if head is None:
        return "?"
    return txn.symbol_text(head.type_id) if type(head) is ConceptHead else "PropositionLink"


def _ranked(counter: Counter) -> list[str]:
    return [k for k, _ in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))]


# --- SEARCH ------------------------------------------------------------------------------

def _search(ctx: Any, command: A.Search) -> list[dict]:
    txn = ctx.txn
    limits = ctx.limits
    text = _string(command.term, "search term")
    type_name = _string(command.type, "type") if command.type is not None else None
    limit = _positive(command.limit) or limits.default_search_limit
    limit = min(limit, limits.max_search_limit)
    mode = _search_mode(command.mode)
    threshold = _search_threshold(command.threshold)
    service = ctx.search
    if service is None:
        raise KipError(ErrorCode.KIP_4003, "SEARCH is not available: no search index",
                       "Open the nexus through Nexus.open(), which attaches the index.")
    served, hint = service.mode_served(mode)
    if hint is not None:
        ctx.hint = hint         # the response carries it beside the result (CONTRACT §10)
    if len(text) > limits.max_search_chars:
        raise KipError(ErrorCode.KIP_4002,
                       f"The SEARCH text is {len(text)} characters, over the limit of "
                       f"{limits.max_search_chars}",
                       "Search with a name or a few words (SEARCH matches names, aliases and "
                       "terms); use FIND with CONTAINS to test long texts.")
    if not text.strip():
        return []
    target = "CONCEPT" if command.target.upper() == "CONCEPT" else "PROPOSITION"
    hits = service.search(txn, target, text, type_name, limit, check=ctx.check_deadline,
                          deadline=ctx.deadline, mode=served, threshold=threshold)
    out = []
    for n, score in hits:
        obj = element_json(txn, txn.known_head(n))
        meta = obj.get("metadata") or {}
        meta["_score"] = score
        obj["metadata"] = meta
        out.append(obj)
    return out


# --- RC11 SEARCH options (spec §5.2) ------------------------------------------------------

SEARCH_MODES = ("keyword", "semantic", "hybrid")


def _search_mode(v: Any) -> str | None:
    """MODE's value, checked (None: omitted)."""
    if v is None:
        return None
    mode = _string(v, "MODE")
    if mode not in SEARCH_MODES:
        shown = mode if len(mode) <= 40 else mode[:40] + "…"
        raise KipError(ErrorCode.KIP_1001, f"Unknown SEARCH MODE {shown!r}",
                       'Use MODE "keyword", "semantic" or "hybrid" (lowercase), or leave '
                       "MODE out for the engine's default.")
    return mode


def _search_threshold(v: Any) -> float:
    """THRESHOLD's value, a number in [0, 1] (0.0: omitted)."""
    value = _value(v) if v is not None else 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 0.0 <= value <= 1.0:
        raise KipError(ErrorCode.KIP_1001,
                       f"THRESHOLD must be a number from 0 to 1, got "
                       f"{json.dumps(value)[:40]}",
                       "Write THRESHOLD 0.5 (hits whose _score is below it are dropped), or "
                       "pass a number in [0, 1] as its parameter.")
    return float(value)
