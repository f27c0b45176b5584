"""An IVF-flat vector index in numpy, an unwired prototype measured against the HNSW index.

    python -m bench.ivf DB [--which ngram|semantic] [--nprobe 8,16,32] [--out FILE]

Issue 18 asks for a bulk load with SEARCH at >= 100k items/s, and what remains of its cost
is HNSW insertion (bench/RESULTS.md, "The vector index built in bulk"). An inverted-file
index builds without any graph: spherical k-means over a sample gives ~sqrt(N) centroids,
every vector goes to its nearest centroid's list, and the lists are written one after the
other as int8 rows (quantised as usearch's i8 does: the unit vector times 127), so a search
that scores the centroids and scans `nprobe` lists exactly touches only those lists' pages
of the memory-mapped file. Adds go to the nearest centroid's in-memory tail (scanned with
the list), deletes are tombstones; both are folded into the file at the next save.

This module is the prototype and its measurement (`main`): on the real vectors of a bulk-
loaded database (the saved usearch files), build CPU, recall@10/@40 against exact search
(typo'd names and the paraphrase queries), search CPU per query, file size, and the
resident file pages after 10 searches in a fresh process, beside the same figures of the
HNSW file. It is not used by nexus (bench/RESULTS.md, "A vector index for bulk loads"); the
semantic index's own inverted file, grown from this one, is `nexus/search/ivf.py`.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from typing import Any

import numpy as np

from nexus.search.ivf import assign     # (the engine's: the same nearest-centroid pass)

MAGIC = b"NXIVF001"
HEADER = 64                     # magic, dim, nlist, count; then the arrays, 64-byte aligned


def _unit(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(n > 0, n, 1.0)


def quantise(x: np.ndarray) -> np.ndarray:
    """Rows as int8 unit vectors times 127 (usearch's i8 of a cosine index)."""
    return np.clip(np.rint(_unit(x.astype(np.float32)) * 127.0), -127, 127).astype(np.int8)


def kmeans(x: np.ndarray, nlist: int, iters: int = 8, sample: int = 64, seed: int = 1
           ) -> np.ndarray:
    """Spherical k-means centroids (unit rows, float32) of `x` (unit rows), trained on at
    most `sample` * nlist rows."""
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(x), min(len(x), sample * nlist), replace=False)
    s = x[pick]
    c = s[rng.choice(len(s), nlist, replace=False)].copy()
    for _ in range(iters):
        a: np.ndarray = assign(s, c)
        sums = np.zeros_like(c)
        np.add.at(sums, a, s)
        empty = ~np.any(sums, axis=1)
        if empty.any():                     # an empty list takes a random sample row
            sums[empty] = s[rng.choice(len(s), int(empty.sum()), replace=False)]
        c = _unit(sums)
    return c.astype(np.float32)


def _align(n: int) -> int:
    return (n + 63) & ~63


