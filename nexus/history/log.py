"""The version log: one record per committed write session, in the same transaction.

Tables (aux, declared in `nexus.store.protocol.AUX_TABLES`):

- `history`: `seq` (8 bytes, big-endian) → the record (msgpack): `seq`, `at` (the command's
  ISO timestamp), `ts` (the same in epoch milliseconds), `kind` (the statement keyword, or
  API for a write made through the library), `text` (an excerpt of the command),
  `changes` — one per element the session changed, as a *reverse delta* (what undoes it):
  `[n, "c", version]` created (absent before); `[n, "d", head, attributes, metadata]`
  deleted (its whole last state); `[n, "u", head | null, attributes delta, metadata delta,
  version]` updated — a delta is `[{key: old value}, [keys that were absent]]` (null: no
  change), the head only when it moved (a link repointed by MERGE) — `moved` (the links
  a MERGE moved and changed in no other way, as columns: `_Moves`; read back as the "u"
  changes they stand for) and `notes` (REVERT's target and reason). Deltas keep the log small: ten edits of one attribute cost ten old
  values, not ten copies of the element.
  `swept`: the elements whose metadata alone the session changed (an UPDATE sweep), as
  columns (`_Swept`) instead of a "u" change each; read back as those "u" changes, so
  every reader sees plain changes. A record written before the block existed has them in
  `changes`, and reads as it did.
- `histel`: `n` + `seq` → empty: the records that changed element `n`, for DESCRIBE HISTORY
  and for REVERT's "changed since" check. A session that creates more than `BULK_INDEX`
  elements (a bulk import) keeps its created ids as ranges in `histnew` (`end` + `seq` →
  `start`) instead of one `histel` key per element. So does a session that updates more than
  `BULK_INDEX` (an UPDATE sweep) for its runs of at least `RUN_MIN` consecutive updated ids:
  the record lists those runs under `runs` (their changes are in `changes` as usual), and
  `histnew` indexes them like created ranges — a sweep over 100k links bulk-created together
  costs one index key, not 100k.
- the `engine` table's `history.enabled` key: the per-database switch (absent: on).

Retention: `compact(txn, before_ms)` drops the records older than a time and their index
keys. The log only grows otherwise.
"""
from __future__ import annotations

import struct
import time
from bisect import bisect_left
from operator import itemgetter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

import msgpack

from nexus.store.bulk import gc_paused
from nexus.history.recording import Before, PreImage, RecordingTxn
from nexus.store.protocol import ConceptHead, Head, JsonMap, LinkHead, ReadTxn, WriteTxn
from nexus.timestamps import iso_ms, stamp_ms

if TYPE_CHECKING:
    from nexus.exec.context import WriteContext

LOG = "history"
BY_ELEMENT = "histel"
BULK_CREATED = "histnew"
SWITCH = b"history.enabled"
BULK_INDEX = 10_000             # created (or updated) ids per session indexed one by one
RUN_MIN = 64                    # consecutive updated ids indexed as one range (module doc)
SWEPT_BLOCK = True              # False: metadata-only changes as plain "u" changes (`_Swept`)
EXCERPT_CHARS = 300

