"""The solution row, the unit every FIND operator passes on: element ids (None for an
unbound OPTIONAL variable), laid out as the plan's layout names them."""
from __future__ import annotations

from typing import Iterator, Optional

Row = tuple[Optional[int], ...]
Rows = Iterator[Row]

# Rows an operator takes at a time when it asks the store about many rows at once (the
# batched reads of `nexus.store.protocol`): on PostgreSQL one statement per chunk, so a
# query's statements do not grow with its rows; elsewhere a loop, so the size only bounds
# how far an operator reads ahead of its consumer.
CHUNK = 512


def chunks(rows: Rows, size: int = CHUNK) -> Iterator[list[Row]]:
    """`rows` as consecutive lists of at most `size` rows."""
    chunk: list[Row] = []
    append = chunk.append
    for row in rows:
        append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
            append = chunk.append
    if chunk:
        yield chunk
