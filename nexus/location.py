"""How a database location (`--db`, `Nexus.open`) is told apart and shown in messages.

A location is a directory (an LMDB store) or a URL whose scheme names a storage backend
(`postgresql://user:secret@host/db`). Messages, logs and the server's start line show a
directory as its absolute path and a URL with its password masked, so no secret is ever
printed. Owned here because the CLI and the server both show locations.
"""
from __future__ import annotations

import os
import re

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
_PASSWORD = re.compile(r"(://[^/@:?#]*):[^@/?#]*@|(password=)[^&#]*")


def is_url(location: str) -> bool:
    """Whether a location names a store by URL (postgresql://...) rather than a directory."""
    return _SCHEME.match(location) is not None


def shown(location: str) -> str:
    """A location for messages: a URL's password masked, a directory as an absolute path."""
    if not is_url(location):
        return os.path.abspath(location)
    return _PASSWORD.sub(lambda m: f"{m.group(1)}:***@" if m.group(1) is not None
                         else f"{m.group(2)}***", location)