_SEQ = struct.Struct(">Q")
_PAIR = struct.Struct(">QQ")


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One record of the log, decoded (pre-images stay in their encoded list form)."""
    seq: int
    at: str
    ts: int
    kind: str
    text: str
    changes: list[list[Any]]            # reverse deltas (module doc)
    fresh: list[list[int]]              # [start, end) ranges of bulk-created ids
    notes: dict[str, Any]
    runs: list[list[int]]               # [start, end) ranges of `changes` indexed as ranges

    def change_of(self, n: int) -> list[Any] | None:
        """The change this record made to `n` (a bulk creation reads as `[n, "c", 1]`)."""
        changes = self.changes
        # `append` writes the changes sorted by id: a sweep's record is searched, not scanned.
        i = bisect_left(changes, n, key=itemgetter(0))
        if i < len(changes) and changes[i][0] == n:
            return changes[i]
        if any(a <= n < b for a, b in self.fresh):
            return [n, "c", 1]
        for change in changes:          # not found where sorted order puts it
            if change[0] == n:
                return change
        return None


# --- the switch --------------------------------------------------------------------------

def is_enabled(txn: ReadTxn) -> bool:
    return txn.aux("engine").get(SWITCH) != b"0"


def set_enabled(txn: WriteTxn, on: bool) -> None:
    txn.aux("engine").put(SWITCH, b"1" if on else b"0")


# --- changes: reverse deltas ------------------------------------------------------------------

def encode_head(head: Head) -> list[Any]:
    if isinstance(head, ConceptHead):
        return ["C", head.type_id, head.name]
    return ["P", head.subject, head.predicate_id, head.object]


def decode_head(n: int, raw: list[Any]) -> Head:
    if raw[0] == "C":
        return ConceptHead(n, raw[1], raw[2])
    return LinkHead(n, raw[1], raw[2], raw[3])


def _delta(old: JsonMap, new: JsonMap) -> list[Any] | None:
    """What turns `new` back into `old`: [{key: old value}, [keys `old` lacks]]."""
    restore = {k: v for k, v in old.items() if k not in new or new[k] != v}
    unset = [k for k in new if k not in old]
    return [restore, unset] if restore or unset else None


def _reverse(after: JsonMap, delta: list[Any] | None) -> JsonMap:
    out = dict(after)
    if delta:
        out.update(delta[0])
        for k in delta[1]:
            out.pop(k, None)
    return out


def make_change(n: int, pre: PreImage | None, post: PreImage | None) -> list[Any] | None:
    """The log's change for `n` going from `pre` to `post` (None: nothing to log)."""
    if pre is None:
        return None if post is None else [n, "c", post.metadata.get("_version")]
    if post is None:
        return [n, "d", encode_head(pre.head), pre.attributes, pre.metadata]
    return [n, "u", None if pre.head == post.head else encode_head(pre.head),
            _delta(pre.attributes, post.attributes), _delta(pre.metadata, post.metadata),
            post.metadata.get("_version")]


def _change(inner: ReadTxn, n: int, before: Before | None) -> list[Any] | None:
    """The log's change for `n`, from what the session kept of it and its state now (only
    the maps the session wrote are read and compared)."""
    if before is None:
        # Created by the session: its change is its `_version` (no attributes to decode).
        if inner.head(n) is None:
            return None
        return [n, "c", inner.metadata(n).get("_version")]
    # Neither repointed nor deleted by the session (the recorder says): the head is
    # unchanged, not read — a sweep's record costs no read per element (and the recorder
    # may not have read it either: `Before.head`).
    head_was = None
    if before.moved:
        assert before.head is not None         # (the recorder reads it before a move)
        head = inner.head(n)
        if head is None:
            assert before.attributes is not None and before.metadata is not None
            return make_change(n, PreImage(before.head, before.attributes, before.metadata),
                               None)
        if head != before.head:
            head_was = encode_head(before.head)
    # The maps as the session left them: kept by the recorder as it wrote them, else read.
    meta = before.metadata_now
    if meta is None:
        meta = inner.metadata(n)
    attributes_delta = None
    if before.attributes is not None:
        attributes = before.attributes_now
        if attributes is None:
            attributes = inner.attributes(n)
        attributes_delta = _delta(before.attributes, attributes)
    return [n, "u", head_was, attributes_delta,
            None if before.metadata is None else _delta(before.metadata, meta),
            meta.get("_version")]


