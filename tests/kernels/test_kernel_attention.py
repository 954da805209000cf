"""paged_attention: the reference against dense SDPA, the kernel against the reference.

Tolerances (max abs error on outputs of unit-variance inputs): fp32 1e-4, fp16 4e-3, bf16 3e-2.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from guided.errors import ConfigError
from guided.kernels.attention import paged_attention, paged_attention_ref

ATOL = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}


class Batch:
    """A packed batch over a paged cache whose blocks are shuffled and whose tables have holes."""

    def __init__(self, q_lens, seq_lens, heads, kv_heads, head_dim, block_size, dtype, device="cpu", seed=0):
        gen = torch.Generator().manual_seed(seed)
        blocks_per_seq = [math.ceil(n / block_size) for n in seq_lens]
        num_blocks = sum(blocks_per_seq) + 3  # a few blocks nobody uses
        max_blocks = max(blocks_per_seq, default=0) + 2  # table entries past the used ones are holes

        def rand(*shape):
            return torch.randn(*shape, generator=gen).to(dtype).to(device)

        self.k_cache = rand(num_blocks, block_size, kv_heads, head_dim)
        self.v_cache = rand(num_blocks, block_size, kv_heads, head_dim)
        order = torch.randperm(num_blocks, generator=gen).tolist()
        self.block_tables = torch.full((len(seq_lens), max_blocks), -1, dtype=torch.int32)
        for i, n in enumerate(blocks_per_seq):
            self.block_tables[i, :n] = torch.tensor(order[:n], dtype=torch.int32)
            order = order[n:]
        self.block_tables = self.block_tables.to(device)
        self.cu_seqlens_q = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32,
                                         device=device)
        self.seq_lens = torch.tensor(seq_lens, dtype=torch.int32, device=device)
        self.q = rand(sum(q_lens), heads, head_dim)
        self.scale = head_dim**-0.5
        self.max_seqlen_q = max(q_lens, default=0)

    def args(self):
        return (self.q, self.k_cache, self.v_cache, self.block_tables, self.cu_seqlens_q, self.seq_lens,
                self.scale)


def dense_oracle(batch: Batch, window: int | None = None) -> torch.Tensor:
    """Per sequence: gather K/V contiguously, SDPA with an explicit causal mask at the offsets (and
    the sliding window's lower bound)."""
    out = torch.zeros_like(batch.q, dtype=torch.float32)
    for rows, q, k, v, mask in _dense(batch, window):
        out[rows] = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=batch.scale).transpose(0, 1)
    return out


