"""The one-time conversion of an LMDB store's link indexes from 28-byte to 16-byte keys.

A database written before element ids were capped at `codec.MAX_ELEMENT_ID` has the format
tag `codec.FORMAT_TAG_V1` and its `spo`, `ops` and `pso` keys with 8-byte element ids
(s(8) p(4) o(8) n(8) and the like). Its owner's open converts them (`convert`, called by
`lmdb_store` after the write-ahead log's replay, whose records are in the layout they were
written in) in ONE write transaction: each table read in key order, emptied and written
again appended in the 16-byte layout (the order is the same: ids below 2**32 keep it as
4-byte big-endian fields), then the format tag set. A kill during it leaves the old layout
whole, and the next open converts again. The old layout lives here only: nothing else
reads or writes it (a read-only open of such a database is refused by `lmdb_store`).

A database of `codec.FORMAT_TAG_V2` (16-byte link keys, link heads with 8-byte ends) needs
no conversion — `codec.decode_head` reads both head forms — only its tag set to the current
one by the same open (so that an older nexus refuses it once new heads are written); a
read-only open reads it as it is.
"""
from __future__ import annotations

from itertools import repeat
from typing import Any, Mapping

import numpy as np

from nexus.errors import ErrorCode, KipError
from nexus.store import codec

_U8, _U4 = ">u8", ">u4"
# table -> its key fields in order, and each field's width in the old layout
_FIELDS = {"spo": ("s", "p", "o", "n"), "ops": ("o", "p", "s", "n"),
           "pso": ("p", "s", "o", "n")}
CHUNK = 1 << 16         # keys put per putmulti (bounds the Python bytes alive at once)


def _old_dtype(fields: tuple[str, ...]) -> np.dtype[Any]:
    return np.dtype([(f, _U4 if f == "p" else _U8) for f in fields])


def _new_dtype(fields: tuple[str, ...]) -> np.dtype[Any]:
    return np.dtype([(f, _U4) for f in fields])


def needed(tag: bytes | None) -> bool:
    """Whether its owner's open must convert a store with this format tag (or set its tag:
    module doc)."""
    return tag == codec.FORMAT_TAG_V1 or tag == codec.FORMAT_TAG_V2


def convert(env: Any, handles: Mapping[str, Any], path: str) -> int | None:
    """Convert the link indexes of the LMDB environment `env` (table name -> handle) in one
    write transaction; returns the number of links converted (0 for a store whose keys are
    current: its tag only is set), or None when the store is in the current format. A store
    holding an id past the cap cannot be converted: KIP_4003, nothing written."""
    with env.begin(write=True) as txn:
        meta = handles["meta"]
        tag = txn.get(codec.META_FORMAT, db=meta)
        if not needed(tag):
            return None
        count = 0
        for table, fields in _FIELDS.items() if tag == codec.FORMAT_TAG_V1 else ():
            db = handles[table]
            old_type, new_type = _old_dtype(fields), _new_dtype(fields)
            raw = b"".join(txn.cursor(db=db).iternext(values=False))
            if len(raw) % old_type.itemsize:
                raise _cannot(path, f"its {table} table holds keys of an unknown layout")
            old = np.frombuffer(raw, dtype=old_type)
            new = np.empty(len(old), dtype=new_type)
            for f in fields:
                col = old[f]
                if len(col) and int(col.max()) > codec.MAX_ELEMENT_ID:
                    raise _cannot(path, f"its {table} table holds an element id past "
                                        f"{codec.MAX_ELEMENT_ID}")
                new[f] = col
            del raw, old
            txn.drop(db, delete=False)
            cursor = txn.cursor(db=db)
            for i in range(0, len(new), CHUNK):
                keys = new[i:i + CHUNK].view(f"V{new_type.itemsize}").tolist()
                added = cursor.putmulti(zip(keys, repeat(b"")), append=True)[1]
                if added != len(keys):
                    raise _cannot(path, f"its {table} table holds repeated keys")
            count = len(new)
        txn.put(codec.META_FORMAT, codec.FORMAT_TAG, db=meta)
    return count


def _cannot(path: str, why: str) -> KipError:
    return KipError(ErrorCode.KIP_4003,
                    f"cannot convert the link indexes of the store at {path} to the "
                    f"current format: {why}; nothing was changed",
                    "Open it with the version of nexus that wrote it and export its data "
                    "(`kip export`).")


def check_readable(env: Any, path: str) -> None:
    """Refuse a read-only open of a database whose owner has not converted it yet (only a
    writable open converts), or of a format this version does not know."""
    try:
        meta = env.open_db(b"meta", create=False)
        with env.begin() as txn:
            tag = txn.get(codec.META_FORMAT, db=meta)
    except Exception:  # noqa: BLE001 - no meta table: the caller refuses it as lacking tables
        return
    if tag == codec.FORMAT_TAG_V1:
        raise KipError(ErrorCode.KIP_4003,
                       f"cannot read the store at {path}: it is in the format of an earlier "
                       f"version ({tag!r}), which its owner converts when it opens it",
                       "Open it once for writing (its owner: Nexus.open, `kip serve`), "
                       "which converts it in about a second per 100,000 links.")
    if tag is not None and tag != codec.FORMAT_TAG and tag != codec.FORMAT_TAG_V2:
        raise KipError(ErrorCode.KIP_4003, f"cannot read the store at {path}: unsupported "
                       f"format {tag[:40]!r} (expected {codec.FORMAT_TAG!r})")
