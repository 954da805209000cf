"""Batched attention over the paged KV cache for CPU tensors.

The kernels' torch reference loops over sequences, which dominates a CPU step; for sequences with few
new tokens (decodes, and the short chunks fast-forward feeds) this gathers every sequence's blocks at
once and runs a single masked ``scaled_dot_product_attention`` over queries padded to the longest
chunk. Longer chunks (prefill) still go through the reference, one sequence at a time. Same arguments
and semantics as ``guided.kernels.attention.paged_attention``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from guided.kernels.attention import paged_attention_ref

# scaled_dot_product_attention broadcasts KV heads itself from torch 2.5 on
_GQA = tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 5)


SHORT_CHUNK = 16  # sequences with at most this many new tokens are batched; longer ones loop


def attention_cpu(q, k_cache, v_cache, block_tables, cu_seqlens_q, seq_lens, scale: float,
                  window: int | None = None, sinks: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """``paged_attention`` on CPU: short chunks batched (``short_chunks_attention_cpu``), long ones by
    the reference; ``q`` packed by sequence, ``[total_q, num_heads, head_dim]``."""
    q_lens = cu_seqlens_q.diff()
    short = q_lens <= SHORT_CHUNK
    if bool(short.all()):
        return short_chunks_attention_cpu(q, k_cache, v_cache, block_tables, cu_seqlens_q, seq_lens, scale, window,
                                          sinks)  # fmt: skip
    if not bool(short.any()):
        return paged_attention_ref(q, k_cache, v_cache, block_tables, cu_seqlens_q, seq_lens, scale, window=window,
                                   sinks=sinks)  # fmt: skip
    token_short = torch.repeat_interleave(short, q_lens.long())  # [total_q]: its sequence is short
    out = torch.empty_like(q)
    for rows, pick in ((token_short, short), (~token_short, ~short)):
        cu = F.pad(q_lens[pick].cumsum(0), (1, 0)).to(cu_seqlens_q.dtype)
        args = (q[rows], k_cache, v_cache, block_tables[pick], cu, seq_lens[pick], scale)
        out[rows] = (short_chunks_attention_cpu(*args, window, sinks) if pick is short
                     else paged_attention_ref(*args, window=window, sinks=sinks))  # fmt: skip
    return out


def short_chunks_attention_cpu(q, k_cache, v_cache, block_tables, cu_seqlens_q, seq_lens, scale,
                               window: int | None = None, sinks: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """All sequences at once, queries padded to the longest chunk (padding rows attend to key 0 and are
    dropped); each new token sees the keys up to its own position (it is the last of its chunk's
    ``q_len`` tokens, at the end of the context)."""
    q_lens = cu_seqlens_q.diff().long()
    longest = int(q_lens.max())
    if longest == 1:
        return decode_attention_cpu(q, k_cache, v_cache, block_tables, seq_lens, scale, window, sinks)
    steps = torch.arange(longest)
    real = steps[None, :] < q_lens[:, None]  # [num_seqs, longest]
    index = (cu_seqlens_q[:-1, None].long() + steps[None, :]).clamp(max=q.shape[0] - 1)
    padded = q[index].transpose(1, 2)  # [num_seqs, num_heads, longest, head_dim]
    k, v, max_len = _gather_kv(k_cache, v_cache, block_tables, seq_lens)
    keys = torch.arange(max_len)[None, None, :]
    position = (seq_lens.long() - q_lens)[:, None, None] + steps[None, :, None]  # of each query token
    visible = (keys <= position) & (keys < seq_lens.long()[:, None, None])
    if window:
        visible &= keys > position - window
    visible |= ~real[:, :, None] & (keys == 0)  # padding rows: one key, so no row is all -inf
    out = _sdpa(padded, k, v, visible[:, None], scale, q.shape[1] // k_cache.shape[2], sinks)
    return out.transpose(1, 2)[real].to(q.dtype)  # packed back: sequence by sequence, token by token


def _gather_kv(k_cache, v_cache, block_tables, seq_lens):
    """Each sequence's keys and values, ``[num_seqs, num_kv_heads, max_len, head_dim]`` fp32, zero past
    its length (a masked NaN in never-written memory would still poison q·k and p·v). The gathered
    copies are zeroed in place, and only their rows past each length (a full pass over them cost a
    decode step as much as the gather)."""
    num_seqs = seq_lens.shape[0]
    block_size, num_kv_heads, head_dim = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    max_len = int(seq_lens.max())
    num_blocks = -(-max_len // block_size)
    width = num_blocks * block_size
    flat = block_tables[:, :num_blocks].reshape(-1).long()
    # index_select: far cheaper than fancy indexing; a fresh copy, so zeroing it in place is safe
    k = k_cache.index_select(0, flat).view(num_seqs * width, num_kv_heads, head_dim).float()
    v = v_cache.index_select(0, flat).view(num_seqs * width, num_kv_heads, head_dim).float()
    past = (torch.arange(width)[None, :] >= seq_lens[:, None].long()).view(-1).nonzero().view(-1)
    k.index_fill_(0, past, 0.0)
    v.index_fill_(0, past, 0.0)
    shape = (num_seqs, width, num_kv_heads, head_dim)
    return k.view(shape)[:, :max_len].transpose(1, 2), v.view(shape)[:, :max_len].transpose(1, 2), max_len


def _sdpa(q, k, v, mask, scale: float, group: int, sinks: torch.Tensor | None = None) -> torch.Tensor:
    if sinks is not None:  # one more key, of zeros (score 0, value 0), its score raised to the head's sink
        pad = k.new_zeros(*k.shape[:2], 1, k.shape[3])
        k, v = torch.cat([k, pad], dim=2), torch.cat([v, pad], dim=2)
        bias = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
        bias = bias.expand(mask.shape[0], q.shape[1], *mask.shape[2:])
        sink = sinks.float()[None, :, None, None].expand(*bias.shape[:3], 1)
        mask = torch.cat([bias, sink], dim=-1)
    if group > 1 and not _GQA:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    extra = {"enable_gqa": True} if group > 1 and _GQA else {}
    return F.scaled_dot_product_attention(q.float(), k, v, attn_mask=mask, scale=scale, **extra)


def decode_attention_cpu(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """One query token per sequence, at position seq_lens - 1: ``q`` is ``[num_seqs, num_heads, head_dim]``;
    ``sinks`` [num_heads]: gpt-oss's attention sinks (a key of that score and no value)."""
    k, v, max_len = _gather_kv(k_cache, v_cache, block_tables, seq_lens)
    keys = torch.arange(max_len)[None, :]
    visible = keys < seq_lens[:, None].long()  # [num_seqs, max_len]
    if window:
        visible &= keys >= seq_lens[:, None].long() - window
    out = _sdpa(q[:, :, None], k, v, visible[:, None, None], scale, q.shape[1] // k_cache.shape[2], sinks)
    return out[:, :, 0].to(q.dtype)  # [num_seqs, num_heads, head_dim]
