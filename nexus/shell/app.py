"""`kip shell`: argument parsing, choosing the backend, and the two ways of running.

Interactive (stdin is a terminal): a prompt_toolkit REPL with history, highlighting and
completion (`nexus.shell.editor`); each entry runs as the person typed it, a capsule of
several UPSERTs as one command. Piped (`kip shell --db DIR < script.kip`): the whole input
is split into commands (`nexus.shell.entry.split_commands`) and run in order; the first error
stops the run with exit status 1. Exit status 2: bad arguments, or the database or server
could not be opened.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TextIO

from ..errors import KipError
from .backend import Backend, HttpBackend, LocalBackend
from .commands import run_meta
from .core import Quit, Shell
from .progress import Progress
from .target import resolve
from .terminal import PlainUI, TtyUI

DEFAULT_DB = "./nexus-data"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="kip shell",
        description="An interactive shell for KIP on a nexus database or a running kip serve. "
                    "With standard input not a terminal, runs the commands it reads and "
                    "exits 1 at the first error.")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--db", metavar="DIR",
                       help=f"local database directory (default {DEFAULT_DB})")
    where.add_argument("--url", metavar="URL",
                       help="a running `kip serve`, e.g. http://127.0.0.1:8080")
    where.add_argument("--spaces", metavar="DIR",
                       help="a spaces directory (`kip serve --spaces`): open --space NAME "
                            "in it")
    ap.add_argument("--space", metavar="NAME",
                    help="a space of --spaces DIR, or of the spaces server at --url "
                         "(POST URL/v1/NAME/kip)")
    ap.add_argument("--api-key", metavar="KEY",
                    help="Bearer key for --url (default: $KIP_API_KEY)")
    ap.add_argument("--readonly", action="store_true",
                    help="send every command with execute_kip_readonly (no writes)")
    ap.add_argument("--json", action="store_true",
                    help="print raw JSON responses (one per line when piped)")
    ap.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                    help="colour output (auto: only on a terminal, and not when NO_COLOR "
                         "is set)")
    ap.add_argument("--timing", choices=("on", "off"), default=None,
                    help="show the time each command took (default: on interactively, "
                         "off when piped)")
    ap.add_argument("--ids", action="store_true",
                    help="show element ids beside names (also :ids on at the prompt)")
    ap.add_argument("--no-history", action="store_true",
                    help="do not read or write the history file")
    ap.add_argument("--no-bootstrap", action="store_true",
                    help="open a local database without applying the bundled capsules")
    return ap


def open_backend(args: argparse.Namespace) -> Backend:
    target = resolve(db=args.db, url=args.url, spaces=args.spaces, space=args.space)
    if target.url is not None:
        return HttpBackend(target.url, args.api_key or os.environ.get("KIP_API_KEY") or None)
    args.db = target.db
    # The bootstrap of a new database, or the upgrade of an old one: a passing bar.
    with Progress("opening", sys.stderr, per_label=False, leave=False, delay=0.5,
                  tty=sys.stderr.isatty() and sys.stdin.isatty()) as progress:
        if not progress.tty:
            progress.delay = 2.0
        return LocalBackend(args.db or DEFAULT_DB, bootstrap=not args.no_bootstrap,
                            progress=progress)


def want_color(choice: str, tty: bool) -> bool:
    if choice == "always":
        return True
    if choice == "never":
        return False
    return tty and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def main(argv: list[str] | None = None) -> int:
    """Entry point of `kip shell` and `python -m nexus.shell`; returns the exit status."""
    args = build_parser().parse_args(argv)
    # The engine logs unexpected failures; the shell shows them as KIP_4003 already.
    logging.getLogger("nexus").addHandler(logging.NullHandler())
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    try:
        backend = open_backend(args)
    except Exception as exc:  # noqa: BLE001 - report any failure to open, then exit 2
        where = args.url or args.spaces or args.db or DEFAULT_DB
        message = exc.message if isinstance(exc, KipError) else exc
        print(f"kip shell: cannot open {where}: {message}", file=sys.stderr)
        return 2
    try:
        if interactive:
            return run_interactive(backend, args)
        return run_piped(backend, args, sys.stdin, sys.stdout)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:         # `kip shell < q.kip | head`: the reader went away
        sys.stdout = open(os.devnull, "w")
        return 0
    finally:
        backend.close()


def _timing(args: argparse.Namespace, default: bool) -> bool:
    return default if args.timing is None else args.timing == "on"


def run_piped(backend: Backend, args: argparse.Namespace, source: TextIO,
              out: TextIO) -> int:
    shell = Shell(backend, PlainUI(out), color=want_color(args.color, False),
                  readonly=args.readonly, json_output=args.json,
                  timing=_timing(args, False), meta_runner=run_meta, ids=args.ids)
    try:
        return 0 if shell.run_text(source.read(), stop_on_error=True) else 1
    except Quit:
        return 0


def run_interactive(backend: Backend, args: argparse.Namespace) -> int:
    from .editor import make_session   # prompt_toolkit's UI only when a person is there
    ui = TtyUI(sys.stdout)
    shell = Shell(backend, ui, color=want_color(args.color, True), readonly=args.readonly,
                  json_output=args.json, timing=_timing(args, True), meta_runner=run_meta,
                  ids=args.ids)
    session = make_session(shell, history=not args.no_history)
    shell.info(shell.paint("dim", f"nexus KIP shell on {where_text(backend)}. "
                                  f"Type help for help, quit or Ctrl-D to leave."))
    while True:
        try:
            text = session.prompt()
        except KeyboardInterrupt:
            continue
        except EOFError:
            break
        try:
            shell.run_text(text, join=True)
        except Quit:
            break
        except KeyboardInterrupt:
            shell.info(shell.paint("warn", "interrupted"))
    return 0


def where_text(backend: Backend) -> str:
    if isinstance(backend, LocalBackend):
        return f"the local database {backend.path}"
    if isinstance(backend, HttpBackend):
        return backend.endpoint
    return backend.label
