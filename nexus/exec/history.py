"""The version history extension's statements (docs/history.md): DESCRIBE HISTORY and
REVERT (FIND … AS OF: `nexus.exec.asof`).

The log itself, and how a past state is answered, are `nexus.history`'s. This module turns
them into KIP answers and errors: which point in time a FIND reads, an element's versions
with what changed, and REVERT — undo one command, or return one element to a version — with
its checks (the element changed since: KIP_3005 unless FORCE; protected elements: KIP_3004).
"""
from __future__ import annotations

import base64
from typing import Any, Mapping

from .. import history
from ..errors import ErrorCode, KipError
from ..history import PreImage
from ..store.protocol import ConceptHead, Head, LinkHead, ReadTxn
from ..syntax import ast as A
from . import protect, writes
from .context import ExecContext, WriteContext
from .delete import cascade
from .asof import history_off as _off
from .env import Env
from .registry import executes
from .values import element_id, parse_id

Params = Mapping[str, Any]
Answer = tuple[Any, "str | None"]
ENGINE_META = ("_version", "_created_at", "_updated_at")
DEFAULT_LIMIT = 20
MAX_LIMIT = 200

# --- DESCRIBE HISTORY -----------------------------------------------------------------------

def _element(txn: ReadTxn, ref: A.ElementRef, value: Any) -> int:
    parsed = parse_id(value)
    if parsed is None or (parsed[0] == "P") != ref.link:
        want = '(id: "P:13:treats")' if ref.link else '{id: "C:12"}'
        raise KipError(ErrorCode.KIP_1001, f"{value!r} is not a {'proposition' if ref.link else 'concept'} id",
                       f"Name the element by its id, e.g. {want}.")
    return parsed[1]


def _limit(env: Env, value: A.Value | None) -> int:
    if value is None:
        return DEFAULT_LIMIT
    limit = env.value(value)
    return max(1, min(int(limit), MAX_LIMIT))


def _cursor_seq(env: Env, value: A.Value | None) -> int | None:
    if value is None:
        return None
    raw = env.value(value)
    try:
        text = base64.urlsafe_b64decode(str(raw).encode()).decode()
        if not text.startswith("h:"):
            raise ValueError
        return int(text[2:])
    except (ValueError, UnicodeDecodeError):
        raise KipError(ErrorCode.KIP_1001, "The CURSOR is not one DESCRIBE HISTORY gave",
                       "Pass the next_cursor of the previous page unchanged.") from None


def _encode_cursor(seq: int) -> str:
    return base64.urlsafe_b64encode(f"h:{seq}".encode()).decode()


@executes(A.DescribeHistory)
def run_describe_history(ctx: ExecContext, command: A.DescribeHistory, params: Params
                         ) -> Answer:
    txn = ctx.txn
    if not history.is_enabled(txn):
        raise _off()
    env = Env(ctx, params)
    limit = _limit(env, command.limit)
    below = _cursor_seq(env, command.cursor)
    if command.element is None:
        return _log_page(txn, limit, below)
    n = _element(txn, command.element, env.value(command.element.id))
    return _element_page(txn, n, limit, below)


def _log_page(txn: ReadTxn, limit: int, below: int | None) -> Answer:
    rows: list[dict[str, Any]] = []
    last = history.last_seq(txn) if below is None else below - 1
    seq = last
    horizon_seq, _ = history.horizon(txn)
    while seq > horizon_seq and len(rows) <= limit:
        entry = history.read_entry(txn, seq)
        seq -= 1
        if entry is None:
            continue
        rows.append(_entry_json(entry))
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (_encode_cursor(rows[-1]["seq"]) if more and rows else None)


def _entry_json(entry: history.LogEntry) -> dict[str, Any]:
    out: dict[str, Any] = {"seq": entry.seq, "at": entry.at, "kind": entry.kind,
                           "text": entry.text,
                           "elements": len(entry.changes) + sum(b - a for a, b in entry.fresh)}
    out.update(entry.notes)
    return out


