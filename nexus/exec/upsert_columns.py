"""UPSERT of a loader-shaped command, executed column-wise (issue 18).

What importers and agents send to load data is one shape: CONCEPT blocks naming a concept by
`{type, name}`, with SET ATTRIBUTES / WITH METADATA maps of scalars and SET PROPOSITIONS
entries to `{type, name}` ends. `nexus.exec.upsert` runs such a command block by block (a
lookup, a schema check, a metadata merge and a store call per block and per link). This
module runs the same command as columns: every value read and checked once, the schema
checked once per distinct type and predicate, the concepts and the links that already exist
looked up in one batched call each, the new concepts and the new links written with one
columnar call each (`create_concept_columns` / `create_link_columns`, the bulk loader's
path, the engine metadata encoded once per command as `extra_metadata`), the existing
elements' metadata read and written in batches. A command the parser read as columns
(`ast.ColumnUpsert`, nexus/syntax/fastclause.py) is planned from its columns directly
(`_plan_columns`): no tree is built unless the command declines. The heads it writes are
handed to the commit hooks (`WriteContext.known_heads`: PRIMER) so none is read back.

It takes a command only when it can prove the result is the block-by-block one, and
*declines* (returns None, having written nothing) otherwise — `run_upsert` then runs the
command the normal way, which also raises the error of any bad command:

* every block a CONCEPT block without a handle, `{id}`, EXPECT VERSION, or a `$` type
  (schema definitions), and not naming a protected element (CoreSchema, the actors);
* every value a literal or a parameter of the kind binding would accept (strings where a
  string goes; maps of identifier keys and scalar values that fit the codec);
* no concept named twice and no link stated twice in the command;
* every SET PROPOSITIONS target a `{type, name}` concept that exists, or that an earlier
  block (or the block itself) of the command creates;
* no schema error (undefined type or predicate), no empty name, no `_` key;
* a store that does not prefer batches of its own (PostgreSQL), and not a dry run.

Everything it writes is what the block-by-block path writes: the same ids, allocated in
block order (a concept, then its new links); `_version` 1 and `_created_at` /
`_updated_at` for new elements; for an existing one the attributes shallow-merged, the
effective metadata merged key by key, `_version` + 1 once per command; the same
`touched` / `unsearched` / `versioned` bookkeeping for the commit hooks (history, PRIMER,
search). tests/kml/test_upsert_columns.py holds the two paths equal on random commands.
"""
from __future__ import annotations

import math
import re
from typing import Any

from ..errors import KipError
from ..search.lexical_cols import NewConcepts, NewLinks
from ..syntax import ast as A
from . import writes
from .context import WriteContext
from .protect import ACTORS, CORE_NODES
from .schema import Schema

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_INT_MIN, _INT_END = -(1 << 63), 1 << 64
_PROTECTED = CORE_NODES | ACTORS
# What a map value may be on this path (what binding takes without its general walk and
# the codec packs flat); anything else declines.
_SCALAR = frozenset((str, bool, type(None)))


# Switched off by the differential test (and a bench variant) to run the normal path alone.
ENABLED = True


class Decline(Exception):
    """The command is not provably loader-shaped: run it the normal way."""


def _map(node: Any, params: Any, keys_ok: set[str]) -> dict | None:
    """A SET ATTRIBUTES / WITH METADATA map of identifier keys (none starting with `_`) and
    scalar values, from a placeholder, a literal or an object of those; else Decline."""
    if node is None:
        return None
    kind = type(node)
    if kind is A.Param:
        value = params.get(node.name, _MISSING)
        if type(value) is not dict:
            raise Decline
    elif kind is A.Literal:
        value = node.value
        if type(value) is not dict:
            raise Decline
    elif kind is A.ObjectValue:
        value = {}
        for key, item in node.entries:
            k = type(item)
            if k is A.Literal:
                value[key] = item.value
            elif k is A.Param:
                value[key] = params.get(item.name, _MISSING)
            else:
                raise Decline
    else:
        raise Decline
    _check_items(value, keys_ok)
    return value


