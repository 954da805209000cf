"""Scatter the new tokens' keys and values into the paged KV cache by slot mapping.

A slot is ``block_id * block_size + offset``; slot ``-1`` skips the token (padding, or a token
whose KV is already cached).
"""

from __future__ import annotations

import torch

from guided.errors import ConfigError

from ._triton import jit, next_power_of_2, tl, use_triton

__all__ = ["store_kv", "store_kv_ref"]

KV_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@jit
def _store_kv_kernel(
    key_ptr,  # [num_tokens, num_kv_heads, head_dim]
    value_ptr,  # [num_tokens, num_kv_heads, head_dim]
    k_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim]
    slot_mapping_ptr,  # [num_tokens] int64
    num_kv_heads,
    head_dim,
    block_size,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_cache_b,
    stride_cache_s,
    stride_cache_h,
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + token)
    if slot >= 0:
        block_id = slot // block_size
        offset = slot % block_size
        heads = tl.arange(0, BLOCK_H)[:, None]  # [BLOCK_H, 1]
        dims = tl.arange(0, BLOCK_D)[None, :]  # [1, BLOCK_D]
        mask = (heads < num_kv_heads) & (dims < head_dim)
        # the last dim of every tensor is contiguous (checked by the wrapper)
        k = tl.load(key_ptr + token * stride_kt + heads * stride_kh + dims, mask=mask)
        v = tl.load(value_ptr + token * stride_vt + heads * stride_vh + dims, mask=mask)
        dst = block_id * stride_cache_b + offset * stride_cache_s + heads * stride_cache_h + dims
        tl.store(k_cache_ptr + dst, k.to(k_cache_ptr.dtype.element_ty), mask=mask)
        tl.store(v_cache_ptr + dst, v.to(v_cache_ptr.dtype.element_ty), mask=mask)


def store_kv_ref(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Pure-torch reference of :func:`store_kv` (same arguments, same effect)."""
    _check(key, value, k_cache, v_cache, slot_mapping)
    block_size = k_cache.shape[1]
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    blocks, offsets = slots // block_size, slots % block_size
    k_cache[blocks, offsets] = key[keep].to(k_cache.dtype)
    v_cache[blocks, offsets] = value[keep].to(v_cache.dtype)


def store_kv(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Write each token's key and value into its cache slot, in place.

    Parameters
    ----------
    key, value : torch.Tensor
        ``[num_tokens, num_kv_heads, head_dim]``, fp32/bf16/fp16 (cast to the cache dtype);
        the last dimension must be contiguous.
    k_cache, v_cache : torch.Tensor
        ``[num_blocks, block_size, num_kv_heads, head_dim]``, same shape, strides and dtype;
        the last dimension must be contiguous.
    slot_mapping : torch.Tensor
        int64 ``[num_tokens]``: ``block_id * block_size + offset`` per token, ``-1`` to skip.
        Slots are not bounds-checked on the GPU; two tokens must not share a slot.
    """
    _check(key, value, k_cache, v_cache, slot_mapping)
    num_tokens, num_kv_heads, head_dim = key.shape
    if num_tokens == 0:
        return
    if not use_triton(key, _store_kv_kernel):
        store_kv_ref(key, value, k_cache, v_cache, slot_mapping)
        return
    _store_kv_kernel[(num_tokens,)](
        key,
        value,
        k_cache,
        v_cache,
        slot_mapping,
        num_kv_heads,
        head_dim,
        k_cache.shape[1],
        key.stride(0),
        key.stride(1),
        value.stride(0),
        value.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        BLOCK_H=next_power_of_2(num_kv_heads),
        BLOCK_D=next_power_of_2(head_dim),
        num_warps=4,
    )


def _check(key, value, k_cache, v_cache, slot_mapping) -> None:
    for name, t in (("key", key), ("value", value), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dtype not in KV_DTYPES:
            raise TypeError(f"{name} must be float32, bfloat16 or float16, got {t.dtype}")
        if t.numel() and t.stride(-1) != 1:
            raise ConfigError(f"{name} must be contiguous in its last dimension (head_dim)")
        if t.device != key.device:
            raise ConfigError(f"{name} is on {t.device} but key is on {key.device}")
    if key.dim() != 3 or value.shape != key.shape:
        raise ConfigError(
            f"key and value must both be [num_tokens, num_kv_heads, head_dim], "
            f"got {tuple(key.shape)} and {tuple(value.shape)}"
        )
    if k_cache.dim() != 4 or v_cache.shape != k_cache.shape or v_cache.stride() != k_cache.stride():
        raise ConfigError(
            "k_cache and v_cache must be [num_blocks, block_size, num_kv_heads, head_dim] with the "
            f"same shape and strides, got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}"
        )
    if k_cache.dtype != v_cache.dtype:
        raise TypeError(f"k_cache is {k_cache.dtype} but v_cache is {v_cache.dtype}")
    if tuple(k_cache.shape[2:]) != tuple(key.shape[1:]):
        raise ConfigError(
            f"cache heads/head_dim {tuple(k_cache.shape[2:])} do not match key's {tuple(key.shape[1:])}"
        )
    if slot_mapping.dtype != torch.int64 or slot_mapping.shape != (key.shape[0],):
        raise ConfigError(
            f"slot_mapping must be int64 [num_tokens={key.shape[0]}], "
            f"got {slot_mapping.dtype} {tuple(slot_mapping.shape)}"
        )
    if slot_mapping.device != key.device:
        raise ConfigError(f"slot_mapping is on {slot_mapping.device} but key is on {key.device}")
