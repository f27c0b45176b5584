"""The PostgreSQL backend's tables (see `pg_store` for why they look like this).

Every table leads with `space` (the distribution key). Names and symbol texts are `bytea`
(UTF-8; KIP names may hold a NUL, which `text` refuses), with `name_key`/`tkey` the
short-or-hashed key form of `codec.text_key` so that a unique index holds names of any
length. Attribute and metadata maps are `bytea` in the engine's own encoding
(`codec.encode_map`): every value KIP accepts round-trips exactly (jsonb would refuse
`\\u0000` and reorder keys); jsonb copies for filter pushdown are future work.
"""
from __future__ import annotations

from typing import Any

import psycopg
from psycopg import errors as pgerr

FORMAT = "nexus-pg-1"

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS nexus_meta (
        space text NOT NULL, serial bigint NOT NULL, max_id bigint NOT NULL,
        max_sym bigint NOT NULL, format text NOT NULL, PRIMARY KEY (space))""",
    """CREATE TABLE IF NOT EXISTS nexus_symbols (
        space text NOT NULL, id bigint NOT NULL, text bytea NOT NULL, tkey bytea NOT NULL,
        PRIMARY KEY (space, id), UNIQUE (space, tkey))""",
    """CREATE TABLE IF NOT EXISTS nexus_concepts (
        space text NOT NULL, id bigint NOT NULL, type_id bigint NOT NULL,
        name bytea NOT NULL, name_key bytea NOT NULL, attributes bytea, metadata bytea,
        PRIMARY KEY (space, id), UNIQUE (space, type_id, name_key))""",
    """CREATE INDEX IF NOT EXISTS nexus_concepts_type ON nexus_concepts (space, type_id, id)""",
    """CREATE INDEX IF NOT EXISTS nexus_concepts_name ON nexus_concepts (space, name_key, id)""",
    """CREATE TABLE IF NOT EXISTS nexus_links (
        space text NOT NULL, id bigint NOT NULL, subject bigint NOT NULL,
        predicate bigint NOT NULL, object bigint NOT NULL, attributes bytea, metadata bytea,
        PRIMARY KEY (space, id), UNIQUE (space, subject, predicate, object))""",
    """CREATE INDEX IF NOT EXISTS nexus_links_ops
        ON nexus_links (space, object, predicate, subject, id)""",
    """CREATE INDEX IF NOT EXISTS nexus_links_pso
        ON nexus_links (space, predicate, subject, object, id)""",
    """CREATE TABLE IF NOT EXISTS nexus_stats (
        space text NOT NULL, key text NOT NULL, n bigint NOT NULL, PRIMARY KEY (space, key))""",
    """CREATE TABLE IF NOT EXISTS nexus_aux (
        space text NOT NULL, tbl text NOT NULL, k bytea NOT NULL, v bytea NOT NULL,
        PRIMARY KEY (space, tbl, k))""",
)

INIT_SPACE = ("INSERT INTO nexus_meta (space, serial, max_id, max_sym, format) "
              "VALUES (%s, 0, 0, 0, %s) ON CONFLICT (space) DO NOTHING")
LOCK_SPACE = ("UPDATE nexus_meta SET serial = serial + 1 WHERE space = %s "
              "RETURNING serial, max_id, max_sym")

# A write transaction plans each prepared statement once (psycopg prepares a statement on
# its 5th run): with the default `auto` mode PostgreSQL kept re-planning the command's
# statements over `unnest` of array parameters at every run (a custom plan looked cheaper
# than the generic one), ~40% of a single write's server CPU. The write's statements are
# key lookups and writes whose best plan does not depend on the values; readers keep
# `auto` (a pattern's join order may). Transaction-local: the pooled connection goes back
# to a reader unchanged.
GENERIC_PLANS = "SET LOCAL plan_cache_mode = force_generic_plan"
# A write transaction's first statement after BEGIN: LOCK_SPACE with GENERIC_PLANS folded in
# (`set_config(..., true)` is SET LOCAL; it takes effect for the statements after it).
LOCK_SPACE_GENERIC = ("UPDATE nexus_meta SET serial = serial + 1 WHERE space = %s "
                      "RETURNING serial, max_id, max_sym, "
                      "set_config('plan_cache_mode', 'force_generic_plan', true)")
BEGIN_WRITE = "BEGIN ISOLATION LEVEL READ COMMITTED"


def lock_statement(conn: psycopg.Connection[Any]) -> str:
    """The lock statement of a write transaction on this server: LOCK_SPACE_GENERIC where
    the server has `plan_cache_mode` (PostgreSQL 12+), plain LOCK_SPACE where it has not —
    setting an unknown parameter is an error that would abort every write (YugabyteDB's
    PostgreSQL 11 base; docs/scale.md)."""
    row = conn.execute("SELECT current_setting('plan_cache_mode', true)").fetchone()
    return LOCK_SPACE if row is None or row[0] is None else LOCK_SPACE_GENERIC

DUMP = {
    "meta": "SELECT max_id, max_sym, format FROM nexus_meta WHERE space = %s",
    "symbols": "SELECT id, text, tkey FROM nexus_symbols WHERE space = %s ORDER BY id",
    "concepts": "SELECT id, type_id, name, name_key, attributes, metadata FROM nexus_concepts "
                "WHERE space = %s ORDER BY id",
    "links": "SELECT id, subject, predicate, object, attributes, metadata FROM nexus_links "
             "WHERE space = %s ORDER BY id",
    "stats": "SELECT key, n FROM nexus_stats WHERE space = %s ORDER BY key",
    "aux": "SELECT tbl, k, v FROM nexus_aux WHERE space = %s ORDER BY tbl, k",
}


def create_tables(conn: psycopg.Connection[Any]) -> None:
    """Create the tables and indexes that are missing. Two processes creating the schema at
    once may collide in the catalog: retried."""
    for attempt in range(3):
        try:
            for ddl in SCHEMA:
                conn.execute(ddl)
            return
        except (pgerr.UniqueViolation, pgerr.DuplicateTable, pgerr.DuplicateObject):
            if attempt == 2:
                raise


def ensure(conn: psycopg.Connection[Any], space: str) -> None:
    """Create the tables (if missing) and the space's meta row; refuse a foreign format."""
    create_tables(conn)
    conn.execute(INIT_SPACE, (space, FORMAT))
    row = conn.execute("SELECT format FROM nexus_meta WHERE space = %s", (space,)).fetchone()
    if row is None or row[0] != FORMAT:
        from nexus.errors import ErrorCode, KipError
        raise KipError(ErrorCode.KIP_4003, f"the database holds nexus tables of another "
                       f"format ({row[0] if row else None!r}, expected {FORMAT!r})",
                       "Use a database (or space) made by this version of nexus.")
