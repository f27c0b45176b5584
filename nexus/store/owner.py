"""One owner per database: the `owner.lock` file of a store directory.

Opening an LMDB store makes this process the database's owner until it closes it: an
exclusive `flock` on `DIR/owner.lock`, whose content names the holder (pid, host, command
line, start time) as JSON. A second *process* opening the same database is refused at once
with a `KipError` (KIP_4003) naming the holder; the kernel drops the lock when its holder
exits, however it exits, so a lock file left by a process that is gone (a *stale* lock) is
simply taken over (and the takeover logged). Within one process the lock is shared: opening
the same directory again (tests, a reopen before the previous close) counts a reference.

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

_held: dict[tuple[int, int], "_Lock"] = {}      # (st_dev, st_ino) of the directory → lock
_guard = threading.Lock()


class _Lock:
    __slots__ = ("fd", "refs", "path")

    def __init__(self, fd: int, path: str) -> None:
        self.fd, self.refs, self.path = fd, 1, path


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


def acquire(directory: str) -> tuple[int, int] | None:
    """Become the owner of the database in `directory` (an existing directory), or raise
    KIP_4003 naming the live holder. Returns the key to `release` (None: not locked)."""
    st = os.stat(directory)
    key = (st.st_dev, st.st_ino)
    with _guard:
        lock = _held.get(key)
        if lock is not None:
            lock.refs += 1
            return key
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
            return None
        previous = read_holder(directory)
        if previous and previous.get("pid") != os.getpid():
            log.info("taking over the stale lock of %s", describe(previous))
        _write(fd, holder_record())
        _held[key] = _Lock(fd, path)
        return key


def _write(fd: int, record: dict[str, Any]) -> None:
    data = json.dumps(record).encode() + b"\n"
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    except OSError as exc:       # e.g. a full disk: the lock holds, only the note is lost
        log.warning("cannot write the holder into the lock file: %s", exc.strerror)


def release(key: tuple[int, int] | None) -> None:
    """Drop one reference; the last one unlocks (the file stays: its next owner rewrites
    it)."""
    if key is None:
        return
    with _guard:
        lock = _held.get(key)
        if lock is None:
            return
        lock.refs -= 1
        if lock.refs:
            return
        del _held[key]
        try:
            os.ftruncate(lock.fd, 0)
        except OSError:
            pass
        os.close(lock.fd)       # closing the only descriptor drops the flock
