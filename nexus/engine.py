"""The engine: one store, its commit hooks, and the single way to read or write it.

Owns the path every command takes after parsing — the statement registry decides whether it
reads a snapshot or writes, the executor registry decides who runs it — and the two sessions
everything else uses:

* `read_session()` — a read transaction (one consistent snapshot) with its `ExecContext`;
* `write_session(privileged=False)` — **the one write path**: it holds the engine's write
  lock, opens the write transaction, lets the caller write (KML commands, bulk import, the
  capsule bootstrap, `kip check --repair`, the search service, the audit log), runs the
  commit hooks' `before_commit` inside the transaction, commits — or rolls back on an
  exception or a dry run — and runs `after_commit`. Nothing else opens a store write.

Commit hooks are objects with `stage(ctx)`, `before_commit(ctx)`, `after_commit(ctx)` and
`rolled_back(ctx)` (`CommitHook`): the search indexes and the PRIMER cache are hooks, and so
will be any index kept beside the store.

Requests (`execute_kip`, CONTRACT §1–§2) are validated here too: batches, per-command
parameters, the read-only rule (every statement kind that writes is refused, and so is any
statement the registry does not know), dry runs. Nothing but a KIP response leaves
`execute_kip`: unexpected exceptions become `KIP_4003`.

`nexus.api.Nexus` is this engine plus opening, bootstrap and the operations over a store.
"""
from __future__ import annotations

import gc
import logging
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Protocol

import orjson

from . import syntax
from .config import Config
from .errors import ErrorCode, KipError, internal_error
from .exec.admission import Admission, OverBudget
from .exec.context import ExecContext, WriteContext
from .exec.primer import PrimerCache
from .exec.registry import executor_for
from .store.protocol import GraphStore, WriteTxn
from .syntax import StatementKind
from .timestamps import now_iso

if TYPE_CHECKING:
    from .search import SearchService

log = logging.getLogger("nexus")

_REQUEST_KEYS = frozenset(("command", "commands", "parameters", "dry_run"))
_ABSENT = object()
_ONE_KEYS = frozenset(("command", "parameters", "dry_run"))

Response = dict[str, Any]


class CommitHook(Protocol):
    """Work kept beside the store that follows every write (see the module doc)."""

    def stage(self, ctx: WriteContext) -> None:
        """Part way through a big write (after each bulk chunk): take what `ctx` touched
        and removed so far; the session forgets those ids afterwards."""
    def before_commit(self, ctx: WriteContext) -> None:
        """Inside the write transaction, just before it commits."""
    def after_commit(self, ctx: WriteContext) -> None:
        """After a successful commit."""
    def rolled_back(self, ctx: WriteContext) -> None:
        """The transaction was rolled back (an error or a dry run)."""


class ReadSession:
    """What `Engine.read_session()` returns: a plain context manager rather than a
    generator one, because every read command opens one (a point FIND takes ~50 µs)."""

    __slots__ = ("engine", "text", "dry_run", "budget", "ticket", "reading")

    def __init__(self, engine: Engine, text: str | None, dry_run: bool,
                 budget: float | None = None) -> None:
        self.engine = engine
        self.text = text
        self.dry_run = dry_run
        self.budget = budget

    def __enter__(self) -> ExecContext:
        engine = self.engine
        limits = engine.config.limits
        self.ticket = engine.admission.ticket(self.budget)
        try:
            self.reading = engine.store.read()
            txn = self.reading.__enter__()
        except BaseException:
            self.ticket.done()
            raise
        # By position (keywords cost more than the rest of this method): now, clock,
        # privileged, dry_run, text, search, primer, columnar, ticket.
        return ExecContext(txn, limits, self.ticket.started + limits.query_timeout, None,
                           now_iso, False, self.dry_run, self.text, engine.search,
                           engine.primer, engine.columnar, self.ticket)

    def __exit__(self, *exc: Any) -> None:
        try:
            self.reading.__exit__(*exc)
        finally:
            self.ticket.done()