def _dense(batch: Batch, window: int | None):
    """Per sequence with queries: (its rows of q, q [heads, q_len, d], K and V gathered contiguously and
    repeated to the query heads [heads, n, d], the causal (and window) mask [q_len, n])."""
    block_size = batch.k_cache.shape[1]
    cu = batch.cu_seqlens_q.tolist()
    for i, n in enumerate(batch.seq_lens.tolist()):
        q = batch.q[cu[i] : cu[i + 1]].float().cpu().transpose(0, 1)  # [heads, q_len, d]
        if q.shape[1] == 0:
            continue
        slots = torch.arange(n)
        blocks = batch.block_tables[i].cpu()[slots // block_size].long()
        k = batch.k_cache.cpu()[blocks, slots % block_size].float().transpose(0, 1)  # [kv_heads, n, d]
        v = batch.v_cache.cpu()[blocks, slots % block_size].float().transpose(0, 1)
        group = q.shape[0] // k.shape[0]
        pos = torch.arange(n - q.shape[1], n)
        mask = torch.arange(n)[None, :] <= pos[:, None]
        if window is not None:
            mask &= torch.arange(n)[None, :] > pos[:, None] - window
        yield slice(cu[i], cu[i + 1]), q, k.repeat_interleave(group, 0), v.repeat_interleave(group, 0), mask


CASES = {  # q_lens, seq_lens, heads, kv_heads, head_dim, block_size
    "decode-ragged": ([1, 1, 1, 1], [1, 5, 17, 40], 4, 2, 16, 4),
    "decode-batch1": ([1], [33], 2, 2, 32, 16),
    "decode-split-k": ([1, 1, 1], [300, 7, 130], 8, 2, 32, 16),  # key ranges split, some empty
    "prefill": ([13, 7], [13, 7], 4, 4, 16, 4),
    "extend-prefix": ([5, 20], [37, 28], 8, 2, 32, 8),
    "mixed-gqa": ([1, 9, 1, 0, 3], [30, 9, 2, 4, 19], 8, 2, 24, 4),  # odd head_dim, empty query
    "mqa": ([2, 1], [6, 70], 4, 1, 64, 16),
    "long-chunk": ([70], [90], 6, 2, 32, 16),  # several query tiles and key blocks
}


@pytest.mark.parametrize("case", CASES)
def test_reference_matches_dense_sdpa(case):
    batch = Batch(*CASES[case], dtype=torch.float32)
    torch.testing.assert_close(paged_attention_ref(*batch.args()), dense_oracle(batch), atol=1e-5, rtol=1e-5)


def test_reference_decode_is_full_attention_over_context():
    batch = Batch([1], [9], 1, 1, 4, 4, torch.float32)
    k = batch.k_cache[batch.block_tables[0, :3].long()].flatten(0, 1)[:9, 0]  # [9, 4]
    v = batch.v_cache[batch.block_tables[0, :3].long()].flatten(0, 1)[:9, 0]
    probs = (batch.q[0, 0] @ k.T * batch.scale).softmax(0)
    torch.testing.assert_close(paged_attention_ref(*batch.args())[0, 0], probs @ v)


@pytest.mark.parametrize(
    "change, error",
    [
        (lambda a: {**a, "seq_lens": a["seq_lens"].long()}, TypeError),
        (lambda a: {**a, "q": a["q"][:, :3]}, ConfigError),  # 3 heads over 2 kv heads
        (lambda a: {**a, "k_cache": a["k_cache"].half()}, TypeError),
        (lambda a: {**a, "cu_seqlens_q": a["cu_seqlens_q"][:-1]}, ConfigError),
        (lambda a: {**a, "block_tables": a["block_tables"][:1]}, ConfigError),
    ],
)
def test_bad_arguments_raise(change, error):
    batch = Batch([1, 1], [3, 4], 4, 2, 8, 4, torch.float32)
    names = ("q", "k_cache", "v_cache", "block_tables", "cu_seqlens_q", "seq_lens", "scale")
    with pytest.raises(error):
        paged_attention(**change(dict(zip(names, batch.args(), strict=True))))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", CASES)
def test_kernel_matches_reference(kernel_device, case, dtype):
    batch = Batch(*CASES[case], dtype=dtype, device=kernel_device, seed=len(case))
    ref = paged_attention_ref(*batch.args())
    for hint in (None, batch.max_seqlen_q):  # the tile-size hint never changes the result
        out = paged_attention(*batch.args(), max_seqlen_q=hint)
        assert out.dtype == dtype and out.shape == batch.q.shape
        torch.testing.assert_close(out.float(), ref.float(), atol=ATOL[dtype], rtol=0)


WINDOWS = {  # case, window: decodes whose window starts mid-split, chunks straddling it, window 1
    "decode-split-k": 50, "extend-prefix": 7, "long-chunk": 20, "mixed-gqa": 3, "decode-ragged": 1, "prefill": 64,
}  # fmt: skip


@pytest.mark.parametrize("case", WINDOWS)
def test_reference_with_a_sliding_window_matches_dense_sdpa(case):
    batch = Batch(*CASES[case], dtype=torch.float32)
    out = paged_attention_ref(*batch.args(), window=WINDOWS[case])
    torch.testing.assert_close(out, dense_oracle(batch, WINDOWS[case]), atol=1e-5, rtol=1e-5)
    if case == "long-chunk":  # the window changes the result
        assert not torch.allclose(out, dense_oracle(batch), atol=1e-3)


@pytest.mark.parametrize("case", WINDOWS)
def test_kernel_with_a_sliding_window_matches_reference(kernel_device, case):
    batch = Batch(*CASES[case], dtype=torch.float32, device=kernel_device, seed=len(case))
    ref = paged_attention_ref(*batch.args(), window=WINDOWS[case])
    for hint in (None, batch.max_seqlen_q):
        out = paged_attention(*batch.args(), max_seqlen_q=hint, window=WINDOWS[case])
        torch.testing.assert_close(out, ref, atol=ATOL[torch.float32], rtol=0)
    with pytest.raises(ConfigError, match="window"):
        paged_attention(*batch.args(), window=0)


def test_split_k_is_chosen_for_small_decode_grids():
    from guided.kernels.attention import _num_kv_splits

    assert _num_kv_splits(6, 336, 64, torch.device("cpu")) == 2  # 3 wanted, rounded down to a power of two
    assert _num_kv_splits(64, 336, 64, torch.device("cpu")) == 1  # the grid is already full
    assert _num_kv_splits(1, 64, 64, torch.device("cpu")) == 1  # one key block: nothing to split
    # the split count is a kernel constant: powers of two only, so batch sizes 1..263 compile a handful
    counts = {_num_kv_splits(b, 4096, 64, torch.device("cpu")) for b in range(1, 264)}
    assert counts <= {1, 2, 4, 8, 16}


# ---------------------------------------------------------------- GPU, real shapes


GPU_CASES = {
    "decode-b32-4k-d128": ([1] * 32, [4096 + 37 * i for i in range(32)], 32, 8, 128, 16),
    "decode-b8-32k-d64": ([1] * 8, [32768 - 5 * i for i in range(8)], 16, 4, 64, 16),  # split-K
    "decode-b1-32k-d128": ([1], [32768], 32, 8, 128, 16),  # split-K
    "prefill-2k-d128": ([2048, 1000], [2048, 1000], 32, 8, 128, 16),
    "extend-mixed-d64": ([1, 512, 1, 77], [9000, 4096, 300, 1600], 16, 2, 64, 32),
}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", GPU_CASES)
def test_gpu_real_shapes(case, dtype):
    batch = Batch(*GPU_CASES[case], dtype=dtype, device="cuda")
    out = paged_attention(*batch.args(), max_seqlen_q=batch.max_seqlen_q)
    ref = paged_attention_ref(*batch.args())
    torch.testing.assert_close(out.float(), ref.float(), atol=ATOL[dtype], rtol=0)


def sinks_oracle(batch: Batch, sinks: torch.Tensor, window: int | None = None) -> torch.Tensor:
    """Per sequence and head, dense: the scaled scores and the head's sink logit in one softmax, the
    sink's weight dropped (gpt-oss's eager attention in transformers)."""
    out = torch.zeros_like(batch.q, dtype=torch.float32)
    for rows, q, k, v, mask in _dense(batch, window):
        scores = (q @ k.transpose(1, 2) * batch.scale).masked_fill(~mask, float("-inf"))
        sink = sinks.float().cpu()[:, None, None].expand(-1, q.shape[1], 1)
        probs = torch.cat([scores, sink], dim=-1).softmax(-1)[..., :-1]
        out[rows] = (probs @ v).transpose(0, 1)
    return out


SINK_CASES = {"decode-ragged": None, "decode-split-k": 50, "extend-prefix": None, "mixed-gqa": 3, "long-chunk": 20}


@pytest.mark.parametrize("case", SINK_CASES)
def test_reference_with_sinks_matches_the_dense_softmax(case):
    batch = Batch(*CASES[case], dtype=torch.float32)
    sinks = torch.linspace(-2.0, 3.0, batch.q.shape[1])
    out = paged_attention_ref(*batch.args(), window=SINK_CASES[case], sinks=sinks)
    torch.testing.assert_close(out, sinks_oracle(batch, sinks, SINK_CASES[case]), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(out, paged_attention_ref(*batch.args(), window=SINK_CASES[case]), atol=1e-3)


@pytest.mark.parametrize("case", SINK_CASES)
def test_kernel_with_sinks_matches_reference(kernel_device, case):
    """Sinks with decodes (split into key ranges too: the sink counts once), chunks and windows."""
    batch = Batch(*CASES[case], dtype=torch.float32, device=kernel_device, seed=len(case))
    sinks = torch.linspace(-2.0, 3.0, batch.q.shape[1], device=kernel_device)
    ref = paged_attention_ref(*batch.args(), window=SINK_CASES[case], sinks=sinks)
    for hint in (None, batch.max_seqlen_q):
        out = paged_attention(*batch.args(), max_seqlen_q=hint, window=SINK_CASES[case], sinks=sinks)
        torch.testing.assert_close(out, ref, atol=ATOL[torch.float32], rtol=0)
    with pytest.raises(ConfigError, match="sinks"):
        paged_attention(*batch.args(), sinks=sinks[:-1])
