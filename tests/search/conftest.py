"""Fixtures for the SEARCH tests.

`corpus` — a session-wide LMDB nexus holding the generated corpus of `search_corpus`
(6,000 concepts of six types, 3,480 links), loaded once with the bulk loader (which drives
the same index hooks as KML). Read-only: tests that write use `nexus` / `disk_nexus`.

These fixtures open their databases with `semantic="none"`: the tests of this folder pin
`MODE "keyword"` (the lexical index and the n-gram vectors, CONTRACT §10), which an omitted
MODE means without a semantic embedder. MODE "semantic" / "hybrid" are tested in
test_modes.py and test_paraphrases.py.
"""
from __future__ import annotations

import os
import sys

import pytest

from nexus.api import Nexus

# pytest runs with --import-mode=importlib (no sys.path insertion); the corpus generator is
# shared with bench/search.py, so it is a plain module beside this file.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import search_corpus  # noqa: E402

KEYWORD = "none"        # no semantic embedder: every SEARCH is served in keyword mode


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    nx = Nexus.open(str(tmp_path_factory.mktemp("corpus") / "db"), durable=False,
                    semantic=KEYWORD)
    concepts = search_corpus.load_corpus(nx, 6000, seed=7)
    yield nx, concepts
    nx.close()


@pytest.fixture
def nexus():
    nx = Nexus.open(None, semantic=KEYWORD)
    yield nx
    nx.close()


@pytest.fixture
def disk_nexus(tmp_path):
    """`disk_nexus()` opens (or reopens) the LMDB nexus at one path."""
    opened = []

    def open_(**options):
        for nx in opened:
            nx.close()
        opened.clear()
        nx = Nexus.open(str(tmp_path / "db"), durable=False,
                        **{"semantic": KEYWORD, **options})
        opened.append(nx)
        return nx
    yield open_
    for nx in opened:
        nx.close()


@pytest.fixture
def ngram_vectors(monkeypatch):
    """The default embedder with an n-gram HNSW vector index, as every other embedder has
    (by default its typo candidates come from the gram postings, `gram_index`): for the
    tests of the vector index's own mechanics, which this embedder exercises cheaply."""
    from nexus.search import gram_index
    monkeypatch.setattr(gram_index, "in_use", lambda embedder: False)


@pytest.fixture
def kip():
    """`kip(nx, command, **parameters)`: the command's result (an error fails the test)."""
    def run(nx, command, **parameters):
        response = nx.execute_kip({"command": command, "parameters": parameters})
        assert "error" not in response, response
        return response["result"]
    return run
