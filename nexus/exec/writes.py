"""Element writes with engine metadata: the one place that creates, updates and deletes.

Owns the engine-maintained metadata of CONTRACT §3 — `_version` (1 at creation, +1 on every
write of that element, a no-op rewrite included), `_created_at`, `_updated_at` (= the
command's `ctx.now`) — the refusal of `_`-prefixed keys coming from KML (`KIP_2002`), and the
bookkeeping of `ctx.touched` / `ctx.removed` that the search index consumes. UPSERT, DELETE
and the bulk loader all write through here, so those rules hold everywhere.

It does not decide *whether* a write is allowed (schema: `nexus.exec.schema`; protection:
`nexus.exec.protect`) nor what to match (`nexus.exec.upsert`, `nexus.exec.delete`).
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

from ..errors import ErrorCode, KipError
from ..store.protocol import ConceptHead
from .context import WriteContext

ENGINE_KEYS = ("_version", "_created_at", "_updated_at")


def pos_kw(pos: Any) -> dict[str, Any]:
    """KipError keyword arguments pointing at an AST position (none when unknown)."""
    if pos is None:
        return {}
    return {"line": pos.line, "column": pos.column}


def check_keys(keys: Iterable[str], where: str, pos: Any = None) -> None:
    """Refuse `_`-prefixed keys: they are the engine's (`_version`, `_score`...)."""
    for key in keys:
        if isinstance(key, str) and key.startswith("_"):
            raise KipError(
                ErrorCode.KIP_2002,
                f"'{key}' in {where}: keys starting with '_' are reserved for the engine",
                "Remove the key or rename it without the leading underscore; _version, "
                "_created_at and _updated_at are maintained by the engine.",
                **pos_kw(pos))


def new_metadata(meta: dict | None, now: str) -> dict:
    """The metadata of a new element: the user's keys, then the engine's."""
    out = dict(meta) if meta else {}
    out["_version"] = 1
    out["_created_at"] = now
    out["_updated_at"] = now
    return out


def create_concept(ctx: WriteContext, type_id: int, name: str, attributes: dict | None,
                   metadata: dict | None) -> int:
    txn = ctx.txn
    n = txn.new_id()
    txn.create_concept(n, type_id, name, dict(attributes) if attributes else {},
                       new_metadata(metadata, ctx.now))
    ctx.touched.add(n)
    ctx.versioned.add(n)
    return n


def create_link(ctx: WriteContext, subject: int, predicate_id: int, obj: int,
                attributes: dict | None, metadata: dict | None) -> int:
    txn = ctx.txn
    n = txn.new_id()
    txn.create_link(n, subject, predicate_id, obj, dict(attributes) if attributes else {},
                    new_metadata(metadata, ctx.now))
    ctx.touched.add(n)
    ctx.versioned.add(n)
    return n


def bump(meta: dict, now: str) -> dict:
    """Advance the engine metadata of a stored element in place (one more write)."""
    version = meta.get("_version")
    meta["_version"] = (version if type(version) is int else 0) + 1
    meta.setdefault("_created_at", now)
    meta["_updated_at"] = now
    return meta


def update(ctx: WriteContext, n: int, attributes: dict | None, metadata: dict | None) -> None:
    """Write an existing element: shallow-merge `attributes` (if given) and `metadata` onto
    what is stored, bump `_version` / `_updated_at`. A `None` value is stored as null."""
    txn = ctx.txn
    update_known(ctx, n, txn.attributes(n) if attributes else None, txn.metadata(n),
                 attributes, metadata)


def update_known(ctx: WriteContext, n: int, stored_attributes: dict | None, stored_meta: dict,
                 attributes: dict | None, metadata: dict | None) -> None:
    """`update` for a caller that has just read the element's maps (fresh dicts it hands
    over: they are modified): UPDATE reads them anyway to compute its expressions."""
    txn = ctx.txn
    if attributes:
        assert stored_attributes is not None
        keep_attributes(ctx, n, stored_attributes)
        stored_attributes.update(attributes)
        txn.set_attributes(n, stored_attributes)
        ctx.unsearched.discard(n)
        ctx.moved.pop(n, None)
    elif n not in ctx.touched:
        ctx.unsearched.add(n)           # metadata only: nothing searchable changed
    if metadata:
        stored_meta.update(metadata)
    txn.set_metadata(n, advance(ctx, n, stored_meta))
    ctx.touched.add(n)


