"""`nexus.store.heap`: once a nexus is open in a process, large blocks the process frees go
back to the system instead of staying in malloc's heap after one large temporary; an
operator's own malloc settings are left alone. glibc only (elsewhere `tune` is a no-op and
these tests are skipped). Each case runs in a fresh interpreter: the policy is per process."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nexus.store import heap

pytestmark = pytest.mark.skipif(heap._LIBC is None, reason="not glibc")

# One large temporary (8 MB: glibc's dynamic threshold then carves every block below 8 MB
# from the heap and keeps up to 16 MB free at its top), then three 4 MB blocks written and
# freed: how much of the process's own memory (RssAnon) they leave behind, in MB.
_CHILD = """
import sys
def anon():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("RssAnon")) / 1024
if sys.argv[1] == "open":
    from nexus.api import Nexus
    Nexus.open(None).close()
before = anon()
big = bytearray(8 << 20)
del big
blocks = [bytearray(4 << 20) for _ in range(3)]
del blocks
print(round(anon() - before, 1))
"""


def _left_behind(*args: str, env: dict[str, str] | None = None) -> float:
    out = subprocess.run([sys.executable, "-c", _CHILD, *args], capture_output=True, text=True,
                         check=True, env={**os.environ, **(env or {})})
    return float(out.stdout.split()[-1])


def test_large_blocks_freed_go_back_to_the_system_once_a_nexus_is_open():
    assert _left_behind("plain") >= 8             # glibc's default: kept in the heap
    assert _left_behind("open") < 2               # after Nexus.open: returned


def test_an_operators_malloc_settings_are_left_as_they_are():
    # The operator fixes both thresholds high: the blocks stay in the heap.
    assert _left_behind("open", env={"MALLOC_MMAP_THRESHOLD_": str(32 << 20),
                                     "MALLOC_TRIM_THRESHOLD_": str(64 << 20)}) >= 8
    code = "from nexus.store import heap; print(heap.tune(), heap.tune())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "MALLOC_TRIM_THRESHOLD_": "131072"})
    assert out.stdout.split() == ["False", "False"]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={k: v for k, v in os.environ.items()
                                          if not k.startswith("MALLOC_")})
    assert out.stdout.split() == ["True", "False"]                # once per process