def undo(change: list[Any], after: PreImage | None) -> PreImage | None:
    """The element's state before `change`, given its state after it."""
    n, op = change[0], change[1]
    if op == "c":
        return None
    if op == "d":
        return PreImage(decode_head(n, change[2]), dict(change[3]), dict(change[4]))
    if after is None:
        raise ValueError(f"history: element {n} is updated in a record but absent after it")
    head = after.head if change[2] is None else decode_head(n, change[2])
    return PreImage(head, _reverse(after.attributes, change[3]),
                    _reverse(after.metadata, change[4]))


def version_after(change: list[Any]) -> Any:
    """The element's `_version` after `change` (None: it was deleted)."""
    op = change[1]
    return change[2] if op == "c" else (change[5] if op == "u" else None)


def undo_keys(change: list[Any], current: JsonMap, which: int) -> JsonMap:
    """`current` attributes (which=3) or metadata (4) with only what `change` did to them
    undone — what REVERT COMMAND puts back when later commands changed other keys."""
    return _reverse(current, change[which]) if change[1] == "u" else dict(current)


# --- links MERGE moved: one compact block of the record -----------------------------------

VERSION, UPDATED_AT = "_version", "_updated_at"


class _Moves:
    """The record's `moved` block: the links whose only change in the session was a move of
    an end (MERGE) — a new head and `_version` +1 / `_updated_at`, the rest of their
    metadata and their attributes as they were. Kept as columns (`n`, the old head's `s`,
    `p`, `o`, `_version` after as `v`, the old `_updated_at` as an index `t` into the
    distinct values `tv`) instead of one change each: a MERGE of a concept with a thousand
    links logs a thousand such rows. Reading expands each row into the "u" change it
    stands for (`_expand_moves`), so every reader sees plain changes."""

    __slots__ = ("n", "s", "p", "o", "v", "t", "tv")

    def __init__(self) -> None:
        self.n: list[int] = []
        self.s: list[int] = []
        self.p: list[int] = []
        self.o: list[int] = []
        self.v: list[int] = []
        self.t: list[int] = []
        self.tv: dict[Any, int] = {}

    def add(self, inner: ReadTxn, n: int, pre: Before) -> bool:
        """Take `n` as a row when its change is exactly such a move; False: log it as a
        change (`_change`)."""
        old, meta = pre.metadata, pre.metadata_now
        was = pre.head
        if old is None or meta is None or type(was) is not LinkHead:
            return False
        version = meta.get(VERSION)
        if type(version) is not int or old.get(VERSION) != version - 1 or \
                len(old) != len(meta):
            return False
        updated = old.get(UPDATED_AT)
        if type(updated) is not str or meta.get(UPDATED_AT) == updated:
            return False
        for k, v in old.items():        # every other key as it was
            if k != VERSION and k != UPDATED_AT and (k not in meta or meta[k] != v):
                return False
        return self._row(inner, n, was, version, updated)

    def add_bumped(self, inner: ReadTxn, n: int, pre: Before, now: str) -> bool:
        """`add` for a link whose metadata the session changed only by `bump_versions`
        (`pre.bumped`: its `_version` and `_updated_at` before; the rest as it was, not
        read): the same row, from what the bump answered (`now`: the session's time — an
        `_updated_at` that did not change is left to `_change`, as in `add`)."""
        bumped, was = pre.bumped, pre.head
        if bumped is None or pre.metadata is not None or type(was) is not LinkHead:
            return False
        version, updated = bumped
        if type(version) is not int or type(updated) is not str or updated == now:
            return False
        return self._row(inner, n, was, version + 1, updated)

    def _row(self, inner: ReadTxn, n: int, was: LinkHead, version: int, updated: str) -> bool:
        """Append the row of link `n` (its head before the move `was`; `version` after it,
        `updated` its `_updated_at` before), unless its head did not move after all."""
        head = inner.head(n)
        if type(head) is not LinkHead or head == was:
            return False
        self.n.append(n)
        self.s.append(was.subject)
        self.p.append(was.predicate_id)
        self.o.append(was.object)
        self.v.append(version)
        t = self.tv.get(updated)
        if t is None:
            t = self.tv[updated] = len(self.tv)
        self.t.append(t)
        return True

    def columns(self) -> dict[str, list[Any]]:
        return {"n": self.n, "s": self.s, "p": self.p, "o": self.o, "v": self.v,
                "t": self.t, "tv": list(self.tv)}