_MISSING = object()


def _text(node: Any, params: Any) -> str:
    """A string value (a literal or a placeholder holding a string); else Decline."""
    kind = type(node)
    if kind is A.Param:
        value = params.get(node.name, _MISSING)
    elif kind is A.Literal:
        value = node.value
    else:
        raise Decline
    if type(value) is not str:
        raise Decline
    return value


def _merge(outer: dict | None, inner: dict | None) -> dict | None:
    if inner is None:
        return outer
    if outer is None:
        return inner
    return {**outer, **inner}


def run_columns(ctx: WriteContext, command: A.Upsert, params: Any
                ) -> dict[str, Any] | None:
    """Run a loader-shaped `command` column-wise and return its result; None when it is
    not provably loader-shaped (nothing written: run it block by block)."""
    txn = ctx.txn
    if ctx.dry_run or txn.prefers_batches():
        return None
    try:
        if type(command) is A.ColumnUpsert:
            # Read as columns by the parser (no tree: nexus/syntax/fastclause.py).
            plan = _plan_columns(command.columns, params)
        elif type(command.statements[0].blocks[0]) is A.PropositionBlock:
            statements, links = _plan_links(command, params)
            plan = None
        else:
            plan = _plan(command, params)
    except (Decline, KipError, IndexError):
        return None                     # (raised before anything is written)
    # The writers return None (decline) only before their first write; an error after it
    # is the command's, as it would be in the block path.
    if plan is None:
        return _write_links(ctx, statements, links)
    return _write(ctx, *plan)


# A block as columns: (type, name, attributes, effective metadata, entries) and an entry:
# (predicate, target type, target name, metadata).
_Entry = tuple[str, str, str, "dict | None"]


def _plan(command: A.Upsert, params: Any) -> tuple:
    """Read and check the command's values (nothing written, nothing looked up). Raises
    Decline for anything not loader-shaped."""
    if not isinstance(params, dict):
        raise Decline
    keys_ok: set[str] = set()
    types: list[str] = []
    names: list[str] = []
    attrs: list[dict | None] = []
    metas: list[dict | None] = []
    entries: list[list[_Entry] | None] = []
    seen: set[tuple[str, str]] = set()
    for statement in command.statements:
        outer = _map(statement.metadata, params, keys_ok)
        for block in statement.blocks:
            if type(block) is not A.ConceptBlock or block.handle is not None or \
                    block.expect is not None:
                raise Decline
            match = block.match
            if match.id is not None:
                raise Decline
            t, name = _text(match.type, params), _text(match.name, params)
            key = (t, name)
            if t.startswith("$") or key in _PROTECTED or key in seen or not name.strip():
                raise Decline
            seen.add(key)
            types.append(t)
            names.append(name)
            attrs.append(_map(block.attributes, params, keys_ok))
            effective = _merge(outer, _map(block.metadata, params, keys_ok))
            metas.append(effective)
            if block.propositions is None:
                entries.append(None)
                continue
            out: list[_Entry] = []
            for entry in block.propositions:
                target = entry.target
                if type(target) is not A.ConceptMatch or target.id is not None:
                    raise Decline
                out.append((_text(entry.predicate, params), _text(target.type, params),
                            _text(target.name, params),
                            _merge(effective, _map(entry.metadata, params, keys_ok))))
            entries.append(out)
    if not types:
        raise Decline
    return len(command.statements), types, names, attrs, metas, entries


def _concept_ids(txn: Any, keys: list[tuple[str, str]], type_ids: dict[str, int | None]
                 ) -> list[int] | None:
    """The ids of the concepts `keys` ((type, name) pairs) name, in one batched lookup; None
    when a type or a concept does not exist (declined: the normal path raises KIP_3002)."""
    pairs = []
    for t, name in keys:
        tid = type_ids[t]
        if tid is None:
            return None                 # no concept of that type
        pairs.append((tid, name))
    found = txn.concept_ids(pairs)
    if any(n is None for n in found):
        return None
    return found


