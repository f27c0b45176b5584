"""Running the peer harness (`../shared/peers/bench_peers.py`) from `python -m bench`.

The harness is reference material beside the repository, not part of it: it is used only
when its directory exists (`--peers-dir`, default `../shared/peers`) and the peer packages
are importable. It runs as a subprocess with its own timing loop, on the dataset
`bench/workload.py` generated (byte-identical to its gen.py), writing only into our
working directory. Kùzu and Ladybug cannot share a process (both register a pybind11 type
named `Database`), so there are up to two invocations per N:

    networkx,kuzu,oxigraph                                 (whichever are installed)
    networkx,ladybug     + --peer-module bench/nexus_peer.py

networkx is the harness's reference in both: every peer's answers (nexus's included) are
compared with it, parameter by parameter, and the runs' reference digests with each other
and with `bench.reference`. nexus goes into the Ladybug run (the issue's targets are ratios
to Ladybug), or into the other run when Ladybug is not installed.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PEER_MODULES = {"kuzu": "kuzu", "ladybug": "ladybug", "oxigraph": "pyoxigraph"}
KNOWN = tuple(PEER_MODULES)
DEFAULT_DIR_TEXT = "../shared/peers"
DURABLE = {"kuzu": True, "ladybug": True, "oxigraph": False, "networkx": False}


def harness_script(peers_dir: str | None) -> str | None:
    if not peers_dir:
        return None
    path = os.path.join(peers_dir, "bench_peers.py")
    return path if os.path.isfile(path) else None


def installed(peer: str) -> bool:
    """Importable without importing it (kuzu and ladybug must not meet in this process)."""
    return importlib.util.find_spec(PEER_MODULES[peer]) is not None


def select(spec: str, peers_dir: str | None) -> tuple[list[str], list[str]]:
    """(peers to run, notes) for `--peers auto|none|a,b,c`; raises ValueError when an
    explicitly requested peer cannot run."""
    spec = spec.strip().lower()
    if spec == "none":
        return [], ["peers: none requested"]
    script = harness_script(peers_dir)
    if spec == "auto":
        if script is None:
            return [], [f"peers: skipped — no peer harness (bench_peers.py) at "
                        f"{peers_dir or DEFAULT_DIR_TEXT}; nexus's answers were checked "
                        "against bench.reference only, and there are no peer figures (give "
                        "--peers-dir DIR to run Kùzu, Ladybug and Oxigraph beside it)"]
        if importlib.util.find_spec("networkx") is None or importlib.util.find_spec("numpy") is None:
            return [], ["peers: skipped, the harness needs networkx and numpy"]
        chosen = [p for p in KNOWN if installed(p)]
        missing = [p for p in KNOWN if p not in chosen]
        return chosen, ([f"peers: not installed: {', '.join(missing)}"] if missing else [])
    wanted = [p.strip() for p in spec.split(",") if p.strip()]
    unknown = [p for p in wanted if p not in KNOWN]
    if unknown:
        raise ValueError(f"unknown peer(s) {', '.join(unknown)}; known: {', '.join(KNOWN)}")
    if script is None:
        raise ValueError(f"peers {', '.join(wanted)} requested but there is no harness at "
                         f"{peers_dir}")
    absent = [p for p in wanted if not installed(p)]
    if absent:
        raise ValueError(f"peer package(s) not importable: "
                         f"{', '.join(PEER_MODULES[p] for p in absent)}")
    return wanted, []


def plan(peers: list[str], nexus: bool = True) -> list[dict]:
    """The invocations: [{"tag", "peers": [...], "nexus": bool}]. `nexus`: plug nexus into
    one of them (its answers are checked against every peer either way, through
    bench.reference, whose digests are compared with each run's reference)."""
    runs = []
    other = [p for p in peers if p != "ladybug"]
    if other:
        runs.append({"tag": "", "peers": ["networkx"] + other, "nexus": False})
    if "ladybug" in peers:
        runs.append({"tag": "-ladybug", "peers": ["networkx", "ladybug"], "nexus": nexus})
    if nexus and runs and not any(r["nexus"] for r in runs):
        runs[0]["nexus"] = True
    return runs


def run(spec: dict, n: int, data: str, workdir: str, results: str, peers_dir: str,
        options: dict, log=print) -> dict:
    """One harness invocation; returns {"cmd", "returncode", "seconds", "log", "result"}."""
    script = harness_script(peers_dir)
    argv = [sys.executable, script, "--n", str(n), "--data", data,
            "--workdir", os.path.join(workdir, "peers-db"), "--results", results,
            "--peers", ",".join(spec["peers"]), "--reference", "networkx",
            f"--tag={spec['tag']}"]
    if spec["nexus"]:
        argv += ["--peer-module", os.path.join(HERE, "nexus_peer.py")]
    for key, flag in (("budget", "--budget"), ("min_reps", "--min-reps"),
                      ("hard_cap", "--hard-cap"), ("upserts", "--upserts")):
        if options.get(key) is not None:
            argv += [flag, str(options[key])]
    os.makedirs(results, exist_ok=True)
    log_path = os.path.join(results, f"peers-{n}{spec['tag']}.log")
    log("    $ " + " ".join(argv))
    # the nexus plug-in imports `nexus`: this checkout's, as the rest of the run does
    root = os.path.dirname(HERE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    t0 = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(argv, cwd=peers_dir, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=env)
        assert proc.stdout is not None
        tail = False
        for line in proc.stdout:
            out.write(line)
            if line.startswith("## KIP peer benchmark"):
                tail = True                  # the harness's own markdown: in the log only
            if not tail and line.strip():
                log("    | " + line.rstrip())
        rc = proc.wait()
    seconds = time.perf_counter() - t0
    rec = {"cmd": " ".join(argv), "peers": spec["peers"], "nexus": spec["nexus"],
           "returncode": rc, "seconds": round(seconds, 1), "log": log_path, "result": None}
    path = os.path.join(results, f"peers-{n}{spec['tag']}.json")
    if rc == 0 and os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            rec["result"] = json.load(f)
    else:
        log(f"    harness FAILED (exit {rc}); see {log_path}")
    return rec


def mismatches(runs: list[dict], ours: dict[str, list[str]] | None) -> list[str]:
    """Every disagreement: a peer vs the reference within a run, the runs' reference
    digests with each other, and with `ours` (bench.reference's digests)."""
    problems = []
    seen_ref: dict[str, tuple[str, list]] = {}
    for r in runs:
        res = r.get("result")
        if res is None:
            problems.append(f"harness run {r['peers']} failed (exit {r['returncode']}, "
                            f"log {r['log']})")
            continue
        for key, entry in (res.get("verification") or {}).items():
            for peer, status in entry.get("peers", {}).items():
                if status == "n/a":
                    problems.append(f"{key}: {peer} gave no answer (error)")
                elif status != "ok":
                    sample = status.get("mismatches", [])[:2] if isinstance(status, dict) else status
                    problems.append(f"{key}: {peer} differs from {entry.get('reference')}: "
                                    f"{json.dumps(sample)[:400]}")
            digests = entry.get("answer_digests")
            if digests is None:
                continue
            if key in seen_ref and seen_ref[key][1] != digests:
                problems.append(f"{key}: the reference answers of two harness runs differ")
            seen_ref.setdefault(key, (str(r["peers"]), digests))
            if ours is not None and key in ours and ours[key] != digests:
                problems.append(f"{key}: bench.reference differs from the harness reference")
    return problems


def peer_figures(runs: list[dict]) -> dict[str, dict]:
    """{peer: its record from the harness JSON} over all runs (nexus as "nexus (harness)")."""
    out = {}
    for r in runs:
        res = r.get("result") or {}
        for name, rec in res.get("peers", {}).items():
            out["nexus (harness)" if name == "nexus" else name] = rec
    return out


def versions(runs: list[dict]) -> dict:
    out = {}
    for r in runs:
        out.update(((r.get("result") or {}).get("meta") or {}).get("versions") or {})
    return out
