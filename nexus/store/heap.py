"""The process's C heap (glibc malloc): when freed memory goes back to the system.

Owns two process-wide calls, no-ops where the C library is not glibc:

* `tune()`, once per process at `Nexus.open`: fixed thresholds in place of glibc's dynamic
  ones. By default a block of 128 KB or more is mapped on its own and unmapped when freed,
  but the first such block freed raises that threshold to its size (up to 32 MB) and the
  heap's trim threshold to twice that: after one large temporary (a model's float32 table
  while it loads, an answer of 60k rows, a search's dense score array) every later block
  below the new threshold is carved from the heap, and up to 64 MB freed at its top is
  kept. In a serving process at N=100k (bench/RESULTS.md, "Memory of a serving process")
  that left ~14 MB of freed heap resident after the bench's probe. With blocks of
  `MMAP_THRESHOLD` and more mapped on their own, those are returned when freed; below it
  the heap serves as before. `TRIM_THRESHOLD` stays high so that the heap's top is not
  given back and faulted in again at every query (measured: a trim threshold of 128 KB
  tripled Q6's page faults and cost it ~10 %). An operator's own settings (the
  `MALLOC_*_` variables or `GLIBC_TUNABLES` in the environment) are left as they are.
* `trim()`: `malloc_trim(0)`, which also releases whole free pages inside the heap — after
  a bulk load, a checkpoint, or an in-memory index copy dropped.
"""
from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

MMAP_THRESHOLD = 1 << 20        # blocks this large or larger: mapped apart, unmapped when freed
TRIM_THRESHOLD = 32 << 20       # free bytes at the heap's top before it is given back
_M_TRIM_THRESHOLD = -1          # mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3
_OPERATOR = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
             "MALLOC_MMAP_MAX_")

_lock = threading.Lock()
_tuned = False


def _glibc() -> Any | None:
    try:
        libc = ctypes.CDLL(None)            # the process's own symbols: its C library's
        libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
        libc.malloc_trim.argtypes = (ctypes.c_size_t,)
        return libc if hasattr(libc, "gnu_get_libc_version") else None
    except (OSError, AttributeError):       # not glibc
        return None


_LIBC = _glibc()


def tune() -> bool:
    """Set the fixed thresholds (above) once per process; whether they were set (False:
    not glibc, the environment sets malloc's own, or done before)."""
    global _tuned
    with _lock:
        if _tuned or _LIBC is None:
            return False
        _tuned = True
        if any(name in os.environ for name in _OPERATOR) or \
                "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
            return False
        # (mallopt returns 1 on success; setting either threshold turns the dynamic one off)
        return bool(_LIBC.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and \
            bool(_LIBC.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def trim() -> None:
    """Give freed heap pages back to the system (`malloc_trim(0)`; a no-op elsewhere)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
