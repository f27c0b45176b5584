"""`kip`: the command-line front end (an adapter: no engine logic lives here).

    kip serve   [--db DIR] [--host H] [--port N] [--api-key KEY] ...  JSON-RPC server
    kip shell   [...]                                                 interactive shell
    kip exec    [--db DIR | --url URL] 'COMMAND' | -f FILE [--param k=v]... [--readonly]
                [--dry-run]                                           run one command
    kip load    [--db DIR | --url URL] [--privileged] PATH...         load .kip capsules
    kip export  [--db DIR | --url URL] [--domain NAME] [-o FILE]      graph → .kip capsule
    kip info    [--db DIR]                                            counts, size, versions
    kip reindex [--db DIR] [--semantic wordllama|none]                rebuild search indexes
    kip check   [--db DIR] [--deep] [--repair]                        verify (repair) indexes

`--db` defaults to `./nexus-data` (or `$KIP_DB`); `--space NAME` with `--spaces DIR` or `--url`
names a space (`nexus.shell.target`). Exit status: 0 success, 1 a KIP error
(`exec`, `load`), 2 a usage or environment error (bad arguments, unreachable server, a
feature not in this build).

Long work reports progress on stderr (`nexus.shell.progress`: a bar at a terminal, a line of
counts every few seconds otherwise): `load`, `reindex`, `export`, `check`, and the bootstrap
or upgrade of a database when `exec` or `load` opens it.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from typing import Any, Iterable, Mapping, Sequence

from .cli_http import (CliError, api_key_of, export_over_http, load_over_http, post_kip,
                       progress_reporter)
from .config import DEFAULT_DB
from .errors import KipError
from .location import is_url, shown
from .version import KIP_VERSION, __version__


def _default_db() -> str:
    return os.environ.get("KIP_DB") or DEFAULT_DB


def _add_db(p: argparse.ArgumentParser, creates: bool = False, spaces: bool = True) -> None:
    p.add_argument("--db", default=None, metavar="DIR",
                   help=f"database directory (default: $KIP_DB or {DEFAULT_DB})")
    if spaces:
        p.add_argument("--space", default=None, metavar="NAME",
                       help="a space of --spaces DIR instead of --db (docs/server.md)")
        p.add_argument("--spaces", default=None, metavar="DIR|URL",
                       help="the spaces of --space: a directory or a postgresql:// URL")
    if creates:
        p.add_argument("--no-bootstrap", action="store_true",
                       help="do not apply the bundled capsules (Genesis, Person, Event, "
                       "$self, $system) when opening the database")


def _add_url(p: argparse.ArgumentParser,
             text: str = "a kip serve endpoint instead of --db") -> None:
    p.add_argument("--url", help=f"{text}, e.g. http://127.0.0.1:8080 (with --space NAME: "
                   "that space of a spaces server)")
    p.add_argument("--api-key", help="Bearer key for --url (default: $KIP_API_KEY)")


def _resolve_target(args: argparse.Namespace) -> None:
    """`--db`, `--space NAME` with `--spaces DIR` or `--url`, resolved as `kip shell` resolves
    them (`nexus.shell.target`): `args.db` becomes the local database (DIR/NAME for a space)
    and `args.endpoint` the endpoint to POST to (None: local)."""
    if not hasattr(args, "space"):
        return                  # serve and space: their --spaces is the directory itself
    from .shell.target import resolve
    try:
        target = resolve(db=args.db, url=getattr(args, "url", None), spaces=args.spaces,
                         space=args.space)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    args.db, args.endpoint = target.db, target.url


def _open(args: argparse.Namespace, create: bool = True, **options: Any) -> Any:
    from .api import Nexus
    if getattr(args, "no_bootstrap", False):
        options["bootstrap"] = False
    path = args.db or _default_db()
    url = is_url(path)
    if not create and not url and not os.path.isdir(path):
        raise CliError(f"no database at {path}")
    # Bundled capsules applied to a new database, or changed ones to an old one: a bar that
    # goes away when done at a terminal, a line only when it takes a while otherwise.
    progress = progress_reporter("bootstrap", unit="capsules", per_label=False, leave=False,
                         delay=0.5)
    if not progress.tty:
        progress.delay = 2.0
    try:
        if create and not url:
            os.makedirs(path, exist_ok=True)
        return Nexus.open(path, progress=progress, **options)
    except KipError as exc:
        hint = f"\n  hint: {exc.hint}" if exc.hint else ""
        raise CliError(f"cannot open {shown(path)}: {exc.message}{hint}") from exc
    except Exception as exc:  # noqa: BLE001 - the CLI reports, it does not trace back
        raise CliError(f"cannot open {shown(path)}: {exc}") from exc
    finally:
        progress.close()


def _emit(data: Any, stream: Any = None) -> None:
    stream = stream or sys.stdout
    stream.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")


# --- serve --------------------------------------------------------------------------------

# Engine limits `kip serve` sets from a flag or, failing that, from the environment
# (`KIP_` + the upper-case field name, e.g. KIP_MAX_ROWS). docs/limits.md documents each.
LIMIT_FLAGS = {   # Limits field → (flag, type, help)
    "query_timeout": ("--timeout", float, "per-command execution limit in seconds "
                      "(KIP_4001; default 30)"),
    "max_body_bytes": ("--max-body", int, "request body limit in bytes (413; default 32 MiB)"),
    "max_command_bytes": ("--max-command-bytes", int, "bytes of one command (KIP_4002; "
                          "default 8 MiB)"),
    "max_nesting": ("--max-nesting", int, "bracket depth of a command (KIP_4002; default 64)"),
    "max_batch": ("--max-batch", int, "commands in one `commands` batch (KIP_4002; "
                  "default 1000)"),
    "max_rows": ("--max-rows", int, "solutions one query may produce (KIP_4002; "
                 "default 1000000)"),
    "max_hops": ("--max-hops", int, "upper bound of a path range {m,n} (KIP_4002; default 20)"),
    "max_path_visits": ("--max-path-visits", int, "nodes the path walks of one query may "
                        "visit (KIP_4002; default 2000000)"),
    "max_link_scan": ("--max-link-scan", int, "links a predicate-variable pattern "
                      "(?s, ?p, ?o) with nothing bound may scan (KIP_4002; default 100000)"),
    "max_regex_length": ("--max-regex-length", int, "characters of a REGEX pattern "
                         "(KIP_1001; default 1000)"),
    "regex_timeout": ("--regex-timeout", float, "seconds one REGEX match may take "
                      "(KIP_4001; default 0.25)"),
    "max_search_limit": ("--max-search-limit", int, "the cap on SEARCH ... LIMIT n "
                         "(default 100)"),
    "max_search_chars": ("--max-search-chars", int, "characters of a SEARCH text "
                         "(KIP_4002; default 4096)"),
    "max_result_bytes": ("--max-result-bytes", int, "JSON bytes of one command's result "
                         "(KIP_4002; default 256 MiB)"),
}


def limit_options(args: argparse.Namespace, environ: Mapping[str, str] | None = None
                  ) -> dict[str, Any]:
    """The engine limits given as `kip serve` flags or `KIP_*` environment variables."""
    environ = os.environ if environ is None else environ
    options: dict[str, Any] = {}
    for field, (flag, kind, _) in LIMIT_FLAGS.items():
        value = getattr(args, flag.lstrip("-").replace("-", "_"), None)
        source = flag
        if value is None and environ.get(f"KIP_{field.upper()}"):
            source = f"KIP_{field.upper()}"
            try:
                value = kind(environ[source])
            except ValueError:
                raise CliError(f"{source} must be a number, got {environ[source]!r}") from None
        if value is not None:
            if not value > 0:
                raise CliError(f"{source} must be positive, got {value}")
            options[field] = value
    return options


def _memory_option(args: argparse.Namespace) -> int | None:
    """`--max-memory MIB` / KIP_MAX_MEMORY in MiB (0: no budget); None: the default."""
    value, source = args.max_memory, "--max-memory"
    if value is None and os.environ.get("KIP_MAX_MEMORY"):
        source = "KIP_MAX_MEMORY"
        try:
            value = int(os.environ[source])
        except ValueError:
            raise CliError(f"{source} must be a whole number of MiB, got "
                           f"{os.environ[source]!r}") from None
    if value is None:
        return None
    if value < 0 or 0 < value < 256:
        raise CliError(f"{source} must be 0 (no budget) or at least 256 MiB, got {value}")
    return value << 20


def cmd_serve(args: argparse.Namespace) -> int:
    from .server import serve
    api_key = args.api_key or os.environ.get("KIP_API_KEY") or None
    if api_key and api_key != api_key.strip() and api_key.strip():
        sys.stderr.write("kip serve: note: the whitespace around the API key is ignored\n")
    db = args.db or _default_db()
    try:
        return serve(db, host=args.host, port=args.port,
                     api_key=api_key, allow_remote=args.allow_remote,
                     request_timeout=args.request_timeout, limits=limit_options(args),
                     access_log=None if args.access_log == "off" else args.access_log,
                     log_level=args.log_level, bootstrap=not args.no_bootstrap,
                     threads=args.threads, audit=not args.no_audit, http=args.http,
                     loop=args.loop, max_memory=_memory_option(args),
                     spaces=args.spaces, auto_create=args.auto_create,
                     max_open_spaces=args.max_open_spaces, keys=args.keys,
                     workers=args.workers)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    except OSError as exc:
        raise CliError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") \
            from exc
    except KipError as exc:
        hint = f"\n  hint: {exc.hint}" if exc.hint else ""
        raise CliError(f"cannot open {shown(args.db or _default_db())}: {exc.message}{hint}") \
            from exc


def cmd_space(args: argparse.Namespace) -> int:
    """`kip space create|list|drop [NAME] --spaces DIR|URL`."""
    from .spaces import Spaces
    try:
        registry = Spaces(args.spaces, max_open=1)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    try:
        if args.action == "list":
            for name in registry.names():
                print(name)
            return 0
        if args.name is None:
            raise CliError(f"kip space {args.action} needs a space NAME")
        if args.action == "create":
            done = registry.create(args.name)
            print(f"{'created' if done else 'exists'}: {args.name}")
        else:
            done = registry.drop(args.name)
            print(f"{'dropped' if done else 'no such space'}: {args.name}")
            if not done:
                return 1
        return 0
    except KipError as exc:
        raise CliError(exc.message) from exc
    finally:
        registry.close()


# --- shell --------------------------------------------------------------------------------

def cmd_shell(argv: list[str]) -> int:
    try:
        from .shell import main as shell_main
    except ImportError:
        if any(a in ("-h", "--help") for a in argv):
            print("usage: kip shell [--db DIR] ...\n\nThe interactive KIP shell "
                  "(not available in this build).")
            return 0
        raise CliError("the interactive shell (nexus.shell) is not available in this build")
    return int(shell_main(argv) or 0)      # the shell parses its own options (--db, --url)


# --- exec ---------------------------------------------------------------------------------

def parse_param(text: str) -> tuple[str, Any]:
    """`k=v`: v parsed as JSON, falling back to the raw string."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise CliError(f"--param expects NAME=VALUE, got {text!r}")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return key.lstrip(":"), value


