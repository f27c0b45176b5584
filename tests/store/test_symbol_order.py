"""Symbol ids do not depend on the process's hash seed.

Type and predicate names are interned as small integers in the order they are first used.
Two processes that load the same data must give every name the same id, whatever their
PYTHONHASHSEED: ids order ties in answers and are part of the stored bytes, so a database
rebuilt from the same data must come out the same. A bulk import once interned the types of
a chunk in the iteration order of a set of strings, which changes with the seed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

TYPES = ["Tulip", "Anchor", "Zephyr", "Maple", "Cobalt", "Quartz", "Ember", "Lotus"]
PREDICATES = ["grows_near", "anchors", "drifts_to", "shades", "tints", "sparks"]

SCRIPT = textwrap.dedent("""
    import json, sys
    from nexus import Nexus
    types, preds = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    nx = Nexus.open(None, semantic="none")
    schema = "UPSERT {" + "".join(
        f'CONCEPT {{ {{type: "$ConceptType", name: "{t}"}} '
        f'SET ATTRIBUTES {{ description: "t" }} }}' for t in types) + "".join(
        f'CONCEPT {{ {{type: "$PropositionType", name: "{p}"}} SET ATTRIBUTES {{ '
        f'description: "p", subject_types: ["*"], object_types: ["*"] }} }}'
        for p in preds) + "}"
    assert "error" not in nx.execute_kip({"command": schema}), "schema"
    concepts = [{"type": t, "name": f"{t}-{i}"} for i in range(3) for t in types]
    links = [{"subject": {"type": types[k % len(types)], "name": f"{types[k % len(types)]}-0"},
              "predicate": p,
              "object": {"type": types[(k + 1) % len(types)],
                         "name": f"{types[(k + 1) % len(types)]}-1"}}
             for k, p in enumerate(preds)]
    nx.bulk_import(concepts, links)
    with nx.read_session() as ctx:
        print(json.dumps({name: ctx.txn.symbol_id(name) for name in types + preds}))
""")


def symbol_ids(seed: str) -> dict[str, int]:
    env = dict(os.environ, PYTHONHASHSEED=seed)
    out = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(TYPES),
                          json.dumps(PREDICATES)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_bulk_import_interns_names_in_first_use_order_whatever_the_hash_seed():
    runs = [symbol_ids(seed) for seed in ("0", "1", "2", "3")]
    assert all(r == runs[0] for r in runs[1:])
    ids = runs[0]
    # Interned on first use, in the order the data first uses them.
    assert [ids[t] for t in TYPES] == sorted(ids[t] for t in TYPES)
    assert [ids[p] for p in PREDICATES] == sorted(ids[p] for p in PREDICATES)
