"""Lost updates over HTTP (RC11 §2.11.2, §4.3): 16 agents doing read-modify-write of shared
counters through a real `kip serve` lose none — with EXPECT VERSION and a retry, and with
UPDATE … ADD (no read at all)."""
from __future__ import annotations

import threading

AGENTS = 16
ROUNDS = 8
SCHEMA = ('UPSERT { CONCEPT ?t { {type: "$ConceptType", name: "Counter"} '
          'SET ATTRIBUTES { description: "a shared counter" } } }')
READ = 'FIND(?c.attributes.n, ?c.metadata._version) WHERE { ?c {type: "Counter", name: :name} }'
WRITE = ('UPSERT { CONCEPT ?c { {type: "Counter", name: :name} EXPECT VERSION :v '
         'SET ATTRIBUTES { n: :n } } }')
ADD = ('UPDATE ?c SET ATTRIBUTES { n: ADD(COALESCE(?c.attributes.n, 0), 1) } '
       'WHERE { ?c {type: "Counter", name: :name} }')


def _run(agents):
    errors: list[BaseException] = []

    def guarded(fn):
        def run():
            try:
                fn()
            except BaseException as exc:        # noqa: BLE001 - reported by the test
                errors.append(exc)
        return run
    threads = [threading.Thread(target=guarded(fn)) for fn in agents]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors[:3]


def _counter(server, name):
    status, body = server.kip(SCHEMA)
    assert status == 200, body
    status, body = server.kip(f'UPSERT {{ CONCEPT ?c {{ {{type: "Counter", name: "{name}"}} '
                              f'SET ATTRIBUTES {{ n: 0 }} }} }}')
    assert status == 200, body


def test_read_modify_write_with_expect_version_loses_nothing(server):
    _counter(server, "rmw")
    conflicts = []

    def agent():
        for _ in range(ROUNDS):
            while True:
                status, body = server.kip(READ, {"name": "rmw"})
                assert status == 200, body
                (n,), (version,) = body["result"]
                status, body = server.kip(WRITE, {"name": "rmw", "v": version, "n": n + 1})
                if status == 200:
                    break
                assert status == 409 and body["error"]["code"] == "KIP_3005", body
                assert body["error"]["data"]["current"] >= version
                conflicts.append(1)
    _run([agent] * AGENTS)
    status, body = server.kip(READ, {"name": "rmw"})
    assert body["result"][0] == [AGENTS * ROUNDS]
    assert conflicts, "16 agents never collided: the test did not exercise the guard"


def test_update_add_loses_nothing(server):
    _counter(server, "add")

    def agent():
        for _ in range(ROUNDS):
            status, body = server.kip(ADD, {"name": "add"})
            assert status == 200 and body["result"] == {"updated": 1, "matched": 1}, body
    _run([agent] * AGENTS)
    status, body = server.kip(READ, {"name": "add"})
    assert body["result"] == [[AGENTS * ROUNDS], [AGENTS * ROUNDS + 1]]