class IVFFlat:
    """The file's arrays (memory-mapped), plus the in-memory changes since it was written."""

    def __init__(self, path: str) -> None:
        with open(path, "rb") as f:
            head = f.read(HEADER)
        if head[:8] != MAGIC:
            raise ValueError(f"{path}: not an IVF index")
        dim, nlist, count = (int(v) for v in np.frombuffer(head[8:32], dtype=np.int64))
        self.dim, self.nlist, self.count = dim, nlist, count
        mm = np.memmap(path, dtype=np.uint8, mode="r")
        off = HEADER

        def take(dtype: type, n: int) -> np.ndarray:
            nonlocal off
            size = np.dtype(dtype).itemsize * n
            a: np.ndarray = mm[off:off + size].view(dtype)
            off = _align(off + size)
            return a

        self.centroids = np.array(take(np.float32, nlist * dim).reshape(nlist, dim))
        self.starts = np.array(take(np.int64, nlist + 1))
        self.keys = take(np.uint64, count)
        self.vecs = take(np.int8, count * dim).reshape(count, dim)
        self.inv = take(np.float32, count)      # 1 / |row| (of the int8 row: exact cosine)
        self.tombs: set[int] = set()
        self.tail_keys: list[list[int]] = [[] for _ in range(nlist)]
        self.tail_vecs: list[list[np.ndarray]] = [[] for _ in range(nlist)]

    @staticmethod
    def build(path: str, keys: np.ndarray, x: np.ndarray, nlist: int | None = None) -> None:
        """Write the index of `keys` / rows `x` (float32) to `path`."""
        u = _unit(np.asarray(x, dtype=np.float32))
        nlist = nlist or max(1, int(round(np.sqrt(len(u)))))
        c = kmeans(u, nlist)
        a = assign(u, c)
        order = np.argsort(a, kind="stable")
        starts = np.zeros(nlist + 1, dtype=np.int64)
        np.cumsum(np.bincount(a, minlength=nlist), out=starts[1:])
        q = quantise(u[order])
        with open(path + ".tmp", "wb") as f:
            head = MAGIC + np.array([u.shape[1], nlist, len(u)], dtype=np.int64).tobytes()
            f.write(head.ljust(HEADER, b"\0"))
            inv = 1.0 / np.maximum(np.linalg.norm(q.astype(np.float32), axis=1), 1e-9)
            for arr in (c, starts, np.asarray(keys, dtype=np.uint64)[order], q,
                        inv.astype(np.float32)):
                b = np.ascontiguousarray(arr).tobytes()
                f.write(b)
                f.write(b"\0" * (_align(len(b)) - len(b)))
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)

    def add(self, keys: np.ndarray, x: np.ndarray) -> None:
        """Incremental add: each row to its nearest centroid's in-memory tail."""
        u = _unit(np.asarray(x, dtype=np.float32))
        q = quantise(u)
        for k, lst, row in zip(np.asarray(keys).tolist(), assign(u, self.centroids).tolist(), q):
            self.tombs.discard(k)
            self.tail_keys[lst].append(k)
            self.tail_vecs[lst].append(row)

    def remove(self, keys: np.ndarray) -> None:
        self.tombs.update(np.asarray(keys).tolist())

    def search(self, q: np.ndarray, k: int, nprobe: int) -> tuple[np.ndarray, np.ndarray]:
        """(keys, cosine distances) of the k nearest rows in the `nprobe` nearest lists."""
        qu = np.asarray(q, dtype=np.float32) / max(float(np.linalg.norm(q)), 1e-12)
        lists = np.argpartition(-(self.centroids @ qu), min(nprobe, self.nlist) - 1)[:nprobe]
        ks, vs, ns = [], [], []
        for lst in lists.tolist():
            a, b = int(self.starts[lst]), int(self.starts[lst + 1])
            ks.append(self.keys[a:b])
            vs.append(self.vecs[a:b])
            ns.append(self.inv[a:b])
            if self.tail_keys[lst]:
                ks.append(np.asarray(self.tail_keys[lst], dtype=np.uint64))
                t = np.stack(self.tail_vecs[lst]).astype(np.float32)
                vs.append(t)
                ns.append(1.0 / np.maximum(np.linalg.norm(t, axis=1), 1e-9))
        keys = np.concatenate(ks)
        sims = (np.concatenate(vs).astype(np.float32) @ qu) * np.concatenate(ns)
        if self.tombs:
            sims[np.isin(keys, np.fromiter(self.tombs, dtype=np.uint64))] = -2.0
        top = min(k, len(keys))
        best = np.argpartition(-sims, top - 1)[:top]
        best = best[np.argsort(-sims[best])]
        best = best[sims[best] > -2.0]
        return keys[best], 1.0 - sims[best]


