"""Durable LMDB commits through a write-ahead log: one sequential flush per commit.

A durable LMDB commit flushes twice, at random places (its dirty pages, then its meta page).
With the log on, LMDB runs with `sync=False, metasync=False` and a commit is made durable by
appending ONE record to `DIR/wal.log` and `fdatasync`ing it, before LMDB commits in memory.
This module owns the files, their formats, the checkpoint and the recovery; `lmdb_store`
decides when to call them and records each write transaction's operations (`WalKv`).

Files:

* `wal.log` — records from offset 0, each `len u32 | crc32 u32 | generation u64 | seq u64 |
  payload`: the CRC covers everything after itself, the payload is the transaction's
  operations in order (msgpack `[table, key, value-or-None, ...]`; None deletes). The file is
  reused across generations and grown in zero-filled chunks (so an append rewrites blocks that
  already exist and `fdatasync` flushes data only; the first chunk is written when the log is
  created and kept at a clean close); a record counts only while its CRC holds,
  its generation is the checkpoint's and its seq follows the previous one — so a torn tail, a
  zero-filled chunk or an older generation's leftovers all end the log.
* `wal.ckpt` — two fixed slots (both zero-filled when the file is created, so that a
  checkpoint never needs a new disk block; written alternately, CRC'd): generation, LMDB transaction id
  and the exact bytes of LMDB's two meta pages (pages 0 and 1 of `data.mdb`) as on disk after
  a full sync. The valid slot with the greatest generation is the checkpoint.

Checkpoint (the writer, between transactions): `env.sync(True)`; a read transaction pins the
synced snapshot; its meta pages are saved in the next slot (fdatasync'd); the log starts the
next generation. The pin matters: LMDB reuses only pages freed by transactions older than
its oldest reader, so no page of the checkpoint's trees is overwritten until the next
checkpoint, whatever a power loss does to the unsynced writes after it.

Recovery (`prepare`, before `lmdb.open` by the owner): a power loss may leave `data.mdb` torn
— unsynced pages written in any order, a newer meta page pointing at pages that never reached
the disk. So when the meta pages on disk differ from the checkpoint's, they are written back
(fsync'd), which makes the file exactly the checkpoint's snapshot again (its pages were
pinned); then the store replays every complete record of the checkpoint's generation onto it
(`decode_ops`; puts and deletes are assignments, so replaying the whole log onto any state
holding a prefix of it gives the same result) and checkpoints. The meta pages are restored
only when no other process has the environment open (a `lockf` probe of the byte LMDB itself
locks in `lock.mdb`): a live reader means there was no power loss, and the file is intact.
When the meta pages on disk are exactly the checkpoint's and there is nothing to replay
(`Recovery.clean`: a clean close, which checkpoints and keeps the log's first chunk), the
owner pins that snapshot at open and appends in the same generation: the first write after
an open costs one append, not a sync, a checkpoint and a log growth.
"""
from __future__ import annotations

import errno
import fcntl
import logging
import os
import struct
import zlib
from dataclasses import dataclass
from typing import Iterator

import msgpack

from nexus.errors import ErrorCode, KipError
from nexus.store import lmdb_file

LOG_NAME = "wal.log"
CKPT_NAME = "wal.ckpt"
FILES = (LOG_NAME, CKPT_NAME)
log = logging.getLogger("nexus.store")

_REC = struct.Struct("<IIQQ")           # payload length, crc32, generation, seq
_CK = struct.Struct("<8sQQII")          # magic, generation, txnid, page size, crc32
_CK_MAGIC = b"NXWALCK1"
_SLOT = 4096 + 2 * 65536                # a slot holds two meta pages of the largest size
CKPT_SIZE = 2 * _SLOT                   # wal.ckpt, written whole when created
GROW = 256 << 10                        # the log grows by zero-filled chunks of 256 KiB
MAX_RECORD = 1 << 31

@dataclass(frozen=True)
class Checkpoint:
    generation: int
    txnid: int
    metas: bytes            # pages 0 and 1 of data.mdb


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_checkpoint(directory: str) -> Checkpoint | None:
    """The newest valid checkpoint slot of `directory`, or None (no log ever, or a log
    whose first checkpoint was never written)."""
    try:
        with open(os.path.join(directory, CKPT_NAME), "rb") as f:
            raw = f.read(2 * _SLOT)
    except FileNotFoundError:
        return None
    best: Checkpoint | None = None
    for i in range(2):
        slot = raw[i * _SLOT:(i + 1) * _SLOT]
        if len(slot) < _CK.size:
            continue
        magic, gen, txnid, psize, crc = _CK.unpack_from(slot)
        body = slot[_CK.size:_CK.size + 2 * psize]
        if magic != _CK_MAGIC or psize > 65536 or len(body) != 2 * psize or \
                zlib.crc32(body, zlib.crc32(slot[8:_CK.size - 4])) != crc:
            continue
        if best is None or gen > best.generation:
            best = Checkpoint(gen, txnid, body)
    if best is None and not raw.strip(b"\0"):
        # Made, never written: a kill between the log's creation (its files are written
        # out whole, zeros) and its first checkpoint. That checkpoint comes before any
        # commit relies on the log (LMDB is synced first), so there is nothing to replay.
        return None
    if best is None:
        raise KipError(ErrorCode.KIP_4003,
                       f"the database at {directory} has a write-ahead log checkpoint "
                       f"({CKPT_NAME}) with no valid slot", lmdb_file.HINT)
    return best


