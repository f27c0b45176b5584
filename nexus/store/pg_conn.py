"""Talking to PostgreSQL: the location URL (its space, its password masked), the translation
of psycopg errors into KipError, and keyset paging. Shared by the store (`pg_store`) and its
transactions (`pg_txn`, `pg_write`); `PgHost` is what a transaction needs of its store.
"""
from __future__ import annotations

import re
import struct
from typing import Any, Callable, Iterator, Protocol, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import errors as pgerr
from psycopg.adapt import Dumper
from psycopg.pq import Format

from nexus.errors import ErrorCode, KipError
from nexus.store.model import ConceptHead

T = TypeVar("T")

DEFAULT_CONNECT_TIMEOUT = 10        # seconds; `connect_timeout=` in the URL overrides it
# A space name (the rule of `nexus.spaces`), or the name of a spaces template
# (`pg_spaces`): a prefix no space name can have.
TEMPLATE_PREFIX = "_template-"
_SPACE = re.compile(r"(?:_template-)?[a-z0-9][a-z0-9_-]{0,62}")
MISSING = object()                  # a cache's "not known" (None: known absent)


# --- array parameters -----------------------------------------------------------------------
# psycopg dumps a Python list by inspecting its elements (to choose the element type) and
# then dumping them one by one through the generic machinery: ~20-30 µs per array, and a
# single write sends ~20 of them. A list wrapped in one of these classes says its element
# type, and goes out in PostgreSQL's binary array format packed here in one pass. Only for
# `%b` placeholders of the matching SQL type (`%b::bigint[]`: `Int8s(ids)`); a wrapped list
# is still a list, so psycopg's own dumper takes it anywhere else.

class Int8s(list):  # type: ignore[type-arg]
    """A bigint[] parameter (ints)."""


class Int2s(list):  # type: ignore[type-arg]
    """A smallint[] parameter (ints)."""


class Byteas(list):  # type: ignore[type-arg]
    """A bytea[] parameter (bytes, or None for NULL)."""


class Texts(list):  # type: ignore[type-arg]
    """A text[] parameter (str)."""


_HEAD = struct.Struct("!iiIii")     # ndim, has-null, element oid, length, lower bound
_I4 = struct.Struct("!i")


def _header(obj: list, elem: int, nulls: int = 0) -> bytes:  # type: ignore[type-arg]
    return _HEAD.pack(1, nulls, elem, len(obj), 1) if obj else _HEAD.pack(0, 0, elem, 0, 0)[:12]


class _FixedDumper(Dumper):
    format = Format.BINARY
    elem = 0
    item = struct.Struct("!iq")
    size = 8

    def dump(self, obj: Any) -> bytes:
        pack, size = self.item.pack, self.size
        try:
            return _header(obj, self.elem) + b"".join([pack(size, v) for v in obj])
        except (struct.error, TypeError) as exc:
            raise psycopg.DataError(f"bad array element: {exc}") from None


class _Int8sDumper(_FixedDumper):
    oid = 1016          # int8[]
    elem = 20


class _Int2sDumper(_FixedDumper):
    oid = 1005          # int2[]
    elem = 21
    item = struct.Struct("!ih")
    size = 2


class _ByteasDumper(Dumper):
    format = Format.BINARY
    oid = 1001          # bytea[]
    elem = 17

    def dump(self, obj: Any) -> bytes:
        pack = _I4.pack
        try:
            if None in obj:
                return _header(obj, self.elem, 1) + b"".join(
                    [b"\xff\xff\xff\xff" if v is None else pack(len(v)) + v for v in obj])
            return _header(obj, self.elem) + b"".join([pack(len(v)) + v for v in obj])
        except TypeError as exc:
            raise psycopg.DataError(f"bad array element: {exc}") from None


class _TextsDumper(_ByteasDumper):
    oid = 1009          # text[]
    elem = 25

    def dump(self, obj: Any) -> bytes:
        pack = _I4.pack
        try:
            parts = [v.encode() for v in obj]
        except (AttributeError, UnicodeEncodeError) as exc:
            raise psycopg.DataError(f"bad array element: {exc}") from None
        return _header(obj, self.elem) + b"".join([pack(len(v)) + v for v in parts])


for _cls, _dumper in ((Int8s, _Int8sDumper), (Int2s, _Int2sDumper), (Byteas, _ByteasDumper),
                      (Texts, _TextsDumper)):
    psycopg.adapters.register_dumper(_cls, _dumper)


def internal(message: str) -> KipError:
    """An engine-internal failure of the backend (KIP_4003)."""
    return KipError(ErrorCode.KIP_4003, message)