def _check_items(value: dict, keys_ok: set[str]) -> None:
    """Decline a map with a key that is not a plain identifier (`keys_ok`: the keys already
    seen so, added to) or a value that is not a plain scalar in range."""
    for key, item in value.items():
        if key not in keys_ok:
            if type(key) is not str or key.startswith("_") or not _IDENT.match(key):
                raise Decline
            keys_ok.add(key)
        k = type(item)
        if k not in _SCALAR and not (k is int and _INT_MIN <= item < _INT_END) \
                and not (k is float and math.isfinite(item)):
            raise Decline


def _named_map(name: str | None, params: dict, keys_ok: set[str]) -> dict | None:
    """`_map` of a placeholder given by its name (None: absent)."""
    if name is None:
        return None
    value = params.get(name, _MISSING)
    if type(value) is not dict:
        raise Decline
    _check_items(value, keys_ok)
    return value


def _slot_text(slot: A.Slot, params: dict) -> str:
    """`_text` of a slot of the columnar form (a placeholder's name or a 1-tuple)."""
    value = params.get(slot, _MISSING) if type(slot) is str else slot[0]
    if type(value) is not str:
        raise Decline
    return value


def _plan_columns(columns: A.UpsertColumns, params: Any) -> tuple:
    """`_plan` of a command the parser read as columns (one statement of CONCEPT blocks
    by `{type, name}`, no handle, id, EXPECT VERSION or statement metadata: the shape
    guarantees them), reading the same values in the same order."""
    if not isinstance(params, dict):
        raise Decline
    keys_ok: set[str] = set()
    get = params.get
    types = [_slot_text(s, params) for s in columns.types]
    names = [_slot_text(s, params) for s in columns.names]
    attrs = [_named_map(a, params, keys_ok) for a in columns.attributes]
    metas = [_named_map(m, params, keys_ok) for m in columns.metadata]
    seen: set[tuple[str, str]] = set()
    for key in zip(types, names):
        if key[0].startswith("$") or key in _PROTECTED or key in seen or \
                not key[1].strip():
            raise Decline
        seen.add(key)
    # The links, a column at a time (placeholders, the common case, by one lookup each).
    predicates, target_types, target_names = (
        [get(s, _MISSING) if type(s) is str else s[0] for s in column]
        for column in (columns.predicates, columns.target_types, columns.target_names))
    for column in (predicates, target_types, target_names):
        for value in column:
            if type(value) is not str:
                raise Decline
    link_metas = [None if m is None else _named_map(m, params, keys_ok)
                  for m in columns.link_metadata]
    entries: list[list[_Entry] | None] = []
    begin = 0
    for effective, end in zip(metas, columns.ends):
        if effective is None:
            entries.append(list(zip(predicates[begin:end], target_types[begin:end],
                                    target_names[begin:end], link_metas[begin:end])))
        else:
            entries.append([(p, t, n, _merge(effective, m)) for p, t, n, m in zip(
                predicates[begin:end], target_types[begin:end], target_names[begin:end],
                link_metas[begin:end])])
        begin = end
    return 1, types, names, attrs, metas, entries