class WriteSession:
    """One open write transaction of the engine (`Engine.write_session`).

    `txn` is the store's write transaction and `ctx` the context every write of the session
    shares (one timestamp, one record of what changed). `run(text)` executes a writing KIP
    command inside the session; `stage()` hands what was written so far to the commit hooks
    (bulk loads call it after each chunk); `abort()` rolls the whole session back.
    """

    def __init__(self, engine: "Engine", txn: WriteTxn, ctx: WriteContext,
                 store_txn: WriteTxn | None = None, timeout: float | None = None) -> None:
        self.engine = engine
        # Each command `run` runs gets this long (default: the engine's query timeout).
        self.timeout = engine.config.limits.query_timeout if timeout is None else timeout
        self.txn = txn
        # The store's own transaction, below the wrappers (the version log's recorder):
        # for work on the store's derived tables that changes no element (integrity repair).
        self.store_txn = txn if store_txn is None else store_txn
        self.ctx = ctx
        self.aborted = False

    def run(self, text: str, parameters: Mapping[str, Any] | None = None) -> Any:
        """Parse, bind and execute one writing command (KML) in this session's transaction;
        its errors carry their position in `text`."""
        limits = self.engine.config.limits
        parsed = syntax.parse(text, max_bytes=limits.max_command_bytes,
                              max_nesting=limits.max_nesting)
        if not parsed.kind.writes:
            raise KipError(ErrorCode.KIP_1001, "Only writing commands (UPSERT, DELETE, ...) "
                           "run in a write session",
                           "Run FIND, SEARCH and DESCRIBE through execute_kip.")
        command = syntax.bind(parsed, parameters or {})
        ctx = self.ctx
        saved = ctx.text
        ctx.text = text
        ctx.deadline = time.monotonic() + self.timeout      # each command its own
        ctx.versioned = set()                   # each command bumps an element's _version once
        # The columns an earlier command of the session created (`new_docs`) may be stale
        # once this one runs (it may update or delete those elements): the commit hooks
        # read them back instead.
        ctx.new_docs = []
        try:
            result, _ = executor_for(type(command))(ctx, command, parameters or {})
            return result
        except KipError as err:
            if err.line is not None and err.snippet is None:
                err.with_position(text, err.line, err.column or 1)
            raise
        finally:
            # A session opened without a text of its own (a capsule load) keeps its last
            # command's: the version log labels the session by it.
            ctx.text = saved if saved is not None else text

    def stage(self) -> None:
        """Give the commit hooks what was written so far, then forget those ids."""
        ctx = self.ctx
        if ctx.touched or ctx.removed:
            for hook in self.engine.commit_hooks:
                hook.stage(ctx)
            ctx.touched = set()
            ctx.removed = set()
            ctx.unsearched = set()
            ctx.moved = {}
            ctx.new_docs = []
            if ctx.before_heads is not None:
                ctx.before_heads = {}
            if ctx.before_attributes is not None:
                ctx.before_attributes = {}

    def abort(self) -> None:
        """Roll the session back when it ends (nothing it wrote is kept)."""
        self.aborted = True