class PgHost(Protocol):
    """What a transaction needs from its store (`pg_store.PgGraphStore`; package-internal)."""

    where: PgLocation
    space: str
    token: int                      # unique per open store in this process
    concept_heads: dict[int, ConceptHead]
    symbol_ids: dict[str, int]
    symbol_texts: dict[int, str]
    lock_space: str                 # a write transaction's lock statement (pg_schema)

    def connect(self) -> psycopg.Connection[Any]: ...
    def discard(self, conn: psycopg.Connection[Any]) -> None: ...
    def end(self, conn: psycopg.Connection[Any], *, commit: bool) -> None: ...
    def release(self, conn: psycopg.Connection[Any]) -> None: ...
    def writer_done(self) -> None: ...
    def cache_heads(self, heads: dict[int, ConceptHead]) -> None: ...
    def publish(self, sids: dict[str, int], texts: dict[int, str],
                heads: dict[int, ConceptHead]) -> None: ...
    def forget(self, ids: list[int]) -> None: ...


class PgLocation:
    """A `postgresql://` URL split into what libpq gets and what nexus keeps: the space
    (`?space=NAME`, default `default`) and the URL with its password masked (`shown`), the
    only form that ever reaches a message or a log."""

    def __init__(self, rest: str) -> None:
        url = "postgresql://" + rest
        try:
            parts = urlsplit(url)
            query = parse_qsl(parts.query, keep_blank_values=True)
        except ValueError:
            raise KipError(ErrorCode.KIP_4003, "the postgresql:// location is not a valid URL",
                           "Write postgresql://user@host:port/dbname") from None
        space = "default"
        kept = []
        for k, v in query:
            if k == "space":
                space = v
            else:
                kept.append((k, v))
        if not _SPACE.fullmatch(space):
            raise KipError(ErrorCode.KIP_4003, f"invalid space {space[:80]!r} in the "
                           f"postgresql:// location",
                           "A space is 1-63 lowercase letters, digits, '-' or '_'.")
        if not any(k == "connect_timeout" for k, _ in kept):
            kept.append(("connect_timeout", str(DEFAULT_CONNECT_TIMEOUT)))
        self.space = space
        self.password = parts.password or ""
        self.conninfo = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(kept),
                                     parts.fragment))
        netloc = parts.netloc
        if parts.password is not None:
            user, _, host = netloc.rpartition("@")
            netloc = f"{user.partition(':')[0]}:***@{host}"
        shown_query = urlencode([(k, "***" if k == "password" else v) for k, v in query],
                                safe="/:*")
        self.shown = urlunsplit((parts.scheme, netloc, parts.path, shown_query, parts.fragment))
        self.secrets = [s for s in (self.password, *(v for k, v in query if k == "password"))
                        if s]

    def scrub(self, text: str) -> str:
        """`text` with every password of the URL masked."""
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text


def translate(exc: BaseException, where: PgLocation, *, writing: bool = False
              ) -> KipError | None:
    """The KipError a psycopg exception means (None when it is not psycopg's)."""
    if isinstance(exc, KipError) or not isinstance(exc, psycopg.Error):
        return None
    detail = where.scrub(first_line(exc))
    rolled = " The command was rolled back: nothing of it is stored." if writing else ""
    if isinstance(exc, (pgerr.SerializationFailure, pgerr.DeadlockDetected)):
        return KipError(ErrorCode.KIP_4003, f"the database refused the transaction under "
                        f"concurrent writes ({detail}).{rolled}",
                        "Retry the command.")
    if isinstance(exc, pgerr.QueryCanceled):
        return KipError(ErrorCode.KIP_4003, f"the database cancelled the statement ({detail})."
                        f"{rolled}", "Retry the command; raise the database's timeouts if it "
                        "keeps happening.")
    if isinstance(exc, psycopg.OperationalError):
        return KipError(ErrorCode.KIP_4003, f"the PostgreSQL database at {where.shown} is "
                        f"unreachable or the connection was lost: {detail}.{rolled}",
                        "Check that the database server runs and accepts connections from "
                        "here (host, port, user, dbname of the URL), then retry.")
    return KipError(ErrorCode.KIP_4003, f"PostgreSQL error at {where.shown}: {detail}.{rolled}",
                    "Check the database's log; the store may need `kip check`.")


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())[:500]


def call(fn: Callable[[], T], where: PgLocation, writing: bool = False) -> T:
    """`fn()` with psycopg errors translated."""
    try:
        return fn()
    except KipError:
        raise
    except Exception as exc:
        err = translate(exc, where, writing=writing)
        if err is None:
            raise
        raise err from None


def pages(fetch: Callable[[tuple[Any, ...] | None, int], list[tuple[Any, ...]]],
          key: Callable[[tuple[Any, ...]], tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
    """Rows of a keyset-paged query: `fetch(after, limit)` returns up to `limit` rows after
    the key `after` (None: from the start); pages grow from 64 to 8192 rows, so a caller
    that wants the first few rows pays for few and a full scan needs few round trips."""
    after: tuple[Any, ...] | None = None
    limit = 64
    while True:
        rows = fetch(after, limit)
        yield from rows
        if len(rows) < limit:
            return
        after = key(rows[-1])
        limit = min(limit * 4, 8192)
