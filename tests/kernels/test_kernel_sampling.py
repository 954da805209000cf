"""fused_sample: reference semantics from first principles, kernel == reference token for token."""

from __future__ import annotations

import math

import pytest
import torch

from guided.errors import ConfigError
from guided.kernels.bitmask import allocate_token_bitmask, unpack_bitmask
from guided.kernels.gumbel import gumbel_ref, philox_uniform_ref
from guided.kernels.sampling import SampleOutput, fused_sample, fused_sample_ref


def params(batch, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=0, offset=0, device="cpu"):
    """Per-row tensors; each argument may be a scalar (broadcast) or a list."""

    def col(v, dtype):
        v = v if isinstance(v, list) else [v] * batch
        return torch.tensor(v, dtype=dtype, device=device)

    return dict(temperature=col(temperature, torch.float32), top_k=col(top_k, torch.int32),
                top_p=col(top_p, torch.float32), min_p=col(min_p, torch.float32),
                seeds=col(seed, torch.int64), offsets=col(offset, torch.int64))


def draws(logits_row, n, **kw):
    """n reference draws of one row, at offsets 0..n-1 (batched: rows are independent)."""
    logits = logits_row.expand(n, -1).contiguous()
    return fused_sample_ref(logits, **params(n, offset=list(range(n)), **kw)).token_ids


# ---------------------------------------------------------------- reference semantics


def test_philox_uniforms_are_uniform_and_keyed():
    u = philox_uniform_ref(torch.tensor([7, 7, 8]), torch.tensor([0, 1, 0]), 20000)
    assert u.dtype == torch.float32 and (u > 0).all() and (u < 1).all()
    assert abs(u[0].mean().item() - 0.5) < 0.01 and abs(u[0].std().item() - math.sqrt(1 / 12)) < 0.01
    assert not torch.equal(u[0], u[1]) and not torch.equal(u[0], u[2])
    assert torch.equal(u[0], philox_uniform_ref(torch.tensor([7]), torch.tensor([0]), 20000)[0])


def test_gumbel_noise_is_bounded_and_gumbel_distributed():
    g = gumbel_ref(torch.tensor([5]), torch.tensor([9]), 50000)[0].double()
    assert g.max() < 17.0 and torch.isfinite(g).all()
    assert abs(g.mean().item() - 0.5772) < 0.02 and abs(g.var().item() - math.pi**2 / 6) < 0.05


def test_philox_matches_known_answer():
    """Random123's Philox4x32-10 known-answer vector: counter 0, key 0 -> 0x6627e8d5."""
    u = philox_uniform_ref(torch.tensor([0]), torch.tensor([0]), 1)
    assert u.item() == ((0x6627E8D5 >> 9) + 0.5) * 2.0**-23


def test_greedy_is_argmax_lowest_id_on_ties():
    logits = torch.tensor([[0.0, 3.0, 1.0, 3.0], [5.0, 5.0, 5.0, 5.0]])
    out = fused_sample_ref(logits, **params(2, temperature=0.0, top_k=1, top_p=0.1))
    assert out.token_ids.tolist() == [1, 0]


def test_masked_tokens_are_never_sampled():
    logits = torch.zeros(1, 40)
    bm = torch.tensor([[0b1010, 0]], dtype=torch.int32)  # tokens 1 and 3 only
    tokens = set()
    for offset in range(200):
        out = fused_sample_ref(logits, **params(1, offset=offset), bitmask=bm)
        tokens.add(out.token_ids.item())
    assert tokens == {1, 3}


def test_bitmask_rows_minus_one_is_unconstrained_and_rows_are_selected():
    logits = torch.tensor([[0.0, 9.0, 1.0], [0.0, 9.0, 1.0]])
    bm = torch.tensor([[0b100], [0b001]], dtype=torch.int32)
    rows = torch.tensor([-1, 1], dtype=torch.int32)
    out = fused_sample_ref(logits, **params(2, temperature=0.0), bitmask=bm, bitmask_rows=rows)
    assert out.token_ids.tolist() == [1, 0]


