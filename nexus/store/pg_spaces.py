"""The spaces of one PostgreSQL database, for `kip serve --spaces postgresql://…` and
`kip space … --spaces postgresql://…`: which spaces exist, a new space as a copy of a
template space, and dropping a space.

Every table leads with `space` (`pg_schema`), so a space is its rows: listing reads
`nexus_meta` (one row per space), a copy is one `INSERT … SELECT` per table in one
transaction (a space is never seen half copied; two processes creating the same space at
once: the first commits, the second finds its meta row and copies nothing), and a drop is
one `DELETE` per table in one transaction. The tables are read from the database's catalog
(every `nexus_*` table with a `space` column), so a table added to the schema is copied and
dropped too. Template spaces are named `TEMPLATE_PREFIX` + a key, which no space name can
be: they never show up as spaces.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg

from nexus.store import pg_schema
from nexus.store.pg_conn import TEMPLATE_PREFIX, PgLocation, call
from nexus.store.pg_names import space_index_tag

T = TypeVar("T")
log = logging.getLogger(__name__)

_TABLES = ("SELECT table_name, column_name FROM information_schema.columns "
           "WHERE table_schema = current_schema() AND table_name LIKE 'nexus\\_%' "
           "ORDER BY table_name, ordinal_position")


def with_space(url: str, space: str) -> str:
    """`url` (a `postgresql://` URL) naming space `space` (its `space=` parameter replaced
    or added; everything else, password included, kept)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
             if k != "space"]
    query.append(("space", space))
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query, safe="/:"),
                       parts.fragment))


class PgSpaces:
    """The spaces of the database at `url` (its own `space=` parameter, if any, is ignored)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.where = PgLocation(url.partition("://")[2])
        self.shown = self.where.shown
        self._tables = False            # created (if missing) by this object's first call

    def _run(self, work: Callable[[psycopg.Connection[Any]], T], *, writing: bool = False
             ) -> T:
        def go() -> T:
            with psycopg.connect(self.where.conninfo, autocommit=True) as conn:
                if not self._tables:    # its DDL once per object, not on every lookup
                    pg_schema.create_tables(conn)
                    self._tables = True
                if not writing:
                    return work(conn)
                with conn.transaction():
                    return work(conn)
        return call(go, self.where, writing=writing)

    def names(self, *, templates: bool = False) -> list[str]:
        """The spaces in the database, sorted (templates only with `templates`)."""
        rows = self._run(lambda c: c.execute(
            "SELECT space FROM nexus_meta ORDER BY space").fetchall())
        return [r[0] for r in rows if r[0].startswith(TEMPLATE_PREFIX) == templates]

    def exists(self, space: str) -> bool:
        return self._run(lambda c: c.execute(
            "SELECT 1 FROM nexus_meta WHERE space = %s", (space,)).fetchone() is not None)

    def copy(self, source: str, target: str) -> bool:
        """Copy space `source` to a new space `target`, in one transaction; False (nothing
        copied) if `target` exists."""
        def work(conn: psycopg.Connection[Any]) -> bool:
            columns = _columns(conn)
            meta = columns.pop("nexus_meta")
            if not _copy_rows(conn, "nexus_meta", meta, source, target, guard=True):
                return False
            for table, cols in columns.items():
                _copy_rows(conn, table, cols, source, target)
            return True
        return self._run(work, writing=True)

    def drop(self, space: str) -> bool:
        """Delete every row of `space`, in one transaction; False if it did not exist. Then
        the indexes of that space alone (SEARCH's partial HNSW indexes, named with
        `space_index_tag`) are dropped too."""
        def work(conn: psycopg.Connection[Any]) -> bool:
            existed = False
            for table in _columns(conn):
                cur = conn.execute(f'DELETE FROM "{table}" WHERE space = %s', (space,))
                existed = existed or (table == "nexus_meta" and cur.rowcount > 0)
            return existed
        existed = self._run(work, writing=True)
        self._run(lambda conn: _drop_space_indexes(conn, space))
        return existed


def _drop_space_indexes(conn: psycopg.Connection[Any], space: str) -> None:
    # After the rows' transaction and CONCURRENTLY (which cannot run inside one): a plain
    # DROP INDEX would lock the whole table, every other space's SEARCH and writes with it.
    # An index left by a failure is empty and harmless; the next drop of the name retries.
    rows = conn.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
        "AND tablename LIKE 'nexus\\_%%' AND indexname LIKE %s",
        ("nexus\\_%\\_" + space_index_tag(space) + "\\_%",)).fetchall()
    for (name,) in rows:
        try:
            conn.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
        except psycopg.Error as exc:
            log.warning("spaces: the index %s of the dropped space was left (%s)", name,
                        str(exc).splitlines()[0])


def _columns(conn: psycopg.Connection[Any]) -> dict[str, list[str]]:
    """The `nexus_*` tables that have a `space` column, with their columns in order."""
    tables: dict[str, list[str]] = {}
    for table, column in conn.execute(_TABLES).fetchall():
        tables.setdefault(table, []).append(column)
    return {t: cols for t, cols in tables.items() if "space" in cols}


def _copy_rows(conn: psycopg.Connection[Any], table: str, columns: list[str], source: str,
               target: str, *, guard: bool = False) -> bool:
    names = ", ".join(f'"{c}"' for c in columns)
    chosen = ", ".join("%s" if c == "space" else f'"{c}"' for c in columns)
    sql = f'INSERT INTO "{table}" ({names}) SELECT {chosen} FROM "{table}" WHERE space = %s'
    if guard:       # the meta row: the space's existence, and the lock on its name
        sql += " ON CONFLICT (space) DO NOTHING"
    cur = conn.execute(sql, (target, source))
    return cur.rowcount > 0
