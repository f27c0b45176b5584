"""Capsules: the bootstrap of a new database, and loading capsule files.

The bundled `.kip` files are the package data `nexus.bundled` (the folder nexus/bundled/);
this module applies them and any other capsule.

Public names:

* `bootstrap(nexus, progress=None)` — called by `Nexus.open`: applies the `BUNDLED` capsules
  (Genesis, the RC11 types, the predicate capsules, `persons/system.kip`, `persons/self.kip`),
  in that order, each in one privileged write transaction together with its sha256 (aux
  table `engine`, key `capsule:<name>`). A capsule whose stored hash matches is skipped, so
  reopening a database changes nothing; a changed or new capsule is applied (this is how a
  database of an earlier release upgrades on open). The actor capsules are
  applied only when their actor is absent: `$self` and `$system` are never reset.
  `Config.self_id`, when set, becomes `$self.attributes.id` at creation.
  `progress(name, done, total)` is called before each capsule is applied and once at the
  end (done and total count the capsules to apply; never called when none is).
* `load_capsules(nexus, paths, progress=None, privileged=False)` — `.kip` files or folders
  (searched recursively), each file atomically (one transaction; a failing file leaves
  nothing of itself). Big files are split into their top-level statements so that no single
  parse is huge, but a file is still one transaction. Returns one count dict per file.

Both run their commands in the engine's write session (`Engine.write_session`), so the
search indexes and caches see them like any other write.
"""
from __future__ import annotations

import hashlib
import os
import re
import stat
from importlib import resources
from typing import Any, Callable, Iterable

from ..engine import Engine, WriteSession
from ..exec import writes
from ..errors import ErrorCode, KipError
from ..store.protocol import ConceptHead, ReadTxn, WriteTxn

__all__ = ["BUNDLED", "bootstrap", "load_capsules", "split_statements", "counts"]

BUNDLED_PACKAGE = "nexus.bundled"
# Application order: each capsule needs the definitions of the ones before it (types before
# the predicates that name them, Person before the actors). The files are the KIP v1.0-RC11
# ecosystem's capsules (spec Appendices 2-3), under their published names.
TYPE_CAPSULES = ("Genesis.kip", "Person.kip", "Event.kip", "SleepTask.kip", "Preference.kip",
                 "Insight.kip", "Commitment.kip", "Experience.kip", "ExperienceStep.kip",
                 "Skill.kip")
PREDICATE_CAPSULES = ("involves.kip", "mentions.kip", "consolidated_to.kip", "derived_from.kip",
                      "caused_by.kip", "compiled_to.kip", "derived_insight.kip", "has_step.kip")
BUNDLED = (*TYPE_CAPSULES, *PREDICATE_CAPSULES, "persons/system.kip", "persons/self.kip")
# Capsules that create an actor: applied once, when the actor is absent, never again.
ACTOR_CAPSULES = {"persons/system.kip": "$system", "persons/self.kip": "$self"}
# Hash keys of the capsules earlier releases bundled under other names (the RC6 set): an
# upgraded database drops them once the capsules that replace them are applied.
RETIRED = ("genesis.kip", "person.kip", "event.kip", "sleep_task.kip")
HASH_PREFIX = b"capsule:"
SPLIT_BYTES = 256 * 1024    # files larger than this are parsed statement by statement


# --- one write transaction, several commands ----------------------------------------------

def counts(session: WriteSession, start_max: int) -> dict[str, int]:
    """Elements created / updated / deleted by a write session so far (ids above the
    counter at its start, `start_max`, were created by it)."""
    out = {"concepts_created": 0, "concepts_updated": 0, "propositions_created": 0,
           "propositions_updated": 0, "deleted": len(session.ctx.removed)}
    head = session.txn.head
    for n in session.ctx.touched:
        kind = "concepts" if type(head(n)) is ConceptHead else "propositions"
        out[f"{kind}_{'created' if n > start_max else 'updated'}"] += 1
    return out


# --- bootstrap -----------------------------------------------------------------------------

def bundled_text(name: str) -> str:
    return resources.files(BUNDLED_PACKAGE).joinpath(name).read_text("utf-8")


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).hexdigest().encode()


def _actor_exists(txn: ReadTxn, name: str) -> bool:
    sid = txn.symbol_id("Person")
    return sid is not None and txn.concept_id(sid, name) is not None


def _pending(txn: ReadTxn, name: str, digest: bytes) -> bool:
    """Whether capsule `name` (with this content hash) still has to be applied."""
    if name in ACTOR_CAPSULES:
        return not _actor_exists(txn, ACTOR_CAPSULES[name])
    return txn.aux("engine").get(HASH_PREFIX + name.encode()) != digest


_BUNDLED_CACHE: list[Any] = [None, None, ()]   # [bundled_text, BUNDLED read, the triples]


def _bundled() -> tuple[tuple[str, str, bytes], ...]:
    """(name, text, digest) of each bundled capsule, read and hashed once per process (a
    server opening many spaces checks them on every open; reading them each time was half
    of a cold open). Read again if `bundled_text` or `BUNDLED` was replaced (tests)."""
    reader, names, triples = _BUNDLED_CACHE
    if reader is not bundled_text or names is not BUNDLED:
        triples = tuple((n, t, _digest(t)) for n in BUNDLED for t in [bundled_text(n)])
        _BUNDLED_CACHE[:] = [bundled_text, BUNDLED, triples]
    return triples


# The time one bundled capsule may take to apply (a few hundred ms on these machines).
BOOTSTRAP_SECONDS = 300.0


