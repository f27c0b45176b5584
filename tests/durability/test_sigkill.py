"""Durability under SIGKILL (issue 3): a real process writes UPSERTs in a loop and prints a
marker after each acknowledged `execute_kip`; it is killed at random moments (seeded), more
than 20 times, sometimes while it is still bootstrapping. After every kill the database is
opened again and checked: every acknowledged command is present whole, no command is
present in part, the bootstrap capsules are a whole prefix, and the statistics agree with
the data."""
from __future__ import annotations

import random
import signal
import subprocess
import sys
import time

from nexus.ops.capsules import BUNDLED
from nexus.store import open_store
from nexus.store.protocol import ConceptHead

KILLS = 24
SEED = 20240607
# Elements each bundled capsule adds (concepts + links), in BUNDLED order.
CAPSULE_ELEMENTS = {"Genesis.kip": 15, "Person.kip": 2, "Event.kip": 2, "SleepTask.kip": 4,
                    "Preference.kip": 4, "Insight.kip": 4, "Commitment.kip": 6,
                    "Experience.kip": 2, "ExperienceStep.kip": 2, "Skill.kip": 2,
                    "involves.kip": 2, "mentions.kip": 2, "consolidated_to.kip": 2,
                    "derived_from.kip": 2, "caused_by.kip": 2, "compiled_to.kip": 2,
                    "derived_insight.kip": 2, "has_step.kip": 2,
                    "persons/system.kip": 1, "persons/self.kip": 1}


def _run_once(script: str, path: str, start: int, rng: random.Random, early: bool
              ) -> list[int]:
    # Unbuffered: `readline` then takes "ready" alone, so the acks printed right after it
    # reach `communicate` (which reads the pipe itself, not a buffered reader's read-ahead:
    # a fast writer's first acks were lost to the test that way).
    child = subprocess.Popen([sys.executable, script, path, str(start)], bufsize=0,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        if early:       # anywhere from interpreter start to the first commands
            time.sleep(rng.uniform(0.0, 1.2))
        else:
            line = child.stdout.readline()
            assert line == b"ready\n", (line, child.stderr.read() if child.poll() else b"")
            time.sleep(rng.uniform(0.005, 0.35))
        child.send_signal(signal.SIGKILL)
        out, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL, (child.returncode, err.decode()[-2000:])
    lines = out.decode().split("\n")[:-1]       # a line without its newline is not an ack
    assert not [x for x in lines if x.startswith("error")], lines
    return [int(x.split()[1]) for x in lines if x.startswith("ack ")]


def _check(path: str, acknowledged: set[int]) -> int:
    """Verify the database; returns the highest marker present (or -1)."""
    store = open_store(path)
    try:
        with store.read() as t:
            _check_bootstrap(t)
            return _check_items(t, acknowledged)
    finally:
        store.close()


def _check_bootstrap(t) -> None:
    applied = [name for name in BUNDLED if t.aux("engine").get(f"capsule:{name}".encode())]
    assert applied == list(BUNDLED[:len(applied)]), applied
    concepts = links = 0
    item = t.symbol_id("Item")
    for n in t.elements():
        h = t.head(n)
        if type(h) is ConceptHead:
            concepts += 1
        else:
            links += 1
    assert (concepts, links) == (t.count_concepts(), t.count_links())
    if item is None:
        expected = sum(CAPSULE_ELEMENTS[name] for name in applied)
        schema = t.count_concepts() + t.count_links() - expected
        assert schema in (0, 3), (applied, concepts, links)


def _check_items(t, acknowledged: set[int]) -> int:
    item = t.symbol_id("Item")
    if item is None:
        assert not acknowledged
        return -1
    nxt, about = t.symbol_id("next"), t.symbol_id("about")
    by_name = {t.head(n).name: n for n in t.concepts_of_type(item)}
    markers = {int(name[1:].split("-")[0]) for name in by_name if name.startswith("m")}
    for i in markers:
        ids = [by_name.get(f"m{i}-{x}") for x in "abc"]
        assert None not in ids, f"command {i} is present in part: {ids}"
        a, b, c = ids
        for n in ids:
            assert t.attributes(n)["marker"] == i
        assert t.attributes(a)["payload"] == f"{i}:" + "x" * 2000
        link = t.link_id(a, nxt, b)
        assert link is not None and t.attributes(link) == {"marker": i}, i
        assert t.link_id(c, nxt, a) is not None, i
        higher = t.link_id(link, about, c)
        assert higher is not None and t.metadata(higher)["marker"] == i, i
    missing = acknowledged - markers
    assert not missing, f"acknowledged commands lost: {sorted(missing)[:10]}"
    top = max(markers, default=-1)
    counter = by_name.get("counter")
    if top >= 0:        # the counter is written by the same command (second statement)
        assert counter is not None and t.attributes(counter)["last"] == top
    return top


def test_sigkill_at_random_moments(tmp_path, writer_script):
    rng = random.Random(SEED)
    path = str(tmp_path / "db")
    acknowledged: set[int] = set()
    start = 0
    acked_runs = 0
    for k in range(KILLS):
        early = k % 4 == 0
        acks = _run_once(writer_script, path, start, rng, early)
        assert acks == list(range(start, start + len(acks))), acks[:5]
        acknowledged.update(acks)
        acked_runs += bool(acks)
        top = _check(path, acknowledged)
        start = max(top, start - 1) + 1
    assert acked_runs >= KILLS // 2, "the writer should get commands through in most runs"
    print(f"{len(acknowledged)} acknowledged commands over {KILLS} kills ({acked_runs} runs with acks)")
    assert len(acknowledged) >= 50