def chi_square_ok(tokens, probs, n):
    counts = torch.bincount(tokens, minlength=len(probs)).double()
    expected = torch.tensor(probs, dtype=torch.float64) * n
    keep = expected > 0
    assert counts[~keep].sum() == 0, "a token outside the support was drawn"
    stat = ((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum().item()
    dof = int(keep.sum()) - 1
    return stat < dof + 5 * math.sqrt(2 * dof) + 5  # far beyond the 99.9th percentile


@pytest.mark.parametrize(
    "kw, probs",
    [
        ({}, [0.1, 0.2, 0.3, 0.4]),
        ({"temperature": 2.0}, None),  # probs computed below
        ({"top_k": 2}, [0, 0, 3 / 7, 4 / 7]),
        ({"top_p": 0.6}, [0, 0, 3 / 7, 4 / 7]),  # 0.4 < 0.6 <= 0.7
        ({"top_p": 0.4}, [0, 0, 0, 1]),
        ({"min_p": 0.6}, [0, 0, 3 / 7, 4 / 7]),  # 0.3 >= 0.6 * 0.4
        ({"top_k": 3, "top_p": 0.5}, [0, 0, 3 / 7, 4 / 7]),  # top-p renormalised over top-k: 4/9 < .5
    ],
)
def test_draws_follow_the_filtered_distribution(kw, probs):
    base = torch.tensor([0.1, 0.2, 0.3, 0.4]).log()
    if probs is None:
        probs = (base / 2.0).softmax(0).tolist()
    n = 20000
    assert chi_square_ok(draws(base[None, :], n, **kw), probs, n)


def kept_by_definition(z, k, p, min_p):
    """The kept set of one row, straight from the module docstring, in plain Python."""
    values = sorted(z.tolist(), reverse=True)
    zmax = values[0]
    t_k = values[k - 1] if 0 < k < len(values) else -math.inf
    survivors = [v for v in values if v >= t_k]
    weights = [float(torch.exp(torch.tensor(v - zmax, dtype=torch.float32))) for v in survivors]
    t_p, total, cum = -math.inf, math.fsum(weights), 0.0
    if p < 1.0:
        for v, w in zip(survivors, weights, strict=True):
            cum += w
            if cum >= p * total:
                t_p = v
                break
    t_m = float(torch.tensor(zmax) + torch.log(torch.tensor(min_p))) if min_p > 0 else -math.inf
    threshold = min(max(t_k, t_p, t_m), zmax)
    return {i for i, v in enumerate(z.tolist()) if v >= threshold}


@pytest.mark.parametrize("seed", range(12))
def test_reference_kept_sets_match_the_definition(seed):
    """Draws from many offsets land exactly on the kept set the definition gives (ties included)."""
    gen = torch.Generator().manual_seed(seed)
    vocab = 12
    z = torch.randint(-2, 3, (vocab,), generator=gen).float() if seed % 2 else torch.randn(vocab, generator=gen)
    k = [0, 1, 3, 5][seed % 4]
    p = [1.0, 0.5, 0.8, 0.3][seed // 3 % 4]
    min_p = [0.0, 0.2][seed % 3 == 0]
    expected = kept_by_definition(z, k, p, min_p)
    drawn = set(draws(z[None, :], 600, top_k=k, top_p=p, min_p=min_p).tolist())
    assert drawn <= expected
    probs = torch.softmax(z, 0)
    likely = {i for i in expected if probs[i] / probs[list(expected)].sum() > 0.03}
    assert likely <= drawn


def test_top_p_keeps_ties_at_the_threshold():
    base = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])
    tokens = draws(base, 2000, top_p=0.3)  # the first tied token reaches 0.3: all ties kept
    assert set(tokens.tolist()) == {0, 1, 2, 3}
    tokens = draws(base, 2000, top_k=2)
    assert set(tokens.tolist()) == {0, 1, 2, 3}


def test_rows_are_reproducible_and_independent_of_the_batch():
    torch.manual_seed(0)
    logits = torch.randn(6, 50)
    kw = params(6, temperature=[0.7, 1.0, 1.5, 1.0, 0.9, 1.2], top_k=[0, 5, 0, 0, 10, 3],
                top_p=[1.0, 0.9, 0.8, 1.0, 0.95, 1.0], min_p=[0.0, 0.0, 0.1, 0.0, 0.0, 0.2],
                seed=[11, 12, 13, 14, 15, 16], offset=[3, 4, 5, 6, 7, 8])
    full = fused_sample_ref(logits, **kw).token_ids
    assert torch.equal(full, fused_sample_ref(logits, **kw).token_ids)
    for i in range(6):
        one = fused_sample_ref(logits[i : i + 1], **{k: v[i : i + 1] for k, v in kw.items()}).token_ids
        assert one.item() == full[i].item()


def test_logprobs_are_log_softmax_of_masked_logits_at_temperature_one():
    torch.manual_seed(1)
    logits = torch.randn(3, 70)
    bm = allocate_token_bitmask(3, 70)
    bm[1, 0] = 0x0F0F0F0F
    out = fused_sample_ref(logits, **params(3, temperature=[0.0, 0.5, 2.0]), bitmask=bm, num_logprobs=5,
                           return_logprob=True)
    masked = logits.masked_fill(~unpack_bitmask(bm, 70), float("-inf"))
    lp = masked.log_softmax(dim=1)
    torch.testing.assert_close(out.logprobs, lp.gather(1, out.token_ids[:, None]).squeeze(1))
    torch.testing.assert_close(out.top_logprobs, lp.topk(5, dim=1).values)
    assert out.top_ids.dtype == torch.int64 and out.top_ids.shape == (3, 5)


def test_outputs_absent_unless_requested():
    out = fused_sample_ref(torch.randn(2, 10), **params(2))
    assert isinstance(out, SampleOutput) and out.token_ids.dtype == torch.int64
    assert out.logprobs is None and out.top_ids is None and out.top_logprobs is None


@pytest.mark.parametrize(
    "change, error",
    [
        (lambda a: {**a, "top_k": a["top_k"].long()}, ConfigError),
        (lambda a: {**a, "temperature": a["temperature"][:1]}, ConfigError),
        (lambda a: {**a, "logits": a["logits"].int()}, TypeError),
        (lambda a: {**a, "bitmask_rows": torch.zeros(2, dtype=torch.int32)}, ConfigError),
        (lambda a: {**a, "num_logprobs": 11}, ConfigError),
        (lambda a: {**a, "bitmask": torch.zeros(1, 1, dtype=torch.int32)}, ConfigError),  # 1 row, batch 2
    ],
)
def test_bad_arguments_raise(change, error):
    args = dict(logits=torch.randn(2, 10), **params(2))
    with pytest.raises(error):
        fused_sample(**change(args))


# ---------------------------------------------------------------- kernel vs reference (small)


def mixed_batch(vocab, dtype, device, ties=False, seed=0):
    gen = torch.Generator().manual_seed(seed)
    batch = 12
    if ties:  # few distinct values: threshold ties everywhere
        logits = torch.randint(-3, 3, (batch, vocab), generator=gen).float()
    else:
        logits = torch.randn(batch, vocab, generator=gen) * 3
    kw = params(
        batch,
        temperature=[0.0, 1.0, 0.7, 1.3, 1.0, 1.0, 0.5, 2.0, 0.0, 1.0, 1.0, 0.8],
        top_k=[0, 0, 5, 0, 3, 0, 10, 1, 4, 0, vocab, 2],
        top_p=[1.0, 1.0, 1.0, 0.8, 1.0, 0.5, 0.9, 1.0, 0.3, 0.95, 0.0, 0.7],
        min_p=[0.0, 0.0, 0.0, 0.0, 0.1, 0.0, 0.05, 0.0, 0.0, 0.3, 0.0, 0.0],
        seed=[(i * 1234567891011 - 5) for i in range(batch)],
        offset=[i + (1 << 33) for i in range(batch)],
        device=device,
    )
    words = (vocab + 31) // 32
    bm = torch.randint(-(2**31), 2**31 - 1, (3, words), dtype=torch.int32, generator=gen)
    bm[2] = 0
    bm[2, 0] = 0b1000  # a row allowing one token
    rows = torch.tensor([0, -1, 1, 2, -1, 0, 1, -1, 0, 1, 2, -1], dtype=torch.int32)
    return logits.to(dtype).to(device), kw, bm.to(device), rows.to(device)


def assert_same(out: SampleOutput, ref: SampleOutput):
    assert torch.equal(out.token_ids, ref.token_ids), (out.token_ids, ref.token_ids)
    if ref.logprobs is not None:
        torch.testing.assert_close(out.logprobs, ref.logprobs, atol=1e-5, rtol=1e-5)
    if ref.top_ids is not None:
        assert torch.equal(out.top_ids, ref.top_ids)
        torch.testing.assert_close(out.top_logprobs, ref.top_logprobs, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "dtype,vocab", [(torch.float32, 77), (torch.bfloat16, 77), (torch.float16, 77), (torch.float32, 1100)]
)
def test_kernel_matches_reference(kernel_device, dtype, vocab):
    logits, kw, bm, rows = mixed_batch(vocab, dtype, kernel_device, seed=vocab)
    for bitmask, bitmask_rows in ((None, None), (bm, rows)):
        out = fused_sample(logits, **kw, bitmask=bitmask, bitmask_rows=bitmask_rows, num_logprobs=3,
                           return_logprob=True)
        ref = fused_sample_ref(logits, **kw, bitmask=bitmask, bitmask_rows=bitmask_rows, num_logprobs=3,
                               return_logprob=True)
        assert_same(out, ref)


def test_kernel_matches_reference_on_ties(kernel_device):
    logits, kw, bm, rows = mixed_batch(70, torch.float32, kernel_device, ties=True)
    out = fused_sample(logits, **kw, bitmask=bm, bitmask_rows=rows, num_logprobs=6, return_logprob=True)
    ref = fused_sample_ref(logits, **kw, bitmask=bm, bitmask_rows=rows, num_logprobs=6, return_logprob=True)
    assert_same(out, ref)


def test_kernel_many_offsets_batch1(kernel_device):
    """One row drawn at many offsets (batch 1 each) agrees with the batched reference."""
    logits = torch.randn(1, 45, generator=torch.Generator().manual_seed(3)).to(kernel_device)
    for kw in ({}, {"top_k": 6, "top_p": 0.85, "min_p": 0.02, "temperature": 0.9}):
        ref = draws(logits.cpu(), 16, **kw)
        for offset in range(16):
            one = fused_sample(logits, **params(1, offset=offset, device=kernel_device, **kw)).token_ids
            assert one.item() == ref[offset].item()


def test_kernel_skips_hopeless_chunks_exactly(kernel_device):
    """Rows whose best logits sit in one chunk (the kernel skips noise elsewhere) or in the last."""
    vocab = 2100  # three chunks of BLOCK_V
    logits = torch.zeros(4, vocab)
    logits[0, 5] = logits[0, 9] = 40.0  # first chunk decides; later chunks are skipped
    logits[1, 2090] = logits[1, 2095] = 40.0  # last chunk wins: nothing may be skipped wrongly
    logits[2, 1500] = 25.0
    logits[3, 100] = logits[3, 2050] = 30.0
    logits = logits.to(kernel_device)
    for kw in ({}, {"top_k": 3}, {"top_p": 0.99}):
        for offset in range(2):
            args = params(4, offset=offset, seed=[1, 2, 3, 4], device=kernel_device, **kw)
            assert_same(fused_sample(logits, **args), fused_sample_ref(logits, **args))


def test_kernel_fully_masked_row(kernel_device):
    logits = torch.randn(2, 40, device=kernel_device)
    bm = torch.zeros(1, 2, dtype=torch.int32, device=kernel_device)
    rows = torch.tensor([0, 0], dtype=torch.int32, device=kernel_device)
    kw = params(2, temperature=[0.0, 1.0], top_p=0.9, device=kernel_device)
    out = fused_sample(logits, **kw, bitmask=bm, bitmask_rows=rows, num_logprobs=2, return_logprob=True)
    ref = fused_sample_ref(logits, **kw, bitmask=bm, bitmask_rows=rows, num_logprobs=2, return_logprob=True)
    assert_same(out, ref)
    assert out.token_ids.tolist() == [0, 0] and (out.logprobs == float("-inf")).all()


def test_small_batches_split_the_first_pass():
    from guided.kernels.sampling import _num_splits

    cpu = torch.device("cpu")
    assert _num_splits(12, 1100, cpu) == 2  # test_kernel_matches_reference[..-1100] takes the split path
    assert _num_splits(4, 2100, cpu) == 2  # 3 wanted, rounded down to a power of two
    assert _num_splits(64, 100000, cpu) == 1  # the batch fills the target
    assert _num_splits(1, 77, cpu) == 1  # one chunk: nothing to split
    # the split count is a kernel constant: powers of two only, so batch sizes 1..263 compile a handful
    assert {_num_splits(b, 128256, cpu) for b in range(1, 264)} <= {1, 2, 4, 8, 16, 32}


# ---------------------------------------------------------------- GPU, real shapes


@pytest.mark.gpu
@pytest.mark.parametrize("vocab", [128256, 151936])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_real_shapes(vocab, dtype):
    """Greedy rows exactly; seeded rows agree with the reference on nearly every row (the GPU's
    exp/log differ from torch's in the last bits, which can flip a near-tie)."""
    batch = 64
    gen = torch.Generator().manual_seed(vocab)
    logits = (torch.randn(batch, vocab, generator=gen) * 4).to(dtype).cuda()
    temps = [0.0 if i % 4 == 0 else 0.6 + 0.01 * i for i in range(batch)]
    kw = params(batch, temperature=temps, top_k=[[0, 50, 0, 1000][i % 4] for i in range(batch)],
                top_p=[[1.0, 0.9, 0.95, 1.0][i % 4] for i in range(batch)], min_p=[0.0] * 63 + [0.05],
                seed=list(range(batch)), offset=7, device="cuda")
    bm = torch.randint(-(2**31), 2**31 - 1, (batch, (vocab + 31) // 32), dtype=torch.int32).cuda()
    rows = torch.arange(batch, dtype=torch.int32, device="cuda")
    rows[::3] = -1
    out = fused_sample(logits, **kw, bitmask=bm, bitmask_rows=rows, num_logprobs=5, return_logprob=True)
    ref = fused_sample_ref(logits, **kw, bitmask=bm, bitmask_rows=rows, num_logprobs=5, return_logprob=True)
    greedy = kw["temperature"] == 0
    assert torch.equal(out.token_ids[greedy], ref.token_ids[greedy])
    assert (out.token_ids == ref.token_ids).float().mean() >= 0.95
    torch.testing.assert_close(out.top_logprobs, ref.top_logprobs, atol=1e-4, rtol=1e-4)
    allowed = unpack_bitmask(bm, vocab)[rows.long().clamp(min=0)] | (rows < 0)[:, None]
    assert allowed.gather(1, out.token_ids[:, None]).all()