def _expand_moves(moved: dict[str, list[Any]]) -> list[list[Any]]:
    """The "u" changes a record's `moved` block stands for (`_Moves`)."""
    tv = moved["tv"]
    return [[n, "u", ["P", s, p, o], None, [{VERSION: v - 1, UPDATED_AT: tv[t]}, []], v]
            for n, s, p, o, v, t in zip(moved["n"], moved["s"], moved["p"], moved["o"],
                                        moved["v"], moved["t"])]


# --- elements whose metadata alone changed: one compact block of the record ---------------

class _Swept:
    """The record's `swept` block: the elements whose only change in the session was to
    their metadata, the map kept by the recorder (an UPDATE sweep) — as columns instead of
    a "u" change each: `n` the ids (ascending), `v` the `_version` after, `s` each one's
    *shape* (an index into `k`), `x` the old values of every row's restored keys, one row
    after another. A shape is the list of the restored keys (old values in `x`, in this
    order), a null, then the keys the element lacked before (to unset). A sweep's 100k
    rows share one or two shapes: the record packs flat lists of scalars. Reading expands
    each row into the "u" change it stands for (`_expand_swept`), so every reader sees
    plain changes, exactly as the per-element form gave them."""

    __slots__ = ("n", "s", "v", "x", "shapes")

    def __init__(self) -> None:
        self.n: list[int] = []
        self.s: list[int] = []
        self.v: list[Any] = []
        self.x: list[Any] = []
        self.shapes: dict[tuple[Any, ...], int] = {}

    def columns(self) -> dict[str, Any]:
        out: dict[str, Any] = {"n": self.n, "s": self.s, "v": self.v,
                               "k": [list(shape) for shape in self.shapes]}
        x = self.x
        width = out["k"][0].index(None) if len(self.shapes) == 1 else 0
        if not width or len(x) < 2 * width:
            out["x"] = x
            return out
        # One shape (a sweep): `x` as a column per restored key, the text columns as
        # indexes into their distinct values — the old `_updated_at` of 100k links bulk
        # loaded together is one string, not 100k.
        columns: list[Any] = []
        for j in range(width):
            column: Any = x[j::width]
            if all(type(v) is str for v in column):
                distinct = dict.fromkeys(column)
                if len(distinct) * 2 <= len(column):
                    index = {v: i for i, v in enumerate(distinct)}
                    column = {"d": list(distinct), "i": [index[v] for v in column]}
            columns.append(column)
        out["c"] = columns
        return out


def _swept_values(swept: dict[str, Any]) -> list[Any]:
    """The block's `x`, whether kept flat or as columns (`_Swept.columns`)."""
    if "x" in swept:
        return list(swept["x"])
    columns = [c if type(c) is list else [c["d"][i] for i in c["i"]] for c in swept["c"]]
    return [v for row in zip(*columns) for v in row]


def _expand_swept(swept: dict[str, Any]) -> list[list[Any]]:
    """The "u" changes a record's `swept` block stands for (`_Swept`)."""
    shapes: list[tuple[list[Any], list[Any]]] = []
    for shape in swept["k"]:
        cut = shape.index(None)
        shapes.append((shape[:cut], shape[cut + 1:]))
    x = _swept_values(swept)
    at = 0
    out: list[list[Any]] = []
    append = out.append
    for n, s, v in zip(swept["n"], swept["s"], swept["v"]):
        keys, unset = shapes[s]
        if keys:
            end = at + len(keys)
            append([n, "u", None, None, [dict(zip(keys, x[at:end])), list(unset)], v])
            at = end
        else:
            append([n, "u", None, None, [{}, list(unset)] if unset else None, v])
    return out


