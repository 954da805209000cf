"""Sampler: logits of the sampled rows -> penalties and masks -> the fused sampling kernel.

Everything here is vectorised over the batch; Python only gathers per-sequence lists once a step.
Rows past the tokenizer (a padded lm_head) are always masked off. A grammar's bitmask, when the step
has one, is applied by the fused kernel itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from guided.kernels.sampling import SampleOutput, fused_sample, fused_sample_ref

from .sequence import Sequence

_MASK64 = (1 << 63) - 1


@dataclass(slots=True)
class SamplingBatch:
    """Per-row sampling inputs of one step, one device copy per field."""

    temperature: torch.Tensor  # f32 [B]
    top_k: torch.Tensor  # int32 [B]
    top_p: torch.Tensor  # f32 [B]
    min_p: torch.Tensor  # f32 [B]
    seeds: torch.Tensor  # int64 [B]
    offsets: torch.Tensor  # int64 [B]
    num_logprobs: int
    return_logprob: bool
    penalties: tuple | None  # (rows, ids, prompt_rows, prompt_ids, rep, freq, pres) or None
    banned: tuple | None  # (rows, ids) masked to -inf (EOS before min_tokens)
    bias: tuple | None  # (rows, ids, values) added to the logits (logit_bias)
    all_greedy: bool


@dataclass(slots=True)
class SampledTokens:
    """What one step sampled, on the host: per sequence its token and logprobs, and the sequences
    whose sampling failed (with why), which the engine ends alone; ``endings``: sequences the token
    budget ends instead (their shortest completion and EOS, appended as forced tokens)."""

    seqs: list[Sequence] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[dict[int, float] | None] = field(default_factory=list)  # sampled id first, then top ids
    failed: list[tuple[Sequence, str]] = field(default_factory=list)
    endings: list[tuple[Sequence, list[int]]] = field(default_factory=list)

    def add(self, seqs: list[Sequence], out: SampleOutput) -> None:
        """Append the rows of ``out`` (one per sequence); the step's one device-to-host copy."""
        self.seqs.extend(seqs)
        self.token_ids.extend(out.token_ids.tolist())
        self.logprobs.extend(logprob_rows(out) if out.logprobs is not None else [None] * len(seqs))

    def extend(self, other: SampledTokens) -> None:
        self.seqs += other.seqs
        self.token_ids += other.token_ids
        self.logprobs += other.logprobs
        self.failed += other.failed
        self.endings += other.endings


def logprob_rows(sampled: SampleOutput) -> list[dict[int, float]]:
    """Per row ``{sampled id: logprob, top ids...: logprob}`` (the sampled token first)."""
    chosen = sampled.logprobs.tolist()
    ids = sampled.token_ids.tolist()
    rows = [{t: lp} for t, lp in zip(ids, chosen, strict=True)]
    if sampled.top_ids is not None:
        for row, tops, lps in zip(rows, sampled.top_ids.tolist(), sampled.top_logprobs.tolist(), strict=True):
            for t, lp in zip(tops, lps, strict=True):
                row.setdefault(t, lp)
    return rows


def sequence_seed(seq: Sequence, engine_seed: int) -> int:
    """Seed of a sequence's stream: the request's seed (mixed with the completion index) or a fresh one."""
    base = seq.params.seed if seq.params.seed is not None else hash((engine_seed, seq.seq_id)) & _MASK64
    return (base + seq.index * 0x9E3779B97F4A7C15) & _MASK64


