"""The worker threads of `kip serve` (nexus.server): where every method runs, off the loop.

Why not `loop.run_in_executor(ThreadPoolExecutor)`: that hop builds a `concurrent.futures`
Future (with its Condition), wraps it in an asyncio future and chains the two with callbacks
— about a tenth of the server's CPU per request on a point FIND (profiled with py-spy under
bench/http_bench.py). `WorkerPool.call(loop, fn, arg)` hands the loop an asyncio future
directly and the worker settles it with one `call_soon_threadsafe`.

Semantics kept from the executor: a call that has not started when its future is cancelled
(the request timed out while queued) never runs; one that has started runs to its end (a
write commits or rolls back as a whole; threads are never killed). `submit` is the
`concurrent.futures.Executor` interface, for the rare calls that go through
`run_in_executor` (lifespan, spaces admin). Threads are started on demand, up to
`max_workers`, as the executor does.
"""
from __future__ import annotations

import asyncio
import queue
import threading
from concurrent.futures import Executor, Future
from typing import Any, Callable

class _Job:
    __slots__ = ("fn", "args", "loop", "future")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...],
                 loop: asyncio.AbstractEventLoop | None, future: Any) -> None:
        self.fn, self.args, self.loop, self.future = fn, args, loop, future


class WorkerPool(Executor):
    """Up to `max_workers` threads running calls in submission order (module doc)."""

    def __init__(self, max_workers: int, thread_name_prefix: str = "nexus-kip") -> None:
        self.max_workers = max_workers
        self._prefix = thread_name_prefix
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()       # the thread list
        self._threads: list[threading.Thread] = []
        self._shutdown = False

    def call(self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any],
             *args: Any) -> asyncio.Future[Any]:
        """`fn(*args)` on a worker; an asyncio future of `loop` for its result. Cancelling
        the future before the call started means it never starts."""
        future = loop.create_future()
        self._put(_Job(fn, args, loop, future))
        return future

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """The `concurrent.futures.Executor` interface (for `run_in_executor`)."""
        future: Future[Any] = Future()
        self._put(_Job((lambda *a: fn(*a, **kwargs)) if kwargs else fn, args, None, future))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            threads = list(self._threads)
        for _ in threads:
            self._queue.put(None)
        if wait:
            for t in threads:
                t.join()

    # --- the workers ----------------------------------------------------------------------
    def _put(self, job: _Job) -> None:
        if self._shutdown:
            raise RuntimeError("cannot schedule new calls after shutdown")
        self._queue.put(job)
        if self._idle.acquire(timeout=0):       # a worker is waiting for it
            return
        with self._lock:
            if len(self._threads) < self.max_workers and not self._shutdown:
                t = threading.Thread(target=self._work, daemon=True,
                                     name=f"{self._prefix}_{len(self._threads)}")
                self._threads.append(t)
                t.start()

    def _work(self) -> None:
        get = self._queue.get
        while True:
            job = get()
            if job is None:
                return
            loop, future = job.loop, job.future
            # Cancelled while queued (a request timeout): never runs. Reading an asyncio
            # future's state from this thread is one attribute read under the GIL; a
            # cancel that comes after it finds the call started, as with the executor.
            if loop is None:
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(job.fn(*job.args))
                    except BaseException as exc:  # noqa: BLE001 - handed to the caller
                        future.set_exception(exc)
            elif not future.cancelled():
                try:
                    value, ok = job.fn(*job.args), True
                except BaseException as exc:  # noqa: BLE001 - handed to the caller
                    value, ok = exc, False
                try:
                    loop.call_soon_threadsafe(_set, future, ok, value)
                except RuntimeError:        # the loop is closed: nobody waits for it
                    pass
                del value
            del job, future
            self._idle.release()


def _set(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.cancelled():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)