# --- writing ---------------------------------------------------------------------------------

def last_seq(txn: ReadTxn) -> int:
    """The newest record's seq (after retention dropped them all: the last dropped one's,
    so that seqs never repeat)."""
    for key, _ in txn.aux(LOG).scan(reverse=True):
        return int(_SEQ.unpack(key)[0])
    return horizon(txn)[0]


def _kind_of(text: str | None, notes: dict[str, Any]) -> str:
    if notes.get("kind"):
        return str(notes["kind"])
    if not text:
        return "API"
    word = text.lstrip().split(None, 1)[0] if text.strip() else ""
    return word.upper() if word.isalpha() else "KML"


def append(ctx: "WriteContext") -> int | None:
    """Write the log record of the session whose context is `ctx` (its transaction must
    be a `RecordingTxn`); returns its seq, None when the session changed nothing."""
    txn = ctx.txn
    if not isinstance(txn, RecordingTxn):
        return None
    if not txn.before and not txn.fresh:
        return None
    inner = txn.inner
    if not is_enabled(inner):
        return None
    seq = last_seq(inner) + 1
    at = ctx.now
    changes: list[list[Any]] = []
    created_many = sum(len(r) for r in txn.fresh) + \
        sum(1 for p in txn.before.values() if p is None) > BULK_INDEX
    fresh: list[list[int]] = [[r.start, r.stop] for r in txn.fresh if len(r)]
    loose_created: list[int] = []
    before = txn.before
    created = txn.created_versions
    moves = _Moves()
    # the `_updated_at` a `bump_versions` of this session wrote: `at` itself when it packs
    # (`stamp_ms` answers only for texts that `stamp_text` gives back exactly)
    bumped_at = at if stamp_ms(at) is not None else None
    swept = _Swept()
    columnar = SWEPT_BLOCK
    shapes, sw_n, sw_s, sw_v, sw_x = swept.shapes, swept.n, swept.s, swept.v, swept.x
    with gc_paused():           # a change per element, no cycle: no full collection walks them
        for n in sorted(before):
            pre = before[n]
            if pre is None:
                if created_many:
                    loose_created.append(n)
                    continue
                if n in created:        # `_change`, with the `_version` it was created with
                    # No head read: the recorder keeps `n` in `created_versions` only
                    # while it exists (its `delete`, the only way an element goes, drops
                    # it), so a created element is known to be there.
                    changes.append([n, "c", created[n]])
                    continue
            elif (columnar and pre.attributes is None and pre.metadata is not None
                  and not pre.moved and pre.metadata_now is not None):
                # Metadata written and kept by the recorder, nothing else (an UPDATE
                # sweep): `_change`, inline — this runs once per element — as a row of
                # the `swept` block (`_Swept`: columns, not a list and a map per element).
                old, meta = pre.metadata, pre.metadata_now
                restore = {k: v for k, v in old.items() if k not in meta or meta[k] != v}
                shape = (*restore, None, *[k for k in meta if k not in old])
                i = shapes.get(shape)
                if i is None:
                    i = shapes[shape] = len(shapes)
                sw_n.append(n)
                sw_s.append(i)
                sw_v.append(meta.get("_version"))
                sw_x.extend(restore.values())
                continue
            elif pre.moved and pre.attributes is None and pre.metadata_now is not None \
                    and moves.add(inner, n, pre):
                continue        # a link MERGE moved, and nothing else: one row of `moves`
            elif (pre.bumped is not None and not pre.moved and pre.attributes is None
                  and pre.metadata is None and bumped_at is not None):
                # `_version` and `_updated_at` bumped in place, nothing else (a links
                # command's subjects): `_change`'s answer from the two values the bump
                # replaced, without reading the map back — the fixed layout keeps
                # `_version` before `_updated_at`, and the bump wrote this session's time.
                version, updated = pre.bumped
                replaced: dict[str, Any] = {"_version": version}
                if updated != bumped_at:
                    replaced["_updated_at"] = updated
                changes.append([n, "u", None, None, [replaced, []], version + 1])
                continue
            elif pre.bumped is not None:
                if pre.moved and pre.attributes is None and moves.add_bumped(inner, n, pre, at):
                    continue    # the same, its `_version` bumped in place (`bump_versions`)
                pre.metadata = txn.pre_metadata(n, pre)     # the map before, for `_change`
            change = _change(inner, n, pre)
            if change is not None:
                changes.append(change)
    fresh.extend(_runs(loose_created))
    if not changes and not fresh and not moves.n and not sw_n:
        return None
    ids = [c[0] for c in changes]
    if moves.n or sw_n:
        ids = sorted(ids + moves.n + sw_n) if ids or moves.n else list(sw_n)
    runs = _update_runs(changes, moves.n + sw_n) if len(ids) > BULK_INDEX else []
    notes = dict(txn.notes)
    record = {"seq": seq, "at": at, "ts": iso_ms(at), "kind": _kind_of(ctx.text, notes),
              "text": (ctx.text or "")[:EXCERPT_CHARS], "changes": changes,
              "fresh": fresh, "notes": {k: v for k, v in notes.items() if k != "kind"}}
    if runs:
        record["runs"] = runs
    if moves.n:
        record["moved"] = moves.columns()
    if sw_n:
        record["swept"] = swept.columns()
    inner.aux(LOG).put(_SEQ.pack(seq), msgpack.packb(record, use_bin_type=True))
    if runs:
        # The ids outside the runs (`ids` ascending, runs ascending and disjoint): slices.
        single: list[int] = []
        pos = 0
        for a, b in runs:
            i = bisect_left(ids, a, pos)
            single.extend(ids[pos:i])
            pos = bisect_left(ids, b, i)
        single.extend(ids[pos:])
    else:
        single = ids
    inner.aux_put_many(BY_ELEMENT, ((_PAIR.pack(n, seq), b"") for n in single))
    for start, end in fresh + runs:
        inner.aux(BULK_CREATED).put(_PAIR.pack(end, seq), _SEQ.pack(start))
    return seq


