"""The Triton kernels against their peers, in one run on one GPU (issue 6 targets).

- bitmask apply, batch 1/64/256 x V 128,256: vs XGrammar's Triton ``apply_token_bitmask_inplace``
  (target <= 1.0x; column skipped with a note when xgrammar is not installed) and vs torch
  ``masked_fill_`` with a pre-unpacked bool mask (target <= 0.5x);
- fused mask + sampling: vs one read of the logits at the measured copy bandwidth (target <= 1.3x)
  and vs the torch pipeline mask -> temperature -> softmax -> top-p sort -> multinomial (target < 1x);
- paged decode attention, batch >= 32, context >= 4k: achieved KV bandwidth as a share of the measured
  copy bandwidth (target >= 70%) and vs torch SDPA over the same KV laid out contiguously (target <= 1.2x).

Usage: python benchmarks/kernels.py [--out DIR] [--quick] [--dry-run]
Prints a table with the ratios and writes ``kernels-<gpu>.json`` under ``benchmarks/results/``.
Without CUDA it says so and exits 0 (the kernels' CPU tests run under TRITON_INTERPRET=1 instead).
``--dry-run`` runs every step at toy shapes on CPU (start the process with TRITON_INTERPRET=1) and
writes ``kernels-cpu-dry-run.json``: the timings mean nothing, the point is that the GPU run cannot
fail on a typo.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from guided.kernels.attention import paged_attention
from guided.kernels.bitmask import apply_token_bitmask_, unpack_bitmask
from guided.kernels.kv_store import store_kv
from guided.kernels.sampling import fused_sample

RESULTS = Path(__file__).resolve().parent / "results"
VOCAB = 128256
DEVICE = "cuda"
# shapes of a --dry-run (CPU, Triton interpreter): every step once, quickly
DRY_VOCAB, DRY_BATCHES, DRY_ATTENTION, DRY_KV_TOKENS = 1000, [1, 3], [(2, 64)], 64
DRY_MOE = {"experts": 4, "top_k": 2, "hidden": 32, "width": 16}


def bench_ms(fn) -> float:
    """Median milliseconds of ``fn`` (triton.testing.do_bench: warm-up, L2 flush between runs)."""
    if DEVICE == "cpu":  # dry run: wall clock, two calls
        times = []
        for _ in range(2):
            start = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - start))
        return min(times)
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def copy_bandwidth_gbs() -> float:
    """Device-to-device copy bandwidth (bytes read + written per second), 1 GiB buffers."""
    src = torch.empty(1 << (30 if DEVICE == "cuda" else 20), dtype=torch.uint8, device=DEVICE)
    dst = torch.empty_like(src)
    ms = bench_ms(lambda: dst.copy_(src))
    return 2 * src.numel() / ms / 1e6


# ----------------------------------------------------------------------------- bitmask


def xgrammar_apply():
    """XGrammar's Triton bitmask kernel, or (None, reason)."""
    if DEVICE == "cpu":
        return None, "xgrammar's kernel is not run in a dry run"
    try:
        from xgrammar.kernels.apply_token_bitmask_inplace_triton import apply_token_bitmask_inplace_triton
    except Exception as exc:  # not installed, or an incompatible version
        return None, f"xgrammar's Triton kernel not importable ({type(exc).__name__}: {exc})"
    return apply_token_bitmask_inplace_triton, "xgrammar " + _version("xgrammar")


