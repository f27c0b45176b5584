"""Defaults and fixtures of the whole test suite.

Test databases open without a semantic embedder: `NEXUS_SEMANTIC=none` is the default of
`Nexus.open(..., semantic=...)` (nexus/config.py) here and in every `kip` process a test
starts (they inherit the environment). Building WordLlama's vector index for each of the
suite's databases dominated its run time, and almost no test searches by meaning. The tests
of SEARCH MODE "semantic" / "hybrid", of the embedder recorded per database and of
`kip reindex --semantic` ask for WordLlama themselves (tests/search/test_modes.py,
test_paraphrases.py). `NEXUS_SEMANTIC=auto pytest` runs the suite with the product default.

Fixtures every test directory may use: the session's PostgreSQL server (`pg_server`) and a
fresh database per test module (`pg_database`), from `tests/pgtest.py`; started only when a
test asks for them, skipped when the `postgres` extra is not installed.

`pytest` runs on every core (pytest-xdist; `pytest -n 0` in one process): see
tests/parallel.py. A test must therefore not depend on another test's files, ports or
environment: tmp_path, `--port 0`, monkeypatch.
"""
from __future__ import annotations

import os
import sys

os.environ.setdefault("NEXUS_SEMANTIC", "none")

sys.path.insert(0, os.path.dirname(__file__))

from pgtest import pg_database, pg_server, pytest_sessionfinish  # noqa: E402,F401
from parallel import (  # noqa: E402,F401
    pytest_cmdline_main, pytest_collection_modifyitems, pytest_xdist_make_scheduler)
