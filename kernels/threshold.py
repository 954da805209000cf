"""Sort-free top-k / top-p / min-p filtering of one logits row, and the draw above the threshold.

Triton device functions of the fused sampling kernel. A threshold is an *order key*: the float's
bits mapped to an int32 whose signed order is the float order, so "the k-th largest value" and
"the largest value whose mass above reaches p" become searches over integers, answered exactly
with a few passes over the row and no sort.
"""

from __future__ import annotations

from ._triton import jit, tl
from .gumbel import _gumbel

__all__: list[str] = []


@jit
def _masked_logits(
    logits_ptr, bitmask_ptr, row, mask_row, start, vocab_size, num_words, stride_logits_row,
    stride_mask_row, HAS_BITMASK: tl.constexpr, BLOCK: tl.constexpr,
):
    """Tokens ``start + [0, BLOCK)`` and their fp32 logits, -inf where masked or past the row."""
    tokens = start + tl.arange(0, BLOCK)  # [BLOCK]
    in_vocab = tokens < vocab_size
    x = tl.load(logits_ptr + row * stride_logits_row + tokens, mask=in_vocab, other=float("-inf"))
    x = x.to(tl.float32)
    if HAS_BITMASK:
        # token j is bit (j & 31) of word (j >> 5); mask_row -1 = unconstrained
        word_idx = tokens >> 5
        word_ok = in_vocab & (word_idx < num_words) & (mask_row >= 0)
        words = tl.load(bitmask_ptr + mask_row * stride_mask_row + word_idx, mask=word_ok, other=0)
        allowed = (((words >> (tokens & 31)) & 1) != 0) | (mask_row < 0)
        x = tl.where(allowed, x, float("-inf"))
    return tokens, x


@jit
def _order_key(z):
    """int32 whose signed order is ``z``'s float order (negatives flipped; -0.0 folded onto 0)."""
    bits = z.to(tl.int32, bitcast=True)
    key = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    return tl.where(key == -1, 0, key)


@jit
def _key_to_float(key):
    """Inverse of ``_order_key`` (the flip is an involution)."""
    bits = key ^ ((key >> 31) & 0x7FFFFFFF)
    return bits.to(tl.float32, bitcast=True)


@jit
def _mass_above(
    logits_ptr, bitmask_ptr, row, mask_row, vocab_size, num_words, stride_logits_row, stride_mask_row,
    inv_temp, zmax, threshold, HAS_BITMASK: tl.constexpr, BLOCK: tl.constexpr,
):
    """fp64 sum of ``exp(z - zmax)`` over the tokens whose order key is ``>= threshold``."""
    total = tl.zeros([BLOCK], tl.float64)
    for start in range(0, vocab_size, BLOCK):
        tokens, x = _masked_logits(logits_ptr, bitmask_ptr, row, mask_row, start, vocab_size, num_words,
                                   stride_logits_row, stride_mask_row, HAS_BITMASK, BLOCK)
        z = x * inv_temp
        w = tl.exp(z - zmax).to(tl.float64)
        total += tl.where((_order_key(z) >= threshold) & (tokens < vocab_size), w, 0.0)
    return tl.sum(total, axis=0)


@jit
def _search_threshold(
    logits_ptr, bitmask_ptr, row, mask_row, vocab_size, num_words, stride_logits_row, stride_mask_row,
    inv_temp, zmax, lo, hi, target, USE_MASS: tl.constexpr, HAS_BITMASK: tl.constexpr,
    NUM_PIVOTS: tl.constexpr, BLOCK: tl.constexpr,
):
    """Largest order key K in [lo, hi) with f(K) >= target, where f(K) is the count (or the
    exp-mass, if USE_MASS) of tokens with key >= K. f is non-increasing; needs f(lo) >= target.

    Each pass tests NUM_PIVOTS keys spread over (lo, hi) and keeps the bracket around the answer,
    so the 2^32 keys take ceil(32 / log2(NUM_PIVOTS + 1)) = 8 passes.
    """
    steps = tl.arange(0, NUM_PIVOTS).to(tl.int64) + 1  # [P]
    while hi - lo > 1:
        # lo < pivots < hi for the last pivot; with hi - lo <= P + 1 they cover every key between
        pivots = lo + (hi - lo) * steps // (NUM_PIVOTS + 1)  # [P]
        pivots32 = pivots.to(tl.int32)  # lo >= INT32_MIN and hi <= key(+inf) + 1: exact
        f = tl.zeros([NUM_PIVOTS], tl.float64)
        for start in range(0, vocab_size, BLOCK):
            tokens, x = _masked_logits(logits_ptr, bitmask_ptr, row, mask_row, start, vocab_size,
                                       num_words, stride_logits_row, stride_mask_row, HAS_BITMASK, BLOCK)
            z = x * inv_temp
            above = (_order_key(z)[:, None] >= pivots32[None, :]) & (tokens < vocab_size)[:, None]  # [BLOCK, P]
            if USE_MASS:
                w = tl.exp(z - zmax).to(tl.float64)
                f += tl.sum(tl.where(above, w[:, None], 0.0), axis=0)
            else:  # counts: integer sums
                f += tl.sum(above.to(tl.int32), axis=0).to(tl.float64)
        ok = f >= target  # a prefix of the pivots, since f is non-increasing
        lo = tl.max(tl.where(ok, pivots, lo), axis=0)
        hi = tl.min(tl.where(ok, hi, pivots), axis=0)
    return lo


