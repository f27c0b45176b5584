"""An install without the `postgres` extra (the README's first command, `pip install .`)
opens an LMDB database and answers SEARCH: no module loaded for every backend may import
psycopg. Run in a child process where psycopg cannot be imported."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import json, sys
sys.modules["psycopg"] = None          # `import psycopg` now raises ImportError
from nexus import Nexus
with Nexus.open(sys.argv[1]) as nx:
    nx.execute_kip({"command": 'UPSERT { CONCEPT ?p { {type: "Person", name: "Ada"} '
                               'SET ATTRIBUTES { person_class: "Human" } } }'})
    out = nx.execute_kip_readonly({"command": 'SEARCH CONCEPT "Ada" LIMIT 1'})
print(json.dumps([h["name"] for h in out["result"]]))
"""


def test_an_lmdb_database_opens_and_searches_without_psycopg(tmp_path):
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "db")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["Ada"]
