"""Load and soak: 16 concurrent clients against a real `kip serve` on loopback, plus one
client sending garbage, for a bounded time.

Each regular client keeps one connection alive and mixes single writes (a `Marker` concept
with exact attributes, sometimes linked to its previous marker), `commands` batches (writes
and reads), reads of its own acknowledged markers (read-your-writes, checked exactly), FIND /
DESCRIBE / SEARCH, read-only calls, dry runs (which must leave nothing behind), write+delete
cascades on scratch concepts and `list_logs`. The garbage client sends invalid JSON, random
bytes, invalid UTF-8, NaN/Infinity, wrong types, deep nesting, huge strings, oversized
bodies, 10k-element batches, hostile KIP, bad or missing credentials and raw non-HTTP bytes.

Checked: no 5xx answer at all, every regular request answered 200 without error, every
acknowledged write present with its exact attributes in a final read (lost writes = 0), no
dry-run write present, the server's anonymous RSS bounded after warm-up, a clean SIGTERM
shutdown, and `nexus.ops.check.verify` clean on the database afterwards.

    python tests/reliability/soak.py                # ~10 s (as in CI)
    python tests/reliability/soak.py --full         # 60 s
    python tests/reliability/soak.py --seconds 300 --clients 16
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from kipserver import KipServer  # noqa: E402

KEY = "soak-key-0123456789"
SCHEMA = """
UPSERT {
  CONCEPT ?m { {type: "$ConceptType", name: "Marker"} SET ATTRIBUTES { description: "a soak-test write marker" } }
  CONCEPT ?s { {type: "$ConceptType", name: "Scratch"} SET ATTRIBUTES { description: "written and deleted again" } }
  CONCEPT ?f { {type: "$PropositionType", name: "follows"} SET ATTRIBUTES { description: "marker order", subject_types: ["*"], object_types: ["*"] } }
}
"""
WRITE = ('UPSERT { CONCEPT ?m { {type: "Marker", name: :name} SET ATTRIBUTES '
         '{ client: :client, seq: :seq, value: :value, note: :note } } } '
         'WITH METADATA { source: "soak" }')
WRITE_LINKED = ('UPSERT { CONCEPT ?m { {type: "Marker", name: :name} SET ATTRIBUTES '
                '{ client: :client, seq: :seq, value: :value, note: :note } '
                'SET PROPOSITIONS { ("follows", {type: "Marker", name: :prev}) } } }')
READ_ONE = 'FIND(?m.attributes) WHERE { ?m {type: "Marker", name: :name} }'
NOTES = ("plain", "ünïcödé", "日本", "😀 emoji", 'quote " \\ back', "{not: kip} :x ?y",
         "line\nbreak", "")
ALLOWED_GARBAGE = {200, 204, 400, 401, 404, 405, 408, 413, 431}


@dataclass
class Summary:
    seconds: float
    clients: int
    requests: int = 0
    statuses: dict = field(default_factory=dict)
    garbage_requests: int = 0
    garbage_statuses: dict = field(default_factory=dict)
    garbage_disconnects: int = 0
    acknowledged_writes: int = 0
    lost_writes: int = 0
    dry_runs: int = 0
    dry_run_leaks: int = 0
    failures: list = field(default_factory=list)
    rss_kib: dict = field(default_factory=dict)
    requests_per_second: float = 0.0
    shutdown_status: int | None = None
    check_ok: bool | None = None


class Soak:
    def __init__(self, server: KipServer, seconds: float, clients: int, seed: int) -> None:
        self.server = server
        self.seconds = seconds
        self.clients = clients
        self.seed = seed
        self.lock = threading.Lock()
        self.acked: dict[str, dict] = {}
        self.dry: list[str] = []
        self.statuses: Counter = Counter()
        self.garbage_statuses: Counter = Counter()
        self.garbage_disconnects = 0
        self.failures: list[str] = []
        self.deadline = 0.0
        self.rss: list[tuple[float, dict]] = []

    def fail(self, what: str) -> None:
        with self.lock:
            if len(self.failures) < 50:
                self.failures.append(what[:800])

    # --- regular clients ------------------------------------------------------------------
    def client(self, c: int) -> None:
        rng = random.Random(self.seed * 1000 + c)
        conn = self.server.connect()
        seq = 0
        mine: list[str] = []

        def call(method: str, params: dict) -> Any:
            nonlocal conn
            try:
                status, data = self.server.post({"method": method, "params": params}, conn=conn)
            except (OSError, http.client.HTTPException) as exc:
                self.fail(f"client {c}: connection error {exc!r} on {method} {params}")
                conn.close()
                conn = self.server.connect()
                return None
            with self.lock:
                self.statuses[status] += 1
            if status != 200 or not isinstance(data, dict) or "error" in data:
                self.fail(f"client {c}: {status} {str(data)[:300]} for {method} "
                          f"{json.dumps(params)[:300]}")
                return None
            return data["result"]

        def marker() -> tuple[str, dict, dict]:
            nonlocal seq
            seq += 1
            name = f"c{c}-{seq}"
            attrs = {"client": c, "seq": seq, "value": rng.choice(
                (rng.randint(-2**62, 2**62), rng.random(), rng.choice(NOTES), None, True,
                 [1, "two", 3.5], {"k": [c, seq]})), "note": rng.choice(NOTES)}
            params = {"name": name, **attrs}
            command = WRITE
            if mine and rng.random() < 0.3:
                command, params["prev"] = WRITE_LINKED, rng.choice(mine)
            return name, attrs, {"command": command, "parameters": params}

        def ack(name: str, attrs: dict) -> None:
            mine.append(name)
            with self.lock:
                self.acked[name] = attrs

        while time.monotonic() < self.deadline:
            r = rng.random()
            if r < 0.30:
                name, attrs, request = marker()
                if call("execute_kip", request) is not None:
                    ack(name, attrs)
            elif r < 0.40:
                items, written = [], []
                for _ in range(rng.randint(2, 6)):
                    if rng.random() < 0.6:
                        name, attrs, request = marker()
                        items.append(request)
                        written.append((len(items) - 1, name, attrs))
                    else:
                        items.append(rng.choice((
                            'FIND(COUNT(?m)) WHERE { ?m {type: "Marker"} }',
                            'DESCRIBE CONCEPT TYPE "Marker"',
                            {"command": READ_ONE, "parameters": {"name": rng.choice(
                                mine or ["none"])}} if mine else 'DESCRIBE DOMAINS')))
                result = call("execute_kip", {"commands": items})
                if result is not None:
                    for i, name, attrs in written:
                        if "error" in result[i]:
                            self.fail(f"client {c}: batch element {result[i]}")
                        else:
                            ack(name, attrs)
            elif r < 0.65 and mine:
                name = rng.choice(mine)
                result = call(rng.choice(("execute_kip", "execute_kip_readonly")),
                              {"command": READ_ONE, "parameters": {"name": name}})
                with self.lock:
                    want = self.acked[name]
                if result is not None and result != [want]:
                    self.fail(f"client {c}: read-your-writes: {name} is {result}, "
                              f"written {want}")
            elif r < 0.75:
                call("execute_kip_readonly", {"command": rng.choice((
                    'FIND(?m.name) WHERE { ?m {type: "Marker"} } LIMIT 20',
                    'DESCRIBE PRIMER', 'DESCRIBE CONCEPT TYPES',
                    'FIND(?a.name, ?b.name) WHERE { ?a {type: "Marker"} '
                    '(?a, "follows", ?b) } LIMIT 10',
                    f'SEARCH CONCEPT "c{c}-{max(1, seq)}" WITH TYPE "Marker" LIMIT 5'))})
            elif r < 0.82:
                name = f"dry-{c}-{seq}-{rng.randrange(10**9)}"
                if call("execute_kip", {"command": WRITE, "dry_run": True, "parameters": {
                        "name": name, "client": c, "seq": 0, "value": 1, "note": ""}}) is not None:
                    with self.lock:
                        self.dry.append(name)
            elif r < 0.92:
                name = f"scratch-{c}-{seq}-{rng.randrange(10**6)}"
                call("execute_kip", {"commands": [
                    {"command": 'UPSERT { CONCEPT ?s { {type: "Scratch", name: :n} '
                                'SET ATTRIBUTES { v: 1 } SET PROPOSITIONS { ("follows", '
                                '{type: "Scratch", name: :n}) } } }', "parameters": {"n": name}},
                    {"command": 'DELETE CONCEPT ?s DETACH WHERE { ?s {type: "Scratch", '
                                'name: :n} }', "parameters": {"n": name}}]})
            else:
                call("list_logs", {"limit": rng.randint(1, 50)})
        conn.close()

    # --- the garbage client ----------------------------------------------------------------
    def garbage(self) -> None:
        rng = random.Random(self.seed)
        senders = garbage_senders(self.server)
        i = 0
        while time.monotonic() < self.deadline:
            name, send = senders[i % len(senders)]
            i += 1
            try:
                status, body = send(rng)
            except (OSError, http.client.HTTPException):
                with self.lock:
                    self.garbage_disconnects += 1
                continue
            with self.lock:
                self.garbage_statuses[status] += 1
            if status >= 500 or status not in ALLOWED_GARBAGE:
                self.fail(f"garbage {name}: HTTP {status} {str(body)[:300]}")
            elif status >= 400 and not _is_error_body(body):
                self.fail(f"garbage {name}: HTTP {status} without a KIP error: "
                          f"{str(body)[:300]}")

    # --- memory ---------------------------------------------------------------------------
    def sampler(self) -> None:
        started = time.monotonic()
        while time.monotonic() < self.deadline:
            try:
                self.rss.append((time.monotonic() - started, self.server.rss()))
            except OSError:
                return
            time.sleep(0.5)

    # --- run and verify -------------------------------------------------------------------
    def run(self) -> Summary:
        self.deadline = time.monotonic() + self.seconds
        threads = [threading.Thread(target=self.client, args=(c,), daemon=True)
                   for c in range(self.clients)]
        threads += [threading.Thread(target=self.garbage, daemon=True),
                    threading.Thread(target=self.sampler, daemon=True)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(self.seconds + 120)
        elapsed = time.monotonic() - started
        summary = Summary(seconds=round(elapsed, 1), clients=self.clients)
        summary.requests = sum(self.statuses.values())
        summary.statuses = dict(self.statuses)
        summary.garbage_requests = sum(self.garbage_statuses.values())
        summary.garbage_statuses = {str(k): v for k, v in sorted(self.garbage_statuses.items())}
        summary.garbage_disconnects = self.garbage_disconnects
        summary.requests_per_second = round(
            (summary.requests + summary.garbage_requests) / elapsed, 1)
        summary.acknowledged_writes = len(self.acked)
        summary.dry_runs = len(self.dry)
        self.final_read(summary)
        summary.rss_kib = self.rss_figures()
        summary.failures = self.failures
        return summary

    def final_read(self, summary: Summary) -> None:
        found: dict[str, Any] = {}
        cursor = None
        while True:
            command = 'FIND(?m.name, ?m.attributes) WHERE { ?m {type: "Marker"} } LIMIT 2000'
            if cursor:
                command += f' CURSOR "{cursor}"'
            status, data = self.server.kip({"command": command}, "execute_kip_readonly")
            if status != 200 or "result" not in data:
                self.fail(f"final read: {status} {str(data)[:300]}")
                return
            names, attrs = data["result"] if data["result"] else ([], [])
            found.update(zip(names, attrs))
            cursor = data.get("next_cursor")
            if not cursor:
                break
        lost = [n for n, a in self.acked.items() if found.get(n) != a]
        summary.lost_writes = len(lost)
        for n in lost[:5]:
            self.fail(f"lost write {n}: written {self.acked[n]}, read {found.get(n)}")
        status, data = self.server.kip({"command": 'FIND(?m.name) WHERE { ?m {type: "Marker"} '
                                        'FILTER(STARTS_WITH(?m.name, "dry-")) }'})
        summary.dry_run_leaks = len(data.get("result") or []) if status == 200 else -1

    def rss_figures(self) -> dict[str, Any]:
        if not self.rss:
            return {}
        warm = [s for t, s in self.rss if t >= min(5.0, self.seconds / 4)] or \
            [self.rss[-1][1]]
        first, last = warm[0], self.rss[-1][1]
        half = warm[len(warm) // 2]
        return {"anon_after_warmup": first.get("RssAnon"), "anon_end": last.get("RssAnon"),
                "anon_growth": last.get("RssAnon", 0) - first.get("RssAnon", 0),
                "anon_growth_second_half": last.get("RssAnon", 0) - half.get("RssAnon", 0),
                "anon_peak": max(s.get("RssAnon", 0) for _, s in self.rss),
                "rss_end": last.get("VmRSS"), "file_end": last.get("RssFile"),
                "samples": len(self.rss)}


def _is_error_body(body: Any) -> bool:
    if isinstance(body, dict):
        err = body.get("error")
        return isinstance(err, dict) and ("code" in err)
    if isinstance(body, list):                      # a JSON-RPC batch answer
        return all(_is_error_body(x) or "result" in x for x in body if isinstance(x, dict))
    return isinstance(body, bytes) and body.startswith(b"Invalid HTTP request")


# --- garbage ------------------------------------------------------------------------------------

def garbage_senders(server: KipServer) -> list[tuple[str, Callable[[random.Random], Any]]]:
    post = server.post

    def body(payload: Any) -> Callable:
        return lambda rng: post(payload)

    def kip(command: Any, method: str = "execute_kip", **extra: Any) -> Callable:
        return lambda rng: post({"method": method, "params": {"command": command, **extra}})

    find = 'FIND(?p) WHERE { ?p {type: "Person"} }'
    return [
        ("truncated json", lambda rng: post(b'{"method": "execute_kip", "params": {"comm')),
        ("random bytes", lambda rng: post(rng.randbytes(rng.randint(1, 4096)))),
        ("invalid utf-8", body(b'{"method":"execute_kip","params":{"command":"FIND \xff\xfe"}}')),
        ("NaN", body(b'{"method":"execute_kip","params":{"command":"' + find.replace(
            '"', '\\"').encode() + b'","parameters":{"x":NaN}}}')),
        ("Infinity", body(b'{"method":"execute_kip","params":{"command":"x","dry_run":-Infinity}}')),
        ("deep nesting", lambda rng: post(b"[" * rng.choice((100, 1100, 100_000)))),
        ("deep params", body({"method": "execute_kip", "params": {
            "command": find, "parameters": {"x": _deep(900)}}})),
        ("wrong method type", body({"method": 42, "params": {"command": find}})),
        ("params a list", body({"method": "execute_kip", "params": [find]})),
        ("command a number", body({"method": "execute_kip", "params": {"command": 1e300}})),
        ("commands a string", body({"method": "execute_kip", "params": {"commands": find}})),
        ("commands of junk", body({"method": "execute_kip", "params": {
            "commands": [None, 1, [], {"command": 5}, {"command": find, "x": 1}, find]}})),
        ("dry_run a string", body({"method": "execute_kip", "params": {"command": find,
                                                                       "dry_run": "yes"}})),
        ("unknown field", body({"method": "execute_kip", "params": {"command": find},
                                "extra": True})),
        ("jsonrpc junk", body([{"jsonrpc": "1.0", "id": {}, "method": "execute_kip"}, 5, []])),
        ("huge string", lambda rng: post({"method": "execute_kip", "params": {
            "command": "FIND " + "x" * rng.choice((100_000, 2_000_000, 9_000_000))}})),
        ("huge parameter", lambda rng: post({"method": "execute_kip", "params": {
            "command": 'FIND(?p) WHERE { ?p {type: "Person", name: :n} }',
            "parameters": {"n": "y" * 3_000_000}}})),
        ("10k batch", body({"method": "execute_kip", "params": {"commands": [find] * 10_000}})),
        ("catastrophic regex", kip('FIND(?p) WHERE { ?p {type: "Person"} FILTER(REGEX('
                                   '"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!", "(a+)+$")) }')),
        ("path range", kip('FIND(?a, ?b) WHERE { (?a, "follows"{0,1000000}, ?b) }')),
        ("limit 10^12", kip(find + " LIMIT 1000000000000")),
        ("deep brackets", kip("FIND(?p) WHERE { " + "{ " * 5000 + " }" * 5000 + " }")),
        ("kml in readonly", kip('DELETE CONCEPT ?m DETACH WHERE { ?m {type: "Marker"} }',
                                "execute_kip_readonly")),
        ("kml readonly dry run", kip('DELETE CONCEPT ?m DETACH WHERE { ?m {type: "Marker"} }',
                                     "execute_kip_readonly", dry_run=True)),
        ("token soup", lambda rng: post({"method": "execute_kip", "params": {"command": " ".join(
            rng.choice(("FIND", "UPSERT", "{", "}", "(", ")", "?x", ":p", '"s"', "WHERE",
                        "DELETE", "CONCEPT", "DETACH", ",", "NOT", "LIMIT", "1e999"))
            for _ in range(rng.randint(1, 60)))}})),
        ("no key", lambda rng: post({"method": "execute_kip", "params": {"command": find}},
                                    key=None)),
        ("wrong key", lambda rng: post({"method": "execute_kip", "params": {"command": find}},
                                       key=KEY[:-1] + "X")),
        ("huge key", lambda rng: post({"method": "list_logs"}, key="k" * 60_000)),
        ("basic auth", lambda rng: server.request("POST", "/kip", b"{}", {
            "Authorization": f"Basic {KEY}"})),
        ("get /kip", lambda rng: server.request("GET", "/kip")),
        ("unknown route", lambda rng: server.request("DELETE", "/admin")),
        ("oversized body", lambda rng: server.raw((
            f"POST /kip HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: 60000000\r\n\r\n").encode()
            + b"{" * 1000)),
        ("not http", lambda rng: server.raw(rng.randbytes(512) + b"\r\n\r\n")),
        ("bad content-length", lambda rng: server.raw((
            f"POST /kip HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Length: lots\r\n\r\n{{}}").encode())),
    ]


def _deep(n: int) -> Any:
    value: Any = 1
    for _ in range(n):
        value = [value]
    return value


# --- entry points -------------------------------------------------------------------------------

def run_soak(db: str, *, seconds: float, clients: int = 16, seed: int = 20261122,
             log: Callable[[str], None] | None = None) -> Summary:
    """Serve a new database at `db` and soak it (see the module doc)."""
    from nexus.api import Nexus
    from nexus.ops.check import verify
    with Nexus.open(db) as nx:
        response = nx.execute_kip({"command": SCHEMA})
        assert "result" in response, response
    server = KipServer.start(db, key=KEY)
    try:
        if log:
            log(f"serving on {server.host}:{server.port}; {clients} clients + garbage "
                f"for {seconds:g} s")
        summary = Soak(server, seconds, clients, seed).run()
        if not server.alive():
            summary.failures.append("the server died")
    finally:
        summary_status = server.stop()
    summary.shutdown_status = summary_status
    with Nexus.open(db) as nx:
        report = verify(nx, deep=True)
    summary.check_ok = report["ok"]
    if not report["ok"]:
        from nexus.ops.check import format_problems
        summary.failures.append(f"check: {list(format_problems(report))}")
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", action="store_true", help="60 s")
    ap.add_argument("--seconds", type=float, help="duration (default 10, --full 60)")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seed", type=int, default=20261122)
    ap.add_argument("--db", help="database directory (default: a new temporary one)")
    args = ap.parse_args(argv)
    seconds = args.seconds or (60.0 if args.full else 10.0)
    db = args.db or os.path.join(tempfile.mkdtemp(prefix="nexus-soak-"), "db")
    os.makedirs(os.path.dirname(os.path.abspath(db)), exist_ok=True)
    summary = run_soak(db, seconds=seconds, clients=args.clients, seed=args.seed,
                       log=lambda line: print(line, flush=True))
    print(json.dumps(asdict(summary), indent=2))
    bad = summary.failures or summary.lost_writes or summary.dry_run_leaks
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