def _write(ctx: WriteContext, statements: int, types: list[str], names: list[str], attrs: list[dict | None],
           metas: list[dict | None], entries: list[list[_Entry] | None]
           ) -> dict[str, Any] | None:
    txn = ctx.txn
    schema = Schema(txn)
    # The schema, in the normal path's order (a block's type, then its entries'
    # predicates): interning order decides the ids of new symbols.
    type_ids: dict[str, int] = {}
    pids: dict[str, int] = {}
    try:
        for t, es in zip(types, entries):
            if t not in type_ids:
                type_ids[t] = schema.concept_type(t)
            if es:
                for p, ot, _on, _m in es:
                    if p not in pids:
                        pids[p] = schema.predicate(p)
        # Target types: looked up, never interned (a reference to an existing concept).
        target_types: dict[str, int | None] = {}
        for es in entries:
            if es:
                for _p, ot, _on, _m in es:
                    if ot not in target_types:
                        target_types[ot] = type_ids.get(ot) or schema.existing_type(ot)
    except KipError:
        return None
    # Concepts: the blocks' own, then the targets not among them, in one batched lookup.
    count = len(types)
    block_keys = list(zip(types, names))
    index = {k: i for i, k in enumerate(block_keys)}
    found = txn.concept_ids([(type_ids[t], n) for t, n in block_keys])
    ends: dict[tuple[str, str], int] = {}
    other: list[tuple[str, str]] = []
    for es in entries:
        if es:
            for _p, ot, on, _m in es:
                k = (ot, on)
                if k not in index and k not in ends:
                    ends[k] = 0
                    other.append(k)
    if other:
        got = _concept_ids(txn, other, target_types)
        if got is None:
            return None
        ends.update(zip(other, got))
    # A target created by a later block is not there yet for the normal path: KIP_3002.
    for i, es in enumerate(entries):
        if es:
            for _p, ot, on, _m in es:
                j = index.get((ot, on))
                if j is not None and j > i and found[j] is None:
                    return None
    # A link stated twice (the same ends and predicate): the normal way.
    stated: set[tuple[int, int, tuple[str, str]]] = set()
    for i, es in enumerate(entries):
        if es:
            for p, ot, on, _m in es:
                k3 = (i, pids[p], (ot, on))
                if k3 in stated:
                    return None
                stated.add(k3)
    # Links between concepts that existed before the command: which of them exist.
    old_triples: list[tuple[int, int, int]] = []
    for i, es in enumerate(entries):
        s = found[i]
        if s is None or not es:
            continue
        for p, ot, on, _m in es:
            j = index.get((ot, on))
            o = ends[(ot, on)] if j is None else found[j]
            if o is not None:
                old_triples.append((s, pids[p], o))
    existing_links = dict(zip(old_triples, txn.link_ids(old_triples))) if old_triples else {}
    ctx.check_deadline()
    # Allocate ids in block order and build the columns.
    new_c: list[int] = []
    new_c_types: list[int] = []
    new_c_names: list[str] = []
    new_c_attrs: list[dict | None] = []
    new_c_metas: list[dict | None] = []
    old_c: list[tuple[int, dict | None, dict | None]] = []
    new_l: list[int] = []
    new_l_s: list[int] = []
    new_l_p: list[int] = []
    new_l_o: list[int] = []
    new_l_m: list[dict | None] = []
    new_l_sn: list[str] = []            # the new links' ends' names (their documents')
    new_l_on: list[str] = []
    old_l: list[tuple[int, dict | None]] = []
    old_l_heads: list[tuple[int, int, int, int]] = []
    concept_of: list[int] = [0] * count
    for i in range(count):
        n = found[i]
        if n is None:
            n = txn.new_id()
            new_c.append(n)
            new_c_types.append(type_ids[types[i]])
            new_c_names.append(names[i])
            new_c_attrs.append(attrs[i])
            new_c_metas.append(metas[i])
        else:
            old_c.append((n, attrs[i], metas[i]))
        concept_of[i] = n
        es = entries[i]
        if not es:
            continue
        for p, ot, on, m in es:
            j = index.get((ot, on))
            # (a later block's concept exists already: checked above)
            o = ends[(ot, on)] if j is None else (found[j] or concept_of[j])
            pid = pids[p]
            link = existing_links.get((n, pid, o))
            if link is None:
                link = txn.new_id()
                new_l.append(link)
                new_l_s.append(n)
                new_l_p.append(pid)
                new_l_o.append(o)
                new_l_m.append(m)
                new_l_sn.append(names[i])
                new_l_on.append(on)
            else:
                old_l.append((link, m))
                old_l_heads.append((link, n, pid, o))
    now = ctx.now
    extra = writes.new_metadata(None, now)
    if new_c:
        txn.create_concept_columns(new_c, new_c_types, new_c_names,
                                   [dict(a) if a else None for a in new_c_attrs],
                                   new_c_metas, extra_metadata=extra)
    if new_l:
        txn.create_link_columns(new_l, new_l_s, new_l_p, new_l_o, None, new_l_m,
                                known_new=True, extra_metadata=extra)
    # What the search index derives these elements' documents from (as a bulk load's
    # columns, `lexical_cols`): none of them is read back to be indexed.
    if new_c:
        ctx.new_docs.append(NewConcepts(new_c, new_c_types,
                                        {tid: t for t, tid in type_ids.items()}, new_c_names,
                                        new_c_attrs))
    if new_l:
        ctx.new_docs.append(NewLinks(new_l, new_l_s, new_l_p, new_l_o,
                                     {pid: p for p, pid in pids.items()}, new_l_sn,
                                     new_l_on, None))
    touched, versioned = ctx.touched, ctx.versioned
    touched.update(new_c)
    versioned.update(new_c)
    touched.update(new_l)
    versioned.update(new_l)
    # The heads written, for the commit hooks that would read them back (PRIMER).
    ctx.known_heads.append((concept_of, [type_ids[t] for t in types]))
    if new_l:
        ctx.known_heads.append((new_l, new_l_s, new_l_p, new_l_o))
    if old_l_heads:
        ctx.known_heads.append(tuple(map(list, zip(*old_l_heads))))
    _update(ctx, old_c + [(n, None, m) for n, m in old_l])
    return {"blocks": statements, "upsert_concept_nodes": [f"C:{n}" for n in concept_of],
            "upsert_proposition_links": []}


