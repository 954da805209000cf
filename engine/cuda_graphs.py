"""DecodeGraphs: CUDA graphs of the forward pass for decode steps, one per padded (batch, chunk) shape.

A decode step at small batch is bound by kernel-launch overhead, not by the GPU; replaying a captured
graph launches the whole forward pass at once. Inputs live in static buffers the graphs read; a step
copies its lists into them (one copy per field) and pads the batch to the next captured size with
rows that write no KV (slot -1).

Fast-forward feeds a grammar's forced tokens as a chunk of several tokens, so a guided batch mostly
has some sequence with more than one new token. Such steps replay a graph of uniform chunks: every
sequence gets ``k`` query rows (the next captured chunk length >= its longest chunk); a sequence with
``t < k`` new tokens gets ``k - t`` padding rows after its real ones, which write no KV and whose
outputs are dropped. Its context length is counted with the padding, so each real row still sees
exactly the keys up to its own position (the kernels place a chunk's rows at the end of the context).
The scheduler caps a decoding sequence's chunk at the longest captured ``k`` so that forced runs stay
on graphs (a longer run takes several steps).
"""

from __future__ import annotations

import logging
import weakref

import torch

from .step_context import StepContext

logger = logging.getLogger(__name__)

CHUNKS = (1, 2, 4, 8, 16)  # chunk lengths with graphs, up to Config.cuda_graph_max_chunk
CHUNK_GRAPH_TOKENS = 512  # chunk graphs (k > 1) for power-of-two batches of at most this many rows


