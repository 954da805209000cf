"""Every kernel compiles for a Hopper GPU (sm_90) on a machine without one.

The interpreter runs kernels as Python and never type-checks what the GPU compiler does (loop-carried
types, constexpr branches, dot shapes), so each kernel is also compiled ahead of time, down to a
cubin, at the configurations its wrapper launches. Pointers and the listed integers are marked
divisible by 16, as Triton's launcher specialises them for real tensors (aligned allocations,
head_dim 128, block_size 16).
"""

from __future__ import annotations

import importlib

import pytest
from kernel_env import HAS_TRITON, INTERPRETING

pytestmark = [
    pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed"),
    pytest.mark.skipif(INTERPRETING, reason="kernels are interpreted in this session; compiled in the parent"),
]

ATTN_PTRS = {"q_ptr": "*bf16", "k_cache_ptr": "*bf16", "v_cache_ptr": "*bf16", "out_ptr": "*bf16",
             "part_ptr": "*fp32", "block_tables_ptr": "*i32", "cu_seqlens_q_ptr": "*i32", "seq_lens_ptr": "*i32",
             "scale_log2": "fp32", "sinks_ptr": "*fp32"}  # fmt: skip
SAMPLE_PTRS = {"logits_ptr": "*bf16", "bitmask_ptr": "*i32", "bitmask_rows_ptr": "*i32", "temperature_ptr": "*fp32",
               "top_k_ptr": "*i32", "top_p_ptr": "*fp32", "min_p_ptr": "*fp32", "seeds_ptr": "*i64",
               "offsets_ptr": "*i64", "token_ids_ptr": "*i64", "logprobs_ptr": "*fp32", "top_ids_ptr": "*i64",
               "top_logprobs_ptr": "*fp32", "part_f_ptr": "*fp32", "part_i_ptr": "*i32"}  # fmt: skip
ATTN = dict(QUERIES_PER_KV=4, BLOCK_N=64, BLOCK_D=128, DOT_PRECISION="tf32", UPCAST=False, HAS_SINKS=False)
DIVISIBLE = {"head_dim", "block_size", "num_heads", "split_len", "stride_qt", "stride_qh", "stride_ot", "stride_oh",
             "stride_cache_b", "stride_cache_s", "stride_cache_h", "stride_kt", "stride_vt", "stride_kh", "stride_vh",
             "stride_logits_row", "vocab_size"}  # fmt: skip

CASES = {  # module, kernel, pointer/scalar types (ints default to i32), constexprs, launch options
    "bitmask": ("bitmask", "_apply_token_bitmask_kernel",
                {"logits_ptr": "*bf16", "bitmask_ptr": "*i32", "indices_ptr": "*i32"},
                dict(HAS_INDICES=True, BLOCK_V=2048), dict(num_warps=4)),
    "kv_store": ("kv_store", "_store_kv_kernel",
                 {"key_ptr": "*bf16", "value_ptr": "*bf16", "k_cache_ptr": "*bf16", "v_cache_ptr": "*bf16",
                  "slot_mapping_ptr": "*i64"},
                 dict(BLOCK_H=8, BLOCK_D=128), dict(num_warps=4)),
    "attention-decode-split": ("attention", "_paged_attention_kernel", ATTN_PTRS,
                               dict(ATTN, BLOCK_Q=4, BLOCK_M=16, SPLIT_K=True, NUM_SPLITS=8),
                               dict(num_warps=4, num_stages=3)),
    "attention-decode-split-sinks": ("attention", "_paged_attention_kernel", ATTN_PTRS,  # gpt-oss
                                     dict(ATTN, BLOCK_Q=4, BLOCK_M=16, SPLIT_K=True, NUM_SPLITS=8, HAS_SINKS=True),
                                     dict(num_warps=4, num_stages=3)),
    "attention-prefill-sinks": ("attention", "_paged_attention_kernel", ATTN_PTRS,
                                dict(ATTN, BLOCK_Q=16, BLOCK_M=64, SPLIT_K=False, NUM_SPLITS=1, HAS_SINKS=True),
                                dict(num_warps=8, num_stages=2)),
    "attention-prefill": ("attention", "_paged_attention_kernel", ATTN_PTRS,
                          dict(ATTN, BLOCK_Q=16, BLOCK_M=64, SPLIT_K=False, NUM_SPLITS=1),
                          dict(num_warps=8, num_stages=2)),
    "attention-combine": ("attention", "_combine_splits_kernel", {"part_ptr": "*fp32", "out_ptr": "*bf16"},
                          dict(NUM_SPLITS=8, BLOCK_S=8, BLOCK_D=128), dict(num_warps=4)),
    "attention-fp32-mqa": ("attention", "_paged_attention_kernel",
                           {**ATTN_PTRS, "q_ptr": "*fp32", "k_cache_ptr": "*fp32", "v_cache_ptr": "*fp32",
                            "out_ptr": "*fp32"},
                           dict(ATTN, QUERIES_PER_KV=1, BLOCK_Q=16, BLOCK_M=16, DOT_PRECISION="ieee", SPLIT_K=False,
                                NUM_SPLITS=1),
                           dict(num_warps=4, num_stages=3)),
    "sampling": ("sampling", "_fused_sample_kernel", SAMPLE_PTRS,
                 dict(HAS_BITMASK=True, NUM_SPLITS=1, NUM_PIVOTS=16, BLOCK_V=1024, BLOCK_SEARCH=256,
                      GUMBEL_MAX=17.0),
                 dict(num_warps=8, enable_fp_fusion=False)),
    "sampling-fp32-unmasked-merge": ("sampling", "_fused_sample_kernel", {**SAMPLE_PTRS, "logits_ptr": "*fp32"},
                                     dict(HAS_BITMASK=False, NUM_SPLITS=8, NUM_PIVOTS=16, BLOCK_V=1024,
                                          BLOCK_SEARCH=256, GUMBEL_MAX=17.0),
                                     dict(num_warps=8, enable_fp_fusion=False)),
    "sampling-split-scan": ("sampling", "_scan_split_kernel", SAMPLE_PTRS,
                            dict(HAS_BITMASK=True, NUM_SPLITS=8, BLOCK_V=1024, GUMBEL_MAX=17.0),
                            dict(num_warps=8, enable_fp_fusion=False)),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_kernel_compiles_for_sm90(case):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    module, name, types, constexprs, options = CASES[case]
    kernel = getattr(importlib.import_module(f"guided.kernels.{module}"), name)
    signature = {arg: "constexpr" if arg in constexprs else types.get(arg, "i32") for arg in kernel.arg_names}
    attrs = {
        (i,): [["tt.divisibility", 16]]
        for i, arg in enumerate(kernel.arg_names)
        if arg in DIVISIBLE or signature[arg].startswith("*")
    }
    try:
        compiled = triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=GPUTarget("cuda", 90, 32),
                                  options=options)
    except RuntimeError as exc:
        if "ptxas" in str(exc).lower() and "not found" in str(exc).lower():
            pytest.skip(f"no ptxas for ahead-of-time compilation: {exc}")
        raise
    assert compiled.asm["cubin"]
