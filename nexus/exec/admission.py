"""Admission control: cheap commands stay fast while slow ones run.

A Python thread cannot be preempted or killed, and every query competes for one interpreter
lock (GIL): with eight threads running multi-second queries, a point FIND waited behind
them for seconds (bench/hol.py). So every read command starts in the *fast lane* and runs
at once; a command still running after `fast_seconds` of wall time must take one of
`slots` *heavy slots* at its next deadline check (the cooperative checkpoints that every
operator, path walk and SEARCH step already makes, `ExecContext.check_deadline`), waiting
in FIFO order — a waiting command sleeps, so it takes no interpreter time from anyone. A
heavy command hands its slot to the next waiter every `quantum` seconds (round robin), so
one long query does not starve the others, and gives it back when it ends.

So at most `slots` slow commands compete with the cheap ones for the interpreter, whatever
the number of clients; a slow command that waits past its own deadline ends with KIP_4001
as it would have running. Writes are serialized by the write lock already and do not take
slots. The numbers: docs/limits.md ("Admission"); the measurement: bench/RESULTS.md.
"""
from __future__ import annotations

import fcntl
import os
import threading
import time
from collections import deque


class OverBudget(BaseException):
    """Raised at a deadline check of a read command run under a time budget
    (`Admission.ticket(budget)`) once the budget is used up, and before a command that
    writes would run under one: its caller runs the command again without one. `kip serve`
    tries cheap reads inline on its event loop this way and moves those that turn out not
    to be cheap to its worker threads (nexus.server.app). A BaseException, so that the
    engine's boundary (`except Exception`: a KIP_4003 answer) lets it through."""


class Admission:
    """The heavy slots of one engine: a FIFO semaphore that also says whether anyone waits."""

    def __init__(self, slots: int, fast_seconds: float, quantum: float) -> None:
        self.slots = max(1, slots)
        self.fast_seconds = fast_seconds
        self.quantum = quantum
        self._lock = threading.Lock()
        self._free = self.slots
        self._queue: deque[threading.Lock] = deque()

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def acquire(self, deadline: float) -> bool:
        """Take a slot, waiting in line until `deadline` (a `time.monotonic()` value);
        False when the deadline passed first."""
        with self._lock:
            if self._free > 0 and not self._queue:
                self._free -= 1
                return True
            waiter = threading.Lock()
            waiter.acquire()
            self._queue.append(waiter)
        if waiter.acquire(timeout=max(0.0, deadline - time.monotonic())):
            return True                 # handed over by `release`
        with self._lock:
            try:
                self._queue.remove(waiter)
                return False
            except ValueError:          # handed over just as the wait timed out
                return True

    def release(self) -> None:
        """Give the slot back: to the first in line, if anyone waits."""
        with self._lock:
            if self._queue:
                self._queue.popleft().release()
            else:
                self._free += 1

    def ticket(self, budget: float | None = None) -> "Ticket":
        """A command's ticket; with `budget` (seconds), its first deadline check past the
        budget — or past `fast_seconds`, if sooner: it never waits for a slot — raises
        `OverBudget`."""
        return Ticket(self, budget)


class Ticket:
    """One command's place in the lanes: fast until `fast_seconds`, then a heavy slot."""

    __slots__ = ("admission", "started", "next_check", "holding", "budget")

    def __init__(self, admission: Admission, budget: float | None = None) -> None:
        self.admission = admission
        self.started = time.monotonic()
        self.budget = budget
        self.next_check = self.started + (admission.fast_seconds if budget is None
                                          else min(budget, admission.fast_seconds))
        self.holding = False

    def checkpoint(self, now: float, deadline: float) -> bool:
        """At a deadline check past `next_check`: take a slot (the fast lane is over), or
        hand it on when others wait and the quantum is used. False when the deadline
        passed while waiting for a slot."""
        if self.budget is not None:     # never waits: the caller runs it again elsewhere
            raise OverBudget()
        adm = self.admission
        if self.holding:
            if not adm.waiting:
                self.next_check = now + adm.quantum
                return True
            self.holding = False
            adm.release()
        if not adm.acquire(deadline):
            return False
        self.holding = True
        self.next_check = time.monotonic() + adm.quantum
        return True

    def done(self) -> None:
        if self.holding:
            self.holding = False
            self.admission.release()


class SharedAdmission(Admission):
    """One heavy slot shared by every process that opens the same `path` — the processes of
    `kip serve --workers` —, so that N processes do not run N slow commands at once against
    the cheap ones. A command takes its process's slot first (FIFO among its threads), then
    the shared one: an exclusive `flock` on `path`, polled every `POLL` s while it sleeps.
    A process whose command waits for the shared slot holds a shared `flock` on
    `path.wait`, which is how the holder knows to hand the slot on after its quantum; the
    one that handed it on waits `POLL` before taking it again, so the waiter gets it.
    The kernel drops the locks of a process that dies."""

    POLL = 0.005

    def __init__(self, path: str, fast_seconds: float, quantum: float) -> None:
        super().__init__(1, fast_seconds, quantum)
        self._path, self._wait_path = path, path + ".wait"
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        self._yielded = 0.0

    @property
    def waiting(self) -> int:
        return len(self._queue) + self._others_wait()

    def _others_wait(self) -> int:
        fd = os.open(self._wait_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return 0
        except BlockingIOError:
            return 1
        finally:
            os.close(fd)            # (closing drops the probe's lock)

    def acquire(self, deadline: float) -> bool:
        if not super().acquire(deadline):
            return False
        if self._take_shared(deadline):
            return True
        super().release()
        return False

    def _take_shared(self, deadline: float) -> bool:
        if time.monotonic() - self._yielded > self.POLL * 2:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                pass
        flag = os.open(self._wait_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(flag, fcntl.LOCK_SH)
            while True:
                time.sleep(self.POLL)
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return True
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        return False
        finally:
            os.close(flag)

    def release(self) -> None:
        if self._others_wait():
            self._yielded = time.monotonic()
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        super().release()

    def close(self) -> None:
        os.close(self._fd)
