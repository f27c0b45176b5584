"""The `## Summary` section of bench/RESULTS.md, from the results of `python -m bench`.

Only that section is rewritten; the other sections of the file (each benchmark script's
own) are kept as they are. The rows and the targets (issue 8, N=100k) are defined here.
"""
from __future__ import annotations

import os
import statistics

SECTION = "## Summary"
TARGET_N = 100_000
HUBS = ("Headache", "Fever")
# Where a row has a target: absolute bound, and the bound on the ratio to Ladybug.
TARGETS = {
    "Q1": ("≤ 0.05 ms, ≤ 1.0× Ladybug", 0.05, 1.0),
    "Q2o": ("≤ 0.2 ms, ≤ 1.0× Ladybug", 0.2, 1.0),
    "Q3": ("≤ 2 ms, ≤ 1.5× Ladybug", 2.0, 1.5),
    "Q4": ("≤ 0.5 ms, ≤ 1.0× Ladybug", 0.5, 1.0),
    "Q5": ("≤ 10 ms, ≤ 4× Ladybug", 10.0, 4.0),
    "Q6": ("≤ 150 ms, ≤ 1.0× Ladybug", 150.0, 1.0),
    "W1": ("≥ 150k items/s", 150_000, None),
    "W2": ("≤ 1 ms, ≤ 0.5× Ladybug", 1.0, 0.5),
    "SEARCH": ("≤ 5 ms", 5.0, None),
    "RSS": ("≤ 300 MB", 300.0, None),
}
QLABEL = {"Q1": "Q1 point lookup", "Q2": "Q2 one hop, all 8 symptoms",
          "Q2o": "Q2 one hop, 6 ordinary symptoms", "Q2h": "Q2 one hop, 2 hub symptoms",
          "Q3": "Q3 two hops + filter + NOT, all", "Q3o": "Q3, 6 ordinary symptoms",
          "Q3h": "Q3, 2 hub symptoms", "Q4": "Q4 `{1,5}` path", "Q5": "Q5 group-by count",
          "Q6": "Q6 OPTIONAL (all drugs)"}
EXCLUDED_FROM_BEST = ("networkx", "nexus (harness)")   # the reference floor, and ourselves


def fmt(v) -> str:
    if v is None:
        return "–"
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def fmt_ratio(r) -> str:
    if r is None:
        return "–"
    return f"{r:.2f}×" if r < 10 else f"{r:.0f}×"


def split_median(per_param: list[dict], hub: bool) -> float | None:
    """Median of the per-parameter medians of the hub (or ordinary) symptoms."""
    vals = [p["median_ms"] for p in per_param
            if (p["param"].get("symptom") in HUBS) == hub and p.get("median_ms") is not None]
    return statistics.median(vals) if vals else None


def peer_query_median(rec: dict, key: str) -> float | None:
    q = key[:2]
    st = (rec.get("queries") or {}).get(q)
    if not st or "median_ms" not in st:
        return None
    if len(key) == 3:
        if "per_param" not in st:
            return None
        return split_median(st["per_param"], hub=key.endswith("h"))
    return st["median_ms"]


def _best(peers: dict, value, lower_is_better=True, only=None):
    best = None
    for name, rec in peers.items():
        if name in EXCLUDED_FROM_BEST or (only is not None and not only(name)):
            continue
        v = value(rec)
        if v is None:
            continue
        if best is None or (v < best[1] if lower_is_better else v > best[1]):
            best = (name, v)
    return best


def peer_figures(run: dict) -> dict:
    from .harness import peer_figures as figures
    return figures(run.get("harness_runs") or [])


