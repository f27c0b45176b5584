"""The `## Summary` section of bench/RESULTS.md, from the results of `python -m bench`.

Only that section is rewritten (`write`); the other sections of the file belong to the
other benchmark scripts and are kept byte for byte. The rows, their units and the targets
(issue 8, defined at N=100k) are here. `section(result)` renders from the full result or
from the compact JSON that `python -m bench` commits (`compact`): both give the same text.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from .results_md import replace_section

SECTION = "## Summary"
TARGET_N = 100_000
HUBS = ("Headache", "Fever")
EXCLUDED_FROM_BEST = ("networkx", "nexus (harness)")   # the reference floor, and ourselves


@dataclass(frozen=True)
class Target:
    text: str                       # as the issue states it
    bound: float | None             # in the row's unit (None: reported only)
    ladybug: float | None = None    # bound on nexus / Ladybug (time ratio)


# Keyed by row; values in the unit the row is shown in (Q1 in µs, W1 in items/s).
TARGETS = {
    "Q1": Target("≤ 50 µs, ≤ 1.0× Ladybug", 50.0, 1.0),
    "Q2": Target("≤ 0.2 ms, ≤ 1.0× Ladybug", 0.2, 1.0),
    "Q3": Target("≤ 2 ms, ≤ 1.5× Ladybug", 2.0, 1.5),
    "Q4": Target("≤ 0.5 ms, ≤ 1.0× Ladybug", 0.5, 1.0),
    "Q5": Target("≤ 10 ms, ≤ 4× Ladybug", 10.0, 4.0),
    "Q6": Target("≤ 150 ms, ≤ 1.0× Ladybug", 150.0, 1.0),
    "W1": Target("≥ 150k items/s", 150_000.0),
    "W2": Target("≤ 1 ms, ≤ 0.5× Ladybug", 1.0, 0.5),
    "SEARCH": Target("≤ 5 ms", 5.0),
    "RSS": Target("≤ 300 MB", 300.0),
    "RSSF": Target("≤ 150 MB", 150.0),
    "DISK": Target("reported", None),
}
QLABEL = {"Q1": "Q1 point lookup", "Q2": "Q2 one hop (ordinary symptom)",
          "Q3": "Q3 two hops + filter + NOT", "Q4": "Q4 `{1,5}` path",
          "Q5": "Q5 group-by count", "Q6": "Q6 OPTIONAL (every drug)"}
# unit: (scale from the stored figure, higher is better?)
UNITS = {"µs": (1000.0, False), "ms": (1.0, False), "s": (1.0, False),
         "items/s": (1.0, True), "MB": (1.0, False)}


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


def peer_query_median(rec: dict | None, key: str) -> float | None:
    """A peer's median in ms; key "Q2o"/"Q2h": the ordinary / hub symptoms' median."""
    if not rec:
        return None
    st = (rec.get("queries") or {}).get(key[:2])
    if not st or "median_ms" not in st:
        return None
    if len(key) == 3:
        part = "hub" if key.endswith("h") else "ordinary"
        if "per_param" not in st:           # the compact JSON keeps the split only
            return (st.get(part) or {}).get("median_ms")
        return split_median(st["per_param"], hub=key.endswith("h"))
    return st["median_ms"]


def _best(peers: dict, value, higher_is_better=False, only=None):
    best = None
    for name, rec in peers.items():
        if name in EXCLUDED_FROM_BEST or (only is not None and not only(name)):
            continue
        v = value(rec)
        if v is None:
            continue
        if best is None or (v > best[1] if higher_is_better else v < best[1]):
            best = (name, v)
    return best


def peer_figures(run: dict) -> dict:
    from .harness import peer_figures as figures
    return figures(run.get("harness_runs") or [])


def rows(run: dict) -> list[dict]:
    """The summary rows of one N. Every figure is in the row's unit; `ratio_best` and
    `ratio_ladybug` are nexus's figure over the peer's in that unit."""
    from .harness import DURABLE
    peers = peer_figures(run)
    lad = peers.get("ladybug")
    out = []

    def add(key, label, unit, nexus, p95=None, best=None, ladybug=None, target=None,
            note=""):
        scale, _higher = UNITS[unit]
        conv = (lambda v: None if v is None else v * scale)
        nexus, p95, ladybug = conv(nexus), conv(p95), conv(ladybug)
        best = (best[0], conv(best[1])) if best else None

        def ratio(other):
            if nexus is None or not other:
                return None
            return nexus / other
        out.append({"key": key, "label": label, "unit": unit, "nexus": nexus, "p95": p95,
                    "best": best, "ratio_best": ratio(best[1]) if best else None,
                    "ladybug": ladybug, "ratio_ladybug": ratio(ladybug),
                    "target": target, "note": note})

    qs = run.get("queries") or {}
    for q in ("Q1", "Q2", "Q3", "Q4", "Q5", "Q6"):
        st = qs.get(q)
        if not st:
            continue
        note = ""
        if q == "Q2":                           # the target is for an ordinary symptom
            part = st["ordinary"]
            med, p95, pkey = part["median_ms"], part["p95_ms"], "Q2o"
            note = (f"all 8 symptoms {fmt(st['median_ms'])} / {fmt(st['p95_ms'])} ms; hubs "
                    f"(Headache, Fever) {fmt(st['hub']['median_ms'])} ms, Ladybug "
                    f"{fmt(peer_query_median(lad, 'Q2h'))} ms")
        else:
            med, p95, pkey = st["median_ms"], st["p95_ms"], q
            if q == "Q3":
                note = (f"ordinary symptoms {fmt(st['ordinary']['median_ms'])} ms (Ladybug "
                        f"{fmt(peer_query_median(lad, 'Q3o'))}); hubs "
                        f"{fmt(st['hub']['median_ms'])} ms (Ladybug "
                        f"{fmt(peer_query_median(lad, 'Q3h'))})")
            elif q in ("Q5", "Q6"):
                note = f"{st.get('rows_avg', 0):,.0f} rows"
        add(q, QLABEL[q], "µs" if q == "Q1" else "ms", med, p95,
            _best(peers, lambda r, k=pkey: peer_query_median(r, k)),
            peer_query_median(lad, pkey), target=q, note=note)

    def w1_peer(r):
        return (r.get("W1") or {}).get("items_per_s") or None

    for key, label, rec in (("W1", "W1 bulk load (`bulk_import`, SEARCH indexed)",
                             run.get("w1_bulk")),
                            ("W1s", "W1 bulk load, store only (SEARCH detached)",
                             run.get("w1_bulk_store")),
                            ("W1u", "W1 KIP UPSERT batches, store only (SEARCH detached)"
                             if (run.get("w1_upsert") or {}).get("search") == "detached"
                             else "W1 KIP UPSERT batches (SEARCH indexed)",
                             run.get("w1_upsert"))):
        if not rec:
            continue
        note = f"{rec['load_s']:.2f} s for {rec['items']:,} items"
        if rec.get("search") == "attached" and rec.get("close_s") is not None:
            # Since issue 18 a bulk load builds its vectors before it returns (in W1).
            note += ("; vectors built within W1 (nothing left to catch up)"
                     if rec["close_s"] < 1.0 else
                     f"; the background vector index caught up {rec['close_s']:.1f} s later "
                     "(not in W1: names and words are searchable at once)")
        if key == "W1u":
            note += f" ({rec.get('commands', '?')} commands of {rec.get('batch', '?')} blocks)"
        add(key, label, "items/s", rec["items_per_s"], None,
            _best(peers, w1_peer, higher_is_better=True), w1_peer(lad) if lad else None,
            target="W1", note=note)
    w2 = run.get("w2")
    if w2:
        store = run.get("w2_store")
        ox = (peers.get("oxigraph") or {}).get("W2") or {}
        note = "; ".join(x for x in (
            f"store only (SEARCH detached) {fmt(store['median_ms'])} / "
            f"{fmt(store['p95_ms'])} ms" if store else "",
            f"Oxigraph (no fsync per commit) {fmt(ox['median_ms'])} ms"
            if "median_ms" in ox else "") if x)
        add("W2", "W2 durable upsert (1 concept + 2 links, fsync)", "ms", w2["median_ms"],
            w2["p95_ms"],
            _best(peers, lambda r: (r.get("W2") or {}).get("median_ms"),
                  only=lambda name: DURABLE.get(name, False)),
            ((lad.get("W2") or {}).get("median_ms")) if lad else None, target="W2", note=note)
    if run.get("search"):
        s = run["search"]
        add("SEARCH", "SEARCH (`SEARCH CONCEPT … LIMIT 10`)", "ms", s["median_ms"],
            s["p95_ms"], target="SEARCH",
            note=f"{s['queries']} names × {s['passes']}, half with a typo; hit@10 "
                 f"{s['hit_at_10']:.2f}")
    if run.get("mixed"):
        m = run["mixed"]
        st = m["steps"]
        add("MIXED", "mixed agent loop (search, expand, remember, recall)", "ms",
            m["iteration"]["median_ms"], m["iteration"]["p95_ms"],
            note=f"per iteration of 4 requests; {m['iterations_per_s']:.0f} iterations/s; "
                 f"steps (median ms): search {fmt(st['search']['median_ms'])}, expand "
                 f"{fmt(st['expand']['median_ms'])}, remember (durable) "
                 f"{fmt(st['remember']['median_ms'])}, recall {fmt(st['recall']['median_ms'])}")
    w1 = run.get("w1_bulk") or {}
    if w1:
        def peer_w1(field):
            return lambda r: (r.get("W1") or {}).get(field) or None
        probe = run.get("probe")
        add("RSS", "RSS after loading (the loading process)", "MB", w1["rss_engine_mb"],
            target="RSS", note=_rss_load_note(w1))
        if probe:
            add("RSSF", "RSS of a fresh serving process", "MB", probe["rss_serving_mb"],
                target="RSSF", note=_rss_probe_note(probe))
        add("RSSD", "RSS growth over the load", "MB", w1["rss_delta_mb"],
            best=_best(peers, peer_w1("rss_delta_mb")),
            ladybug=peer_w1("rss_delta_mb")(lad) if lad else None,
            note="what the peers report (their load's RSS growth)")
        add("DISK", "disk size after loading", "MB", w1["disk_mb"],
            best=_best(peers, peer_w1("disk_mb")),
            ladybug=peer_w1("disk_mb")(lad) if lad else None, target="DISK",
            note="nexus: LMDB + SEARCH index files (allocated blocks)")
    return out


def _split(rec: dict, prefix: str) -> str:
    """"anon A + file F" of a phase, when the run recorded the split (older runs did not)."""
    anon, file = rec.get(f"{prefix}anon_mb"), rec.get(f"{prefix}file_mb")
    return f" (anon {anon:.0f} + file {file:.0f})" if anon is not None and file is not None \
        else ""


def _rss_load_note(w1: dict) -> str:
    return (f"VmRSS when the load returned, without the parsed dataset: start-up "
            f"{w1['rss_base_mb']:.0f} + growth over the load {w1['rss_delta_mb']:.0f}"
            + _split(w1, "rss_engine_") + "; anon = own memory, file = mapped file pages "
            "(LMDB, vector indexes, libraries: shared page cache)")


def _rss_probe_note(probe: dict) -> str:
    if "open_rss_mb" not in probe:          # runs before the phases were recorded
        return "after every Q1–Q6 parameter once and 10 SEARCHes"
    return (f"VmRSS after every Q1–Q6 parameter once and 10 SEARCHes{_split(probe, 'searches_')}"
            f"; at open, before any query {probe['open_rss_mb']:.0f}{_split(probe, 'open_')}"
            f"; after Q1–Q6 {probe['queries_rss_mb']:.0f}{_split(probe, 'queries_')}")


def met(row: dict) -> str:
    t = TARGETS.get(row["target"] or "")
    if t is None or t.bound is None or row["nexus"] is None:
        return ""
    higher = UNITS[row["unit"]][1]
    ok = row["nexus"] >= t.bound if higher else row["nexus"] <= t.bound
    parts = ["yes" if ok else "**no**"]
    if t.ladybug is not None:
        r = row["ratio_ladybug"]
        parts.append("–" if r is None else ("yes" if r <= t.ladybug else "**no**"))
    return " / ".join(parts)


def summary_table(run: dict) -> list[str]:
    n = int(run["n"])
    exact = n == TARGET_N
    lines = ["| item | unit | target (N=100k) | nexus median | nexus p95 | best peer: its figure | "
             "nexus / best peer | nexus / Ladybug | " + ("met? (abs / Ladybug)" if exact else
                                                        "met? (indicative at this N)")
             + " | notes |",
             "|---|---|---|---:|---:|---|---:|---:|---|---|"]
    for r in rows(run):
        unit = r["unit"]
        arrow = "↑" if UNITS[unit][1] else "↓"
        t = TARGETS.get(r["target"] or "")
        best = "–" if not r["best"] else f"{r['best'][0]}: {fmt(r['best'][1])}"
        m = met(r)
        if m and not exact:
            m = f"({m})"
        lines.append(f"| {r['label']} | {unit} {arrow} | {t.text if t else ''} | "
                     f"{fmt(r['nexus'])} | {fmt(r['p95'])} | {best} | "
                     f"{fmt_ratio(r['ratio_best'])} | {fmt_ratio(r['ratio_ladybug'])} | {m} | "
                     f"{r['note']} |")
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
            st = (run.get("queries") or {}).get(q) if name == "nexus" else \
                (peers[name].get("queries") or {}).get(q)
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
    versions = dict(m.get("versions") or {})
    for k, v in (m.get("harness_versions") or {}).items():
        versions.setdefault(k, v)
    L = [SECTION, "",
         f"Command: `{m['command']}` — {m['date']}, {m['total_s'] / 60:.0f} min; commit "
         f"{m.get('git') or '?'} (engine sources {m.get('engine_sources', '?')}).",
         "",
         f"Machine: {mach['cpu']}, {mach['cores']} cores, {mach['memory_gb']} GiB, "
         f"{mach['platform']}; load average {mach['loadavg_start']} at the start, "
         f"{mach.get('loadavg_end', '?')} at the end (a shared VM: figures move by up to ±50% "
         "between runs; compare within one run).",
         "",
         "Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".",
         "",
         "How to read it. One row per measured item; the unit column says which way is "
         "better (↓ lower, ↑ higher). Ratios are nexus's figure over the peer's **in the "
         "row's unit**: on ↓ rows (latency, memory, disk) below 1× means nexus is better; on "
         "↑ rows (W1 throughput, items/s) above 1× means nexus is better. Best peer: the "
         "best of Kùzu, Ladybug and Oxigraph as the peer harness measured them in this "
         "invocation (W2: durable peers only — Oxigraph does not fsync per commit). The "
         "targets (issue 8) are for N=100k; \"met?\" gives the absolute bound, then the "
         "bound on the ratio to Ladybug.",
         "",
         "nexus is measured in this process on LMDB on disk, durable (fsync per commit), its "
         "SEARCH index attached unless a row says otherwise; queries are the peers README's "
         "KQL through `execute_kip` (one warm-up round whose answers are checked, then timed "
         "rounds over all parameters, as the harness does). Median / p95 over all calls; Q2 "
         "is the median of the 6 ordinary symptoms' medians (the same estimator for the "
         "peers). W1 = from the parsed JSONL to a committed, queryable database (open, type "
         "definitions, import) in a fresh process; items = concepts + propositions; the "
         "peers' bulk paths (CSV + COPY, N-Triples) build no text or vector index, so the "
         "store-only row is the like-for-like one. Per-parameter figures: `"
         + m.get("full_out", m["out"]) + "` (compact: `" + m["out"] + "`).", ""]
    for n in sorted(result["runs"], key=int, reverse=True):
        run = result["runs"][n]
        ds = run["dataset"]
        L += [f"### N = {int(n):,} ({ds['concepts']:,} concepts, {ds['propositions']:,} "
              f"propositions; {run.get('seconds', 0) / 60:.0f} min)", ""]
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
    replace_section(path, SECTION, text, first=True)


# --- the compact JSON (committed for tracking) ---------------------------------------------
QUERY_FIELDS = ("median_ms", "p95_ms", "reps", "rows_avg", "warmup_round_ms", "ordinary",
                "hub")


def _query_stats(st: dict, keep_per_param: bool) -> dict:
    if not isinstance(st, dict) or "median_ms" not in st:
        return st
    out = {k: st[k] for k in QUERY_FIELDS if k in st}
    if keep_per_param and "per_param" in st:
        out["per_param"] = [{"param": p["param"], "median_ms": p.get("median_ms")}
                            for p in st["per_param"]]
    return out


def _peer_query_stats(q: str, st: dict) -> dict:
    """A peer's query figures; for Q2/Q3 the ordinary/hub split instead of per_param (the
    same figures `peer_query_median` computes from per_param)."""
    out = _query_stats(st, False)
    if q in ("Q2", "Q3") and isinstance(st, dict) and "per_param" in st:
        for part, hub in (("ordinary", False), ("hub", True)):
            out[part] = {"median_ms": split_median(st["per_param"], hub)}
    return out


def compact(result: dict) -> dict:
    """`result` without what only a diagnosis needs (per-call times, per-parameter figures
    but those of Q2/Q3, answer digests, the harness's query texts and parameters): a few
    tens of KB that `section` renders exactly as it renders the full result."""
    out = {"meta": result["meta"], "notes": result.get("notes", []),
           "problems": result.get("problems", []), "runs": {}}
    for n, run in result["runs"].items():
        r = dict(run)
        r["queries"] = {q: _query_stats(st, q in ("Q2", "Q3"))
                        for q, st in (run.get("queries") or {}).items()}
        for key in ("w2", "w2_store"):
            if isinstance(run.get(key), dict):
                r[key] = {k: v for k, v in run[key].items() if k != "times_ms"}
        if isinstance(run.get("verification"), dict):
            r["verification"] = {k: v for k, v in run["verification"].items()
                                 if k != "reference_digests"}
        if isinstance(run.get("mixed"), dict):
            r["mixed"] = {k: v for k, v in run["mixed"].items() if k != "commands"}
        runs = []
        for h in run.get("harness_runs") or []:
            res = h.get("result")
            small = None
            if res is not None:
                small = {"meta": {k: res.get("meta", {}).get(k)
                                  for k in ("versions", "total_s", "budget_s", "storage")},
                         "peers": {}, "verification": {
                             k: {"status": v.get("status"), "reference": v.get("reference"),
                                 "peers": {p: s if s in ("ok", "n/a") else "MISMATCH"
                                           for p, s in v.get("peers", {}).items()}}
                             for k, v in (res.get("verification") or {}).items()}}
                for name, rec in (res.get("peers") or {}).items():
                    w2 = rec.get("W2")
                    small["peers"][name] = {
                        "W1": rec.get("W1"),
                        "W2": {k: w2[k] for k in ("median_ms", "p95_ms", "reps", "error")
                               if k in w2} if isinstance(w2, dict) else w2,
                        "queries": {q: _peer_query_stats(q, st)
                                    for q, st in (rec.get("queries") or {}).items()}}
            runs.append({**{k: v for k, v in h.items() if k != "result"}, "result": small})
        r["harness_runs"] = runs
        out["runs"][n] = r
    return out
