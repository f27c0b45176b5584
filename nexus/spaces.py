"""Spaces: many memories under one directory — each space its own store (`Nexus.open(DIR/name)`).

Owns the space name rule (a short ASCII slug; anything else is KIP_1001 and touches no
file), creating, listing and dropping spaces, and a bounded set of open ones: a space opens
on first use and the least recently used idle space closes once more than `max_open` are
open. A space with requests in flight (`acquire`) is never closed.

With `audit`, each open space keeps its own audit log (`Nexus.audit_log()`, in its own
store: `list_logs` on `/v1/{space}/kip` lists that space's requests only); one flusher
thread writes the buffered entries of every open space, and a space's log is flushed as
it closes — no thread per space.

A new space is a copy of a *template*: a store bootstrapped once under
`DIR/.templates/<key>`, where the key digests the bundled capsules' names and texts, the
nexus version and the options that shape a new store (bootstrap, self_id, embedder) — so
a change to the bundled set (or an upgrade) builds a new template instead of copying a
stale one, and creating a space costs a file copy, not a bootstrap. (Opening the copy still runs the bootstrap's check,
which applies nothing when the template is current.) Older templates are removed when a new
one is built. The copy carries the template's random database epoch (the vector files'
owner mark, `nexus.search.vectors`): the files copied with it are its own.

Where the spaces live is a *catalog*: `DirectoryCatalog` (a directory, one LMDB store per
space, templates under `DIR/.templates`) or `PostgresCatalog` (a `postgresql://` URL: one
database, a space is its rows — every table leads with `space` — and a template is a space
named `_template-<key>`, copied row by row in one transaction; `nexus.store.pg_spaces`).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import threading
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any, Iterator

from .api import AuditLog, Nexus, __version__
from .errors import ErrorCode, KipError
from .location import is_url, shown
from .ops.capsules import BUNDLED, bundled_text

NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
DEFAULT_MAX_OPEN = 64
AUDIT_FLUSH_SECONDS = 0.5
TEMPLATES = ".templates"
_TEMPLATE_KEY = re.compile(r"[0-9a-f]{32}")         # what template_key() gives
# Files of a store directory that a copy leaves out: LMDB's lock file (per environment,
# made at open) and any other lock file.
_NOT_COPIED = re.compile(r"(?:lock\.mdb|.*\.lock|LOCK|.*\.tmp)")


# The options that change what a new store holds (the rest — limits, durability — do not,
# so `kip space create` and `kip serve` with other limits share one template).
CONTENT_OPTIONS = {"bootstrap": True, "self_id": None, "embedder": None}


def template_key(options: dict[str, Any]) -> str:
    """The digest that names the template for spaces opened with `options`: the bundled
    capsules (names and texts), the nexus version and the options that shape the content."""
    h = hashlib.sha256(f"nexus {__version__}\n".encode())
    shaping = {k: options.get(k, default) for k, default in CONTENT_OPTIONS.items()}
    h.update(json.dumps(shaping, sort_keys=True, default=repr).encode())
    for name in BUNDLED:
        text = bundled_text(name).encode("utf-8")
        h.update(f"\n{name} {len(text)}\n".encode())
        h.update(text)
    return h.hexdigest()[:32]


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


class DirectoryCatalog:
    """Spaces as directories under `root`, each an LMDB store; new ones copied from the
    template under `root/.templates/<key>` (see the module doc)."""

    def __init__(self, root: str, options: dict[str, Any]) -> None:
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)
        self.shown = self.root
        self.options = options
        self._template_lock = threading.Lock()
        self._key: str | None = None        # template_key(options), computed once

    def location(self, name: str) -> str:
        return os.path.join(self.root, name)

    def exists(self, name: str) -> bool:
        return os.path.isdir(self.location(name))

    def names(self) -> list[str]:
        return sorted(n for n in os.listdir(self.root)
                      if NAME.fullmatch(n) and os.path.isdir(os.path.join(self.root, n)))

    def create(self, name: str) -> bool:
        """Create space `name` (a copy of the template); False if it existed already."""
        path = self.location(name)
        if os.path.isdir(path):
            return False
        return self._copy_template(name, path)

    def template(self) -> str:
        """The directory of the current template, built first if it is missing."""
        key = self._key = self._key or template_key(self.options)
        base = os.path.join(self.root, TEMPLATES)
        final = os.path.join(base, key)
        if os.path.isdir(final):
            return final
        with self._template_lock:
            if os.path.isdir(final):
                return final
            os.makedirs(base, exist_ok=True)
            building = os.path.join(base, f".build-{secrets.token_hex(6)}")
            try:
                Nexus.open(building, **self.options).close()
                try:
                    os.rename(building, final)
                except OSError:
                    if not os.path.isdir(final):    # not another process that was faster
                        raise
            finally:
                shutil.rmtree(building, ignore_errors=True)
            for old in os.listdir(base):        # stale templates (another bundled set)
                if old != key and not old.startswith("."):
                    shutil.rmtree(os.path.join(base, old), ignore_errors=True)
        return final

    def _copy_template(self, name: str, path: str) -> bool:
        """Copy the template to `path` (through a temporary directory, renamed into place:
        a space is never seen half copied); False if `path` appeared meanwhile."""
        source = self.template()
        staging = os.path.join(self.root, TEMPLATES, f".new-{name}-{secrets.token_hex(6)}")
        os.makedirs(staging)
        try:
            for entry in os.listdir(source):
                if not _NOT_COPIED.fullmatch(entry):
                    shutil.copyfile(os.path.join(source, entry), os.path.join(staging, entry))
            try:
                os.rename(staging, path)
            except OSError:
                if os.path.isdir(path):
                    return False
                raise
            return True
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def drop(self, name: str) -> bool:
        """Delete space `name` (closed by the caller); False if it does not exist."""
        path = self.location(name)
        if not os.path.isdir(path):
            return False
        shutil.rmtree(path)
        return True


class PostgresCatalog:
    """Spaces as the rows of one PostgreSQL database (`url`), each opened as
    `url?space=NAME`; new ones copied from the template space `_template-<key>` (see the
    module doc). Needs the `postgres` extra."""

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        try:
            from .store.pg_spaces import PgSpaces
        except ImportError as exc:
            raise ValueError(f"--spaces {shown(url)} needs psycopg, which is not installed "
                             f"({exc.name}): pip install 'nexus-kip[postgres]'") from None
        self.db = PgSpaces(url)
        self.url = url
        self.shown = self.db.shown
        self.options = options
        self._template_lock = threading.Lock()
        self._key: str | None = None

    def location(self, name: str) -> str:
        from .store.pg_spaces import with_space
        return with_space(self.url, name)

    def exists(self, name: str) -> bool:
        return self.db.exists(name)

    def names(self) -> list[str]:
        return [n for n in self.db.names() if NAME.fullmatch(n)]

    def create(self, name: str) -> bool:
        """Create space `name` (a copy of the template space, in one transaction); False if
        it existed already."""
        if self.db.exists(name):
            return False
        return self.db.copy(self.template(), name)

    def template(self) -> str:
        """The name of the current template space, built first if it is missing: bootstrapped
        under a build name, then copied to its final name (never seen half built)."""
        from .store.pg_conn import TEMPLATE_PREFIX
        key = self._key = self._key or template_key(self.options)
        final = TEMPLATE_PREFIX + key
        if self.db.exists(final):
            return final
        with self._template_lock:
            if self.db.exists(final):
                return final
            building = f"{TEMPLATE_PREFIX}build-{secrets.token_hex(6)}"
            try:
                Nexus.open(self.location(building), **self.options).close()
                if not self.db.copy(building, final) and not self.db.exists(final):
                    raise KipError(ErrorCode.KIP_4003, "the spaces template could not be "
                                   f"built in {self.shown}", "Retry; check the database.")
            finally:
                self.db.drop(building)
            for old in self.db.names(templates=True):       # stale: another bundled set
                if old != final and _TEMPLATE_KEY.fullmatch(old[len(TEMPLATE_PREFIX):]):
                    self.db.drop(old)
        return final

    def drop(self, name: str) -> bool:
        """Delete space `name` (closed by the caller); False if it does not exist."""
        return self.db.drop(name)


def catalog(where: str, options: dict[str, Any]) -> DirectoryCatalog | PostgresCatalog:
    """The catalog of the spaces at `where`: a directory or a `postgresql://` URL."""
    if where.startswith("postgresql://"):
        return PostgresCatalog(where, options)
    if is_url(where):    # a URL is not a directory: make no folder named after it
        raise ValueError(
            f"--spaces takes a directory or a postgresql:// URL, not {shown(where)}")
    return DirectoryCatalog(where, options)


def locate(where: str, name: str) -> str | None:
    """What `Nexus.open` is given for the existing space `name` of the spaces at `where` (a
    directory or a `postgresql://` URL), None when there is no such space. A bad name is
    KIP_1001; nothing is created."""
    check_name(name)
    if where.startswith("postgresql://"):
        found = PostgresCatalog(where, {})
        return found.location(name) if found.exists(name) else None
    if is_url(where):
        raise ValueError(
            f"--spaces takes a directory or a postgresql:// URL, not {shown(where)}")
    path = os.path.join(where, name)
    return path if os.path.isdir(path) else None


class Spaces:
    """The spaces at `where` (a directory, or a `postgresql://` URL: `catalog`).
    Thread-safe; `options` go to every `Nexus.open`."""

    def __init__(self, where: str, *, max_open: int = DEFAULT_MAX_OPEN,
                 auto_create: bool = False, audit: bool = False, **options: Any) -> None:
        self.catalog = catalog(where, options)
        self.shown = self.catalog.shown
        self.max_open = max(1, max_open)
        self.auto_create = auto_create
        self.options = options
        self._lock = threading.Lock()
        self._open: OrderedDict[str, Nexus] = OrderedDict()   # LRU order, newest last
        self._busy: dict[str, int] = {}
        self._opening: dict[str, threading.Event] = {}     # being opened, set when done
        self._closing: dict[str, threading.Event] = {}     # evicted, store still closing
        self._to_close: list[tuple[str, Nexus]] = []        # evicted, for the closer thread
        self._closer: threading.Thread | None = None
        self._close_wake = threading.Event()
        self.audit = audit
        self._audits: dict[str, AuditLog] = {}      # of the open spaces, with `audit`
        self._flusher: threading.Thread | None = None
        self._stopping = threading.Event()

    def location(self, name: str) -> str:
        """What `Nexus.open` is given for space `name` (a directory or a URL)."""
        return self.catalog.location(check_name(name))

    def exists(self, name: str) -> bool:
        return self.catalog.exists(check_name(name))

    def names(self) -> list[str]:
        return self.catalog.names()

    def open_count(self) -> int:
        with self._lock:
            return len(self._open)

    def create(self, name: str) -> bool:
        """Create space `name` (a copy of the template); False if it existed already."""
        return self.catalog.create(check_name(name))

    def template(self) -> str:
        """Where the current template is (built first if it is missing)."""
        return self.catalog.template()

    def drop(self, name: str) -> bool:
        """Close and delete space `name`; False if it does not exist. Refused (KIP_3002)
        while requests are in flight in it."""
        check_name(name)
        with self._lock:
            if self._busy.get(name):
                raise KipError(ErrorCode.KIP_3002, f"Space {name!r} is in use",
                               "Retry the drop when its requests have finished.")
            nexus = self._open.pop(name, None)
            audit = self._audits.pop(name, None)
            closing = self._closing.get(name)
        if closing is not None:
            closing.wait()
        if audit is not None:
            audit.close()
        if nexus is not None:
            nexus.close()
        return self.catalog.drop(name)

    @contextmanager
    def acquire(self, name: str, *, create: bool = False) -> Iterator[Nexus]:
        """The open `Nexus` of space `name`, held open for the `with` block. A missing space
        is KIP_1001 (`unknown_space`) unless `create` (`auto_create` is the server's policy:
        it asks for `create` on a write)."""
        nexus = self._get(name, create)
        try:
            yield nexus
        finally:
            with self._lock:
                self._busy[name] -= 1
                if not self._busy[name]:
                    del self._busy[name]
                victims = self._evict()
            self._close_evicted(victims)

    def _get(self, name: str, create: bool) -> Nexus:
        location = self.location(name)
        while True:
            with self._lock:
                nexus = self._open.get(name)
                if nexus is not None:
                    self._open.move_to_end(name)
                    self._busy[name] = self._busy.get(name, 0) + 1
                    return nexus
                # Evicted a moment ago and still closing, or being opened by another
                # thread: wait for that, then look again (one store per space at a time).
                wait_for = self._closing.get(name) or self._opening.get(name)
                if wait_for is None:
                    opened = self._opening[name] = threading.Event()
            if wait_for is not None:
                wait_for.wait()
                continue
            break
        victims: list[tuple[str, Nexus]] = []
        try:
            if not self.catalog.exists(name):
                if not create:
                    raise unknown_space(name)
                self.catalog.create(name)
            nexus = Nexus.open(location, **self.options)
            with self._lock:
                self._open[name] = nexus
                if self.audit:
                    self._audits[name] = nexus.audit_log()
                    self._start_flusher()
                self._busy[name] = self._busy.get(name, 0) + 1
                victims = self._evict()
        finally:
            with self._lock:        # bounded: only names being opened right now
                self._opening.pop(name, None)
            opened.set()
        self._close_evicted(victims)
        return nexus

    def _evict(self) -> list[tuple[str, Nexus]]:
        """Take idle spaces out, oldest first, while more than `max_open` are open (lock
        held); the caller closes them with `_close_evicted` once the lock is released, so
        that closing one space (draining and saving its vector index) holds up no request
        to another."""
        victims: list[tuple[str, Nexus]] = []
        if len(self._open) <= self.max_open:
            return victims
        for name in list(self._open):
            if len(self._open) <= self.max_open:
                break
            if not self._busy.get(name):
                victims.append((name, self._open.pop(name)))
                self._closing[name] = threading.Event()
        return victims

    def _close_evicted(self, victims: list[tuple[str, Nexus]]) -> None:
        """Hand evicted spaces to the closer thread: closing (draining and saving the vector
        index, closing the store) is no part of the request that evicted them."""
        if not victims:
            return
        with self._lock:
            self._to_close.extend(victims)
            if self._closer is None:
                self._closer = threading.Thread(target=self._close_loop, daemon=True,
                                                name="nexus-spaces-closer")
                self._closer.start()
        self._close_wake.set()

    def _close_loop(self) -> None:
        while True:
            self._close_wake.wait()
            self._close_wake.clear()
            while True:
                with self._lock:
                    if not self._to_close:
                        break
                    name, nexus = self._to_close.pop(0)
                try:
                    self._close(name, nexus)
                except Exception:  # noqa: BLE001 - one failing close must not stop the rest
                    import logging
                    logging.getLogger("nexus.spaces").exception("closing space %s", name)
                finally:
                    with self._lock:
                        done = self._closing.pop(name, None)
                    if done is not None:
                        done.set()
            if self._stopping.is_set():
                return

    def _close(self, name: str, nexus: Nexus) -> None:
        with self._lock:
            audit = self._audits.pop(name, None)
        try:
            if audit is not None:
                audit.close()           # writes what it buffered
        finally:
            nexus.close()

    def audit_log(self, name: str) -> AuditLog | None:
        """The audit log of open space `name` (held by the caller), None without `audit`."""
        with self._lock:
            return self._audits.get(name)

    def _start_flusher(self) -> None:
        if self._flusher is None:
            self._flusher = threading.Thread(target=self._flush_loop, daemon=True,
                                             name="nexus-spaces-audit")
            self._flusher.start()

    def _flush_loop(self) -> None:
        while not self._stopping.wait(AUDIT_FLUSH_SECONDS):
            self.flush_audits()

    def flush_audits(self) -> None:
        """Write the buffered audit entries of every open space."""
        with self._lock:
            logs = list(self._audits.items())
        for name, audit in logs:
            try:
                audit.flush()
            except Exception:  # noqa: BLE001 - a space closed meanwhile flushed itself;
                # the audit must never take the server down
                import logging
                logging.getLogger("nexus.spaces").debug("audit flush of %s failed", name,
                                                        exc_info=True)

    def close(self) -> None:
        self._stopping.set()
        if self._flusher is not None:
            self._flusher.join(timeout=10)
        if self._closer is not None:        # it finishes the closes handed to it, then ends
            self._close_wake.set()
            self._closer.join()
        with self._lock:
            opened, self._open = list(self._open.items()), OrderedDict()
        for name, nexus in opened:
            self._close(name, nexus)
