"""The on-disk graph store: an LMDB environment with one named sub-database per table.

Owns opening (and refusing) an environment and the LMDB transaction lifecycle; lmdb
exceptions become KipErrors by `lmdb_errors` (a full disk or file size limit named as such).
The graph logic is shared with the memory store (`graph`, `graph_write`, `base`). Opening
first takes the database's owner lock (`owner`: one process per database) and checks
`data.mdb` against its meta pages before LMDB maps it (`lmdb_file`: a truncated or foreign
file is refused instead of killing the process with SIGBUS).

Durability: by default every committed write transaction is fsync'd (`sync=True`,
`metasync=True`); `durable=False` skips the fsyncs (a crash may lose the latest commits but
never corrupts the environment). `wal=True` (with `durable=True`; what `Nexus.open` passes
unless told otherwise, `nexus.config.wal_default`) makes a commit durable by
one append to a write-ahead log instead, LMDB running without sync and checkpointed
(`wal`: the files, the checkpoint, the recovery; this module: when). Whatever the options,
an owner opening a database that has a log recovers from it first; when the disk refuses
the replay (full, over quota, read-only) the open still serves every acknowledged command,
reading the log's records in memory, and writes fail cleanly until the recovery can finish
(`_recover`). LMDB gives readers an MVCC snapshot that never blocks the
writer, and serializes writers across processes with its own lock; `StoreBase` adds the
in-process writer lock.
"""
from __future__ import annotations

import logging
import os
import struct
import sys
import threading
import time
import weakref
from typing import Any, Callable, Iterator

import lmdb

from nexus.errors import ErrorCode, KipError
from nexus.store import codec, link_upgrade, lmdb_errors, lmdb_file, owner, pagemap
from nexus.store import wal as walog
from nexus.store.base import StoreBase
from nexus.store.bulk import trim_heap
from nexus.store.integrity import EXAMPLES
from nexus.store.kv import (KvRead, KvWrite, LmdbKv, LmdbTable, Overlay, PendingKv, WalKv,
                            pending_overlay)
from nexus.store.protocol import AUX_TABLES, JOURNAL_TABLES, ReadTxn, TableCheck
from nexus.store.tables import AUX_PREFIX, CORE_TABLES, Tables

# 1 TiB of address space on 64-bit hosts: the file only grows as data is written.
DEFAULT_MAP_SIZE = (1 << 40) if sys.maxsize > 2**32 else (1 << 30)
log = logging.getLogger("nexus.store")
# When the data file has grown by this many pages (64 MiB) since the last release, the next
# commit releases LMDB's page buffers.
RELEASE_PAGES = 16384
# Write-ahead log (module doc): a transaction whose operations pass WAL_MAX_TXN bytes, or
# that bulk-writes kv.UNLOGGED_PAIRS entries in one putmulti, is committed with a full LMDB
# sync instead of a record. The checkpoint thread checkpoints
# when the log passes WAL_SOFT_BYTES, when the data file grew since the last checkpoint by
# an eighth of its size, at least WAL_SOFT_GROWTH, at most WAL_SOFT_GROWTH_MAX (the pinned
# snapshot keeps LMDB from reusing pages freed after it, so the file grows by what the
# writes between two checkpoints dirty; each checkpoint flushes them), or after WAL_IDLE_SECONDS
# without a commit; it flushes the data file first without the writer lock, so writers
# wait only for the last small sync. A commit checkpoints inline only past the hard limits
# (WAL_CHECKPOINT_BYTES, WAL_CHECKPOINT_GROWTH: writes outrunning the thread).
WAL_MAX_TXN = 32 << 20
WAL_SOFT_BYTES = 8 << 20
WAL_SOFT_GROWTH = 1 << 20
WAL_SOFT_GROWTH_MAX = 64 << 20
WAL_CHECKPOINT_BYTES = 64 << 20
WAL_CHECKPOINT_GROWTH = 256 << 20
WAL_IDLE_SECONDS = 1.0
# A logged commit looks at the data file's size (a stat: ~2% of a W2's CPU) only every
# STAT_COMMITS commits or STAT_LOG_BYTES of records: what it tests are growths of 64 MiB
# (RELEASE_PAGES) and WAL_CHECKPOINT_GROWTH, far above what that many small commits add.
STAT_COMMITS = 16
STAT_LOG_BYTES = 64 << 10
WAL_POLL_SECONDS = 0.1


