"""Hybrid SEARCH: a lexical index in the store's transactions fused with a usearch index.

`attach_search(nexus)` sets `nexus.search` to a `SearchService` (see `service.py`).
Modules: `text` (normalisation, the searchable document of an element), `lexical`
(postings in LMDB aux tables), `embed` (pluggable embedders), `vectors` (usearch index,
persistence and catch-up), `query` (ranking and fusion), `service` (hooks and lifecycle).
"""
from .service import SearchService, attach_search

__all__ = ["SearchService", "attach_search"]