def _update_runs(changes: list[list[Any]], moved: list[int]) -> list[list[int]]:
    """The runs of at least `RUN_MIN` consecutive ids among the "u" changes (the `moved`
    links' included): no bulk-created range of the record can overlap one (those ids are
    created, not updated), so no two index keys of a record share an end."""
    runs = _runs([c[0] for c in changes if c[1] == "u"] + moved)
    return [r for r in runs if r[1] - r[0] >= RUN_MIN]


def _runs(ids: list[int]) -> list[list[int]]:
    if ids:
        lo, hi = min(ids), max(ids)
        if hi - lo + 1 == len(ids) == len(set(ids)):
            return [[lo, hi + 1]]           # one run (a sweep of one bulk-created chain)
    out: list[list[int]] = []
    for n in sorted(ids):
        if out and out[-1][1] == n:
            out[-1][1] = n + 1
        else:
            out.append([n, n + 1])
    return out


KEEP = b"history.keep"
PRUNE_EVERY = 3600.0            # seconds between two applications of the retention policy


def retention(txn: ReadTxn) -> float | None:
    """The database's retention policy: seconds of history to keep (None: keep all)."""
    raw = txn.aux("engine").get(KEEP)
    return None if raw is None else float(raw.decode())


def set_retention(txn: WriteTxn, seconds: float | None) -> None:
    if seconds is None:
        txn.aux("engine").delete(KEEP)
    else:
        txn.aux("engine").put(KEEP, repr(float(seconds)).encode())


