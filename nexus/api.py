"""The public API: `Nexus.open(location)` and `execute_kip(request) -> response`.

Every front end (the JSON-RPC server, the shell, the CLI, benchmarks) is an adapter over
this module: `Nexus` is the engine (`nexus.engine`: requests, batches, read-only, dry runs,
the write session) plus what a database needs around it — opening a store by location
(`nexus.store.open_store`: a directory, `lmdb:///path`, `memory://`), attaching the search
indexes, the bootstrap of a new database — and the operations over a store that the tools
offer (`nexus.ops`: loading capsules, bulk import, export, check and repair, reindex, the
audit log, info). Adapters import this module, `nexus.language`, `nexus.errors` and
`nexus.config`, nothing deeper (import-linter holds them to it).
"""
from __future__ import annotations

import atexit
import os
import weakref
from typing import Any, Callable, Iterable, Iterator

from . import history
from .config import Config
from .engine import CommitHook, Engine, WriteSession
from .errors import ErrorCode, KipError
from .ops import audit as _audit
from .ops.audit import AuditBuffer, AuditLog, iso_time
from .ops.capsules import capsule_files
from .ops.check import format_problems
from .store import heap, open_store
from .store.protocol import HeldRecovery
from .version import KIP_VERSION, __version__

__all__ = ["Nexus", "AuditLog", "AuditBuffer", "CommitHook", "WriteSession", "Progress",
           "audit_entry", "iso_time", "format_problems", "capsule_files", "KIP_VERSION", "__version__"]

audit_entry = _audit.entry

# A progress callback: (label, done, total) — a file, phase or capsule, and two counts.
Progress = Callable[[str, int, int], None]


def _columnar_option(options: dict[str, Any]) -> str | None:
    """Take the `columnar` option out of `options`: None (not given) or a valid mode."""
    mode = options.pop("columnar", None)
    if mode is not None and mode not in ("auto", "always", "never"):
        raise KipError(ErrorCode.KIP_1001, f"Unknown columnar mode {mode!r}",
                       "Use columnar=\"auto\", \"always\" or \"never\".")
    return mode


# Every open Nexus, closed at interpreter exit if its owner did not: the vector indexer's
# thread and its native index must stop before the interpreter tears threads down (a
# script that forgot close() otherwise ended in "terminate called without an active
# exception", SIGABRT).
_OPEN: "weakref.WeakSet[Nexus]" = weakref.WeakSet()


@atexit.register
def _close_open_databases() -> None:
    for nexus in list(_OPEN):
        try:
            nexus.close()
        except Exception:  # noqa: BLE001 - exiting: a failing close must not stop the others
            pass


