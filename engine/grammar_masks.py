"""GrammarMasks: the step's bitmask rows for the sequences that carry a grammar matcher, and no stall.

A mask computed before (a state seen already: nearly every step of nearly every sequence) is copied
into the step's buffer on the engine thread, in microseconds. A mask that must be computed (a state's
first visit) goes to a worker thread, started before the forward pass so that the two overlap. When
the logits are ready, ``collect`` waits for those workers at most ``wait_s`` more; a sequence whose
mask is still not ready is *held back*: it does not sample this step, its logits row is kept, and it
samples in the first step after its mask is ready, from those same logits, so its tokens are exactly
those of an unhurried run. The rest of the batch samples and moves on.

Rows live in one preallocated int32 buffer (pinned on CUDA, so the copy to the device is
asynchronous); unconstrained sequences are marked -1 and the sampling kernel leaves them alone. A
matcher that raises (a limit, or a bug) fails its own sequence, never the batch.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

import numpy as np
import torch

from guided.errors import GuidedError

from .sequence import Sequence, SequenceStatus

__all__ = ["GrammarMasks"]

logger = logging.getLogger(__name__)

_POLL_S = 0.0005  # how often collect looks at the workers and the device


class GrammarMasks:
    """Fills one bitmask row per constrained sequence; slow rows are held back, never waited for.

    Parameters
    ----------
    vocab_size : int
        The lm_head width: a row has ``ceil(vocab_size / 32)`` words.
    max_rows : int
        Rows of the buffer (the engine's ``max_num_seqs``).
    device : torch.device
        Where the logits live (the buffer is pinned for CUDA).
    threads : int
        Workers computing masks; 0 computes them inline (nothing is ever held back).
    wait_s : float
        How long ``collect`` waits for workers once the logits are ready.
    """

    def __init__(self, vocab_size: int, max_rows: int, device: torch.device, threads: int = 4, wait_s: float = 0.005):
        self.words = (vocab_size + 31) // 32
        pin = device.type == "cuda"
        # bitmask: [max_rows, ceil(vocab_size / 32)] int32, bit 1 = allowed
        self.buffer = torch.empty((max_rows, self.words), dtype=torch.int32, pin_memory=pin)
        self.array = self.buffer.numpy()
        self.wait_s = wait_s
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="guided-mask") if threads > 0 else None
        self._jobs: dict[int, Future] = {}  # seq_id -> the mask of its current state, being computed
        self.held: dict[int, tuple[Sequence, torch.Tensor]] = {}  # seq_id -> (sequence, its logits row)
        self.failures: dict[int, str] = {}  # seq_id -> why its mask could not be computed
        self.rows_filled = self.rows_computed = self.rows_held = 0  # statistics
        self.collect_s = 0.0  # time the engine thread spent in collect (waits and inline fills)

    # ------------------------------------------------------------------ before the forward pass
    def start(self, seqs: list[Sequence]) -> None:
        """Start computing, on the workers, the masks of ``seqs`` that are not cached."""
        if self._pool is None:
            return
        for seq in seqs:
            m = seq.constraint
            if m is None or seq.seq_id in self._jobs or _cached(m):
                continue
            self._jobs[seq.seq_id] = self._pool.submit(_compute_row, m, self.words)
            self.rows_computed += 1

    # ------------------------------------------------------------------ after it
    def take_ready(self) -> list[tuple[Sequence, torch.Tensor]]:
        """Held-back sequences whose mask is ready now (they sample this step), out of ``held``; held
        sequences that finished or were preempted meanwhile are dropped."""
        ready = []
        for seq_id, (seq, logits) in list(self.held.items()):
            if seq.status is not SequenceStatus.RUNNING or seq.num_uncomputed_tokens:
                del self.held[seq_id]  # ended, or preempted: its logits will be computed again
                self._jobs.pop(seq_id, None)
            elif self._jobs[seq_id].done():
                del self.held[seq_id]
                ready.append((seq, logits))
        return ready

    def collect(self, seqs: list[Sequence], logits_ready=None) -> tuple[torch.Tensor | None, list[int], list[int]]:
        """The bitmask rows of ``seqs``: ``(bitmask, rows, late)`` with ``rows[i]`` the buffer row of
        ``seqs[i]`` (-1: unconstrained) and ``late`` the indices whose mask is not ready (their rows
        are -1 too). Waits for workers while ``logits_ready()`` is False and ``wait_s`` after."""
        start = time.perf_counter()
        rows, late, n = [-1] * len(seqs), [], 0
        self._wait(seqs, logits_ready)
        for i, seq in enumerate(seqs):
            m = seq.constraint
            if m is None:
                continue
            job = self._jobs.get(seq.seq_id)
            if job is not None and not job.done():
                late.append(i)
                continue
            rows[i] = n
            if job is not None:
                del self._jobs[seq.seq_id]
                self._store(seq, n, job)
            elif not _fill_cached(m, self.array, n):
                self._fill(seq, n)  # computed inline: no workers, or the cached mask was just evicted
            n += 1
        self.rows_filled += n
        self.collect_s += time.perf_counter() - start
        return (self.buffer[:n] if n else None), rows, late

    def hold(self, seq: Sequence, logits: torch.Tensor) -> None:
        """Keep ``seq``'s logits row until its mask is ready."""
        self.held[seq.seq_id] = (seq, logits.clone())
        self.rows_held += 1

    def wait_for_held(self, timeout_s: float) -> None:
        """Block until a held sequence's mask is ready (or ``timeout_s``): an idle engine does not spin."""
        jobs = [self._jobs[i] for i in self.held if i in self._jobs]
        if jobs:
            wait(jobs, timeout=timeout_s, return_when=FIRST_COMPLETED)

    def forget(self, seq: Sequence) -> None:
        self.held.pop(seq.seq_id, None)
        self._jobs.pop(seq.seq_id, None)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ internals
    def _wait(self, seqs: list[Sequence], logits_ready) -> None:
        jobs = [j for s in seqs if (j := self._jobs.get(s.seq_id)) is not None]
        deadline = None
        while jobs:
            jobs = [j for j in jobs if not j.done()]
            if not jobs:
                return
            if logits_ready is None or logits_ready():
                deadline = deadline or time.monotonic() + self.wait_s
                if time.monotonic() >= deadline:
                    return
            wait(jobs, timeout=_POLL_S, return_when=FIRST_COMPLETED)

    def _store(self, seq: Sequence, row: int, job: Future) -> None:
        error = job.exception()
        if error is None:
            self.array[row] = job.result()
        else:
            self._failed(seq, row, error)

    def _fill(self, seq: Sequence, row: int) -> None:
        try:
            seq.constraint.fill_bitmask(self.array, row)
        except Exception as e:  # noqa: BLE001 - any matcher error fails this sequence alone
            self._failed(seq, row, e)

    def _failed(self, seq: Sequence, row: int, error: BaseException) -> None:
        if isinstance(error, GuidedError):
            message = str(error) or type(error).__name__
        else:  # a bug in one matcher: still this sequence's alone
            logger.error("mask fill failed for sequence %s of request %s: %r", seq.seq_id, seq.request_id, error)
            message = f"computing the token mask failed: {type(error).__name__}: {error}"
        self.failures[seq.seq_id] = message
        self.array[row] = -1  # sampled freely; the engine ends the sequence with the error


def _cached(matcher) -> bool:
    """Whether the matcher's current mask is computed already (matchers without the query: never)."""
    probe = getattr(matcher, "has_cached_mask", None)
    return probe is not None and probe()


def _fill_cached(matcher, array: np.ndarray, row: int) -> bool:
    probe = getattr(matcher, "fill_bitmask_if_cached", None)
    return probe is not None and probe(array, row)


def _compute_row(matcher, words: int) -> np.ndarray:
    """A worker's job: the mask of the matcher's current state, into a fresh row."""
    row = np.empty(words, dtype=np.int32)
    matcher.fill_bitmask(row)
    return row
