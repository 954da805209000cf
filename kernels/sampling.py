"""Fused guided sampling: bitmask, temperature, top-k, top-p, min-p and a seeded draw in one kernel.

Semantics (kernel and reference agree token for token):

* ``x`` = the logits in fp32 with disallowed tokens at ``-inf`` (bitmask row ``bitmask_rows[b]``;
  ``-1`` = unconstrained, every column allowed; constrained rows mask columns past ``32 * words``).
* Logprobs are the log-softmax of ``x`` at temperature 1, before any filter; a masked token's
  logprob is ``-inf``.
* ``temperature <= 0``: greedy, ``argmax x`` (lowest id on ties). No filter applies.
* A row with every token masked returns token 0 with logprob ``-inf`` (the engine never builds one:
  a grammar always allows EOS or a continuation).
* Otherwise ``z = x * (1 / temperature)`` (fp32, the reciprocal rounded once) and the filters,
  in the order temperature -> top-k -> top-p -> min-p, each keep every token whose ``z`` is at
  least a threshold (ties at a threshold are all kept, so top-k may keep more than k): top-k the k-th largest ``z`` (off when ``top_k <= 0`` or ``>= V``); top-p, over the tokens
  top-k kept, the largest value ``v`` whose kept mass ``sum(exp(z - zmax) for z >= v)`` (fp32 exp,
  fp64 sum) is ``>= top_p *`` the total (off when ``top_p >= 1``); min-p ``zmax + log(min_p)``,
  i.e. ``p >= min_p * p_max`` (off when ``min_p <= 0``). The most likely token is always kept.
* The draw is Gumbel-max: ``argmax(z + g)`` over the kept tokens (lowest id on ties), with
  ``g = -log(-log(u))`` (``gumbel.py``) and ``u`` from Philox4x32-10 keyed by the row's 64-bit seed at counter
  ``(token // 4, offset_lo, offset_hi, 0)`` (see ``gumbel_ref``). A row's token depends only on
  its own logits, parameters, seed and offset, never on the rest of the batch.

The kernel needs no sort: one program per row makes one pass for greedy and unfiltered rows (noise
is generated only for chunks whose best logit is within reach of the best score so far; batches
too small to fill the GPU split that pass over the vocabulary in a first kernel); the
top-k and top-p thresholds are found by a search over the float order of ``z`` that tests 16
pivots per pass (about 8 passes per filter), then one pass draws. On the GPU, exp/log are the
hardware's approximations, so a seeded row can differ from the reference at a near-tie (rare);
greedy rows and the interpreter agree exactly.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch

from guided.errors import ConfigError

from ._triton import jit, power_of_2_at_most, tl, use_triton
from .bitmask import unpack_bitmask
from .gumbel import GUMBEL_MAX, _gumbel, gumbel_ref
from .threshold import _filtered_draw, _key_to_float, _masked_logits, _order_key

__all__ = ["SampleOutput", "fused_sample", "fused_sample_ref"]

LOGIT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
BLOCK_V = 1024  # tokens per chunk in the streaming passes
BLOCK_SEARCH = 256  # tokens per chunk in the threshold search ([BLOCK_SEARCH, NUM_PIVOTS] tiles)
NUM_PIVOTS = 16
MAX_SPLITS = 64  # vocabulary splits of pass 1 for small batches


class SampleOutput(NamedTuple):
    """What :func:`fused_sample` returns.

    ``token_ids`` int64 ``[B]``; ``logprobs`` f32 ``[B]`` (the chosen token's) or None;
    ``top_ids`` int64 ``[B, n]`` and ``top_logprobs`` f32 ``[B, n]`` (by logprob descending, lower
    id first on ties) or None when ``num_logprobs == 0``.
    """

    token_ids: torch.Tensor
    logprobs: torch.Tensor | None = None
    top_ids: torch.Tensor | None = None
    top_logprobs: torch.Tensor | None = None


# ----------------------------------------------------------------------------- Triton


@jit
def _row_params(bitmask_rows_ptr, temperature_ptr, top_k_ptr, top_p_ptr, min_p_ptr, row, vocab_size,
                HAS_BITMASK: tl.constexpr):
    """The row's bitmask row (-1 = none), 1 / T, and which filters are on."""
    if HAS_BITMASK:
        mask_row = tl.load(bitmask_rows_ptr + row).to(tl.int64)
    else:
        mask_row = row * 0 - 1
    temp = tl.load(temperature_ptr + row)
    top_k = tl.load(top_k_ptr + row)
    top_p = tl.load(top_p_ptr + row)
    min_p = tl.load(min_p_ptr + row)
    sampling = temp > 0.0
    inv_temp = tl.math.div_rn(1.0, tl.where(sampling, temp, 1.0))  # z = x * (1 / T), as the reference
    k_on = (top_k > 0) & (top_k < vocab_size)
    p_on = top_p < 1.0
    m_on = min_p > 0.0
    return mask_row, inv_temp, sampling, k_on, p_on, m_on, top_k, top_p, min_p


@jit
def _scan(
    logits_ptr, bitmask_ptr, row, mask_row, lo, hi, vocab_size, num_words, stride_logits_row, stride_mask_row,
    inv_temp, seed, offset, draw_now, HAS_BITMASK: tl.constexpr, BLOCK_V: tl.constexpr,
    GUMBEL_MAX: tl.constexpr,
):
    """Pass 1 over tokens [lo, hi): argmax of x, online logsumexp of x, and (draw_now) the draw."""
    best_x = tl.full([], float("-inf"), tl.float32)
    best_id = tl.full([], 0, tl.int32)
    run_max = tl.full([], float("-inf"), tl.float32)
    run_sum = tl.full([], 0.0, tl.float32)
    best_score = tl.full([], float("-inf"), tl.float32)
    draw_id = tl.full([], 0, tl.int32)
    draw_x = tl.full([], float("-inf"), tl.float32)
    for start in range(lo, hi, BLOCK_V):
        tokens, x = _masked_logits(logits_ptr, bitmask_ptr, row, mask_row, start, vocab_size, num_words,
                                   stride_logits_row, stride_mask_row, HAS_BITMASK, BLOCK_V)
        chunk_max = tl.max(x, axis=0)
        best_id = tl.where(chunk_max > best_x, start + tl.argmax(x, axis=0), best_id)
        best_x = tl.maximum(best_x, chunk_max)
        new_max = tl.maximum(run_max, chunk_max)
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)  # all -inf so far: avoid NaN
        run_sum = run_sum * tl.exp(run_max - shift) + tl.sum(tl.exp(x - shift), axis=0)
        run_max = new_max
        # noise is at most GUMBEL_MAX: skip chunks where no token can beat the best so far
        if draw_now & (chunk_max * inv_temp + GUMBEL_MAX >= best_score):
            score = x * inv_temp + _gumbel(seed, offset, start, BLOCK_V)
            chunk_best = tl.max(score, axis=0)
            at = tl.argmax(score, axis=0)
            take = chunk_best > best_score
            draw_id = tl.where(take, start + at, draw_id)
            draw_x = tl.where(take, tl.max(tl.where(tokens == start + at, x, float("-inf")), axis=0), draw_x)
            best_score = tl.maximum(best_score, chunk_best)
    return best_x, best_id, run_max, run_sum, best_score, draw_id, draw_x