def _element_page(txn: ReadTxn, n: int, limit: int, below: int | None) -> Answer:
    after = history.pre_image(txn, n)
    ident = element_id(txn, after.head) if after is not None else None
    rows: list[dict[str, Any]] = []
    more = False
    for entry in history.element_history(txn, n):
        change = entry.change_of(n)
        if change is None:
            continue
        before = history.undo(change, after)
        if ident is None and before is not None:
            ident = element_id(txn, before.head)
        if below is None or entry.seq < below:
            if len(rows) == limit:
                more = True
                break
            row = _entry_json(entry)
            del row["elements"]
            row["version"] = history.version_after(change)
            row["change"] = _diff(txn, entry, n, before, after)
            rows.append(row)
        after = before
    if not rows and below is None and ident is None:
        raise KipError(ErrorCode.KIP_3002, f"No history for element {n}: it does not exist "
                       "and no kept log record changed it",
                       "Check the id (FIND returns it), or DESCRIBE HISTORY for the log.")
    result = {"id": ident, "versions": rows}
    return result, (_encode_cursor(rows[-1]["seq"]) if more and rows else None)


def _map_diff(old: Mapping[str, Any], new: Mapping[str, Any], skip: tuple[str, ...] = ()
              ) -> dict[str, Any]:
    out: dict[str, Any] = {}
    added = {k: v for k, v in new.items() if k not in old and k not in skip}
    changed = {k: [old[k], v] for k, v in new.items()
               if k in old and old[k] != v and k not in skip}
    removed = [k for k in old if k not in new and k not in skip]
    if added:
        out["added"] = added
    if changed:
        out["changed"] = changed
    if removed:
        out["removed"] = removed
    return out


