"""GPU kernels (Triton), each beside a pure-torch reference that is the CPU fallback and test oracle.

Names are re-exported lazily: importing ``guided.kernels`` imports neither torch nor triton; the
first use of a name imports its module (which imports triton if it is installed).
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "apply_token_bitmask_": "bitmask",
    "apply_token_bitmask_ref": "bitmask",
    "allocate_token_bitmask": "bitmask",
    "unpack_bitmask": "bitmask",
    "store_kv": "kv_store",
    "store_kv_ref": "kv_store",
    "paged_attention": "attention",
    "paged_attention_ref": "attention",
    "grouped_gemm": "grouped_gemm",
    "grouped_gemm_ref": "grouped_gemm",
    "moe_align": "grouped_gemm",
    "SampleOutput": "sampling",
    "fused_sample": "sampling",
    "fused_sample_ref": "sampling",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