def bootstrap(engine: Engine, progress: Callable[[str, int, int], None] | None = None
              ) -> list[str]:
    """Apply the bundled capsules that are missing or changed; returns their names."""
    with engine.store.read() as txn:        # the common case, a reopen: no write at all
        todo = [(n, t, d) for n, t, d in _bundled() if _pending(txn, n, d)]
        retired = [HASH_PREFIX + n.encode() for n in RETIRED
                   if txn.aux("engine").get(HASH_PREFIX + n.encode()) is not None]
    applied = []
    for done, (name, text, digest) in enumerate(todo):
        if progress is not None:
            progress(name, done, len(todo))
        # The bundled capsules are fixed text: their bound is not the one an agent's
        # commands get (`query_timeout`, which may be a fraction of a second).
        with engine.write_session(privileged=True, timeout=BOOTSTRAP_SECONDS) as session:
            if not _pending(session.txn, name, digest):     # another process was faster
                continue
            session.run(text)
            if name == "persons/self.kip" and engine.config.self_id is not None:
                _set_self_id(session.txn, engine.config.self_id, session.ctx)
            session.txn.aux("engine").put(HASH_PREFIX + name.encode(), digest)
        applied.append(name)
    if retired:     # every capsule is applied by now: forget the names they replace
        with engine.write_session(privileged=True) as session:
            for key in retired:
                session.txn.aux("engine").delete(key)
    if progress is not None and todo:
        progress(todo[-1][0], len(todo), len(todo))
    return applied


def _set_self_id(txn: WriteTxn, self_id: str, ctx: Any) -> None:
    # Part of the creation of $self (not a later write): no `_version` bump.
    person = txn.symbol_id("Person")
    n = txn.concept_id(person, "$self") if person is not None else None
    if n is None:           # the capsule just created it; nothing else can be meant
        raise KipError(ErrorCode.KIP_4003, "the $self capsule did not create {type: "
                       "\"Person\", name: \"$self\"}")
    attributes = txn.attributes(n)
    writes.keep_attributes(ctx, n, attributes)      # (for the search index)
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
    """The `.kip` files named by `paths` (folders searched recursively, sorted). Only
    regular files count: inside a folder, symbolic links, FIFOs, devices and sockets are
    skipped (a FIFO or /dev/zero named `x.kip` would be read forever), and a path named
    explicitly that is none of a regular file or a folder is `KIP_1001`."""
    out: list[str] = []
    for path in paths:
        path = os.fspath(path)
        kind = _kind(path)
        if kind == "dir":
            found: list[str] = []
            for root, dirs, files in os.walk(path):       # never follows symlinked dirs
                dirs.sort()
                found.extend(os.path.join(root, f) for f in files
                             if f.endswith(".kip") and _kind(os.path.join(root, f)) == "file")
            out.extend(sorted(found))
        elif kind == "file":
            out.append(path)
        elif kind is None:
            raise KipError(ErrorCode.KIP_3002, f"No such capsule file or folder: {path}",
                           "Give .kip files or folders that contain them.")
        else:
            raise _not_regular(path, kind)
    return out


def _kind(path: str) -> str | None:
    """"file", "dir", None (missing) or what else `path` itself is (links not followed)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    return {stat.S_IFLNK: "symbolic link", stat.S_IFIFO: "FIFO", stat.S_IFCHR: "device",
            stat.S_IFBLK: "device", stat.S_IFSOCK: "socket"}.get(stat.S_IFMT(mode), "special file")


def _not_regular(path: str, kind: str) -> KipError:
    return KipError(ErrorCode.KIP_1001, f"{path} is a {kind}, not a regular file",
                    "Give capsule files (.kip) or folders that hold them; symbolic links, "
                    "FIFOs and devices are not read (for a link, give the file it points to).")


def load_capsules(engine: Engine, paths: Iterable[str | os.PathLike],
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
    names = [os.fspath(p) for p in paths]
    for named in names:                 # a missing path stops everything before it starts
        if _kind(named) is None:
            capsule_files([named])
    results: list[dict[str, Any]] = []
    for named in names:                 # a bad path is that path's outcome, not the end
        try:
            files = capsule_files([named])
        except KipError as err:
            results.append({"path": named, "error": err.to_dict()})
            if not keep_going:
                return results
            continue
        for path in files:
            try:
                results.append(_load_file(engine, path, progress, privileged))
            except KipError as err:
                results.append({"path": path, "error": err.to_dict()})
                if not keep_going:
                    return results
    return results


def _load_file(engine: Engine, path: str, progress: Callable | None, privileged: bool
               ) -> dict[str, Any]:
    try:
        # Opened without following a link and without blocking on a FIFO, then checked to
        # be a regular file: what was listed may have been swapped since.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as raw:
            if not stat.S_ISREG(os.fstat(raw.fileno()).st_mode):
                raise _not_regular(path, _kind(path) or "special file")
            text = raw.read().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise KipError(ErrorCode.KIP_1001, f"Cannot read {path}: {exc}",
                       "A capsule is a UTF-8 text file.") from None
    pieces = split_statements(text) if len(text) > SPLIT_BYTES else [text]
    total = len(text)
    done = 0
    with engine.write_session(privileged=privileged) as session:
        start_max = session.txn.max_id()
        for piece in pieces:
            session.run(piece)
            done += len(piece.lstrip("\n "))
            if progress is not None:
                progress(path, min(done, total), total)
        report = counts(session, start_max)
    return {"path": path, "statements": len(pieces), **report}
