"""Cancel a PostgreSQL statement that outlives its command's deadline, with no statement of
its own: one daemon thread per process sleeps until the earliest armed deadline and calls
the cancel function of each that was not disarmed in time (`psycopg.Connection.cancel`,
which asks the server over a separate connection). A thread per statement would cost its
start (milliseconds on a loaded machine) on every query.
"""
from __future__ import annotations

import heapq
import itertools
import threading
import time
from typing import Any, Callable

# [when (monotonic), serial, cancel function or None when disarmed]
Entry = list[Any]


class Watchdog:
    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._heap: list[Entry] = []
        self._serial = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, seconds: float, cancel: Callable[[], object]) -> Entry:
        """Call `cancel()` in `seconds` unless `disarm` is called first."""
        entry: Entry = [time.monotonic() + seconds, next(self._serial), cancel]
        with self._cv:
            heapq.heappush(self._heap, entry)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="nexus-pg-cancel",
                                                daemon=True)
                self._thread.start()
            elif self._heap[0] is entry:        # earlier than what the thread waits for
                self._cv.notify()
        return entry

    def disarm(self, entry: Entry) -> None:
        with self._cv:
            entry[2] = None

    def _run(self) -> None:
        heap = self._heap
        with self._cv:
            while True:
                while heap and heap[0][2] is None:
                    heapq.heappop(heap)
                if not heap:
                    self._cv.wait()
                    continue
                wait = heap[0][0] - time.monotonic()
                if wait > 0:
                    self._cv.wait(wait)
                    continue
                cancel = heapq.heappop(heap)[2]
                self._cv.release()
                try:
                    cancel()
                except Exception:  # noqa: BLE001 - the connection went away meanwhile
                    pass
                finally:
                    self._cv.acquire()


WATCHDOG = Watchdog()

__all__ = ["WATCHDOG", "Watchdog"]
