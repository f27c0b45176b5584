"""`kip(*args, input=...)` in the test process: the CLI's own entry point (`nexus.cli.main`)
with stdin, stdout and stderr swapped for buffers, answering like `subprocess.run(...,
capture_output=True, text=True)` (a `CompletedProcess`).

A `kip` subprocess spends over a second of CPU importing and starting before it does what
its test looks at; tests that run many commands use this for most of them and keep at least
one real `python -m nexus.cli` per command, so the installed entry point is still tested.
Not for `kip serve` or anything that must be a separate process (locks held across
processes, signals, a shell at a terminal).
"""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys


class _Text(io.TextIOWrapper):
    """A text stream over bytes, like a real stdout: `.buffer` works for binary writers."""

    def __init__(self, data: bytes = b"") -> None:
        super().__init__(io.BytesIO(data), encoding="utf-8", errors="surrogateescape",
                         newline=None if data else "\n", write_through=True)

    def text(self) -> str:
        self.flush()
        raw = self.buffer
        assert isinstance(raw, io.BytesIO)
        return raw.getvalue().decode("utf-8", "replace")


def kip_in_process(*args: str, input: str | None = None,
                   drop_env: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """`kip ARGS` with `input` on stdin and the variables `drop_env` unset meanwhile."""
    from nexus.cli import main

    stdin, stdout, stderr = _Text((input or "").encode("utf-8")), _Text(), _Text()
    saved, saved_env = sys.stdin, {k: os.environ.pop(k) for k in drop_env if k in os.environ}
    sys.stdin = stdin
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                code = main(list(args))
            except SystemExit as exc:        # argparse's errors and --help
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None
                                                                   else 1)
    finally:
        sys.stdin = saved
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(["kip", *args], code, stdout.text(), stderr.text())