class Sampler:
    def __init__(self, vocab_size: int, num_text_tokens: int, eos_ids: list[int], device: torch.device):
        self.vocab_size = vocab_size  # the lm_head width
        self.num_text_tokens = min(num_text_tokens, vocab_size)  # ids past this are never sampled
        self.eos_ids = eos_ids  # shared with the engine
        self.device = device

    def prepare(self, seqs: list[Sequence]) -> SamplingBatch:
        """Gather the sampling inputs of ``seqs`` (one row each) into tensors."""
        params = [s.params for s in seqs]
        want = [p.logprobs for p in params if p.logprobs is not None]
        return SamplingBatch(
            temperature=self._tensor([p.temperature for p in params], torch.float32),
            # past the vocabulary top-k keeps everything: clamping keeps any int inside int32
            top_k=self._tensor([min(p.top_k, self.vocab_size) for p in params], torch.int32),
            top_p=self._tensor([p.top_p for p in params], torch.float32),
            min_p=self._tensor([p.min_p for p in params], torch.float32),
            seeds=self._tensor([s.seed for s in seqs], torch.int64),
            offsets=self._tensor([s.num_output_tokens for s in seqs], torch.int64),
            num_logprobs=max(want, default=0),
            return_logprob=bool(want),
            penalties=self._penalties(seqs) if any(p.has_penalties for p in params) else None,
            banned=self._banned(seqs),
            bias=self._bias(seqs) if any(p.logit_bias for p in params) else None,
            all_greedy=all(p.temperature == 0.0 for p in params),
        )

    def __call__(
        self,
        logits: torch.Tensor,
        batch: SamplingBatch,
        bitmask: torch.Tensor | None = None,
        bitmask_rows: torch.Tensor | None = None,
    ) -> SampleOutput:
        # logits: [B, vocab_size] float32; only -inf is written into it in place (idempotent), so a
        # failed batch can be sampled again row by row
        if self.num_text_tokens < self.vocab_size:
            logits[:, self.num_text_tokens :] = float("-inf")
        if batch.banned is not None:
            logits[batch.banned] = float("-inf")
        if batch.penalties is not None:
            logits = apply_penalties(logits, *batch.penalties)
        if batch.bias is not None:  # a new tensor: the caller's logits stay as they were
            rows, ids, values = batch.bias
            logits = logits.index_put((rows, ids), values, accumulate=True)
        if not logits.is_cuda and batch.all_greedy and bitmask is None and not batch.return_logprob:
            return SampleOutput(logits.argmax(dim=1))  # CPU fast path; the kernel's greedy rule exactly
        sample = fused_sample if logits.is_cuda else fused_sample_ref  # CPU: never Triton's interpreter
        return sample(
            logits, batch.temperature, batch.top_k, batch.top_p, batch.min_p, batch.seeds, batch.offsets,
            bitmask=bitmask, bitmask_rows=bitmask_rows, num_logprobs=batch.num_logprobs,
            return_logprob=batch.return_logprob,
        )  # fmt: skip

    @torch.inference_mode()
    def warmup(self, max_batch: int) -> None:
        """Compile every variant of the sampling kernels a run can meet (split counts by batch size, with
        and without a bitmask) now, so that no request waits on a compile mid-run (CUDA only)."""
        if self.device.type != "cuda":
            return
        words = (self.vocab_size + 31) // 32
        dev = self.device
        # powers of two (and max_batch) meet every split count the kernels choose by batch size
        for b in sorted({min(1 << i, max_batch) for i in range(max_batch.bit_length() + 1)}):
            logits = torch.zeros(b, self.vocab_size, device=dev)
            ones, zeros = torch.ones(b, device=dev), torch.zeros(b, device=dev)
            ints = torch.zeros(b, dtype=torch.int64, device=dev)
            args = (ones, ints.int(), ones, zeros, ints, ints)  # temperature, top_k, top_p, min_p, seeds, offsets
            fused_sample(logits, *args)
            fused_sample(logits, *args, bitmask=torch.full((b, words), -1, dtype=torch.int32, device=dev),
                         bitmask_rows=torch.arange(b, dtype=torch.int32, device=dev))  # fmt: skip
        torch.cuda.synchronize(self.device)

    def _tensor(self, values: list, dtype: torch.dtype) -> torch.Tensor:
        pin = self.device.type == "cuda"
        return torch.tensor(values, dtype=dtype, pin_memory=pin).to(self.device, non_blocking=True)

    def _penalties(self, seqs: list[Sequence]) -> tuple:
        rows, ids, prompt_rows, prompt_ids = [], [], [], []
        for row, seq in enumerate(seqs):
            if not seq.params.has_penalties:
                continue
            out = seq.output_token_ids
            rows.extend([row] * len(out))
            ids.extend(out)
            if seq.params.repetition_penalty != 1.0:
                prompt_rows.extend([row] * seq.num_prompt_tokens)
                prompt_ids.extend(seq.token_ids[: seq.num_prompt_tokens])
        params = [s.params for s in seqs]
        return (
            self._tensor(rows, torch.int64), self._tensor(ids, torch.int64),
            self._tensor(prompt_rows, torch.int64), self._tensor(prompt_ids, torch.int64),
            self._tensor([p.repetition_penalty for p in params], torch.float32),
            self._tensor([p.frequency_penalty for p in params], torch.float32),
            self._tensor([p.presence_penalty for p in params], torch.float32),
        )  # fmt: skip

    def _bias(self, seqs: list[Sequence]) -> tuple:
        rows, ids, values = [], [], []
        for row, seq in enumerate(seqs):
            for token, bias in (seq.params.logit_bias or {}).items():
                rows.append(row)
                ids.append(token)
                values.append(bias)
        return (self._tensor(rows, torch.int64), self._tensor(ids, torch.int64),
                self._tensor(values, torch.float32))  # fmt: skip

    def _banned(self, seqs: list[Sequence]) -> tuple | None:
        rows, ids = [], []
        for row, seq in enumerate(seqs):
            p = seq.params
            if seq.num_output_tokens < p.min_tokens:
                # a grammar decides where EOS may come; when it allows nothing else, EOS it is
                eos = [] if p.ignore_eos or seq.constraint is not None else self.eos_ids
                stop_ids = p.stop_token_ids + eos
                rows.extend([row] * len(stop_ids))
                ids.extend(stop_ids)
        if not rows:
            return None
        return self._tensor(rows, torch.int64), self._tensor(ids, torch.int64)


def apply_penalties(logits, rows, ids, prompt_rows, prompt_ids, rep, freq, pres) -> torch.Tensor:
    """Repetition (prompt + output), frequency and presence (output) penalties, as new logits.

    logits: [B, V]; (rows, ids) are the output tokens, (prompt_rows, prompt_ids) the prompt tokens of
    the rows with a repetition penalty; rep/freq/pres: [B].
    """
    counts = torch.zeros_like(logits)
    counts.index_put_((rows, ids), torch.ones_like(ids, dtype=logits.dtype), accumulate=True)
    seen = counts > 0
    seen_any = seen.clone()
    seen_any[prompt_rows, prompt_ids] = True
    r = rep[:, None]
    penalised = torch.where(logits > 0, logits / r, logits * r)
    out = torch.where(seen_any, penalised, logits)
    return out - (freq[:, None] * counts + pres[:, None] * seen.to(logits.dtype))