def _update(ctx: WriteContext, olds: list[tuple[int, dict | None, dict | None]]) -> None:
    """`writes.update` of existing elements `(n, attributes, metadata)`, each written once
    by the command: attributes merged one by one (rare in a load), metadata in a batch."""
    if not olds:
        return
    txn, touched = ctx.txn, ctx.touched
    if not any(a or m or n in ctx.versioned for n, a, m in olds):
        # Nothing but the engine's bump for each (the subjects of a command that gives
        # them links): `_version` and `_updated_at` patched in the stored bytes
        # (`bump_versions`, as `writes.touch` does) — no map read, decoded or encoded.
        # One not in that layout (written by an older version) is not patched: it takes
        # the map path below, bumped there.
        ids = [n for n, _a, _m in olds]
        done = [n for n, answer in zip(ids, txn.bump_versions(ids, ctx.now))
                if answer is not None]
        ctx.unsearched.update(n for n in done if n not in touched)
        ctx.versioned.update(done)
        touched.update(done)
        if len(done) == len(olds):
            return
        olds = [old for old in olds if old[0] not in ctx.versioned]
    stored = txn.metadata_of([n for n, _a, _m in olds])
    items = []
    for (n, a, m), meta in zip(olds, stored):
        if a:
            attributes = txn.attributes(n)
            writes.keep_attributes(ctx, n, attributes)
            attributes.update(a)
            txn.set_attributes(n, attributes)
            ctx.unsearched.discard(n)
            ctx.moved.pop(n, None)
            touched.add(n)          # (as update_known: searched again, not `unsearched`)
        if m:
            meta.update(m)
        items.append((n, meta))
    writes.update_metadata_many(ctx, items)


# A PROPOSITION block as columns: (subject, predicate, object, attributes, metadata), the
# ends `(type, name)` of concepts that exist before the command.
_Link = tuple[tuple[str, str], str, tuple[str, str], "dict | None", "dict | None"]