class Nexus(Engine):
    """A KIP engine over one graph store (see `nexus.engine.Engine` for execution).
    Thread-safe: reads run on consistent snapshots in parallel, writes take turns."""

    _history_hook: "history.HistoryHook | None" = None

    # --- lifecycle ------------------------------------------------------------------------
    @classmethod
    def open(cls, location: str | os.PathLike[str] | None = None, *,
             progress: Progress | None = None, **options: Any) -> "Nexus":
        """Open (creating if needed) the nexus at `location`; `None` → a fresh in-memory one.

        `location` is a directory (an LMDB store), or a URL whose scheme names a registered
        storage backend (`lmdb:///abs/path`, `memory://`). Options: any field of
        `nexus.config.Config` or `Limits` (e.g. `query_timeout=5`, `durable=False`,
        `bootstrap=False`), and `columnar="auto"|"always"|"never"` (the FIND executor;
        default `auto`, or the environment's `NEXUS_COLUMNAR`). `progress(capsule, done,
        total)` is called as the bootstrap applies bundled capsules (to a new database, or
        changed ones to an old database); not at all when there is nothing to apply.
        """
        mode = _columnar_option(options)
        config = options.pop("config", None) or Config.from_options(**options)
        heap.tune()     # freed large blocks go back to the system (`nexus.store.heap`)
        store = open_store("memory://" if location is None else location,
                           durable=config.durable, wal=config.wal)
        nexus = cls(store, config)
        _OPEN.add(nexus)
        if mode is not None:
            nexus.columnar = mode
        try:
            nexus._attach_search()
            nexus._attach_history()
            if config.bootstrap:
                from .ops.capsules import bootstrap
                bootstrap(nexus, progress)
        except BaseException:
            nexus.close()
            raise
        return nexus

    @classmethod
    def follow(cls, location: str | os.PathLike[str], **options: Any) -> "Nexus":
        """Open the LMDB database at `location` for reading beside the process that owns
        it (a `kip serve --workers` reader): no owner lock, no bootstrap, no search index
        (SEARCH answers KIP_4003 here: the owner's vector index holds the latest writes);
        every write is refused (KIP_4003). What it caches is checked against the snapshot
        each read sees (`StoreBase.follow`), so a read that begins after a commit of the
        owner was acknowledged sees that commit. Options: as `open`."""
        loc = os.fspath(location)
        if "://" in loc and not loc.startswith("lmdb://"):
            raise KipError(ErrorCode.KIP_4003, f"cannot follow {loc}: only an LMDB "
                           f"database is read beside its owner",
                           "Give the database directory (or lmdb:///path).")
        mode = _columnar_option(options)
        config = Config.from_options(**{**options, "bootstrap": False})
        store = open_store(loc, durable=config.durable, readonly=True)
        nexus = cls(store, config)
        if mode is not None:
            nexus.columnar = mode
        follow = getattr(store, "follow")
        follow(nexus.primer.invalidate_all)
        _OPEN.add(nexus)
        return nexus

    def share_heavy_slot(self, path: str) -> None:
        """Share the heavy slot of admission control (docs/limits.md) with the other
        processes that name the same lock file `path` (`kip serve --workers`): at most one
        slow read runs among all of them at a time. Call before serving."""
        from .exec.admission import SharedAdmission
        limits = self.config
        self.admission = SharedAdmission(path, limits.fast_lane_seconds, limits.heavy_quantum)

    def _attach_search(self) -> None:
        from .search import attach_search
        self.search = attach_search(self)
        self.add_commit_hook(self.search)

    # --- version history (nexus.history, docs/history.md) ----------------------------------
    def _attach_history(self) -> None:
        with self.read_session() as ctx:
            on = history.is_enabled(ctx.txn)
        if on and self._history_hook is None:
            self._history_hook = history.HistoryHook()
            self.wrap_writes(history.RecordingTxn)
            self.add_commit_hook(self._history_hook)

    @property
    def history_enabled(self) -> bool:
        return self._history_hook is not None

    def set_history(self, on: bool) -> None:
        """Keep the version log from now on, or stop keeping it (the database remembers;
        what was logged stays readable until `compact` drops it)."""
        with self.write_session(privileged=True) as session:
            history.set_enabled(session.txn, on)
        if on:
            self._attach_history()
        elif self._history_hook is not None:
            self.commit_hooks.remove(self._history_hook)
            self.write_wrappers.remove(history.RecordingTxn)
            self._history_hook = None

    def set_history_retention(self, keep_seconds: float | None) -> None:
        """The database's retention policy: keep `keep_seconds` of history (None: all).
        Applied by the writes themselves, at most once an hour, and at once here."""
        if keep_seconds is not None and keep_seconds < 0:
            raise KipError(ErrorCode.KIP_1001, "A retention is a positive duration",
                           "Give the seconds of history to keep, or None to keep all.")
        with self.write_session(privileged=True) as session:
            history.set_retention(session.txn, keep_seconds)
        if keep_seconds is not None:
            self.compact_history(keep_seconds)

    @property
    def history_retention(self) -> float | None:
        with self.read_session() as ctx:
            return history.retention(ctx.txn)

    def compact_history(self, keep_seconds: float) -> dict[str, int]:
        """Drop version-log records older than `keep_seconds` (retention): AS OF and REVERT
        reach no further back afterwards. Returns {"dropped": n, "kept": m}."""
        import time as _time
        cutoff = int((_time.time() - keep_seconds) * 1000)
        with self.write_session(privileged=True) as session:
            dropped = history.compact(session.txn, cutoff)
            kept = session.txn.aux(history.LOG_TABLE).count()
        return {"dropped": dropped, "kept": kept}

    def detach_search(self) -> None:
        """Stop maintaining the search indexes (benchmarks of the store alone): the service
        is closed (its in-memory vectors freed; SEARCH on it answers KIP_4003) and later
        writes are not indexed; `reindex` on a later open rebuilds. `attach_search` opens
        a new one. Vectors still queued (a new database's capsules) are not waited for:
        they stay in the durable queue for the next open."""
        search = self.search
        if search is not None:
            self.search = None
            self.commit_hooks.remove(search)
            search.close(drain=False)

    def attach_search(self) -> None:
        """Maintain and serve the search indexes again after `detach_search`: a new service
        opened from the saved index files, as a new process would open them (a closed
        service cannot be put back: its vectors are freed). What was written while
        detached is not indexed (`reindex` adds it). Nothing to do when one is attached."""
        if self.search is None:
            self._attach_search()

    def close(self) -> None:
        """Drain and save the search indexes, then close the store (idempotent)."""
        if not self._closed:
            self._closed = True
            try:
                if self.search is not None:
                    self.search.close()
            finally:
                self.store.close()

    def __enter__(self) -> "Nexus":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- operations over the store (nexus.ops) --------------------------------------------
    def load_capsules(self, paths: Iterable[str | os.PathLike[str]],
                      progress: Progress | None = None, *,
                      privileged: bool = False, keep_going: bool = False
                      ) -> list[dict[str, Any]]:
        """Apply `.kip` capsule files or folders, each file in one transaction; one report
        per file (see `nexus.ops.capsules.load_capsules`)."""
        from .ops.capsules import load_capsules
        return load_capsules(self, paths, progress, privileged=privileged,
                             keep_going=keep_going)

    def bulk_import(self, concepts: Iterable[dict] = (), links: Iterable[dict] = (),
                    **options: Any) -> dict[str, int]:
        """Load concepts and links given as data, with UPSERT's semantics but no parse per
        item (see `nexus.ops.bulk_import.bulk_import`)."""
        from .ops.bulk_import import bulk_import
        return bulk_import(self, concepts, links, **options)

    def export_text(self, domain: str | None = None,
                    progress: Progress | None = None) -> str:
        """The graph (or one domain) as a capsule that `load_capsules` re-imports;
        `progress("elements", done, total)` as elements are written."""
        from .ops.export import export_text
        return export_text(self, domain, progress)

    def export_lines(self, domain: str | None = None,
                     progress: Progress | None = None) -> Iterator[str]:
        """`export_text` as an iterator of text pieces (to stream into a file)."""
        from .ops.export import export_lines
        return export_lines(self, domain, progress)

    def check(self, *, deep: bool = True, repair: bool = False, wait: float | None = None,
              progress: Progress | None = None) -> dict[str, Any]:
        """Verify every index against the data; `repair` rebuilds what drifted. Waits at
        most `wait` seconds (default 60) for the vector indexer, reporting
        `progress("vector catch-up", done, total)`; what it has not applied by then is
        reported as pending (`"pending"`), not waited for (`nexus.ops.check.verify`)."""
        from .ops.check import verify
        return verify(self, deep=deep, repair=repair, wait=wait, progress=progress)

    def commits_held_in_memory(self) -> int:
        """How many acknowledged commits this process reads from memory only: the disk was
        full when the database opened and the write-ahead log's records could not be
        replayed into the data file yet (docs/guarantees.md, "Storage faults"). Another
        process reading the same files (`Nexus.follow`) does not see them until the
        recovery ends — the next write or open once space is freed. 0 in every other case."""
        store = self.store
        return store.commits_held_in_memory() if isinstance(store, HeldRecovery) else 0

    def reindex(self, progress: Progress | None = None) -> dict[str, Any]:
        """Rebuild the search indexes from the data."""
        if self.search is None:
            raise KipError(ErrorCode.KIP_4003, "this nexus has no search index to rebuild")
        return self.search.reindex(progress)

    def audit_log(self, **options: Any) -> AuditLog:
        """The request audit log kept in this store (`list_logs`), configured from `config`."""
        return AuditLog.for_engine(self, **options)

    def info(self) -> dict[str, Any]:
        """Counts of the graph, the location and the versions."""
        with self.store.read() as txn:
            def of_type(name: str) -> int:
                sid = txn.symbol_id(name)
                return txn.count_type(sid) if sid is not None else 0
            counts = {"concepts": txn.count_concepts(), "propositions": txn.count_links(),
                      "concept_types": of_type("$ConceptType"),
                      "proposition_types": of_type("$PropositionType"),
                      "domains": of_type("Domain")}
        return {"path": self.path, **counts, "nexus_version": __version__,
                "kip_version": KIP_VERSION}
