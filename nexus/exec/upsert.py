"""UPSERT (spec §4.1, §2.10; CONTRACT §7): knowledge capsules written into the graph.

Owns the execution of `UPSERT` statements over the command's write transaction:

* statements run in order, blocks in order; local handles live for one statement and are
  bound when their block completes (a handle used earlier, or in another statement →
  `KIP_3001`; one handle defined twice in a statement → `KIP_1001`);
* `{type, name}` matches or creates a concept; `{id}` / `(id: ...)` only match (`KIP_3002`);
* SET ATTRIBUTES is a shallow merge (a `null` value is stored as null, not removed);
* SET PROPOSITIONS is additive: each entry creates or updates the link (subject, p, target);
  targets are handles, existing concepts `{type, name}` / `{id}`, existing links
  `(s, "p", o)` (resolved recursively) or `(id: ...)` — absent → `KIP_3002`;
* PROPOSITION blocks match or create (s, p, o); s and o may be links (higher-order);
* metadata precedence: effective = statement WITH METADATA ⊕ block WITH METADATA ⊕ entry
  WITH METADATA (inner keys win, nulls included), merged key by key onto what is stored;
* one link per (s, p, o): re-stating a link updates it.

Every write goes through `nexus.exec.writes` (engine metadata, touched ids); define-before-use
is `nexus.exec.schema`'s, protection `nexus.exec.protect`'s. A block that names an existing
core node or core link with no SET ATTRIBUTES and no WITH METADATA of its own is a bare
reference and writes nothing, and so does one that would leave a protected element exactly
as it is (`protect.unchanged`: a capsule applied again); any other block that names an
existing element writes it (a no-op rewrite still bumps `_version`, CONTRACT §3).

A loader-shaped command (`{type, name}` CONCEPT blocks with scalar maps and SET PROPOSITIONS
to `{type, name}` ends, or PROPOSITION blocks between existing `{type, name}` concepts) is
first offered to `nexus.exec.upsert_columns`, which runs it column-wise with the same result
or declines, having written nothing, and the command runs here.
"""
from __future__ import annotations

from typing import Any

from ..errors import ErrorCode, KipError
from ..store.bulk import gc_paused
from ..store.protocol import ConceptHead, LinkHead
from ..syntax import ast as A
from ..syntax.bind import check_values, value_of
from . import protect, upsert_columns, upsert_names, writes
from .context import WriteContext
from .registry import executes
from .schema import CONCEPT_TYPE, Schema, check_definition_name
from .values import id_of, parse_id
from .writes import pos_kw

_NOT_FOUND_HINT = ("Target may have been deleted or never created. UPSERT links only to "
                   "existing elements: create it first in its own CONCEPT block (earlier in the "
                   "statement) and link to it by handle, or check it with SEARCH / FIND.")


_ENDS_KEPT = 65_536       # `{type, name}` references remembered by one command
# Metadata values a buffered link may hold: what `codec.encode_map` takes without a look
# deeper (an int must also fit 64 bits). A map with anything else is written at once, so
# that its error (KIP_2003) comes where it did.
_FLAT = frozenset((str, bool, float, type(None)))
_INT_MIN, _INT_END = -(1 << 63), 1 << 64


@executes(A.Upsert)
def execute_upsert(ctx: WriteContext, command: A.Upsert, params: Any = None
                   ) -> tuple[dict[str, Any], None]:
    return run_upsert(ctx, command, params), None


def run_upsert(ctx: WriteContext, command: A.Upsert, params: Any = None) -> dict[str, Any]:
    """Run `command`; its placeholders (UPSERT binds late: `late_binding`) take their values
    from `params` — every value checked before anything is written, as binding would."""
    params = {} if params is None else params
    if upsert_columns.ENABLED:
        with gc_paused():
            done = upsert_columns.run_columns(ctx, command, params)
        if done is not None:            # a loader-shaped command, run column-wise
            return done
    check_values(command, params)
    schema = Schema(ctx.txn)
    if ctx.txn.prefers_batches():     # PostgreSQL: the names it resolves, in one statement
        upsert_names.prefetch(ctx.txn, command, params)
    concepts: list[str] = []
    links: list[str] = []
    # `{type, name}` references resolved so far in this command: a load's links share
    # their ends (hubs most of all). An UPSERT creates and updates but never deletes or
    # renames, so a concept found stays what it is until the command ends.
    ends: dict[tuple[str, str], int] = {}
    # A command's maps, keys and rows hold no cycles: the collector is paused while they
    # are made (a load's command makes tens of thousands), and runs again after.
    with gc_paused():
        for statement in command.statements:
            _Statement(ctx, schema, statement, params, ends).run(concepts, links)
    if ctx.dry_run:
        return {"blocks": 0, "upsert_concept_nodes": [], "upsert_proposition_links": []}
    return {"blocks": len(command.statements), "upsert_concept_nodes": concepts,
            "upsert_proposition_links": links}


