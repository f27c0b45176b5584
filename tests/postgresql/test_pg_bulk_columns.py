"""On PostgreSQL, a bulk load's lexical rows derived from the columns it wrote
(`nexus.search.lexical_cols`) are the per-document path's: the `lex` and `lexdoc` rows byte
for byte and the same SEARCH answers (the data and queries of
tests/search/test_lexical_cols.py), with the element read-backs and forward-entry reads of
the derived documents gone."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from nexus.api import Nexus
from nexus.ops.bulk_import import bulk_import
from nexus.search import lexical

pytest.importorskip("psycopg", reason="the postgres extra is not installed")

_SPEC = importlib.util.spec_from_file_location(
    "lexical_cols_cases", Path(__file__).parents[1] / "search" / "test_lexical_cols.py")
assert _SPEC is not None and _SPEC.loader is not None
cases = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(cases)


def _kip(nx: Nexus, command: str) -> list:
    got = nx.execute_kip({"command": command})
    assert "result" in got, got
    return got["result"]


def _load(url: str, data: tuple[list, list], columns: bool, monkeypatch
          ) -> tuple[dict, list, int]:
    derived = cases._derive_spied(columns, monkeypatch)
    with Nexus.open(url, semantic="none") as nx:
        _kip(nx, cases.SCHEMA)
        bulk_import(nx, *data, chunk_size=137)
        assert nx.search.check(deep=True)["ok"]
        return cases._tables(nx), cases._answers(nx, _kip), sum(derived)


def test_rows_derived_from_columns_are_the_per_document_rows(pg_server, monkeypatch):
    data = cases._data(6, 250)
    per_doc = _load(pg_server.fresh_database("perdoc"), data, False, monkeypatch)
    by_cols = _load(pg_server.fresh_database("bycols"), data, True, monkeypatch)
    assert per_doc[2] == 0 and by_cols[2] > len(data[0])
    assert by_cols[0]["lexdoc"] and by_cols[0] == per_doc[0]
    assert all(scores for scores, _ in by_cols[1]) and by_cols[1] == per_doc[1]


def test_detach_search_stops_indexing_on_postgresql(pg_server):
    """`Nexus.detach_search` (what `bench.pg --load-only` does for its store-only loads)
    closes the PostgreSQL search service too: later writes are not indexed."""
    with Nexus.open(pg_server.fresh_database("detach"), semantic="none") as nx:
        _kip(nx, cases.SCHEMA)
        with nx.store.read() as txn:
            indexed = lexical.doc_count(txn, lexical.KIND_CONCEPT)
            before = txn.count_concepts()
        assert indexed == before
        nx.detach_search()
        assert nx.search is None
        bulk_import(nx, *cases._data(7, 40))
        with nx.store.read() as txn:
            assert txn.count_concepts() >= before + 40
            assert lexical.doc_count(txn, lexical.KIND_CONCEPT) == indexed


def test_the_loads_text_table_is_emptied_when_a_load_ends_on_postgresql(pg_server):
    """The counted texts a bulk load derives its rows from (`lexical_terms.LoadTexts`)
    are kept for the load only: PostgreSQL's `bulk_loading` empties them at its end."""
    from nexus.search import lexical_terms
    with Nexus.open(pg_server.fresh_database("loadtexts"), semantic="none") as nx:
        _kip(nx, cases.SCHEMA)
        lexical_terms.LOAD_TEXTS.rows_of(True, ["someLeftoverName"])
        assert len(lexical_terms.LOAD_TEXTS)
        bulk_import(nx, *cases._data(8, 250), chunk_size=137)
        assert not len(lexical_terms.LOAD_TEXTS) and not lexical_terms.LOAD_TEXTS.terms
