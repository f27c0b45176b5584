"""Fixtures for the `kip` CLI tests: run the CLI as a real process or in-process, build a
realistic graph, and dump a graph canonically (ids aside) to compare two databases."""
from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nexus.api import Nexus

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from canonical import canonical_graph  # noqa: E402


def run_kip(*args: str, input: str | None = None, env: dict | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m nexus.cli ARGS...` as a subprocess."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("KIP_API_KEY", "KIP_DB")}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "nexus.cli", *args], input=input,
                          capture_output=True, text=True, timeout=timeout, env=full_env)


@pytest.fixture
def kip_main(capsys):
    """Run `nexus.cli.main(argv)` in-process: returns (exit status, stdout, stderr)."""
    from nexus.cli import main

    def call(*argv: str) -> tuple[int, str, str]:
        try:
            code = main(list(argv))
        except SystemExit as exc:           # argparse --help / usage errors
            code = exc.code if isinstance(exc.code, int) else 2
        out = capsys.readouterr()
        return code, out.out, out.err
    return call


# --- canonical dump ------------------------------------------------------------------------

def canonical_dump(path: str | os.PathLike) -> dict[str, Any]:
    """The database at `path` dumped canonically, ids aside (tests/canonical.py)."""
    with Nexus.open(str(path), bootstrap=False) as nx:
        return canonical_graph(nx)


# --- a realistic graph -----------------------------------------------------------------------

SCHEMA = """
UPSERT {
  CONCEPT ?medicine { {type: "Domain", name: "Medicine"}
    SET ATTRIBUTES {description: "Drugs and what they do", display_hint: "💊"} }
  CONCEPT ?drug { {type: "$ConceptType", name: "Drug"}
    SET ATTRIBUTES {description: "A medication", instance_schema: {dose_mg: {type: "number"}}}
    SET PROPOSITIONS { ("belongs_to_domain", ?medicine) } }
  CONCEPT ?symptom { {type: "$ConceptType", name: "Symptom"}
    SET ATTRIBUTES {description: "A symptom"}
    SET PROPOSITIONS { ("belongs_to_domain", ?medicine) } }
  CONCEPT ?treats { {type: "$PropositionType", name: "treats"}
    SET ATTRIBUTES {description: "Drug treats symptom", subject_types: ["Drug"],
                    object_types: ["Symptom"]}
    SET PROPOSITIONS { ("belongs_to_domain", ?medicine) } }
  CONCEPT ?causes { {type: "$PropositionType", name: "causes"}
    SET ATTRIBUTES {description: "Drug causes symptom", subject_types: ["Drug"],
                    object_types: ["Symptom"]}
    SET PROPOSITIONS { ("belongs_to_domain", ?medicine) } }
  CONCEPT ?claim { {type: "$PropositionType", name: "stated_by"}
    SET ATTRIBUTES {description: "Who asserted a fact", subject_types: ["*"],
                    object_types: ["Person"]} }
} WITH METADATA {source: "test-schema", confidence: 1.0}
"""

_WORDS = ["alpha", "beta", "gamma", "délta", "ε", "zeta \"quoted\"", "line\nbreak", "tab\t",
          "back\\slash", "emoji 🧪", "", "null", "true", "{not: json}", "// not a comment"]


def _value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 2 else 6)
    if kind == 0:
        return rng.randrange(-10**12, 10**12)
    if kind == 1:
        return round(rng.uniform(-1000, 1000), rng.randrange(0, 6))
    if kind == 2:
        return rng.choice(_WORDS) + str(rng.randrange(100))
    if kind == 3:
        return rng.random() < 0.5
    if kind == 4:
        return None
    if kind == 5:
        return float(rng.randrange(10))          # 3.0 must stay a float
    if kind == 6:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {f"k{i}": _value(rng, depth + 1) for i in range(rng.randrange(4))} | (
        {"weird key": 1} if rng.random() < 0.2 else {})


def build_graph(path: str | os.PathLike, concepts: int = 10_000, seed: int = 7) -> dict:
    """A bootstrapped database with `concepts` Drug/Symptom/Person concepts, about two
    links per concept, varied attribute and metadata values, and higher-order links."""
    from nexus.ops.bulk_import import bulk_import
    rng = random.Random(seed)
    with Nexus.open(str(path)) as nx:
        r = nx.execute_kip({"command": SCHEMA})
        assert "result" in r, r
        items, keys = [], []
        for i in range(concepts):
            t = ("Drug", "Symptom", "Person")[i % 3]
            # every 5th concept carries rich values; the rest stay small, so that loading
            # the export (a KIP parse of every token) stays quick
            rich = i % 5 == 0
            attributes = ({f"a{j}": _value(rng) for j in range(rng.randrange(4))} if rich
                          else {"n": i} if i % 2 else {})
            if t == "Person":
                attributes["person_class"] = "Human"
            metadata = {"source": f"gen-{i % 17}"} if i % 4 == 0 else {}
            if rich:
                metadata["confidence"] = round(rng.random(), 3)
                if rng.random() < 0.3:
                    metadata["tags"] = [_value(rng, 2) for _ in range(2)]
            name = f"{t.lower()}-{i}" + ("" if i % 11 else " «ünï» \"q\"")
            items.append({"type": t, "name": name, "attributes": attributes,
                          "metadata": metadata})
            keys.append((t, name))
        drugs = [k for k in keys if k[0] == "Drug"]
        symptoms = [k for k in keys if k[0] == "Symptom"]
        links, seen = [], set()
        while len(links) < concepts // 2:
            s, o, p = rng.choice(drugs), rng.choice(symptoms), rng.choice(["treats", "causes"])
            if (s, p, o) in seen:
                continue
            seen.add((s, p, o))
            link: dict[str, Any] = {"subject": {"type": s[0], "name": s[1]}, "predicate": p,
                                    "object": {"type": o[0], "name": o[1]}}
            if rng.random() < 0.25:
                link["metadata"] = {"confidence": round(rng.random(), 2)}
            if rng.random() < 0.1:
                link["attributes"] = {"note": _value(rng)}
            links.append(link)
        counts = bulk_import(nx, items, links)
        # higher-order links: who stated some of the facts, and a statement about a statement
        people = [k for k in keys if k[0] == "Person"][:30]
        for i, link in enumerate(links[:30]):
            r = nx.execute_kip({"command": """
                UPSERT { PROPOSITION ?claim {
                  (({type: :st, name: :sn}, :p, {type: :ot, name: :on}),
                   "stated_by", {type: "Person", name: :who})
                  SET ATTRIBUTES {weight: :w} } WITH METADATA {source: "higher-order"} }""",
                "parameters": {"st": link["subject"]["type"], "sn": link["subject"]["name"],
                               "p": link["predicate"], "ot": link["object"]["type"],
                               "on": link["object"]["name"], "who": people[i][1],
                               "w": i / 7}})
            assert "result" in r, r
        r = nx.execute_kip({"command": """
            UPSERT { PROPOSITION ?meta {
              ((({type: :st, name: :sn}, :p, {type: :ot, name: :on}), "stated_by",
                {type: "Person", name: :who}), "stated_by", {type: "Person", name: "$self"}) } }
            """, "parameters": {"st": links[0]["subject"]["type"],
                                "sn": links[0]["subject"]["name"], "p": links[0]["predicate"],
                                "ot": links[0]["object"]["type"],
                                "on": links[0]["object"]["name"], "who": people[0][1]}})
        assert "result" in r, r
        # $self evolves (allowed attributes and metadata)
        r = nx.execute_kip({"command": 'UPSERT { CONCEPT ?s { {type: "Person", name: "$self"} '
                            'SET ATTRIBUTES {persona: "curious", strengths: ["tests"]} } '
                            'WITH METADATA {reviewed: true} }'})
        assert "result" in r, r
        return counts
