"""Scheduler: continuous batching with chunked prefill under a token budget, preemption by recompute.

Pure Python. Each step takes the running sequences first (oldest first: one token for a decode, a
chunk for an unfinished prefill), then admits waiting ones in arrival order while the token budget,
the sequence limit and the free blocks allow. When a running sequence needs a block and none is free,
the newest running sequence is preempted: its blocks are freed and it goes back to the front of the
queue keeping its output, to be recomputed later. Oldest-first service means nothing starves.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field

from .block_manager import BlockManager
from .config import Config, longrope_switch
from .sequence import Sequence, SequenceStatus

logger = logging.getLogger(__name__)

# Padded tokens of a graph step with forced chunks, at most (see Scheduler._decode_chunk_cap): about
# where a bf16 forward pass on an H100/H200 turns from reading weights to computing.
DECODE_CHUNK_TOKENS = 256


@dataclass(slots=True)
class ScheduledBatch:
    """One step: each scheduled sequence with the number of its tokens to compute."""

    seqs: list[Sequence] = field(default_factory=list)
    num_tokens: list[int] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    failed: list[tuple[Sequence, str]] = field(default_factory=list)  # dropped by an error, with why

    def __len__(self) -> int:
        return len(self.seqs)

    def add(self, seq: Sequence, n: int) -> None:
        self.seqs.append(seq)
        self.num_tokens.append(n)

    def to_sample(self) -> list[Sequence]:
        """The sequences whose chunk reaches their end: they sample a token this step."""
        return [s for s, n in zip(self.seqs, self.num_tokens, strict=True) if reaches_end(s, n)]


def reaches_end(seq: Sequence, n: int) -> bool:
    """Whether computing ``n`` more tokens of ``seq`` reaches its last token, its draft included (then
    it samples)."""
    return seq.num_computed_tokens + n == seq.num_tokens + len(seq.draft)


class Scheduler:
    def __init__(self, config: Config, block_manager: BlockManager):
        self.max_num_seqs = config.max_num_seqs
        self.max_num_batched_tokens = config.max_num_batched_tokens
        self.chunked_prefill = config.enable_chunked_prefill
        self.block_manager = block_manager
        # new tokens a decoding sequence computes per step at most (None: all it has); the engine sets
        # it to the longest chunk its CUDA graphs take, so fast-forwarded runs stay on graphs
        self.max_decode_chunk: int | None = None
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0  # statistics
        # LongRoPE: a sequence longer than this takes the long factors at every position, as in HF,
        # which recomputes the whole cache when a sequence grows past it (see _phase)
        self.rope_switch = longrope_switch(config.hf_config)
        self.num_rope_recomputes = 0
        self.num_draft_tokens_dropped = 0  # speculative: draft tokens no room was left for

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> ScheduledBatch:
        batch = ScheduledBatch()
        budget = self._schedule_running(batch, self.max_num_batched_tokens)
        if not batch.preempted:
            self._schedule_waiting(batch, budget)
        return batch

    def _decode_chunk_cap(self) -> int | None:
        """Most new tokens per decoding sequence this step. A graph step pads every sequence to the
        longest chunk, so the cap shrinks as the batch grows: the padded step stays within
        DECODE_CHUNK_TOKENS tokens, where a forward pass costs about what a single-token one does (its
        weights' read, not its arithmetic, bounds it); at 256 sequences forced tokens go one a step."""
        if self.max_decode_chunk is None:
            return None
        fit = max(1, DECODE_CHUNK_TOKENS // max(1, len(self.running)))
        return min(self.max_decode_chunk, 1 << (fit.bit_length() - 1))

    def _schedule_running(self, batch: ScheduledBatch, budget: int) -> int:
        i = 0
        cap = self._decode_chunk_cap()
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            if self._long(seq) and not seq.rope_long:  # grown past LongRoPE's switch: its KV again, long
                self._requeue(self.running.pop(i))
                self.num_rope_recomputes += 1
                continue
            try:
                n = self._schedule_one_running(seq, budget, batch, cap)
            except Exception as e:  # this sequence alone leaves the batch; the caller ends it
                self._drop(seq, e, batch)
                continue
            if n is None:
                break  # seq itself was preempted; everything after it already was
            budget -= n
            i += 1
        return budget

    def _schedule_one_running(self, seq: Sequence, budget: int, batch: ScheduledBatch,
                              cap: int | None = None) -> int | None:  # fmt: skip
        """Tokens of ``seq`` scheduled this step (0: none to compute), or None when it was preempted;
        at most ``cap`` once its prompt is computed."""
        n = min(seq.num_uncomputed_tokens, budget)
        if cap is not None and seq.num_computed_tokens >= seq.num_prompt_tokens:
            n = min(n, cap)
        if seq.draft:
            n = self._with_draft(seq, n, budget, cap)
        if n == 0:  # nothing to compute this step (e.g. waiting on something outside the engine)
            return 0
        if not self._make_room(seq, n, batch):
            return None
        self.block_manager.append(seq, n)
        batch.add(seq, n)
        return n

    def _with_draft(self, seq: Sequence, n: int, budget: int, cap: int | None) -> int:
        """Tokens of ``seq`` this step with as much of its draft as the budget, the chunk cap and the
        free blocks allow (never a preemption for a draft); a draft behind a partial chunk is dropped."""
        real = seq.num_uncomputed_tokens
        k = len(seq.draft) if n == real else 0
        k = min(k, budget - real, (cap - real) if cap is not None else k)
        if k > 0 and not self.block_manager.can_append(seq, real + k):
            k = 0
        self.num_draft_tokens_dropped += len(seq.draft) - max(k, 0)
        if k <= 0:
            seq.drop_draft()
        elif k < len(seq.draft):  # the position after a kept prefix is sampled (the cut kept it so)
            seq.draft, seq.draft_states, seq.draft_bonus = seq.draft[:k], seq.draft_states[:k], True
        return n + len(seq.draft)

    def _make_room(self, seq: Sequence, n: int, batch: ScheduledBatch) -> bool:
        while not self.block_manager.can_append(seq, n):
            victim = self.running.pop()
            self._preempt(victim, batch)
            if victim is seq:
                return False
        return True

    def _schedule_waiting(self, batch: ScheduledBatch, budget: int) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            try:
                n = self._admit(seq, budget)
            except Exception as e:  # this sequence alone leaves the queue; the caller ends it
                self._drop(seq, e, batch)
                continue
            if n is None:
                break
            batch.add(seq, n)
            budget -= n

    def _admit(self, seq: Sequence, budget: int) -> int | None:
        """Move the first waiting sequence into the running set with its first chunk; None if it cannot."""
        bm = self.block_manager
        self._phase(seq)
        cached = bm.num_cached_tokens(seq)
        n = min(seq.num_tokens - cached, budget)
        if n < seq.num_tokens - cached and not self.chunked_prefill:
            return None
        if not bm.can_allocate(seq, cached + n):
            return None
        bm.allocate(seq, cached + n)
        self.waiting.popleft()
        seq.status = SequenceStatus.RUNNING
        self.running.append(seq)
        return n

    def _long(self, seq: Sequence) -> bool:
        """LongRoPE: whether ``seq`` holds more tokens than ``rope_switch`` (its KV then takes the long factors)."""
        return self.rope_switch is not None and seq.num_tokens > self.rope_switch

    def _phase(self, seq: Sequence) -> None:
        """LongRoPE: the factors ``seq``'s KV is computed with from now on (a new hash chain when they
        change: the short phase's blocks are no hits for the long one)."""
        long = self._long(seq)
        if long != seq.rope_long:
            seq.rope_long = long
            seq.block_hashes = []

    def _drop(self, seq: Sequence, error: Exception, batch: ScheduledBatch) -> None:
        """Take ``seq`` out of the queues and the batch after scheduling it raised; the engine ends it."""
        logger.exception("scheduling failed for sequence %s of request %s", seq.seq_id, seq.request_id)
        for queue in (self.waiting, self.running):
            if seq in queue:
                queue.remove(seq)
        if seq in batch.seqs:
            i = batch.seqs.index(seq)
            del batch.seqs[i], batch.num_tokens[i]
        batch.failed.append((seq, f"scheduling failed: {type(error).__name__}: {error}"))

    def _preempt(self, seq: Sequence, batch: ScheduledBatch) -> None:
        self._requeue(seq)
        batch.preempted.append(seq)
        self.num_preemptions += 1

    def _requeue(self, seq: Sequence) -> None:
        """Free ``seq``'s blocks and put it at the front of the queue, to be computed again."""
        self.block_manager.free(seq)
        seq.reset_for_recompute()
        self.waiting.appendleft(seq)

    def finish(self, seq: Sequence, reason: str) -> None:
        """Mark ``seq`` finished and release its blocks."""
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        self.block_manager.free(seq)
        if seq in self.running:
            self.running.remove(seq)

    def abort(self, seqs: list[Sequence]) -> None:
        """Drop ``seqs`` wherever they are, freeing all their blocks at once."""
        for seq in seqs:
            if seq.status is SequenceStatus.WAITING and seq in self.waiting:
                self.waiting.remove(seq)
            self.finish(seq, "abort")
