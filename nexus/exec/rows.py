"""The solution row, the unit every FIND operator passes on: element ids (None for an
unbound OPTIONAL variable), laid out as the plan's layout names them."""
from __future__ import annotations

from typing import Iterator, Optional

Row = tuple[Optional[int], ...]
Rows = Iterator[Row]
