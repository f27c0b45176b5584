"""SEARCH latency and the mixed read/write agent loop, on the loaded workload.

SEARCH: `SEARCH CONCEPT :q LIMIT 10` through `execute_kip_readonly`, for `count` concepts
drawn from the dataset (every type): half by their exact name, half with one typo (a
substitution, deletion or transposition inside the name). One warm-up pass, then
`passes` timed passes; median and p95 over every call, and hit@1 / hit@10 (the intended
concept among the results) as a sanity check.

Mixed loop — what an agent does per turn, each step a separate durable request:
  1. search   `SEARCH CONCEPT :q WITH TYPE "Drug" LIMIT 5` for a drug name with a typo;
              the top hit is the drug the agent goes on with;
  2. expand   its neighbours: `FIND(?n.type, ?n.name)` over its `treats`,
              `has_side_effect` and `is_class_of` links;
  3. remember UPSERT a new Event that `mentions` the drug (with metadata);
  4. recall   `FIND` the Events mentioning the drug with `FILTER(?e.attributes.date >= …)`
              — must include the Event just written (read-your-writes, checked).
Reported: iterations/s over the whole loop and each step's median / p95.
"""
from __future__ import annotations

import random
import time

from .timing import stats_ms

SEARCH = "SEARCH CONCEPT :q LIMIT 10"
SEARCH_DRUG = 'SEARCH CONCEPT :q WITH TYPE "Drug" LIMIT 5'
EXPAND = '''FIND(?n.type, ?n.name)
WHERE {
  ?d {type: "Drug", name: :name}
  (?d, "treats"|"has_side_effect"|"is_class_of", ?n)
}'''
REMEMBER = '''UPSERT {
  CONCEPT ?e {
    {type: "Event", name: :event}
    SET ATTRIBUTES { event_kind: "Conversation", date: :date, description: :text }
    SET PROPOSITIONS { ("mentions", {type: "Drug", name: :name}) }
  }
  WITH METADATA { source: "agent_loop", confidence: 0.9, created_at: :created_at }
}'''
RECALL = '''FIND(?e.name, ?e.attributes.date)
WHERE {
  ?e {type: "Event"}
  (?e, "mentions", {type: "Drug", name: :name})
  FILTER(?e.attributes.date >= :since)
}'''
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def typo(rng: random.Random, name: str) -> str:
    """One edit away from `name`, never at its first character."""
    if len(name) < 4:
        return name
    i = rng.randrange(1, len(name) - 1)
    kind = rng.randrange(3)
    if kind == 0:                                   # substitution
        c = rng.choice([x for x in LETTERS if x != name[i].lower()])
        return name[:i] + c + name[i + 1:]
    if kind == 1:                                   # deletion
        return name[:i] + name[i + 1:]
    if name[i] == name[i + 1]:                      # transposition (of unequal letters)
        return name[:i] + rng.choice(LETTERS) + name[i + 1:]
    return name[:i] + name[i + 1] + name[i] + name[i + 2:]


def _kip(nx, command: str, readonly: bool = False, **params):
    request = {"command": command, "parameters": params}
    response = nx.execute_kip_readonly(request) if readonly else nx.execute_kip(request)
    if "error" in response:
        raise RuntimeError(f"{response['error']['code']}: {response['error']['message']}")
    return response["result"]


def search_bench(nx, names: list[tuple[str, str]], seed: int, count: int = 100,
                 passes: int = 3) -> dict:
    """`names`: (type, name) of every concept of the dataset."""
    rng = random.Random(seed + 11)
    targets = [names[rng.randrange(len(names))] for _ in range(count)]
    queries = [(t, n, n if i % 2 == 0 else typo(rng, n)) for i, (t, n) in enumerate(targets)]
    hits1 = hits10 = 0
    for t, n, q in queries:                         # warm-up (and the quality check)
        found = [(r["type"], r["name"]) for r in _kip(nx, SEARCH, True, q=q)]
        hits1 += bool(found) and found[0] == (t, n)
        hits10 += (t, n) in found
    times: list[int] = []
    exact: list[int] = []
    typos: list[int] = []
    pc = time.perf_counter_ns
    for _ in range(passes):
        for i, (_t, _n, q) in enumerate(queries):
            t0 = pc()
            _kip(nx, SEARCH, True, q=q)
            dt = pc() - t0
            times.append(dt)
            (exact if i % 2 == 0 else typos).append(dt)
    return {**stats_ms(times), "queries": count, "passes": passes,
            "exact": stats_ms(exact), "typo": stats_ms(typos),
            "hit_at_1": round(hits1 / count, 3), "hit_at_10": round(hits10 / count, 3),
            "command": SEARCH}


def mixed_loop(nx, drugs: list[str], seed: int, iterations: int = 200) -> dict:
    """`drugs`: names of the dataset's Drug concepts."""
    rng = random.Random(seed + 13)
    steps = {"search": [], "expand": [], "remember": [], "recall": []}
    misses = stale = 0
    rows = 0
    pc = time.perf_counter_ns
    start = pc()
    for i in range(iterations):
        target = drugs[rng.randrange(len(drugs))]
        q = typo(rng, target)
        event = f"Agent note {i:05d}"
        date = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"

        t0 = pc()
        hits = _kip(nx, SEARCH_DRUG, True, q=q)
        t1 = pc()
        drug = hits[0]["name"] if hits else target
        misses += drug != target
        neighbours = _kip(nx, EXPAND, True, name=drug)
        t2 = pc()
        _kip(nx, REMEMBER, event=event, date=date, name=drug,
             text=f"user asked about {drug} ({len(neighbours[0])} links)",
             created_at=f"{date}T12:00:00Z")
        t3 = pc()
        names, _dates = _kip(nx, RECALL, True, name=drug, since="2026-01-01")
        t4 = pc()
        stale += event not in names
        rows += len(names)
        for step, dt in zip(steps, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            steps[step].append(dt)
    total_s = (pc() - start) / 1e9
    if stale:
        raise RuntimeError(f"mixed loop: {stale} recalls missed the Event just written")
    return {"iterations": iterations, "total_s": round(total_s, 3),
            "iterations_per_s": round(iterations / total_s, 1),
            "iteration": stats_ms([sum(x) for x in zip(*steps.values())]),
            "steps": {k: stats_ms(v) for k, v in steps.items()},
            "search_top_hit_is_target": round(1 - misses / iterations, 3),
            "recall_rows_avg": round(rows / iterations, 1),
            "commands": {"search": SEARCH_DRUG, "expand": EXPAND, "remember": REMEMBER,
                         "recall": RECALL}}