class HistoryHook:
    """The commit hook that appends the log record (`nexus.engine.CommitHook`), and
    applies the retention policy (`retention`) in a write's own transaction, at most once
    per `PRUNE_EVERY` seconds of this process."""

    def __init__(self) -> None:
        self.next_prune = 0.0

    def stage(self, ctx: "WriteContext") -> None:
        pass

    def aux_reads(self, ctx: "WriteContext") -> list[tuple[str, list[bytes], list[bytes]]]:
        """What `before_commit` will read, for the engine to ask at once with the other
        hooks' (`Engine.write_session`): the switch, the horizon, the retention and the
        log's last record — when the session changed anything."""
        txn = ctx.txn
        if not isinstance(txn, RecordingTxn) or (not txn.before and not txn.fresh):
            return []
        return [("engine", [SWITCH, HORIZON, KEEP], []), (LOG, [], [b""])]

    def before_commit(self, ctx: "WriteContext") -> None:
        if append(ctx) is None:
            return
        now = time.monotonic()
        if now < self.next_prune:
            return
        self.next_prune = now + PRUNE_EVERY
        keep = retention(ctx.txn)
        if keep is not None:
            compact(ctx.txn, int((time.time() - keep) * 1000))

    def after_commit(self, ctx: "WriteContext") -> None:
        pass

    def rolled_back(self, ctx: "WriteContext") -> None:
        pass


# --- reading ---------------------------------------------------------------------------------

def _decode(raw: bytes) -> LogEntry:
    d = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    changes = d["changes"]
    moved, swept = d.get("moved"), d.get("swept")
    if swept:
        rows = _expand_swept(swept)
        changes = sorted(changes + rows, key=itemgetter(0)) if changes else rows
    if moved:
        changes = sorted(changes + _expand_moves(moved), key=itemgetter(0))
    return LogEntry(d["seq"], d["at"], d["ts"], d["kind"], d["text"], changes,
                    d.get("fresh", []), d.get("notes", {}), d.get("runs", []))


def read_entry(txn: ReadTxn, seq: int) -> LogEntry | None:
    if not 0 < seq < 1 << 63:
        return None
    raw = txn.aux(LOG).get(_SEQ.pack(seq))
    return None if raw is None else _decode(raw)


def entries_after(txn: ReadTxn, *, seq: int | None = None, ts: int | None = None
                  ) -> list[LogEntry]:
    """The records after log position `seq`, or after time `ts` (epoch ms; records at
    `ts` itself are not after it), oldest first."""
    out: list[LogEntry] = []
    table = txn.aux(LOG)
    if seq is not None:
        for _, raw in table.scan(start=_SEQ.pack(seq + 1)):
            out.append(_decode(raw))
        return out
    for _, raw in table.scan(reverse=True):
        entry = _decode(raw)
        if ts is not None and entry.ts <= ts:
            break
        out.append(entry)
    out.reverse()
    return out


def _element_seqs(txn: ReadTxn, n: int) -> set[int]:
    """The log positions of the records that changed element `n` (bulk creations
    included), read from the indexes alone: no record is decoded."""
    seqs: set[int] = set()
    for key, _ in txn.aux(BY_ELEMENT).scan(_SEQ.pack(n)):
        seqs.add(_PAIR.unpack(key)[1])
    for key, start in txn.aux(BULK_CREATED).scan(start=_PAIR.pack(n + 1, 0)):
        end, seq = _PAIR.unpack(key)
        if _SEQ.unpack(start)[0] <= n < end:
            seqs.add(seq)
    return seqs


def last_change(txn: ReadTxn, n: int) -> int | None:
    """The log position of the newest record that changed element `n`, or None. REVERT's
    "changed since" check asks this for every element of a record: answering from the
    indexes keeps a big sweep's revert from decoding the sweep's record once per element."""
    return max(_element_seqs(txn, n), default=None)


def element_history(txn: ReadTxn, n: int) -> Iterator[LogEntry]:
    """The records that changed element `n`, newest first (bulk creations included)."""
    for seq in sorted(_element_seqs(txn, n), reverse=True):
        entry = read_entry(txn, seq)
        if entry is not None:
            yield entry


