"""Fixtures every test directory may use: the session's PostgreSQL server (`pg_server`) and a
fresh database per test module (`pg_database`), from `tests/pgtest.py`; started only when a
test asks for them, skipped when the `postgres` extra is not installed."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from pgtest import pg_database, pg_server, pytest_sessionfinish  # noqa: E402,F401
