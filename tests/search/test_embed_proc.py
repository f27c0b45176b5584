"""The worker process that embeds a bulk load's chunks (nexus/search/embed_proc.py): its
rows are those the loading process computes, bit for bit; it never outlives the process
that started it, even one killed by SIGKILL. (Its use by a load — rows, failures, its end
with the load — is tested with the loads in test_ahead.py.)"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from nexus.search.embed import HashedNgramEmbedder, WordLlamaEmbedder, semantic_installed
from nexus.search.embed_proc import EmbedProcess, rows_of

ROOT = Path(__file__).resolve().parents[2]


def texts(n, seed=3):
    rng = random.Random(seed)
    words = ["fever", "Oxaprozine", "lowers", "the", "of", "名前", "Ünïcödé", "x", "a-b",
             "don't", "kinase", "inhibitor", "12", "β-blocker"]
    return [" ".join(rng.choice(words) for _ in range(rng.randrange(1, 30))) + f" {i}"
            for i in range(n)]


def same_bits(a, b):
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b):
            same_bits(x, y)
        return
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("kind", ["ngrams", pytest.param("wordllama", marks=pytest.mark.skipif(
    not semantic_installed(), reason="needs the semantic extra (wordllama)"))])
def test_the_worker_computes_the_rows_of_the_loading_process_bit_for_bit(kind):
    embedder = WordLlamaEmbedder() if kind == "wordllama" else HashedNgramEmbedder()
    ivf = kind == "wordllama"
    batch = texts(6000)
    proc = EmbedProcess(embedder, ivf, 2048)
    try:
        futures = [proc.submit(batch[:2500]), proc.submit(batch[2500:])]
        assert all(f is not None for f in futures)
        got = [proc.result(f) for f in futures]
    finally:
        proc.close()
    assert proc.proc is not None and proc.proc.returncode is not None     # waited for
    assert proc.submit(["after the end"]) is None   # closed: the caller embeds itself
    want = [rows_of(embedder, batch[:2500], ivf, 2048), rows_of(embedder, batch[2500:], ivf,
                                                                 2048)]
    for g, w in zip(got, want):
        same_bits(g, w)


PARENT = """
import os, sys, time
from nexus.search.embed import HashedNgramEmbedder
from nexus.search.embed_proc import EmbedProcess
proc = EmbedProcess(HashedNgramEmbedder(), False, 2048)
proc.result(proc.submit(["a first job"]))
if sys.argv[1] == "busy":         # killed while the worker embeds a long job
    proc.submit([f"word{i} other{i % 97}" for i in range(400_000)])
if sys.argv[1] == "forked":       # a fork of the parent holds the pipes open
    if os.fork() == 0:
        time.sleep(120)
        os._exit(0)
print(proc.pid, flush=True)
time.sleep(300)
"""


@pytest.mark.parametrize("how", ["idle", "busy", "forked"])
def test_the_worker_exits_when_its_parent_is_killed(tmp_path, how):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    parent = subprocess.Popen([sys.executable, "-c", PARENT, how], env=env,
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = parent.stdout.readline()
        assert line.strip().isdigit(), line
        worker = int(line)
        assert running(worker)
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 30
        while running(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not running(worker)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        if how == "forked":             # (the parent's sleeping fork, in its session)
            try:
                os.killpg(parent.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def running(pid):
    """Whether `pid` exists and has not exited (a zombie has: init reaps it later)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            state = next(line.split()[1] for line in f if line.startswith("State:"))
    except (FileNotFoundError, StopIteration):
        return False
    return state != "Z"


def test_a_small_batch_or_an_embedder_it_cannot_build_stays_in_process():
    class Other:
        name, dim = "other", 4

        def embed(self, texts):
            return np.zeros((len(texts), 4), dtype=np.float32)
    proc = EmbedProcess(Other(), False, 2048)
    assert proc.submit(["x"]) is None and proc.proc is None
    proc.close()


def test_the_worker_imports_no_search_service_and_the_package_still_names_it():
    # The worker's start imports `embed_proc` alone: not the service and its indexes.
    code = ("import sys; import nexus.search.embed_proc; "
            "print('nexus.search.service' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True, timeout=120).stdout
    assert out.strip() == "False"
    import nexus.search
    from nexus.search import service
    assert nexus.search.SearchService is service.SearchService
    assert nexus.search.Host is service.Host
    with pytest.raises(AttributeError):
        nexus.search.NoSuchName


def test_the_worker_imports_this_tree_whatever_the_working_directory(tmp_path, monkeypatch):
    # A `nexus` package in the working directory (another checkout) is not the child's.
    fake = tmp_path / "nexus"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('another checkout')\n")
    monkeypatch.chdir(tmp_path)
    embedder = HashedNgramEmbedder()
    proc = EmbedProcess(embedder, False, 2048)
    try:
        fut = proc.submit(["fever", "Oxaprozine lowers fever"])
        assert fut is not None
        got = proc.result(fut)
    finally:
        proc.close()
    same_bits(got, rows_of(embedder, ["fever", "Oxaprozine lowers fever"], False, 2048))
