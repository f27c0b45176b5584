"""The PostgreSQL backend's table check: the statistics and counters against the rows.

Owns `check_tables` (behind `PgStore.check_tables`, what `kip check` runs): the indexes are
the database's own, so what can drift is what the write transaction keeps beside the rows
(`pg_write`): the per-type and per-predicate counts and the id and symbol counters.
"""
from __future__ import annotations

from typing import Any

from nexus.store.pg_conn import internal
from nexus.store.pg_txn import ST_CONCEPTS, ST_LINKS, PgReadTxn, pred_key, type_key
from nexus.store.pg_write import PgWriteTxn
from nexus.store.protocol import TableCheck


def check_tables(txn: PgReadTxn, examples: int = 5, repair: bool = False) -> TableCheck:
    """The statistics and counters against the rows (the indexes are the database's own):
    `stats_drift` (a count that differs from the rows), `max_id_behind`, `max_sym_behind`,
    `dangling_links` (an end that is no element). A repair (in the write transaction)
    rewrites the statistics and raises the counters."""
    if repair and not isinstance(txn, PgWriteTxn):
        raise internal("a repair needs the store's write transaction")
    sp = txn.space
    actual: dict[str, int] = {}
    for t, k in txn.rows("SELECT type_id, count(*) FROM nexus_concepts WHERE space = %s "
                         "GROUP BY type_id", (sp,)):
        actual[type_key(t)] = int(k)
    for p, k in txn.rows("SELECT predicate, count(*) FROM nexus_links WHERE space = %s "
                         "GROUP BY predicate", (sp,)):
        actual[pred_key(p)] = int(k)
    actual[ST_CONCEPTS] = sum(v for k, v in actual.items() if k.startswith("t:"))
    actual[ST_LINKS] = sum(v for k, v in actual.items() if k.startswith("p:"))
    stored = {k: int(n) + txn.pending_stats().get(k, 0)
              for k, n in txn.rows("SELECT key, n FROM nexus_stats WHERE space = %s", (sp,))}
    drift = sorted(k for k in set(actual) | set(stored) if actual.get(k, 0) != stored.get(k, 0))
    top = txn.one("SELECT (SELECT coalesce(max(id), 0) FROM nexus_concepts WHERE space = %s), "
                  "(SELECT coalesce(max(id), 0) FROM nexus_links WHERE space = %s), "
                  "(SELECT coalesce(max(id), 0) FROM nexus_symbols WHERE space = %s)",
                  (sp, sp, sp))
    assert top is not None
    max_el, max_sym = max(int(top[0]), int(top[1])), int(top[2])
    counters = txn.one("SELECT max_id, max_sym FROM nexus_meta WHERE space = %s", (sp,))
    max_id0, max_sym0 = (int(counters[0]), int(counters[1])) if counters else (0, 0)
    if isinstance(txn, PgWriteTxn):
        max_id0, max_sym0 = txn.max_id(), txn.max_sym()
    dangling = txn.rows(
        "SELECT l.id FROM nexus_links l WHERE l.space = %s AND ("
        "NOT EXISTS (SELECT 1 FROM nexus_concepts c WHERE c.space = l.space AND c.id = l.subject)"
        " AND NOT EXISTS (SELECT 1 FROM nexus_links m WHERE m.space = l.space AND "
        "m.id = l.subject) OR NOT EXISTS (SELECT 1 FROM nexus_concepts c WHERE "
        "c.space = l.space AND c.id = l.object) AND NOT EXISTS (SELECT 1 FROM nexus_links m "
        "WHERE m.space = l.space AND m.id = l.object)) ORDER BY l.id LIMIT 1000", (sp,))
    report: dict[str, Any] = {
        "stats_drift": len(drift), "max_id_behind": int(max_id0 < max_el),
        "max_sym_behind": int(max_sym0 < max_sym), "dangling_links": len(dangling),
        "elements": actual[ST_CONCEPTS] + actual[ST_LINKS], "concepts": actual[ST_CONCEPTS],
        "links": actual[ST_LINKS],
        "symbols": int((txn.one("SELECT count(*) FROM nexus_symbols WHERE space = %s",
                                (sp,)) or (0,))[0]),
    }
    report["ok"] = not any(report[k] for k in ("stats_drift", "max_id_behind",
                                                "max_sym_behind", "dangling_links"))
    report["examples"] = {k: v for k, v in {
        "stats_drift": [f"{k}: stored {stored.get(k, 0)}, counted {actual.get(k, 0)}"
                        for k in drift[:examples]],
        "dangling_links": [f"link {r[0]}" for r in dangling[:examples]],
    }.items() if v}
    fixes = 0
    if repair and isinstance(txn, PgWriteTxn):
        fixes = txn.repair(drift, actual, stored, max_el, max_sym)
    return TableCheck(report, fixes)
