"""Optional Triton import and the one dispatch rule every kernel wrapper follows.

CUDA tensors run the Triton kernel. CPU tensors run the pure-torch reference, unless the
process was started with ``TRITON_INTERPRET=1``: then the Triton kernel runs on CPU tensors under
Triton's interpreter (how the CPU test tier exercises kernel code). Triton decides interpreter mode
when it is imported, so the variable must be set before anything imports triton.
"""

from __future__ import annotations

import os

import torch

try:  # CPU-only installs need no triton: the torch references are the fallback
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # pragma: no cover - exercised only where triton is absent
    triton = None
    HAS_TRITON = False

    class _MissingLanguage:
        """Stands in for ``triton.language`` so kernel signatures still parse; never launched."""

        constexpr = "constexpr"

    tl = _MissingLanguage()

__all__ = ["HAS_TRITON", "triton", "tl", "jit", "use_triton", "interpreting", "next_power_of_2", "power_of_2_at_most"]


def jit(fn):
    """``triton.jit`` where triton is installed; otherwise the plain function (never launched)."""
    return triton.jit(fn) if HAS_TRITON else fn


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def use_triton(tensor: torch.Tensor, kernel) -> bool:
    """Whether to launch ``kernel`` for ``tensor``'s device rather than run the torch reference."""
    if not HAS_TRITON:
        return False
    if tensor.is_cuda:
        return True
    if tensor.device.type != "cpu" or not interpreting():
        return False
    if type(kernel).__name__ != "InterpretedFunction":
        raise RuntimeError(
            "TRITON_INTERPRET=1 was set after triton was imported; set it in the environment "
            "before the process starts to run Triton kernels on CPU tensors"
        )
    return True


def next_power_of_2(n: int) -> int:
    """Smallest power of two >= n (and >= 1)."""
    return 1 << max(0, int(n) - 1).bit_length()


def power_of_2_at_most(n: int) -> int:
    """Largest power of two <= n (and >= 1). Split counts are rounded to it: a split count is a kernel
    constant, so every distinct value is a compile; powers of two keep it to a handful per kernel."""
    return 1 << max(0, int(n).bit_length() - 1)
