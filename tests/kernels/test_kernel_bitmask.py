"""apply_token_bitmask_: reference semantics, kernel == reference exactly, real shapes on GPU."""

from __future__ import annotations

import pytest
import torch

from guided.errors import ConfigError
from guided.kernels.bitmask import (
    allocate_token_bitmask,
    apply_token_bitmask_,
    apply_token_bitmask_ref,
    unpack_bitmask,
)

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def random_bitmask(rows: int, words: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(-(2**31), 2**31 - 1, (rows, words), dtype=torch.int32, generator=gen)


def expected(logits, bitmask, indices=None):
    """Oracle from first principles: bit j & 31 of word j >> 5, columns past the words masked."""
    out = logits.clone()
    rows = indices.tolist() if indices is not None else range(logits.shape[0])
    for i, r in enumerate(rows):
        for j in range(logits.shape[1]):
            w = j >> 5
            if w >= bitmask.shape[1] or not (int(bitmask[i, w]) >> (j & 31)) & 1:
                out[r, j] = float("-inf")
    return out


def test_unpack_bit_order_is_little_endian():
    bm = torch.tensor([[0b101, -1, 0]], dtype=torch.int32)
    allowed = unpack_bitmask(bm, 70)
    assert allowed[0, :3].tolist() == [True, False, True]
    assert not allowed[0, 3:32].any() and allowed[0, 32:64].all() and not allowed[0, 64:].any()
    assert unpack_bitmask(bm, 100)[0, 96:].sum() == 0  # past the words: masked


def test_allocate_is_all_allowed():
    bm = allocate_token_bitmask(3, 65)
    assert bm.shape == (3, 3) and bm.dtype == torch.int32 and (bm == -1).all()
    assert unpack_bitmask(bm, 65).all()


@pytest.mark.parametrize("vocab,words", [(1, 1), (31, 1), (33, 2), (100, 4), (100, 3), (64, 3)])
def test_reference_matches_first_principles(vocab, words):
    logits = torch.randn(3, vocab)
    bm = random_bitmask(3, words)
    out = logits.clone()
    apply_token_bitmask_ref(out, bm)
    torch.testing.assert_close(out, expected(logits, bm), rtol=0, atol=0)


def test_reference_indices_touch_only_listed_rows():
    logits = torch.randn(4, 40)
    bm = random_bitmask(2, 2)
    out = logits.clone()
    apply_token_bitmask_ref(out, bm, torch.tensor([3, 1]))
    torch.testing.assert_close(out, expected(logits, bm, torch.tensor([3, 1])), rtol=0, atol=0)
    assert torch.equal(out[[0, 2]], logits[[0, 2]])


def test_all_ones_row_is_unconstrained():
    logits = torch.randn(1, 64)
    out = logits.clone()
    apply_token_bitmask_ref(out, allocate_token_bitmask(1, 64))
    assert torch.equal(out, logits)


@pytest.mark.parametrize(
    "make, error",
    [
        (lambda: (torch.zeros(2, 8, dtype=torch.int32), torch.zeros(2, 1, dtype=torch.int32)), TypeError),
        (lambda: (torch.zeros(2, 8), torch.zeros(2, 1)), TypeError),
        (lambda: (torch.zeros(8), torch.zeros(1, 1, dtype=torch.int32)), ConfigError),
        (lambda: (torch.zeros(3, 8), torch.zeros(2, 1, dtype=torch.int32)), ConfigError),
    ],
)
def test_bad_arguments_raise(make, error):
    logits, bm = make()
    with pytest.raises(error):
        apply_token_bitmask_(logits, bm)
    with pytest.raises(ValueError):
        apply_token_bitmask_(torch.zeros(2, 8), torch.zeros(1, 1, dtype=torch.int32), torch.tensor([0, 1]))


def test_bad_indices_dtype_raises():
    with pytest.raises(TypeError):
        apply_token_bitmask_(torch.zeros(2, 8), torch.zeros(2, 1, dtype=torch.int32), torch.tensor([0.0]))


# ---------------------------------------------------------------- kernel vs reference (small)

CASES = [  # batch, vocab (may be padded), words, indices, index dtype
    (1, 1, 1, None, None),
    (1, 33, 2, None, None),
    (3, 100, 4, None, None),
    (3, 100, 3, None, None),  # padded lm_head: columns past 32 * words are masked
    (2, 64, 5, None, None),  # more words than needed
    (5, 4100, 129, [4, 0, 2], torch.int32),  # several blocks per row, a subset of rows
    (4, 77, 3, [1], torch.int64),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch,vocab,words,rows,index_dtype", CASES)
def test_kernel_matches_reference(kernel_device, dtype, batch, vocab, words, rows, index_dtype):
    logits = torch.randn(batch, vocab).to(dtype).to(kernel_device)
    bm = random_bitmask(max(batch, len(rows or [])), words, seed=vocab).to(kernel_device)
    indices = torch.tensor(rows, dtype=index_dtype, device=kernel_device) if rows is not None else None
    out, ref = logits.clone(), logits.clone()
    apply_token_bitmask_(out, bm, indices)
    apply_token_bitmask_ref(ref, bm, indices)
    assert torch.equal(out, ref)


def test_kernel_strided_logits(kernel_device):
    base = torch.randn(3, 80, device=kernel_device)
    logits = base[:, :70]  # row stride 80
    bm = random_bitmask(3, 3).to(kernel_device)
    ref = logits.clone()
    apply_token_bitmask_(logits, bm)
    apply_token_bitmask_ref(ref, bm)
    assert torch.equal(logits, ref) and torch.equal(base[:, 70:], base[:, 70:].clone())


# ---------------------------------------------------------------- GPU, real shapes


@pytest.mark.gpu
@pytest.mark.parametrize("vocab", [128256, 151936])
@pytest.mark.parametrize("batch", [1, 64, 256])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_real_shapes(vocab, batch, dtype):
    logits = torch.randn(batch, vocab + 256, device="cuda").to(dtype)  # padded lm_head
    bm = random_bitmask(batch, (vocab + 31) // 32).cuda()
    for indices in (None, torch.arange(0, batch, 2, dtype=torch.int32, device="cuda")):
        out, ref = logits.clone(), logits.clone()
        apply_token_bitmask_(out, bm, indices)
        apply_token_bitmask_ref(ref, bm, indices)
        assert torch.equal(out, ref)
