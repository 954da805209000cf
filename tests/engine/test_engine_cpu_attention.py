"""The batched CPU decode attention agrees with the paged-attention reference (with and without a
sliding window, which the reference checks against dense SDPA in tests/kernels)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("window", [None, 1, 5])
@pytest.mark.parametrize("group", [1, 2, 4])
def test_cpu_decode_attention_matches_the_reference(group, window):
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
    ref = paged_attention_ref(q, k_cache, v_cache, tables, cu, seq_lens, 0.3, 1, window=window)
    torch.testing.assert_close(decode_attention_cpu(q, k_cache, v_cache, tables, seq_lens, 0.3, window), ref)


@pytest.mark.parametrize("window", [None, 3, 11])
@pytest.mark.parametrize("seed", range(4))
def test_cpu_chunk_attention_matches_the_reference(seed, window):
    """Mixed batches: single tokens, short chunks (batched, padded) and long chunks (the reference) in
    one call agree with the reference over the whole batch; GQA groups 1-4."""
    import random

    import torch

    from guided.engine.models.cpu_attention import SHORT_CHUNK, attention_cpu
    from guided.kernels.attention import paged_attention_ref

    rng = random.Random(seed)
    torch.manual_seed(seed)
    group, kv_heads, head_dim, block_size = rng.choice([1, 2, 4]), 2, 8, 4
    num_seqs = rng.randint(1, 7)
    k_cache = torch.randn(96, block_size, kv_heads, head_dim)
    v_cache = torch.randn_like(k_cache)
    q_lens = [rng.choice([1, 1, 2, 5, SHORT_CHUNK, SHORT_CHUNK + 3]) for _ in range(num_seqs)]
    seq_lens = torch.tensor([q + rng.randint(0, 20) for q in q_lens], dtype=torch.int32)
    cu = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    q = torch.randn(int(cu[-1]), kv_heads * group, head_dim)
    tables = torch.randperm(96)[: num_seqs * 12].view(num_seqs, 12).int()
    ref = paged_attention_ref(q, k_cache, v_cache, tables, cu, seq_lens, 0.3, window=window)
    torch.testing.assert_close(attention_cpu(q, k_cache, v_cache, tables, cu, seq_lens, 0.3, window), ref)


@pytest.mark.parametrize("longest", [1, 3])
def test_stale_nan_past_a_sequence_never_reaches_it(longest):
    """Every cache slot outside the sequences' own positions holds NaN or inf (what a freed block of a
    request whose computation broke may keep): decodes and short chunks give the same output as over
    a clean cache."""
    import torch

    from guided.engine.models.cpu_attention import attention_cpu

    torch.manual_seed(7)
    kv_heads, head_dim, block_size, num_seqs = 2, 8, 4, 4
    clean_k = torch.randn(40, block_size, kv_heads, head_dim)
    clean_v = torch.randn_like(clean_k)
    seq_lens = torch.tensor([5, 9, 3, 14], dtype=torch.int32)
    tables = torch.randperm(40)[: num_seqs * 4].view(num_seqs, 4).int()
    own = torch.zeros(40 * block_size, dtype=torch.bool)
    for table, n in zip(tables.tolist(), seq_lens.tolist(), strict=True):
        for p in range(n):
            own[table[p // block_size] * block_size + p % block_size] = True
    k_cache, v_cache = clean_k.clone().view(-1, kv_heads, head_dim), clean_v.clone().view(-1, kv_heads, head_dim)
    k_cache[~own], v_cache[~own] = float("nan"), float("inf")
    k_cache, v_cache = k_cache.view_as(clean_k), v_cache.view_as(clean_v)
    q_lens = [min(longest, int(n)) for n in seq_lens]
    cu = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    q = torch.randn(int(cu[-1]), kv_heads, head_dim)
    out = attention_cpu(q, k_cache, v_cache, tables, cu, seq_lens, 0.3)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, attention_cpu(q, clean_k, clean_v, tables, cu, seq_lens, 0.3))


@pytest.mark.parametrize("window", [None, 4])
@pytest.mark.parametrize("seed", range(3))
def test_cpu_attention_with_sinks_matches_the_reference(seed, window):
    """gpt-oss's sinks on the batched paths (decodes, short chunks) and the looped one (long chunks)."""
    import random

    import torch

    from guided.engine.models.cpu_attention import SHORT_CHUNK, attention_cpu, decode_attention_cpu
    from guided.kernels.attention import paged_attention_ref

    rng = random.Random(seed)
    torch.manual_seed(seed)
    group, kv_heads, head_dim, block_size = [1, 2, 4][seed], 2, 8, 4
    k_cache = torch.randn(96, block_size, kv_heads, head_dim)
    v_cache = torch.randn_like(k_cache)
    sinks = torch.randn(kv_heads * group) * 2
    q_lens = [rng.choice([1, 2, 5, SHORT_CHUNK + 3]) for _ in range(5)]
    seq_lens = torch.tensor([q + rng.randint(0, 20) for q in q_lens], dtype=torch.int32)
    cu = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    q = torch.randn(int(cu[-1]), kv_heads * group, head_dim)
    tables = torch.randperm(96)[: 5 * 12].view(5, 12).int()
    ref = paged_attention_ref(q, k_cache, v_cache, tables, cu, seq_lens, 0.3, window=window, sinks=sinks)
    torch.testing.assert_close(attention_cpu(q, k_cache, v_cache, tables, cu, seq_lens, 0.3, window, sinks), ref)
    assert not torch.allclose(ref, paged_attention_ref(q, k_cache, v_cache, tables, cu, seq_lens, 0.3, window=window))
    q1 = q[cu[1:] - 1]  # one decode token per sequence
    ones = torch.arange(6, dtype=torch.int32)
    torch.testing.assert_close(decode_attention_cpu(q1, k_cache, v_cache, tables, seq_lens, 0.3, window, sinks),
                               paged_attention_ref(q1, k_cache, v_cache, tables, ones, seq_lens, 0.3, window=window,
                                                   sinks=sinks))  # fmt: skip
