"""ModelRunner: loads the model, owns the KV pool, turns a scheduled step into one forward pass.

Per step it builds plain Python lists (token ids, positions, KV slots, query offsets, context lengths,
block tables) and copies each to the device once. On CUDA, pure-decode steps replay a captured CUDA
graph of the padded batch size; every other step (and everything on CPU) runs eagerly.

Under tensor parallelism (``Config.tensor_parallel_size``, ``engine.parallel``) the runner of rank 0
starts the group, sends each step's lists to the workers and samples; a worker's runner holds its
shard of the model and the KV cache and replays the steps (``replay``).
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Callable
from dataclasses import replace

import torch
import torch.distributed as dist

from guided.errors import ConfigError

from .config import Config, worker_fields
from .cuda_graphs import DecodeGraphs
from .loader import load_model
from .models import ModelArgs
from .parallel import SINGLE, Group, TensorParallel, start
from .sampler import SampledTokens, Sampler
from .scheduler import ScheduledBatch, reaches_end
from .sequence import Sequence
from .step_context import StepContext

logger = logging.getLogger(__name__)

CPU_KV_CACHE_BYTES = 256 << 20
KV_BLOCKS_OVER_FULL = 2  # CUDA: KV blocks for at most twice max_num_seqs sequences of max_model_len

# (sequences to sample) -> (int32 bitmask [rows, ceil(V/32)] on any device, row of each sequence or -1)
BitmaskProvider = Callable[[list[Sequence]], "tuple[torch.Tensor, list[int]] | None"]


def resolve_device(name: str, rank: int = 0) -> torch.device:
    """The device of ``name``; "auto" and "cuda" give rank ``rank`` (a tensor-parallel rank on this
    machine) GPU number ``rank``."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device {name!r} was asked for but CUDA is not available")
    if name == "cuda" and rank:
        if rank >= torch.cuda.device_count():
            raise ConfigError(f"rank {rank} needs GPU {rank}, but this machine has {torch.cuda.device_count()}")
        return torch.device("cuda", rank)
    return torch.device(name)


def resolve_dtype(name: str, hf_config: dict, device: torch.device) -> torch.dtype:
    if name == "auto":
        if device.type == "cpu":
            return torch.float32
        name = hf_config.get("torch_dtype") or hf_config.get("dtype") or "bfloat16"
        name = "bfloat16" if name == "float32" else name  # serve fp32 checkpoints in bf16 on GPU
    return getattr(torch, name)


