"""BenchRunner: run one job per item in forked workers, each under a wall-clock timeout.

A worker that overruns is killed and replaced (forked again from the parent, which holds the
loaded tokenizer and warmed-up engine), so one hanging schema costs its timeout and nothing more.
Results come back in completion order; ``stats`` summarizes latency lists in microseconds.
"""

from __future__ import annotations

import gzip
import json
import multiprocessing as mp
import time
from multiprocessing.connection import wait

__all__ = ["BenchRunner", "read_report", "stats"]


class _Worker:
    def __init__(self, ctx, job):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, job), daemon=True)
        self.proc.start()
        child.close()
        self.item = None
        self.started = 0.0

    def send(self, index: int) -> None:
        self.item = index
        self.started = time.monotonic()
        self.conn.send(index)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join()
        self.conn.close()


def _serve(conn, job) -> None:
    while True:
        try:
            index = conn.recv()
        except EOFError:
            return
        try:
            result = job(index)
        except BaseException as e:  # a crash is a result too, never a hang
            result = {"status": "crash", "error": f"{type(e).__name__}: {e}"[:500]}
        conn.send(result)


class BenchRunner:
    """``run(n, job, timeout)`` yields ``(index, result)``; a timeout yields ``{"status": "timeout"}``."""

    def __init__(self, jobs: int = 1):
        self.jobs = max(1, jobs)
        self.ctx = mp.get_context("fork")

    def run(self, n: int, job, timeout: float):
        pending = list(range(n - 1, -1, -1))
        workers = [_Worker(self.ctx, job) for _ in range(min(self.jobs, n))]
        idle = list(workers)
        busy: dict = {}
        try:
            while pending or busy:
                while idle and pending:
                    w = idle.pop()
                    w.send(pending.pop())
                    busy[w.conn] = w
                now = time.monotonic()
                limit = min(w.started + timeout for w in busy.values()) - now
                ready = wait(list(busy), timeout=max(limit, 0.0))
                for conn in ready:
                    w = busy.pop(conn)
                    try:
                        result = conn.recv()
                    except EOFError:
                        result = {"status": "crash", "error": "worker died"}
                        w = self._replace(w, workers, job)
                    idle.append(w)
                    yield w.item, result
                now = time.monotonic()
                for conn, w in list(busy.items()):
                    if now - w.started >= timeout:
                        busy.pop(conn)
                        item = w.item
                        idle.append(self._replace(w, workers, job))
                        yield item, {"status": "timeout", "error": f"over {timeout:g} s"}
        finally:
            for w in workers:
                w.kill()

    def _replace(self, w: _Worker, workers: list, job) -> _Worker:
        w.kill()
        fresh = _Worker(self.ctx, job)
        workers[workers.index(w)] = fresh
        return fresh


def read_report(path) -> dict:
    """A results file (``benchmarks/maskbench.py``'s report): JSON, or JSON compressed with gzip, as the
    runs are written (``maskbench-<tag>.json.gz``, a tenth of the size)."""
    with open(path, "rb") as f:
        raw = f.read()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def stats(values_s) -> dict:
    """avg/p50/p90/p99/max of seconds, in microseconds (zeros when empty)."""
    if not len(values_s):
        return {"avg": 0, "p50": 0, "p90": 0, "p99": 0, "max": 0}
    import numpy as np

    a = np.asarray(values_s, dtype=np.float64) * 1e6
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"avg": round(float(a.mean()), 1), "p50": round(float(p50), 1), "p90": round(float(p90), 1),
            "p99": round(float(p99), 1), "max": round(float(a.max()), 1)}  # fmt: skip
