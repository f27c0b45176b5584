"""Capsules: the bootstrap of a new database, loading capsule files, and bulk import.

The bundled `.kip` files live in the repository's `capsules/` folder, which ships as the data
package `nexus.bundled` (see pyproject); this module applies them and any other capsule.

Public names:

* `bootstrap(nexus)` — called by `Nexus.open`: applies `genesis.kip`, `person.kip`,
  `event.kip`, `sleep_task.kip`, `persons/system.kip`, `persons/self.kip`, in that order,
  each in one privileged write transaction together with its sha256 (aux table `engine`,
  key `capsule:<name>`). A capsule whose stored hash matches is skipped, so reopening a
  database changes nothing; a changed capsule is re-applied. The actor capsules are
  applied only when their actor is absent: `$self` and `$system` are never reset.
  `Config.self_id`, when set, becomes `$self.attributes.id` at creation.
* `load_capsules(nexus, paths, progress=None, privileged=False)` — `.kip` files or folders
  (searched recursively), each file atomically (one transaction; a failing file leaves
  nothing of itself). Big files are split into their top-level statements so that no single
  parse is huge, but a file is still one transaction. Returns one count dict per file.
* `write_batch(nexus, privileged=False)` — a context manager running several KML commands
  in ONE write transaction (what the two above are built on).
* `bulk_import(...)` — re-exported from `nexus.exec.bulk` (JSONL-shaped data, no parse).
"""
from __future__ import annotations

import hashlib
import os
import re
from contextlib import contextmanager
from importlib import resources
from typing import Any, Callable, Iterable, Iterator

from . import syntax
from .errors import ErrorCode, KipError
from .exec.bulk import bulk_import
from .exec.context import ExecContext
from .exec.kml import run_kml
from .store.protocol import ConceptHead

__all__ = ["BUNDLED", "bootstrap", "load_capsules", "write_batch", "split_statements",
           "bulk_import"]

BUNDLED_PACKAGE = "nexus.bundled"
# Application order: each capsule needs the definitions of the ones before it.
BUNDLED = ("genesis.kip", "person.kip", "event.kip", "sleep_task.kip",
           "persons/system.kip", "persons/self.kip")
# Capsules that create an actor: applied once, when the actor is absent, never again.
ACTOR_CAPSULES = {"persons/system.kip": "$system", "persons/self.kip": "$self"}
HASH_PREFIX = b"capsule:"
SPLIT_BYTES = 256 * 1024    # files larger than this are parsed statement by statement


# --- one write transaction, several commands ----------------------------------------------

class Batch:
    """The commands run so far in one write transaction (see `write_batch`)."""

    def __init__(self, nexus: Any, txn: Any, privileged: bool) -> None:
        self.nexus = nexus
        self.txn = txn
        self.privileged = privileged
        # One context gathers what all commands touched, for the search index hooks; every
        # element written by the batch gets the same timestamp.
        self.ctx = ExecContext.start(txn, nexus.config.limits, engine=nexus,
                                     privileged=privileged)
        self.start_max = txn.max_id()

    def run(self, text: str, parameters: dict | None = None) -> dict[str, Any]:
        """Parse, bind and run one KML command inside the batch's transaction."""
        limits = self.nexus.config.limits
        parsed = syntax.parse(text, max_bytes=limits.max_command_bytes,
                              max_nesting=limits.max_nesting)
        if parsed.kind != "KML":
            raise KipError(ErrorCode.KIP_1001, "A capsule holds only KML (UPSERT / DELETE) "
                           "commands", "Run FIND, SEARCH and DESCRIBE through execute_kip.")
        command = syntax.bind(parsed, parameters or {})
        ctx = ExecContext.start(self.txn, limits, engine=self.nexus, text=text,
                                privileged=self.privileged)
        ctx.now = self.ctx.now
        try:
            return run_kml(ctx, command)
        except KipError as err:
            if err.line is not None and err.snippet is None:
                err.with_position(text, err.line, err.column or 1)
            raise
        finally:
            self.ctx.touched |= ctx.touched
            self.ctx.touched -= ctx.removed
            self.ctx.removed |= ctx.removed

    def counts(self) -> dict[str, int]:
        """Elements created / updated / deleted by the batch so far (ids above the counter
        at the start were created by it)."""
        out = {"concepts_created": 0, "concepts_updated": 0, "propositions_created": 0,
               "propositions_updated": 0, "deleted": len(self.ctx.removed)}
        head = self.txn.head
        for n in self.ctx.touched:
            kind = "concepts" if type(head(n)) is ConceptHead else "propositions"
            out[f"{kind}_{'created' if n > self.start_max else 'updated'}"] += 1
        return out


@contextmanager
def write_batch(nexus: Any, *, privileged: bool = False) -> Iterator[Batch]:
    """`with write_batch(nx) as b: b.run(cmd1); b.run(cmd2)` — all or nothing: commits when
    the block ends normally, aborts on any exception."""
    # The same lock and hooks as Nexus._run_kml, so that indexes beside the store (search)
    # and caches (the primer) see the batch like any other KML command.
    with nexus._write_lock:
        with nexus.store.write() as txn:
            batch = Batch(nexus, txn, privileged)
            yield batch
            nexus._before_commit(batch.ctx)
    nexus._after_commit(batch.ctx)


# --- bootstrap -----------------------------------------------------------------------------

def bundled_text(name: str) -> str:
    return resources.files(BUNDLED_PACKAGE).joinpath(name).read_text("utf-8")


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).hexdigest().encode()


