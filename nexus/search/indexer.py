"""The background thread that applies a vector index's queued changes (`Indexer`).

Owns when the catch-up runs: after commits pause (QUIET_SECONDS), at once when a reader waits
or the backlog is large (QUIET_BACKLOG), and every IDLE_SECONDS anyway (a due save). What a
catch-up does — read the queue, embed, update the index, save — is the index's
(`nexus.search.vectors.VectorIndex.catch_up`, `maybe_save`); the thread only decides when.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger("nexus.search")

IDLE_SECONDS = 5.0           # the indexer looks for work (and a due save) this often anyway
# The indexer starts on queued work once commits pause for QUIET_SECONDS, or at once when a
# reader waits for it or QUIET_BACKLOG ids are queued (see Indexer.run).
QUIET_SECONDS = 0.05
QUIET_BACKLOG = 4096


class Indexer(threading.Thread):
    """The background thread that applies queued vector changes (see the module doc).

    A commit only wakes it when it sleeps idle (`committed`): while it is in its quiet
    period or catching up, a commit moves two plain counters and the thread looks at them
    itself. Waking a thread that waits on an event costs the writer a notify and a lock
    hand-over per commit (~0.05 ms of each W2's CPU when every commit did it)."""

    def __init__(self, vectors: Any) -> None:
        super().__init__(name="nexus-vector-indexer", daemon=True)
        self.vectors = vectors
        self._wake = threading.Event()
        self._stopping = False
        self._idle = False          # waiting for work: a commit must set the event
        self._commits = 0           # commits that queued changes (moved by writers)
        self._seen = 0              # ... of them, those before the last catch-up began
        self._last_commit = 0.0     # monotonic time of the last of them

    def wake(self) -> None:
        """Start now (a reader waits, a bulk load ended, the thread starts or stops)."""
        self._wake.set()

    def committed(self, urgent: bool = False) -> None:
        """A commit queued changes: noted, and the thread woken only if it sleeps idle (or
        `urgent`: the backlog is past QUIET_BACKLOG). No lock: the GIL makes each store
        atomic, and the thread reads `_commits` after publishing `_idle` (see `run`), so a
        commit is never left unseen for longer than IDLE_SECONDS."""
        self._last_commit = time.monotonic()
        self._commits += 1
        if (self._idle or urgent) and not self._wake.is_set():
            self._wake.set()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self is not threading.current_thread():
            self.join()

    def run(self) -> None:
        v = self.vectors
        while not self._stopping:
            self._idle = True
            if self._commits == self._seen:         # nothing committed since the last look
                self._wake.wait(IDLE_SECONDS)
            self._idle = False
            self._wake.clear()
            # Quiet period: until no commit came for QUIET_SECONDS, unless a reader waits.
            # In one process the indexer shares the GIL with the writers: run right after
            # each commit, its Python work made the next write wait for the GIL (W2 with
            # SEARCH attached: begin() of the next write took ~4 ms).
            # A write still open is not a pause either: a command that takes longer than
            # QUIET_SECONDS (a slow disk's flush, a loaded machine) must not let the
            # catch-up start in the middle of a burst — the first one after an open loads
            # the embedder's model (~0.4 s of CPU holding the GIL) while the writer, whose
            # every LMDB call releases the GIL, waits to get it back each time.
            store = v.store
            while not self._stopping and not v.waiters and v.backlog < QUIET_BACKLOG:
                left = self._last_commit + QUIET_SECONDS - time.monotonic()
                if left <= 0:
                    if store is None or not store.writing:
                        break
                    left = QUIET_SECONDS
                if self._wake.wait(left):       # a reader, a stop, a large backlog
                    self._wake.clear()
            if self._stopping:
                break
            if v.paused:
                self._seen = self._commits      # `resume` wakes the thread
            try:
                # Again only if a commit came meanwhile: otherwise the next catch_up would
                # find nothing new, at a read transaction's cost (three round trips on
                # PostgreSQL).
                while not self._stopping and not v.paused:
                    self._seen = self._commits
                    if not v.catch_up() or self._commits == self._seen:
                        break
                v.maybe_save()
                v.error = None
            except Exception as exc:  # noqa: BLE001 - keep indexing; the queue still holds it
                if v.error is None:
                    log.exception("vector indexer failure; retrying")
                v.error = exc
                time.sleep(0.5)
        with v.progress:
            v.progress.notify_all()