class Engine:
    """A KIP engine over one graph store. Thread-safe: many readers, one writer at a time."""

    def __init__(self, store: GraphStore, config: Config) -> None:
        self.store = store
        self.config = config
        self.search: "SearchService | None" = None     # attached by nexus.api
        self.primer = PrimerCache()
        # Which executor FIND uses: "auto" (a cost model per execution), "always" or
        # "never" the columnar one (nexus.exec.columnar); tests run both ways.
        self.columnar = _columnar_default()
        self.commit_hooks: list[CommitHook] = [self.primer]
        self.write_wrappers: list[Callable[[WriteTxn], WriteTxn]] = []
        self.admission = Admission(config.heavy_slots, config.fast_lane_seconds,
                                   config.heavy_quantum)
        self._write_lock = threading.RLock()
        self._writer: int | None = None
        self._closed = False

    def add_commit_hook(self, hook: CommitHook) -> None:
        """Run `hook` around every write from now on."""
        self.commit_hooks.append(hook)

    def wrap_writes(self, wrapper: Callable[[WriteTxn], WriteTxn]) -> None:
        """Hand every write session `wrapper(txn)` instead of the store's transaction from
        now on (the version log's recorder: `nexus.history.RecordingTxn`)."""
        self.write_wrappers.append(wrapper)

    @property
    def path(self) -> str | None:
        return self.store.path

    # --- sessions -------------------------------------------------------------------------
    def _context_options(self) -> dict[str, Any]:
        return {"search": self.search, "primer": self.primer, "columnar": self.columnar}

    def read_session(self, *, text: str | None = None, dry_run: bool = False,
                     budget: float | None = None) -> "ReadSession":
        """`with engine.read_session() as ctx:` — a consistent snapshot (`ctx.txn`), in the
        fast lane of the admission control until it has run `fast_seconds`; with `budget`
        (seconds), a deadline check past it raises `OverBudget` (nexus.exec.admission)."""
        return ReadSession(self, text, dry_run, budget)

    @contextmanager
    def write_session(self, *, privileged: bool = False, dry_run: bool = False,
                      text: str | None = None, timeout: float | None = None
                      ) -> Iterator[WriteSession]:
        """`with engine.write_session() as w:` — the one write path (see the module doc).
        `timeout`: the seconds each command the session runs may take (default: the
        engine's `query_timeout`, which bounds what agents send).

        Commits when the block ends normally; rolls back when it raises, when `dry_run`, or
        after `w.abort()`. Re-entering from the thread that holds a session is KIP_4003.
        """
        if self._writer == threading.get_ident():
            raise KipError(ErrorCode.KIP_4003, "a write session is already open in this "
                           "thread (write sessions do not nest)")
        committed = False
        ctx: WriteContext | None = None
        with self._write_lock:
            self._writer = threading.get_ident()
            try:
                with self.store.write() as store_txn:
                    txn = store_txn
                    for wrap in self.write_wrappers:
                        txn = wrap(txn)
                    ctx = WriteContext(txn, self.config.limits,
                                       time.monotonic() + (self.config.limits.query_timeout
                                                           if timeout is None else timeout),
                                       privileged=privileged, dry_run=dry_run, text=text,
                                       clock=now_iso, store_txn=store_txn,
                                       **self._context_options())
                    session = WriteSession(self, txn, ctx, store_txn, timeout)
                    yield session
                    if dry_run or session.aborted:
                        txn.abort()
                    else:
                        self._prefetch_hook_reads(txn, ctx)
                        for hook in self.commit_hooks:
                            hook.before_commit(ctx)
                        committed = True
                if not committed:
                    self._rolled_back(ctx)
            except BaseException:
                self._rolled_back(ctx)      # the body, a hook or the commit itself failed
                committed = False
                raise
            finally:
                self._writer = None
        if committed and ctx is not None:
            for hook in self.commit_hooks:
                hook.after_commit(ctx)

    def _prefetch_hook_reads(self, txn: Any, ctx: WriteContext) -> None:
        """On a store whose reads are round trips: the aux keys the commit hooks will read
        (each hook's optional `aux_reads(ctx)`: [(table, keys, last_under)]) asked for in one
        batched read (`prefetch_aux_many`), which their reads are then served from."""
        prefetch = getattr(txn, "prefetch_aux_many", None)
        if prefetch is None or not txn.prefers_batches():
            return
        reads = [read for hook in self.commit_hooks
                 for read in getattr(hook, "aux_reads", _no_reads)(ctx)]
        if reads:
            prefetch(reads)

    def _rolled_back(self, ctx: WriteContext | None) -> None:
        if ctx is not None:
            for hook in self.commit_hooks:
                hook.rolled_back(ctx)

    # --- execute_kip ----------------------------------------------------------------------
    def execute_kip(self, request: Mapping[str, Any]) -> Response:
        """Run a request `{command | commands, parameters?, dry_run?}` (CONTRACT §1–§2)."""
        return self._execute(request, readonly=False)

    def execute_kip_readonly(self, request: Mapping[str, Any]) -> Response:
        """Like `execute_kip`, but every statement that writes is refused before it runs."""
        return self._execute(request, readonly=True)

    def execute_kip_within(self, request: Mapping[str, Any], budget: float, *,
                           readonly: bool = True) -> Response | None:
        """`execute_kip_readonly` (or `execute_kip` when not `readonly`) of a request of one
        read command, if it is done within `budget` seconds of execution; None when it is
        not (or when it writes, or is a batch): then nothing ran that changed anything, and
        the caller runs the request again as usual. For `kip serve`, which answers cheap
        reads on its event loop (nexus.server.app)."""
        try:
            return self._execute(request, readonly=readonly, budget=budget)
        except OverBudget:
            return None

    def _execute(self, request: Any, *, readonly: bool,
                 budget: float | None = None) -> Response:
        """The request's commands run in order; a failing write stops a batch. Under a
        `budget` (`execute_kip_within`) only a single read command is tried: a batch, a
        write or a read past its budget raises `OverBudget` before anything changed."""
        if type(request) is dict and len(request) <= 2 and type(request.get("command")) is str:
            # The common request, {command, parameters?} (what `_validate` accepts first),
            # without packing it into a batch of one.
            shared = request.get("parameters", _ABSENT)
            if len(request) == 1 and shared is _ABSENT:
                return self.run_command(request["command"], {}, readonly=readonly,
                                        budget=budget)[0]
            if type(shared) is dict:
                return self.run_command(request["command"], dict(shared),
                                        readonly=readonly, budget=budget)[0]
        try:
            commands, dry_run, batch = self._validate(request)
        except KipError as err:
            return {"error": err.to_dict()}
        if not batch:
            text, params = commands[0]
            response, _ = self.run_command(text, params, readonly=readonly, dry_run=dry_run,
                                           budget=budget)
            return response
        if budget is not None:
            raise OverBudget()
        results = []
        for text, params in commands:
            response, stop = self.run_command(text, params, readonly=readonly,
                                              dry_run=dry_run)
            results.append(response)
            if stop:
                break
        return {"result": results}

    def _validate(self, request: Any) -> tuple[list[tuple[Any, dict]], bool, bool]:
        """(commands with their parameters, dry_run, is a batch) of a request."""
        if type(request) is dict and "command" in request and request.keys() <= _ONE_KEYS:
            # The common request (one command, a parameters dict) without the general
            # checks' allocations; anything unusual takes the general path below.
            command = request["command"]
            shared = request.get("parameters")
            dry_run = request.get("dry_run", False)
            if type(command) is str and (shared is None or type(shared) is dict) \
                    and (dry_run is False or dry_run is True):
                return [(command, {} if shared is None else dict(shared))], dry_run, False
        if not isinstance(request, Mapping):
            raise KipError(ErrorCode.KIP_1001, "The request must be a JSON object",
                           "Send {\"command\": \"...\", \"parameters\": {...}}.")
        unknown = sorted(set(request) - _REQUEST_KEYS)
        if unknown:
            raise KipError(ErrorCode.KIP_1001,
                           f"Unknown request field(s): {', '.join(map(str, unknown))}",
                           "A request has `command` or `commands`, and optionally "
                           "`parameters` and `dry_run`.")
        has_one, has_many = "command" in request, "commands" in request
        if has_one == has_many:
            raise KipError(ErrorCode.KIP_1001,
                           "The request must have exactly one of `command` and `commands`"
                           + (" (both were given)" if has_one else " (neither was given)"),
                           "Send one KIP command as `command` (a string), or a batch as "
                           "`commands` (an array).")
        shared = request.get("parameters")
        if shared is None:
            shared = {}
        if not isinstance(shared, Mapping):
            raise KipError(ErrorCode.KIP_1001, "`parameters` must be an object",
                           "Send parameters as {\"name\": value, ...}.")
        dry_run = request.get("dry_run", False)
        if not isinstance(dry_run, bool):
            raise KipError(ErrorCode.KIP_1001, "`dry_run` must be true or false")
        if has_one:
            command = request["command"]
            if not isinstance(command, str):
                raise KipError(ErrorCode.KIP_1001, "`command` must be a string",
                               "Send the KIP command text as a JSON string.")
            return [(command, dict(shared))], dry_run, False
        items = request["commands"]
        if not isinstance(items, list):
            raise KipError(ErrorCode.KIP_1001, "`commands` must be an array",
                           "Send a batch as an array of strings or "
                           "{\"command\", \"parameters\"} objects.")
        if not items:
            raise KipError(ErrorCode.KIP_1001, "`commands` is empty",
                           "Send at least one command.")
        limit = self.config.limits.max_batch
        if len(items) > limit:
            raise KipError(ErrorCode.KIP_4002,
                           f"The batch has {len(items)} commands, over the limit of {limit}",
                           "Split the batch into smaller requests.")
        commands: list[tuple[Any, dict]] = []
        for i, item in enumerate(items):
            if isinstance(item, str):
                commands.append((item, dict(shared)))
            elif isinstance(item, Mapping):
                extra = sorted(set(item) - {"command", "parameters"})
                own = item.get("parameters") or {}
                if extra or not isinstance(item.get("command"), str) or not isinstance(
                        own, Mapping):
                    # Reported in place when this element runs, like a syntax error.
                    commands.append((_BadItem(i, extra), {}))
                    continue
                commands.append((item["command"], {**shared, **own}))
            else:
                commands.append((_BadItem(i, []), {}))
        return commands, dry_run, True

    # --- one command ----------------------------------------------------------------------
    def run_command(self, text: Any, parameters: Mapping[str, Any], *, readonly: bool = False,
                    dry_run: bool = False, privileged: bool = False,
                    budget: float | None = None) -> tuple[Response, bool]:
        """Run one command; returns (response, stop_batch): a failing write stops a batch.
        `budget`: a read's time budget (`read_session`); a write raises `OverBudget` before
        it starts."""
        if isinstance(text, _BadItem):
            return {"error": text.error().to_dict()}, False
        writes: bool | None = None      # known once the command parsed
        limits = self.config.limits
        parsed = syntax.parsed_before(text, max_bytes=limits.max_command_bytes,
                                      max_nesting=limits.max_nesting)
        if parsed is None:
            paused = _collector_paused(text)
        else:                           # parsed before: its kind is known, nothing to parse
            paused = parsed.kind is StatementKind.WRITE and gc.isenabled()
            if paused:
                gc.disable()
        try:
            if parsed is None:
                parsed = syntax.parse(text, max_bytes=limits.max_command_bytes,
                                      max_nesting=limits.max_nesting,
                                      timeout=limits.query_timeout)
            writes = parsed.writes
            if readonly and writes:
                raise KipError(ErrorCode.KIP_1001,
                               "execute_kip_readonly cannot run KML (UPSERT/DELETE): writes "
                               "need execute_kip",
                               "Send this command through execute_kip, or use only FIND, "
                               "SEARCH and DESCRIBE here.")
            if writes and budget is not None:
                raise OverBudget()
            command = parsed.command
            if parsed.late_binding:
                # The executor binds parameters itself (FIND caches its prepared plan per
                # parsed command and reads parameter values at execution).
                if not parsed.parameters <= parameters.keys():
                    syntax.bind(parsed, parameters)     # raises KIP_1001 naming the missing
            else:
                command = syntax.bind(parsed, parameters)
            execute = executor_for(type(command))
            hint: str | None = None
            if writes:
                with self.write_session(privileged=privileged, dry_run=dry_run,
                                        text=text) as session:
                    result, cursor = execute(session.ctx, command, parameters)
            else:
                with self.read_session(text=text, dry_run=dry_run, budget=budget) as ctx:
                    result, cursor = execute(ctx, command, parameters)
                    hint = ctx.hint
            if json_size(result, limits.max_result_bytes) > limits.max_result_bytes:
                raise KipError(
                    ErrorCode.KIP_4002,
                    f"The result is over the limit of {limits.max_result_bytes} "
                    f"bytes of JSON",
                    "Ask for less at once: lower LIMIT and page with CURSOR, project the "
                    "fields you need instead of whole elements or big attributes.")
            response: Response = {"result": result}
            if cursor is not None:
                response["next_cursor"] = cursor
            if hint is not None:
                response["hint"] = hint     # e.g. SEARCH MODE served as another (CONTRACT §10)
            return response, False
        except KipError as err:
            if err.line is not None and err.snippet is None and isinstance(text, str):
                err.with_position(text, err.line, err.column or 1)
            return {"error": err.to_dict()}, bool(writes and not readonly)
        except MemoryError:
            # The process's memory budget (kip serve's RLIMIT_DATA) stopped this command:
            # what it held is released as the exception unwinds; a write rolled back.
            return {"error": KipError(
                ErrorCode.KIP_4002, "The command needed more memory than the server's "
                "budget allows",
                "Ask for less at once: narrow WHERE, lower LIMIT and page with CURSOR, "
                "project fields instead of whole elements.").to_dict()}, bool(
                    writes and not readonly)
        except Exception as exc:  # noqa: BLE001 - the API boundary: nothing else escapes
            log.exception("internal error running a KIP command")
            return {"error": internal_error(exc).to_dict()}, bool(writes)
        finally:
            if paused:
                gc.enable()


