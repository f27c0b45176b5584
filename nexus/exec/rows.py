"""The solution row, the unit every FIND operator passes on: element ids (None for an
unbound OPTIONAL variable), laid out as the plan's layout names them."""
from __future__ import annotations

from typing import Iterator, Optional

Row = tuple[Optional[int], ...]
Rows = Iterator[Row]

# Rows an operator takes at a time when it asks the store about many rows at once (the
# batched reads of `nexus.store.protocol`): on PostgreSQL one statement per chunk. The
# first chunk is small (a consumer that stops early has read little ahead of it); each
# next one is four times larger, up to CHUNK_MAX, so that a long stream needs few chunks
# (a query's statements grow with the logarithm of its rows, then by one per CHUNK_MAX).
CHUNK = 512
CHUNK_MAX = 8192


def chunks(rows: Rows, size: int = CHUNK, most: int = CHUNK_MAX) -> Iterator[list[Row]]:
    """`rows` as consecutive lists: the first of at most `size` rows, each next one up to
    four times larger, to at most `most` rows."""
    chunk: list[Row] = []
    append = chunk.append
    for row in rows:
        append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
            append = chunk.append
            size = min(size * 4, most)
    if chunk:
        yield chunk
