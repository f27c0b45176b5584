"""FIND … AS OF — the history extension's time travel (docs/history.md): the context a FIND
runs in when it reads the graph as it was at a time or after a log record."""
from __future__ import annotations

from typing import Any, Mapping

from .. import history
from ..bounded import WeightedLRU
from ..errors import ErrorCode, KipError
from ..syntax import ast as A
from ..timestamps import iso_ms
from .context import ExecContext
from .env import Env

Params = Mapping[str, Any]

_OFF_HINT = ("History is off for this database: turn it on (Nexus.set_history(True), "
             "`kip history on`); only changes made after that are kept.")


def history_off() -> KipError:
    return KipError(ErrorCode.KIP_1001, "Version history is not kept for this database",
                    _OFF_HINT)


# --- FIND … AS OF ----------------------------------------------------------------------------

def as_of_context(ctx: ExecContext, as_of: A.AsOf, params: Params) -> ExecContext:
    """The context a FIND … AS OF runs in: the same, over the graph as it was."""
    txn = ctx.txn
    if not history.is_enabled(txn):
        raise history_off()
    point = Env(ctx, params).value(as_of.point)
    horizon_seq, horizon_ts = history.horizon(txn)
    if as_of.version:
        seq = point
        last = history.last_seq(txn)
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
            raise KipError(ErrorCode.KIP_1001, f"AS OF VERSION {seq!r}: a log position is a "
                           "positive integer", "Take one from DESCRIBE HISTORY (its `seq`).")
        if seq < horizon_seq:
            raise _compacted(f"VERSION {seq}")
        if seq > last:
            raise KipError(ErrorCode.KIP_3002, f"AS OF VERSION {seq}: the log has no record "
                           f"{seq} (the latest is {last})",
                           "DESCRIBE HISTORY lists the records with their `seq`.")
        if seq < horizon_seq:
            raise _compacted(f"VERSION {seq}")
        past = _past(txn, "seq", seq)
    else:
        try:
            ts = iso_ms(point)
        except (ValueError, TypeError, IndexError):
            raise KipError(ErrorCode.KIP_1001, f"AS OF {point!r} is not an ISO 8601 time",
                           'Write it like "2026-11-20T10:00:00Z" (UTC) or with an offset, '
                           '"2026-11-20T12:00:00+02:00".') from None
        if horizon_seq and ts < horizon_ts:
            raise _compacted(repr(point))
        past = _past(txn, "ts", ts)
    return ctx.reading(history.AsOfTxn(txn, past))


# Past states by (store, snapshot, point): an agent asking several questions about the same
# moment reads the log once. Weighed by the changes they hold (~200 bytes each).
_PAST: WeightedLRU[history.PastState] = WeightedLRU(64 << 20, 32)


def _past(txn: Any, kind: str, point: int) -> history.PastState:
    snapshot = txn.snapshot_id()
    key = (txn.store_token(), snapshot, kind, point)
    if snapshot is not None:
        hit = _PAST.get(key)
        if hit is not None:
            return hit
    past = (history.past_state(txn, seq=point) if kind == "seq"
            else history.past_state(txn, ts=point))
    if snapshot is not None:
        _PAST.put(key, past, 512 + 200 * sum(len(c) for c in past.chains.values()))
    return past


def _compacted(point: str) -> KipError:
    return KipError(ErrorCode.KIP_3002, f"AS OF {point}: that part of the history was "
                    "dropped by retention", "Ask for a later point (kip compact keeps what "
                    "is newer than its --keep).")



__all__ = ["as_of_context", "history_off"]
