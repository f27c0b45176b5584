"""What the KQL test modules share besides fixtures: the stores and FIND executors every
language test runs under, `open_db`, and the generated graphs.

It lives outside conftest.py because test modules import it by name, and every test
directory has a conftest.py: `from conftest import ...` would pick whichever was imported first.
"""
from __future__ import annotations

from pathlib import Path

from nexus.api import Nexus

STORES = ("lmdb", "memory")
# The two FIND executors every language test runs under: the row path and the columnar
# path forced on for every group (`auto` picks one of them per execution).
MODES = ("never", "always")


def open_db(store: str, tmp_dir: Path | None, **options) -> Nexus:
    options.setdefault("bootstrap", False)
    if store == "memory":
        return Nexus.open(None, **options)
    assert tmp_dir is not None
    options.setdefault("durable", False)
    return Nexus.open(str(tmp_dir), **options)


# --- generated graphs (too big or too regular for a data file) ---------------------------

def gen_wide(nx: Nexus, n: int = 3000) -> None:
    """`n` concepts of type Node named w0..w{n-1}, each `next` → the following one."""
    with nx.store.write() as t:
        tid = t.intern("Node")
        pid = t.intern("next")
        ids = []
        for i in range(n):
            k = t.new_id()
            t.create_concept(k, tid, f"w{i}", {"i": i, "pad": "a" * 30}, {})
            ids.append(k)
        for a, b in zip(ids, ids[1:]):
            t.create_link(t.new_id(), a, pid, b, {}, {})


GENERATED = {"wide": gen_wide}


