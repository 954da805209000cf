"""Batched decode attention over the paged KV cache for CPU tensors.

The kernels' torch reference loops over sequences, which dominates a CPU decode step; for pure-decode
batches (one query token per sequence) this gathers every sequence's blocks at once and runs a single
masked ``scaled_dot_product_attention``. Same arguments and semantics as
``guided.kernels.attention.paged_attention`` restricted to ``max_seqlen_q == 1``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# scaled_dot_product_attention broadcasts KV heads itself from torch 2.5 on
_GQA = tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 5)


def decode_attention_cpu(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    # q: [num_seqs, num_heads, head_dim], one token per sequence at position seq_lens - 1
    num_seqs, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    max_len = int(seq_lens.max())
    num_blocks = -(-max_len // block_size)
    flat = block_tables[:, :num_blocks].reshape(-1).long()
    # k, v: [num_seqs, num_kv_heads, max_len, head_dim] (index_select: far cheaper than fancy indexing)
    shape = (num_seqs, num_blocks * block_size, num_kv_heads, head_dim)
    k = k_cache.index_select(0, flat).view(shape)[:, :max_len].transpose(1, 2).float()
    v = v_cache.index_select(0, flat).view(shape)[:, :max_len].transpose(1, 2).float()
    group = num_heads // num_kv_heads
    if group > 1 and not _GQA:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    visible = torch.arange(max_len)[None, :] < seq_lens[:, None].long()  # [num_seqs, max_len]
    # Positions past a sequence's length hold whatever its padded blocks hold (another sequence's KV,
    # or never-written memory): zero them, since a masked NaN still poisons q·k and p·v.
    hidden = ~visible[:, None, :, None]
    k, v = k.masked_fill(hidden, 0.0), v.masked_fill(hidden, 0.0)
    extra = {"enable_gqa": True} if group > 1 and _GQA else {}
    out = F.scaled_dot_product_attention(
        q[:, :, None].float(), k, v, attn_mask=visible[:, None, None], scale=scale, **extra
    )  # [num_seqs, num_heads, 1, head_dim]
    return out[:, :, 0].to(q.dtype)