class Adapter:
    """The part of `layered.LayeredIndex`'s interface that `vectors.VectorIndex` reads, over
    an IVFFlat: swapped into an open database to measure SEARCH end to end (`_row`)."""

    def __init__(self, ix: IVFFlat, nprobe: int) -> None:
        self.ix, self.nprobe, self.expansion_search = ix, nprobe, 256
        self._order = np.argsort(np.asarray(ix.keys))
        self._sorted = np.asarray(ix.keys)[self._order]

    def __len__(self) -> int:
        return self.ix.count

    def search(self, vector: np.ndarray, count: int) -> Any:
        from nexus.search.layered import Found
        keys, dist = self.ix.search(vector, count, self.nprobe)
        return Found(keys, dist.astype(np.float32))

    def _rows(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        at = np.minimum(np.searchsorted(self._sorted, keys), len(self._sorted) - 1)
        return at, self._sorted[at] == keys

    def contains(self, keys: np.ndarray) -> np.ndarray:
        return self._rows(np.asarray(keys, dtype=np.uint64))[1]

    def get(self, keys: np.ndarray) -> np.ndarray:
        at, _ = self._rows(np.asarray(keys, dtype=np.uint64))
        rows = self._order[at]
        return self.ix.vecs[rows].astype(np.float32) * self.ix.inv[rows][:, None]

    @property
    def keys(self) -> np.ndarray:
        return np.asarray(self.ix.keys)


def _row(db: str, data: str, files: dict[str, str], nprobe: int) -> dict:
    """The SEARCH row of bench.search_row (its 100 queries, no W2 before) on `db`, with the
    HNSW indexes as saved, then with IVF files swapped in: hit@1, hit@10, CPU per query."""
    from nexus.api import Nexus
    from .mixed import SEARCH, typo
    with open(os.path.join(data, "concepts.jsonl"), "rb") as f:
        names = [(c["type"], c["name"]) for c in map(json.loads, f)]
    with open(os.path.join(data, "meta.json"), encoding="utf-8") as f:
        meta = json.load(f)
    rng = random.Random(meta["seed"] + 11)
    targets = [names[rng.randrange(len(names))] for _ in range(100)]
    queries = [(t, n, n if i % 2 == 0 else typo(rng, n)) for i, (t, n) in enumerate(targets)]
    nx = Nexus.open(db)
    svc: Any = nx.search            # (a SearchService: the database opens with SEARCH)
    out = {}
    try:
        for label in ("hnsw", "ivf"):
            if label == "ivf":
                svc.vectors.indexes[0] = Adapter(IVFFlat(files["ngram"]), nprobe)
                if svc.semantic is not None and "semantic" in files:
                    svc.semantic.indexes[0] = Adapter(IVFFlat(files["semantic"]), nprobe)
            h1 = h10 = 0
            for t, n, q in queries:
                r = nx.execute_kip_readonly({"command": SEARCH, "parameters": {"q": q}})
                found = [(x["type"], x["name"]) for x in r["result"]]
                h1 += bool(found) and found[0] == (t, n)
                h10 += (t, n) in found
            cpu = []
            for _ in range(3):
                for _t, _n, q in queries:
                    c0 = time.thread_time()
                    nx.execute_kip_readonly({"command": SEARCH, "parameters": {"q": q}})
                    cpu.append(time.thread_time() - c0)
            cpu.sort()
            out[label] = {"hit_at_1": h1 / 100, "hit_at_10": h10 / 100,
                          "cpu_median_ms": round(cpu[len(cpu) // 2] * 1e3, 3),
                          "cpu_p95_ms": round(cpu[int(len(cpu) * 0.95)] * 1e3, 3)}
    finally:
        svc.vectors.indexes[0] = svc.vectors._new()       # (the saved files stay as
        if svc.semantic is not None:                      #  they were: nothing saved)
            svc.semantic.indexes[0] = svc.semantic._new()
        svc.vectors.saving = False
        if svc.semantic is not None:
            svc.semantic.saving = False
        nx.close()
    return out


# --- measurement ---------------------------------------------------------------------------

def _rss() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS", "RssAnon", "RssFile")):
                name, val = line.split(":")
                out[name] = int(val.split()[0]) // 1024
    return out


def _probe(kind: str, path: str, qfile: str, dim: int, nprobe: int) -> None:
    """In a fresh process: map the index, run 10 searches, print RSS (MB) before/after."""
    qs = np.load(qfile)[:10]
    before = _rss()
    if kind == "ivf":
        ix = IVFFlat(path)
        for q in qs:
            ix.search(q, 40, nprobe)
    else:
        from usearch.index import Index
        h = Index(ndim=dim, metric="cos", dtype="i8", connectivity=16, expansion_search=256)
        h.view(path)
        for q in qs:
            h.search(q, 40)
    print(json.dumps({"before": before, "after": _rss()}))


def _measure(db: str, which: str, work: str, nprobes: list[int], nlist: int) -> tuple[dict, str]:
    """Build the IVF file of `db`'s saved `which` index; recall vs exact, CPU, RSS, size."""
    from usearch.index import Index
    from nexus.search.embed import HashedNgramEmbedder, WordLlamaEmbedder
    from .mixed import typo
    emb: Any
    if which == "ngram":
        dim, src_path, emb = 128, f"{db}/vectors.concepts.usearch", HashedNgramEmbedder()
    else:
        dim, src_path, emb = 256, f"{db}/semantic.concepts.usearch", WordLlamaEmbedder()
    src = Index(ndim=dim, metric="cos", dtype="i8")
    src.load(src_path)
    keys = np.asarray(src.keys, dtype=np.uint64)
    x = np.asarray(src.get(keys, dtype="f32"), dtype=np.float32).reshape(len(keys), dim)
    del src
    rng = random.Random(1)
    with open(os.path.join(DATA, "n100000", "concepts.jsonl"), encoding="utf-8") as f:
        names = [json.loads(line)["name"] for line in f]
    with open(os.path.join(DATA, "paraphrases.json"), encoding="utf-8") as f:
        paras = [q["query"] for q in json.load(f)["queries"]]
    sets = {"typo": [typo(rng, n) for n in rng.sample(names, 300)], "para": paras}
    eq = getattr(emb, "embed_query", None)
    qs = {s: (np.stack([np.asarray(eq(t), np.float32) for t in ts]) if eq else emb.embed(ts))
          for s, ts in sets.items()}
    xu = _unit(x)
    exact = {s: keys[np.argsort(-(_unit(q) @ xu.T), axis=1)[:, :40]] for s, q in qs.items()}
    path = os.path.join(work, f"{which}.ivf")
    c0, t0 = time.process_time(), time.perf_counter()
    IVFFlat.build(path, keys, x, nlist or None)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    ix = IVFFlat(path)
    sizes = np.diff(ix.starts)
    report: dict = {"which": which, "vectors": len(keys), "nlist": ix.nlist,
                    "build_cpu_s": round(cpu, 2), "build_wall_s": round(wall, 2),
                    "file_mb": round(os.path.getsize(path) / 2**20, 1),
                    "hnsw_file_mb": round(os.path.getsize(src_path) / 2**20, 1),
                    "list_sizes": [int(sizes.min()), int(np.median(sizes)), int(sizes.max())],
                    "nprobe": {}}
    for nprobe in [*nprobes, ix.nlist]:      # (all lists: the ceiling, ties aside)
        row = {}
        for s, q in qs.items():
            for k in (10, 40):
                got = [ix.search(v, k, nprobe)[0] for v in q]
                row[f"{s}@{k}"] = round(float(np.mean(
                    [len(set(g.tolist()) & set(e[:k].tolist())) / k
                     for g, e in zip(got, exact[s])])), 4)
            t = []
            for v in q:
                c = time.thread_time()
                ix.search(v, 40, nprobe)
                t.append(time.thread_time() - c)
            row[f"{s}_cpu_ms"] = round(float(np.median(t)) * 1e3, 3)
        report["nprobe"][nprobe] = row
    qfile = os.path.join(work, f"{which}.q.npy")
    np.save(qfile, qs["typo"])
    for kind, p in (("ivf", path), ("hnsw", src_path)):
        r = subprocess.run([sys.executable, "-m", "bench.ivf", "--probe", kind, p, qfile,
                            str(dim), str(nprobes[-1])], capture_output=True, text=True,
                           check=True)
        report[f"rss_mb_10_searches_{kind}"] = json.loads(r.stdout)
    return report, path


DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
if not os.path.isdir(os.path.join(DATA, "n100000")):
    DATA = "/work/main/bench/data"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ivf")
    ap.add_argument("db", nargs="?")
    ap.add_argument("--which", default="ngram,semantic")
    ap.add_argument("--nprobe", default="4,8,16,32")
    ap.add_argument("--nlist", type=int, default=0)
    ap.add_argument("--row", type=int, default=0, help="nprobe of the SEARCH row (0: none)")
    ap.add_argument("--work", default="/tmp/ivf-bench")
    ap.add_argument("--probe", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.probe:
        kind, path, qfile, dim, nprobe = args.probe
        _probe(kind, path, qfile, int(dim), int(nprobe))
        return 0
    os.makedirs(args.work, exist_ok=True)
    files = {}
    for which in args.which.split(","):
        report, files[which] = _measure(args.db, which, args.work,
                                        [int(v) for v in args.nprobe.split(",")], args.nlist)
        print(json.dumps(report), flush=True)
    if args.row:
        print(json.dumps({"row": _row(args.db, os.path.join(DATA, "n100000"), files,
                                      args.row)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
