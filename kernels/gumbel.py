"""Gumbel noise from Philox4x32-10: the Triton device function and its exact torch mirror.

Counter-based, so a row's noise is a pure function of (seed, offset, token): no global RNG state,
no host sync, the same numbers in any batch. Token ``4g + w`` takes output word ``w`` of Philox at
counter ``(g, offset_lo, offset_hi, 0)`` keyed by the 64-bit seed (``tl.philox``, Random123's
Philox4x32-10), ``u = ((r >> 9) + 0.5) / 2**23`` and ``g = -log(E)`` with ``E = -log(u)``.
"""

from __future__ import annotations

import torch

from ._triton import jit, tl

__all__ = ["GUMBEL_MAX", "gumbel_ref", "philox_uniform_ref"]

GUMBEL_MAX = 17.0  # > -log(-log(u)) for every u the generator can produce (max 16.64)
_M32 = 0xFFFFFFFF
_PHILOX_ROUND_A, _PHILOX_ROUND_B = 0xD2511F53, 0xCD9E8D57
_PHILOX_KEY_A, _PHILOX_KEY_B = 0x9E3779B9, 0xBB67AE85


@jit
def _gumbel(seed, offset, start, BLOCK: tl.constexpr):
    """Gumbel noise of tokens ``start + [0, BLOCK)`` (start a multiple of 4).

    One Philox4x32-10 call per 4 tokens: counter (token // 4, offset_lo, offset_hi, 0), key = the
    seed; token 4g + w takes output word w.
    """
    groups = start // 4 + tl.arange(0, BLOCK // 4)  # [BLOCK / 4]
    zero = tl.zeros_like(groups).to(tl.uint32)
    offset_lo = zero + (offset & 0xFFFFFFFF).to(tl.uint32)
    offset_hi = zero + ((offset >> 32) & 0xFFFFFFFF).to(tl.uint32)
    r0, r1, r2, r3 = tl.philox(seed, groups.to(tl.uint32), offset_lo, offset_hi, zero)
    # join adds a minor dim: [G, 2, 2] holds (r0, r1, r2, r3) of group g in row-major order
    r = tl.reshape(tl.join(tl.join(r0, r2), tl.join(r1, r3)), [BLOCK])
    # 23 random bits -> u = (k + 0.5) / 2^23 in (0, 1); u and 1 - u are exact in fp32
    u = ((r >> 9).to(tl.float32) + 0.5) * 1.1920928955078125e-07
    v = 1.0 - u
    # E = -log(u) ~ Exp(1); near u = 1 a series in v keeps E's relative precision (and E > 0)
    e = tl.where(v < 0.0078125, v * (1.0 + v * (0.5 + v * 0.3333333432674408)), -tl.log(u))
    return -tl.log(e)


def philox_uniform_ref(seeds: torch.Tensor, offsets: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The kernel's uniforms in pure torch: f32 ``[B, vocab_size]`` in (0, 1).

    Philox4x32-10 (as ``tl.philox``, Random123's) keyed by each row's 64-bit seed, at counter
    ``(token // 4, offset_lo, offset_hi, 0)``; token ``4g + w`` takes output word ``w`` as ``r``
    and ``u = ((r >> 9) + 0.5) / 2**23``. 32-bit products are formed from 16-bit halves so int64
    never overflows.
    """
    device = seeds.device
    groups = (vocab_size + 3) // 4
    c0 = torch.arange(groups, dtype=torch.int64, device=device)[None, :].expand(seeds.shape[0], -1)
    c1 = (offsets & _M32)[:, None].expand_as(c0)
    c2 = ((offsets >> 32) & _M32)[:, None].expand_as(c0)
    c3 = torch.zeros_like(c0)
    k0, k1 = (seeds & _M32)[:, None], ((seeds >> 32) & _M32)[:, None]
    for _ in range(10):
        hi_b, lo_b = _mulhilo32(_PHILOX_ROUND_B, c2)
        hi_a, lo_a = _mulhilo32(_PHILOX_ROUND_A, c0)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0, k1 = (k0 + _PHILOX_KEY_A) & _M32, (k1 + _PHILOX_KEY_B) & _M32
    words = torch.stack([c0, c1, c2, c3], dim=-1).flatten(1)[:, :vocab_size]  # [B, V]
    return ((words >> 9).to(torch.float32) + 0.5) * 2.0**-23


def gumbel_ref(seeds: torch.Tensor, offsets: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The kernel's Gumbel noise: f32 ``[B, vocab_size]``, ``-log(E)`` with ``E = -log(u)``
    (near ``u = 1``, ``E = v + v^2/2 + v^3/3`` with ``v = 1 - u``, exact in fp32)."""
    u = philox_uniform_ref(seeds, offsets, vocab_size)
    v = 1.0 - u
    series = v * (1.0 + v * (0.5 + v * 0.3333333432674408))
    return -torch.log(torch.where(v < 0.0078125, series, -torch.log(u)))


def _mulhilo32(a: int, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """High and low 32-bit words of ``a * b`` for a constant ``a`` and int64 ``b``, both < 2^32."""
    p_lo = a * (b & 0xFFFF)  # < 2^48
    p_hi = a * (b >> 16)  # < 2^48
    hi = (p_hi + (p_lo >> 16)) >> 16
    lo = (((p_hi & 0xFFFF) << 16) + p_lo) & _M32
    return hi, lo
