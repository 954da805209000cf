"""The batched CPU decode attention agrees with the paged-attention reference."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("group", [1, 2, 4])
def test_cpu_decode_attention_matches_the_reference(group):
    import torch

    from guided.engine.models.cpu_attention import decode_attention_cpu
    from guided.kernels.attention import paged_attention_ref

    torch.manual_seed(group)
    num_seqs, kv_heads, head_dim, block_size = 5, 2, 8, 4
    k_cache = torch.randn(64, block_size, kv_heads, head_dim)
    v_cache = torch.randn_like(k_cache)
    q = torch.randn(num_seqs, kv_heads * group, head_dim)
    seq_lens = torch.tensor([1, 7, 16, 3, 29], dtype=torch.int32)
    tables = torch.randperm(64)[: num_seqs * 8].view(num_seqs, 8).int()
    cu = torch.arange(num_seqs + 1, dtype=torch.int32)
    ref = paged_attention_ref(q, k_cache, v_cache, tables, cu, seq_lens, 0.3, 1)
    torch.testing.assert_close(decode_attention_cpu(q, k_cache, v_cache, tables, seq_lens, 0.3), ref)
