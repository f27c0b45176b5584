"""One execution's environment: parameter values, resolved constants and per-query memos.

Operators and FILTER callables receive `env` with every row. It resolves plan values
(literals, `:params`) once, interns type/predicate names to symbol ids once, resolves constant
clauses (`{id}`, `{type, name}`, `(id:)`) once — raising `KIP_3002` for a mandatory one that
matches nothing — and memoises decoded attributes/metadata and path walks for the life of
the execution (one snapshot, so memoising is always correct).
"""
from __future__ import annotations

import enum
from typing import Any, Final, Iterable, Mapping, Sequence

import regex

from ..errors import ErrorCode, KipError
from ..plan.logical import ConceptAtom, Group, LinkIdAtom
from ..store.pattern import Matcher, PatternMatcher
from ..store.protocol import ConceptHead, LinkHead, ReadTxn
from ..syntax import ast as A
from ..syntax import bind
from . import values
from .context import ExecContext
from .paths import walk
from .regexes import compile_regex


class _Missing(enum.Enum):
    MISSING = 0


_MISSING: Final = _Missing.MISSING       # "not memoised yet" (None is a memoised answer)
_STR_OK = frozenset((A.EXPECT_ANY, A.EXPECT_STRING, A.EXPECT_PRIMITIVE))
_MEMO_LIMIT = 200_000
_CHECK_EVERY = 2048          # work units between deadline checks (a unit is ~0.1–2 µs)


# What a stage prefetches for a chunk of rows: (row position, heads, attributes, metadata).
PrefetchSpec = list[tuple[int, bool, bool, bool]]


def prefetch_spec(paths: Iterable[A.Path], layout: list[str]) -> PrefetchSpec:
    """What reading `paths` (FILTER, FIND, ORDER BY) asks of the rows' elements: their maps
    for `.attributes`/`.metadata`, their heads for anything else (`.name`, a bare `?x`...)."""
    spec: dict[int, list[bool]] = {}
    for p in paths:
        if p.var not in layout:
            continue
        field = p.segments[0] if p.segments else "id"
        want = spec.setdefault(layout.index(p.var), [False, False, False])
        want[1 if field == "attributes" else 2 if field == "metadata" else 0] = True
    return [(i, h, a, m) for i, (h, a, m) in spec.items()]


def _matcher(txn: ReadTxn) -> Matcher | None:
    """The transaction's pattern matcher (an optional capability: a transaction without
    it, such as a view wrapping another, has none)."""
    return txn.pattern_matcher() if isinstance(txn, PatternMatcher) else None


def check_hop_range(lo: int, hi: int | None, cap: int) -> None:
    """KIP_4002 for a path range `{lo,hi}` (`hi` None: open) over the hop cap (CONTRACT §6)."""
    if (hi if hi is not None else lo) > cap:
        raise KipError(
            ErrorCode.KIP_4002,
            f"The path range {{{lo},{'' if hi is None else hi}}} exceeds the hop limit of {cap}",
            f"Bound the range to at most {cap} hops, e.g. {{1,{min(cap, 5)}}}.")