def compact(txn: WriteTxn, before_ms: int) -> int:
    """Drop the records older than `before_ms` (epoch ms) and their index keys; returns
    how many records were dropped. Reads AS OF a time before the oldest kept record are
    refused afterwards (the state then can no longer be rebuilt)."""
    table = txn.aux(LOG)
    dropped: list[LogEntry] = []
    for _, raw in table.scan():
        entry = _decode(raw)
        if entry.ts >= before_ms:
            break
        dropped.append(entry)
    by_element = txn.aux(BY_ELEMENT)
    bulk = txn.aux(BULK_CREATED)
    for entry in dropped:
        for change in entry.changes:
            by_element.delete(_PAIR.pack(change[0], entry.seq))
        for _, end in entry.fresh + entry.runs:
            bulk.delete(_PAIR.pack(end, entry.seq))
        table.delete(_SEQ.pack(entry.seq))
    if dropped:
        txn.aux("engine").put(HORIZON, _PAIR.pack(dropped[-1].seq, dropped[-1].ts))
    return len(dropped)


HORIZON = b"history.horizon"


def horizon(txn: ReadTxn) -> tuple[int, int]:
    """(seq, ts) of the last record dropped by retention ((0, 0): none ever was): the
    state before it can no longer be rebuilt."""
    raw = txn.aux("engine").get(HORIZON)
    if raw is None:
        return 0, 0
    seq, ts = _PAIR.unpack(raw)
    return int(seq), int(ts)


def check_log(txn: ReadTxn, examples: int = 5) -> dict[str, Any]:
    """The log against the graph: each element's newest record must leave it as it is —
    with its current `_version`, or deleted. Returns `{"ok", "elements",
    "version_mismatch", "deleted_but_present", "examples"?}`."""
    report: dict[str, Any] = {"elements": 0, "version_mismatch": 0, "deleted_but_present": 0}
    found: list[str] = []
    newest: dict[int, int] = {}
    for key, _ in txn.aux(BY_ELEMENT).scan():
        n, seq = _PAIR.unpack(key)
        newest[n] = max(seq, newest.get(n, 0))
    ranged = {_PAIR.unpack(key)[1] for key, _ in txn.aux(BULK_CREATED).scan()}
    for seq in sorted(ranged):                          # the updates indexed as runs
        run_entry = read_entry(txn, seq)
        for a, b in run_entry.runs if run_entry is not None else ():
            for n in range(a, b):
                newest[n] = max(seq, newest.get(n, 0))
    # Elements grouped by their newest record: each record is decoded once (a large UPSERT's
    # record is the newest of hundreds of elements; decoding it per element made a deep
    # check quadratic in the command size).
    by_seq: dict[int, list[int]] = {}
    for n, seq in newest.items():
        by_seq.setdefault(seq, []).append(n)
    for seq, ns in by_seq.items():
        entry = read_entry(txn, seq)
        for n in ns:
            _check_element(txn, n, seq, entry, report, found)
    report["ok"] = not (report["version_mismatch"] or report["deleted_but_present"])
    if found:
        report["examples"] = found[:examples]
    return report


def _check_element(txn: ReadTxn, n: int, seq: int, entry: LogEntry | None,
                   report: dict[str, Any], found: list[str]) -> None:
    """`check_log` for one element whose newest record is `entry` (number `seq`)."""
    change = entry.change_of(n) if entry is not None else None
    if change is None:
        return
    report["elements"] += 1
    meta = txn.metadata(n) if txn.head(n) is not None else None
    if change[1] == "d":
        if meta is not None:
            report["deleted_but_present"] += 1
            found.append(f"element {n}: deleted by record {seq} but present")
    elif meta is None or meta.get("_version") != version_after(change):
        report["version_mismatch"] += 1
        found.append(f"element {n}: record {seq} left _version {version_after(change)}, "
                     f"the graph has {None if meta is None else meta.get('_version')}")
