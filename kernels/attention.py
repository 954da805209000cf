"""Causal attention of packed query tokens over a paged KV cache: decode, prefill, extend, mixed.

Query token ``t`` of sequence ``i`` sits at position ``seq_lens[i] - q_len_i + t`` and attends to
cache positions ``0 ..= that position`` (with a sliding ``window``: the last ``window`` of them); its own K/V (and its chunk's) were written by ``store_kv``
beforehand. One launch serves any mix of decode rows (``q_len = 1``) and prefill/extend chunks
(prefix caching, chunked prefill, forced-token fast-forward).

Kernel layout: one program per (tile of ``BLOCK_Q`` query tokens of one sequence, KV head). The
tile's rows pack every query head that shares the KV head (GQA), so each K/V block is loaded once
per tile: row ``r`` is query token ``r // QUERIES_PER_KV`` and head ``r % QUERIES_PER_KV`` of the
group. Tiles are numbered per sequence as ``cu_seqlens_q[i] // BLOCK_Q + i + tile``, an upper
bound that needs no host sync; a program finds its sequence by binary search over ``cu_seqlens_q``.
Pure-decode batches too small to fill the GPU also split each sequence's keys into ranges
(flash-decoding): a third grid axis writes unnormalised partials and a second kernel merges them.
"""

from __future__ import annotations

import functools

import torch

from guided.errors import ConfigError

from ._triton import jit, next_power_of_2, power_of_2_at_most, tl, use_triton

__all__ = ["paged_attention", "paged_attention_ref"]

ATTN_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MAX_SPLITS = 64
LOG2E = 1.4426950408889634