def bench_bitmask(batches) -> list[dict]:
    xgr, xgr_note = xgrammar_apply()
    rows = []
    for batch in batches:
        logits = torch.randn(batch, VOCAB, device=DEVICE)
        bitmask = torch.randint(-(2**31), 2**31 - 1, (batch, (VOCAB + 31) // 32), dtype=torch.int32, device=DEVICE)
        disallowed = ~unpack_bitmask(bitmask, VOCAB)
        row = {"batch": batch, "vocab": VOCAB}
        row["ours_ms"] = bench_ms(lambda x=logits, m=bitmask: apply_token_bitmask_(x, m))
        row["masked_fill_ms"] = bench_ms(lambda x=logits, d=disallowed: x.masked_fill_(d, float("-inf")))
        row["vs_masked_fill"] = row["ours_ms"] / row["masked_fill_ms"]
        if xgr is not None:
            row["xgrammar_ms"] = bench_ms(lambda x=logits, m=bitmask: xgr(x, m))
            row["vs_xgrammar"] = row["ours_ms"] / row["xgrammar_ms"]
        rows.append(row)
    print(f"\nbitmask apply, fp32 logits ({xgr_note})")
    _table(rows, ["batch", "ours_ms", "xgrammar_ms", "vs_xgrammar", "masked_fill_ms", "vs_masked_fill"])
    return rows


# ----------------------------------------------------------------------------- sampling


def torch_pipeline(logits, disallowed, temperature, top_p):
    """The unfused baseline: mask, temperature, softmax, top-p by sort, multinomial."""
    x = logits.float().masked_fill(disallowed, float("-inf")) / temperature[:, None]
    probs = x.softmax(dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    drop = sorted_probs.cumsum(dim=-1) - sorted_probs > top_p[:, None]
    sorted_probs = sorted_probs.masked_fill(drop, 0.0)
    picked = torch.multinomial(sorted_probs, 1)
    return order.gather(1, picked).squeeze(1)


def make_logits(batch: int, shape: str) -> torch.Tensor:
    """flat: N(0, 1) logits (every chunk needs noise: the kernel's compute-bound worst case);
    peaked: N(0, 2) plus a few tokens 12-20 above, like a language model's (noise mostly skipped)."""
    logits = torch.randn(batch, VOCAB, device=DEVICE)
    if shape == "peaked":
        logits *= 2.0
        top = torch.randint(0, VOCAB, (batch, 8), device=DEVICE)
        logits.scatter_(1, top, 12.0 + 8.0 * torch.rand(batch, 8, device=DEVICE))
    return logits


def bench_sampling(batches, bandwidth_gbs) -> list[dict]:
    rows = []
    for batch in batches:
        for dtype, shape, mode in SAMPLING_CASES:
            logits = make_logits(batch, shape).to(dtype)
            bitmask = torch.randint(-(2**31), 2**31 - 1, (batch, (VOCAB + 31) // 32), dtype=torch.int32,
                                    device=DEVICE)
            disallowed = ~unpack_bitmask(bitmask, VOCAB)
            kw = _sampling_params(batch, mode)
            read_ms = logits.numel() * logits.element_size() / bandwidth_gbs / 1e6
            row = {"batch": batch, "dtype": str(dtype).removeprefix("torch."), "logits": shape, "mode": mode}
            rows_of = torch.arange(batch, dtype=torch.int32, device=DEVICE)
            row["fused_ms"] = bench_ms(
                lambda x=logits, kw=kw, m=bitmask, r=rows_of: fused_sample(x, **kw, bitmask=m, bitmask_rows=r)
            )
            row["one_read_ms"] = read_ms
            row["vs_one_read"] = row["fused_ms"] / read_ms
            row["torch_ms"] = bench_ms(
                lambda x=logits, d=disallowed, kw=kw: torch_pipeline(x, d, kw["temperature"], kw["top_p"])
            )
            row["vs_torch"] = row["fused_ms"] / row["torch_ms"]
            rows.append(row)
    print(f"\nfused mask + sampling, V {VOCAB:,} (plain: temperature 0.7 only; top-k/p: k 50, p 0.9)")
    _table(rows, ["batch", "dtype", "logits", "mode", "fused_ms", "one_read_ms", "vs_one_read", "torch_ms",
                  "vs_torch"])
    return rows


SAMPLING_CASES = [  # dtype, logits shape, filters
    (torch.float32, "peaked", "plain"), (torch.bfloat16, "peaked", "plain"), (torch.float32, "flat", "plain"),
    (torch.float32, "peaked", "top-k/p"), (torch.bfloat16, "flat", "top-k/p"),
]  # fmt: skip


def _sampling_params(batch: int, mode: str) -> dict:
    def full(value, dtype):
        return torch.full((batch,), value, dtype=dtype, device=DEVICE)

    filtered = mode != "plain"
    return dict(
        temperature=full(0.7, torch.float32), top_k=full(50 if filtered else 0, torch.int32),
        top_p=full(0.9 if filtered else 1.0, torch.float32), min_p=full(0.0, torch.float32),
        seeds=torch.arange(batch, device=DEVICE), offsets=full(3, torch.int64),
    )


# ----------------------------------------------------------------------------- attention


def bench_attention(configs, bandwidth_gbs) -> list[dict]:
    rows = []
    heads, kv_heads, head_dim, block_size = 32, 8, 128, 16
    for batch, context in configs:
        blocks_per_seq = context // block_size
        k_cache = torch.randn(batch * blocks_per_seq, block_size, kv_heads, head_dim, device=DEVICE,
                              dtype=torch.bfloat16)
        v_cache = torch.randn_like(k_cache)
        order = torch.randperm(batch * blocks_per_seq, device=DEVICE).int()  # scattered blocks
        block_tables = order.view(batch, blocks_per_seq)
        q = torch.randn(batch, heads, head_dim, device=DEVICE, dtype=torch.bfloat16)
        cu = torch.arange(batch + 1, dtype=torch.int32, device=DEVICE)
        seq_lens = torch.full((batch,), context, dtype=torch.int32, device=DEVICE)
        scale = head_dim**-0.5
        args = (q, k_cache, v_cache, block_tables, cu, seq_lens, scale, 1)
        ms = bench_ms(lambda args=args: paged_attention(*args))
        # the same KV, contiguous per sequence: [batch, kv_heads, context, head_dim]
        k = k_cache[block_tables.long()].flatten(1, 2).transpose(1, 2).contiguous()
        v = v_cache[block_tables.long()].flatten(1, 2).transpose(1, 2).contiguous()
        q4 = q[:, :, None, :]
        sdpa_ms = bench_ms(
            lambda q4=q4, k=k, v=v, scale=scale: F.scaled_dot_product_attention(q4, k, v, scale=scale, enable_gqa=True)
        )
        kv_bytes = 2 * k.numel() * k.element_size()
        row = {"batch": batch, "context": context, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim}
        row["ours_ms"] = ms
        row["kv_gbs"] = kv_bytes / ms / 1e6
        row["share_of_bw"] = row["kv_gbs"] / bandwidth_gbs
        row["sdpa_ms"] = sdpa_ms
        row["vs_sdpa"] = ms / sdpa_ms
        rows.append(row)
    print("\npaged decode attention, bf16, block 16 (share_of_bw: KV bytes / time / copy bandwidth)")
    _table(rows, ["batch", "context", "ours_ms", "kv_gbs", "share_of_bw", "sdpa_ms", "vs_sdpa"])
    return rows


def bench_kv_store(bandwidth_gbs, num_tokens: int = 8192) -> list[dict]:
    kv_heads, head_dim, block_size = 8, 128, 16
    key = torch.randn(num_tokens, kv_heads, head_dim, device=DEVICE, dtype=torch.bfloat16)
    value = torch.randn_like(key)
    k_cache = torch.zeros(num_tokens // block_size * 2, block_size, kv_heads, head_dim, device=DEVICE,
                          dtype=torch.bfloat16)
    v_cache = torch.zeros_like(k_cache)
    slots = torch.randperm(k_cache.shape[0] * block_size, device=DEVICE)[:num_tokens]
    ms = bench_ms(lambda: store_kv(key, value, k_cache, v_cache, slots))
    moved = 4 * key.numel() * key.element_size()  # read k, v; write k, v
    row = {"tokens": num_tokens, "ours_ms": ms, "gbs": moved / ms / 1e6, "share_of_bw": moved / ms / 1e6 / bandwidth_gbs}
    print(f"\nKV store, {num_tokens} tokens x 8 heads x 128, bf16")
    _table([row], ["tokens", "ours_ms", "gbs", "share_of_bw"])
    return [row]


def bench_grouped_gemm(token_counts, bandwidth_gbs, experts=128, top_k=8, hidden=2048, width=768) -> list[dict]:
    """Qwen3-30B-A3B's expert MLP (128 experts, 8 per token, hidden 2048, width 768), bf16: the two
    grouped GEMMs (gate/up gathered from the tokens, then down) against one torch matmul pair per
    expert that got tokens (the CPU path's loop); weight bytes read / time against the copy bandwidth."""
    rows = []
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    gate_up = torch.randn(experts, 2 * width, hidden, device=DEVICE, dtype=torch.bfloat16, generator=gen) * 0.02
    down = torch.randn(experts, hidden, width, device=DEVICE, dtype=torch.bfloat16, generator=gen) * 0.02
    for tokens in token_counts:
        x = torch.randn(tokens, hidden, device=DEVICE, dtype=torch.bfloat16, generator=gen)
        chosen = torch.rand(tokens, experts, device=DEVICE, generator=gen).topk(top_k, dim=-1).indices
        kernel, looped, used = _expert_mlps(x, gate_up, down, chosen)
        ms, torch_ms = bench_ms(kernel), bench_ms(looped)
        weight_bytes = used * 3 * width * hidden * 2
        rows.append({"tokens": tokens, "experts_used": used, "ours_ms": ms, "torch_loop_ms": torch_ms,
                     "vs_torch_loop": ms / torch_ms, "weight_gbs": weight_bytes / ms / 1e6,
                     "share_of_bw": weight_bytes / ms / 1e6 / bandwidth_gbs})  # fmt: skip
    print(f"\nexpert MLP by grouped GEMM, {experts} experts top-{top_k}, {hidden}x{width}, bf16 "
          "(share_of_bw: expert weight bytes / time / copy bandwidth)")
    _table(rows, ["tokens", "experts_used", "ours_ms", "torch_loop_ms", "vs_torch_loop", "weight_gbs", "share_of_bw"])
    return rows


def _expert_mlps(x, gate_up, down, chosen):
    """(the grouped-GEMM expert MLP, the torch loop over the experts that got tokens, how many did)."""
    from guided.kernels.grouped_gemm import grouped_gemm, moe_align

    _, src, counts = moe_align(chosen, gate_up.shape[0])
    used = [e for e, n in enumerate(counts.tolist()) if n]
    starts = torch.cat([counts.new_zeros(1), counts.cumsum(0)]).tolist()

    def kernel():
        g, u = grouped_gemm(x, gate_up, counts, src).chunk(2, dim=-1)
        return grouped_gemm((F.silu(g) * u).contiguous(), down, counts)

    def looped():
        out = torch.empty(src.shape[0], down.shape[1], device=x.device, dtype=x.dtype)
        for e in used:
            r = src[starts[e] : starts[e + 1]]
            g, u = F.linear(x[r], gate_up[e]).chunk(2, dim=-1)
            out[starts[e] : starts[e + 1]] = F.linear(F.silu(g) * u, down[e])
        return out

    return kernel, looped, len(used)


# ----------------------------------------------------------------------------- report


def machine() -> dict:
    if DEVICE == "cpu":
        return {"gpu": "cpu dry run", "torch": torch.__version__, "triton": _version("triton"),
                "python": platform.python_version(), "platform": platform.platform(), "date": time.strftime("%Y-%m-%d")}  # fmt: skip
    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": props.name,
        "gpu_memory_gib": round(props.total_memory / 2**30, 1),
        "sm_count": props.multi_processor_count,
        "driver": _nvidia_smi("driver_version"),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": _version("triton"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": time.strftime("%Y-%m-%d"),
    }


def _nvidia_smi(field: str) -> str:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30, check=True)
        return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def _table(rows: list[dict], columns: list[str]) -> None:
    widths = [max(len(c), 10) for c in columns]
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)))
    for row in rows:
        cells = []
        for c, w in zip(columns, widths, strict=True):
            v = row.get(c, "-")
            cells.append((f"{v:.4f}" if isinstance(v, float) else str(v)).rjust(w))
        print("  ".join(cells))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory for kernels-<gpu>.json")
    parser.add_argument("--quick", action="store_true", help="fewer shapes (a smoke run)")
    parser.add_argument("--dry-run", action="store_true",
                        help="every step at toy shapes on CPU (under TRITON_INTERPRET=1); times mean nothing")
    args = parser.parse_args(argv)
    global DEVICE, VOCAB
    if args.dry_run:
        DEVICE, VOCAB = "cpu", DRY_VOCAB
    elif not torch.cuda.is_available():
        print("benchmarks/kernels.py needs a CUDA GPU; none is available here, so nothing was measured.")
        return 0
    info = machine()
    print(f"{info['gpu']}  driver {info.get('driver')}  CUDA {info.get('cuda')}  torch {info['torch']}  "
          f"triton {info['triton']}")
    bandwidth = copy_bandwidth_gbs()
    print(f"measured copy bandwidth: {bandwidth:.0f} GB/s (read + write)")
    batches = [1, 64] if args.quick else [1, 64, 256]
    # (1, 32768) is outside the targets: it shows the split-K (flash-decoding) path
    attention = [(32, 4096)] if args.quick else [(32, 4096), (64, 4096), (32, 8192), (128, 4096), (1, 32768)]
    if args.dry_run:
        batches, attention = DRY_BATCHES, DRY_ATTENTION
    results = {
        "machine": info,
        "copy_bandwidth_gbs": bandwidth,
        "bitmask": bench_bitmask(batches),
        "sampling": bench_sampling(batches, bandwidth),
        "paged_decode_attention": bench_attention(attention, bandwidth),
        "kv_store": bench_kv_store(bandwidth, DRY_KV_TOKENS if args.dry_run else 8192),
        "grouped_gemm": bench_grouped_gemm([3] if args.dry_run else [1, 16, 64, 512, 4096],
                                           bandwidth, **(DRY_MOE if args.dry_run else {})),  # fmt: skip
        "targets": {
            "bitmask_vs_xgrammar": "<= 1.0", "bitmask_vs_masked_fill": "<= 0.5",
            "sampling_vs_one_read": "<= 1.3", "sampling_vs_torch": "< 1.0",
            "attention_share_of_bw": ">= 0.70 (batch >= 32, context >= 4k)", "attention_vs_sdpa": "<= 1.2",
            "grouped_gemm_vs_torch_loop": "< 1.0",
        },
    }
    args.out.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^a-z0-9]+", "-", info["gpu"].lower()).strip("-")
    path = args.out / f"kernels-{slug}.json"
    path.write_text(json.dumps(results, indent=1) + "\n")
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