def update_metadata_many(ctx: WriteContext, items: list[tuple[int, dict]]) -> None:
    """`update_known` for a batch of metadata-only writes `(n, metadata)` — each map the
    element's stored metadata with the new keys already merged in (an UPDATE sweep): the
    same engine metadata per element, then one store call for the batch
    (`WriteTxn.set_metadata_many`)."""
    if not items:
        return
    touched, unsearched, versioned, now = ctx.touched, ctx.unsearched, ctx.versioned, ctx.now
    for n, meta in items:
        if n not in touched:
            unsearched.add(n)           # metadata only: nothing searchable changed
        if n in versioned:              # `advance`, inline: this runs per element
            meta["_updated_at"] = now
        else:
            versioned.add(n)
            bump(meta, now)
    ctx.txn.set_metadata_many(items)
    touched.update(n for n, _ in items)


def touch(ctx: WriteContext, ids: list[int], ends: tuple[str, str] | None = None) -> None:
    """A write of existing elements that changed neither map (MERGE moved a link's ends):
    `_version` +1 and `_updated_at` for each, and their search documents re-derived.
    `ends` (the endpoint texts of the old end and the new one) says each moved one end
    only: the search index may then rewrite their documents from the stored ones
    (`ctx.moved`)."""
    txn = ctx.txn
    versioned, now = ctx.versioned, ctx.now
    # First bump of each by this command: patched in the store (`bump_versions`: no map
    # read, decoded or encoded); the rest — bumped before, or not patched — as maps.
    unique = dict.fromkeys(ids)
    rest = [n for n in unique if n in versioned]
    first = [n for n in unique if n not in versioned]
    done = txn.bump_versions(first, now) if first else []
    versioned.update(n for n, answer in zip(first, done) if answer is not None)
    rest += [n for n, answer in zip(first, done) if answer is None]
    if rest:
        maps = txn.metadata_of(rest)    # one batched read
        for n, meta in zip(rest, maps):     # `advance`, inline: this runs per link
            if n in versioned:
                meta["_updated_at"] = now
            else:
                versioned.add(n)
                bump(meta, now)
        txn.set_metadata_many(list(zip(rest, maps)))
    touched, moved = ctx.touched, ctx.moved
    if ends is None:
        for n in ids:
            moved.pop(n, None)
    else:
        for n in ids:
            before = moved.pop(n, None)
            if before is not None:      # moved again: from where it was first
                if before[1] == ends[0]:
                    moved[n] = (before[0], ends[1])
            elif n not in touched:      # written before in another way: derived in full
                moved[n] = ends
    touched.update(ids)
    ctx.unsearched.difference_update(ids)


def advance(ctx: WriteContext, n: int, meta: dict) -> dict:
    """`bump`, once per command and element: a second write of `n` by the same command
    only refreshes `_updated_at` (CONTRACT §3: one command bumps `_version` once)."""
    if n in ctx.versioned:
        meta["_updated_at"] = ctx.now
        return meta
    ctx.versioned.add(n)
    return bump(meta, ctx.now)


def remove_keys(ctx: WriteContext, n: int, keys: Iterable[str], field: str,
                check: Callable[[list[str]], None] | None = None) -> bool:
    """Delete `keys` from an element's `field` ("attributes" or "metadata"). Writes (and
    bumps `_version`) only when one of them was present; `check(present)` runs first and
    may refuse. Returns whether it wrote."""
    txn = ctx.txn
    target = txn.attributes(n) if field == "attributes" else txn.metadata(n)
    present = [k for k in keys if k in target]
    if not present:
        return False
    if check is not None:
        check(present)
    if field == "attributes":
        keep_attributes(ctx, n, target)
    for k in present:
        del target[k]
    if field == "attributes":
        txn.set_attributes(n, target)
        meta = txn.metadata(n)
        ctx.unsearched.discard(n)
        ctx.moved.pop(n, None)
    else:
        meta = target
        if n not in ctx.touched:
            ctx.unsearched.add(n)
    txn.set_metadata(n, advance(ctx, n, meta))
    ctx.touched.add(n)
    return True


def keep_attributes(ctx: WriteContext, n: int, attributes: dict | None = None) -> None:
    """Before element `n`'s attributes are overwritten: keep them, the first time since
    the session last staged (`WriteContext.before_attributes`). `attributes`: as stored,
    when the caller has just read them (copied here: the caller may modify them)."""
    before = ctx.before_attributes
    if before is None or n in before:
        return
    before[n] = dict(ctx.store_txn.attributes(n) if attributes is None else attributes)


def delete(ctx: WriteContext, n: int) -> bool:
    before = ctx.before_heads
    if before is not None and n not in before:  # (the store's own txn: no recorder copy)
        head = ctx.store_txn.head(n)
        if head is not None:
            before[n] = head
            if type(head) is ConceptHead:       # (a concept's document: its attributes)
                keep_attributes(ctx, n)
    if ctx.txn.delete(n):
        ctx.removed.add(n)
        ctx.touched.discard(n)
        ctx.moved.pop(n, None)
        return True
    return False