@jit
def _paged_attention_kernel(
    q_ptr,  # [total_q, num_heads, head_dim]
    k_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim]
    out_ptr,  # [total_q, num_heads, head_dim]
    part_ptr,  # SPLIT_K: [total_q, num_heads, NUM_SPLITS, head_dim + 2] f32 (acc, m, l)
    block_tables_ptr,  # [num_seqs, max_blocks] int32
    cu_seqlens_q_ptr,  # [num_seqs + 1] int32
    seq_lens_ptr,  # [num_seqs] int32
    num_seqs,
    head_dim,
    block_size,
    scale_log2,  # softmax scale * log2(e): the kernel works in base 2
    stride_qt,
    stride_qh,
    stride_ot,
    stride_oh,
    stride_cache_b,
    stride_cache_s,
    stride_cache_h,
    stride_bt,
    num_heads,
    split_len,  # SPLIT_K: keys per split, a multiple of BLOCK_N
    window,  # sliding window: a query at p sees keys p - window < k <= p (0: all keys up to p)
    sinks_ptr,  # HAS_SINKS: [num_heads] f32, each head's sink logit (unscaled)
    QUERIES_PER_KV: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    DOT_PRECISION: tl.constexpr,  # "ieee" for fp32 inputs (no silent tf32), unused for 16-bit
    UPCAST: tl.constexpr,  # bf16 under the CPU interpreter only
    SPLIT_K: tl.constexpr,  # flash-decoding: program_id(2) takes one key range, partials to part_ptr
    NUM_SPLITS: tl.constexpr,
    HAS_SINKS: tl.constexpr,  # attention sinks (gpt-oss): a logit per head in the softmax's sum, with no value
):
    tile_id = tl.program_id(0)
    kv_head = tl.program_id(1)
    # binary search: the last sequence whose first tile id cu[i] // BLOCK_Q + i is <= tile_id
    lo = tl.full([], 0, tl.int32)
    hi = tl.full([], 0, tl.int32) + num_seqs
    while lo < hi:
        mid = (lo + hi) // 2
        first_tile = tl.load(cu_seqlens_q_ptr + mid) // BLOCK_Q + mid
        if first_tile <= tile_id:
            lo = mid + 1
        else:
            hi = mid
    seq = lo - 1
    q_start = tl.load(cu_seqlens_q_ptr + seq)
    q_len = tl.load(cu_seqlens_q_ptr + seq + 1) - q_start
    tile = tile_id - (q_start // BLOCK_Q + seq)
    context_len = tl.load(seq_lens_ptr + seq)
    prefix_len = context_len - q_len  # cached positions before this chunk's first query token

    rows = tl.arange(0, BLOCK_M)  # [BLOCK_M]: (query token, head in group) pairs
    q_tok = tile * BLOCK_Q + rows // QUERIES_PER_KV  # token index within the sequence's chunk
    head = kv_head * QUERIES_PER_KV + rows % QUERIES_PER_KV
    row_ok = (rows < BLOCK_Q * QUERIES_PER_KV) & (q_tok < q_len)
    q_pos = prefix_len + q_tok  # [BLOCK_M] absolute position: attends to keys 0..=q_pos
    dims = tl.arange(0, BLOCK_D)
    dim_ok = dims < head_dim

    q_rows = (q_start + q_tok).to(tl.int64)
    q_ptrs = q_ptr + q_rows[:, None] * stride_qt + head[:, None] * stride_qh + dims[None, :]
    q = tl.load(q_ptrs, mask=row_ok[:, None] & dim_ok[None, :], other=0.0)  # [BLOCK_M, BLOCK_D]
    if UPCAST:  # Triton's CPU interpreter cannot multiply bf16 tiles; fp32 gives the same products
        q = q.to(tl.float32)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max (base-2 logits)
    l_i = tl.zeros([BLOCK_M], tl.float32)  # running sum of exp2
    if HAS_SINKS:  # the sink starts the running softmax (in one key range only: the merge adds them)
        sink = tl.load(sinks_ptr + head, mask=row_ok, other=0.0).to(tl.float32) * 1.4426950408889634
        if SPLIT_K:
            first = tl.program_id(2) == 0
            m_i = tl.where(first, sink, m_i)
            l_i = tl.where(first, 1.0, l_i)
        else:
            m_i = sink
            l_i = l_i + 1.0
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    # keys past the tile's last query position are never needed (0 if the tile is empty)
    kv_end = tl.minimum(context_len, prefix_len + (tile + 1) * BLOCK_Q)
    kv_end = tl.where(tile * BLOCK_Q < q_len, kv_end, 0)
    kv_start = 0
    if SPLIT_K:
        kv_start = tl.program_id(2) * split_len
        kv_end = tl.minimum(kv_end, kv_start + split_len)
    # keys before the tile's first query position's window are never needed (whole BLOCK_N steps)
    window_start = tl.maximum(prefix_len + tile * BLOCK_Q - window + 1, 0) // BLOCK_N * BLOCK_N
    kv_start = tl.maximum(kv_start, tl.where(window > 0, window_start, 0))
    lowest = tl.where(window > 0, q_pos - window, -1)  # [BLOCK_M]: keys at or below it are outside the window
    for start in range(kv_start, kv_end, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)  # [BLOCK_N] absolute key positions
        key_ok = keys < kv_end
        # position -> (block table entry, offset in block); holes past context_len are never read
        block_ids = tl.load(block_tables_ptr + seq * stride_bt + keys // block_size, mask=key_ok, other=0)
        kv_offs = (
            block_ids.to(tl.int64)[:, None] * stride_cache_b
            + (keys % block_size)[:, None] * stride_cache_s
            + kv_head * stride_cache_h
            + dims[None, :]
        )  # [BLOCK_N, BLOCK_D]
        kv_mask = key_ok[:, None] & dim_ok[None, :]
        k = tl.load(k_cache_ptr + kv_offs, mask=kv_mask, other=0.0)
        v = tl.load(v_cache_ptr + kv_offs, mask=kv_mask, other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)

        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale_log2  # [BLOCK_M, BLOCK_N] fp32
        causal = (keys[None, :] <= q_pos[:, None]) & (keys[None, :] > lowest[:, None]) & key_ok[None, :]
        s = tl.where(causal, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        # rows with nothing visible yet keep m = -inf; shift by 0 so exp2 gives 0, not NaN
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION).to(tl.float32)
        m_i = m_new

    if SPLIT_K:  # unnormalised partials; _combine_splits_kernel merges the splits
        part = part_ptr + ((q_rows * num_heads + head) * NUM_SPLITS + tl.program_id(2)) * (head_dim + 2)
        tl.store(part[:, None] + dims[None, :], acc, mask=row_ok[:, None] & dim_ok[None, :])
        tl.store(part + head_dim, m_i, mask=row_ok)
        tl.store(part + head_dim + 1, l_i, mask=row_ok)
    else:
        out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
        o_ptrs = out_ptr + q_rows[:, None] * stride_ot + head[:, None] * stride_oh + dims[None, :]
        tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & dim_ok[None, :])


@jit
def _combine_splits_kernel(
    part_ptr,  # [total_q, num_heads, NUM_SPLITS, head_dim + 2] f32 (acc, m, l)
    out_ptr,  # [total_q, num_heads, head_dim]
    num_heads,
    head_dim,
    stride_ot,
    stride_oh,
    NUM_SPLITS: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    splits = tl.arange(0, BLOCK_S)
    dims = tl.arange(0, BLOCK_D)
    split_ok = splits < NUM_SPLITS
    part = part_ptr + ((token * num_heads + head) * NUM_SPLITS + splits) * (head_dim + 2)  # [BLOCK_S]
    m = tl.load(part + head_dim, mask=split_ok, other=float("-inf"))
    sums = tl.load(part + head_dim + 1, mask=split_ok, other=0.0)
    acc = tl.load(part[:, None] + dims[None, :], mask=split_ok[:, None] & (dims < head_dim)[None, :], other=0.0)
    m_all = tl.max(m, axis=0)
    weight = tl.exp2(m - tl.where(m_all == float("-inf"), 0.0, m_all))  # empty splits weigh 0
    num = tl.sum(acc * weight[:, None], axis=0)  # [BLOCK_D]
    den = tl.sum(sums * weight, axis=0)
    out = num / tl.where(den == 0.0, 1.0, den)
    o_ptrs = out_ptr + token * stride_ot + head * stride_oh + dims
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=dims < head_dim)


def paged_attention_ref(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    max_seqlen_q: int | None = None,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Pure-torch reference of :func:`paged_attention`: gathers each sequence's KV, fp32 math."""
    _check(q, k_cache, v_cache, block_tables, cu_seqlens_q, seq_lens)
    out = torch.zeros(q.shape, dtype=q.dtype, device=q.device)
    block_size = k_cache.shape[1]
    group = q.shape[1] // k_cache.shape[2]
    cu = cu_seqlens_q.tolist()
    for i, context_len in enumerate(seq_lens.tolist()):
        q_len = cu[i + 1] - cu[i]
        if q_len == 0:
            continue
        blocks = block_tables[i, : (context_len + block_size - 1) // block_size].long()
        # [context_len, num_kv_heads, head_dim] -> repeat each KV head for its query heads
        k = k_cache[blocks].flatten(0, 1)[:context_len].float().repeat_interleave(group, dim=1)
        v = v_cache[blocks].flatten(0, 1)[:context_len].float().repeat_interleave(group, dim=1)
        qi = q[cu[i] : cu[i + 1]].float()  # [q_len, num_heads, head_dim]
        scores = torch.einsum("qhd,khd->hqk", qi, k) * scale
        q_pos = torch.arange(context_len - q_len, context_len, device=q.device)
        keys = torch.arange(context_len, device=q.device)[None, :]
        visible = keys <= q_pos[:, None]
        if window:
            visible &= keys > q_pos[:, None] - window
        scores = scores.masked_fill(~visible, float("-inf"))
        if sinks is not None:  # a column per head in the softmax, dropped after it (it has no value)
            sink = sinks.float()[:, None, None].expand(-1, q_len, 1)
            probs = torch.cat([scores, sink], dim=-1).softmax(dim=-1)[..., :-1]
        else:
            probs = scores.softmax(dim=-1)
        probs = torch.where(visible.any(dim=-1, keepdim=True), probs, 0.0)  # no visible key: 0, as the kernel
        out[cu[i] : cu[i + 1]] = torch.einsum("hqk,khd->qhd", probs, v).to(q.dtype)
    return out


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    max_seqlen_q: int | None = None,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal attention of packed query tokens over a paged KV cache, in one launch.

    Parameters
    ----------
    q : torch.Tensor
        ``[total_q_tokens, num_heads, head_dim]`` fp32/bf16/fp16, packed by sequence; the last
        dimension contiguous.
    k_cache, v_cache : torch.Tensor
        ``[num_blocks, block_size, num_kv_heads, head_dim]``, same dtype as ``q``, same strides;
        ``num_heads`` must be a multiple of ``num_kv_heads`` (GQA/MQA).
    block_tables : torch.Tensor
        int32 ``[num_seqs, max_blocks]``; entries past a sequence's last used block are ignored.
    cu_seqlens_q : torch.Tensor
        int32 ``[num_seqs + 1]``, prefix sums of the query lengths (``cu[0] = 0``).
    seq_lens : torch.Tensor
        int32 ``[num_seqs]``: context length of each sequence including its new query tokens,
        whose K/V are already in the cache. Must be ``>=`` the sequence's query length.
    scale : float
        Softmax scale, usually ``head_dim ** -0.5``.
    max_seqlen_q : int, optional
        Longest query length in the batch, a tile-size hint only (1 = pure decode). Without it
        the tile size is chosen from the shapes; results do not depend on it.
    window : int, optional
        Sliding-window attention: a query token at position ``p`` sees the keys at ``p - window <
        k <= p`` (Gemma 3's local layers, Mistral). None: every key up to ``p``.
    sinks : torch.Tensor, optional
        ``[num_heads]``: attention sinks (gpt-oss), one logit per head (not scaled by ``scale``)
        that joins each query's softmax as a key with no value, so the weights of the real keys sum
        to less than one.

    Returns
    -------
    torch.Tensor
        ``[total_q_tokens, num_heads, head_dim]`` in ``q``'s dtype (fp32 accumulation).
    """
    _check(q, k_cache, v_cache, block_tables, cu_seqlens_q, seq_lens)
    if window is not None and window < 1:
        raise ConfigError(f"window must be a positive number of keys, got {window}")
    if sinks is not None and (sinks.shape != (q.shape[1],) or sinks.device != q.device):
        raise ConfigError(f"sinks must be [num_heads={q.shape[1]}] on {q.device}, got {tuple(sinks.shape)} on "
                          f"{sinks.device}")  # fmt: skip
    if not use_triton(q, _paged_attention_kernel):
        return paged_attention_ref(q, k_cache, v_cache, block_tables, cu_seqlens_q, seq_lens, scale, window=window,
                                   sinks=sinks)  # fmt: skip
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)  # contiguous whatever q's strides
    total_q, num_heads, head_dim = q.shape
    num_seqs = seq_lens.shape[0]
    if total_q == 0 or num_seqs == 0:
        return out
    group = num_heads // k_cache.shape[2]
    decode_only = max_seqlen_q == 1 if max_seqlen_q is not None else total_q == num_seqs
    # tiles and warps checked with ptxas for sm_90: no spills, cp.async pipelining, wgmma for prefill
    block_m = 16 if decode_only else (64 if head_dim <= 128 else 32)
    block_m = max(block_m, next_power_of_2(group))
    num_warps, num_stages = (4, 3) if decode_only else (8, 2)
    block_q = block_m // group
    upcast = q.dtype == torch.bfloat16 and not q.is_cuda
    num_tiles = total_q // block_q + num_seqs  # >= sum over sequences of ceil(q_len / block_q)
    num_kv_heads = k_cache.shape[2]
    block_n = 64 if head_dim <= 128 else 32
    max_context = block_tables.shape[1] * k_cache.shape[1]  # a bound known without a sync
    splits = _num_kv_splits(num_tiles * num_kv_heads, max_context, block_n, q.device) if decode_only else 1
    split_len = _cdiv(_cdiv(max_context, splits), block_n) * block_n
    part = out
    if splits > 1:
        part = torch.empty(total_q, num_heads, splits, head_dim + 2, dtype=torch.float32, device=q.device)
    _paged_attention_kernel[(num_tiles, num_kv_heads, splits)](
        q,
        k_cache,
        v_cache,
        out,
        part,
        block_tables,
        cu_seqlens_q,
        seq_lens,
        num_seqs,
        head_dim,
        k_cache.shape[1],
        scale * LOG2E,
        q.stride(0),
        q.stride(1),
        out.stride(0),
        out.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        block_tables.stride(0),
        num_heads,
        split_len,
        window or 0,
        sinks if sinks is not None else q,
        QUERIES_PER_KV=group,
        BLOCK_Q=block_q,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_D=max(16, next_power_of_2(head_dim)),
        DOT_PRECISION="ieee" if q.dtype == torch.float32 or upcast else "tf32",
        UPCAST=upcast,
        SPLIT_K=splits > 1,
        NUM_SPLITS=splits,
        HAS_SINKS=sinks is not None,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    if splits > 1:
        _combine_splits_kernel[(total_q, num_heads)](
            part, out, num_heads, head_dim, out.stride(0), out.stride(1),
            NUM_SPLITS=splits, BLOCK_S=next_power_of_2(splits), BLOCK_D=next_power_of_2(head_dim), num_warps=4,
        )  # fmt: skip
    return out


def _num_kv_splits(programs: int, max_context: int, block_n: int, device: torch.device) -> int:
    """Key-range splits per decode program so the grid fills the GPU (flash-decoding).

    Depends on shapes only (no sync; stable under CUDA graphs); a power of two, so few compiles. Under the CPU interpreter a small
    target still exercises the split path in tests.
    """
    target = 2 * _sm_count(device) if device.type == "cuda" else 16
    if programs >= target:
        return 1
    return power_of_2_at_most(max(1, min(_cdiv(target, programs), _cdiv(max_context, block_n), MAX_SPLITS)))


@functools.cache
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def _check(q, k_cache, v_cache, block_tables, cu_seqlens_q, seq_lens) -> None:
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dtype not in ATTN_DTYPES:
            raise TypeError(f"{name} must be float32, bfloat16 or float16, got {t.dtype}")
        if t.numel() and t.stride(-1) != 1:
            raise ConfigError(f"{name} must be contiguous in its last dimension (head_dim)")
    if q.dim() != 3 or k_cache.dim() != 4:
        raise ConfigError(
            "q must be [total_q_tokens, num_heads, head_dim] and the caches "
            f"[num_blocks, block_size, num_kv_heads, head_dim], got {tuple(q.shape)} and {tuple(k_cache.shape)}"
        )
    if v_cache.shape != k_cache.shape or v_cache.stride() != k_cache.stride():
        raise ConfigError(f"v_cache {tuple(v_cache.shape)} must match k_cache {tuple(k_cache.shape)} and its strides")
    if k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise TypeError(f"q, k_cache and v_cache must share a dtype, got {q.dtype}, {k_cache.dtype}, {v_cache.dtype}")
    num_heads, num_kv_heads = q.shape[1], k_cache.shape[2]
    if q.shape[2] != k_cache.shape[3]:
        raise ConfigError(f"q head_dim {q.shape[2]} != cache head_dim {k_cache.shape[3]}")
    if num_kv_heads == 0 or num_heads % num_kv_heads:
        raise ConfigError(f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")
    for name, t in (("block_tables", block_tables), ("cu_seqlens_q", cu_seqlens_q), ("seq_lens", seq_lens)):
        if t.dtype != torch.int32:
            raise TypeError(f"{name} must be int32, got {t.dtype}")
        if t.device != q.device:
            raise ConfigError(f"{name} is on {t.device} but q is on {q.device}")
    num_seqs = seq_lens.shape[0]
    if seq_lens.dim() != 1 or cu_seqlens_q.shape != (num_seqs + 1,):
        raise ConfigError(
            f"cu_seqlens_q must be [num_seqs + 1] for seq_lens [num_seqs], "
            f"got {tuple(cu_seqlens_q.shape)} and {tuple(seq_lens.shape)}"
        )
    if block_tables.dim() != 2 or block_tables.shape[0] != num_seqs:
        raise ConfigError(f"block_tables must be [num_seqs={num_seqs}, max_blocks], got {tuple(block_tables.shape)}")
    if block_tables.stride(-1) != 1 and block_tables.numel():
        raise ConfigError("block_tables must be contiguous in its last dimension")
