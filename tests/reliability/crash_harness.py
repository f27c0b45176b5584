"""Crash safety under SIGKILL: a writer process runs mixed KML (small and large UPSERTs,
DELETE cascades, batches; see `crash_ops`) against an LMDB database and is SIGKILLed at
random moments; after every kill the database is reopened and checked.

After each reopen:
* the crash-test part of the graph equals the model after exactly `q` ops, with
  `acknowledged ≤ q ≤ acknowledged + the ops of the request in flight` — so every
  acknowledged command is present whole (exact attributes, user metadata, links), and an
  unacknowledged one is present whole or not at all; engine metadata is on every element;
* `nexus.ops.check.verify(nexus, deep=True)` reports no drift: the store's type/name, type, name
  and three link indexes, statistics and counters, the lexical postings, and the vector
  index after its catch-up (one vector set per element, each vector that of the element's
  current text) all agree with the base records.

The next writer resumes at op `q` (the model state is handed to it in a pickle).

    python tests/reliability/crash_harness.py            # short seeded form (as in CI)
    python tests/reliability/crash_harness.py --full     # ≥ 100 kills, 300-block UPSERTs
    python tests/reliability/crash_harness.py --kills 30 --seed 7 --db /tmp/crashdb
    python tests/reliability/crash_harness.py --no-sync  # the writer with durable=False

Prints one line per kill and a JSON summary; exits 1 on the first violation.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from crash_ops import SCHEMA, Model, batch_size, make_op, read_state  # noqa: E402

from nexus.api import Nexus  # noqa: E402
from nexus.ops.check import format_problems, verify  # noqa: E402

WRITER = os.path.join(HERE, "crash_writer.py")


class CrashCheckFailed(AssertionError):
    pass


@dataclass
class Summary:
    seed: int
    kills: int = 0
    early_kills: int = 0            # killed before the writer said "ready" (opening, catch-up)
    after_ack_kills: int = 0        # killed a random time after the run's first acknowledgement
    acknowledged_ops: int = 0
    inflight_committed: int = 0     # unacknowledged ops found committed (whole) after a kill
    ops_verified: int = 0           # ops in the verified prefix at the end
    op_kinds: dict = field(default_factory=dict)
    max_elements: int = 0
    max_concepts: int = 0           # (the elements with vectors: links have none)
    vectors_compared: int = 0       # element vector sets compared with their text, all kills
    history_checked: int = 0        # elements whose newest version-log record was checked
    check_seconds: float = 0.0
    seconds: float = 0.0


def _spawn(path: str, model_file: str, seed: int, start: int, big: int, durable: bool,
           wal: bool | None = None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if wal is not None:
        env["NEXUS_WAL"] = "1" if wal else "0"
    return _popen([sys.executable, WRITER, path, model_file, str(seed), str(start),
                   str(big)] + ([] if durable else ["nosync"]), env)


def _popen(args: list[str], env: dict | None = None) -> subprocess.Popen:
    """The writer's process, its stdout unbuffered on our side (`bufsize=0`): `_kill_cycle`
    reads lines with `readline()` and then the rest with `communicate()`, which reads the
    pipe's file descriptor directly — bytes a buffered reader had read ahead of the line it
    returned (a second "ack" written right after the first, on a busy machine) would be
    lost, and the harness would count an acknowledged request as a later one in flight."""
    return subprocess.Popen(args, bufsize=0, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env)


def _kill_cycle(child: subprocess.Popen, rng: random.Random, early: bool, after_ack: bool,
                window: float) -> tuple[list[int], bool]:
    """Let the writer run, SIGKILL it; returns (acknowledged op indices, whether it was
    killed before "ready").

    The kill comes a random time (up to `window` seconds) after "ready" — or, with
    `after_ack`, after the first acknowledgement of this run: on a slow or busy machine the
    first request of a fresh writer (a large UPSERT, say) can take longer than the window,
    and without that a whole run could kill the same request over and over and verify
    nothing new."""
    seen = b""
    try:
        if early:
            time.sleep(rng.uniform(0.0, 1.2))
        else:
            line = child.stdout.readline()
            if line != b"ready\n":
                child.kill()
                raise CrashCheckFailed(f"writer did not start: {line!r} "
                                       f"{child.stderr.read().decode()[-3000:]}")
            seen = line
            while after_ack:
                line = child.stdout.readline()
                seen += line
                if not line.startswith(b"ack ") or not line.endswith(b"\n"):
                    break                   # an error line or EOF: reported below
                after_ack = False
            time.sleep(rng.uniform(0.005, window))
        child.send_signal(signal.SIGKILL)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    lines = (seen + out).decode().split("\n")
    complete = lines[:-1]            # a line without its newline is not an acknowledgement
    errors = [x for x in complete if x.startswith("error")]
    if errors or child.returncode != -signal.SIGKILL:
        raise CrashCheckFailed(f"writer failed (status {child.returncode}): {errors[:1]} "
                               f"{err.decode()[-3000:]}")
    ready = not early or "ready" in complete
    return [int(x.split()[1]) for x in complete if x.startswith("ack ")], not ready


def _diff(state: dict, expected: dict) -> str:
    keys = [k for k in set(state) | set(expected) if state.get(k) != expected.get(k)]
    lines = [f"{len(keys)} elements differ"]
    for k in sorted(keys)[:3]:
        lines.append(f"  {k[:200]}\n    db:    {str(state.get(k))[:300]}\n"
                     f"    model: {str(expected.get(k))[:300]}")
    return "\n".join(lines)


def run_harness(path: str, *, seed: int, kills: int, big: int = 200, window: float = 1.0,
                early_share: float = 0.15, durable: bool = True, wal: bool | None = None,
                log=None) -> Summary:
    """Run `kills` kill/reopen/verify cycles on a new database at `path` (see module doc).
    `durable=False` runs the writer with `Nexus.open(..., durable=False)` (no fsync per
    commit): a killed *process* must lose nothing either, since its commits are in the
    operating system's page cache. `wal=True` runs the writer (and the verifying opens)
    with the write-ahead log (`nexus.store.wal`), `wal=False` without, None as configured
    (`NEXUS_WAL`)."""
    opts = {} if wal is None else {"wal": wal}
    started = time.monotonic()
    rng = random.Random(seed)
    summary = Summary(seed=seed)
    kinds: Counter = Counter()
    with Nexus.open(path, **opts) as nx:
        response = nx.execute_kip({"command": SCHEMA})
        if "error" in response:
            raise CrashCheckFailed(f"schema: {response}")
    model = Model()
    q = 0                                         # ops applied in the database
    stalled = False
    model_file = os.path.join(os.path.dirname(os.path.abspath(path)),
                              os.path.basename(path) + ".model.pickle")
    for k in range(kills):
        with open(model_file, "wb") as fh:
            pickle.dump(model, fh)
        early = rng.random() < early_share
        # Half the kills land anywhere after "ready" (the first request of a run included),
        # the other half after the first acknowledgement — and always so after a run that
        # acknowledged nothing, so that the harness makes progress however slow the machine.
        after_ack = (rng.random() < 0.5 or stalled) and not early
        child = _spawn(path, model_file, seed, q, big, durable, wal)
        acks, before_ready = _kill_cycle(child, rng, early, after_ack, window)
        summary.after_ack_kills += after_ack
        stalled = not acks
        summary.early_kills += before_ready
        if acks and acks[0] < q:
            raise CrashCheckFailed(f"kill {k}: the writer acknowledged op {acks[0]} < {q}")
        acked = acks[-1] + 1 if acks else q
        # Every acknowledged op must be there; the request in flight may be there whole
        # (each of its commands whole: a batch commits command by command).
        for i in range(q, acked):
            op = make_op(seed, i, model, big)
            op.apply(model)
            kinds[op.kind] += 1
        summary.acknowledged_ops += acked - q
        check_started = time.monotonic()
        with Nexus.open(path, **opts) as nx:
            state, problems = read_state(nx)
            if problems:
                raise CrashCheckFailed(f"kill {k}: {problems[:3]}")
            candidate, found, expected = model, None, model.canonical()
            inflight = batch_size(seed, acked)
            extra_kinds = []
            for extra in range(inflight + 1):
                if extra:
                    candidate = candidate.copy() if extra == 1 else candidate
                    op = make_op(seed, acked + extra - 1, candidate, big)
                    op.apply(candidate)
                    extra_kinds.append(op.kind)
                    expected = candidate.canonical()
                if state == expected:
                    found = extra
                    break
            if found is None:
                raise CrashCheckFailed(
                    f"kill {k}: the database matches no prefix of ops {acked}..{acked + inflight}"
                    f" (acknowledged up to {acked - 1}); against the acknowledged state: "
                    f"{_diff(state, model.canonical())}")
            if found:
                kinds.update(extra_kinds)
                model = candidate
                summary.inflight_committed += found
            q = acked + found
            report = verify(nx, deep=True)
            if not report["ok"]:
                raise CrashCheckFailed(f"kill {k}: index drift after reopen: "
                                       f"{list(format_problems(report))} "
                                       f"{json.dumps(report['store'].get('examples'))[:1500]}")
            summary.max_elements = max(summary.max_elements, report["store"]["elements"])
            summary.max_concepts = max(summary.max_concepts, report["store"]["concepts"])
            # (the default embedder's equivalent: its concepts' gram postings compared)
            summary.vectors_compared += (report["search"].get("vectors_compared", 0)
                                         + report["search"].get("grams_compared", 0))
            summary.history_checked += report.get("history", {}).get("elements", 0)
        summary.check_seconds += time.monotonic() - check_started
        summary.kills += 1
        if log:
            log(f"kill {k + 1}/{kills}: {'early ' if before_ready else ''}"
                f"{len(acks)} requests acknowledged, ops {q} (+{found} in flight), "
                f"{report['store']['elements']} elements, no drift")
    summary.ops_verified = q
    summary.op_kinds = dict(kinds)
    summary.seconds = round(time.monotonic() - started, 1)
    summary.check_seconds = round(summary.check_seconds, 1)
    os.unlink(model_file)
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", action="store_true", help="120 kills, 300-block UPSERTs")
    ap.add_argument("--kills", type=int, help="kill/reopen cycles (default 4, --full 120)")
    ap.add_argument("--seed", type=int, default=20261122)
    ap.add_argument("--big", type=int, help="blocks of a large UPSERT (default 200, --full 300)")
    ap.add_argument("--window", type=float, help="longest run before a kill, s")
    ap.add_argument("--db", help="database directory (default: a new temporary one)")
    ap.add_argument("--no-sync", action="store_true",
                    help="run the writer with durable=False (no fsync per commit)")
    ap.add_argument("--wal", action="store_true",
                    help="durable commits through the write-ahead log (nexus.store.wal; "
                         "the default unless NEXUS_WAL=0)")
    ap.add_argument("--no-wal", action="store_true",
                    help="durable commits synced by LMDB itself, without the log")
    args = ap.parse_args(argv)
    kills = args.kills or (120 if args.full else 4)
    big = args.big or (300 if args.full else 200)
    window = args.window or (1.5 if args.full else 1.0)
    base = args.db or os.path.join(tempfile.mkdtemp(prefix="nexus-crash-"), "db")
    os.makedirs(os.path.dirname(os.path.abspath(base)), exist_ok=True)
    try:
        summary = run_harness(base, seed=args.seed, kills=kills, big=big, window=window,
                              durable=not args.no_sync, wal=True if args.wal else False if args.no_wal else None,
                              log=lambda line: print(line, flush=True))
    except CrashCheckFailed as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(asdict(summary), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
