"""store_kv: reference semantics, kernel == reference exactly, real shapes on GPU."""

from __future__ import annotations

import pytest
import torch

from guided.errors import ConfigError
from guided.kernels.kv_store import store_kv, store_kv_ref

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def make(num_tokens, heads, head_dim, num_blocks, block_size, dtype, device="cpu", cache_dtype=None):
    gen = torch.Generator().manual_seed(num_tokens * 31 + head_dim)
    key = torch.randn(num_tokens, heads, head_dim, generator=gen).to(dtype).to(device)
    value = torch.randn(num_tokens, heads, head_dim, generator=gen).to(dtype).to(device)
    cache_dtype = cache_dtype or dtype
    k_cache = torch.zeros(num_blocks, block_size, heads, head_dim, dtype=cache_dtype, device=device)
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:num_tokens]
    slots[::3] = -1  # skipped tokens
    return key, value, k_cache, k_cache.clone(), slots.to(device)


def test_reference_writes_each_slot_and_skips_minus_one():
    key, value, k_cache, v_cache, slots = make(7, 2, 8, 4, 4, torch.float32)
    store_kv_ref(key, value, k_cache, v_cache, slots)
    flat_k, flat_v = k_cache.view(-1, 2, 8), v_cache.view(-1, 2, 8)
    for t, slot in enumerate(slots.tolist()):
        if slot >= 0:
            assert torch.equal(flat_k[slot], key[t]) and torch.equal(flat_v[slot], value[t])
    assert (flat_k.abs().sum(dim=(1, 2)) > 0).sum() == (slots >= 0).sum()


@pytest.mark.parametrize(
    "change, error",
    [
        (lambda a: {**a, "slot_mapping": a["slot_mapping"].int()}, ConfigError),
        (lambda a: {**a, "value": a["value"][:-1]}, ConfigError),
        (lambda a: {**a, "k_cache": a["k_cache"][:, :, :1]}, ConfigError),
        (lambda a: {**a, "key": a["key"].int()}, TypeError),
        (lambda a: {**a, "v_cache": a["v_cache"].half()}, TypeError),
        (lambda a: {**a, "key": a["key"].transpose(1, 2).contiguous().transpose(1, 2)}, ConfigError),
    ],
)
def test_bad_arguments_raise(change, error):
    key, value, k_cache, v_cache, slots = make(4, 2, 8, 2, 4, torch.float32)
    args = dict(key=key, value=value, k_cache=k_cache, v_cache=v_cache, slot_mapping=slots)
    with pytest.raises(error):
        store_kv(**change(args))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "num_tokens,heads,head_dim,num_blocks,block_size",
    [(1, 1, 16, 1, 1), (5, 3, 12, 4, 4), (9, 2, 64, 8, 16), (17, 8, 128, 3, 8)],
)
def test_kernel_matches_reference(kernel_device, dtype, num_tokens, heads, head_dim, num_blocks, block_size):
    key, value, k_cache, v_cache, slots = make(num_tokens, heads, head_dim, num_blocks, block_size, dtype,
                                               kernel_device)
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    store_kv(key, value, k_cache, v_cache, slots)
    store_kv_ref(key, value, k_ref, v_ref, slots)
    assert torch.equal(k_cache, k_ref) and torch.equal(v_cache, v_ref)


def test_kernel_casts_and_strided_tokens(kernel_device):
    packed = torch.randn(6, 3, 2, 16, device=kernel_device)  # e.g. a fused qkv projection
    key, value = packed[:, :, 0], packed[:, :, 1]  # non-contiguous token/head strides
    # Triton's CPU interpreter truncates fp32 -> bf16 (GPUs round to nearest even): fp16 there
    cache_dtype = torch.float16 if kernel_device == "cpu" else torch.bfloat16
    k_cache = torch.zeros(3, 4, 3, 16, dtype=cache_dtype, device=kernel_device)
    v_cache, k_ref, v_ref = k_cache.clone(), k_cache.clone(), k_cache.clone()
    slots = torch.tensor([0, 5, -1, 11, 2, 6], device=kernel_device)
    store_kv(key, value, k_cache, v_cache, slots)
    store_kv_ref(key, value, k_ref, v_ref, slots)
    assert torch.equal(k_cache, k_ref) and torch.equal(v_cache, v_ref)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("heads,head_dim", [(8, 128), (4, 64)])
def test_gpu_real_shapes(dtype, heads, head_dim):
    key, value, k_cache, v_cache, slots = make(8192, heads, head_dim, 1024, 16, dtype, "cuda")
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    store_kv(key, value, k_cache, v_cache, slots)
    store_kv_ref(key, value, k_ref, v_ref, slots)
    assert torch.equal(k_cache, k_ref) and torch.equal(v_cache, v_ref)
