"""Hybrid SEARCH: a lexical index in the store's transactions fused with vector indexes.

`attach_search(nexus)` sets `nexus.search` to a `SearchService` (see `service.py`), or on a
PostgreSQL store with pgvector to a `pg_search.PgSearchService` (the vectors in the
database). Modules: `text` (normalisation, the searchable document of an element),
`lexical` (postings in aux tables), `embed` (pluggable embedders), `vectors` (usearch
index, persistence and catch-up), `pg_vectors` (pgvector tables), `query` (ranking and
fusion), `service` and `pg_search` (hooks and lifecycle).

The service is imported when first named, not with the package: a module of it alone
(a bulk load's embedding worker process imports `embed_proc`, `embed` and `ivf`) does not
pay for the service and its indexes (~0.25–0.45 CPU s: bench/RESULTS.md, s18-w1).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .service import Host, SearchService


def attach_search(host: Host) -> SearchService:
    """Create the search service of `host` (the engine), open its indexes and start the
    indexer; the engine then registers it as a commit hook."""
    from .pg_search import pg_service
    from .service import SearchService
    service = pg_service(host) or SearchService(host)
    service.open()
    return service


def __getattr__(name: str) -> Any:
    if name in ("Host", "SearchService"):
        from . import service
        return getattr(service, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["SearchService", "attach_search"]
