"""DecodeGraphs: CUDA graphs of the forward pass for pure-decode steps, one per padded batch size.

A decode step at small batch is bound by kernel-launch overhead, not by the GPU; replaying a captured
graph launches the whole forward pass at once. Inputs live in static buffers the graphs read; a step
copies its lists into them (one copy per field) and pads the batch to the next captured size with
rows that write no KV (slot -1) and attend to one token.
"""

from __future__ import annotations

import logging

import torch

from .step_context import StepContext

logger = logging.getLogger(__name__)


class DecodeGraphs:
    def __init__(self, runner, max_batch: int, max_model_len: int):
        self.runner = runner
        device = runner.device
        max_batch = min(max_batch, runner.config.max_num_seqs)
        self.sizes = sorted({b for b in (1, 2, 4, 8, *range(16, max_batch + 1, 16), max_batch) if b <= max_batch})
        self.max_blocks = -(-max_model_len // runner.block_size)
        n = self.sizes[-1]
        self.input_ids = torch.zeros(n, dtype=torch.long, device=device)
        self.positions = torch.zeros(n, dtype=torch.long, device=device)
        self.slot_mapping = torch.full((n,), -1, dtype=torch.long, device=device)
        self.block_tables = torch.zeros(n, self.max_blocks, dtype=torch.int32, device=device)
        self.cu_seqlens_q = torch.arange(n + 1, dtype=torch.int32, device=device)
        self.seq_lens = torch.ones(n, dtype=torch.int32, device=device)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        try:
            self._capture_all()
        except Exception as e:  # a kernel that cannot be captured must not stop the engine
            logger.warning("CUDA graph capture failed (%s); decode steps run eagerly", e)
            self.graphs.clear()
            self.outputs.clear()

    def _ctx(self, b: int) -> StepContext:
        return StepContext(self.slot_mapping[:b], self.block_tables[:b], self.cu_seqlens_q[: b + 1], self.seq_lens[:b], 1)

    @torch.inference_mode()
    def _capture_all(self) -> None:
        model, pool = self.runner.model, None
        for b in reversed(self.sizes):  # largest first, so the smaller ones reuse its memory pool
            model(self.input_ids[:b], self.positions[:b], self._ctx(b))  # warm-up (Triton autotune, allocator)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool):
                self.outputs[b] = model(self.input_ids[:b], self.positions[:b], self._ctx(b))
            pool = graph.pool()
            self.graphs[b] = graph
        torch.cuda.synchronize()

    def can_run(self, batch, num_sampled: int) -> bool:
        n = len(batch)
        return (
            bool(self.graphs)
            and n <= self.sizes[-1]
            and num_sampled == n
            and all(k == 1 for k in batch.num_tokens)
            and all(len(s.block_table) <= self.max_blocks for s in batch.seqs)
        )

    def run(self, ids: list[int], positions: list[int], slots: list[int], seq_lens: list[int], tables) -> torch.Tensor:
        n = len(ids)
        b = next(s for s in self.sizes if s >= n)
        to = self.runner._to_device
        self.input_ids[:n].copy_(to(ids, torch.long), non_blocking=True)
        self.positions[:n].copy_(to(positions, torch.long), non_blocking=True)
        self.slot_mapping[:n].copy_(to(slots, torch.long), non_blocking=True)
        self.slot_mapping[n:b].fill_(-1)
        self.seq_lens[:n].copy_(to(seq_lens, torch.int32), non_blocking=True)
        self.seq_lens[n:b].fill_(1)
        width = max(len(t) for t in tables)
        padded = [t + [0] * (width - len(t)) for t in tables]
        self.block_tables[:n, :width].copy_(to(padded, torch.int32), non_blocking=True)
        self.graphs[b].replay()
        return self.outputs[b][:n]
