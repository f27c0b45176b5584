"""Checking an LMDB data file against its meta pages before LMDB maps it.

LMDB maps `data.mdb` into memory and trusts it: a file cut short (a full disk while copying,
a truncated backup) makes the first read of a page past its end a SIGBUS that kills the
process, and a meta page pointing at nonsense can end in an assertion abort. So before
`lmdb.open` this module reads the two meta pages (pages 0 and 1: LMDB's own header) with
plain file reads and refuses, with a `KipError` naming the database and the cause, a file
that LMDB could not safely map:

* shorter than its two meta pages, or with a page size that is not a power of two;
* a meta page without LMDB's magic number or data version (not an LMDB file);
* the newest meta page (the greatest transaction id, the one LMDB uses) naming a last page
  or a root page past the end of the file (truncated).

Layout (LMDB 0.9, `mdb.c`, 64-bit): a page header of 16 bytes, then `MDB_meta`: magic (u32)
at 16, version (u32) at 20, address (8) at 24, map size (8) at 32, two `MDB_db` of 48 bytes
at 40 (free pages) and 88 (main; `md_root` is their last 8 bytes), the last page number at
136 and the transaction id at 144. The page size is the `md_pad` of the first `MDB_db`.
Damage deeper in the file (a zeroed page in a tree) is not seen here: `kip check` walks the
trees in a child process for that (docs/guarantees.md, "Storage faults").
"""
from __future__ import annotations

import os
import struct
import sys

from nexus.errors import ErrorCode, KipError

MAGIC = 0xBEEFC0DE
DATA_VERSION = 1
META_SIZE = 152                 # bytes of page header + MDB_meta read per meta page
_META = struct.Struct("=8xHHI" "II8xQ" "IHHQQQQQ" "IHHQQQQQ" "QQ")
INVALID_PAGE = (1 << 64) - 1    # P_INVALID: the root of an empty tree
HINT = ("Restore the database directory from a backup; `kip check --db DIR` reports what "
        "it finds. Do not open the damaged copy for writing.")


class Meta:
    """The fields of one meta page that matter here."""
    __slots__ = ("flags", "magic", "version", "psize", "free_root", "main_root", "last_pg",
                 "txnid")

    def __init__(self, raw: bytes) -> None:
        f = _META.unpack(raw[:META_SIZE])
        _pad, self.flags, _lower_upper, self.magic, self.version, _mapsize = f[:6]
        self.psize = f[6]
        self.free_root = f[13]
        self.main_root = f[21]
        self.last_pg, self.txnid = f[22], f[23]


def _damaged(path: str, cause: str) -> KipError:
    return KipError(ErrorCode.KIP_4003,
                    f"the database at {os.path.dirname(path)} is damaged: {cause}", HINT)


def validate(path: str) -> None:
    """Refuse (KipError KIP_4003) a data file that LMDB could not map safely (module doc).
    A missing or empty file is fine: LMDB creates it."""
    if sys.maxsize <= 2 ** 32:
        return                  # the layout above is the 64-bit one
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return
            first = f.read(META_SIZE)
            if len(first) < META_SIZE:
                raise _damaged(path, f"data.mdb has only {size} bytes, less than its meta "
                                     f"pages (truncated)")
            m0 = Meta(first)
            psize = m0.psize
            if m0.magic != MAGIC:
                raise _damaged(path, "data.mdb is not an LMDB file (no LMDB magic number "
                                     "in its first meta page)")
            if psize < 512 or psize > 65536 or psize & (psize - 1):
                raise _damaged(path, f"data.mdb names an impossible page size ({psize})")
            if size < 2 * psize:
                raise _damaged(path, f"data.mdb has only {size} bytes, less than its two "
                                     f"meta pages of {psize} bytes (truncated)")
            f.seek(psize)
            m1 = Meta(f.read(META_SIZE))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise KipError(ErrorCode.KIP_4003,
                       f"cannot read the database at {os.path.dirname(path)}: {exc}",
                       "Check the permissions and the disk of the database directory.") \
            from None
    for i, meta in enumerate((m0, m1)):
        if meta.magic != MAGIC:
            raise _damaged(path, f"meta page {i} of data.mdb has no LMDB magic number")
        if meta.version != DATA_VERSION:
            raise _damaged(path, f"meta page {i} of data.mdb has LMDB data version "
                                 f"{meta.version} (this LMDB reads version {DATA_VERSION})")
    current = m0 if m0.txnid >= m1.txnid else m1
    pages = size // psize
    if current.last_pg >= pages:
        raise _damaged(path, f"data.mdb is truncated: its meta page (transaction "
                             f"{current.txnid}) uses {current.last_pg + 1} pages of "
                             f"{psize} bytes, the file holds {pages} ({size} bytes)")
    for name, root in (("main", current.main_root), ("free-page", current.free_root)):
        if root != INVALID_PAGE and not 2 <= root <= current.last_pg:
            raise _damaged(path, f"the {name} tree of data.mdb starts at page {root}, "
                                 f"outside the pages in use (2..{current.last_pg})")