def cmd_exec(args: argparse.Namespace) -> int:
    if (args.command is None) == (args.file is None):
        raise CliError("give one COMMAND argument or -f FILE")
    if args.file is not None:
        if args.file == "-":
            text = sys.stdin.read()
        else:
            try:
                with open(args.file, encoding="utf-8") as fh:
                    text = fh.read()
            except OSError as exc:
                raise CliError(f"cannot read {args.file}: {exc.strerror}") from None
    else:
        text = args.command
    params = dict(parse_param(p) for p in args.param or [])
    request: dict[str, Any] = {"command": text}
    if params:
        request["parameters"] = params
    if args.dry_run:
        request["dry_run"] = True
    method = "execute_kip_readonly" if args.readonly else "execute_kip"
    if args.endpoint is not None:
        response = post_kip(args.endpoint, method, request, api_key_of(args))
    else:
        with _open(args) as nexus:
            response = getattr(nexus, method)(request)
    _emit(response)
    return 1 if "error" in response else 0


# --- load ---------------------------------------------------------------------------------

def cmd_load(args: argparse.Namespace) -> int:
    for path in args.paths:
        if not os.path.exists(path):
            raise CliError(f"no such file or directory: {path}")
    if args.endpoint is not None:
        report: Any = load_over_http(args)
    else:
        with _open(args) as nexus, progress_reporter("load", unit="bytes") as progress:
            options = {"privileged": True} if args.privileged else {}
            try:
                # Every file is tried and reported, each in its own transaction.
                report = nexus.load_capsules(list(args.paths), progress, keep_going=True,
                                             **options)
            except KipError as err:
                report = {"error": err.to_dict()}
    report = _plain(report)
    _emit(report)
    if isinstance(report, list):
        failed = [r for r in report if isinstance(r, dict) and r.get("error")]
        for r in failed:
            # Over --url the commands before the failing one stay applied (and counted).
            applied = r.get("statements", 0) if args.endpoint is not None else 0
            what = f"stopped after {applied} command(s)" if applied else "not loaded"
            sys.stderr.write(f"kip: {r['path']}: {what}: {r['error'].get('code')} "
                             f"{r['error'].get('message')}\n")
        sys.stderr.write(f"kip: {len(report) - len(failed)} file(s) loaded, {len(failed)} "
                         f"failed\n")
    return 1 if _report_failed(report) else 0


