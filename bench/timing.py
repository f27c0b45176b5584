"""Measurement helpers shared by `python -m bench`'s steps: latency statistics, the timed
round-robin loop of the peer harness, RSS and on-disk size."""
from __future__ import annotations

import os
import time


def percentile(values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, as the harness uses)."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def stats_ms(ns: list[int]) -> dict:
    """Summary of nanosecond samples, in milliseconds (the harness's `stats_ms` fields)."""
    ms = [x / 1e6 for x in ns]
    if not ms:
        return {"reps": 0}
    return {"median_ms": round(percentile(ms, 50), 4), "p95_ms": round(percentile(ms, 95), 4),
            "mean_ms": round(sum(ms) / len(ms), 4), "min_ms": round(min(ms), 4),
            "max_ms": round(max(ms), 4), "reps": len(ms)}


def time_rounds(fn, params: list[dict], budget_s: float, min_reps: int, max_reps: int,
                hard_cap_s: float) -> tuple[list[int], list[list[int]]]:
    """Whole rounds over `params` (every parameter equally weighted) until `budget_s` and
    `min_reps` calls, or `max_reps` calls, or `hard_cap_s` — `bench_peers.time_query`."""
    times: list[int] = []
    per_param: list[list[int]] = [[] for _ in params]
    pc = time.perf_counter_ns
    start = time.perf_counter()
    while True:
        for i, p in enumerate(params):
            t0 = pc()
            fn(**p)
            dt = pc() - t0
            times.append(dt)
            per_param[i].append(dt)
        elapsed = time.perf_counter() - start
        if len(times) >= max_reps or (len(times) >= min_reps and elapsed >= budget_s) \
                or elapsed >= hard_cap_s:
            return times, per_param


def rss_mb() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    try:                                            # not Linux: peak RSS, the best we have
        import resource
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / (1024 * 1024 if os.uname().sysname == "Darwin" else 1024)
    except Exception:  # noqa: BLE001
        return float("nan")


def rss_parts() -> dict[str, float]:
    """The resident size split as /proc/self/status splits it, in MB: `rss` (VmRSS, what
    the issue's memory targets name) = `anon` (RssAnon: the process's own memory — Python
    objects, numpy arrays, in-memory indexes, models, malloc's free lists) + `file` (RssFile:
    pages of mapped files — libraries, the LMDB map, the memory-mapped vector indexes; page
    cache the kernel can drop and processes mapping the same file share) + RssShmem.
    Not Linux: {"rss": peak RSS} only."""
    out: dict[str, float] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                name, _, value = line.partition(":")
                key = {"VmRSS": "rss", "RssAnon": "anon", "RssFile": "file"}.get(name)
                if key:
                    out[key] = round(int(value.split()[0]) / 1024, 1)
    except OSError:
        pass
    if "rss" not in out:
        out["rss"] = round(rss_mb(), 1)
    return out


def peak_rss_mb() -> float:
    try:
        import resource
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / (1024 * 1024 if os.uname().sysname == "Darwin" else 1024)
    except Exception:  # noqa: BLE001
        return float("nan")


def disk_mb(path: str) -> float:
    """Allocated size of a directory tree (LMDB's map file is sparse: blocks, not length)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                st = os.stat(os.path.join(root, name))
            except OSError:
                continue
            total += getattr(st, "st_blocks", 0) * 512 or st.st_size
    return total / 2**20
