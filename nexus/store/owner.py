"""One owner per database: the `owner.lock` file of a store directory.

Opening an LMDB store makes this process the database's owner until it closes it: an
exclusive `flock` on `DIR/owner.lock`, whose content names the holder (pid, host, command
line, start time) as JSON. A second *process* opening the same database is refused at once
with a `KipError` (KIP_4003) naming the holder; the kernel drops the lock when its holder
exits, however it exits, so a lock file left by a process that is gone (a *stale* lock) is
simply taken over (and the takeover logged). Within one process the same rule holds: this
module's registry of open directories (`_held`, one entry per directory, keyed by device and
inode) refuses a second open while the first is open, with the same KIP_4003 a second process
gets; closing releases it, so a directory can be closed and opened again freely. (A second
open in one process would map the environment twice and run a second recovery, checkpoint
thread, vector index and audit buffer over the same files.)

Why: the vector index (in memory, saved to files beside the data), its change queue, the
audit buffer and the bootstrap belong to the process that opened the database; two
processes maintaining them at once would overwrite each other's files. Every opener is an
owner, read-only tools included (opening may write: the bootstrap, the vector files); a
look at a served database goes through its server (`kip exec --url`). docs/guarantees.md
("One owner per database") states the rule and names the tests.

On a file system without `flock` (some network mounts) the lock is skipped with a warning.
"""
from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import sys
import threading
import time
from typing import Any

from nexus.errors import ErrorCode, KipError

LOCK_NAME = "owner.lock"
MAX_LOCK_BYTES = 64 * 1024      # what is read of a lock file (it names a holder: small)
log = logging.getLogger("nexus.store")

# The directories this process owns: (st_dev, st_ino) → the lock file's descriptor (None on
# a file system without flock: the registry still refuses a second open in this process).
_held: dict[tuple[int, int], int | None] = {}
_guard = threading.Lock()


def holder_record() -> dict[str, Any]:
    """What this process writes into a lock it takes."""
    return {"pid": os.getpid(), "host": socket.gethostname(),
            "command": " ".join(sys.argv)[:1000] or sys.executable,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def read_holder(directory: str) -> dict[str, Any] | None:
    """The holder a lock file names (None if there is none or it does not parse)."""
    try:
        with open(os.path.join(directory, LOCK_NAME), "rb") as f:
            data = json.loads(f.read(MAX_LOCK_BYTES).decode("utf-8", "replace") or "null")
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def describe(holder: dict[str, Any] | None) -> str:
    if not holder:
        return "another process (its lock file names no holder)"
    return (f"process {holder.get('pid')} on {holder.get('host')} "
            f"({str(holder.get('command'))[:200]!r}, since {holder.get('started')})")


def acquire(directory: str) -> tuple[int, int]:
    """Become the owner of the database in `directory` (an existing directory), or raise
    KIP_4003 naming the live holder — another process, or this one (a second open before
    the first is closed). Returns the key to `release`."""
    st = os.stat(directory)
    key = (st.st_dev, st.st_ino)
    with _guard:
        if key in _held:
            raise KipError(
                ErrorCode.KIP_4003,
                f"the database at {directory} is in use by this process "
                f"(pid {os.getpid()}): it is already open here",
                "One open per database at a time, in a process as across processes: use the "
                "open one, or close it before opening the directory again.")
        path = os.path.join(directory, LOCK_NAME)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise KipError(ErrorCode.KIP_4003,
                           f"cannot create the lock file {path}: {exc.strerror}",
                           "Check that the database directory is writable.") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                holder = read_holder(directory)
                raise KipError(
                    ErrorCode.KIP_4003,
                    f"the database at {directory} is in use by {describe(holder)}",
                    "One process owns a database at a time: stop that process first, or "
                    "send commands to its server (`kip exec --url URL`).") from None
            log.warning("cannot lock %s (%s): opening without the one-owner lock",
                        path, exc.strerror)
            _held[key] = None
            return key
        previous = read_holder(directory)
        if previous and previous.get("pid") != os.getpid():
            log.info("taking over the stale lock of %s", describe(previous))
        _write(fd, holder_record())
        _held[key] = fd
        return key


def _write(fd: int, record: dict[str, Any]) -> None:
    data = json.dumps(record).encode() + b"\n"
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    except OSError as exc:       # e.g. a full disk: the lock holds, only the note is lost
        log.warning("cannot write the holder into the lock file: %s", exc.strerror)


def release(key: tuple[int, int] | None) -> None:
    """Give the directory up: unlock (the file stays: its next owner rewrites it) and let
    this process open it again."""
    if key is None:
        return
    with _guard:
        if key not in _held:
            return
        fd = _held.pop(key)
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        os.close(fd)       # closing the only descriptor drops the flock
