"""`nexus.store.pagemap`: a registered mapping maps the page a read touches, not the kernel's
fault-around window around it; the LMDB map and the memory-mapped vector indexes are
registered when opened; answers do not change. Linux with userfaultfd's write-protect async
mode (≥ 6.7) only: elsewhere registration reports False and these tests are skipped."""
from __future__ import annotations

import mmap
import os
import re

import numpy as np
import pytest
from usearch.index import Index

from nexus.search.layered import LayeredIndex
from nexus.store import LmdbGraphStore, pagemap

MB = 1 << 20


def _supported() -> bool:
    m = mmap.mmap(-1, mmap.PAGESIZE)
    try:
        return pagemap.read_page_by_page(np.frombuffer(m, np.uint8).ctypes.data, len(m))
    finally:
        m.close()


pytestmark = pytest.mark.skipif(not _supported(), reason="no userfaultfd write-protect async")


def _smaps(path: str) -> list[tuple[int, list[str]]]:
    """(Rss kB, VmFlags) of every mapping of `path` in this process."""
    with open("/proc/self/smaps") as f:
        text = f.read()
    out = []
    for block in re.split(r"\n(?=[0-9a-f]+-[0-9a-f]+ )", text):
        head = block.split("\n", 1)[0].split()
        if len(head) == 6 and head[5] == os.path.realpath(path):
            rss = int(re.search(r"\nRss:\s+(\d+)", block).group(1))
            flags = re.search(r"\nVmFlags:(.*)", block).group(1).split()
            out.append((rss, flags))
    return out


def _reads_map(tmp_path, register: bool) -> int:
    """kB mapped by 8 reads, one in each 512 KB of a 4 MB file in the page cache."""
    path = tmp_path / f"blob{register}"
    data = np.random.default_rng(1).integers(0, 256, 4 * MB, np.uint8).tobytes()
    # Written a page at a time, as LMDB and usearch write: the page cache holds it in
    # single pages (a file written in large chunks may sit in large folios, and a fault
    # maps the whole folio whatever is registered).
    with open(path, "wb") as f:
        for at in range(0, len(data), 4096):
            f.write(data[at:at + 4096])
            f.flush()
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
    view = np.frombuffer(m, np.uint8)
    if register:
        assert pagemap.read_page_by_page(view.ctypes.data, len(view))
    for offset in range(100_000, 4 * MB, MB // 2):
        assert view[offset] == data[offset]
    rss = sum(r for r, _ in _smaps(str(path)))
    del view
    m.close()
    return rss


def test_a_registered_mapping_maps_only_the_pages_read(tmp_path):
    assert _reads_map(tmp_path, register=True) <= 8 * 4
    # The same reads unregistered map the kernel's fault-around window around each.
    assert _reads_map(tmp_path, register=False) > 8 * 4


def test_registration_refuses_an_unaligned_range_and_survives_a_fork(monkeypatch):
    assert not pagemap.read_page_by_page(4097, 4096)
    fd = pagemap._uffd()
    monkeypatch.setattr(pagemap, "_pid", -1)        # as a child after fork sees it
    assert pagemap._uffd() != fd                    # its own, not the parent's
    monkeypatch.setattr(pagemap, "ENABLED", False)
    m = mmap.mmap(-1, mmap.PAGESIZE)
    assert not pagemap.read_page_by_page(np.frombuffer(m, np.uint8).ctypes.data, len(m))
    m.close()


def test_the_lmdb_map_is_registered_at_open(tmp_path):
    store = LmdbGraphStore(str(tmp_path / "db"))
    try:
        with store.write() as w:
            t = w.intern("Thing")
            ids = w.reserve_ids(3)
            w.create_concept_columns(ids, [t] * 3, ["a", "b", "c"], [{}, {}, {}], None)
        maps = _smaps(str(tmp_path / "db" / "data.mdb"))
        assert maps and all("uw" in flags for _, flags in maps)
        with store.read() as r:
            assert sorted(r.head(n).name for n in r.elements()) == ["a", "b", "c"]
    finally:
        store.close()


def test_a_mapped_index_is_registered_and_answers_as_saved(tmp_path):
    def make():
        return Index(ndim=16, metric="cos", dtype="i8", connectivity=16, expansion_add=128,
                     expansion_search=256)
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(2000, 16)).astype(np.float32)
    full = make()
    full.add(np.arange(2000, dtype=np.uint64), vectors)
    path = str(tmp_path / "ix.usearch")
    full.save(path)
    queries = vectors[:40] + 0.01
    expected = [full.search(q, 10).keys.tolist() for q in queries]
    ix = LayeredIndex.mapped(make, path)
    maps = _smaps(path)
    assert maps and all("uw" in flags for _, flags in maps)
    assert [ix.search(q, 10).keys.tolist() for q in queries] == expected
    ix.release_pages()
    assert [ix.search(q, 10).keys.tolist() for q in queries] == expected