def _diff(txn: ReadTxn, entry: history.LogEntry, n: int, before: PreImage | None,
          after: PreImage | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if before is None:
        out["created"] = True
    if after is None:
        out["deleted"] = True
    if before is not None and after is not None:
        if before.head != after.head and isinstance(before.head, LinkHead) \
                and isinstance(after.head, LinkHead):
            out["repointed"] = {"from": [before.head.subject, before.head.object],
                                "to": [after.head.subject, after.head.object]}
        attrs = _map_diff(before.attributes, after.attributes)
        meta = _map_diff(before.metadata, after.metadata, ENGINE_META)
        if attrs:
            out["attributes"] = attrs
        if meta:
            out["metadata"] = meta
    known = before if before is not None else after
    if known is not None and isinstance(known.head, ConceptHead):
        added: list[str] = []
        removed: list[str] = []
        for change in entry.changes:
            m, op = change[0], change[1]
            if op == "d" and change[2][0] == "P" and n in (change[2][1], change[2][3]):
                removed.append(f"P:{m}:{txn.symbol_text(change[2][2])}")
            elif op == "c":
                head = txn.head(m)
                if isinstance(head, LinkHead) and n in (head.subject, head.object):
                    added.append(element_id(txn, head))
        if added:
            out["links_added"] = added
        if removed:
            out["links_removed"] = removed
    return out


# --- REVERT -----------------------------------------------------------------------------------

@executes(A.Revert)
def run_revert(ctx: WriteContext, command: A.Revert, params: Params) -> Answer:
    txn = ctx.txn
    recorder = txn if isinstance(txn, history.RecordingTxn) else None
    if recorder is None or not history.is_enabled(txn):
        raise _off()
    env = Env(ctx, params)
    reason = env.value(command.reason)
    if not isinstance(reason, str) or not reason.strip():
        raise KipError(ErrorCode.KIP_1001, "REVERT needs a REASON: a non-empty string",
                       'Say why, e.g. REASON "merged two different people".')
    if command.element is not None and command.version is not None:
        n = _element(txn, command.element, env.value(command.element.id))
        version = env.value(command.version)
        result = _revert_element(ctx, n, version, command.force)
        recorder.notes.update({"kind": "REVERT", "reason": reason,
                               "reverts": result["reverted"], "to_version": version})
    else:
        assert command.command is not None
        seq = env.value(command.command)
        result = _revert_command(ctx, seq, command.force)
        recorder.notes.update({"kind": "REVERT", "reason": reason, "reverts": seq})
    if ctx.dry_run:
        result = {k: (0 if isinstance(v, int) and k != "reverted" else v)
                  for k, v in result.items()}
    return result, None


def _revert_command(ctx: WriteContext, seq: int, force: bool) -> dict[str, Any]:
    txn = ctx.txn
    entry = history.read_entry(txn, seq)
    if entry is None:
        raise KipError(ErrorCode.KIP_3002, f"REVERT COMMAND {seq}: the log has no record {seq}",
                       "DESCRIBE HISTORY lists the records with their `seq`.")
    changes: dict[int, list[Any]] = {c[0]: c for c in entry.changes}
    for a, b in entry.fresh:
        for n in range(a, b):
            changes.setdefault(n, [n, "c", 1])
    if not force:
        _check_unchanged_since(txn, seq, changes)
    # Undo creations (links first, with whatever still hangs on them), then the rest.
    created = [n for n, c in changes.items() if c[1] == "c" and txn.head(n) is not None]
    doomed = cascade(txn, [n for n in created if isinstance(txn.head(n), LinkHead)] +
                     [link for n in created if isinstance(txn.head(n), ConceptHead)
                      for link in _links_at(txn, n)])
    strangers = [m for m in doomed if m not in changes]
    if strangers and not force:
        raise _changed_since(txn, strangers[0], "a later command linked to what it created")
    removed = 0
    for n in doomed + [n for n in created if isinstance(txn.head(n), ConceptHead)]:
        head = txn.head(n)
        if head is None:
            continue
        protect.check_delete(ctx, head)
        if writes.delete(ctx, n):
            removed += 1
    restored = 0
    rest = [c for c in changes.values() if c[1] != "c"]
    # concepts before links (a link needs its ends), each kind in id order
    rest.sort(key=lambda c: (_is_link_change(txn, c), c[0]))
    for change in rest:
        if _undo_change(ctx, change, force):
            restored += 1
    return {"reverted": seq, "restored": restored, "removed": removed}


def _is_link_change(txn: ReadTxn, change: list[Any]) -> bool:
    if change[1] == "d" or change[2] is not None:
        return bool(change[2][0] == "P")
    return isinstance(txn.head(change[0]), LinkHead)


def _undo_change(ctx: WriteContext, change: list[Any], force: bool) -> bool:
    """Undo one logged change on the current state: a deleted element comes back whole;
    an updated one gets back the keys (and the head) that change changed."""
    txn = ctx.txn
    n = change[0]
    current = history.pre_image(txn, n)
    if change[1] == "d":
        before = history.undo(change, None)
        assert before is not None
        if current is not None and not force:
            raise _changed_since(txn, n, "it exists again")
        return _restore(ctx, n, before)
    if current is None:
        if not force:
            raise _changed_since(txn, n, "a later command deleted it")
        return False
    before = history.PreImage(
        current.head if change[2] is None else history.undo(change, current).head,  # type: ignore[union-attr]
        history.undo_keys(change, current.attributes, 3),
        history.undo_keys(change, current.metadata, 4))
    return _restore(ctx, n, before)


def _links_at(txn: ReadTxn, n: int) -> list[int]:
    return [link for _, _, link in txn.out_links(n)] + [link for _, _, link in txn.in_links(n)]


def _check_unchanged_since(txn: ReadTxn, seq: int, changes: Mapping[int, Any]) -> None:
    for n in changes:
        later = history.last_change(txn, n)
        if later is not None and later > seq:
            entry = history.read_entry(txn, later)
            kind = entry.kind if entry is not None else "?"
            raise _changed_since(txn, n, f"command {later} ({kind}) changed it "
                                 f"after command {seq}", later)


def _changed_since(txn: ReadTxn, n: int, why: str, later: int | None = None) -> KipError:
    head = txn.head(n)
    ident = element_id(txn, head) if head is not None else f"element {n}"
    err = KipError(ErrorCode.KIP_3005, f"REVERT: {ident} changed since: {why}",
                   "Revert the later commands first (newest first), or add FORCE to "
                   "overwrite what they did to it.")
    err.data = {"element": ident, **({"changed_by": later} if later is not None else {})}
    return err


def _revert_element(ctx: WriteContext, n: int, version: Any, force: bool) -> dict[str, Any]:
    txn = ctx.txn
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise KipError(ErrorCode.KIP_1001, f"TO VERSION {version!r}: a version is a positive "
                       "integer", "Take one from DESCRIBE HISTORY {id: …}.")
    state = history.pre_image(txn, n)
    if state is not None and state.metadata.get("_version") == version:
        return {"reverted": element_id(txn, state.head), "version": version, "restored": 0}
    for entry in history.element_history(txn, n):
        change = entry.change_of(n)
        if change is None:
            continue
        state = history.undo(change, state)
        if state is not None and state.metadata.get("_version") == version:
            _restore(ctx, n, state)
            head = txn.head(n)
            assert head is not None
            return {"reverted": element_id(txn, head),
                    "version": txn.metadata(n).get("_version"), "restored": 1}
    raise KipError(ErrorCode.KIP_3002, f"REVERT: version {version} of element {n} is not "
                   "in the kept history",
                   "DESCRIBE HISTORY {id: …} lists the versions that can be restored.")


def _restore(ctx: WriteContext, n: int, pre: PreImage) -> bool:
    """Put element `n` back in the state `pre` (its engine metadata moving forward)."""
    txn = ctx.txn
    head = txn.head(n)
    now = ctx.now
    meta = dict(pre.metadata)
    current_version = txn.metadata(n).get("_version") if head is not None else None
    base = max(v for v in (meta.get("_version"), current_version, 0)
               if isinstance(v, int) and not isinstance(v, bool))
    meta["_version"] = base + 1
    meta["_updated_at"] = now
    if head is not None and head == pre.head:
        protect.check_write(ctx, head, pre.attributes)
        writes.keep_attributes(ctx, n)
        txn.set_attributes(n, dict(pre.attributes))
        txn.set_metadata(n, meta)
        ctx.touched.add(n)
        ctx.moved.pop(n, None)
        return True
    if head is not None:                # a link repointed (MERGE): put it back where it was
        protect.check_delete(ctx, head)
        writes.delete(ctx, n)
    _check_free(ctx, n, pre.head)
    h = pre.head
    if isinstance(h, ConceptHead):
        txn.create_concept(n, h.type_id, h.name, dict(pre.attributes), meta)
    else:
        txn.create_link(n, h.subject, h.predicate_id, h.object, dict(pre.attributes), meta)
    ctx.touched.add(n)
    ctx.removed.discard(n)
    ctx.moved.pop(n, None)
    return True


def _check_free(ctx: WriteContext, n: int, h: Head) -> None:
    txn = ctx.txn
    if isinstance(h, ConceptHead):
        other = txn.concept_id(h.type_id, h.name)
        if other is not None and other != n:
            raise _changed_since(txn, other, f"{txn.symbol_text(h.type_id)} "
                                 f"{h.name!r} was created again as C:{other}")
        return
    for end in (h.subject, h.object):
        if txn.head(end) is None:
            raise KipError(ErrorCode.KIP_3005, f"REVERT: cannot restore link {n}: its end "
                           f"{end} no longer exists",
                           "Revert the command that deleted that end first, or restore it.")
    other = txn.link_id(h.subject, h.predicate_id, h.object)
    if other is not None and other != n:
        raise _changed_since(txn, other, "the same link exists again under another id")


__all__ = ["run_describe_history", "run_revert"]
