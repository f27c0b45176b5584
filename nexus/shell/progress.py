"""Progress of long work: a tqdm bar at a terminal, a line of counts every few seconds
otherwise (logs, CI, pipes).

`Progress(what)` is a callback for the engine's progress hooks, called as
`progress(label, done, total)` or `progress(done, total)`:

- `Nexus.load_capsules` — (file path, bytes applied, bytes in the file), one bar per file;
- `Nexus.reindex` — (phase, done, total) with phases "clear", "lexical", "vectors";
- `Nexus.export_lines(progress=…)` — ("elements", written, total);
- `Nexus.open(progress=…)` — the bootstrap of a new database and the upgrade of an old one
  to changed bundled capsules: (capsule name, capsules applied, capsules to apply);
- `kip check` — phases reported around the check by the CLI.

With `per_label` (the default) each new label starts a new bar (and closes the one before,
as finished); otherwise the label is shown beside one bar. Nothing is drawn before `delay`
seconds have passed, so quick work stays quiet; `leave=False` clears a bar when it is done
(work that is a step on the way, like the bootstrap of a new database). When the stream is
not a terminal, a line `what: label: done of total (pct%)` is written when a phase starts,
every `interval` seconds, and when it ends (with its duration; a phase that is done at its
first count gets only this line). `close()` ends the last phase.

Used by the `kip` CLI (load, reindex, export, check, opening a database) and the shell's
`:load`.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, TextIO


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def _is_tty(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:            # a closed stream
        return False


class Progress:
    """A progress callback drawing on `stream` (default stderr); see the module docstring."""

    def __init__(self, what: str, stream: TextIO | None = None, *, unit: str = "",
                 per_label: bool = True, interval: float = 5.0, delay: float = 0.0,
                 leave: bool = True, tty: bool | None = None) -> None:
        self.what = what
        self.stream = stream if stream is not None else sys.stderr
        self.tty = _is_tty(self.stream) if tty is None else tty
        self.bytes = unit == "bytes"
        self.unit = "" if self.bytes else unit
        self.per_label = per_label
        self.interval = interval
        self.delay = delay
        self.leave = leave
        self.started = time.monotonic()
        self._bar: Any = None
        self._label: str | None = None
        self._state: tuple[str, int, int] | None = None     # the last (label, done, total)
        self._phase_started = self.started
        self._last_line = 0.0
        self._lines = 0           # lines written for the current phase (not a terminal)

    # --- the callback -----------------------------------------------------------------------
    def __call__(self, *args: Any) -> None:
        label, done, total = _split(args)
        now = time.monotonic()
        if self._label is None or (self.per_label and label != self._label):
            self._end_phase(finished=True)
            self._phase_started, self._lines = now, 0
        self._label = label
        self._state = (label, done, total)
        if self.tty:
            self._draw(label, done, total)
        else:
            self._maybe_line(now, done, total)

    def close(self) -> None:
        """End the last phase (its bar stays on the screen)."""
        self._end_phase(finished=False)
        self._label = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- a terminal -------------------------------------------------------------------------
    def _draw(self, label: str, done: int, total: int) -> None:
        bar = self._bar
        if bar is None:
            from tqdm import tqdm
            bar = self._bar = tqdm(
                total=total or None, desc=self._desc(label), file=self.stream, leave=self.leave,
                unit="B" if self.bytes else (self.unit or "it"), unit_scale=self.bytes,
                unit_divisor=1024, dynamic_ncols=True, mininterval=0.1, delay=self.delay)
        if total and bar.total != total:
            bar.total = total
        if not self.per_label:
            bar.set_postfix_str(label, refresh=False)
        if done < bar.n:
            bar.reset(total=total or None)
        bar.update(done - bar.n)

    def _desc(self, label: str) -> str:
        if not self.per_label or not label:
            return self.what
        return f"{self.what} {_short(label)}"

    # --- not a terminal ---------------------------------------------------------------------
    def _maybe_line(self, now: float, done: int, total: int) -> None:
        if now - self.started < self.delay:
            return
        if self._lines == 0:
            if not total or done < total:       # what is starting (the end comes anyway)
                self._line(done, total, now, final=False)
        elif now - self._last_line >= self.interval:
            self._line(done, total, now, final=False)

    def _line(self, done: int, total: int, now: float, final: bool) -> None:
        label = _short(self._label or "")
        if self.bytes:
            amount = f"{human_bytes(done)} of {human_bytes(total)}"
        else:
            amount = f"{done} of {total}" + (f" {self.unit}" if self.unit else "")
        pct = f" ({100 * done // total}%)" if total else ""
        tail = f", done in {now - self._phase_started:.1f} s" if final else ""
        where = f"{self.what}: {label}: " if label else f"{self.what}: "
        self.stream.write(f"{where}{amount}{pct}{tail}\n")
        self.stream.flush()
        self._last_line = now
        self._lines += 1

    # --- the end of a phase -----------------------------------------------------------------
    def _end_phase(self, finished: bool) -> None:
        """Close the current bar or write the phase's last line. `finished`: a next phase
        started, so this one is complete whatever its last count said."""
        if self._state is None:
            return
        label, done, total = self._state
        if finished and total:
            done = total
        if self._bar is not None:
            if finished and self._bar.total:
                self._bar.update(self._bar.total - self._bar.n)
            self._bar.close()
            self._bar = None
        elif not self.tty and (self._lines or time.monotonic() - self.started >= self.delay):
            self._line(done, total, time.monotonic(), final=True)
        self._state = None


def _split(args: tuple[Any, ...]) -> tuple[str, int, int]:
    """(label, done, total) from `(label, done, total)` or `(done, total)`."""
    label = ""
    if args and isinstance(args[0], (str, os.PathLike)):
        label = os.fspath(args[0])
        args = args[1:]
    nums = [int(a) for a in args[:2] if isinstance(a, (int, float)) and not isinstance(a, bool)]
    nums += [0] * (2 - len(nums))
    return label, max(0, nums[0]), max(0, nums[1])


def _short(label: str) -> str:
    """A file path as its base name; other labels as they are."""
    return os.path.basename(label) if os.sep in label else label