def _plain(value: Any) -> Any:
    """A loader report as JSON-able data (dataclasses and objects become dicts)."""
    import dataclasses
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "to_dict"):
        return _plain(value.to_dict())
    if hasattr(value, "__dict__"):
        return _plain({k: v for k, v in vars(value).items() if not k.startswith("_")})
    return str(value)


def _report_failed(report: Any) -> bool:
    if isinstance(report, dict):
        if report.get("error") or report.get("errors") or report.get("failed"):
            return True
        return any(_report_failed(v) for v in report.values() if isinstance(v, (dict, list)))
    if isinstance(report, list):
        return any(_report_failed(v) for v in report)
    return False


# --- export -------------------------------------------------------------------------------

def cmd_export(args: argparse.Namespace) -> int:
    to_file = bool(args.output and args.output != "-")
    if args.endpoint is not None:
        pieces = export_over_http(args)
        if to_file:
            _write_whole(args.output, list(pieces))     # every page read before writing
        else:
            for piece in pieces:
                sys.stdout.write(piece)
        return 0
    with _open(args, create=False, bootstrap=False) as nexus, \
            progress_reporter("export", unit="elements") as progress:
        pieces = nexus.export_lines(domain=args.domain, progress=progress)
        try:
            first = next(pieces, "")            # selects the elements: may not find the domain
        except LookupError as exc:
            raise CliError(str(exc.args[0] if exc.args else exc)) from None
        if to_file:
            _write_whole(args.output, itertools.chain((first,), pieces))
        else:
            sys.stdout.write(first)
            for piece in pieces:
                sys.stdout.write(piece)
    return 0


