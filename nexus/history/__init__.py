"""Version history — a nexus extension beyond KIP 1.x (docs/history.md).

Owns the append-only version log that every committed write leaves behind, and what is
built on it: reading the graph as it was (`FIND … AS OF`), the history of one element
(`DESCRIBE HISTORY`), and the material REVERT restores from. Every KIP 1.x command is
unchanged by it.

- `log`: the log's records and tables, the commit hook that appends one record per
  committed write session, retention (`compact`);
- `recording`: the write transaction wrapper that keeps each element's state before the
  session's first change to it (the "pre-image");
- `past`: the past state of the graph at a time or log position, and a read transaction
  that answers from it.

It sits beside `nexus.search` in the layers: it knows the store protocol only.
"""
from nexus.history.log import LOG as LOG_TABLE
from nexus.history.log import (HistoryHook, LogEntry, compact, element_history, entries_after,
                               horizon, is_enabled, last_change, last_seq, read_entry, retention,
                               set_enabled, set_retention,
                               undo, undo_keys, version_after, check_log)
from nexus.history.past import AsOfTxn, PastState, past_state
from nexus.history.recording import PreImage, RecordingTxn, pre_image

__all__ = ["LOG_TABLE", "AsOfTxn", "HistoryHook", "LogEntry", "PastState", "PreImage",
           "RecordingTxn", "compact", "element_history", "entries_after", "horizon",
           "is_enabled", "last_change", "last_seq", "past_state", "pre_image", "read_entry",
           "set_enabled", "retention", "set_retention", "undo", "undo_keys", "version_after", "check_log"]
