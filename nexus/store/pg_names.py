"""Names in a PostgreSQL database that the store and SEARCH must agree on.

No psycopg here: SEARCH imports this on every backend (`nexus.search.pg_vectors` is loaded
when search is attached, whatever the store), and an install without the `postgres` extra
must still open an LMDB database.
"""
from __future__ import annotations

import hashlib


def space_index_tag(space: str) -> str:
    """The part of an index's name that says it belongs to `space` alone: the partial HNSW
    indexes of SEARCH on PostgreSQL are `<table>_<tag>_<kind>` (`nexus.search.pg_vectors`),
    so that a drop of the space (`nexus.store.pg_spaces`) finds them."""
    return hashlib.sha1(space.encode()).hexdigest()[:12]