@jit
def _gumbel_argmax(
    logits_ptr, bitmask_ptr, row, mask_row, vocab_size, num_words, stride_logits_row, stride_mask_row,
    inv_temp, seed, offset, threshold, HAS_BITMASK: tl.constexpr, BLOCK: tl.constexpr,
    GUMBEL_MAX: tl.constexpr,
):
    """argmax of ``z + gumbel`` over the tokens whose order key is ``>= threshold``."""
    best = tl.full([], float("-inf"), tl.float32)
    best_id = tl.full([], 0, tl.int32)
    for start in range(0, vocab_size, BLOCK):
        tokens, x = _masked_logits(logits_ptr, bitmask_ptr, row, mask_row, start, vocab_size, num_words,
                                   stride_logits_row, stride_mask_row, HAS_BITMASK, BLOCK)
        z = tl.where(_order_key(x * inv_temp) >= threshold, x * inv_temp, float("-inf"))
        # noise is at most GUMBEL_MAX: skip chunks where no token can beat the best so far
        if tl.max(z, axis=0) + GUMBEL_MAX >= best:
            score = z + _gumbel(seed, offset, start, BLOCK)
            chunk_best = tl.max(score, axis=0)
            best_id = tl.where(chunk_best > best, start + tl.argmax(score, axis=0), best_id)
            best = tl.maximum(best, chunk_best)
    return best_id


@jit
def _filtered_draw(
    logits_ptr, bitmask_ptr, row, mask_row, vocab_size, num_words, stride_logits_row, stride_mask_row,
    inv_temp, seed, offset, best_x, k_on, p_on, m_on, top_k, top_p, min_p, HAS_BITMASK: tl.constexpr,
    NUM_PIVOTS: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_SEARCH: tl.constexpr, GUMBEL_MAX: tl.constexpr,
):
    """Thresholds of top-k, then top-p, then min-p (order keys), and the draw above them."""
    zmax = best_x * inv_temp
    key_max = _order_key(zmax).to(tl.int64)
    zmax = tl.where(zmax == float("-inf"), 0.0, zmax)  # fully masked row: masses 0, not NaN
    threshold = tl.full([], -(2**31), tl.int64)  # every token
    if k_on:
        threshold = _search_threshold(logits_ptr, bitmask_ptr, row, mask_row, vocab_size, num_words,
                                      stride_logits_row, stride_mask_row, inv_temp, zmax, threshold, key_max + 1,
                                      top_k.to(tl.float64), False, HAS_BITMASK, NUM_PIVOTS, BLOCK_SEARCH)
    if p_on:
        kept = _mass_above(logits_ptr, bitmask_ptr, row, mask_row, vocab_size, num_words, stride_logits_row,
                           stride_mask_row, inv_temp, zmax, threshold, HAS_BITMASK, BLOCK_V)
        threshold = _search_threshold(logits_ptr, bitmask_ptr, row, mask_row, vocab_size, num_words,
                                      stride_logits_row, stride_mask_row, inv_temp, zmax, threshold, key_max + 1,
                                      top_p.to(tl.float64) * kept, True, HAS_BITMASK, NUM_PIVOTS, BLOCK_SEARCH)
    if m_on:
        threshold = tl.maximum(threshold, _order_key(zmax + tl.log(min_p)).to(tl.int64))
    threshold = tl.minimum(threshold, key_max)  # the most likely token is always kept
    draw_id = _gumbel_argmax(logits_ptr, bitmask_ptr, row, mask_row, vocab_size, num_words, stride_logits_row,
                             stride_mask_row, inv_temp, seed, offset, threshold, HAS_BITMASK, BLOCK_V, GUMBEL_MAX)
    _, x_at = _masked_logits(logits_ptr, bitmask_ptr, row, mask_row, draw_id, vocab_size, num_words,
                             stride_logits_row, stride_mask_row, HAS_BITMASK, 2)
    return draw_id, tl.max(tl.where(tl.arange(0, 2) == 0, x_at, float("-inf")), axis=0)