def literal(value: Any) -> Any:
    """The plain value of a bound AST value (binding folds everything into Literal)."""
    if isinstance(value, A.Literal):
        return value.value
    raise KipError(ErrorCode.KIP_4003, f"unbound value reached the executor: {value!r}")


def user_map(value: Any, where: str, params: Any = None) -> dict | None:
    """A SET ATTRIBUTES / WITH METADATA map, with engine keys refused (KIP_2002)."""
    if value is None:
        return None
    data = literal(value) if params is None else value_of(value, params)
    if not isinstance(data, dict):
        raise KipError(ErrorCode.KIP_1001, f"{where} must be an object",
                       f"Write {where} {{ key: value, ... }}.", **pos_kw(value.pos))
    writes.check_keys(data, where, value.pos)
    return data


def merge(outer: dict | None, inner: dict | None) -> dict | None:
    if inner is None:
        return outer
    if outer is None:
        return inner
    return {**outer, **inner}


def not_found(message: str, pos: Any = None) -> KipError:
    return KipError(ErrorCode.KIP_3002, message, _NOT_FOUND_HINT, **pos_kw(pos))


class _Statement:
    """One `UPSERT { ... } WITH METADATA {...}` statement and its local handles."""

    __slots__ = ("ctx", "txn", "schema", "statement", "params", "outer", "handles", "ends",
                 "new_links")

    def __init__(self, ctx: WriteContext, schema: Schema, statement: A.UpsertStatement,
                 params: Any, ends: dict[tuple[str, str], int]):
        self.ctx = ctx
        self.txn = ctx.txn
        self.schema = schema
        self.statement = statement
        self.params = params
        self.outer = user_map(statement.metadata, "WITH METADATA", params)
        self.handles: dict[str, int] = {}
        self.ends = ends
        # Links of SET PROPOSITIONS created by this statement and not yet written:
        # (subject, predicate id, object) -> (id, metadata). They are written together
        # (`flush`: one columnar `create_link_columns`, the bulk loader's path) before
        # anything reads links, and when the statement ends.
        self.new_links: dict[tuple[int, int, int], tuple[int, dict | None]] = {}

    def value(self, value: Any) -> Any:
        """The plain value of a value node: its literal, or its (checked) parameter."""
        if type(value) is A.Literal:
            return value.value
        return value_of(value, self.params)

    def run(self, concepts: list[str], links: list[str]) -> None:
        defined: set[str] = set()
        for block in self.statement.blocks:
            if block.handle is not None:
                if block.handle in defined:
                    raise KipError(ErrorCode.KIP_1001,
                                   f"Handle ?{block.handle} is defined twice in one UPSERT "
                                   f"statement",
                                   "Give each CONCEPT / PROPOSITION block its own handle; refer "
                                   "to an earlier block by its handle instead of repeating it.",
                                   **pos_kw(block.pos))
                defined.add(block.handle)
        for block in self.statement.blocks:
            self.ctx.check_deadline()
            if isinstance(block, A.ConceptBlock):
                n = self.concept_block(block)
                concepts.append(f"C:{n}")
            else:
                self.flush()
                n, predicate = self.proposition_block(block)
                links.append(f"P:{n}:{predicate}")
            if block.handle is not None:
                self.handles[block.handle] = n
        self.flush()

    def flush(self) -> None:
        """Write the buffered new links, as `writes.create_link` would one by one (ids
        allocated in order when each was met; the engine metadata of a new element)."""
        pending = self.new_links
        if not pending:
            return
        self.new_links = {}
        keys = list(pending)
        ids, metas = zip(*pending.values())
        self.txn.create_link_columns(
            list(ids), [k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys],
            None, list(metas), known_new=True,
            extra_metadata=writes.new_metadata(None, self.ctx.now))

    # --- CONCEPT ------------------------------------------------------------------------
    def concept_block(self, block: A.ConceptBlock) -> int:
        ctx, txn, match = self.ctx, self.txn, block.match
        attributes = user_map(block.attributes, "SET ATTRIBUTES", self.params)
        own_meta = user_map(block.metadata, "WITH METADATA", self.params)
        effective = merge(self.outer, own_meta)
        bare = attributes is None and own_meta is None
        if match.id is not None:
            n = self.concept_by_id(match.id, match.pos)
            self.expect(block, n)
            self.write_existing(n, attributes, effective, block.pos, bare)
        else:
            type_name, name = self.value(match.type), self.value(match.name)
            type_id = self.schema.concept_type(
                type_name, match.pos, defining=name if type_name == CONCEPT_TYPE else None)
            found = txn.concept_id(type_id, name)
            self.expect(block, found)
            if found is None:
                check_definition_name(type_name, name, match.pos)
                n = writes.create_concept(ctx, type_id, name, attributes, effective)
            else:
                n = found
                self.write_existing(n, attributes, effective, block.pos, bare)
        if block.propositions:
            if len(block.propositions) > 1 and self.txn.prefers_batches():
                self.prefetch_links(n, block.propositions)
            for entry in block.propositions:
                self.set_proposition(n, entry, effective, own_meta is None)
        return n

    def expect(self, block: A.ConceptBlock | A.PropositionBlock, n: int | None) -> None:
        """EXPECT VERSION (RC11 §2.11.2): the block runs only on that `_version` of its
        element (0: the element must not exist yet); otherwise the whole command aborts."""
        if block.expect is None:
            return
        expected = self.value(block.expect)
        current = 0 if n is None else self.txn.metadata(n).get("_version", 0)
        if current != expected:
            ident = None if n is None else id_of(self.txn, n)
            err = KipError(
                ErrorCode.KIP_3005,
                f"EXPECT VERSION {expected}"
                + (" (create-only)" if expected == 0 else "") + ": "
                + (f"{ident} does not exist yet" if n is None
                   else f"{ident} already exists at _version {current}" if expected == 0
                   else f"{ident} is at _version {current}")
                + "; nothing of this command was written",
                "Re-read the element (FIND its metadata._version), apply your change to what "
                "is there now, and retry with the new version" + (
                    "; EXPECT VERSION 0 means create-only" if expected == 0 else "") + ".",
                **pos_kw(block.pos))
            err.data = {**(err.data or {}), "id": ident, "expected": expected,
                        "current": current}
            raise err

    def write_existing(self, n: int, attributes: dict | None, effective: dict | None,
                       pos: Any, bare: bool) -> None:
        """Write an element a block named. `bare`: the block (or entry) has neither SET
        ATTRIBUTES nor WITH METADATA of its own. (A bare block is still a write — CONTRACT
        §3 — but one command advances an element's `_version` once: `writes.advance`.)"""
        head = self.txn.head(n)
        if bare and protect.is_immutable(self.txn, head):
            return      # a bare reference to a core element: not a write
        if protect.is_protected(self.txn, head) and protect.unchanged(self.txn, n, attributes,
                                                                      effective):
            return      # an identical re-application (a capsule loaded again): no write
        protect.check_write(self.ctx, head, attributes, pos)
        writes.update(self.ctx, n, attributes, effective)

    def prefetch_links(self, subject: int, entries: tuple[A.SetProposition, ...]) -> None:
        """A hint (PostgreSQL): the entries' links looked up in one statement, which the
        transaction remembers for `link_id`. An entry in error stops it: the loop reports
        that error in its place."""
        triples = []
        for entry in entries:
            try:
                pid = self.schema.predicate(self.value(entry.predicate), entry.pos)
                triples.append((subject, pid, self.resolve(entry.target)))
            except KipError:
                return
        self.txn.link_ids(triples)

    def set_proposition(self, subject: int, entry: A.SetProposition, effective: dict | None,
                        bare_block: bool) -> None:
        predicate = self.value(entry.predicate)
        pid = self.schema.predicate(predicate, entry.pos)
        target = self.resolve(entry.target)
        own_meta = user_map(entry.metadata, "WITH METADATA", self.params)
        meta = merge(effective, own_meta)
        key = (subject, pid, target)
        if key in self.new_links:
            self.flush()                # stated twice: the second states it again
        n = self.txn.link_id(subject, pid, target)
        if n is None:
            if _flat(meta):
                n = self.txn.new_id()   # link_id found none, and none is buffered
                self.new_links[key] = (n, meta)
                self.ctx.touched.add(n)
                self.ctx.versioned.add(n)
            else:
                self.flush()
                writes.create_link(self.ctx, subject, pid, target, None, meta)
        else:
            self.write_existing(n, None, meta, entry.pos, bare_block and own_meta is None)

    # --- PROPOSITION --------------------------------------------------------------------
    def proposition_block(self, block: A.PropositionBlock) -> tuple[int, str]:
        match = block.match
        attributes = user_map(block.attributes, "SET ATTRIBUTES", self.params)
        own_meta = user_map(block.metadata, "WITH METADATA", self.params)
        effective = merge(self.outer, own_meta)
        bare = attributes is None and own_meta is None
        if isinstance(match, A.PropositionIdMatch):
            n = self.link_by_id(match.id, match.pos)
            self.expect(block, n)
            self.write_existing(n, attributes, effective, block.pos, bare)
            head = self.txn.known_head(n)
            assert isinstance(head, LinkHead)
            return n, self.txn.symbol_text(head.predicate_id)
        subject = self.resolve(match.subject)
        assert isinstance(match.predicate, A.Predicate)     # the parser refused a ?variable
        predicate = self.value(match.predicate.names[0])
        pid = self.schema.predicate(predicate, match.predicate.pos or match.pos)
        obj = self.resolve(match.object)
        found = self.txn.link_id(subject, pid, obj)
        self.expect(block, found)
        if found is None:
            n = writes.create_link(self.ctx, subject, pid, obj, attributes, effective)
        else:
            n = found
            self.write_existing(n, attributes, effective, block.pos, bare)
        return n, predicate

    # --- references to existing elements -------------------------------------------------
    def resolve(self, term: Any) -> int:
        """The id of the existing element a subject/object/target term names."""
        kind = type(term)
        if kind is A.VarTerm:
            n = self.handles.get(term.name)
            if n is None:
                raise KipError(ErrorCode.KIP_3001,
                               f"Handle ?{term.name} is not defined at this point of the "
                               f"UPSERT statement",
                               "Define the handle with a CONCEPT or PROPOSITION block placed "
                               "before the clause that uses it; handles do not cross UPSERT "
                               "statements (use {type, name} or {id} there).",
                               **pos_kw(term.pos))
            return n
        if kind is A.ConceptMatch:
            if term.id is not None:
                return self.concept_by_id(term.id, term.pos)
            type_name, name = self.value(term.type), self.value(term.name)
            key = (type_name, name) if type(name) is str else None
            n = self.ends.get(key) if key is not None else None
            if n is not None:
                return n
            type_id = self.schema.existing_type(type_name, term.pos)
            n = None if type_id is None else self.txn.concept_id(type_id, name)
            if n is None:
                raise not_found(f"The concept {{type: {type_name!r}, name: {name!r}}} does "
                                f"not exist", term.pos)
            if key is not None and len(self.ends) < _ENDS_KEPT:
                self.ends[key] = n
            return n
        self.flush()                    # a link is read: the buffered ones first
        if kind is A.PropositionIdMatch:
            return self.link_by_id(term.id, term.pos)
        # A nested (s, "p", o): an existing link, its ends resolved recursively.
        subject = self.resolve(term.subject)
        predicate = self.value(term.predicate.names[0])
        pid = self.schema.existing_predicate(predicate, term.predicate.pos or term.pos)
        obj = self.resolve(term.object)
        n = None if pid is None else self.txn.link_id(subject, pid, obj)
        if n is None:
            raise not_found(f"The proposition ({_ref(self.txn, subject)}, {predicate!r}, "
                            f"{_ref(self.txn, obj)}) does not exist", term.pos)
        return n

    def concept_by_id(self, value: Any, pos: Any) -> int:
        # (A buffered link's id has no head yet: "no concept" as once it is written.)
        text = self.value(value)
        parsed = parse_id(text)
        if parsed is not None and parsed[0] == "C" and type(self.txn.head(parsed[1])) is \
                ConceptHead:
            return parsed[1]
        raise not_found(f"No concept has the id {text!r}" + (
            "" if parsed is not None else " (concept ids look like \"C:12\")"), pos)

    def link_by_id(self, value: Any, pos: Any) -> int:
        text = self.value(value)
        parsed = parse_id(text)
        if parsed is not None and parsed[0] == "C":
            # A concept id where the syntax asks for a proposition is a malformed command,
            # not a missing element: (id: …) always names a proposition.
            raise KipError(ErrorCode.KIP_1001,
                           f"A proposition id is required in (id: …), got the concept id "
                           f"{text!r}",
                           "Write (id: \"P:<n>:<predicate>\") for a proposition; a concept is "
                           "referenced with {id: \"C:<n>\"} in curly braces.", **pos_kw(pos))
        if parsed is not None and parsed[0] == "P":
            head = self.txn.head(parsed[1])
            if type(head) is LinkHead and self.txn.symbol_text(head.predicate_id) == parsed[2]:
                return parsed[1]
        raise not_found(f"No proposition has the id {text!r}" + (
            "" if parsed is not None else " (proposition ids look like \"P:13:treats\")"), pos)


def _flat(meta: dict | None) -> bool:
    """Whether a buffered link may hold `meta` (see _FLAT)."""
    if meta:
        for value in meta.values():
            kind = type(value)
            if kind not in _FLAT and (kind is not int or not _INT_MIN <= value < _INT_END):
                return False
    return True


def _ref(txn: Any, n: int) -> str:
    head = txn.head(n)
    if type(head) is ConceptHead:
        return f"{{type: {txn.symbol_text(head.type_id)!r}, name: {head.name!r}}}"
    return f"P:{n}:{txn.symbol_text(head.predicate_id)}"
