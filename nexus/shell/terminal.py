"""The shell's side of the terminal: printing, paging, yes/no questions, progress bars.

Two implementations of one small interface: `TtyUI` for a person at a terminal (a
"--more--" pager, single-key answers, a progress bar — `nexus.shell.progress`, tqdm) and
`PlainUI` for scripts and pipes (everything printed straight through; questions answer "no";
progress is not drawn). The shell core only ever talks to this interface.
"""
from __future__ import annotations

import os
import select
import shutil
import sys
from typing import TextIO

from .progress import Progress


class PlainUI:
    """Output for pipes and scripts: no pager, no questions, no progress bar."""

    interactive = False

    def __init__(self, out: TextIO | None = None, width: int | None = None) -> None:
        self.out = out or sys.stdout
        self._width = width

    @property
    def width(self) -> int:
        if self._width:
            return self._width
        cols = os.environ.get("COLUMNS", "")
        return int(cols) if cols.isdigit() and int(cols) > 20 else 120

    def show(self, lines: list[str]) -> None:
        for line in lines:
            self.out.write(line + "\n")
        self.out.flush()

    def ask(self, question: str) -> bool:
        return False

    def progress(self, done: int, total: int, unit: str = "") -> None:
        pass

    def end_progress(self) -> None:
        pass


class TtyUI(PlainUI):
    """Output for a person at a terminal."""

    interactive = True

    def __init__(self, out: TextIO | None = None, pager: bool = True) -> None:
        super().__init__(out)
        self.pager = pager
        self._progress: Progress | None = None

    @property
    def size(self) -> os.terminal_size:
        return shutil.get_terminal_size((100, 24))

    @property
    def width(self) -> int:
        return max(40, self.size.columns)

    def show(self, lines: list[str]) -> None:
        height = self.size.lines
        if not self.pager or len(lines) <= height - 1:
            return super().show(lines)
        shown = 0
        step = height - 2
        while shown < len(lines):
            super().show(lines[shown:shown + step])
            shown += step
            if shown >= len(lines):
                break
            key = self._prompt_key(f"--more-- ({shown}/{len(lines)} lines; space: next page, "
                                   f"enter: next line, q: stop)")
            if key in ("q", "Q", "\x1b", "\x03"):
                break
            step = 1 if key in ("\r", "\n") else height - 2

    def ask(self, question: str) -> bool:
        key = self._prompt_key(f"{question} [Y/n]", keep=True)
        return key in ("y", "Y", "\r", "\n", " ")

    def _prompt_key(self, text: str, keep: bool = False) -> str:
        self.out.write(f"\x1b[7m{text}\x1b[0m")
        self.out.flush()
        key = read_key()
        if keep:
            shown = "yes" if key in ("y", "Y", "\r", "\n", " ") else "no"
            self.out.write(f" {shown}\n")
        else:
            self.out.write("\r\x1b[K")
        self.out.flush()
        return key

    def progress(self, done: int, total: int, unit: str = "") -> None:
        if self._progress is None:
            self._progress = Progress("loading", self.out, unit=unit)
        self._progress(done, total)

    def end_progress(self) -> None:
        if self._progress is not None:
            self._progress.close()
            self._progress = None


def read_key() -> str:
    """One key press from the terminal, without waiting for Enter ("" at end of input)."""
    try:
        import termios
        import tty
    except ImportError:  # not a POSIX terminal: fall back to a line
        line = sys.stdin.readline()
        return line[:1] if line else ""
    fd = sys.stdin.fileno()
    try:
        old = termios.tcgetattr(fd)
    except termios.error:
        line = sys.stdin.readline()
        return line[:1] if line else ""
    try:
        tty.setcbreak(fd)
        data = os.read(fd, 1)
        # Swallow the rest of an escape sequence (arrow keys) so it does not leak into the
        # next prompt.
        while data[:1] == b"\x1b" and select.select([fd], [], [], 0.02)[0]:
            data += os.read(fd, 16)
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)
    return data[:1].decode("latin-1") if data else ""
