"""A bulk load's embedding in a worker process (`EmbedProcess`), and the rows it computes.

Owns the child process that embeds the texts of a bulk load's chunks for `ahead.Ahead`
(texts out, an index's prepared rows back: `rows_of`, what `VectorIndex.embed_rows`
computes), its start, its end, and what happens when it fails; and `rows_of` itself, so
that the child and the loading process compute the rows with the same code.

Why a process: in a worker *thread* the embedding shares the GIL with the loading thread.
WordLlama's tokenizer and its numpy sums release it, but between them every Python step
hands it over, and on a busy machine each hand-off waits for the OS to schedule the other
thread: at N=100k the loading thread spent ~6 of 18 s of wall off the CPU (bench/RESULTS.md,
"Bulk load with SEARCH", s17-w1proc). A child process has its own interpreter: it embeds
on the other core while the load runs, and hands back int8 rows (~13 MB per 50k concepts).

Lifecycle:

* **start** — lazily, by the first chunk of at least PROCESS_MIN texts (a small load keeps
  the thread: a process costs ~0.5 CPU s and ~70 MB to import and load the model). A fresh
  interpreter (`subprocess`, the equivalent of multiprocessing's "spawn": never a fork of
  a process that holds LMDB environments and threads), which builds the embedder from
  `worker_spec` and reports its name: a child whose embedder is not the index's (another
  model installed, another dimension) is stopped and its jobs fall back.
* **end** — `close` at the end of the load (`Ahead.close`, also after an exception):
  the pipe to the child is closed and the child exits on that end of file; one that does
  not within CLOSE_WAIT is killed; either way it is waited for (no zombie). If the loading
  process dies (even SIGKILL), the kernel closes its ends of the pipes: the child's reader
  sees the end of file and exits at once; it also watches its parent's pid (a fork of the
  parent could hold the pipe open).
* **failures** — a child that dies, cannot start, or raises for a job fails that job's
  future (every pending one, when it dies): `Ahead.take` then leaves those ids to `fill`,
  which reads them back and embeds them in process, as without `Ahead`. A child that stops
  answering (no result for STALL seconds while jobs are pending) is killed by the waiting
  `take` (`result`): the load never hangs on it. Later chunks then go to the thread.
* **behind** — a child still embedding when the load ends (a busy machine gives it less
  than a core): `Ahead.take` embeds the last jobs itself, taking each back (`withdraw`:
  the child skips it), while the child goes on from the first: both cores finish.

The child's results are the same bits as the parent's: the same `rows_of`, the same
embedder (checked by name), the same numpy — WordLlama's rows are sums in a fixed order.
"""
from __future__ import annotations

import logging
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, TimeoutError as FutureTimeout
from itertools import count
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from .ivf import quantise

log = logging.getLogger("nexus.search")

PROCESS_MIN = 2048          # texts in one chunk before a load starts the worker process
STALL = 120.0               # seconds without a result (jobs pending) before it is killed
CLOSE_WAIT = 5.0            # seconds a closed child may take to exit before it is killed
PARENT_POLL = 1.0           # seconds between the child's checks that its parent lives


def rows_of(embedder: Any, texts: list[str], ivf: bool, chunk: int) -> Any:
    """`texts`' vectors as a vector index stores them: an IVF's int8 rows and inverse norms
    (`ivf.quantise`), else float32; embedded `chunk` at a time by the embedder's
    `embed_bulk` when it has one (beside a bulk load: `ahead`), else `embed`."""
    embed = getattr(embedder, "embed_bulk", embedder.embed)
    parts = [quantise(embed(texts[i:i + chunk])) if ivf else embed(texts[i:i + chunk])
             for i in range(0, len(texts), chunk)]     # (quantised at once: 1/4 the size)
    if not ivf:
        return np.concatenate(parts) if parts else np.zeros((0, embedder.dim),
                                                            dtype=np.float32)
    if not parts:
        return np.zeros((0, embedder.dim), dtype=np.int8), np.zeros(0, dtype=np.float32)
    return np.concatenate([q for q, _ in parts]), np.concatenate([v for _, v in parts])


def worker_spec(embedder: Any) -> tuple | None:
    """How a child process builds an embedder equal to `embedder` (None: it cannot)."""
    from .embed import HashedNgramEmbedder, WordLlamaEmbedder
    if type(embedder) is WordLlamaEmbedder:
        return ("wordllama",)
    if type(embedder) is HashedNgramEmbedder:
        return ("hashed-ngrams", embedder.dim)
    return None


