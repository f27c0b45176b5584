"""A program that exits without closing its Nexus ends cleanly: exit status 0, nothing on
stderr, the data there on the next open (the vector indexer's thread stops at exit; before,
a busy indexer ended such a program with "terminate called without an active exception")."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from nexus import Nexus

SCRIPT = textwrap.dedent('''
    import sys
    from nexus import Nexus
    nx = Nexus.open(sys.argv[1])
    N = int(sys.argv[2])
    nx.execute_kip({"command": 'UPSERT { CONCEPT ?t { {type: "$ConceptType", name: "Item"} '
                   'SET ATTRIBUTES { description: "i" } } CONCEPT ?p { {type: '
                   '"$PropositionType", name: "next"} SET ATTRIBUTES { description: "n" } } }'})
    nx.bulk_import(({"type": "Item", "name": f"item{i}"} for i in range(N)),
                   ({"subject": {"type": "Item", "name": f"item{i}"}, "predicate": "next",
                     "object": {"type": "Item", "name": f"item{i + 1}"}} for i in range(N - 1)))
    nx.execute_kip({"command": 'UPDATE ?l SET METADATA { s: 1 } WHERE { ?l (?a, "next", ?b) }'})
    print("done")                                   # and exit, never calling close()
''')

# One bulk-import transaction either way (its batch is 1M items); 20,000 items cost 18 s of
# CPU where 3,000 take 3 s and go through the same code.
ITEMS = 3000


@pytest.mark.slow
def test_exit_without_close_is_clean(tmp_path):
    db = tmp_path / "db"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(db), str(ITEMS)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "done"
    assert "terminate called" not in proc.stderr and "Traceback" not in proc.stderr
    with Nexus.open(str(db)) as nx:
        count = nx.execute_kip({"command": 'FIND(COUNT(?l)) WHERE { ?l (?a, "next", ?b) }'})
        assert count["result"] == ITEMS - 1