@jit
def _merge_scans(part_f_ptr, part_i_ptr, row, NUM_SPLITS: tl.constexpr):
    """Combine the splits' pass-1 results in token order (earlier split wins ties, as one pass)."""
    best_x = tl.full([], float("-inf"), tl.float32)
    best_id = tl.full([], 0, tl.int32)
    run_max = tl.full([], float("-inf"), tl.float32)
    run_sum = tl.full([], 0.0, tl.float32)
    best_score = tl.full([], float("-inf"), tl.float32)
    draw_id = tl.full([], 0, tl.int32)
    draw_x = tl.full([], float("-inf"), tl.float32)
    for split in range(0, NUM_SPLITS):
        f = part_f_ptr + (row * NUM_SPLITS + split) * 5  # best_x, run_max, run_sum, best_score, draw_x
        i = part_i_ptr + (row * NUM_SPLITS + split) * 2  # best_id, draw_id
        split_x = tl.load(f)
        best_id = tl.where(split_x > best_x, tl.load(i), best_id)
        best_x = tl.maximum(best_x, split_x)
        split_max = tl.load(f + 1)
        new_max = tl.maximum(run_max, split_max)
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)
        run_sum = run_sum * tl.exp(run_max - shift) + tl.load(f + 2) * tl.exp(split_max - shift)
        run_max = new_max
        split_score = tl.load(f + 3)
        take = split_score > best_score
        draw_id = tl.where(take, tl.load(i + 1), draw_id)
        draw_x = tl.where(take, tl.load(f + 4), draw_x)
        best_score = tl.maximum(best_score, split_score)
    return best_x, best_id, run_max, run_sum, best_score, draw_id, draw_x