def _write_whole(path: str, pieces: Iterable[str]) -> None:
    """Write the text `pieces` to `path` whole or not at all: a temporary file beside it,
    then a rename; a place that is missing or not writable is a message (CliError), and no
    truncated or temporary file is left behind (also when producing a piece fails)."""
    import tempfile
    target = os.path.abspath(path)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".kip-export-", suffix=".tmp",
                                   dir=os.path.dirname(target))
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for piece in pieces:
                fh.write(piece)
            fh.flush()
            os.fsync(fh.fileno())
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, target)
        tmp = None
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


# --- info ---------------------------------------------------------------------------------

def cmd_info(args: argparse.Namespace) -> int:
    import platform
    path = args.db or _default_db()
    with _open(args, create=False, bootstrap=False) as nexus:
        info = nexus.info()
    counts = {k: info[k] for k in ("concepts", "propositions", "concept_types",
                                   "proposition_types", "domains")}
    size = 0 if is_url(path) else sum(os.path.getsize(os.path.join(root, f))
                                       for root, _, files in os.walk(path) for f in files)
    try:
        import lmdb
        lmdb_version = lmdb.__version__
    except ImportError:  # pragma: no cover
        lmdb_version = None
    _emit({"path": shown(path), **counts, "disk_bytes": size,
           "nexus_version": __version__, "kip_version": KIP_VERSION,
           "python": platform.python_version(), "lmdb": lmdb_version})
    return 0