def _actor_exists(txn: Any, name: str) -> bool:
    sid = txn.symbol_id("Person")
    return sid is not None and txn.concept_id(sid, name) is not None


def _pending(txn: Any, name: str, digest: bytes) -> bool:
    """Whether capsule `name` (with this content hash) still has to be applied."""
    if name in ACTOR_CAPSULES:
        return not _actor_exists(txn, ACTOR_CAPSULES[name])
    return txn.aux("engine").get(HASH_PREFIX + name.encode()) != digest


def bootstrap(nexus: Any) -> list[str]:
    """Apply the bundled capsules that are missing or changed; returns their names."""
    capsules = [(name, bundled_text(name)) for name in BUNDLED]
    with nexus.store.read() as txn:         # the common case, a reopen: no write at all
        todo = [(n, t, d) for n, t in capsules if _pending(txn, n, d := _digest(t))]
    applied = []
    for name, text, digest in todo:
        with write_batch(nexus, privileged=True) as batch:
            if not _pending(batch.txn, name, digest):   # another process was faster
                continue
            batch.run(text)
            if name == "persons/self.kip" and nexus.config.self_id is not None:
                _set_self_id(batch.txn, nexus.config.self_id)
            batch.txn.aux("engine").put(HASH_PREFIX + name.encode(), digest)
        applied.append(name)
    return applied


def _set_self_id(txn: Any, self_id: str) -> None:
    # Part of the creation of $self (not a later write): no `_version` bump.
    n = txn.concept_id(txn.symbol_id("Person"), "$self")
    attributes = txn.attributes(n)
    attributes["id"] = self_id
    txn.set_attributes(n, attributes)


# --- loading capsule files -----------------------------------------------------------------

_TOKENS = re.compile(r'"(?:[^"\\\n\r]|\\[^\n\r])*"|//[^\n]*|[{}()\[\]]|\b(?:UPSERT|DELETE)\b')


def split_statements(text: str) -> list[str]:
    """Split a capsule into its top-level KML statements (`UPSERT ...` / `DELETE ...`).

    Each piece is padded with the newlines and spaces that preceded it, so that error
    positions in a piece are positions in the whole file. Text that does not start with a
    statement keyword stays attached to the piece before it (or becomes its own piece),
    where the parser reports it.
    """
    starts = [0]
    depth = 0
    for m in _TOKENS.finditer(text):
        tok = m.group()
        c = tok[0]
        if c in "{([":
            depth += 1
        elif c in "})]":
            depth -= 1
        elif c == "U" or c == "D":
            if depth == 0 and m.start() > 0:
                starts.append(m.start())
    starts.append(len(text))
    pieces = []
    for a, b in zip(starts, starts[1:]):
        body = text[a:b]
        if not body.strip() or _only_comments(body):
            continue
        line_start = text.rfind("\n", 0, a) + 1
        pad = "\n" * text.count("\n", 0, a) + " " * (a - line_start)
        pieces.append(pad + body)
    return pieces


def _only_comments(body: str) -> bool:
    return all(not line.strip() or line.strip().startswith("//")
               for line in body.splitlines())


def capsule_files(paths: Iterable[str | os.PathLike]) -> list[str]:
    """The `.kip` files named by `paths` (folders searched recursively, sorted)."""
    out: list[str] = []
    for path in paths:
        path = os.fspath(path)
        if os.path.isdir(path):
            found = []
            for root, dirs, files in os.walk(path):
                dirs.sort()
                found.extend(os.path.join(root, f) for f in files if f.endswith(".kip"))
            out.extend(sorted(found))
        elif os.path.isfile(path):
            out.append(path)
        else:
            raise KipError(ErrorCode.KIP_3002, f"No such capsule file or folder: {path}",
                           "Give .kip files or folders that contain them.")
    return out


def load_capsules(nexus: Any, paths: Iterable[str | os.PathLike],
                  progress: Callable[[str, int, int], None] | None = None, *,
                  privileged: bool = False, keep_going: bool = False
                  ) -> list[dict[str, Any]]:
    """Apply capsule files, each in one transaction; returns one dict per file attempted:
    `{"path", "statements", "concepts_created", "concepts_updated", "propositions_created",
    "propositions_updated", "deleted"}`, or `{"path", "error": <KIP error object>}` for a
    file that failed (and changed nothing). Loading stops at the first failing file unless
    `keep_going`. `progress(path, done_bytes, total_bytes)` is called as statements of a
    file are applied. `privileged` bypasses the protection of system definitions (for
    trusted, operator-supplied capsules only).
    """
    results = []
    for path in capsule_files(paths):
        try:
            result = _load_file(nexus, path, progress, privileged)
        except KipError as err:
            results.append({"path": path, "error": err.to_dict()})
            if not keep_going:
                break
            continue
        results.append(result)
    return results


def _load_file(nexus: Any, path: str, progress: Callable | None, privileged: bool
               ) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8-sig") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise KipError(ErrorCode.KIP_1001, f"Cannot read {path}: {exc}",
                       "A capsule is a UTF-8 text file.") from None
    pieces = split_statements(text) if len(text) > SPLIT_BYTES else [text]
    total = len(text)
    done = 0
    with write_batch(nexus, privileged=privileged) as batch:
        for piece in pieces:
            batch.run(piece)
            done += len(piece.lstrip("\n "))
            if progress is not None:
                progress(path, min(done, total), total)
        counts = batch.counts()
    return {"path": path, "statements": len(pieces), **counts}