def _end(term: Any, params: Any) -> tuple[str, str]:
    if type(term) is not A.ConceptMatch or term.id is not None:
        raise Decline
    key = (_text(term.type, params), _text(term.name, params))
    if key[0].startswith("$") or key in _PROTECTED:
        raise Decline
    return key


def _plan_links(command: A.Upsert, params: Any) -> tuple[int, list[_Link]]:
    """A command of PROPOSITION blocks `({type, name}, "p", {type, name})` (the other
    loader shape), read and checked; Decline for anything else."""
    if not isinstance(params, dict):
        raise Decline
    keys_ok: set[str] = set()
    out: list[_Link] = []
    for statement in command.statements:
        outer = _map(statement.metadata, params, keys_ok)
        for block in statement.blocks:
            if type(block) is not A.PropositionBlock or block.handle is not None or \
                    block.expect is not None or type(block.match) is not A.PropositionMatch:
                raise Decline
            match = block.match
            predicate = match.predicate
            if type(predicate) is not A.Predicate or predicate.hops is not None or \
                    len(predicate.names) != 1:
                raise Decline
            out.append((_end(match.subject, params), _text(predicate.names[0], params),
                        _end(match.object, params),
                        _map(block.attributes, params, keys_ok),
                        _merge(outer, _map(block.metadata, params, keys_ok))))
    return len(command.statements), out


def _write_links(ctx: WriteContext, statements: int, blocks: list[_Link]
                 ) -> dict[str, Any] | None:
    txn = ctx.txn
    schema = Schema(txn)
    try:
        pids: dict[str, int] = {}
        types: dict[str, int | None] = {}
        for (st, _sn), p, (ot, _on), _a, _m in blocks:
            for t in (st, ot):          # (references: looked up, not interned)
                if t not in types:
                    types[t] = schema.existing_type(t)
            if p not in pids:           # interned in block order, as the normal path does
                pids[p] = schema.predicate(p)
    except KipError:
        return None
    keys = list(dict.fromkeys(k for b in blocks for k in (b[0], b[2])))
    got = _concept_ids(txn, keys, types)
    if got is None:
        return None
    ids = dict(zip(keys, got))
    triples = [(ids[s], pids[p], ids[o]) for s, p, o, _a, _m in blocks]
    if len(set(triples)) != len(triples):
        return None                     # a link stated twice: the normal way
    ctx.check_deadline()
    found = txn.link_ids(triples)
    new_n: list[int] = []
    new_t: list[tuple[int, int, int]] = []
    new_a: list[dict | None] = []
    new_m: list[dict | None] = []
    olds: list[tuple[int, dict | None, dict | None]] = []
    made: list[str] = []
    old_heads = [(n, *t) for t, n in zip(triples, found) if n is not None]
    if old_heads:                       # (the heads written, for PRIMER: as in `_write`)
        ctx.known_heads.append(tuple(map(list, zip(*old_heads))))
    for triple, n, (_s, p, _o, a, m) in zip(triples, found, blocks):
        if n is None:
            n = txn.new_id()
            new_n.append(n)
            new_t.append(triple)
            new_a.append(dict(a) if a else None)
            new_m.append(m)
        else:
            olds.append((n, a, m))
        made.append(f"P:{n}:{p}")
    if new_n:
        txn.create_link_columns(new_n, [t[0] for t in new_t], [t[1] for t in new_t],
                                [t[2] for t in new_t], new_a, new_m, known_new=True,
                                extra_metadata=writes.new_metadata(None, ctx.now))
        ctx.touched.update(new_n)
        ctx.versioned.update(new_n)
        ctx.known_heads.append((new_n, [t[0] for t in new_t], [t[1] for t in new_t],
                                  [t[2] for t in new_t]))
    _update(ctx, olds)
    return {"blocks": statements, "upsert_concept_nodes": [],
            "upsert_proposition_links": made}