def _collector_paused(text: Any) -> bool:
    """Pause the cyclic collector for a write command, from its parse to its commit (True:
    paused here, to resume after). A KIP load's UPSERT makes tens of thousands of acyclic
    objects (columns, maps, keys, log records); each time allocations pass the collector's
    threshold it would walk all those still alive, several times per command. The switch is
    the process's: the command that turned it off turns it back on when it ends (another
    write meanwhile neither pauses nor resumes it), so the collector is off at most while
    some write command runs; read commands do not pause it."""
    if gc.isenabled() and syntax.kind_of_text(text) is StatementKind.WRITE:
        gc.disable()
        return True
    return False


def _no_reads(ctx: WriteContext) -> list[Any]:
    """The `aux_reads` of a commit hook that declares none."""
    return []


def json_size(value: Any, limit: int) -> int:
    """How many bytes `value` takes as compact JSON (about: integers past 64 bits are
    estimated), counted until `limit` is passed. Rows share their values (a big attribute
    projected for every row is one string in memory), but every copy is written out: this
    bounds what encoding a result costs.

    A result is a list of columns (or one column) of values. A list of lists is walked
    into; a column is encoded by orjson `_CHUNK` values at a time, so the bytes alive at
    once are those of a few values (each bounded by the command size that stored it),
    never of the whole result — six times faster than counting in Python."""
    if type(value) is list and len(value) <= _CHUNK and (
            not value or type(value[0]) not in _LISTS):
        # A small column (most answers): what the loop below does first, without its setup.
        try:
            return len(orjson.dumps(value))
        except TypeError:
            return _walk_size(value)
    total = 0
    stack = [value]
    while stack and total <= limit:
        v = stack.pop()
        t = type(v)
        if (t is list or t is tuple) and v and (len(v) > _CHUNK or type(v[0]) in _LISTS):
            total += len(v) + 1
            if type(v[0]) in _LISTS:
                stack.extend(v)
            else:
                stack.extend(v[i:i + _CHUNK] for i in range(0, len(v), _CHUNK))
            continue
        try:
            total += len(orjson.dumps(v))
        except TypeError:               # orjson.JSONEncodeError: an integer past 64 bits
            total += _walk_size(v)
    return total


_CHUNK = 64
_LISTS = (list, tuple)


def _walk_size(value: Any) -> int:
    """`json_size` of a value orjson refuses, counted in Python."""
    total = 0
    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is str:
            total += len(v) + 2
        elif t is list or t is tuple:
            total += len(v) + 1
            stack.extend(v)
        elif t is dict:
            total += 2 * len(v) + 1
            for k, x in v.items():
                total += len(str(k)) + 2
                stack.append(x)
        else:
            total += len(str(v))        # numbers, true/false/null
    return total


def _columnar_default() -> str:
    from .exec.columnar import default_mode
    return default_mode()


class _BadItem:
    """A batch element that is neither a string nor a {command, parameters} object."""

    def __init__(self, index: int, extra: list[str]) -> None:
        self.index = index
        self.extra = extra

    def error(self) -> KipError:
        if self.extra:
            why = f"has unknown field(s) {', '.join(map(str, self.extra))}"
        else:
            why = "must be a string or an object with a string `command` and an optional " \
                  "`parameters` object"
        return KipError(ErrorCode.KIP_1001, f"commands[{self.index}] {why}",
                        "Each batch element is \"FIND ...\" or "
                        "{\"command\": \"...\", \"parameters\": {...}}.")