def rows(run: dict) -> list[dict]:
    """The summary rows of one N: label, nexus cells, best peer, ratios, target, met."""
    from .harness import DURABLE
    peers = peer_figures(run)
    lad = peers.get("ladybug")
    out = []

    def add(key, label, nexus_median, nexus_p95, best, lad_value, target_key=None,
            unit="ms", ratio_inverse=False, note="", **extra):
        def ratio(other):
            if nexus_median is None or other in (None, 0):
                return None
            return (other / nexus_median) if ratio_inverse else (nexus_median / other)
        out.append({"key": key, "label": label, "unit": unit, "nexus": nexus_median,
                    "nexus_p95": nexus_p95, "best": best,
                    "ratio_best": ratio(best[1]) if best else None,
                    "ratio_ladybug": ratio(lad_value), "target": target_key, "note": note,
                    **extra})

    qs = run["queries"]
    for key in ("Q1", "Q2", "Q2o", "Q2h", "Q3", "Q3o", "Q3h", "Q4", "Q5", "Q6"):
        st = qs.get(key[:2])
        if st is None:
            continue
        if len(key) == 3:
            part = st["hub" if key.endswith("h") else "ordinary"]
            med, p95 = part["median_ms"], part["p95_ms"]
        else:
            med, p95 = st["median_ms"], st["p95_ms"]
        best = _best(peers, lambda r, k=key: peer_query_median(r, k))
        add(key, QLABEL[key], med, p95, best,
            peer_query_median(lad, key) if lad else None,
            target_key=key if key in TARGETS else None)

    def w1_best():
        return _best(peers, lambda r: (r.get("W1") or {}).get("load_s"))

    for key, label, rec in (("W1", "W1 bulk load (`bulk_import`, SEARCH indexed)",
                             run.get("w1_bulk")),
                            ("W1s", "W1 bulk load, store only (SEARCH detached)",
                             run.get("w1_bulk_store")),
                            ("W1u", "W1 KIP UPSERT batches (SEARCH "
                             + ((run.get("w1_upsert") or {}).get("search") or "?") + ")",
                             run.get("w1_upsert"))):
        if not rec:
            continue
        best = w1_best()
        lad_s = (lad.get("W1") or {}).get("load_s") if lad else None
        add(key, label, rec["load_s"], None, best, lad_s, target_key="W1", unit="s",
            note=f"{rec['items_per_s']:,} items/s", items_per_s=rec["items_per_s"])
    for key, label, rec in (("W2", "W2 durable upsert (SEARCH indexed)", run.get("w2")),
                            ("W2s", "W2 durable upsert, store only (SEARCH detached)",
                             run.get("w2_store"))):
        if not rec:
            continue
        best = _best(peers, lambda r: (r.get("W2") or {}).get("median_ms"),
                     only=lambda name: DURABLE.get(name, False))
        add(key, label, rec["median_ms"], rec["p95_ms"], best,
            (lad.get("W2") or {}).get("median_ms") if lad else None, target_key="W2")
    if run.get("search"):
        s = run["search"]
        add("SEARCH", f"SEARCH, {s['queries']} names (½ with a typo)", s["median_ms"],
            s["p95_ms"], None, None, target_key="SEARCH",
            note=f"hit@10 {s['hit_at_10']:.2f}")
    if run.get("mixed"):
        m = run["mixed"]
        st = m["steps"]
        add("MIXED", "mixed agent loop, one iteration (4 requests)",
            m["iteration"]["median_ms"], m["iteration"]["p95_ms"], None, None,
            note=f"{m['iterations_per_s']:.0f} it/s; search {fmt(st['search']['median_ms'])}, "
                 f"expand {fmt(st['expand']['median_ms'])}, remember "
                 f"{fmt(st['remember']['median_ms'])}, recall {fmt(st['recall']['median_ms'])} ms")
    w1 = run.get("w1_bulk") or {}
    if w1:
        add("RSS", "RSS after load, MB (the loading process without the parsed dataset)",
            w1["rss_engine_mb"], None, None, None, target_key="RSS", unit="MB",
            note=f"start-up {w1['rss_base_mb']:.0f} + growth over the load "
                 f"{w1['rss_delta_mb']:.0f}" +
                 (f"; a fresh process serving the loaded database: "
                  f"{run['probe']['rss_serving_mb']:.0f} MB" if run.get("probe") else ""))
        best = _best(peers, lambda r: (r.get("W1") or {}).get("rss_delta_mb"))
        add("RSSD", "RSS growth over the load, MB", w1["rss_delta_mb"], None, best,
            (lad.get("W1") or {}).get("rss_delta_mb") if lad else None, unit="MB")
        best = _best(peers, lambda r: (r.get("W1") or {}).get("disk_mb") or None)
        add("DISK", "disk size after load, MB", w1["disk_mb"], None, best,
            (lad.get("W1") or {}).get("disk_mb") if lad else None, unit="MB")
    return out


