"""Spaces: many memories under one directory — each space its own store (`Nexus.open(DIR/name)`).

Owns the space name rule (a short ASCII slug; anything else is KIP_1001 and touches no
file), creating, listing and dropping spaces, and a bounded set of open ones: a space opens
on first use and the least recently used idle space closes once more than `max_open` are
open. A space with requests in flight (`acquire`) is never closed.
"""
from __future__ import annotations

import os
import re
import shutil
import threading
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any, Iterator

from .api import Nexus
from .errors import ErrorCode, KipError

NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
DEFAULT_MAX_OPEN = 64


def check_name(name: Any) -> str:
    """`name` if it is a valid space name, else KIP_1001 (nothing on disk is touched)."""
    if not isinstance(name, str) or NAME.fullmatch(name) is None:
        shown = repr(name)[:80]
        raise KipError(ErrorCode.KIP_1001, f"Invalid space name {shown}",
                       "A space name is 1-63 characters of a-z, 0-9, '_' and '-', starting "
                       "with a letter or a digit.")
    return name


def unknown_space(name: str) -> KipError:
    return KipError(ErrorCode.KIP_1001, f"No space named {name!r}",
                    "Create it first (kip space create NAME, or POST /v1/admin/spaces), or "
                    "check the name and your key's spaces.")


class Spaces:
    """The spaces under `root`. Thread-safe; `options` go to every `Nexus.open`."""

    def __init__(self, root: str, *, max_open: int = DEFAULT_MAX_OPEN,
                 auto_create: bool = False, **options: Any) -> None:
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)
        self.max_open = max(1, max_open)
        self.auto_create = auto_create
        self.options = options
        self._lock = threading.Lock()
        self._open: OrderedDict[str, Nexus] = OrderedDict()   # LRU order, newest last
        self._busy: dict[str, int] = {}
        self._opening: dict[str, threading.Lock] = {}

    def path(self, name: str) -> str:
        return os.path.join(self.root, check_name(name))

    def exists(self, name: str) -> bool:
        return os.path.isdir(self.path(name))

    def names(self) -> list[str]:
        return sorted(n for n in os.listdir(self.root)
                      if NAME.fullmatch(n) and os.path.isdir(os.path.join(self.root, n)))

    def open_count(self) -> int:
        with self._lock:
            return len(self._open)

    def create(self, name: str) -> bool:
        """Create (and bootstrap) space `name`; False if it existed already."""
        path = self.path(name)
        if os.path.isdir(path):
            return False
        with self.acquire(name, create=True):
            pass
        return True

    def drop(self, name: str) -> bool:
        """Close and delete space `name`; False if it does not exist. Refused (KIP_3002)
        while requests are in flight in it."""
        path = self.path(name)
        with self._lock:
            if self._busy.get(name):
                raise KipError(ErrorCode.KIP_3002, f"Space {name!r} is in use",
                               "Retry the drop when its requests have finished.")
            nexus = self._open.pop(name, None)
        if nexus is not None:
            nexus.close()
        if not os.path.isdir(path):
            return False
        shutil.rmtree(path)
        return True

    @contextmanager
    def acquire(self, name: str, *, create: bool = False) -> Iterator[Nexus]:
        """The open `Nexus` of space `name`, held open for the `with` block. A missing space
        is KIP_1001 (`unknown_space`) unless `create` or the registry auto-creates."""
        nexus = self._get(name, create or self.auto_create)
        try:
            yield nexus
        finally:
            with self._lock:
                self._busy[name] -= 1
                if not self._busy[name]:
                    del self._busy[name]
                self._evict()

    def _get(self, name: str, create: bool) -> Nexus:
        path = self.path(name)
        with self._lock:
            nexus = self._open.get(name)
            if nexus is not None:
                self._open.move_to_end(name)
                self._busy[name] = self._busy.get(name, 0) + 1
                return nexus
            opening = self._opening.setdefault(name, threading.Lock())
        with opening:       # one opener per space; others wait for it
            with self._lock:
                nexus = self._open.get(name)
                if nexus is not None:
                    self._open.move_to_end(name)
                    self._busy[name] = self._busy.get(name, 0) + 1
                    return nexus
            try:
                if not os.path.isdir(path):
                    if not create:
                        raise unknown_space(name)
                    os.makedirs(path)
                nexus = Nexus.open(path, **self.options)
                with self._lock:
                    self._open[name] = nexus
                    self._busy[name] = self._busy.get(name, 0) + 1
                    self._evict()
                return nexus
            finally:
                with self._lock:        # bounded: only names being opened right now
                    self._opening.pop(name, None)

    def _evict(self) -> None:
        """Close idle spaces, oldest first, while more than `max_open` are open (lock held)."""
        if len(self._open) <= self.max_open:
            return
        for name in list(self._open):
            if len(self._open) <= self.max_open:
                break
            if not self._busy.get(name):
                self._open.pop(name).close()

    def close(self) -> None:
        with self._lock:
            opened, self._open = list(self._open.values()), OrderedDict()
        for nexus in opened:
            nexus.close()
