"""`kip serve --db postgresql://...` over HTTP, and two servers on one database (issue 22):
what one server commits the other reads at once (no process-local cache goes stale), and
concurrent UPDATE ... ADD through both loses no update (writers serialize on the database,
not in a process)."""
from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from serving import launch

ROOT = Path(__file__).resolve().parents[2]


class Server:
    """A `kip serve` on a postgresql:// location, run in its own directory (the server
    takes its --db for a directory when announcing it; nothing may land in the repo)."""

    def __init__(self, url: str, tmp: Path, name: str) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
        self.log = tmp / f"{name}.log"
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            self.proc, self.host, self.port = launch(url, ["--access-log", "off"], log=self.log,
                                                     env=env)  # type: ignore[arg-type]
        finally:
            os.chdir(cwd)

    def kip(self, command: str, **params: object) -> dict:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            body = {"method": "execute_kip", "params": {"command": command,
                                                        "parameters": params}}
            conn.request("POST", "/kip", json.dumps(body),
                         {"Content-Type": "application/json"})
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def two_servers(pg_server, tmp_path):
    url = pg_server.fresh_database("serve")
    a = Server(url, tmp_path, "a")          # bootstraps the database
    b = None
    try:
        b = Server(url, tmp_path, "b")
        yield a, b
    finally:
        for s in (a, b):
            if s is not None:
                s.stop()


def test_two_servers_share_one_database_and_lose_no_update(two_servers):
    a, b = two_servers
    made = a.kip('UPSERT { CONCEPT ?c { {type: "Person", name: "counter"} '
                 'SET ATTRIBUTES { n: 0 } } }')
    assert "result" in made, made
    # What A committed, B reads at once, and the other way round.
    seen = b.kip('FIND(?c.attributes.n) WHERE { ?c {type: "Person", name: "counter"} }')
    assert "result" in seen and json.dumps(seen["result"]) in ("[0]", "[[0]]"), seen
    assert "result" in b.kip('UPSERT { CONCEPT ?c { {type: "Person", name: "from_b"} } }')
    found = a.kip('FIND(?c.name) WHERE { ?c {type: "Person", name: "from_b"} }')
    assert "from_b" in json.dumps(found.get("result")), found
    # SEARCH too: the vectors and postings are rows of the database, not an index in B.
    assert "result" in b.kip('UPSERT { CONCEPT ?c { {type: "Person", name: "Wendeline '
                             'Strobach"} } }')
    hits = a.kip('SEARCH CONCEPT "wendelin strobach" LIMIT 3')
    assert "Wendeline Strobach" in json.dumps(hits.get("result")), hits

    agents, each = 6, 10
    errors: list[dict] = []
    add = ('UPDATE ?c SET ATTRIBUTES { n: ADD(?c.attributes.n, 1) } '
           'WHERE { ?c {type: "Person", name: "counter"} }')

    def agent(k: int) -> None:
        server = (a, b)[k % 2]
        for _ in range(each):
            r = server.kip(add)
            if "error" in r:
                errors.append(r)
    started = time.monotonic()
    with ThreadPoolExecutor(agents) as pool:
        list(pool.map(agent, range(agents)))
    elapsed = time.monotonic() - started
    assert not errors, errors[:3]
    final = a.kip('FIND(?c.attributes.n) WHERE { ?c {type: "Person", name: "counter"} }')
    assert json.dumps(final["result"]) in (f"[{agents * each}]", f"[[{agents * each}]]"), \
        (final, elapsed)
    # The announcement names the location, and the log holds no password (none was set).
    assert "postgresql://" in a.log.read_text()


def test_serve_refuses_an_unreachable_database_with_the_cause(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    url = "postgresql://kip:Hush-hush-42@127.0.0.1:1/nexus?connect_timeout=3"
    done = subprocess.run([sys.executable, "-m", "nexus.cli", "serve", "--db", url,
                           "--port", "0"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0
    err = done.stderr
    assert "unreachable" in err and "127.0.0.1" in err, err
    assert "Hush-hush-42" not in err + done.stdout


def test_expect_version_across_two_servers_loses_no_update(two_servers):
    """Agents read a counter and its _version from either server and write it back with
    EXPECT VERSION, retrying on KIP_3005: every increment lands exactly once."""
    a, b = two_servers
    assert "result" in a.kip('UPSERT { CONCEPT ?c { {type: "Person", name: "cas"} '
                             'SET ATTRIBUTES { n: 0 } } }')
    find = 'FIND(?c) WHERE { ?c {type: "Person", name: "cas"} }'
    write = ('UPSERT { CONCEPT ?c { {type: "Person", name: "cas"} EXPECT VERSION :v '
             'SET ATTRIBUTES { n: :n } } }')
    agents, each = 4, 5
    conflicts: list[int] = []
    failures: list[dict] = []

    def agent(k: int) -> None:
        server = (a, b)[k % 2]
        done = 0
        while done < each:
            got = server.kip(find)["result"]
            concept = got[0] if isinstance(got, list) else got
            n, v = concept["attributes"]["n"], concept["metadata"]["_version"]
            r = server.kip(write, v=v, n=n + 1)
            if "error" in r:
                if r["error"]["code"] != "KIP_3005":
                    failures.append(r)
                    return
                conflicts.append(k)
                continue
            done += 1
    with ThreadPoolExecutor(agents) as pool:
        list(pool.map(agent, range(agents)))
    assert not failures, failures[:3]
    got = b.kip(find)["result"]
    concept = got[0] if isinstance(got, list) else got
    assert concept["attributes"]["n"] == agents * each, (concept, len(conflicts))