class DecodeGraphs:
    def __init__(self, runner, max_batch: int, max_model_len: int, max_chunk: int = 8, capture: bool = True):
        # a proxy, not a reference: the runner holds this object, and a cycle would keep the graphs'
        # GPU memory alive until a garbage collection
        self.runner = weakref.proxy(runner)
        self.error: str | None = None  # why capture failed (decode then runs eagerly), for stats and checks
        # capture=False runs the model on the same padded static inputs without graphs: what a replay
        # computes, checkable on CPU
        self.capture = capture
        device = runner.device
        max_batch = min(max_batch, runner.config.max_num_seqs)
        self.sizes = sorted({b for b in (1, 2, 4, 8, *range(16, max_batch + 1, 16), max_batch) if b <= max_batch})
        # chunk length -> batch sizes with a graph, ascending (a chunk length whose capture fails leaves)
        self.shapes: dict[int, list[int]] = {1: self.sizes}
        for k in CHUNKS[1:]:
            if k <= max_chunk:
                self.shapes[k] = [b for b in self.sizes if b & (b - 1) == 0 and b * k <= CHUNK_GRAPH_TOKENS] or [1]
        self.max_blocks = -(-max_model_len // runner.block_size)
        n = self.sizes[-1]
        tokens = max(b * k for k, sizes in self.shapes.items() for b in sizes)
        self.input_ids = torch.zeros(tokens, dtype=torch.long, device=device)
        self.positions = torch.zeros(tokens, dtype=torch.long, device=device)
        self.slot_mapping = torch.full((tokens,), -1, dtype=torch.long, device=device)
        self.block_tables = torch.zeros(n, self.max_blocks, dtype=torch.int32, device=device)
        self.cu_seqlens_q = {k: torch.arange(n + 1, dtype=torch.int32, device=device) * k for k in self.shapes}
        self.seq_lens = torch.ones(n, dtype=torch.int32, device=device)
        self.graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self.outputs: dict[tuple[int, int], torch.Tensor] = {}
        if not capture:
            return
        for k in list(self.shapes):  # single tokens first: a failed chunk capture leaves those
            try:
                self._capture(k)
            except Exception as e:  # a kernel that cannot be captured must not stop the engine
                logger.warning("CUDA graph capture failed for chunks of %d (%s); such steps run eagerly", k, e)
                self.error = self.error or f"chunk {k}: {type(e).__name__}: {e}"
                for b in self.shapes.pop(k):
                    self.graphs.pop((b, k), None)
                    self.outputs.pop((b, k), None)

    @property
    def max_chunk(self) -> int:
        """The longest chunk a graph takes (1 when none does)."""
        return max(self.shapes, default=1)

    def _ctx(self, b: int, k: int) -> StepContext:
        return StepContext(self.slot_mapping[: b * k], self.block_tables[:b], self.cu_seqlens_q[k][: b + 1],
                           self.seq_lens[:b], k)  # fmt: skip

    def _forward(self, b: int, k: int) -> torch.Tensor:
        return self.runner.model(self.input_ids[: b * k], self.positions[: b * k], self._ctx(b, k))

    @torch.inference_mode()
    def _capture(self, k: int) -> None:
        """The graphs of chunk length ``k``, largest batch first so that the smaller ones reuse its
        memory pool."""
        pool = None
        self.seq_lens.fill_(max(self.shapes))  # a context at least as long as any chunk
        for b in reversed(self.shapes[k]):
            self._forward(b, k)  # warm-up (Triton compiles, allocator)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool):
                self.outputs[b, k] = self._forward(b, k)
            pool = graph.pool()
            self.graphs[b, k] = graph
        torch.cuda.synchronize()

    def shape_for(self, batch) -> tuple[int, int] | None:
        """The (padded batch, chunk length) whose graph runs ``batch``, or None (run it eagerly)."""
        if self.capture and not self.graphs:
            return None
        n = len(batch)
        longest = max(batch.num_tokens, default=0)
        k = next((c for c in sorted(self.shapes) if c >= longest), None)
        if k is None or n == 0:
            return None
        b = next((s for s in self.shapes[k] if s >= n), None)
        if b is None:
            return None
        bs = self.runner.block_size
        # every sequence's padded context must fit its static block-table row
        if any(-(-(seq.num_computed_tokens + k) // bs) > self.max_blocks for seq in batch.seqs):
            return None
        return b, k

    def run(self, shape: tuple[int, int], ids: list[int], positions: list[int], slots: list[int],
            seq_lens: list[int], tables, num_tokens: list[int]) -> torch.Tensor:  # fmt: skip
        """Hidden states of the real tokens, packed in ``ids``' order."""
        b, k = shape
        n = len(num_tokens)
        gather = None
        if k > 1:  # pad each sequence's chunk to k rows
            p_ids, p_pos, p_slots, gather, at = [], [], [], [], 0
            for i, t in enumerate(num_tokens):
                pad = k - t
                p_ids += ids[at : at + t] + [0] * pad
                p_pos += positions[at : at + t] + [positions[at + t - 1]] * pad
                p_slots += slots[at : at + t] + [-1] * pad
                gather += range(i * k, i * k + t)
                at += t
            ids, positions, slots = p_ids, p_pos, p_slots
            seq_lens = [length + k - t for length, t in zip(seq_lens, num_tokens, strict=True)]
        to = self.runner._to_device
        rows = n * k
        self.input_ids[:rows].copy_(to(ids, torch.long), non_blocking=True)
        self.positions[:rows].copy_(to(positions, torch.long), non_blocking=True)
        self.slot_mapping[:rows].copy_(to(slots, torch.long), non_blocking=True)
        self.slot_mapping[rows : b * k].fill_(-1)
        self.seq_lens[:n].copy_(to(seq_lens, torch.int32), non_blocking=True)
        self.seq_lens[n:b].fill_(k)  # padding sequences: k rows over a context of k
        width = max(len(t) for t in tables)
        padded = [t + [0] * (width - len(t)) for t in tables]
        self.block_tables[:n, :width].copy_(to(padded, torch.int32), non_blocking=True)
        if self.capture:
            self.graphs[b, k].replay()
            out = self.outputs[b, k]
        else:
            with torch.inference_mode():
                out = self._forward(b, k)
        if gather is None:
            return out[:n]
        return out[to(gather, torch.long)]
