"""The inverted file's 4-bit residual codes (`nexus.search.ivf_codes`) and the file layouts
of `nexus.search.ivf`: a file with lists keeps its rows as codes (layout 2, half the bytes
of int8 rows), a flat one int8 rows (layout 1, exact); a file of layout 1 with lists
(written before layout 2) is read as it is and written in layout 2 by the next save."""
from __future__ import annotations

import os

import numpy as np

from nexus.search import ivf, ivf_codes
from nexus.search.ivf import IVFIndex

DIM = 32


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _data(n: int, seed: int = 3, clusters: int = 40) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, DIM))
    x = centres[rng.integers(0, clusters, n)] + 0.4 * rng.standard_normal((n, DIM))
    return np.arange(1, n + 1, dtype=np.uint64) * 8, x.astype(np.float32)


def test_a_code_decodes_to_a_unit_vector_near_its_row_and_scores_its_cosine():
    rng = np.random.default_rng(1)
    for dim in (32, 33, 256):
        x = _unit(rng.standard_normal((400, dim)))
        c = _unit(x + 0.8 * rng.standard_normal((400, dim)))
        codes, alpha, step = ivf_codes.encode(x, c)
        assert codes.shape == (400, (dim + 1) // 2) and codes.dtype == np.uint8
        dec = ivf_codes.decode(codes, alpha, step, c, dim)
        np.testing.assert_allclose(np.linalg.norm(dec, axis=1), 1.0, rtol=1e-5)
        cos = np.einsum("ij,ij->i", dec, x)
        assert cos.min() > 0.96 and np.median(cos) > 0.99
        # A list's scores are the decoded rows' cosines with the query.
        q = _unit(rng.standard_normal((1, dim)))[0]
        qc = float(c[0] @ q)
        same = np.repeat(c[:1], 400, axis=0)
        codes, alpha, step = ivf_codes.encode(x, same)
        dec = ivf_codes.decode(codes, alpha, step, same, dim)
        np.testing.assert_allclose(ivf_codes.Query(q).scores(codes, alpha, step, qc),
                                   dec @ q, atol=2e-6)


def test_a_row_on_its_centroid_is_coded_as_itself():
    x = _unit(np.random.default_rng(2).standard_normal((3, DIM)))
    codes, alpha, step = ivf_codes.encode(x, x)
    np.testing.assert_allclose(ivf_codes.decode(codes, alpha, step, x, DIM), x, atol=1e-5)


def test_a_file_with_lists_keeps_codes_in_half_the_bytes(tmp_path):
    n = ivf.FLAT_MAX + 1000
    keys, x = _data(n)
    ix = IVFIndex(DIM)
    ix.add(keys, x)
    ix.save(str(tmp_path / "f.ivf"))
    raw = (tmp_path / "f.ivf").read_bytes()
    assert raw[:8] == ivf.MAGIC2
    # Per row: DIM/2 bytes of nibbles, α and step, a uint32 key (all keys fit 32 bits).
    nlist = round(np.sqrt(n))
    assert len(raw) <= ivf.HEADER + 4 * DIM * nlist + 8 * (nlist + 1) + n * (DIM // 2 + 12) \
        + 6 * 64
    ix.remap(str(tmp_path / "f.ivf"))
    assert ix.coded and ix.contains(keys).all() and len(ix) == n
    for i in range(0, n, 301):
        assert ix.search(x[i], 1).keys.tolist() == [int(keys[i])]


def test_keys_past_32_bits_are_kept_whole(tmp_path):
    n = ivf.FLAT_MAX + 500
    keys, x = _data(n)
    keys = keys + np.uint64(1 << 40)
    ix = IVFIndex(DIM)
    ix.add(keys, x)
    ix.save(str(tmp_path / "f.ivf"))
    ix.remap(str(tmp_path / "f.ivf"))
    assert ix.contains(keys).all() and not ix.contains(keys - np.uint64(1 << 40)).any()
    assert ix.search(x[77], 1).keys.tolist() == [int(keys[77])]
    assert set(ix.keys.tolist()) == set(keys.tolist())


def test_a_coded_row_keeps_its_code_through_saves_that_do_not_retrain(tmp_path):
    n = ivf.FLAT_MAX + 1000
    keys, x = _data(n)
    ix = IVFIndex(DIM)
    ix.add(keys, x)
    path = str(tmp_path / "f.ivf")
    ix.save(path)
    ix.remap(path)
    before = ix.get(keys[:50])
    for round_ in range(3):             # replace, remove, add: the lists stay as trained
        ix.add(keys[100 + round_:101 + round_], x[:1])
        ix.remove(keys[200 + round_:201 + round_])
        assert not ix.due
        ix.save(path)
        ix.remap(path)
    assert np.array_equal(ix.get(keys[:50]), before)
    assert set(ix.search(x[0], 4).keys.tolist()) == set(keys[[0, 100, 101, 102]].tolist())
    assert not ix.contains(keys[200:203]).any() and len(ix) == n - 3


def test_a_flat_file_keeps_int8_rows_and_exact_cosines(tmp_path):
    keys, x = _data(300)
    ix = IVFIndex(DIM)
    ix.add(keys, x)
    ix.save(str(tmp_path / "f.ivf"))
    assert (tmp_path / "f.ivf").read_bytes()[:8] == ivf.MAGIC
    ix.remap(str(tmp_path / "f.ivf"))
    rows, inv = ivf.quantise(x)
    np.testing.assert_allclose(ix.get(keys), rows.astype(np.float32) * inv[:, None], rtol=1e-6)


def _layout1(ix: IVFIndex, path: str) -> None:
    """Write `ix` as the code before layout 2 did: int8 rows grouped by list, the sorted
    keys and their rows stored (MAGIC, dim, nlist, count, trained)."""
    cent, trained, starts, keys, rows, inv = ix._packed()
    spos = np.argsort(keys, kind="stable").astype(np.int32)
    head = ivf.MAGIC + np.array([ix.dim, len(cent), len(keys), trained],
                                dtype=np.int64).tobytes()
    ix._write(path, head, [cent, starts, keys, rows, inv, keys[spos], spos])


def test_a_file_of_layout_1_with_lists_is_read_and_the_next_save_codes_it(tmp_path):
    n = ivf.FLAT_MAX + 1500
    keys, x = _data(n)
    mem = IVFIndex(DIM, in_memory=True)         # (trains in place, rows int8)
    mem.add(keys, x)
    assert mem.centroids is not None and not mem.coded
    old = str(tmp_path / "old.ivf")
    _layout1(mem, old)
    ix = IVFIndex.mapped(lambda: IVFIndex(DIM), old)
    assert not ix.coded and len(ix) == n and ix.trained == n
    rows, inv = ivf.quantise(x)
    q = np.random.default_rng(8).standard_normal(DIM).astype(np.float32)
    sims = (rows.astype(np.float32) @ (q / np.linalg.norm(q))) * inv
    assert ix.search(q, 10, exact=True).keys.tolist() == \
        [int(keys[i]) for i in np.argsort(-sims, kind="stable")[:10]]
    assert ix.search(q, 10).keys.tolist() == mem.search(q, 10).keys.tolist()
    np.testing.assert_allclose(ix.get(keys[:5]), rows[:5].astype(np.float32) * inv[:5, None],
                               rtol=1e-6)
    # The next save writes layout 2 with the same lists (not retrained).
    ix.add(keys[:1], x[1:2])
    new = str(tmp_path / "new.ivf")
    ix.save(new)
    ix.remap(new)
    assert ix.coded and ix.trained == n and np.array_equal(ix.centroids, mem.centroids)
    assert os.path.getsize(new) < 0.75 * os.path.getsize(old)
    assert ix.search(x[1], 2).keys.tolist()[0] in (int(keys[0]), int(keys[1]))
    assert ix.contains(keys).all() and len(ix) == n
