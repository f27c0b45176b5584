"""The public API: `Nexus.open(path)` and `execute_kip(request) -> response`.

Every front end (the JSON-RPC server, the shell, the CLI, the capsule loader, benchmarks) is
an adapter over this class. It owns request validation (CONTRACT §1–§2), batches, the
read-only rule, dry runs, and the mapping of each command to one store transaction:
KQL and META run in a read transaction (a consistent snapshot), KML in one write transaction
that commits whole or not at all. It never lets anything but a KIP response out: unexpected
exceptions become `KIP_4003`.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Mapping

from . import syntax
from .config import Config
from .errors import ErrorCode, KipError, internal_error
from .exec.context import ExecContext
from .store import open_store
from .syntax import ast as A

log = logging.getLogger("nexus")

_REQUEST_KEYS = frozenset(("command", "commands", "parameters", "dry_run"))
_ONE_KEYS = frozenset(("command", "parameters", "dry_run"))


class Nexus:
    """A KIP engine over one graph store. Thread-safe: many readers, one writer at a time."""

    def __init__(self, store: Any, config: Config) -> None:
        self.store = store
        self.config = config
        self._closed = False
        self._write_lock = threading.RLock()
        self.search = None      # nexus.search.SearchIndex, attached by open()
        self.primer_cache = None
        # Which executor FIND uses: "auto" (a cost model per execution), "always" or
        # "never" the columnar one (nexus.exec.columnar); tests run both ways.
        self.columnar = _columnar_default()

    # --- lifecycle ------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | None = None, **options: Any) -> "Nexus":
        """Open (creating if needed) the nexus at `path`; `None` → a fresh in-memory one.

        Options: any field of `nexus.config.Config` or `Limits` (e.g. `query_timeout=5`,
        `durable=False`, `bootstrap=False`), and `columnar="auto"|"always"|"never"` (the
        FIND executor; default `auto`, or the environment's `NEXUS_COLUMNAR`).
        """
        mode = options.pop("columnar", None)
        if mode is not None and mode not in ("auto", "always", "never"):
            raise KipError(ErrorCode.KIP_1001, f"Unknown columnar mode {mode!r}",
                           "Use columnar=\"auto\", \"always\" or \"never\".")
        config = options.pop("config", None) or Config.from_options(**options)
        store = open_store(path, durable=config.durable) if path is not None else open_store(None)
        nexus = cls(store, config)
        if mode is not None:
            nexus.columnar = mode
        try:
            nexus._attach_extensions()
            if config.bootstrap:
                from .capsules import bootstrap
                bootstrap(nexus)
        except BaseException:
            store.close()
            raise
        return nexus

    def _attach_extensions(self) -> None:
        from .search import attach_search
        attach_search(self)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self.search is not None:
                self.search.close()
            self.store.close()

    def __enter__(self) -> "Nexus":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def path(self) -> str | None:
        return self.store.path

    # --- execute_kip ----------------------------------------------------------------------
    def execute_kip(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Run a request `{command | commands, parameters?, dry_run?}` (CONTRACT §1–§2)."""
        return self._execute(request, readonly=False)

    def execute_kip_readonly(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Like `execute_kip`, but any KML command is refused before it runs."""
        return self._execute(request, readonly=True)

    def _execute(self, request: Any, *, readonly: bool) -> dict[str, Any]:
        try:
            commands, shared, dry_run, batch = self._validate(request)
        except KipError as err:
            return {"error": err.to_dict()}
        if not batch:
            text, params = commands[0]
            response, _ = self.run_command(text, params, readonly=readonly, dry_run=dry_run)
            return response
        results = []
        for text, params in commands:
            response, stop = self.run_command(text, params, readonly=readonly,
                                              dry_run=dry_run)
            results.append(response)
            if stop:
                break
        return {"result": results}

    def _validate(self, request: Any) -> tuple[list[tuple[Any, dict]], dict, bool, bool]:
        if type(request) is dict and "command" in request and request.keys() <= _ONE_KEYS:
            # The common request (one command, a parameters dict) without the general
            # checks' allocations; anything unusual takes the general path below.
            command = request["command"]
            shared = request.get("parameters")
            dry_run = request.get("dry_run", False)
            if type(command) is str and (shared is None or type(shared) is dict) \
                    and (dry_run is False or dry_run is True):
                shared = {} if shared is None else dict(shared)
                return [(command, shared)], shared, dry_run, False
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
            return [(command, dict(shared))], dict(shared), dry_run, False
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
        return commands, dict(shared), dry_run, True

    # --- one command ----------------------------------------------------------------------
    def run_command(self, text: Any, parameters: Mapping[str, Any], *, readonly: bool = False,
                    dry_run: bool = False, privileged: bool = False
                    ) -> tuple[dict[str, Any], bool]:
        """Run one command; returns (response, stop_batch)."""
        if isinstance(text, _BadItem):
            return {"error": text.error().to_dict()}, False
        kind = None
        try:
            limits = self.config.limits
            parsed = syntax.parse(text, max_bytes=limits.max_command_bytes,
                                  max_nesting=limits.max_nesting,
                                  timeout=limits.query_timeout)
            kind = parsed.kind
            if kind == "KML" and readonly:
                raise KipError(ErrorCode.KIP_1001,
                               "execute_kip_readonly cannot run KML (UPSERT/DELETE): writes "
                               "need execute_kip",
                               "Send this command through execute_kip, or use only FIND, "
                               "SEARCH and DESCRIBE here.")
            if isinstance(parsed.command, (A.Find, A.Explain)):
                # FIND keeps its parameters apart: the prepared plan is cached per parsed
                # command and reads parameter values at execution (see exec.kql).
                if not parsed.parameters <= parameters.keys():
                    syntax.bind(parsed, parameters)     # raises KIP_1001 naming the missing
                result, cursor = self._run_read(parsed.command, parameters, text, dry_run)
                response = {"result": result}
                if cursor is not None:
                    response["next_cursor"] = cursor
                return response, False
            command = syntax.bind(parsed, parameters)
            if kind == "KML":
                result = self._run_kml(command, text, dry_run, privileged)
                return {"result": result}, False
            result, cursor = self._run_read(command, parameters, text, dry_run)
            response: dict[str, Any] = {"result": result}
            if cursor is not None:
                response["next_cursor"] = cursor
            return response, False
        except KipError as err:
            if err.line is not None and err.snippet is None and isinstance(text, str):
                err.with_position(text, err.line, err.column or 1)
            return {"error": err.to_dict()}, kind == "KML" and not readonly
        except Exception as exc:  # noqa: BLE001 - the API boundary: nothing else escapes
            log.exception("internal error running a KIP command")
            return {"error": internal_error(exc).to_dict()}, kind == "KML"

    def _run_read(self, command: A.Command, parameters: Mapping[str, Any], text: str,
                  dry_run: bool) -> tuple[Any, str | None]:
        kql = _KQL or _load_kql()       # not a per-call import: this is a point lookup's path
        with self.store.read() as txn:
            ctx = ExecContext.start(txn, self.config.limits, engine=self, text=text,
                                    dry_run=dry_run)
            if type(command) is A.Find:
                return kql.run_find(ctx, command, parameters)
            if isinstance(command, A.Explain):
                return kql.run_explain(ctx, command, parameters), None
            from .exec import meta
            return meta.run_meta(ctx, command)

    def _run_kml(self, command: A.Command, text: str, dry_run: bool, privileged: bool) -> Any:
        from .exec import kml
        with self._write_lock:
            with self.store.write() as txn:
                ctx = ExecContext.start(txn, self.config.limits, engine=self, text=text,
                                        dry_run=dry_run, privileged=privileged)
                result = kml.run_kml(ctx, command)
                if dry_run:
                    txn.abort()
                else:
                    self._before_commit(ctx)
        if not dry_run:
            self._after_commit(ctx)
        return result

    # Hooks for indexes kept beside the store (search); no-ops until attached.
    def _before_commit(self, ctx: ExecContext) -> None:
        if self.search is not None:
            self.search.before_commit(ctx)

    def _after_commit(self, ctx: ExecContext) -> None:
        self.primer_cache = None
        if self.search is not None:
            self.search.after_commit(ctx)


_KQL = None


def _load_kql() -> Any:
    """nexus.exec.kql, imported on first use (it pulls in the executors and numpy)."""
    global _KQL
    from .exec import kql
    _KQL = kql
    return kql


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
