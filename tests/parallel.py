"""How `pytest` spreads the suite over the machine's cores (pytest-xdist, the `test` extra).

A plain `pytest` runs on every core (`-n auto`): the suite spends much of its time waiting
on subprocesses, fsync and servers, and one core left the other idle. `pytest -n 0` (or
`-p no:xdist`, or `--pdb`) runs in one process as before; `pytest -n 4` picks the count.
This is a hook rather than `-n auto` in `addopts` so that `-p no:xdist` keeps working.

Work is handed out a test module at a time, so module and session fixtures are built once
per worker (each worker is a separate process with its own session: its own temporary
directory, its own PostgreSQL server from tests/pgtest.py). The `.kiptest` cases, one
module of several thousand tests, go out one case file at a time. Modules holding a test
marked `slow` are handed out first, so that no long module starts last while the other
worker idles.
"""
from __future__ import annotations

import os
from typing import Any

import pytest

CASES = "tests/cases/test_cases.py::test_case["


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
    """Modules with a `slow` test first (stable: the order inside a module is kept). Every
    worker collects and sorts alike, as xdist requires."""
    slow = {item.nodeid.split("::", 1)[0] for item in items
            if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.nodeid.split("::", 1)[0] not in slow)
