"""Grouped GEMM for mixtures of experts: every expert's tokens times that expert's weight, one launch.

Rows arrive sorted by expert (``moe_align``): expert ``e`` owns ``counts[e]`` consecutive rows. Each
expert's rows are cut into tiles of ``BLOCK_M``; a program takes one (tile, block of output
columns), finds its expert by binary search over the tiles' prefix sums (on the device: no host
sync, and the grid is an upper bound, ``ceil(R / BLOCK_M) + E`` tiles, whose spare programs load and
store nothing), and multiplies ``BLOCK_M`` rows by that expert's ``[N, K]`` weight. The first GEMM of an
expert MLP gathers its rows straight from the tokens (``rows``: the token of each sorted row), so
the routed copies of the hidden states are never written.
"""

from __future__ import annotations

import torch

from guided.errors import ConfigError

from ._triton import jit, next_power_of_2, tl, use_triton

__all__ = ["grouped_gemm", "grouped_gemm_ref", "moe_align", "runs_kernel"]


@jit
def _grouped_gemm_kernel(
    a_ptr,  # [T, K]: rows of the input (gathered through rows_ptr when GATHER)
    b_ptr,  # [E, N, K]: each expert's weight
    c_ptr,  # [R, N]: output, rows sorted by expert
    rows_ptr,  # [R] int64: the input row of each output row (GATHER)
    row_off_ptr,  # [E + 1] int64: expert e's output rows are row_off[e]:row_off[e + 1]
    tile_off_ptr,  # [E + 1] int64: expert e's tiles are tile_off[e]:tile_off[e + 1]
    num_experts,
    N,
    K,
    stride_am,
    stride_be,
    stride_bn,
    stride_cm,
    GATHER: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,  # bf16 under the CPU interpreter only
):
    tile = tl.program_id(0)
    lo = tl.full([], 0, tl.int32)  # the last expert whose first tile is <= tile
    hi = tl.full([], 0, tl.int32) + num_experts
    while lo < hi:
        mid = (lo + hi) // 2
        if tl.load(tile_off_ptr + mid) <= tile:
            lo = mid + 1
        else:
            hi = mid
    expert = tl.maximum(lo - 1, 0)
    live = tile < tl.load(tile_off_ptr + num_experts)  # spare programs of the upper-bound grid store nothing
    start = tl.load(row_off_ptr + expert) + (tile - tl.load(tile_off_ptr + expert)) * BLOCK_M
    end = tl.load(row_off_ptr + expert + 1)
    offs_m = start + tl.arange(0, BLOCK_M)
    m_ok = (offs_m < end) & live
    if GATHER:
        a_rows = tl.load(rows_ptr + offs_m, mask=m_ok, other=0)
    else:
        a_rows = offs_m
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    b_base = b_ptr + expert.to(tl.int64) * stride_be
    # a spare program runs no loop: the grid's ~E spare tiles would each read a block of some expert's weight
    for k0 in range(0, tl.where(live, K, 0), BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_ok = offs_k < K
        a = tl.load(a_ptr + a_rows.to(tl.int64)[:, None] * stride_am + offs_k[None, :],
                    mask=m_ok[:, None] & k_ok[None, :], other=0.0)  # fmt: skip
        b = tl.load(b_base + offs_n[None, :].to(tl.int64) * stride_bn + offs_k[:, None],
                    mask=k_ok[:, None] & n_ok[None, :], other=0.0)  # [BLOCK_K, BLOCK_N]  # fmt: skip
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc += tl.dot(a, b, input_precision=DOT_PRECISION)
    c_ptrs = c_ptr + offs_m.to(tl.int64)[:, None] * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


def runs_kernel(tensor: torch.Tensor) -> bool:
    """Whether ``grouped_gemm`` launches the kernel for ``tensor`` (CUDA, or the CPU interpreter)."""
    return use_triton(tensor, _grouped_gemm_kernel)


def moe_align(chosen: torch.Tensor, num_experts: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The routed (token, slot) pairs sorted by expert: ``chosen`` ``[tokens, top_k]`` expert ids ->
    (``order``: indices into ``chosen.flatten()``, ``rows``: the token of each, ``counts`` ``[E]``).
    Stable, so an expert's tokens keep their order."""
    flat = chosen.flatten()
    order = torch.argsort(flat, stable=True)
    return order, order // chosen.shape[1], torch.bincount(flat, minlength=num_experts)


def grouped_gemm_ref(a: torch.Tensor, b: torch.Tensor, counts: torch.Tensor,
                     rows: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """Pure-torch reference of :func:`grouped_gemm`: one matmul per expert, fp32 accumulation."""
    _check(a, b, counts, rows)
    src = a if rows is None else a[rows]
    out = torch.empty(src.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    start = 0
    for e, n in enumerate(counts.tolist()):
        out[start : start + n] = (src[start : start + n].float() @ b[e].float().T).to(a.dtype)
        start += n
    return out


def grouped_gemm(a: torch.Tensor, b: torch.Tensor, counts: torch.Tensor, rows: torch.Tensor | None = None,
                 block_m: int | None = None) -> torch.Tensor:  # fmt: skip
    """Each expert's rows times its weight: output row ``r`` (of expert ``e``, the rows sorted by expert,
    ``counts[e]`` each) is ``a[rows[r]] @ b[e].T`` (``a[r]`` without ``rows``).

    Parameters
    ----------
    a : torch.Tensor
        ``[T, K]`` fp32/bf16/fp16, rows contiguous.
    b : torch.Tensor
        ``[E, N, K]``, same dtype, the last dimension contiguous (an expert's ``nn.Linear`` weight).
    counts : torch.Tensor
        ``[E]`` integer rows per expert; they sum to the number of output rows.
    rows : torch.Tensor, optional
        ``[R]`` integer: the row of ``a`` behind each output row (``moe_align``'s ``rows``).
    block_m : int, optional
        Rows per tile (a power of two >= 16); chosen from the average rows per expert otherwise.

    Returns
    -------
    torch.Tensor
        ``[R, N]`` in ``a``'s dtype (fp32 accumulation).
    """
    _check(a, b, counts, rows)
    if not use_triton(a, _grouped_gemm_kernel):
        return grouped_gemm_ref(a, b, counts, rows)
    num_rows = a.shape[0] if rows is None else rows.shape[0]
    num_experts, n, k = b.shape
    out = torch.empty(num_rows, n, dtype=a.dtype, device=a.device)
    if num_rows == 0 or n == 0:
        return out
    if block_m is None:
        block_m = min(64, max(16, next_power_of_2(-(-num_rows // num_experts))))
    counts = counts.to(torch.int64)
    row_off = torch.zeros(num_experts + 1, dtype=torch.int64, device=a.device)
    torch.cumsum(counts, 0, out=row_off[1:])
    tile_off = torch.zeros_like(row_off)
    torch.cumsum((counts + block_m - 1) // block_m, 0, out=tile_off[1:])
    upcast = a.dtype == torch.bfloat16 and not a.is_cuda
    block_n = 64 if n >= 64 else max(16, next_power_of_2(n))
    block_k = 64 if k >= 64 else max(16, next_power_of_2(k))
    max_tiles = -(-num_rows // block_m) + num_experts  # >= the tiles of any split of the rows
    rows64 = rows.to(torch.int64) if rows is not None else row_off  # (unread without GATHER)
    _grouped_gemm_kernel[(max_tiles, -(-n // block_n))](
        a, b, out, rows64, row_off, tile_off, num_experts, n, k,
        a.stride(0), b.stride(0), b.stride(1), out.stride(0),
        GATHER=rows is not None, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
        DOT_PRECISION="ieee" if a.dtype == torch.float32 or upcast else "tf32", UPCAST=upcast,
        num_warps=4, num_stages=2,
    )  # fmt: skip
    return out


def _check(a: torch.Tensor, b: torch.Tensor, counts: torch.Tensor, rows: torch.Tensor | None) -> None:
    if a.dim() != 2 or b.dim() != 3 or a.shape[1] != b.shape[2]:
        raise ConfigError(f"grouped_gemm needs a [T, K] and b [E, N, K], got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise TypeError(f"a and b must share a dtype, got {a.dtype} and {b.dtype}")
    if a.stride(1) != 1 or b.stride(2) != 1:
        raise ConfigError("grouped_gemm needs a's and b's last dimension contiguous")
    if counts.shape != (b.shape[0],):
        raise ConfigError(f"counts must have one entry per expert ({b.shape[0]}), got {tuple(counts.shape)}")
    if rows is not None and rows.dim() != 1:
        raise ConfigError("rows must be one-dimensional")