@jit
def _scan_split_kernel(
    logits_ptr,  # [B, V] fp32/bf16/fp16
    bitmask_ptr,  # [rows, num_words] int32
    bitmask_rows_ptr,  # [B] int32, -1 = unconstrained
    temperature_ptr, top_k_ptr, top_p_ptr, min_p_ptr, seeds_ptr, offsets_ptr,  # [B] each
    part_f_ptr,  # [B, NUM_SPLITS, 5] f32 out
    part_i_ptr,  # [B, NUM_SPLITS, 2] int32 out
    vocab_size, num_words, split_len, stride_logits_row, stride_mask_row,
    HAS_BITMASK: tl.constexpr, NUM_SPLITS: tl.constexpr, BLOCK_V: tl.constexpr, GUMBEL_MAX: tl.constexpr,
):
    """Pass 1 of small batches, split over the vocabulary: program (row, split) scans one range."""
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    mask_row, inv_temp, sampling, k_on, p_on, m_on, _, _, _ = _row_params(
        bitmask_rows_ptr, temperature_ptr, top_k_ptr, top_p_ptr, min_p_ptr, row, vocab_size, HAS_BITMASK)
    draw_now = sampling & ~(k_on | p_on | m_on)
    lo = split * split_len  # split_len is a multiple of BLOCK_V
    best_x, best_id, run_max, run_sum, best_score, draw_id, draw_x = _scan(
        logits_ptr, bitmask_ptr, row, mask_row, lo, tl.minimum(lo + split_len, vocab_size), vocab_size,
        num_words, stride_logits_row, stride_mask_row, inv_temp, tl.load(seeds_ptr + row),
        tl.load(offsets_ptr + row), draw_now, HAS_BITMASK, BLOCK_V, GUMBEL_MAX)
    f = part_f_ptr + (row * NUM_SPLITS + split) * 5
    i = part_i_ptr + (row * NUM_SPLITS + split) * 2
    tl.store(f, best_x)
    tl.store(f + 1, run_max)
    tl.store(f + 2, run_sum)
    tl.store(f + 3, best_score)
    tl.store(f + 4, draw_x)
    tl.store(i, best_id)
    tl.store(i + 1, draw_id)


@jit
def _store_top_logprobs(
    logits_ptr, bitmask_ptr, row, mask_row, vocab_size, num_words, stride_logits_row, stride_mask_row, lse,
    top_ids_ptr, top_logprobs_ptr, stride_top_row, num_logprobs, HAS_BITMASK: tl.constexpr, BLOCK_V: tl.constexpr,
):
    """Top-n logprobs: n passes, each taking the next largest (key(x), -id) packed in one int64."""
    low_bits = tl.full([], 0xFFFFFFFF, tl.int64)
    prev = tl.full([], 2**63 - 1, tl.int64)
    for j in range(0, num_logprobs):
        best = tl.full([], -(2**63), tl.int64)
        for start in range(0, vocab_size, BLOCK_V):
            tokens, x = _masked_logits(logits_ptr, bitmask_ptr, row, mask_row, start, vocab_size, num_words,
                                       stride_logits_row, stride_mask_row, HAS_BITMASK, BLOCK_V)
            packed = (_order_key(x).to(tl.int64) << 32) | (low_bits - tokens.to(tl.int64))
            eligible = (packed < prev) & (tokens < vocab_size)
            best = tl.maximum(best, tl.max(tl.where(eligible, packed, -(2**63)), axis=0))
        prev = best
        value = _key_to_float((best >> 32).to(tl.int32))
        tl.store(top_ids_ptr + row * stride_top_row + j, low_bits - (best & low_bits))
        tl.store(top_logprobs_ptr + row * stride_top_row + j,
                 tl.where(value == float("-inf"), float("-inf"), value - lse))


