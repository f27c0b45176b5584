"""How `pytest` spreads the suite over the machine's cores (pytest-xdist, the `test` extra).

A plain `pytest` runs on every core (`-n auto`): the suite spends much of its time waiting
on subprocesses, fsync and servers, and one core left the other idle. `pytest -n 0` (or
`-p no:xdist`, or `--pdb`) runs in one process as before; `pytest -n 4` picks the count.
This is a hook rather than `-n auto` in `addopts` so that `-p no:xdist` keeps working.

Work is handed out a test module at a time, so module and session fixtures are built once
per worker (each worker is a separate process with its own session: its own temporary
directory, its own PostgreSQL server from tests/pgtest.py). The `.kiptest` cases, one
module of several thousand tests, go out one case file at a time.

Longest first: a worker asks for the next module when it is nearly done with its own, so
handing the modules out by decreasing duration makes the two workers finish together (the
last modules out are the short ones). The durations are `COST` below (seconds, measured
sequentially); a module not listed counts as `SLOW_DEFAULT` when it holds a test marked
`slow`, else as 0 (collection order among those). To refresh `COST`: `pytest -n 0
--durations=0 -q` and add up setup, call and teardown per module.
"""
from __future__ import annotations

import os
from typing import Any

import pytest

CASES = "tests/cases/test_cases.py::test_case["

# Seconds per module, one process (notes/durations.log of 2026-11-28 07:22, adjusted for the
# changes since: the fuzz strategies built once, test_exit's smaller load, the in-process
# kip commands of the spaces and capsule tests). Modules under ~4 s are left out.
COST = {
    "tests/spaces/test_spaces_http.py": 75,
    "tests/reliability/test_storage_faults.py": 74,
    "tests/syntax/test_fastparse.py": 70,
    "tests/docs/test_docs_run.py": 62,
    "tests/reliability/test_hostile.py": 53,
    "tests/spaces/test_spaces_clients.py": 45,
    "tests/shell/test_shell_habits.py": 39,
    "tests/reliability/test_crash.py": 38,
    "tests/reliability/test_hardening.py": 35,
    "tests/store/test_owner_lock.py": 32,
    "tests/bootstrap/test_rc11_capsules.py": 30,
    "tests/kml/test_protect.py": 29,
    "tests/shell/test_shell_tty.py": 28,
    "tests/reliability/test_check.py": 28,
    "tests/history/test_history_properties.py": 24,
    "tests/durability/test_sigkill.py": 21,
    "tests/reliability/test_limits.py": 21,
    "tests/store/test_wal.py": 20,
    "tests/syntax/test_parser_fuzz.py": 16,
    "tests/bench/test_bench_smoke.py": 15,
    "tests/search/test_index.py": 15,
    "tests/cli/test_export_roundtrip.py": 14,
    "tests/shell/test_shell_piped.py": 14,
    "tests/reliability/test_soak.py": 13,
    "tests/kql/test_differential.py": 12,
    "tests/server/test_lifecycle.py": 12,
    "tests/postgresql/test_pg_spaces.py": 11,
    "tests/cli/test_progress.py": 11,
    "tests/store/test_store_bulk.py": 11,
    "tests/reliability/test_access.py": 11,
    "tests/postgresql/test_pg_serve.py": 10,
    "tests/cli/test_cli.py": 9,
    "tests/reliability/test_exit.py": 8,
    "tests/spaces/test_churn.py": 8,
    "tests/kml/test_export_roundtrip.py": 7,
    "tests/postgresql/test_pg_search.py": 7,
    "tests/store/test_store_txn.py": 7,
    "tests/store/test_store_values.py": 7,
    "tests/store/test_store_elements.py": 7,
    "tests/bootstrap/test_bulk_import.py": 6,
    "tests/kml/test_transactions.py": 5,
    "tests/syntax/test_spec_examples.py": 5,
    "tests/history/test_history_sweep.py": 5,
    "tests/shell/test_shell_units.py": 5,
    "tests/meta/test_describe.py": 4,
}
SLOW_DEFAULT = 30


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """`-n auto` unless the command line chose (`-n N`, `--dist`, `--pdb`) or xdist is off."""
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return
    option = config.option
    if (getattr(option, "numprocesses", 0) is not None or option.dist != "no"
            or getattr(option, "tx", None) or config.getoption("usepdb", False)
            or config.getoption("trace", False) or os.environ.get("PYTEST_XDIST_WORKER")):
        return
    option.numprocesses = "auto"
    option.dist = "loadscope"
    option.loadscopereorder = False     # our order (pytest_collection_modifyitems) stands


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.option.dist != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(CASES):        # one unit per .kiptest file
                return CASES + nodeid[len(CASES):].partition(":")[0]
            return nodeid.split("::", 1)[0]

    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules by decreasing `COST` (stable: the order inside a module is kept). Every worker
    collects and sorts alike, as xdist requires."""
    slow = {item.nodeid.split("::", 1)[0] for item in items
            if item.get_closest_marker("slow") is not None}

    def cost(item: pytest.Item) -> int:
        module = item.nodeid.split("::", 1)[0]
        return COST.get(module, SLOW_DEFAULT if module in slow else 0)
    items.sort(key=lambda item: -cost(item))
