"""Whether the search index is in step with the graph after writes (shared by the tests of
derived forward entries: `test_concept_derived`, `test_link_marks`).

`deep_ok` — `check --deep` finds the store and the search indexes clean (the version log
aside: a database whose log was switched off, or a test writing below it); `answers` — each
query's hits with their ids and scores; `assert_in_step` — both checks clean and SEARCH
answering as a reindex of the same data does; `run_writes` — commands (a text, or a text
and its parameters) run in order, the store and the indexes clean after each.
"""
from __future__ import annotations

from typing import Any, Sequence


def deep_ok(nx) -> bool:
    report = nx.check(deep=True)
    return report["store"]["ok"] and report["search"]["ok"]


def answers(nx, kip, queries: Sequence[str]) -> list:
    return [[(h.get("name") or h.get("predicate"), h["id"], h["metadata"]["_score"])
             for h in kip(nx, q)] for q in queries]


def assert_in_step(nx, kip, queries: Sequence[str]) -> None:
    report = nx.search.check(deep=True)
    assert report["ok"] and report["lexical_stale"] == 0, report
    assert deep_ok(nx)
    before = answers(nx, kip, queries)
    nx.reindex()
    nx.search.drain()
    assert answers(nx, kip, queries) == before


def run_writes(nx, kip, commands: Sequence[Any]) -> None:
    for command in commands:
        text, params = command if isinstance(command, tuple) else (command, {})
        kip(nx, text, **params)
        assert deep_ok(nx), command