# --- reindex / check (the logic is other components'; this is wiring) ----------------------

def cmd_reindex(args: argparse.Namespace) -> int:
    # --semantic: the database's semantic embedder from now on (recorded in it on open).
    options = {"semantic": args.semantic} if args.semantic else {}
    with _open(args, create=False, bootstrap=False, **options) as nexus, \
            progress_reporter("reindex", unit="elements") as progress:
        report = nexus.reindex(progress)
    _emit(_plain(report))
    return 0


def _check(nexus: Any, deep: bool, repair: bool, wait: float | None) -> dict[str, Any]:
    """`Nexus.check` with progress on stderr: a phase reported around the call, and the
    vector catch-up when the check waits for it."""
    with progress_reporter("check") as progress, progress_reporter("check") as waiting:
        phase = "verifying" + (" deeply" if deep else "") + (" and repairing" if repair else "")
        progress(phase, 0, 1)
        # Its own reporter: a wait cut short by --wait must not be shown as complete.
        report = nexus.check(deep=deep, repair=repair, wait=wait, progress=waiting)
        waiting.close()
        progress(phase, 1, 1)
        return dict(report)


def _check_wait(args: argparse.Namespace) -> float | None:
    """`--wait S` or KIP_CHECK_WAIT: seconds to wait for the vector indexer."""
    text = args.wait if args.wait is not None else os.environ.get("KIP_CHECK_WAIT")
    if text is None:
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0 or seconds == float("inf"):
        raise CliError(f"--wait / KIP_CHECK_WAIT must be a number of seconds >= 0 "
                       f"(got {text!r})")
    return seconds


def cmd_check(args: argparse.Namespace) -> int:
    if args.endpoint is not None:
        raise CliError("check cannot run over --url: it reads the database's own files, "
                       "which a server does not send\n  hint: run it where the files are, "
                       "with --db DIR or --space NAME --spaces DIR, while no server has that "
                       "database open")
    wait = _check_wait(args)
    if not args.in_process:
        return _check_in_child(args)
    from .api import format_problems
    # A check writes nothing: not even the vector files its catch-up would refresh.
    with _open(args, create=False, bootstrap=False, save_vectors=args.repair) as nexus:
        try:
            report = _check(nexus, args.deep, args.repair, wait)
        except KipError as err:
            # The walk could not read the data (a damaged page, an I/O error): that is a
            # finding of the check, exit status 1.
            print(f"kip: check failed on {nexus.path}: {err.message}\n  hint: "
                  f"{_damage_hint(err)}", file=sys.stderr)
            return 1
    _emit(report)
    for line in format_problems(report):
        print(f"kip: {line}", file=sys.stderr)
    if report.get("pending"):
        print(f"kip: note: {report['pending']}", file=sys.stderr)
    repaired = report.get("repaired")
    if repaired is None:
        if not report["ok"]:
            print("kip: the indexes drifted from the data; `kip check --repair` rebuilds them",
                  file=sys.stderr)
        return 0 if report["ok"] else 1
    if repaired["store_fixes"] or repaired["search_reindexed"]:
        print(f"kip: repaired {repaired['store_fixes']} store index entries"
              + ("; search indexes rebuilt" if repaired["search_reindexed"] else ""),
              file=sys.stderr)
    if not repaired["ok"]:
        remaining = ", ".join(line for line in format_problems(repaired))
        print(f"kip: problems remain that cannot be repaired (damaged base records): "
              f"{remaining}", file=sys.stderr)
    return 0 if repaired["ok"] else 1


