"""Memory-mapped files read one page per fault, not a fault-around window (Linux).

Owns one thing: telling the kernel that a mapped range of a file (the LMDB map, a
memory-mapped vector index, a model's weights) is read at random, so that a read maps the
page it reads and no more into this process.

Why: on a read fault in a file mapping Linux maps not only the faulting page but every page
of the surrounding `fault_around_bytes` window (64 KB: 16 pages) that the page cache holds.
A B-tree lookup or an HNSW search reads a few hundred bytes at each of many random places,
so each of them made 64 KB of the file resident in the process (VmRSS's RssFile): e.g. the
10 SEARCHes of the bench's probe mapped almost the whole vector files. `madvise
(MADV_RANDOM)` stops readahead into the page cache but not fault-around, and
`fault_around_bytes` is a system-wide debugfs knob. What does turn it off for one mapping
is registering it with a userfaultfd in write-protect mode (`uffd_disable_fault_around` in
mm/memory.c); with `UFFD_FEATURE_WP_ASYNC` (Linux ≥ 6.7) the kernel resolves write-protect
faults itself and no page is ever write-protected here, so the registration changes nothing
but that: no handler thread, no fault is delivered, reads and writes behave as before. The
pages a read touches are still mapped from the page cache, shared with every process.

Best effort: where the kernel, its settings or a seccomp filter refuse userfaultfd (or this
is not Linux on x86-64 / arm64), `read_page_by_page` returns False and the mapping keeps the
kernel's fault-around. One userfaultfd per process, kept open for its life (closing it would
drop the registrations); a child after fork makes its own (the parent's operates on the
parent's address space).
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import platform
import struct
import threading
from collections.abc import Iterable

_SYSCALL = {"x86_64": 323, "aarch64": 282}.get(platform.machine())   # userfaultfd(2)
_USER_MODE_ONLY = 1             # UFFD_USER_MODE_ONLY: allowed without privileges
_API = 0xAA
_FEATURE_WP_ASYNC = 1 << 15
_IOCTL_API = 0xC018AA3F         # _IOWR(0xAA, 0x3F, struct uffdio_api)
_IOCTL_REGISTER = 0xC020AA00    # _IOWR(0xAA, 0x00, struct uffdio_register)
_MODE_WP = 1 << 1
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

ENABLED = True                  # off: every mapping keeps the kernel's fault-around

_lock = threading.Lock()
_fd: int | None = None          # this process's userfaultfd (-1: refused, do not retry)
_pid = 0                        # ... and the process it belongs to


def _uffd() -> int:
    global _fd, _pid
    with _lock:
        if _fd is None or _pid != os.getpid():
            _fd, _pid = _open(), os.getpid()
        return _fd


def _open() -> int:
    if _SYSCALL is None:
        return -1
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        fd = int(libc.syscall(_SYSCALL, os.O_CLOEXEC | os.O_NONBLOCK | _USER_MODE_ONLY))
    except (OSError, AttributeError):
        return -1
    if fd < 0:
        return -1
    try:
        fcntl.ioctl(fd, _IOCTL_API, bytearray(struct.pack("QQQ", _API, _FEATURE_WP_ASYNC, 0)))
    except OSError:             # no WP_ASYNC (Linux < 6.7): registering would need a handler
        os.close(fd)
        return -1
    return fd


def read_page_by_page(address: int, length: int) -> bool:
    """Turn fault-around off for the mapping at [address, address + length) (page-aligned
    start; the whole range mapped, writable or not, but the mapping must be private or of a
    file open for writing: the kernel's VM_MAYWRITE). Whether it took."""
    if not ENABLED or length <= 0 or address % _PAGE:
        return False
    fd = _uffd()
    if fd < 0:
        return False
    length = (length + _PAGE - 1) // _PAGE * _PAGE
    try:
        fcntl.ioctl(fd, _IOCTL_REGISTER,
                    bytearray(struct.pack("QQQQ", address, length, _MODE_WP, 0)))
    except OSError:
        return False
    return True


def read_file_page_by_page(path: str) -> int:
    """`read_page_by_page` for every mapping of the file at `path` in this process (a map a
    library made, e.g. LMDB's); the bytes registered."""
    done = 0
    for start, end in _mappings(os.path.realpath(path)):
        if read_page_by_page(start, end - start):
            done += end - start
    return done


def _mappings(path: str) -> Iterable[tuple[int, int]]:
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].rstrip("\n") == path:
            lo, hi = parts[0].split("-")
            out.append((int(lo, 16), int(hi, 16)))
    return out