@jit
def _fused_sample_kernel(
    logits_ptr,  # [B, V] fp32/bf16/fp16
    bitmask_ptr,  # [rows, num_words] int32
    bitmask_rows_ptr,  # [B] int32, -1 = unconstrained
    temperature_ptr,  # [B] f32
    top_k_ptr,  # [B] int32
    top_p_ptr,  # [B] f32
    min_p_ptr,  # [B] f32
    seeds_ptr,  # [B] int64
    offsets_ptr,  # [B] int64
    part_f_ptr,  # NUM_SPLITS > 1: [B, NUM_SPLITS, 5] f32 from _scan_split_kernel
    part_i_ptr,  # NUM_SPLITS > 1: [B, NUM_SPLITS, 2] int32
    token_ids_ptr,  # [B] int64 out
    logprobs_ptr,  # [B] f32 out
    top_ids_ptr,  # [B, num_logprobs] int64 out
    top_logprobs_ptr,  # [B, num_logprobs] f32 out
    vocab_size,
    num_words,
    num_logprobs,
    stride_logits_row,
    stride_mask_row,
    stride_top_row,
    HAS_BITMASK: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    NUM_PIVOTS: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_SEARCH: tl.constexpr,
    GUMBEL_MAX: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    mask_row, inv_temp, sampling, k_on, p_on, m_on, top_k, top_p, min_p = _row_params(
        bitmask_rows_ptr, temperature_ptr, top_k_ptr, top_p_ptr, min_p_ptr, row, vocab_size, HAS_BITMASK)
    seed = tl.load(seeds_ptr + row)
    offset = tl.load(offsets_ptr + row)
    filtered = sampling & (k_on | p_on | m_on)
    if NUM_SPLITS == 1:  # pass 1 here; unfiltered rows draw in it
        best_x, best_id, run_max, run_sum, best_score, draw_id, draw_x = _scan(
            logits_ptr, bitmask_ptr, row, mask_row, 0, vocab_size, vocab_size, num_words, stride_logits_row,
            stride_mask_row, inv_temp, seed, offset, sampling & ~filtered, HAS_BITMASK, BLOCK_V, GUMBEL_MAX)
    else:
        best_x, best_id, run_max, run_sum, best_score, draw_id, draw_x = _merge_scans(
            part_f_ptr, part_i_ptr, row, NUM_SPLITS)
    # log-softmax shift; 0 for a fully masked row, whose logprobs are all -inf
    lse = tl.where(run_max == float("-inf"), 0.0, run_max + tl.log(tl.maximum(run_sum, 1e-30)))
    if filtered:
        draw_id, draw_x = _filtered_draw(
            logits_ptr, bitmask_ptr, row, mask_row, vocab_size, num_words, stride_logits_row, stride_mask_row,
            inv_temp, seed, offset, best_x, k_on, p_on, m_on, top_k, top_p, min_p, HAS_BITMASK, NUM_PIVOTS,
            BLOCK_V, BLOCK_SEARCH, GUMBEL_MAX)
    token = tl.where(sampling, draw_id, best_id)
    token_x = tl.where(sampling, draw_x, best_x)
    tl.store(token_ids_ptr + row, token.to(tl.int64))
    tl.store(logprobs_ptr + row, tl.where(token_x == float("-inf"), float("-inf"), token_x - lse))
    _store_top_logprobs(logits_ptr, bitmask_ptr, row, mask_row, vocab_size, num_words, stride_logits_row,
                        stride_mask_row, lse, top_ids_ptr, top_logprobs_ptr, stride_top_row, num_logprobs,
                        HAS_BITMASK, BLOCK_V)


# ----------------------------------------------------------------------------- reference


def _masked_logits_ref(logits, bitmask, bitmask_rows) -> torch.Tensor:
    x = logits.float()  # [B, V] (a copy only when logits are not fp32)
    if bitmask is None:
        return x
    if bitmask.shape[0] == 0:
        bitmask = torch.full((1, bitmask.shape[1]), -1, dtype=torch.int32, device=bitmask.device)
    allowed = unpack_bitmask(bitmask, x.shape[1])[bitmask_rows.long().clamp(min=0)]  # [B, V]
    allowed |= (bitmask_rows < 0)[:, None]
    return x.masked_fill(~allowed, float("-inf"))


def _threshold_ref(z, top_k, top_p, min_p) -> torch.Tensor:
    """Per-row lowest kept value of ``z`` [B, V] after top-k, top-p and min-p (module docstring)."""
    vocab_size = z.shape[1]
    sorted_z = z.sort(dim=1, descending=True).values  # [B, V]
    zmax = sorted_z[:, 0]
    neg_inf = torch.full_like(zmax, float("-inf"))
    shift = torch.where(zmax == float("-inf"), 0.0, zmax)  # fully masked row: masses 0, not NaN
    k_on = (top_k > 0) & (top_k < vocab_size)
    kth = sorted_z.gather(1, (top_k.long().clamp(1, vocab_size) - 1)[:, None]).squeeze(1)
    t_k = torch.where(k_on, kth, neg_inf)
    # top-p over the top-k survivors, fp32 exp summed in fp64 in descending order
    w = torch.exp(sorted_z - shift[:, None]).double()
    w = torch.where(sorted_z >= t_k[:, None], w, 0.0)
    cum = w.cumsum(dim=1)
    first = (cum < (top_p.double() * cum[:, -1])[:, None]).sum(dim=1).clamp(max=vocab_size - 1)
    t_p = torch.where(top_p < 1.0, sorted_z.gather(1, first[:, None]).squeeze(1), neg_inf)
    t_m = torch.where(min_p > 0.0, zmax + torch.log(min_p), neg_inf)
    return torch.minimum(torch.maximum(torch.maximum(t_k, t_p), t_m), zmax)


def fused_sample_ref(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    min_p: torch.Tensor,
    seeds: torch.Tensor,
    offsets: torch.Tensor,
    bitmask: torch.Tensor | None = None,
    bitmask_rows: torch.Tensor | None = None,
    num_logprobs: int = 0,
    return_logprob: bool = False,
) -> SampleOutput:
    """Pure-torch reference of :func:`fused_sample` (same arguments, same tokens)."""
    bitmask_rows = _check(logits, temperature, top_k, top_p, min_p, seeds, offsets, bitmask, bitmask_rows,
                          num_logprobs)
    x = _masked_logits_ref(logits, bitmask, bitmask_rows)  # [B, V] fp32
    sampling = temperature > 0
    z = x * (1.0 / torch.where(sampling, temperature, 1.0))[:, None]
    keep = z >= _threshold_ref(z, top_k, top_p, min_p)[:, None]
    drawn = torch.where(keep, z + gumbel_ref(seeds, offsets, x.shape[1]), float("-inf")).argmax(dim=1)
    token_ids = torch.where(sampling, drawn, x.argmax(dim=1))
    logprobs = torch.where(x == float("-inf"), float("-inf"), x - torch.logsumexp(x, dim=1, keepdim=True))
    out = SampleOutput(token_ids)
    if return_logprob:
        out = out._replace(logprobs=logprobs.gather(1, token_ids[:, None]).squeeze(1))
    if num_logprobs:
        top = logprobs.sort(dim=1, descending=True, stable=True)
        out = out._replace(top_ids=top.indices[:, :num_logprobs].contiguous(),
                           top_logprobs=top.values[:, :num_logprobs].contiguous())
    return out


# ----------------------------------------------------------------------------- wrapper


def fused_sample(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    min_p: torch.Tensor,
    seeds: torch.Tensor,
    offsets: torch.Tensor,
    bitmask: torch.Tensor | None = None,
    bitmask_rows: torch.Tensor | None = None,
    num_logprobs: int = 0,
    return_logprob: bool = False,
) -> SampleOutput:
    """Mask, filter and sample one token per row in one kernel, without a host sync.

    See the module docstring for the exact semantics (filter order, ties, RNG).

    Parameters
    ----------
    logits : torch.Tensor
        fp32/bf16/fp16 ``[B, V]``, contiguous rows; not modified.
    temperature : torch.Tensor
        f32 ``[B]``; ``<= 0`` = greedy.
    top_k : torch.Tensor
        int32 ``[B]``; ``<= 0`` or ``>= V`` = off.
    top_p : torch.Tensor
        f32 ``[B]``; ``>= 1`` = off.
    min_p : torch.Tensor
        f32 ``[B]``; ``<= 0`` = off.
    seeds, offsets : torch.Tensor
        int64 ``[B]``: the row's seed and step counter; equal inputs give equal tokens.
    bitmask : torch.Tensor, optional
        int32 ``[rows, words]`` allowed-token bitmask (layout of ``apply_token_bitmask_``).
    bitmask_rows : torch.Tensor, optional
        int32 ``[B]``: bitmask row of each logits row, ``-1`` = unconstrained. Defaults to row
        ``b`` for logits row ``b`` (then ``rows >= B``). Not bounds-checked on the GPU.
    num_logprobs : int
        How many top logprobs per row to return (0 = none).
    return_logprob : bool
        Also return the chosen token's logprob.

    Returns
    -------
    SampleOutput
        Token ids and the requested logprobs (log-softmax of the masked logits at temperature 1).
    """
    bitmask_rows = _check(logits, temperature, top_k, top_p, min_p, seeds, offsets, bitmask, bitmask_rows,
                          num_logprobs)
    if not use_triton(logits, _fused_sample_kernel):
        return fused_sample_ref(logits, temperature, top_k, top_p, min_p, seeds, offsets, bitmask,
                                bitmask_rows, num_logprobs, return_logprob)
    batch, vocab_size = logits.shape
    device = logits.device
    token_ids = torch.empty(batch, dtype=torch.int64, device=device)
    logprobs = torch.empty(batch, dtype=torch.float32, device=device)
    # at least one column so the kernel never receives an empty (null) buffer
    top_ids = torch.empty(batch, max(1, num_logprobs), dtype=torch.int64, device=device)
    top_logprobs = torch.empty(batch, max(1, num_logprobs), dtype=torch.float32, device=device)
    if batch:
        has_bitmask = bitmask is not None
        row_args = (logits, bitmask if has_bitmask else logits, bitmask_rows if has_bitmask else token_ids,
                    temperature, top_k, top_p, min_p, seeds, offsets)
        num_words, stride_mask = (bitmask.shape[1], bitmask.stride(0)) if has_bitmask else (0, 0)
        splits = _num_splits(batch, vocab_size, device)
        split_len = _cdiv(_cdiv(vocab_size, splits), BLOCK_V) * BLOCK_V
        part_f = torch.empty(batch, splits, 5, dtype=torch.float32, device=device) if splits > 1 else logprobs
        part_i = torch.empty(batch, splits, 2, dtype=torch.int32, device=device) if splits > 1 else token_ids
        common = dict(HAS_BITMASK=has_bitmask, BLOCK_V=BLOCK_V, GUMBEL_MAX=GUMBEL_MAX, num_warps=8,
                      enable_fp_fusion=False)  # no FMA contraction: elementwise math rounds as the reference's
        if splits > 1:
            _scan_split_kernel[(batch, splits)](
                *row_args, part_f, part_i, vocab_size, num_words, split_len, logits.stride(0), stride_mask,
                NUM_SPLITS=splits, **common,
            )
        _fused_sample_kernel[(batch,)](
            *row_args, part_f, part_i, token_ids, logprobs, top_ids, top_logprobs,
            vocab_size, num_words, num_logprobs, logits.stride(0), stride_mask, top_ids.stride(0),
            NUM_SPLITS=splits, NUM_PIVOTS=NUM_PIVOTS, BLOCK_SEARCH=BLOCK_SEARCH, **common,
        )
    return SampleOutput(
        token_ids,
        logprobs if return_logprob else None,
        top_ids[:, :num_logprobs] if num_logprobs else None,
        top_logprobs[:, :num_logprobs] if num_logprobs else None,
    )


def _num_splits(batch: int, vocab_size: int, device: torch.device) -> int:
    """Vocabulary splits of pass 1 so a small batch still fills the GPU (shapes only: no sync).

    Under the CPU interpreter a small target still exercises the split path in tests.
    """
    if device.type == "cuda":
        target, min_chunks = 2 * _sm_count(device), 4
    else:
        target, min_chunks = 32, 1
    if batch >= target:
        return 1
    return power_of_2_at_most(max(1, min(_cdiv(target, batch), _cdiv(vocab_size, BLOCK_V * min_chunks), MAX_SPLITS)))


@functools.cache
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def _check(logits, temperature, top_k, top_p, min_p, seeds, offsets, bitmask, bitmask_rows, num_logprobs):
    """Validate the arguments; return ``bitmask_rows`` (defaulted when a bitmask has none)."""
    if logits.dtype not in LOGIT_DTYPES:
        raise TypeError(f"logits must be float32, bfloat16 or float16, got {logits.dtype}")
    if logits.dim() != 2 or (logits.numel() and logits.stride(1) != 1):
        raise ConfigError(f"logits must be 2-D [batch, vocab] with contiguous rows, got {tuple(logits.shape)}")
    batch, vocab_size = logits.shape
    params = (("temperature", temperature, torch.float32), ("top_k", top_k, torch.int32),
              ("top_p", top_p, torch.float32), ("min_p", min_p, torch.float32),
              ("seeds", seeds, torch.int64), ("offsets", offsets, torch.int64))
    for name, t, dtype in params:
        if t.dtype != dtype or t.shape != (batch,):
            raise ConfigError(f"{name} must be {dtype} [{batch}], got {t.dtype} {tuple(t.shape)}")
        if t.device != logits.device:
            raise ConfigError(f"{name} is on {t.device} but logits are on {logits.device}")
    if not 0 <= num_logprobs <= vocab_size:
        raise ConfigError(f"num_logprobs must be in [0, {vocab_size}], got {num_logprobs}")
    if bitmask is None:
        if bitmask_rows is not None:
            raise ConfigError("bitmask_rows given without a bitmask")
        return None
    if bitmask.dtype != torch.int32 or bitmask.dim() != 2 or bitmask.stride(-1) != 1:
        raise ConfigError(f"bitmask must be int32 [rows, words] with contiguous rows, got {bitmask.dtype} "
                          f"{tuple(bitmask.shape)}")
    if bitmask.device != logits.device:
        raise ConfigError(f"bitmask is on {bitmask.device} but logits are on {logits.device}")
    if bitmask_rows is None:
        if bitmask.shape[0] < batch:
            raise ConfigError(f"bitmask has {bitmask.shape[0]} rows for batch {batch}; pass bitmask_rows")
        return torch.arange(batch, dtype=torch.int32, device=logits.device)
    if bitmask_rows.dtype != torch.int32 or bitmask_rows.shape != (batch,):
        raise ConfigError(f"bitmask_rows must be int32 [{batch}], got {bitmask_rows.dtype} "
                          f"{tuple(bitmask_rows.shape)}")
    if bitmask_rows.device != logits.device:
        raise ConfigError(f"bitmask_rows is on {bitmask_rows.device} but logits are on {logits.device}")
    return bitmask_rows