def _damage_hint(err: KipError) -> str:
    if err.hint and "backup" in err.hint:
        return err.hint
    return ("the database cannot be read whole: restore its directory from a backup (an "
            "export of what is still readable may save recent data)")


def _check_in_child(args: argparse.Namespace) -> int:
    """Run `kip check --in-process` in a child process and relay what it prints: LMDB
    trusts the file it maps, so a damaged page can kill the reader by a signal (SIGBUS
    past a truncated end, SIGABRT from an assertion); here that is a reported error."""
    import signal
    import subprocess
    from . import __file__ as package_file
    path = args.db or _default_db()
    argv = [sys.executable, "-m", "nexus.cli", "check", "--in-process", "--db", path]
    argv += ["--deep"] * bool(args.deep) + ["--repair"] * bool(args.repair)
    argv += ["--wait", args.wait] if args.wait is not None else []
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(package_file)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    streams = [_fd_or_pipe(sys.stdout), _fd_or_pipe(sys.stderr)]
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=streams[0],
                                stderr=streams[1], env=env)
    except OSError as exc:
        raise CliError(f"cannot start the check process: {exc}") from exc
    try:
        out, err = proc.communicate()
    except KeyboardInterrupt:
        proc.wait()
        return 130
    if out:
        sys.stdout.write(out.decode("utf-8", "replace"))
    if err:
        sys.stderr.write(err.decode("utf-8", "replace"))
    code = proc.returncode
    if code >= 0:
        return code
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    print(f"kip: check failed: the check of {os.path.abspath(path)} died by {name} while "
          f"reading the database: its file is damaged (a page cut short or overwritten)\n"
          f"  hint: restore the database directory from a backup; "
          + ("a repair commits whole transactions or nothing" if args.repair
             else "the check wrote nothing"),
          file=sys.stderr)
    return 1


def _fd_or_pipe(stream: Any) -> Any:
    """The stream's file descriptor for a child to inherit, or PIPE when it has none (a
    captured stream)."""
    import subprocess
    try:
        stream.flush()
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return subprocess.PIPE


# --- version history (docs/history.md) -----------------------------------------------------

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _duration(text: str) -> float:
    """`30d`, `12h`, `90m`, `45s`, `2w` → seconds."""
    value, unit = text.strip()[:-1], text.strip()[-1:].lower()
    try:
        amount = float(value)
    except ValueError:
        amount = -1.0
    if unit not in _UNITS or not value or amount < 0:
        raise CliError(f"--keep {text!r}: give a duration like 30d, 12h, 90m, 45s or 2w")
    return amount * _UNITS[unit]


def cmd_compact(args: argparse.Namespace) -> int:
    keep = _duration(args.keep)
    with _open(args, create=False, bootstrap=False) as nexus:
        report = nexus.compact_history(keep)
    _emit(report)
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    keep: float | None = None
    if args.keep is not None and args.keep.lower() not in ("all", "none"):
        keep = _duration(args.keep)
    with _open(args, create=False, bootstrap=False) as nexus:
        if args.switch in ("on", "off"):
            nexus.set_history(args.switch == "on")
        if args.keep is not None:
            nexus.set_history_retention(keep)
        retention = nexus.history_retention
        _emit({"history": "on" if nexus.history_enabled else "off",
               "keep_seconds": retention})
    return 0


