"""LMDB's failures as KIP errors: what the LMDB store raises when the environment or its disk
fails.

Owns the translation of lmdb and OS exceptions into KipError (`lmdb_error`): a full disk,
an exhausted quota or the process's file size limit named as such (LMDB reports a short
write as EIO, so the free space and the size limit are looked at to tell), a full map, an
I/O error, a corrupted or invalid file (with the restore hint of `lmdb_file`, also given
by `damage_hint` for opens); and whether an error means the disk takes no more writes
(`cannot_write`: the owner's open then serves from the log without replaying it). Split
out of `lmdb_store`, which owns the environment and its transactions.
"""
from __future__ import annotations

import errno
import os

import lmdb

from nexus.errors import ErrorCode, KipError
from nexus.store import lmdb_file

# Free space under which a failed write is taken for a full disk: LMDB reports a short
# write as EIO, so the errno alone does not say it.
DISK_FULL_BYTES = 8 << 20


def _free_bytes(path: str) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _at_size_limit(path: str) -> bool:
    """Whether data.mdb has reached the process's file size limit (RLIMIT_FSIZE): a
    write cut short there is reported by LMDB as EIO."""
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        size = os.path.getsize(os.path.join(path, "data.mdb"))
    except (ImportError, OSError, ValueError):
        return False
    return soft != resource.RLIM_INFINITY and size >= soft - 65536


def disk_error(exc: BaseException, path: str) -> KipError | None:
    """A write that failed for lack of room (disk full, or the process's file size
    limit): a KIP error that says so. The transaction did not commit: nothing of it is
    written."""
    text = str(exc)
    free = _free_bytes(path)
    if "No space left" in text or "Disk quota" in text or (
            ("Input/output error" in text or isinstance(exc, lmdb.DiskError))
            and free is not None and free < DISK_FULL_BYTES):
        return KipError(ErrorCode.KIP_4003,
                        f"the disk holding the store at {path} is full ({free} bytes free): "
                        f"the write was not committed, nothing of it is stored",
                        "Free space on that disk (or move the database to a larger one), "
                        "then retry the command; the database is intact.")
    if "File too large" in text or ("Input/output error" in text and _at_size_limit(path)):
        return KipError(ErrorCode.KIP_4003,
                        f"the store at {path} cannot grow: the process's file size limit "
                        f"(ulimit -f) was reached; the write was not committed",
                        "Raise the file size limit of the process, then retry the command; "
                        "the database is intact.")
    return None


def cannot_write(exc: BaseException, path: str) -> bool:
    """Whether `exc` says the disk takes no more writes: full, over quota, read-only."""
    return disk_error(exc, path) is not None or \
        getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT, errno.EROFS) or \
        "Read-only file system" in str(exc)


def lmdb_error(exc: BaseException, path: str) -> KipError | None:
    full = disk_error(exc, path) if isinstance(exc, (lmdb.Error, OSError)) else None
    if full is not None:
        return full
    if isinstance(exc, lmdb.MapFullError):
        return KipError(ErrorCode.KIP_4003,
                        f"the store at {path} is full (map_size reached); reopen it with a "
                        f"larger map_size")
    if isinstance(exc, lmdb.DiskError) or (isinstance(exc, OSError) and not
                                           isinstance(exc, lmdb.Error)):
        return KipError(ErrorCode.KIP_4003, f"I/O error in the store at {path}: {exc}")
    if isinstance(exc, lmdb.CorruptedError):
        return KipError(ErrorCode.KIP_4003, f"the store at {path} is corrupted: {exc}",
                        lmdb_file.HINT)
    if isinstance(exc, lmdb.Error):
        return KipError(ErrorCode.KIP_4003, f"storage failure in {path}: {exc}")
    return None


def damage_hint(exc: BaseException) -> str | None:
    """The restore hint for errors that mean a damaged file (else the code's default)."""
    damaged = (lmdb.CorruptedError, lmdb.InvalidError, lmdb.PageNotFoundError,
               lmdb.VersionMismatchError)
    return lmdb_file.HINT if isinstance(exc, damaged) else None