# A journal-only commit (protocol.JOURNAL_TABLES: the audit log's flushes) keeps the
# snapshot id of the state before it, so that what readers cache per snapshot (the columnar
# arrays, the planner's choices, a follower's head cache) is not rebuilt after every flush
# (bench/http_bench.py --mix: a third of the throughput). It says so in the `meta` key
# JOURNAL_KEY: (its own transaction id, the snapshot id kept). A read whose transaction id
# is that commit's sees the kept id; any other read its own transaction id — so the key
# speaks only for the one state that commit made, and a commit that does not rewrite it
# (any other write; a replay of the log after a crash, which rewrites states under new ids
# above the checkpoint's) makes it mute. Written outside the log, as LMDB's own meta is.
JOURNAL_KEY = b"journal_commit"
_JOURNAL_PAIR = struct.Struct(">QQ")
_JOURNAL_NAMES = frozenset(AUX_PREFIX + name for name in JOURNAL_TABLES)


class LmdbGraphStore(StoreBase[LmdbTable]):
    """GraphStore on an LMDB environment directory (created if missing).

    Options: `map_size` (bytes of address space), `durable` (fsync each commit),
    `max_readers` (concurrent read transactions), `head_cache_mb` (memory budget of the
    head cache, default 64 MB) or `head_cache_size` (its size in heads), `wal` (with
    `durable`: commits made durable by the write-ahead log, module doc; off unless given
here — `Nexus.open` gives `nexus.config.wal_default()`, on), `readonly`: open
    an existing store for reading only — no owner lock (LMDB readers never disturb the
    owner's writes: tools and tests look at a served database this way), every write
    refused.
    """

    def __init__(self, path: str, *, map_size: int = DEFAULT_MAP_SIZE, durable: bool = True,
                 max_readers: int = 1024, head_cache_size: int | None = None,
                 head_cache_mb: float | None = None, readonly: bool = False,
                 wal: bool = False) -> None:
        self._path = os.path.abspath(os.fspath(path))
        _check_directory(self._path)
        self._readonly = readonly
        if readonly and not os.path.isfile(os.path.join(self._path, "data.mdb")):
            raise KipError(ErrorCode.KIP_4003, f"no store at {self._path} to read",
                           "A read-only open needs an existing database.")
        self._owner = None if readonly else _become_owner(self._path)
        use_wal = wal and durable and not readonly
        sync = durable and not use_wal
        self._options: dict[str, Any] = dict(
            subdir=True, map_size=map_size, max_dbs=len(CORE_TABLES) + len(AUX_TABLES) + 8,
            max_readers=max_readers, sync=sync, metasync=sync, create=not readonly,
            lock=True, readonly=readonly)
        self._wal: walog.Wal | None = None
        self._data_file = os.path.join(self._path, "data.mdb")
        self._pin: lmdb.Transaction[bytes] | None = None     # the checkpoint's snapshot
        self._names: dict[LmdbTable, str] = {}
        # Open read transactions of this process, and the lock under which reads begin and
        # end and the environment is swapped (see the module doc, "Memory").
        self._rlock = threading.Lock()
        self._reading = 0
        try:
            # after `_become_owner`: a second open in this process was refused before
            # anything touches the files under a live environment
            pending = None if readonly else walog.prepare(self._path)
            env, tables = self._open_env()
            self._env = env
            self._use_wal = use_wal
            self._generation = 0 if pending is None else pending.checkpoint.generation
            self._stop = threading.Event()
            self._last_commit = time.monotonic()
            self._thread = False            # the checkpoint thread was started
            # The log's records not yet replayed into the file (a full disk at open: reads
            # go through them, `kv.PendingKv`), and whether the log still holds commits no
            # checkpoint covers, so that writes must first finish the recovery.
            self._unreplayed: dict[LmdbTable, Overlay] | None = None
            self._recovering: list[bytes] | None = None
            if pending is not None and pending.payloads:
                self._recovering = pending.payloads
                self._recover(opening=True)
            elif pending is not None and not use_wal:
                self._recovering = []   # the log goes at the first write: a read writes nothing
            elif use_wal and pending is not None and pending.clean:
                self._resume(pending.checkpoint)
            self._upgrade_links(tables)     # after the log's replay: its records are old keys
            # The checkpoint the open found (None: no log, or not used): `_close` checks
            # whether the open itself committed past it.
            self._opened_at = pending.checkpoint.txnid if use_wal and pending else None
        except BaseException:
            self._drop_wal()
            if hasattr(self, "_env"):
                self._env.close()
            owner.release(self._owner)
            raise
        self._ckpt_size = self._data_size()
        self._size_seen = self._data_size()     # file size when last released (or opened)
        self._size_known = self._size_seen      # ... at the last logged commit that looked
        self._unsized = (0, 0)      # logged commits, log bytes since then (STAT_COMMITS)
        self._release_due = False   # a big commit found readers open: release later
        super().__init__(tables, head_cache_size, head_cache_mb)

    def _open_env(self) -> tuple[lmdb.Environment, Tables[LmdbTable]]:
        lmdb_file.validate(os.path.join(self._path, "data.mdb"))    # before LMDB maps it
        try:
            env = lmdb.open(self._path, **self._options)
        except (lmdb.Error, OSError) as exc:    # OSError: e.g. the parent directory is missing
            raise KipError(ErrorCode.KIP_4003,
                           f"cannot open the store at {self._path}: {exc}",
                           lmdb_errors.damage_hint(exc)) from None
        # Lookups read a few pages at random: map those, not 64 KB around each (`pagemap`).
        pagemap.read_file_page_by_page(self._data_file)
        if not self._readonly:
            try:        # slots of dead processes (a killed owner's pin) hold pages back
                env.reader_check()
            except lmdb.Error:
                pass
        try:
            handles = _open_tables(env, self._path, self._readonly)
        except BaseException:
            env.close()
            raise
        self._names = {db: name for name, db in handles.items()}
        aux = {name: handles.pop(AUX_PREFIX + name) for name in AUX_TABLES
               if AUX_PREFIX + name in handles}      # (read-only: what the file has)
        return env, Tables(handles, aux)

    @property
    def path(self) -> str:
        return self._path

    # --- backend hooks -------------------------------------------------------------------
    def _begin_read(self) -> tuple[KvRead[LmdbTable], Callable[[], None]]:
        with self._rlock:
            txn = self._env.begin(write=False)
            self._reading += 1
            over = self._unreplayed
        done = False

        def end() -> None:
            nonlocal done
            if done:
                return
            done = True
            try:
                txn.abort()
            finally:
                with self._rlock:
                    self._reading -= 1
                if self._release_due and not self._reading:
                    self._release_later()
        if over is not None:
            return PendingKv(LmdbKv(txn), over), end
        return LmdbKv(txn), end

    def _begin_write(self) -> KvWrite[LmdbTable]:
        if self._readonly:
            raise KipError(ErrorCode.KIP_4003, f"the store at {self._path} is open read-only",
                           "Open it without readonly=True to write (as its one owner).")
        if self._recovering is not None:    # a full disk at open: retry, or fail cleanly
            self._recover()
        if self._release_due:           # we hold the writer lock: no write is open
            self._release()
        if self._use_wal:
            if self._wal is None:
                self._start_wal()
            return WalKv(self._env.begin(write=True), self._names, WAL_MAX_TXN)
        return LmdbKv(self._env.begin(write=True))

    def _data_size(self) -> int:
        # One stat: LMDB (without MDB_WRITEMAP) grows the file as it writes new pages, so
        # its size tracks the pages written. (env.info() was measured at ~1 ms a call
        # with another thread running Python: it releases the GIL.)
        try:
            return os.stat(self._data_file).st_size
        except OSError:
            return 0

    # --- the write-ahead log (module doc; `wal`) -------------------------------------------
    def _recover(self, opening: bool = False) -> None:
        """Finish the recovery of an open that found log records to replay (the caller
        holds the writer lock, or is opening): replay them into the file, then checkpoint
        (with the log) or sync and drop the log (without). Both need disk space; when the
        disk is full (or refuses writes) at open, the open goes on with the records read
        through in memory (`kv.PendingKv`) and the log left as it is: every acknowledged
        command is read, and each write retries this first, failing with the store's
        full-disk error until space is freed. A checkpoint that fails after the replay
        leaves the log to the next open (the file's unsynced pages are not trusted)."""
        payloads = self._recovering
        assert payloads is not None
        replayed = not opening and self._unreplayed is None
        try:
            if not replayed:
                self._replay(payloads)
                replayed = True
                with self._rlock:       # readers from now on see it in the file
                    self._unreplayed = None
            if self._use_wal:
                self._start_wal()
            else:
                self._env.sync(True)
                walog.remove(self._path)
        except (lmdb.Error, OSError) as exc:
            if not opening or not lmdb_errors.cannot_write(exc, self._path):
                raise
            if not replayed:
                self._unreplayed = pending_overlay(self._ops(payloads))
            log.warning("%s: cannot finish recovering from the write-ahead log (%s): "
                        "reads include its %d records; writes fail until disk space is "
                        "freed", self._path, exc, len(payloads))
            return
        self._recovering = None

    def _ops(self, payloads: list[bytes]) -> Iterator[tuple[LmdbTable, bytes, bytes | None]]:
        by_name = {name: db for db, name in self._names.items()}
        for payload in payloads:
            for table, key, value in walog.decode_ops(payload):
                db = by_name.get(table)
                if db is not None:
                    yield db, key, value

    @property
    def recovery_pending(self) -> str | None:
        """What is left of a recovery the disk did not allow (see `_recover`), or None."""
        if not self._recovering:
            return None
        where = "in memory" if self._unreplayed is not None else "in the data file, unsynced"
        return (f"the write-ahead log of {self._path} holds {len(self._recovering)} commits "
                f"that no checkpoint covers yet (read {where}): the disk did not allow "
                f"finishing the recovery; free space on it, then the next write or open "
                f"finishes it")

    def commits_held_in_memory(self) -> int:
        """The log's commits that reads take from memory because the disk did not let the
        open replay them into the data file (`protocol.HeldRecovery`); 0 once replayed."""
        if not self._recovering or self._unreplayed is None:
            return 0
        return len(self._recovering)

    def check_tables(self, txn: ReadTxn, *, examples: int = EXAMPLES,
                     repair: bool = False) -> TableCheck:
        found = super().check_tables(txn, examples=examples, repair=repair)
        note = self.recovery_pending
        if note is not None:
            found.report["pending"] = note
        return found

    def _replay(self, payloads: list[bytes]) -> None:
        """Apply the log's records (recovery), in one transaction; synced by the caller's
        checkpoint (or `env.sync`)."""
        if not payloads:
            return
        by_name = {name: db for db, name in self._names.items()}
        with self._env.begin(write=True) as txn:
            for payload in payloads:
                for table, key, value in walog.decode_ops(payload):
                    db = by_name.get(table)
                    if db is None:
                        log.warning("%s: the log names an unknown table %r: skipped",
                                    self._path, table)
                    elif value is None:
                        txn.delete(key, db=db)
                    else:
                        txn.put(key, value, db=db)
        log.info("%s: replayed %d write-ahead log records", self._path, len(payloads))

    def _upgrade_links(self, tables: Tables[LmdbTable]) -> None:
        """Convert a database of the earlier link key layout (`link_upgrade`) at open,
        after the log's replay, made durable before anything else is written: with the log,
        a checkpoint of the old state is pinned first (so that a crash before the next one
        restores the old layout whole) and one taken after; without it, a synced commit.
        A database that needs its format tag set only (`codec.FORMAT_TAG_V2`: it reads as
        it is) keeps its tag to a later open when the disk refuses writes."""
        if self._readonly:
            return                  # (`_open_tables` refuses the old format read-only)
        with self._env.begin() as txn:
            tag = txn.get(codec.META_FORMAT, db=tables.meta)
        if not link_upgrade.needed(tag):
            return
        tag_only = tag == codec.FORMAT_TAG_V2
        started = time.monotonic()
        try:
            if self._recovering is not None:
                self._recover()     # the log's records first (or the log dropped)
            if self._use_wal and self._wal is None:
                self._start_wal()
            handles = {name: tables.named(name) for name in ("meta", "spo", "ops", "pso")}
            links = link_upgrade.convert(self._env, handles, self._path)
            if self._use_wal:
                self._checkpoint()
            else:
                self._env.sync(True)
        except (lmdb.Error, OSError) as exc:    # the old layout stays whole (module doc)
            if tag_only and lmdb_errors.cannot_write(exc, self._path):
                log.warning("%s: format tag not updated (%s)", self._path, exc)
                return
            raise lmdb_errors.lmdb_error(exc, self._path) or KipError(
                ErrorCode.KIP_4003, f"cannot open the store at {self._path}: its link "
                f"indexes need a one-time conversion, which failed: {exc}",
                "Free disk space if it is full, then open it again.") from None
        log.info("%s: format %s set (link keys of %s links converted, %.1f s)",
                 self._path, codec.FORMAT_TAG.decode(), links, time.monotonic() - started)

    def _resume(self, ckpt: walog.Checkpoint) -> None:
        """At open, when the file holds exactly the checkpoint's snapshot and its log
        nothing to replay (`walog.Recovery.clean`): pin that snapshot now, so that the first
        write goes on with the checkpoint's generation instead of syncing and checkpointing
        again (which made the first command after every open pay several flushes)."""
        pin = self._env.begin(write=False)
        if pin.id() != ckpt.txnid:          # not the checkpoint's snapshot: checkpoint anew
            pin.abort()
            return
        self._pin = pin

    def _start_wal(self) -> None:
        """Open the log — at the first write (so that opening a database only to read it
        writes no file), or after a recovery — and checkpoint, unless the open pinned the
        checkpoint's snapshot (`_resume`)."""
        self._wal = walog.Wal(self._path, self._generation)
        if self._pin is None:
            try:
                self._checkpoint()
            except BaseException:
                # Without a checkpoint, appending would overwrite this generation's
                # records, which may be the only durable copy of a replay: the next
                # write opens the log again.
                self._wal.close()
                self._wal = None
                raise
        if not self._thread:
            self._thread = True
            threading.Thread(target=_checkpoint_when_idle, args=(weakref.ref(self),
                             self._stop), name="nexus-wal-checkpoint", daemon=True).start()

    def _checkpoint(self) -> None:
        """Sync LMDB, save its meta pages as the next checkpoint, pin that snapshot and start
        the next generation of the log (the caller holds the writer lock, or is opening)."""
        assert self._wal is not None
        env = self._env
        env.sync(True)
        pin = env.begin(write=False)
        try:
            psize = env.stat()["psize"]
            metas = walog.read_metas(self._data_file, psize)
            txnids = [lmdb_file.Meta(metas[i * psize:]).txnid for i in range(2)]
            if max(txnids) != pin.id():
                raise OSError(f"the meta pages of {self._data_file} name transaction "
                              f"{max(txnids)} after a sync at {pin.id()}")
            self._wal.checkpoint(pin.id(), metas)
        except BaseException:
            pin.abort()
            raise
        if self._pin is not None:
            self._pin.abort()
        self._pin = pin
        self._ckpt_size = self._data_size()

    def checkpoint(self) -> None:
        """Checkpoint the write-ahead log now (no-op without it): waits for the writer."""
        with self._wlock:
            if self._wal is not None and not self._closed:
                self._checkpoint()

    def background_checkpoint(self) -> None:
        """The checkpoint thread's turn (see WAL_SOFT_BYTES; for that thread only): flush
        the data file without holding the writer lock (most of the work), then checkpoint
        under it."""
        w = self._wal
        if w is None or not w.pending or self._closed:
            return
        soft = min(max(WAL_SOFT_GROWTH, self._ckpt_size // 8), WAL_SOFT_GROWTH_MAX)
        if w.offset < WAL_SOFT_BYTES and self._data_size() - self._ckpt_size < soft and \
                time.monotonic() - self._last_commit < WAL_IDLE_SECONDS:
            return
        try:    # on a descriptor of its own: the environment may be closed meanwhile
            fd = os.open(self._data_file, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
        except OSError:
            return
        if not self._wlock.acquire(timeout=WAL_IDLE_SECONDS):
            return
        try:
            if self._wal is not None and self._wal.pending and not self._closed:
                self._checkpoint()
        except Exception as exc:  # noqa: BLE001 - the log still holds every commit
            # A full or failing disk (OSError) is the operator's to see in one line; the
            # previous checkpoint and the log stay whole, so nothing is at risk.
            log.warning("checkpoint of the store at %s failed (%s); the write-ahead log "
                        "still holds every commit", self._path, exc,
                        exc_info=not isinstance(exc, OSError))
        finally:
            self._wlock.release()

    def _drop_wal(self) -> None:
        if self._pin is not None:
            try:
                self._pin.abort()
            except lmdb.Error:
                pass
            self._pin = None
        if self._wal is not None:
            self._wal.close()
            self._wal = None

    def _commit(self, kv: KvWrite[LmdbTable]) -> None:
        assert isinstance(kv, LmdbKv)       # the kv of _begin_write
        if isinstance(kv, WalKv) and self._wal is not None:
            self._after_commit(self._commit_logged(kv, self._wal))
        else:
            kv.txn.commit()
            self._after_commit(self._data_size())

    def _commit_logged(self, kv: WalKv, log_: walog.Wal) -> int:
        """Commit through the log; returns the data file's size after the commit, as last
        looked at (one stat every STAT_COMMITS commits serves the checkpoint's and the
        release's tests: a checkpoint syncs the file, it does not grow it)."""
        if kv.ops is None:                  # too big to log twice: a synced commit
            kv.txn.commit()
            self._checkpoint()
            return self._ckpt_size
        logged = 0
        if kv.ops:
            if kv.ops[0] in _JOURNAL_NAMES and _JOURNAL_NAMES.issuperset(kv.ops[::3]):
                self._keep_snapshot(kv)
            record = walog.encode_ops(kv.ops)
            log_.append(record)
            try:
                kv.txn.commit()
            except BaseException:
                log_.retract()
                raise
            logged = len(record)
        else:
            kv.txn.commit()
        self._last_commit = time.monotonic()
        commits, since = self._unsized
        if commits + 1 < STAT_COMMITS and since + logged < STAT_LOG_BYTES:
            self._unsized = (commits + 1, since + logged)
            size = self._size_known         # as last seen (STAT_COMMITS)
        else:
            self._unsized = (0, 0)
            size = self._size_known = self._data_size()
        if log_.offset >= WAL_CHECKPOINT_BYTES or \
                size - self._ckpt_size >= WAL_CHECKPOINT_GROWTH:
            self._checkpoint()
        return size

    def _keep_snapshot(self, kv: WalKv) -> None:
        """Mark this journal-only write as keeping the snapshot id of the state it follows
        (JOURNAL_KEY). A write transaction's id is the last commit's + 1 (LMDB)."""
        txn, meta = kv.txn, self.tables.meta
        own = txn.id()
        kept = own - 1
        mark = txn.get(JOURNAL_KEY, None, db=meta)
        if mark is not None:
            at, snap = _JOURNAL_PAIR.unpack(mark)
            if at == kept:              # the state before was itself a journal-only commit's
                kept = snap
        txn.put(JOURNAL_KEY, _JOURNAL_PAIR.pack(own, kept), db=meta)

    def snapshot_of(self, kv: KvRead[LmdbTable]) -> int:
        """The transaction id, or the id a journal-only commit kept (JOURNAL_KEY)."""
        sid = kv.snapshot_id()
        if type(kv) is LmdbKv:          # (not a PendingKv: changes laid over the file)
            mark = kv.txn.get(JOURNAL_KEY, None, db=self.tables.meta)
            if mark is not None:
                at, kept = _JOURNAL_PAIR.unpack(mark)
                if at == sid:
                    return int(kept)
        return sid

    def _after_commit(self, size: int) -> None:
        """After a commit that left the data file `size` bytes long: give LMDB's page
        buffers back once the file grew by RELEASE_PAGES (module doc, "Memory")."""
        if size - self._size_seen >= RELEASE_PAGES * 4096:
            self._size_seen = size
            self._release_due = True
            try:
                self._release()
            except Exception:  # noqa: BLE001 - the commit stands; the store reports closed
                log.warning("could not reopen the store at %s after a large commit",
                            self._path, exc_info=True)

    # --- giving LMDB's page buffers back (module doc, "Memory") ---------------------------
    def _release(self) -> bool:
        """Reopen the environment if no read transaction is open (the caller holds the
        writer lock, or knows no write is open). Returns whether it did."""
        with self._rlock:
            if self._reading or self._closed:
                return False
            if self._pin is not None:       # ends with the environment; nothing writes
                self._pin.abort()           # until the checkpoint below pins it again
                self._pin = None
            self._env.close()
            try:
                env, tables = self._open_env()
                self._env, self.tables = env, tables
                if self._wal is not None:
                    self._checkpoint()
            except BaseException:
                self._closed = True     # the old environment is gone: refuse further use
                self._drop_wal()
                owner.release(self._owner)
                self._owner = None
                raise
            self._release_due = False
        trim_heap()
        return True

    def _release_later(self) -> None:
        """From a reader's end: release when no write is open either."""
        if self._wlock.acquire(blocking=False):
            try:
                if self._release_due and not self._closed:
                    self._release()
            finally:
                self._wlock.release()

    def _abort(self, kv: KvWrite[LmdbTable]) -> None:
        assert isinstance(kv, LmdbKv)       # the kv of _begin_write
        try:
            kv.txn.abort()
        except lmdb.Error:          # already finished (e.g. a failed commit freed it)
            pass

    def _translate(self, exc: BaseException) -> KipError | None:
        return lmdb_errors.lmdb_error(exc, self._path) or super()._translate(exc)

    def _close(self) -> None:
        self._stop.set()
        with self._rlock:
            try:
                if self._wal is None and self._committed_at_open():
                    # The open created tables (a newer version's aux tables) in a commit
                    # of its own, outside the log: without a new checkpoint, the next open
                    # would take the file for an unclean stop and roll that back.
                    self._wal = walog.Wal(self._path, self._generation)
                if self._wal is not None:
                    try:
                        self._checkpoint()
                        self._wal.truncate()    # empty after a checkpoint: no disk kept
                    except Exception as exc:  # noqa: BLE001 - the log holds every commit
                        log.warning("could not checkpoint the store at %s at close (%s); "
                                    "the next open replays its write-ahead log", self._path,
                                    exc, exc_info=not isinstance(exc, OSError))
                self._drop_wal()
                self._env.close()
            finally:
                owner.release(self._owner)

    def _committed_at_open(self) -> bool:
        """Whether the file is past the checkpoint the open found though nothing was written
        through the log (a process that only read, after `_open_tables` created tables)."""
        if self._opened_at is None or self._readonly or self._recovering is not None:
            return False
        with self._env.begin() as txn:
            return bool(txn.id() != self._opened_at)

    def dump(self) -> dict[str, list[tuple[bytes, bytes]]]:
        """Every table's (key, value) pairs in key order (for tests and debugging)."""
        d = self.tables
        tables = {name: d.named(name) for name in CORE_TABLES}
        tables.update({AUX_PREFIX + name: db for name, db in d.aux.items()})
        with self._env.begin() as txn:
            return {name: list(txn.cursor(db).iternext()) for name, db in tables.items()}


def _checkpoint_when_idle(ref: weakref.ref[LmdbGraphStore], stop: threading.Event) -> None:
    """The checkpoint thread of a store with a write-ahead log (ends with the store)."""
    while not stop.wait(WAL_POLL_SECONDS):
        store = ref()
        if store is None:
            return
        store.background_checkpoint()
        del store


def _check_directory(path: str) -> None:
    """Refuse paths that are files, or non-empty directories that hold no LMDB data."""
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise KipError(ErrorCode.KIP_4003,
                           f"cannot open the store at {path}: it is not a directory")
        entries = set(os.listdir(path))
        if entries - {"lock.mdb", owner.LOCK_NAME} and "data.mdb" not in entries:
            raise KipError(ErrorCode.KIP_4003,
                           f"cannot open the store at {path}: the directory is not empty and "
                           f"holds no LMDB environment (data.mdb)")


def _become_owner(path: str) -> tuple[int, int] | None:
    """Create the directory if needed and take its owner lock (`nexus.store.owner`)."""
    try:
        os.mkdir(path)
    except FileExistsError:
        pass
    except OSError as exc:      # e.g. the parent directory is missing
        raise KipError(ErrorCode.KIP_4003,
                       f"cannot open the store at {path}: {exc.strerror}",
                       "Create the parent directory, or give another path.") from None
    return owner.acquire(path)


def _open_tables(env: lmdb.Environment, path: str,
                 readonly: bool = False) -> dict[str, LmdbTable]:
    """Open (creating on first use) every named database, refusing foreign environments."""
    try:
        with env.begin() as txn:
            names = set(txn.cursor().iternext(values=False))
    except lmdb.Error as exc:
        raise KipError(ErrorCode.KIP_4003,
                       f"cannot open the store at {path}: {exc}",
                       lmdb_errors.damage_hint(exc)) from None
    if names and b"meta" not in names:
        raise KipError(ErrorCode.KIP_4003,
                       f"cannot open the store at {path}: it is an LMDB environment but not "
                       f"a nexus store")
    wanted = list(CORE_TABLES) + [AUX_PREFIX + name for name in AUX_TABLES]
    if readonly:
        link_upgrade.check_readable(env, path)
        # An aux table a newer version added is absent from a database its owner has not
        # opened since: it reads as empty here (`graph.Aux` of no table), not a refusal.
        wanted = [name for name in wanted
                  if name.encode() in names or not name.startswith(AUX_PREFIX)]
        missing = [name for name in wanted if name.encode() not in names]
        if missing:
            raise KipError(ErrorCode.KIP_4003, f"cannot read the store at {path}: it lacks "
                           f"the tables {', '.join(missing[:5])}",
                           "Open it once for writing (its owner creates them).")
        try:
            return {name: env.open_db(name.encode(), create=False) for name in wanted}
        except lmdb.Error as exc:
            raise KipError(ErrorCode.KIP_4003, f"cannot open the store at {path}: {exc}",
                           lmdb_errors.damage_hint(exc)) from None
    try:
        with env.begin(write=True) as txn:
            handles = {name: env.open_db(name.encode(), txn=txn, create=True)
                       for name in wanted}
            meta = handles["meta"]
            tag = txn.get(codec.META_FORMAT, db=meta)
            if tag is None:
                txn.put(codec.META_FORMAT, codec.FORMAT_TAG, db=meta)
            elif tag != codec.FORMAT_TAG and not link_upgrade.needed(tag):
                raise KipError(ErrorCode.KIP_4003,
                               f"cannot open the store at {path}: unsupported format "
                               f"{tag[:40]!r} (expected {codec.FORMAT_TAG!r})")
    except lmdb.Error as exc:
        raise KipError(ErrorCode.KIP_4003,
                       f"cannot open the store at {path}: {exc}",
                       lmdb_errors.damage_hint(exc)) from None
    return handles