# --- argument parsing ---------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kip", description="nexus: a KIP (Knowledge Interaction Protocol) engine.",
        epilog=f"KIP {KIP_VERSION}. The database directory defaults to $KIP_DB or {DEFAULT_DB}.")
    parser.add_argument("--version", action="version",
                        version=f"nexus {__version__} (KIP {KIP_VERSION})")
    sub = parser.add_subparsers(dest="cmd", metavar="COMMAND")

    p = sub.add_parser("serve", help="serve the JSON-RPC endpoint POST /kip",
                       description="Serve POST /kip (execute_kip, execute_kip_readonly, "
                       "list_logs), GET / and GET /healthz until SIGTERM/SIGINT (graceful).")
    _add_db(p, creates=True, spaces=False)
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 = any free)")
    p.add_argument("--api-key", default=None,
                   help="require `Authorization: Bearer KEY` (default: $KIP_API_KEY)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a non-loopback --host without an API key")
    for field, (flag, kind, text) in LIMIT_FLAGS.items():
        p.add_argument(flag, type=kind, default=None,
                       metavar="SECONDS" if kind is float else "N",
                       help=f"{text}; env KIP_{field.upper()}")
    p.add_argument("--request-timeout", type=float, default=None, metavar="SECONDS",
                   help="wall-clock limit per HTTP request (default max(60, 2 x timeout))")
    p.add_argument("--access-log", default="-", metavar="FILE",
                   help="JSON-lines access log: a file, - for stderr (default), or off")
    p.add_argument("--no-audit", action="store_true",
                   help="keep no audit log (list_logs then answers an empty list)")
    p.add_argument("--max-memory", type=int, default=None, metavar="MIB",
                   help="memory budget of the server process in MiB (a request past it "
                        "fails with KIP_4002; 0: none; default 3/4 of the machine's memory; "
                        "env KIP_MAX_MEMORY)")
    p.add_argument("--threads", type=int, default=None,
                   help="worker threads running commands (default 64)")
    p.add_argument("--workers", type=int, default=1,
                   help="processes answering on the port (default 1): this one owns the "
                        "database, the others answer queries and forward the rest to it "
                        "(docs/server.md)")
    p.add_argument("--http", default="auto", choices=["auto", "httptools", "h11"],
                   help="HTTP parser (default: httptools when installed, else h11)")
    p.add_argument("--loop", default="auto", choices=["auto", "uvloop", "asyncio"],
                   help="event loop (default: uvloop when installed, else asyncio)")
    p.add_argument("--log-level", default="warning",
                   choices=["critical", "error", "warning", "info", "debug"],
                   help="uvicorn's own log level (default warning)")
    p.add_argument("--spaces", default=None, metavar="DIR|URL",
                   help="serve POST /v1/{space}/kip over the spaces in DIR (one store each), "
                        "or of a postgresql:// URL (one database), instead of --db")
    p.add_argument("--auto-create", action="store_true",
                   help="with --spaces: a request to a missing space creates it")
    p.add_argument("--max-open-spaces", type=int, default=64, metavar="N",
                   help="with --spaces: spaces kept open at once (LRU; default 64)")
    p.add_argument("--keys", default=None, metavar="FILE",
                   help="with --spaces: JSON keys file {KEY: {spaces, mode}}, reread on SIGHUP")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("space", help="create, list or drop spaces (--spaces DIR or URL)")
    p.add_argument("action", choices=["create", "list", "drop"])
    p.add_argument("name", nargs="?", default=None)
    p.add_argument("--spaces", required=True, metavar="DIR|URL",
                   help="the spaces: a directory, or a postgresql:// URL")
    p.set_defaults(func=cmd_space)

    sub.add_parser("shell", help="the interactive KIP shell (see `kip shell --help`)",
                   add_help=False)

    p = sub.add_parser("exec", help="run one command and print the JSON response",
                       description="Run one KIP command (text, or a file with -f) locally or "
                       "against a server (--url) and print the JSON response. Exit status 1 "
                       "when the response is a KIP error.")
    _add_db(p, creates=True)
    p.add_argument("command", nargs="?", help="the KIP command text")
    p.add_argument("-f", "--file", help="read the command from FILE (- for stdin)")
    p.add_argument("--param", "-p", action="append", metavar="NAME=VALUE",
                   help="a parameter (:NAME); VALUE is JSON, else a string; repeatable")
    p.add_argument("--readonly", action="store_true", help="use execute_kip_readonly")
    p.add_argument("--dry-run", action="store_true", help="validate only, write nothing")
    _add_url(p)
    p.set_defaults(func=cmd_exec)

    p = sub.add_parser("load", help="load .kip capsule files or directories",
                       description="Load KIP capsules (.kip files, or directories of them) "
                       "and print what was loaded. Exit status 1 if a capsule failed.")
    _add_db(p, creates=True)
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--privileged", action="store_true",
                   help="let the capsules change protected system definitions (trusted "
                   "capsules only)")
    _add_url(p, "send each capsule's commands to a kip serve endpoint instead of --db "
             "(each command its own transaction there)")
    p.set_defaults(func=cmd_load)

    p = sub.add_parser("export", help="write the graph (or one domain) as a .kip capsule",
                       description="Write the whole graph, or one domain and what it needs, "
                       "as a .kip capsule that `kip load` re-imports into a new database.")
    _add_db(p)
    p.add_argument("--domain", help="export only this domain's concepts (and the types, "
                   "predicates and links they need)")
    p.add_argument("-o", "--output", help="output file (default stdout)")
    _add_url(p, "export the whole graph of a kip serve endpoint (by EXPORT, page by page) "
             "instead of --db")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("info", help="counts, disk size, versions",
                       description="Print counts of concepts, propositions, types and "
                       "predicates, the disk size and versions as JSON.")
    _add_db(p)
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("reindex", help="rebuild the SEARCH indexes",
                       description="Rebuild the lexical and vector SEARCH indexes (and the "
                       "semantic one, when the database has a semantic embedder).")
    _add_db(p)
    p.add_argument("--semantic", choices=["wordllama", "none"], default=None,
                   help="choose the database's semantic embedder for SEARCH MODE "
                   "\"semantic\"/\"hybrid\" (recorded in it; wordllama needs "
                   "pip install 'nexus-kip[semantic]')")
    p.set_defaults(func=cmd_reindex)

    p = sub.add_parser("check", help="verify every index against the data (and repair)",
                       description="Verify every index against the base records: the "
                       "store's type/name, type, name and three link indexes, counters and "
                       "statistics, and the SEARCH indexes (lexical and vector). Print a JSON "
                       "report; exit status 1 if anything drifted. --repair rebuilds what "
                       "drifted from the base records.")
    _add_db(p)
    p.add_argument("--deep", action="store_true",
                   help="also re-derive every search document and check every posting "
                   "(slower)")
    p.add_argument("--repair", action="store_true",
                   help="rebuild the drifted indexes from the base records (the store's in "
                   "one transaction, then the search indexes); exit status 0 when nothing "
                   "is left")
    p.add_argument("--wait", default=None, metavar="SECONDS",
                   help="wait at most this long for the vector indexer to catch up "
                   "(default 60, or $KIP_CHECK_WAIT); what is still queued then is "
                   "reported as pending, not compared")
    p.add_argument("--in-process", action="store_true",
                   help="walk the database in this process (by default a child process "
                   "walks it, so that a damaged file is reported instead of killing kip)")
    _add_url(p, "not supported: a check reads the database's files (run it where they are)")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("compact", help="drop version-history records older than --keep",
                       description="Retention for the version log (docs/history.md): drop "
                       "the records older than --keep. FIND … AS OF and REVERT reach no "
                       "further back afterwards. Prints {dropped, kept}.")
    _add_db(p)
    p.add_argument("--keep", required=True, metavar="AGE",
                   help="how much history to keep: 30d, 12h, 90m, 45s or 2w")
    p.set_defaults(func=cmd_compact)

    p = sub.add_parser("history", help="turn the version history on or off (or show it)",
                       description="The per-database switch of the version log "
                       "(docs/history.md); on by default. Records already kept stay "
                       "readable until `kip compact` drops them.")
    _add_db(p)
    p.add_argument("switch", nargs="?", choices=("on", "off", "status"), default="status")
    p.add_argument("--keep", metavar="AGE",
                   help="the retention policy: keep this much history (30d, 12h, 90m, 45s, "
                   "2w; `all` to keep everything) — applied now and by later writes, at "
                   "most once an hour")
    p.set_defaults(func=cmd_history)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "shell":
            return cmd_shell(argv[1:])
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        _resolve_target(args)
        return int(args.func(args) or 0)
    except CliError as exc:
        print(f"kip: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
