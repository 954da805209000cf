"""Apply a packed allowed-token bitmask to logits in place (-inf where a token is not allowed).

Bitmask layout (shared with the grammar matcher, XGrammar and vLLM): int32 ``[rows, words]``;
token ``j`` is allowed when bit ``j & 31`` of word ``j >> 5`` is set (``(word >> (j & 31)) & 1``).
A row of all ``-1`` allows everything. Logit columns past ``32 * words`` (the padded lm_head width
beyond the tokenizer) are always masked.
"""

from __future__ import annotations

import torch

from guided.errors import ConfigError

from ._triton import jit, tl, use_triton

__all__ = ["apply_token_bitmask_", "apply_token_bitmask_ref", "allocate_token_bitmask", "unpack_bitmask"]

LOGIT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
INDEX_DTYPES = (torch.int32, torch.int64)
BLOCK_V = 2048


@jit
def _apply_token_bitmask_kernel(
    logits_ptr,  # [B, V] fp32/bf16/fp16, written in place
    bitmask_ptr,  # [rows, num_words] int32
    indices_ptr,  # [num_rows] int32/int64: logits row of each bitmask row (if HAS_INDICES)
    vocab_size,
    num_words,
    stride_logits_row,
    stride_logits_col,
    stride_mask_row,
    stride_mask_word,
    HAS_INDICES: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    mask_row = tl.program_id(0)
    block = tl.program_id(1)
    if HAS_INDICES:
        logits_row = tl.load(indices_ptr + mask_row).to(tl.int64)
    else:
        logits_row = mask_row.to(tl.int64)
    tokens = block * BLOCK_V + tl.arange(0, BLOCK_V)  # [BLOCK_V] token ids
    in_vocab = tokens < vocab_size
    # the block's BLOCK_V / 32 words; words past the bitmask's width read as 0 = masked
    word_idx = block * (BLOCK_V // 32) + tl.arange(0, BLOCK_V // 32)
    word_ptrs = bitmask_ptr + mask_row.to(tl.int64) * stride_mask_row + word_idx * stride_mask_word
    words = tl.load(word_ptrs, mask=word_idx < num_words, other=0)
    # token 32 * w + b is bit b of word w: [BLOCK_V / 32, 32] row-major = token order
    bits = (words[:, None] >> tl.arange(0, 32)[None, :]) & 1
    allowed = tl.reshape(bits != 0, [BLOCK_V])
    # only the masked columns are written: the logits themselves are never read
    logit_ptrs = logits_ptr + logits_row * stride_logits_row + tokens * stride_logits_col
    neg_inf = tl.full([BLOCK_V], float("-inf"), tl.float32)
    tl.store(logit_ptrs, neg_inf, mask=in_vocab & ~allowed)


def allocate_token_bitmask(batch: int, vocab_size: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """A ``[batch, ceil(vocab_size / 32)]`` int32 bitmask with every token allowed (all ``-1``).

    Parameters
    ----------
    batch : int
        Number of rows.
    vocab_size : int
        Number of tokens the rows describe (the tokenizer's or the lm_head's width).
    device : torch.device or str
        Where to allocate.

    Returns
    -------
    torch.Tensor
        int32 ``[batch, ceil(vocab_size / 32)]`` filled with ``-1``.
    """
    if batch < 0 or vocab_size < 0:
        raise ConfigError(f"batch and vocab_size must be >= 0, got {batch} and {vocab_size}")
    return torch.full((batch, (vocab_size + 31) // 32), -1, dtype=torch.int32, device=device)


def unpack_bitmask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Expand an int32 ``[rows, words]`` bitmask to bool ``[rows, vocab_size]`` (True = allowed).

    Parameters
    ----------
    bitmask : torch.Tensor
        int32 ``[rows, words]``.
    vocab_size : int
        Width of the result; columns past ``32 * words`` are False.

    Returns
    -------
    torch.Tensor
        bool ``[rows, vocab_size]``.
    """
    _check_bitmask(bitmask)
    rows, words = bitmask.shape
    shifts = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    # [rows, words, 32] -> [rows, 32 * words]: bit b of word w is token 32 * w + b
    bits = ((bitmask.unsqueeze(-1) >> shifts) & 1).bool().reshape(rows, 32 * words)
    if vocab_size <= 32 * words:
        return bits[:, :vocab_size].contiguous()
    pad = torch.zeros(rows, vocab_size - 32 * words, dtype=torch.bool, device=bitmask.device)
    return torch.cat([bits, pad], dim=1)


def apply_token_bitmask_ref(
    logits: torch.Tensor, bitmask: torch.Tensor, indices: torch.Tensor | None = None
) -> None:
    """Pure-torch reference of :func:`apply_token_bitmask_` (same arguments, same effect)."""
    rows = _check(logits, bitmask, indices)
    if rows == 0:
        return
    allowed = unpack_bitmask(bitmask[:rows], logits.shape[1])  # [rows, V]
    if indices is None:
        logits[:rows].masked_fill_(~allowed, float("-inf"))
        return
    index = indices.long()
    logits[index] = logits[index].masked_fill(~allowed, float("-inf"))


def apply_token_bitmask_(logits: torch.Tensor, bitmask: torch.Tensor, indices: torch.Tensor | None = None) -> None:
    """Set ``logits`` to ``-inf`` in place wherever the bitmask disallows the token.

    Parameters
    ----------
    logits : torch.Tensor
        fp32/bf16/fp16 ``[B, V]``; ``V`` may be the padded lm_head width.
    bitmask : torch.Tensor
        int32 ``[rows, words]``; bit ``j & 31`` of word ``j >> 5`` set = token ``j`` allowed.
        Columns ``>= 32 * words`` are masked.
    indices : torch.Tensor, optional
        int32/int64 ``[R]``: bitmask row ``i`` masks logits row ``indices[i]`` (``R <= rows``;
        values are not bounds-checked on the GPU). Without it, bitmask row ``i`` masks logits
        row ``i`` for every ``i < B`` (then ``rows >= B`` is required).
    """
    rows = _check(logits, bitmask, indices)
    if rows == 0:
        return
    if not use_triton(logits, _apply_token_bitmask_kernel):
        apply_token_bitmask_ref(logits, bitmask, indices)
        return
    vocab_size = logits.shape[1]
    grid = (rows, _cdiv(vocab_size, BLOCK_V))
    _apply_token_bitmask_kernel[grid](
        logits,
        bitmask,
        indices if indices is not None else bitmask,  # unused pointer when HAS_INDICES is False
        vocab_size,
        bitmask.shape[1],
        logits.stride(0),
        logits.stride(1),
        bitmask.stride(0),
        bitmask.stride(1),
        HAS_INDICES=indices is not None,
        BLOCK_V=BLOCK_V,
        num_warps=4,
    )


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def _check_bitmask(bitmask: torch.Tensor) -> None:
    if bitmask.dtype != torch.int32:
        raise TypeError(f"bitmask must be int32, got {bitmask.dtype}")
    if bitmask.dim() != 2:
        raise ConfigError(f"bitmask must be 2-D [rows, words], got shape {tuple(bitmask.shape)}")


def _check(logits: torch.Tensor, bitmask: torch.Tensor, indices: torch.Tensor | None) -> int:
    """Validate the arguments; return the number of bitmask rows to apply."""
    if logits.dtype not in LOGIT_DTYPES:
        raise TypeError(f"logits must be float32, bfloat16 or float16, got {logits.dtype}")
    if logits.dim() != 2:
        raise ConfigError(f"logits must be 2-D [batch, vocab], got shape {tuple(logits.shape)}")
    _check_bitmask(bitmask)
    if bitmask.device != logits.device:
        raise ConfigError(f"bitmask is on {bitmask.device} but logits are on {logits.device}")
    if indices is None:
        if bitmask.shape[0] < logits.shape[0]:
            raise ConfigError(
                f"bitmask has {bitmask.shape[0]} rows for {logits.shape[0]} logits rows; "
                "pass indices to mask a subset of rows"
            )
        return logits.shape[0]
    if indices.dtype not in INDEX_DTYPES or indices.dim() != 1:
        raise TypeError(f"indices must be 1-D int32/int64, got {indices.dtype} {tuple(indices.shape)}")
    if indices.device != logits.device:
        raise ConfigError(f"indices are on {indices.device} but logits are on {logits.device}")
    if indices.shape[0] > bitmask.shape[0]:
        raise ConfigError(f"{indices.shape[0]} indices but only {bitmask.shape[0]} bitmask rows")
    return indices.shape[0]