class Env:
    __slots__ = ("ctx", "txn", "params", "_values", "_sids", "_concepts", "_named", "_links",
                 "_attrs", "_metas", "_walks", "_budget", "_ticks", "_next_check", "_regexes",
                 "_link_preds", "batched", "matcher")

    def __init__(self, ctx: ExecContext, params: Mapping[str, Any]) -> None:
        self.ctx = ctx
        self.txn: ReadTxn = ctx.txn
        self.params = params
        # Memos keyed by id() of plan values and atoms (which the prepared plan keeps alive).
        self._values: dict[int, Any] = {}
        self._sids: dict[int, int | None] = {}
        self._concepts: dict[int, int | None] = {}
        self._named: dict[tuple[int, str], int | None] = {}     # prefetch_constants
        self._links: dict[int, int | None] = {}
        self._attrs: dict[int, dict[str, Any]] = {}
        self._metas: dict[int, dict[str, Any]] = {}
        self._walks: dict[tuple[int, int, int, int | None, bool], frozenset[int]] = {}
        self._budget = [ctx.limits.max_path_visits]
        self._ticks = 0
        self._next_check = _CHECK_EVERY
        self._regexes: dict[tuple[str, str], regex.Pattern[str]] = {}
        self._link_preds: list[int] | None = None
        # Whether the operators ask the store a chunk of rows at a time (nexus.exec.chunked)
        self.batched = self.txn.prefers_batches()
        # The store's one-query pattern matcher (nexus.store.pattern), when it offers one:
        # the operators then push a group's leading steps down (nexus.exec.pushdown).
        self.matcher = _matcher(self.txn) if self.batched else None

    # --- values ---------------------------------------------------------------------------
    def value(self, v: A.Value) -> Any:
        if type(v) is A.Literal:
            return v.value
        hit = self._values.get(id(v), _MISSING)
        if hit is _MISSING:
            if type(v) is A.Param and v.expect in _STR_OK:
                # The common placeholder (a string where any string will do): what
                # `bind` checks, without building a Literal.
                hit = self.params.get(v.name, _MISSING)
                if type(hit) is not str:
                    hit = bind(v, self.params).value
            else:
                hit = bind(v, self.params).value
            self._values[id(v)] = hit
        return hit

    def sid(self, v: A.Value) -> int | None:
        """Symbol id of a type/predicate value; None if nobody ever used that name."""
        hit = self._sids.get(id(v), _MISSING)
        if hit is _MISSING:
            text = self.value(v)
            hit = self.txn.symbol_id(text) if isinstance(text, str) else None
            self._sids[id(v)] = hit
        return hit

    def pids(self, vs: tuple[A.Value, ...]) -> list[int]:
        out = []
        for v in vs:
            sid = self.sid(v)
            if sid is not None and sid not in out:
                out.append(sid)
        return out

    # --- constant clauses -----------------------------------------------------------------
    def const_concept(self, atom: ConceptAtom) -> int | None:
        hit = self._concepts.get(id(atom), _MISSING)
        if hit is not _MISSING:
            return hit
        n = self._resolve_concept(atom)
        if n is None and atom.mandatory:
            raise _not_found_concept(self, atom)
        self._concepts[id(atom)] = n
        return n

    def _resolve_concept(self, atom: ConceptAtom) -> int | None:
        txn = self.txn
        if atom.id is not None:
            parsed = values.parse_id(self.value(atom.id))
            if parsed is None or parsed[0] != "C":
                return None
            head = txn.head(parsed[1])
            if not isinstance(head, ConceptHead):
                return None
            if atom.type is not None and txn.symbol_text(head.type_id) != self.value(atom.type):
                return None
            return head.n
        if atom.type is None or atom.name is None:  # pragma: no cover - not a constant
            return None
        tid = self.sid(atom.type)
        name = self.value(atom.name)
        if tid is None or not isinstance(name, str):
            return None
        hit = self._named.get((tid, name), _MISSING)
        if hit is not _MISSING:
            return hit
        return txn.concept_id(tid, name)

    def known_concept(self, atom: ConceptAtom) -> tuple[bool, int | None]:
        """(True, what `const_concept(atom)` answers) when that is known without a read
        (resolved before, or prefetched), else (False, None)."""
        hit = self._concepts.get(id(atom), _MISSING)
        if hit is not _MISSING:
            return True, hit
        if atom.id is not None or atom.type is None or atom.name is None:
            return False, None
        tid = self.sid(atom.type)
        name = self.value(atom.name)
        if tid is None or not isinstance(name, str):
            return True, None
        hit = self._named.get((tid, name), _MISSING)
        return (False, None) if hit is _MISSING else (True, hit)

    def prefetch_constants(self, root: Group, skip: frozenset[int] = frozenset()) -> None:
        """On a store whose reads are round trips: the `{type, name}` constants of every
        block of the query looked up in one batched read (`concept_ids`), which resolving
        them then answers from. A hint: a constant whose values do not resolve here is
        left to be reported where it is used. `skip`: the id()s of clauses resolved
        elsewhere (in a pushed-down query, nexus.exec.pushdown)."""
        pairs: dict[tuple[int, str], None] = {}
        groups = [root]
        while groups:
            group = groups.pop()
            groups += group.children()
            for atom in group.atoms:
                if type(atom) is not ConceptAtom or atom.id is not None or \
                        atom.type is None or atom.name is None or id(atom) in skip:
                    continue
                try:
                    tid, name = self.sid(atom.type), self.value(atom.name)
                except KipError:
                    continue
                if tid is not None and isinstance(name, str):
                    pairs[(tid, name)] = None
        if len(pairs) > 1:
            self._named.update(zip(pairs, self.txn.concept_ids(list(pairs))))

    def const_link(self, atom: LinkIdAtom) -> int | None:
        hit = self._links.get(id(atom), _MISSING)
        if hit is not _MISSING:
            return hit
        text = self.value(atom.id)
        parsed = values.parse_id(text)
        n = None
        if parsed is not None and parsed[0] == "P":
            head = self.txn.head(parsed[1])
            if isinstance(head, LinkHead) and self.txn.symbol_text(head.predicate_id) == parsed[2]:
                n = head.n
        if n is None and atom.mandatory:
            raise KipError(ErrorCode.KIP_3002, f"Proposition {text!r} not found",
                           "The link may have been deleted, or the id is mistyped (ids look "
                           "like P:13:treats). Use FIND or SEARCH PROPOSITION to find it.",
                           line=atom.pos.line if atom.pos else None,
                           column=atom.pos.column if atom.pos else None)
        self._links[id(atom)] = n
        return n

    def check_mandatory(self, atoms: Sequence[ConceptAtom | LinkIdAtom]) -> None:
        """Resolve every mandatory constant clause up front, so a missing one is reported
        as KIP_3002 even when another clause would have emptied the result first."""
        for atom in atoms:
            if isinstance(atom, ConceptAtom):
                if atom.is_constant:
                    self.const_concept(atom)
            else:
                self.const_link(atom)

    # --- element data ---------------------------------------------------------------------
    def attributes(self, n: int) -> dict[str, Any]:
        hit = self._attrs.get(n)
        if hit is None:
            if len(self._attrs) > _MEMO_LIMIT:
                self._attrs.clear()
            hit = self._attrs[n] = self.txn.attributes(n)
        return hit

    def metadata(self, n: int) -> dict[str, Any]:
        hit = self._metas.get(n)
        if hit is None:
            if len(self._metas) > _MEMO_LIMIT:
                self._metas.clear()
            hit = self._metas[n] = self.txn.metadata(n)
        return hit

    def prefetch(self, ids: Iterable[int | None], *, heads: bool = False,
                 attributes: bool = False, metadata: bool = False) -> None:
        """Read what `path_value`/`element` will ask of many elements in one batched call
        per kind (`ReadTxn.known_heads`, `attributes_of`, `metadata_of`): the maps into
        this execution's memos, the heads into the transaction (which keeps what it read).
        Nulls and predicate variables (negative) are skipped. Nothing is read ahead on a
        store that does not prefer batches (its one-element reads are as cheap)."""
        if not self.batched:
            return
        wanted = [n for n in dict.fromkeys(ids) if n is not None and n > 0]
        if not wanted:
            return
        if heads:
            self.txn.known_heads(wanted)
        for memo, want, read in ((self._attrs, attributes, self.txn.attributes_of),
                                 (self._metas, metadata, self.txn.metadata_of)):
            if not want:
                continue
            missing = [n for n in wanted if n not in memo]
            if missing:
                if len(memo) + len(missing) > _MEMO_LIMIT:
                    memo.clear()
                memo.update(zip(missing, read(missing)))

    def prefetch_rows(self, rows: Sequence[tuple[int | None, ...]], spec: PrefetchSpec
                      ) -> None:
        """`prefetch` for the elements a chunk of rows holds at the positions of `spec`."""
        for i, heads, attributes, metadata in spec:
            self.prefetch([row[i] for row in rows], heads=heads, attributes=attributes,
                          metadata=metadata)

    def path_value(self, n: int | None, segments: tuple[str, ...]) -> Any:
        """`?var.a.b` for element n — what FILTER, ORDER BY and FIND see.

        Row values are ids read from this transaction's indexes (or checked constants), so
        their heads come from `known_head` (no B-tree probe)."""
        if n is None:
            return None
        if n < 0:                       # a predicate variable: the predicate name
            return None if segments else self.txn.symbol_text(-n)
        field = segments[0] if segments else "id"
        if field == "attributes" or field == "metadata":
            value: Any = self.attributes(n) if field == "attributes" else self.metadata(n)
            for key in segments[1:]:
                if not isinstance(value, dict):
                    return None
                value = value.get(key)
            return value
        head = self.txn.known_head(n)
        if head is None:
            return None
        if isinstance(head, ConceptHead):
            if field == "name":
                return head.name
            if field == "id":
                return f"C:{n}"
            if field == "type":
                return self.txn.symbol_text(head.type_id)
            return None
        if field == "id":
            return f"P:{n}:{self.txn.symbol_text(head.predicate_id)}"
        if field == "predicate":
            return self.txn.symbol_text(head.predicate_id)
        if field == "subject" or field == "object":
            return self.path_value(head.subject if field == "subject" else head.object, ())
        return None

    def element(self, n: int | None) -> dict[str, Any] | str | None:
        """The full wire object of element n (what `FIND(?x)` projects); for a predicate
        variable (a negated symbol id, see nexus.exec.operators) the predicate name."""
        if n is None:
            return None
        if n < 0:
            return self.txn.symbol_text(-n)
        head = self.txn.known_head(n)
        if head is None:
            return None
        out = values.element_json(self.txn, head, attributes=False, metadata=False)
        attrs = self.attributes(n)
        if attrs:
            out["attributes"] = attrs
        meta = self.metadata(n)
        if meta:
            out["metadata"] = meta
        return out

    # --- paths ----------------------------------------------------------------------------
    def path_pid(self, v: A.Value, lo: int, hi: int | None) -> int | None:
        check_hop_range(lo, hi, self.ctx.limits.max_hops)
        return self.sid(v)

    def walk(self, start: int, pid: int | None, lo: int, hi: int | None,
             forward: bool) -> frozenset[int]:
        if pid is None:
            return frozenset((start,)) if lo == 0 else frozenset()
        key = (start, pid, lo, hi, forward)
        hit = self._walks.get(key)
        if hit is None:
            before = self._budget[0]
            hit = self._walks[key] = walk(self.txn, start, pid, lo, hi, forward, self._budget)
            self.tick(1 + before - self._budget[0])
        return hit

    def path_starts(self, pid: int | None, lo: int) -> list[int]:
        """Where a path with neither end bound starts: every subject of the predicate, and
        for a zero-hop range every element (bounded by the walk budget)."""
        if lo == 0:
            starts = list(self.txn.elements())
        elif pid is None:
            return []
        else:
            seen: dict[int, None] = {}
            for s, _o, _l in self.txn.links_of_predicate(pid):
                seen[s] = None
            starts = list(seen)
        if len(starts) > self._budget[0]:
            raise KipError(ErrorCode.KIP_4002,
                           "The path pattern would start from more nodes than the query "
                           "budget allows",
                           "Bind one end of the path (e.g. ?c {type: \"T\", name: \"n\"}).")
        return starts

    def all_link_predicates(self) -> list[int]:
        """Every predicate with links, for a predicate-variable clause with nothing bound:
        `KIP_4002` when the store holds more links than `Limits.max_link_scan` (RC11
        §3.4.2 lets engines refuse such a scan; CONTRACT §10)."""
        cap = self.ctx.limits.max_link_scan
        count = self.txn.count_links()
        if count > cap:
            raise KipError(
                ErrorCode.KIP_4002,
                f"The pattern (?s, ?p, ?o) has no end, predicate or type bound: it would scan "
                f"all {count} links, over the limit of {cap}",
                "Constrain an end (e.g. ({type: \"Person\", name: \"Alice\"}, ?p, ?o) or a "
                "variable bound by an earlier clause), name the predicate "
                "((?s, \"prefers\", ?o)), or shard the sweep per predicate, endpoint type or "
                "domain; add LIMIT.")
        return self.link_predicate_ids()

    def narrow_pids(self, v: A.Value) -> list[int]:
        """The known predicate ids a narrowing value names (a string or an array of
        strings; anything else names none), ascending — the order of a full expansion."""
        text = self.value(v)
        names = text if isinstance(text, list) else [text]
        return sorted({sid for t in names if isinstance(t, str)
                       and (sid := self.txn.symbol_id(t)) is not None})

    def link_predicate_ids(self) -> list[int]:
        """The predicates that have links, ascending (read once per execution)."""
        if self._link_preds is None:
            self._link_preds = list(self.txn.link_predicates())
            self.tick(len(self._link_preds) + 1)
        return self._link_preds

    # --- budget ---------------------------------------------------------------------------
    @property
    def work(self) -> int:
        """The work counted by `tick` so far in this execution."""
        return self._ticks

    def tick(self, work: int = 1) -> None:
        """Count `work` units (rows scanned, links followed, sub-plans started) against the
        execution's deadline, which is checked every `_CHECK_EVERY` units. The count is
        shared by every stage of the execution, nested blocks included, so that a block
        re-run for each outer row cannot hide its work from the deadline."""
        self._ticks += work
        if self._ticks >= self._next_check:
            self._next_check = self._ticks + _CHECK_EVERY
            self.ctx.check_deadline()

    # --- regex ----------------------------------------------------------------------------
    def regex(self, pattern: str, flags: str) -> regex.Pattern[str]:
        key = (pattern, flags)
        hit = self._regexes.get(key)
        if hit is None:
            if len(self._regexes) >= 64:     # patterns read from rows: the shared cache
                self._regexes.clear()        # (bounded by bytes) keeps them instead
            hit = self._regexes[key] = compile_regex(pattern, flags,
                                                     self.ctx.limits.max_regex_length)
        return hit


def _not_found_concept(env: Env, atom: ConceptAtom) -> KipError:
    if atom.id is not None:
        what = f"{{id: {env.value(atom.id)!r}}}"
        hint = ("The node may have been deleted, or the id is mistyped (concept ids look like "
                "C:12). Use SEARCH CONCEPT or FIND to confirm it exists.")
    else:
        # a constant clause without an id has both (ConceptAtom.is_constant)
        type_ = env.value(atom.type) if atom.type is not None else None
        name = env.value(atom.name) if atom.name is not None else None
        what = f"{{type: {type_!r}, name: {name!r}}}"
        hint = (f"Use SEARCH CONCEPT {_q(name)} WITH TYPE {_q(type_)} to find the exact "
                "name; names and types are case-sensitive.")
    return KipError(ErrorCode.KIP_3002, f"Concept {what} not found", hint,
                    line=atom.pos.line if atom.pos else None,
                    column=atom.pos.column if atom.pos else None)


def _q(v: Any) -> str:
    import json
    return json.dumps(v, ensure_ascii=False) if isinstance(v, str) else '""'
