"""GuidedMasks: the step's bitmask rows for the sequences that carry a grammar matcher.

Called by the model runner after the forward pass is launched and before sampling, so on a GPU the
CPU fills masks while the device computes. Rows live in one preallocated int32 buffer (pinned on
CUDA, so the copy to the device is asynchronous); only guided sequences get a row, the others are
marked -1 and the sampling kernel leaves them alone. With many guided rows the fill is split across
threads: the matcher's mask walks run in numba with the GIL released.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch

from .sequence import Sequence

__all__ = ["GuidedMasks"]

PARALLEL_MIN_ROWS = 8  # below this, threads cost more than they save


class GuidedMasks:
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

    def __call__(self, seqs: list[Sequence]):
        guided = [(i, s.constraint) for i, s in enumerate(seqs) if s.constraint is not None]
        if not guided:
            return None
        rows = [-1] * len(seqs)
        for row, (i, _) in enumerate(guided):
            rows[i] = row
        self._fill([m for _, m in guided])
        self.rows_filled += len(guided)
        return self.buffer[: len(guided)], rows

    def _fill(self, matchers: list) -> None:
        array = self.array
        if self._pool is None or len(matchers) < PARALLEL_MIN_ROWS:
            for row, m in enumerate(matchers):
                m.fill_bitmask(array, row)
            return
        step = -(-len(matchers) // self.threads)
        chunks = [range(lo, min(lo + step, len(matchers))) for lo in range(0, len(matchers), step)]
        list(self._pool.map(lambda rs: [matchers[r].fill_bitmask(array, r) for r in rs], chunks))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