class ModelRunner:
    def __init__(self, config: Config, eos_ids: list[int], num_text_tokens: int, group: Group | None = None):
        """Rank 0 (``group`` None): the engine's runner, which starts the tensor-parallel group when
        ``config.tensor_parallel_size`` > 1; a worker: its ``group``, no sampler."""
        self.config = config
        size = config.tensor_parallel_size
        if group is None and size > 1:
            args = ModelArgs.from_hf(config.hf_config)
            replace(args, tp=TensorParallel(0, size)).check_split()  # before any process starts
            group = start(worker_fields(config), size, resolve_device(config.device), config.distributed_timeout_s)
            weakref.finalize(self, group.close)  # the workers end with the engine, however it ends
        self.group = group
        self.tp = group.tp if group is not None else SINGLE
        try:
            self._start(config, eos_ids, num_text_tokens)
        except BaseException:
            if group is not None and self.tp.rank == 0:
                group.dead = "the engine failed to start"
                group.close()
            raise

    def _start(self, config: Config, eos_ids: list[int], num_text_tokens: int) -> None:
        group, tp = self.group, self.tp
        self.block_size = config.block_size
        failed = None
        try:
            local_rank = int(os.environ.get("LOCAL_RANK", tp.rank)) if tp.size > 1 else 0
            self.device = resolve_device(config.device, local_rank)
            if self.device.type == "cuda" and self.device.index is not None:
                torch.cuda.set_device(self.device)  # Triton launches on the current device
            self.dtype = resolve_dtype(config.dtype, config.hf_config, self.device)
            self.model = load_model(config.model, config.hf_config, self.dtype, self.device, tp)
        except Exception as e:
            if group is None:
                raise
            failed = e
        if group is not None:  # every rank learns whether all loaded; rank 0 raises its own error as it is
            if failed is not None and tp.rank == 0:
                _raise_after(group, failed)
            group.all_ok(None if failed is None else f"{type(failed).__name__}: {failed}")
        self.vocab_size = self.model.args.vocab_size
        self.sampler = Sampler(self.vocab_size, num_text_tokens, eos_ids, self.device) if tp.rank == 0 else None
        self.num_blocks = self._num_kv_blocks()
        if group is not None:  # every rank holds the same number of blocks: the smallest
            least = torch.tensor([self.num_blocks])
            dist.all_reduce(least, op=dist.ReduceOp.MIN, group=group.control)
            self.num_blocks = int(least)
        self._allocate_kv_cache(self.num_blocks)
        if self.sampler is not None:
            self.sampler.warmup(config.max_num_seqs)
        self.graphs = None
        # a model whose forward depends on its data (a mixture of experts routes tokens) runs eagerly, and
        # so do tensor-parallel steps (every rank would have to capture and replay in step)
        if self.device.type == "cuda" and not config.enforce_eager and self.model.GRAPH_SAFE and tp.size == 1:
            self.graphs = DecodeGraphs(self, config.cuda_graph_max_batch, config.max_model_len,
                                       config.cuda_graph_max_chunk)  # fmt: skip

    # ------------------------------------------------------------------ KV pool
    def block_bytes(self) -> int:
        """Bytes of one KV block: 2 (K and V) x layers x kv_heads x head_dim x dtype bytes per token."""
        a = self.model.args
        per_token = 2 * a.num_layers * a.local_kv_heads * a.head_dim * self.dtype.itemsize
        return per_token * self.block_size

    def _num_kv_blocks(self) -> int:
        cfg = self.config
        if cfg.num_kv_blocks is not None:
            return cfg.num_kv_blocks
        # every running sequence at max_model_len, in blocks
        full = cfg.max_num_seqs * (cfg.max_model_len + self.block_size) // self.block_size
        if self.device.type == "cuda":
            budget = self._cuda_kv_budget()
            # No more than twice what the running sequences can fill (the rest keeps cached prefixes):
            # a small model on a large GPU would otherwise get tens of millions of blocks, whose
            # bookkeeping alone takes seconds and gigabytes of host memory.
            if not cfg.kv_cache_memory_bytes:
                budget = min(budget, KV_BLOCKS_OVER_FULL * full * self.block_bytes())
        else:
            budget = cfg.kv_cache_memory_bytes or min(CPU_KV_CACHE_BYTES, full * self.block_bytes())
        num_blocks = int(budget // self.block_bytes())
        if num_blocks * self.block_size < cfg.max_model_len:
            raise ConfigError(
                f"the KV cache has room for {max(num_blocks, 0) * self.block_size} tokens, fewer than "
                f"max_model_len={cfg.max_model_len}; raise gpu_memory_utilization/kv_cache_memory_bytes "
                "or lower max_model_len"
            )
        return num_blocks

    def _cuda_kv_budget(self) -> int:
        if self.config.kv_cache_memory_bytes:
            return self.config.kv_cache_memory_bytes
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(self.device)
        self._profile_run()
        torch.cuda.empty_cache()  # what the profile run cached is counted once, as its activation peak
        free, total = torch.cuda.mem_get_info(self.device)
        stats = torch.cuda.memory_stats(self.device)
        activations = stats["allocated_bytes.all.peak"] - stats["allocated_bytes.all.current"]
        return int(total * self.config.gpu_memory_utilization - (total - free) - activations)

    @torch.inference_mode()
    def _profile_run(self) -> None:
        """A forward pass of the largest step, so the activation peak is known before sizing the pool."""
        cfg = self.config
        num_tokens = min(cfg.max_num_batched_tokens, cfg.max_model_len)
        self._allocate_kv_cache(-(-num_tokens // self.block_size))
        table = list(range(-(-num_tokens // self.block_size)))
        ctx = self._context(list(range(num_tokens)), [0, num_tokens], [num_tokens], [table], num_tokens)
        ids = torch.zeros(num_tokens, dtype=torch.long, device=self.device)
        hidden = self.model(ids, torch.arange(num_tokens, device=self.device), ctx)
        rows = min(cfg.max_num_seqs, num_tokens)
        self.model.logits(hidden[:rows])
        self._allocate_kv_cache(0)
        torch.cuda.synchronize(self.device)

    def _allocate_kv_cache(self, num_blocks: int) -> None:
        a = self.model.args
        shape = (2, a.num_layers, num_blocks, self.block_size, a.local_kv_heads, a.head_dim)
        self.kv_cache = None  # release the old pool first
        # zeros, not empty: kernels mask unused slots, but never-written memory may hold NaNs that a
        # masked lane can still carry into a sum (0 * NaN); zeroing once at start-up rules that out
        self.kv_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)
        for i, attn in enumerate(self.model.attention_layers()):
            attn.k_cache, attn.v_cache = self.kv_cache[0, i], self.kv_cache[1, i]

    # ------------------------------------------------------------------ one step
    @torch.inference_mode()
    def forward(self, batch: ScheduledBatch) -> tuple[list[Sequence], torch.Tensor | None]:
        """Run ``batch``; the sequences whose chunk reached their end and their logits (float32
        ``[rows, vocab_size]``, one row per sequence then one per token of its draft, in order; None
        when none did). On CUDA this returns before the device is done."""
        ids, positions, slots, cu, seq_lens, tables, sample_rows, sample_seqs = self._prepare(batch)
        shape = self.graphs.shape_for(batch) if self.graphs is not None else None
        if shape is not None:
            hidden = self.graphs.run(shape, ids, positions, slots, seq_lens, tables, batch.num_tokens)
            return sample_seqs, self._logits(hidden, sample_rows)
        rope_long = None
        if self.model.rotary.switch is not None:  # LongRoPE: each sequence's phase, for all its tokens
            rope_long = [s.rope_long for s, n in zip(batch.seqs, batch.num_tokens, strict=True) for _ in range(n)]
        step = (ids, positions, slots, cu, seq_lens, tables, max(batch.num_tokens), rope_long, sample_rows)
        if self.group is None:
            return sample_seqs, self.replay(step)
        self.check_alive()
        try:
            self.group.send(("step", step))
            return sample_seqs, self.replay(step)
        except Exception as e:  # a worker is gone (or stuck past the timeout): the engine is over
            raise self.group.failure(e) from e

    @torch.inference_mode()
    def replay(self, step: tuple) -> torch.Tensor | None:
        """One eager forward pass of a step's lists (``forward`` makes them; a tensor-parallel worker
        gets them from rank 0): the logits of its sampled rows, None when there are none (and on a
        worker, which only takes part in gathering them)."""
        ids, positions, slots, cu, seq_lens, tables, max_seqlen_q, rope_long, sample_rows = step
        ctx = self._context(slots, cu, seq_lens, tables, max_seqlen_q)
        if rope_long is not None:
            ctx.rope_long = self._to_device(rope_long, torch.bool)
        hidden = self.model(self._to_device(ids, torch.long), self._to_device(positions, torch.long), ctx)
        return self._logits(hidden, sample_rows)

    def _logits(self, hidden: torch.Tensor, sample_rows: list[int]) -> torch.Tensor | None:
        if not sample_rows:
            return None
        # hidden: [num_tokens, hidden_size]; sample_rows index the last token of each sampled sequence
        return self.model.logits(hidden[self._to_device(sample_rows, torch.long)])

    def check_alive(self) -> None:
        """``EngineDeadError`` when a tensor-parallel worker is gone (or the group was shut down)."""
        if self.group is not None:
            self.group.check()

    def close(self) -> None:
        """Stop the tensor-parallel workers (nothing to do without them)."""
        if self.group is not None:
            self.group.close()

    def logits_ready(self):
        """A callable that says whether the device has finished what was queued so far (always True on CPU)."""
        if self.device.type != "cuda":
            return None
        event = torch.cuda.Event()
        event.record()
        return event.query

    @torch.inference_mode()
    def sample(self, seqs: list[Sequence], logits: torch.Tensor, bitmask=None, rows: list[int] | None = None) -> SampledTokens:
        """Sample one token per row of ``logits`` (``bitmask`` rows by ``rows``, -1 = unconstrained);
        if the batch raises, row by row, so that the rows that fail end alone."""
        try:
            return self._sample_rows(seqs, logits, bitmask, rows)
        except Exception:
            if len(seqs) > 1:
                logger.exception("sampling a batch of %d rows failed; sampling row by row", len(seqs))
        out = SampledTokens()
        for i, seq in enumerate(seqs):
            try:
                out.extend(self._sample_rows([seq], logits[i : i + 1], bitmask, None if rows is None else [rows[i]]))
            except Exception as e:  # this row alone: its request ends with the error
                logger.exception("sampling failed for sequence %s of request %s", seq.seq_id, seq.request_id)
                out.failed.append((seq, f"sampling failed: {type(e).__name__}: {e}"))
        return out

    @torch.inference_mode()
    def execute(self, batch: ScheduledBatch, bitmask_provider: BitmaskProvider | None = None) -> SampledTokens:
        """``forward`` then ``sample``, with a custom bitmask provider (called while the device runs)."""
        seqs, logits = self.forward(batch)
        if not seqs:
            return SampledTokens()
        try:
            result = bitmask_provider(seqs) if bitmask_provider is not None else None
        except Exception as e:  # the provider failed for the whole step: each row ends alone
            logger.exception("the bitmask provider failed")
            return SampledTokens(failed=[(s, f"computing the token mask failed: {type(e).__name__}: {e}") for s in seqs])
        bitmask, rows = result if result is not None else (None, None)
        return self.sample(seqs, logits, bitmask, rows)

    def _sample_rows(self, seqs: list[Sequence], logits: torch.Tensor, bitmask, rows) -> SampledTokens:
        sampling = self.sampler.prepare(seqs)
        if bitmask is not None and rows is not None and any(r >= 0 for r in rows):
            bitmask = bitmask.to(self.device, non_blocking=True)
            rows = self._to_device(rows, torch.int32)
        else:  # no constrained row here
            bitmask = rows = None
        out = SampledTokens()
        out.add(seqs, self.sampler(logits, sampling, bitmask, rows))
        return out

    def _prepare(self, batch: ScheduledBatch):
        ids, positions, slots, cu, seq_lens, tables = [], [], [], [0], [], []
        sample_rows, sample_seqs = [], []
        bs = self.block_size
        for seq, n in zip(batch.seqs, batch.num_tokens, strict=True):
            start, end = seq.num_computed_tokens, seq.num_computed_tokens + n
            ids.extend(seq.token_ids[start:end])
            if end > seq.num_tokens:  # its draft's positions (engine.speculative)
                ids.extend(seq.draft[: end - seq.num_tokens])
            positions.extend(range(start, end))
            table = seq.block_table
            for b in range(start // bs, (end - 1) // bs + 1):  # slots, one block's run at a time
                base = table[b] * bs
                slots.extend(range(base + max(start - b * bs, 0), base + min(end - b * bs, bs)))
            cu.append(cu[-1] + n)
            seq_lens.append(end)
            tables.append(table)
            if reaches_end(seq, n):  # sample the next token (and one row per draft token after it)
                sample_rows.extend(range(cu[-1] - 1 - len(seq.draft), cu[-1]))
                sample_seqs.append(seq)
        return ids, positions, slots, cu, seq_lens, tables, sample_rows, sample_seqs

    def _context(self, slots, cu, seq_lens, tables, max_seqlen_q: int) -> StepContext:
        width = max(len(t) for t in tables)
        padded = [t + [0] * (width - len(t)) for t in tables]
        return StepContext(
            slot_mapping=self._to_device(slots, torch.long),
            block_tables=self._to_device(padded, torch.int32),
            cu_seqlens_q=self._to_device(cu, torch.int32),
            seq_lens=self._to_device(seq_lens, torch.int32),
            max_seqlen_q=max_seqlen_q,
        )

    def _to_device(self, values: list, dtype: torch.dtype) -> torch.Tensor:
        pin = self.device.type == "cuda"
        return torch.tensor(values, dtype=dtype, pin_memory=pin).to(self.device, non_blocking=True)


def _raise_after(group: Group, error: Exception) -> None:
    """Rank 0 failed to load: the workers learn it (and stop), then rank 0 raises its own error."""
    try:
        group.all_ok(f"{type(error).__name__}: {error}")
    except Exception:
        pass
    raise error