def records(directory: str, generation: int) -> Iterator[tuple[int, bytes]]:
    """(offset after, payload) of each complete record of `generation`, in order; stops at
    the first record that is torn, of another generation or out of sequence."""
    try:
        f = open(os.path.join(directory, LOG_NAME), "rb")
    except FileNotFoundError:
        return
    with f:
        data = f.read()
    off, seq = 0, 1
    while off + _REC.size <= len(data):
        length, crc, gen, s = _REC.unpack_from(data, off)
        end = off + _REC.size + length
        if gen != generation or s != seq or end > len(data):
            break
        if zlib.crc32(data[off + _REC.size:end], zlib.crc32(data[off + 8:off + _REC.size])) \
                != crc:
            break
        yield end, data[off + _REC.size:end]
        off, seq = end, seq + 1


def encode_ops(ops: list[object]) -> bytes:
    payload: bytes = msgpack.packb(ops, use_bin_type=True)
    return payload


def decode_ops(payload: bytes) -> Iterator[tuple[str, bytes, bytes | None]]:
    flat = msgpack.unpackb(payload, raw=False)
    for i in range(0, len(flat), 3):
        yield flat[i], flat[i + 1], flat[i + 2]


def _others_have_it_open(directory: str) -> bool | None:
    """Whether another process has the LMDB environment open: LMDB holds a lock on byte 0
    of lock.mdb for as long as it has the environment open (exclusive for the first opener,
    shared after). None: no lock file (nobody has opened it since it was created)."""
    try:
        fd = os.open(os.path.join(directory, "lock.mdb"), os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                return True
            raise
        return False
    finally:
        os.close(fd)            # drops our probe lock before LMDB takes its own


@dataclass(frozen=True)
class Recovery:
    """What `prepare` found: the checkpoint, the payloads to replay, and whether the file's
    meta pages are exactly the checkpoint's (`clean`: a clean close, or a kill before any
    commit after the checkpoint reached the file — with no payloads, the file holds the
    checkpoint's snapshot and its log can go on in the same generation)."""
    checkpoint: Checkpoint
    payloads: list[bytes]
    clean: bool


def prepare(directory: str) -> Recovery | None:
    """Before the owner maps `data.mdb`: the checkpoint and the payloads to replay (None when
    the directory has no log), after writing the checkpoint's meta pages back over a file
    that may be torn (module doc)."""
    ckpt = read_checkpoint(directory)
    if ckpt is None:
        return None
    payloads = [p for _, p in records(directory, ckpt.generation)]
    path = os.path.join(directory, "data.mdb")
    psize = len(ckpt.metas) // 2
    try:
        f = open(path, "r+b")
    except FileNotFoundError:
        raise KipError(ErrorCode.KIP_4003, f"the database at {directory} has a write-ahead "
                       f"log but no data.mdb", lmdb_file.HINT) from None
    with f:
        disk = f.read(2 * psize)
        if disk != ckpt.metas:
            if not _newer(disk, ckpt):
                log.warning("%s: the meta pages of data.mdb are not those of a state after "
                            "the checkpoint: left alone (damage is reported on open)",
                            directory)
            elif _others_have_it_open(directory):
                log.info("%s: another process has the database open (no power loss): "
                         "replaying %d log records onto it as it is", directory, len(payloads))
            else:
                log.warning("%s: unclean stop; restoring the checkpoint (transaction %d) and "
                            "replaying %d log records", directory, ckpt.txnid, len(payloads))
                f.seek(0)
                f.write(ckpt.metas)
                f.flush()
                os.fsync(f.fileno())
    return Recovery(ckpt, payloads, disk == ckpt.metas)


def _newer(disk: bytes, ckpt: Checkpoint) -> bool:
    """Whether `disk` (the file's meta pages) can be a state written after `ckpt`: both LMDB
    meta pages, the newest one later than the checkpoint. Anything else is damage (a file
    overwritten, truncated, restored from elsewhere) that this recovery must not touch."""
    psize = len(ckpt.metas) // 2
    if len(disk) != 2 * psize:
        return False
    metas = [lmdb_file.Meta(disk[i * psize:(i + 1) * psize]) for i in range(2)]
    return all(m.magic == lmdb_file.MAGIC and m.version == lmdb_file.DATA_VERSION and
               m.psize == psize for m in metas) and \
        max(m.txnid for m in metas) > ckpt.txnid


def remove(directory: str) -> None:
    """Delete the log files (after a full sync, when the database goes back to plain LMDB
    durability)."""
    for name in FILES:
        try:
            os.remove(os.path.join(directory, name))
        except FileNotFoundError:
            pass
    _fsync_dir(directory)


def _fill(fd: int, size: int) -> None:
    """Make the file `fd` `size` bytes long with every block written (no hole), keeping
    what it holds (a checkpoint file of an older version: its slot 0 may be a hole)."""
    have = os.fstat(fd).st_size
    if have >= size:
        return
    raw = os.pread(fd, have, 0)
    os.pwrite(fd, raw + bytes(size - len(raw)), 0)
    os.fsync(fd)                # the size too


class Wal:
    """The open log of one database (its owner's): appends and checkpoint slots."""

    def __init__(self, directory: str, generation: int) -> None:
        self.directory = directory
        self.generation = generation      # of the last checkpoint written (0: none yet)
        self.seq = 0                      # of the last record appended
        self.offset = 0                   # where the next record goes
        self._undo = (0, 0)               # offset and seq before the last append
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
        created = not all(os.path.exists(os.path.join(directory, n)) for n in FILES)
        self._log = os.open(os.path.join(directory, LOG_NAME), flags, 0o644)
        self._ckpt = os.open(os.path.join(directory, CKPT_NAME), flags, 0o644)
        self._size = os.fstat(self._log).st_size
        # Every block the log and the checkpoint will write exists from the start: a
        # checkpoint or an append on a full disk then never needs a new one (a close on a
        # full disk checkpoints; the next open finds nothing to replay).
        try:
            _fill(self._ckpt, CKPT_SIZE)
            if self._size < GROW:
                self._grow(GROW)
            if created:
                _fsync_dir(directory)
        except BaseException:
            self.close()
            raise

    def append(self, payload: bytes) -> None:
        """Write one record after the last and flush it: the transaction is durable."""
        if len(payload) >= MAX_RECORD:
            raise ValueError("a write-ahead log record over 2 GiB")
        seq = self.seq + 1
        tail = struct.pack("<QQ", self.generation, seq)
        crc = zlib.crc32(payload, zlib.crc32(tail))
        record = struct.pack("<II", len(payload), crc) + tail + payload
        end = self.offset + len(record)
        try:
            if end > self._size:
                self._grow(end)
            os.pwrite(self._log, record, self.offset)
            os.fdatasync(self._log)
        except BaseException:
            self._zero(self.offset)     # best effort: a failed append must not replay
            raise
        self._undo = (self.offset, self.seq)
        self.offset, self.seq = end, seq

    def retract(self) -> None:
        """Undo the last append (its LMDB commit failed): zero its header and flush, so
        that recovery never replays it; the next record takes its place."""
        offset, seq = self._undo
        self._zero(offset)
        self.offset, self.seq = offset, seq

    def _zero(self, offset: int) -> None:
        try:
            os.pwrite(self._log, bytes(_REC.size), offset)
            os.fdatasync(self._log)
        except OSError:
            log.error("cannot retract a write-ahead log record in %s", self.directory,
                      exc_info=True)

    def _grow(self, end: int) -> None:
        new = max(end, self._size + GROW)
        new = -(-new // GROW) * GROW
        os.pwrite(self._log, bytes(new - self._size), self._size)
        os.fsync(self._log)         # the size too: later appends flush data only
        self._size = new

    def checkpoint(self, txnid: int, metas: bytes) -> None:
        """Save the synced snapshot `txnid` (its meta pages) as the next generation's
        checkpoint, then start that generation's log."""
        gen = self.generation + 1
        psize = len(metas) // 2
        head = _CK.pack(_CK_MAGIC, gen, txnid, psize, 0)
        crc = zlib.crc32(metas, zlib.crc32(head[8:_CK.size - 4]))
        slot = _CK.pack(_CK_MAGIC, gen, txnid, psize, crc) + metas
        os.pwrite(self._ckpt, slot, (gen % 2) * _SLOT)
        os.fdatasync(self._ckpt)
        self.generation, self.seq, self.offset = gen, 0, 0

    def truncate(self) -> None:
        """Give the log's disk back (at a clean close, right after a checkpoint) but its
        first chunk: the next open's first append then writes into blocks that exist and
        flushes data only (growing the file costs a zero-filled write and an fsync). What
        the chunk still holds is of older generations: it ends the log."""
        keep = min(self._size, GROW)
        os.ftruncate(self._log, keep)
        self._size = keep

    @property
    def pending(self) -> bool:
        """Whether records were appended since the last checkpoint."""
        return self.seq > 0

    def close(self) -> None:
        for fd in (self._log, self._ckpt):
            try:
                os.close(fd)
            except OSError:
                pass


def read_metas(data_path: str, psize: int) -> bytes:
    """Pages 0 and 1 of data.mdb, as the file holds them."""
    with open(data_path, "rb") as f:
        raw = f.read(2 * psize)
    if len(raw) != 2 * psize:
        raise OSError(errno.EIO, f"{data_path}: short read of its meta pages")
    return raw