def met(row: dict, n: int) -> str:
    if row["target"] is None or n != TARGET_N:
        return ""
    _text, bound, lad_bound = TARGETS[row["target"]]
    v = row["nexus"]
    if v is None:
        return "–"
    if row["target"] == "W1":
        ok = row.get("items_per_s", 0) >= bound
    else:
        ok = v <= bound
    parts = ["yes" if ok else "**no**"]
    if lad_bound is not None:
        r = row["ratio_ladybug"]
        parts.append("–" if r is None else ("yes" if r <= lad_bound else "**no**"))
    return " / ".join(parts)


def summary_table(run: dict) -> list[str]:
    n = run["n"]
    with_targets = n == TARGET_N
    head = ("| | nexus median / p95 | best peer: median | nexus / best | nexus / Ladybug |"
            + (" target (N=100k) | met? (abs / ratio) |" if with_targets else "") + " notes |")
    lines = [head, "|---|---|---|---|---|" + ("---|---|" if with_targets else "") + "---|"]
    for r in rows(run):
        unit = r["unit"]
        if unit == "s":
            cell = f"{fmt(r['nexus'])} s"
        elif unit == "MB":
            cell = f"{fmt(r['nexus'])} MB"
        else:
            cell = f"{fmt(r['nexus'])} / {fmt(r['nexus_p95'])} ms"
        best = "–" if not r["best"] else f"{r['best'][0]}: {fmt(r['best'][1])}" + (
            " s" if unit == "s" else " MB" if unit == "MB" else " ms")
        line = (f"| {r['label']} | {cell} | {best} | {fmt_ratio(r['ratio_best'])} | "
                f"{fmt_ratio(r['ratio_ladybug'])} |")
        if with_targets:
            line += f" {TARGETS[r['target']][0] if r['target'] else ''} | {met(r, n)} |"
        lines.append(line + f" {r['note']} |")
    return lines


def side_by_side(run: dict) -> list[str]:
    peers = peer_figures(run)
    if not peers:
        return []
    names = ["nexus"] + [p for p in ("nexus (harness)", "ladybug", "kuzu", "oxigraph",
                                     "networkx") if p in peers]
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for q in ("Q1", "Q2", "Q3", "Q4", "Q5", "Q6"):
        cells = []
        for name in names:
            st = run["queries"].get(q) if name == "nexus" else (peers[name].get("queries") or {}).get(q)
            cells.append(f"{fmt(st['median_ms'])} / {fmt(st['p95_ms'])}"
                         if st and "median_ms" in st else ("error" if st else "–"))
        lines.append(f"| {q} ms | " + " | ".join(cells) + " |")
    w1 = [run.get("w1_bulk") if n == "nexus" else peers[n].get("W1") for n in names]
    lines.append("| W1 load s (items/s) | " + " | ".join(
        f"{x['load_s']:.2f} ({x['items_per_s'] / 1000:.0f}k)" if x and "load_s" in x else "–"
        for x in w1) + " |")
    w2 = [run.get("w2") if n == "nexus" else peers[n].get("W2") for n in names]
    lines.append("| W2 ms | " + " | ".join(
        f"{fmt(x['median_ms'])} / {fmt(x['p95_ms'])}" if x and "median_ms" in x else "–"
        for x in w2) + " |")
    lines.append("| RSS Δ / disk MB after load | " + " | ".join(
        f"{x.get('rss_delta_mb', '–')} / {x.get('disk_mb', '–')}" if x else "–" for x in w1)
        + " |")
    return lines


