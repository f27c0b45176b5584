"""A real PostgreSQL for the tests, from what pip installs (the `postgres` extra: `pgserver`
ships PostgreSQL 16 with pgvector in its wheel; `psycopg` talks to it).

One server per test session, started on first use (`pg_server` fixture), listening on a
unix socket in a temporary directory only; a fresh database per test module
(`pg_database`, a `postgresql://` URL) or per call (`PgServer.fresh_database`). PostgreSQL
refuses to run as root (CI runs as root): pgserver then runs initdb and the server as the
unprivileged system user `pgserver` (creating it with useradd), on a data directory that
user owns. The server is stopped, and its directory removed, at the session's end.

Tests skip only when the extra is not installed (`pytest.importorskip`). Standard library
and the extra only, so scripts (bench) can use `PgServer` too.
"""
from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import threading
from typing import Any, Iterator
from urllib.parse import quote

import pytest


class PgServer:
    """A running PostgreSQL server owned by this process (see the module doc)."""

    def __init__(self, fast: bool = True) -> None:
        os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())
        import pgserver                     # the postgres extra
        self.dir = tempfile.mkdtemp(prefix="nexus-pg-")
        os.chmod(self.dir, 0o755)
        self._server: Any = pgserver.get_server(self.dir, cleanup_mode="delete")
        info = self._server.get_postmaster_info()
        self.socket_dir = str(info.socket_dir)
        self.user = "postgres"
        self._names = itertools.count(1)
        self._lock = threading.Lock()
        if fast:    # a throwaway server: no fsync (the tests' commits wait for no disk)
            for setting in ("fsync = off", "synchronous_commit = off",
                            "full_page_writes = off"):
                self.sql(f"ALTER SYSTEM SET {setting}")
            self.sql("SELECT pg_reload_conf()")

    def url(self, dbname: str = "postgres", **params: str) -> str:
        """The `postgresql://` URL of a database of this server (over its unix socket)."""
        query = "&".join([f"host={quote(self.socket_dir, safe='/')}",
                          *(f"{k}={quote(v)}" for k, v in params.items())])
        return f"postgresql://{self.user}@/{dbname}?{query}"

    def sql(self, statement: str, dbname: str = "postgres") -> list[tuple[Any, ...]]:
        """Run one statement (autocommit) and return its rows."""
        import psycopg
        with psycopg.connect(self.url(dbname), autocommit=True) as conn:
            cur = conn.execute(statement)
            return cur.fetchall() if cur.description else []

    def fresh_database(self, prefix: str = "t") -> str:
        """Create an empty database and return its URL."""
        with self._lock:
            name = f"{prefix}_{os.getpid()}_{next(self._names)}"
        self.sql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def pid(self) -> int:
        """The postmaster's process id (bench: the server's CPU time)."""
        return int(self._server.get_pid())

    def stop(self) -> None:
        try:
            self._server.cleanup()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


_SERVER: PgServer | None = None
_START = threading.Lock()


def shared_server() -> PgServer:
    """The session's server (started on first call; stopped by `stop_shared_server`)."""
    global _SERVER
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    pytest.importorskip("pgserver", reason="the postgres extra is not installed")
    with _START:
        if _SERVER is None:
            _SERVER = PgServer()
        return _SERVER


def stop_shared_server() -> None:
    global _SERVER
    with _START:
        if _SERVER is not None:
            _SERVER.stop()
            _SERVER = None


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    yield shared_server()


@pytest.fixture(scope="module")
def pg_database(pg_server: PgServer) -> str:
    """A fresh database for this test module: its `postgresql://` URL."""
    return pg_server.fresh_database("m")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    stop_shared_server()
