"""Databases for the `.kiptest` cases (see README.md): a case that only reads shares one
database per (store, graph, bootstrap, options), built on first use and kept for the
session; a case that writes gets a fresh one, closed when it ends. Over HTTP a database is a
`kip serve` process of its own; since starting one takes about a second, the next server a
writing case will need is started in the background while the current one runs, and a
finished one is stopped in the background."""
from __future__ import annotations

import json
import os
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Iterator

import pytest

# The suite runs with --import-mode=importlib: make kiptest / kiprun importable by name.
sys.path.insert(0, os.path.dirname(__file__))

from kiprun import Http, Local, Target, load_graph, open_target  # noqa: E402
from kiptest import Case  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "http: a .kiptest case replayed against `kip serve`")


class Databases:
    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.tmp = tmp_path_factory
        self.shared: dict[str, Target] = {}
        self.spares: dict[str, Future[Http]] = {}
        self.launcher = ThreadPoolExecutor(max_workers=1)
        self.background = ThreadPoolExecutor(max_workers=1)

    @contextmanager
    def target(self, case: Case, name: str) -> Iterator[Target]:
        store, _, executor = name.partition("-")
        if case.writes:
            if store == "http":
                target: Target = load_graph(self.fresh_server(case), case.graph)
            else:
                target = open_target(store, self.tmp.mktemp("case"), case)
            try:
                yield self.executor(target, executor)
            finally:
                if store == "http":     # waiting for a server to exit takes a while
                    self.background.submit(target.close)
                else:
                    target.close()
            return
        key = json.dumps([store, case.graph, case.bootstrap, case.options], sort_keys=True)
        if key not in self.shared:
            self.shared[key] = open_target(store, self.tmp.mktemp(case.graph or "empty"), case)
        yield self.executor(self.shared[key], executor)

    def fresh_server(self, case: Case) -> Http:
        """An empty server for `case`, started earlier if possible; start the next one."""
        key = json.dumps([case.bootstrap, case.options], sort_keys=True)

        def launch() -> Http:
            return Http(self.tmp.mktemp("case") / "db", case.bootstrap, case.options)

        spare = self.spares.pop(key, None)
        self.spares[key] = self.launcher.submit(launch)
        return spare.result() if spare else launch()

    @staticmethod
    def executor(target: Target, executor: str) -> Target:
        if isinstance(target, Local):
            target.executor(executor)
        return target

    def close(self) -> None:
        self.launcher.shutdown(wait=True)
        self.background.shutdown(wait=True)
        for target in [*self.shared.values(), *(f.result() for f in self.spares.values())]:
            target.close()


@pytest.fixture(scope="session")
def databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Databases]:
    dbs = Databases(tmp_path_factory)
    yield dbs
    dbs.close()