def section(result: dict) -> str:
    m = result["meta"]
    mach = m["machine"]
    L = [SECTION, "",
         f"Generated by `{m['command']}` on {m['date']} ({m['total_s']:.0f} s; commit "
         f"{m.get('git') or '?'}, engine sources {m.get('engine_sources', '?')}). Machine: {mach['cpu']}, {mach['cores']} cores, "
         f"{mach['memory_gb']} GiB, {mach['platform']}; load average {mach['loadavg_start']} "
         f"at the start, {mach['loadavg_end']} at the end (a shared VM: expect ±50% between "
         "runs). Versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()) + ".",
         "",
         "nexus is measured in this process on LMDB on disk, durable (fsync per commit), with "
         "its SEARCH index attached unless a row says otherwise; every query is the peers "
         "README's KQL through `execute_kip` (parse and plan caches warm: one warm-up round, "
         "then timed rounds over all parameters). Latencies in ms, median / p95 over all "
         "calls; \"ordinary\"/\"hub\" rows: the median of those parameters' medians (the "
         "same estimator for nexus and the peers). Ratios are nexus's figure over the "
         "peer's (time, or memory): below 1 nexus is faster / smaller. Best peer: among "
         "Kùzu, Ladybug and Oxigraph as the harness measured them in this invocation "
         "(W2: durable peers only — Oxigraph does not fsync per commit). W1 = seconds from "
         "the parsed JSONL to a committed, queryable database (open, the type definitions, "
         "the import), in a fresh process; items = concepts + propositions. The peers' W1 "
         "is their bulk path (CSV + COPY, N-Triples bulk load) and builds no text or vector "
         "index: compare it with the store-only row. RSS after load = the loading process "
         "minus the parsed dataset it holds (start-up + growth over the load). Full "
         "figures, per parameter: `" + m["out"] + "`.", ""]
    for n in sorted(result["runs"], key=int, reverse=True):
        run = result["runs"][n]
        ds = run["dataset"]
        L += [f"### N = {int(n):,} ({ds['concepts']:,} concepts, {ds['propositions']:,} "
              "propositions)", ""]
        L += summary_table(run)
        L.append("")
        v = run["verification"]
        L += ["Answers: " + v["summary"], ""]
        if run.get("harness_runs"):
            for h in run["harness_runs"]:
                L.append(f"- harness `{','.join(h['peers'])}{' + nexus' if h['nexus'] else ''}`"
                         f": exit {h['returncode']}, {h['seconds']:.0f} s")
            L.append("")
        sbs = side_by_side(run)
        if sbs:
            L += ["Side by side (median / p95 ms; \"nexus\" = this process, \"nexus (harness)\" "
                  "= the plug-in inside the harness's own loop):", ""] + sbs + [""]
    for note in result.get("notes", []):
        L.append(f"- {note}")
    if result.get("problems"):
        L += ["", "**Problems in this run:**", ""] + [f"- {p}" for p in result["problems"]]
    return "\n".join(L).rstrip() + "\n"


def write(path: str, text: str) -> None:
    """Replace `## Summary` (or put it right after the title), keep every other section."""
    try:
        with open(path, encoding="utf-8") as f:
            current = f.read()
    except FileNotFoundError:
        current = "# nexus benchmark results\n"
    start = current.find("\n" + SECTION + "\n")
    if start >= 0:
        start += 1
        end = current.find("\n## ", start + len(SECTION))
        new = current[:start] + text + ("\n" + current[end + 1:] if end >= 0 else "")
    else:
        first = current.find("\n## ")
        if first < 0:
            new = current.rstrip("\n") + "\n\n" + text
        else:
            new = current[:first + 1] + text + "\n" + current[first + 1:]
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(new.rstrip("\n") + "\n")
    os.replace(tmp, path)
