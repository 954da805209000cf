"""grouped_gemm: the reference against one matmul per routed row, the kernel against the reference."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from guided.errors import ConfigError
from guided.kernels.grouped_gemm import grouped_gemm, grouped_gemm_ref, moe_align

ATOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 6e-2}

CASES = {  # tokens, top_k, experts, K, N, skew (route most tokens to expert 0)
    "decode": (3, 2, 4, 32, 48, False),  # few rows, most experts empty
    "prefill": (40, 2, 4, 24, 40, False),  # tiles of several experts, K and N off the block sizes
    "skewed": (37, 2, 3, 64, 80, True),  # one expert past a tile, one empty
    "wide-k": (9, 4, 8, 130, 16, False),  # several K steps, top-4
}


def routed(case: str, dtype, device="cpu", seed=0):
    tokens, top_k, experts, k, n, skew = CASES[case]
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, k, generator=gen).to(dtype).to(device)
    w = torch.randn(experts, n, k, generator=gen).div(k**0.5).to(dtype).to(device)
    scores = torch.randn(tokens, experts, generator=gen)
    if skew:
        scores[:, 0] += 3
        scores[:, -1] -= 9  # never chosen
    chosen = scores.topk(top_k, dim=-1).indices.to(device)
    return x, w, chosen


@pytest.mark.parametrize("case", CASES)
def test_reference_is_one_matmul_per_routed_row(case):
    x, w, chosen = routed(case, torch.float32)
    order, rows, counts = moe_align(chosen, w.shape[0])
    out = grouped_gemm_ref(x, w, counts, rows)
    experts = chosen.flatten()[order]
    assert experts.tolist() == sorted(experts.tolist()) and counts.sum() == chosen.numel()
    for r in range(out.shape[0]):
        torch.testing.assert_close(out[r], w[experts[r]] @ x[rows[r]], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", CASES)
def test_kernel_matches_reference(kernel_device, case, dtype):
    x, w, chosen = routed(case, dtype, kernel_device, seed=len(case))
    order, rows, counts = moe_align(chosen, w.shape[0])
    ref = grouped_gemm_ref(x, w, counts, rows)
    for block_m in (None, 16):
        out = grouped_gemm(x, w, counts, rows, block_m=block_m)
        assert out.dtype == dtype and out.shape == ref.shape
        torch.testing.assert_close(out.float(), ref.float(), atol=ATOL[dtype], rtol=0)
    h = ref  # the second GEMM of an expert MLP: rows already in expert order, no gather
    w2 = torch.randn(w.shape[0], 16, h.shape[1], generator=torch.Generator().manual_seed(1)).to(dtype).to(kernel_device)
    torch.testing.assert_close(grouped_gemm(h, w2, counts).float(), grouped_gemm_ref(h, w2, counts).float(),
                               atol=ATOL[dtype] * 4, rtol=0)  # fmt: skip


def test_bad_arguments_raise():
    x, w, chosen = routed("decode", torch.float32)
    _, rows, counts = moe_align(chosen, w.shape[0])
    with pytest.raises(ConfigError):
        grouped_gemm(x[:, :5], w, counts, rows)
    with pytest.raises(TypeError):
        grouped_gemm(x.half(), w, counts, rows)
    with pytest.raises(ConfigError):
        grouped_gemm(x, w, counts[:2], rows)


@pytest.mark.parametrize("model_type", ["qwen3_moe", "mixtral", "gpt_oss"])
def test_moe_block_on_the_kernel_equals_the_looped_experts(kernel_device, model_type):
    """The engine's expert block: two grouped GEMMs (the CUDA path) against one matmul per expert
    (gpt-oss: its biases and clamped SwiGLU around them)."""
    from guided.engine.models.gpt_oss import GptOssMoE
    from guided.engine.models.layers import ModelArgs
    from guided.engine.models.qwen3_moe import SparseMoeBlock

    args = ModelArgs(model_type=model_type, vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=1,
                     num_heads=2, num_kv_heads=2, head_dim=16, rms_norm_eps=1e-6, rope_theta=1e4, rope_scaling=None,
                     max_position_embeddings=64, tie_word_embeddings=False, qkv_bias=False, qk_norm=False,
                     num_experts=6, num_experts_per_tok=2, moe_intermediate_size=48, norm_topk_prob=True)  # fmt: skip
    torch.manual_seed(0)
    block = GptOssMoE(replace(args, swiglu_limit=0.5)) if model_type == "gpt_oss" else SparseMoeBlock(args)
    for p in block.parameters():
        p.data.normal_(0, 0.3)
    block = block.to(kernel_device)
    x = torch.randn(11, 32, device=kernel_device)
    weights, chosen = block.route(x)
    expected = block.looped(x, weights, chosen)
    torch.testing.assert_close(block.grouped(x, weights, chosen), expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(block(x), expected, atol=1e-4, rtol=1e-4)  # forward takes the kernel here
