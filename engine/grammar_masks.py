"""GrammarMasks: the step's bitmask rows for the sequences that carry a grammar matcher.

Called by the model runner after the forward pass is launched and before sampling, so on a GPU the
CPU fills masks while the device computes. Rows live in one preallocated int32 buffer (pinned on
CUDA, so the copy to the device is asynchronous); only guided sequences get a row, the others are
marked -1 and the sampling kernel leaves them alone. With many guided rows the fill is split across
threads: the matcher's mask walks run in numba with the GIL released.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import torch

from guided.errors import GuidedError

from .sequence import Sequence

__all__ = ["GrammarMasks"]

logger = logging.getLogger(__name__)

PARALLEL_MIN_ROWS = 8  # below this, threads cost more than they save


class GrammarMasks:
    """A ``bitmask_provider`` for LLMEngine: fills one bitmask row per constrained sequence."""

    def __init__(self, vocab_size: int, max_rows: int, device: torch.device, threads: int = 4):
        self.words = (vocab_size + 31) // 32
        pin = device.type == "cuda"
        # bitmask: [max_rows, ceil(vocab_size / 32)] int32, bit 1 = allowed
        self.buffer = torch.empty((max_rows, self.words), dtype=torch.int32, pin_memory=pin)
        self.array = self.buffer.numpy()
        self.threads = threads
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="guided-mask") if threads > 1 else None
        self.rows_filled = 0  # statistics
        self.failures: dict[int, str] = {}  # seq_id -> why its mask could not be computed (a limit)

    def __call__(self, seqs: list[Sequence]):
        guided = [(i, s) for i, s in enumerate(seqs) if s.constraint is not None]
        if not guided:
            return None
        rows = [-1] * len(seqs)
        for row, (i, _) in enumerate(guided):
            rows[i] = row
        self._fill([s for _, s in guided])
        self.rows_filled += len(guided)
        return self.buffer[: len(guided)], rows

    def _fill(self, seqs: list[Sequence]) -> None:
        if self._pool is None or len(seqs) < PARALLEL_MIN_ROWS:
            for row, seq in enumerate(seqs):
                self._fill_row(seq, row)
            return
        step = -(-len(seqs) // self.threads)
        chunks = [range(lo, min(lo + step, len(seqs))) for lo in range(0, len(seqs), step)]
        list(self._pool.map(lambda rs: [self._fill_row(seqs[r], r) for r in rs], chunks))

    def _fill_row(self, seq: Sequence, row: int) -> None:
        """One row; a grammar that hits a limit (or fails) here fails its own sequence, never the batch."""
        try:
            seq.constraint.fill_bitmask(self.array, row)
        except GuidedError as e:
            self._failed(seq, row, str(e) or type(e).__name__)
        except Exception as e:  # a bug in one matcher: still this sequence's alone
            logger.exception("mask fill failed for sequence %s of request %s", seq.seq_id, seq.request_id)
            self._failed(seq, row, f"computing the token mask failed: {type(e).__name__}: {e}")

    def _failed(self, seq: Sequence, row: int, message: str) -> None:
        self.failures[seq.seq_id] = message
        self.array[row] = -1  # sampled freely; the engine ends the sequence with the error

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