def _build(spec: tuple) -> Any:
    from .embed import HashedNgramEmbedder, make_semantic_embedder
    if spec[0] == "wordllama":
        return make_semantic_embedder("wordllama")
    if spec[0] == "hashed-ngrams":
        return HashedNgramEmbedder(int(spec[1]))
    raise ValueError(f"unknown embedder spec {spec!r}")


class WorkerGone(RuntimeError):
    """The worker process died, failed to start, or was stopped before it answered."""


class EmbedProcess:
    """One worker process embedding texts for one vector index (see the module's doc)."""

    def __init__(self, embedder: Any, ivf: bool, chunk: int) -> None:
        self.spec = worker_spec(embedder)
        self.name = embedder.name
        self.ivf = ivf
        self.chunk = chunk
        self.proc: subprocess.Popen | None = None
        # No child (any more): callers use the thread. (POSIX only: the pipes are passed
        # by file descriptor.)
        self.dead = self.spec is None or os.name != "posix" or not sys.executable
        self._lock = threading.Lock()
        self._pending: dict[int, Future] = {}
        self._numbers: dict[int, int] = {}      # id(future) -> its job number
        self._ids = count(1)
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._last = time.monotonic()       # the last sign of progress (a result, the start)

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def submit(self, texts: list[str]) -> Future | None:
        """A future of `texts`' rows (`rows_of`) computed by the child, started now if it
        is not yet; None when there is no child to ask (dead, closed, not startable)."""
        with self._lock:
            if self.dead:
                return None
            if self.proc is None and not self._start():
                return None
            fut: Future = Future()
            fut.set_running_or_notify_cancel()      # (a forgotten job is simply dropped)
            n = next(self._ids)
            if not self._pending:
                self._last = time.monotonic()       # (the stall clock runs from now)
            self._pending[n] = fut
            self._numbers[id(fut)] = n
        self._outbox.put(pickle.dumps((n, texts), protocol=pickle.HIGHEST_PROTOCOL))
        return fut

    def withdraw(self, fut: Future) -> bool:
        """Take back the job of `fut`, which the caller embeds itself: the child skips it
        if it has not started it (a result of it is ignored). False: not a pending job of
        this child."""
        with self._lock:
            n = self._numbers.pop(id(fut), None)
            if n is None or self._pending.pop(n, None) is None:
                return False
        self._outbox.put(pickle.dumps((-n, None)))
        fut.set_exception(WorkerGone("taken back"))
        return True

    def result(self, fut: Future) -> Any:
        """`fut.result()`, killing the child when it has answered nothing for STALL
        seconds (the future then fails: its rows are embedded by `fill`)."""
        while True:
            try:
                return fut.result(timeout=1.0)
            except FutureTimeout:
                with self._lock:
                    stalled = bool(self._pending) and \
                        time.monotonic() - self._last > STALL
                if stalled:
                    log.warning("search: the embedding worker process answered nothing "
                                "for %.0f s; stopped, its chunks are embedded at the end",
                                STALL)
                    self._kill()

    def close(self) -> None:
        """Stop the child (what it still computes is dropped) and wait for it."""
        with self._lock:
            self.dead = True
            proc = self.proc
        if proc is None:
            return
        self._outbox.put(None)              # the sender closes the pipe: the child exits
        try:
            proc.wait(CLOSE_WAIT)
        except subprocess.TimeoutExpired:
            self._kill()
        for t in self._threads:
            t.join(CLOSE_WAIT)
        self._fail_pending()

    # --- the parent's side ---------------------------------------------------------------
    def _start(self) -> bool:
        """(under `_lock`) Start the child and its two pipe threads."""
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        # One thread of the tokenizer (Rust, rayon: one per core by default): the child
        # has the rest of the load to keep up, and more threads took CPU from the loading
        # thread on a busy machine.
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        # This tree first on the child's path: `-c` puts the working directory there
        # before PYTHONPATH, and another checkout's `nexus` in it would be the one
        # imported (its rows not necessarily this one's).
        code = (f"import sys; sys.path.insert(0, {root!r}); "
                "from nexus.search.embed_proc import serve; serve()")
        args = [sys.executable, "-c", code, str(to_child_r), str(from_child_w),
                str(os.getpid()), repr((self.spec, self.ivf, self.chunk))]
        try:
            self.proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL,
                                         pass_fds=(to_child_r, from_child_w),
                                         close_fds=True)
        except (OSError, ValueError):
            log.warning("search: cannot start the embedding worker process; the load "
                        "embeds in a thread", exc_info=True)
            for fd in (to_child_r, to_child_w, from_child_r, from_child_w):
                os.close(fd)
            self.dead = True
            return False
        os.close(to_child_r)
        os.close(from_child_w)
        self._last = time.monotonic()
        send = Connection(to_child_w, readable=False)
        recv = Connection(from_child_r, writable=False)
        self._threads = [
            threading.Thread(target=self._send, args=(send,), daemon=True,
                             name="nexus-embed-send"),
            threading.Thread(target=self._receive, args=(recv,), daemon=True,
                             name="nexus-embed-recv")]
        for t in self._threads:
            t.start()
        return True

    def _send(self, conn: Connection) -> None:
        """(a thread) Write the queued jobs to the child: the loading thread never blocks
        on a full pipe. None (or a broken pipe) ends it and closes the pipe."""
        try:
            while True:
                msg = self._outbox.get()
                if msg is None:
                    break
                conn.send_bytes(msg)
        except OSError:
            pass                            # (the child is gone: `_receive` sees it too)
        finally:
            conn.close()

    def _receive(self, conn: Connection) -> None:
        """(a thread) Read the child's results into the futures until its pipe ends."""
        try:
            name = pickle.loads(conn.recv_bytes())
            if name != self.name:
                log.warning("search: the embedding worker process built %r, not %r; the "
                            "load embeds in process", name, self.name)
                return
            while True:
                n, ok, value = pickle.loads(conn.recv_bytes())
                with self._lock:
                    self._last = time.monotonic()
                    fut = self._pending.pop(n, None)
                    if fut is not None:
                        del self._numbers[id(fut)]
                if fut is None:
                    continue
                if ok:
                    fut.set_result(value)
                else:
                    fut.set_exception(WorkerGone(f"the embedding worker failed: {value}"))
        except (EOFError, OSError, pickle.UnpicklingError, ValueError, TypeError):
            pass
        finally:
            conn.close()
            with self._lock:
                self.dead = True
            self._kill()                    # (a child that sent something else: stopped)
            self._fail_pending()

    def _kill(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                proc.kill()
            except OSError:
                pass
        try:
            proc.wait(CLOSE_WAIT)
        except subprocess.TimeoutExpired:   # (cannot happen after SIGKILL but in D state)
            pass

    def _fail_pending(self) -> None:
        with self._lock:
            self.dead = True
            pending, self._pending = self._pending, {}
            self._numbers.clear()
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(WorkerGone("the embedding worker process stopped"))


# --- the child's side ---------------------------------------------------------------------
def _die() -> None:
    """End the child at once, whatever its main thread is computing (nothing of it is
    wanted any more, and it holds nothing to flush)."""
    os.kill(os.getpid(), signal.SIGKILL)


def serve() -> None:
    """The child: `python -c "...serve()" IN_FD OUT_FD PARENT_PID SPEC`. Reads pickled
    (job number, texts), answers (job number, True, rows) or (job number, False, error);
    first its embedder's name. Exits when its input ends or its parent is gone."""
    import ast
    from ..store.bulk import trim_heap
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # (a Ctrl-C is the parent's to handle)
    in_fd, out_fd, parent = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    spec, ivf, chunk = ast.literal_eval(sys.argv[4])
    inbox = Connection(in_fd, writable=False)
    outbox = Connection(out_fd, readable=False)
    jobs: queue.SimpleQueue = queue.SimpleQueue()

    skip: set[int] = set()          # jobs the parent took back (-n: "skip job n")

    def read() -> None:             # drains the pipe at once: the parent never waits
        try:
            while True:
                n, texts = pickle.loads(inbox.recv_bytes())
                if n < 0:
                    skip.add(-n)
                else:
                    jobs.put((n, texts))
        except (EOFError, OSError):
            pass
        _die()                      # the parent closed the pipe, or died: nothing wanted

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL)
        _die()

    threading.Thread(target=read, daemon=True).start()
    threading.Thread(target=watch, daemon=True).start()
    try:
        embedder = _build(spec)
        name = embedder.name
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which falls back
        embedder, name = None, f"(failed: {exc!r})"
    try:
        outbox.send_bytes(pickle.dumps(name))
        if embedder is None:
            return                  # (the parent falls back on the name it got)
        while True:
            n, texts = jobs.get()
            if n in skip:
                skip.discard(n)
                continue
            try:
                out = (n, True, rows_of(embedder, texts, ivf, chunk))
            except Exception as exc:  # noqa: BLE001 - this job falls back to the parent
                out = (n, False, repr(exc))
            del texts
            outbox.send_bytes(pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL))
            del out
            trim_heap()
    except (OSError, EOFError):
        return                      # the parent is gone
