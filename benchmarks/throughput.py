"""Engine throughput and latency against HF transformers' generate, in one run.

CPU (always): the tiny embedded-default-shaped model; engine vs HF ``generate`` output tok/s (HF at
its best batch size), and the prefix cache's TTFT gain. Ratios only: absolute CPU times mean little.
Tensor parallelism (``--tp-sizes``, default 1,2): the same model split across N ranks over gloo, each
rank one thread: output tok/s, the median decode step at batch 1, and the time per step spent in
collectives (the step's broadcast, the all-reduces, the logits' gather) as rank 0 sees it.

GPU (only where CUDA is available): bf16 random-weight models shaped like Llama-3.2-1B and
Llama-3.1-8B, built on the machine (no download):
- decode step at batch 1 vs the memory roofline (weight bytes / measured HBM bandwidth), target <= 1.25x;
- offline throughput, 512 prompts of 256 tokens -> 256 tokens, vs HF generate at its best batch, target >= 10x;
- TTFT and TPOT p50/p99 with 1, 16, 64 and 256 concurrent requests (the asyncio front);
- prefix caching: a shared 2k-token system prompt, TTFT of a second request, target >= 3x faster.

Per family (``--families``): one row per model family, tok/s and the decode step at batch 1: on CPU at
the embedded default's size, on a GPU at the published configs' shapes (Qwen3-1.7B, Phi-4-mini, Gemma 3
1B, Llama 3.2 1B; Qwen3-30B-A3B and Mixtral 8x7B with a few of their layers), random bf16 weights.

Usage: python benchmarks/throughput.py [--skip-gpu] [--skip-hf] [--models 1b,8b] [--tp-sizes 1,2]
       [--families all|NAMES] [--families-only] [--out DIR]
Writes ``throughput-cpu.json`` / ``throughput-gpu.json`` (and ``throughput-families-cpu.json`` /
``-gpu.json``) under ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import random
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch

from guided.builtin.tiny_model import TinyModelSpec, tiny_model_dir
from guided.engine.async_engine import AsyncEngine
from guided.engine.llm_engine import LLMEngine
from guided.engine.sampling_params import SamplingParams

RESULTS = Path(__file__).resolve().parent / "results"

CPU_SPEC = TinyModelSpec(arch="llama", hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=32,
                         intermediate_size=256)  # fmt: skip
VOCAB_128K = 128256  # Llama 3's vocabulary: vocab_multiple pads the builtin tokenizer's lm_head to it
GPU_SPECS = {
    "llama-3.2-1b": TinyModelSpec(
        arch="llama", hidden_size=2048, num_layers=16, num_heads=32, num_kv_heads=8, head_dim=64,
        intermediate_size=8192, tie_word_embeddings=True, vocab_multiple=VOCAB_128K, dtype="bfloat16",
        max_position_embeddings=8192, init_std=0.02,
    ),
    "llama-3.1-8b": TinyModelSpec(
        arch="llama", hidden_size=4096, num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128,
        intermediate_size=14336, tie_word_embeddings=False, vocab_multiple=VOCAB_128K, dtype="bfloat16",
        max_position_embeddings=8192, init_std=0.02,
    ),
}  # fmt: skip
# one row per model family: on CPU at the embedded default's size ...
FAMILIES_CPU = {
    "llama": CPU_SPEC,
    "qwen2": replace(CPU_SPEC, arch="qwen2"),
    "qwen3": replace(CPU_SPEC, arch="qwen3"),
    "phi3": replace(CPU_SPEC, arch="phi3"),
    "gemma3": replace(CPU_SPEC, arch="gemma3_text", num_layers=3, sliding_window=32, tie_word_embeddings=True),
    "qwen3_moe": replace(CPU_SPEC, arch="qwen3_moe", num_layers=3, num_experts=8),
    "mixtral": replace(CPU_SPEC, arch="mixtral", num_experts=4),
    "gpt_oss": replace(CPU_SPEC, arch="gpt_oss", num_experts=4, sliding_window=32),
}
# ... and on a GPU with the published configs' shapes (random bf16 weights drawn on the GPU; the two
# mixtures of experts keep a few of their layers, so that the checkpoint fits the machine's disk)
_GPU = {"dtype": "bfloat16", "init_device": "cuda", "init_std": 0.02, "max_position_embeddings": 8192}
FAMILIES_GPU = {
    "llama-3.2-1b": replace(GPU_SPECS["llama-3.2-1b"], init_device="cuda"),
    "qwen3-1.7b": TinyModelSpec(arch="qwen3", hidden_size=2048, num_layers=28, num_heads=16, num_kv_heads=8,
                                head_dim=128, intermediate_size=6144, tie_word_embeddings=True,
                                vocab_multiple=151936, **_GPU),
    "phi-4-mini": TinyModelSpec(arch="phi3", hidden_size=3072, num_layers=32, num_heads=24, num_kv_heads=8,
                                head_dim=128, intermediate_size=8192, tie_word_embeddings=True, vocab_multiple=200064,
                                rope=(("partial_rotary_factor", 0.75),), **_GPU),
    "gemma-3-1b": TinyModelSpec(arch="gemma3_text", hidden_size=1152, num_layers=26, num_heads=4, num_kv_heads=1,
                                head_dim=256, intermediate_size=6912, tie_word_embeddings=True, vocab_multiple=262144,
                                sliding_window=512, **_GPU),
    "qwen3-30b-a3b-4-layers": TinyModelSpec(arch="qwen3_moe", hidden_size=2048, num_layers=4, num_heads=32,
                                            num_kv_heads=4, head_dim=128, intermediate_size=6144, num_experts=128,
                                            experts_per_token=8, moe_intermediate_size=768, vocab_multiple=151936,
                                            **_GPU),
    "mixtral-8x7b-2-layers": TinyModelSpec(arch="mixtral", hidden_size=4096, num_layers=2, num_heads=32,
                                           num_kv_heads=8, head_dim=128, intermediate_size=14336, num_experts=8,
                                           vocab_multiple=32000, **_GPU),
    "gpt-oss-20b-2-layers": TinyModelSpec(arch="gpt_oss", hidden_size=2880, num_layers=2, num_heads=64,
                                          num_kv_heads=8, head_dim=64, intermediate_size=2880, num_experts=32,
                                          experts_per_token=4, sliding_window=128, vocab_multiple=201088, **_GPU),
}  # fmt: skip


def random_prompts(n: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(100, vocab) for _ in range(length)] for _ in range(n)]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


# ---------------------------------------------------------------------- engine measurements
def engine_throughput(engine: LLMEngine, prompts: list[list[int]], out_len: int) -> dict:
    params = SamplingParams(temperature=0.0, max_tokens=out_len, ignore_eos=True)
    for p in prompts:
        engine.add_request(p, params)
    engine.stream = False  # offline: outputs of finished requests only (what LLM.generate does)
    sync()
    start = time.perf_counter()
    tokens = 0
    while engine.has_unfinished():
        tokens += sum(len(o.token_ids) for o in engine.step() if o.finished)
    sync()
    seconds = time.perf_counter() - start
    engine.stream = True
    return {"output_tokens": tokens, "seconds": seconds, "output_tok_s": tokens / seconds}


def decode_step_time(engine: LLMEngine, prompt_len: int = 128, steps: int = 128) -> float:
    """Median wall time of one decode step at batch 1 (host overhead included)."""
    engine.add_request(list(range(100, 100 + prompt_len)), SamplingParams(temperature=0, max_tokens=steps + 1,
                                                                          ignore_eos=True))  # fmt: skip
    engine.step()  # the prefill
    times = []
    while engine.has_unfinished():
        sync()
        t = time.perf_counter()
        engine.step()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def ttft(engine: LLMEngine, prompt: list[int]) -> float:
    engine.add_request(prompt, SamplingParams(temperature=0, max_tokens=1, ignore_eos=True))
    sync()
    start = time.perf_counter()
    while engine.has_unfinished():
        engine.step()
    sync()
    return time.perf_counter() - start


def prefix_cache_gain(engine: LLMEngine, vocab: int, system_len: int, question_len: int = 32) -> dict:
    system = random_prompts(1, system_len, vocab, seed=11)[0]
    q1, q2 = random_prompts(2, question_len, vocab, seed=12)
    cold = ttft(engine, system + q1)
    warm = ttft(engine, system + q2)
    return {"system_tokens": system_len, "ttft_cold_s": cold, "ttft_warm_s": warm, "speedup": cold / warm}


def latency_at_concurrency(engine: LLMEngine, concurrency: int, vocab: int, in_len: int, out_len: int) -> dict:
    """TTFT and TPOT percentiles with ``concurrency`` requests in flight through the asyncio front."""
    front = AsyncEngine(engine)
    prompts = random_prompts(concurrency, in_len, vocab, seed=concurrency)
    params = SamplingParams(temperature=0.0, max_tokens=out_len, ignore_eos=True)

    async def one(prompt):
        start = time.perf_counter()
        first = None
        n = 0
        async for out in front.generate(prompt, params):
            first = first or time.perf_counter()
            n = len(out.token_ids)
        end = time.perf_counter()
        return first - start, (end - first) / max(n - 1, 1)

    async def main():
        return await asyncio.gather(*(one(p) for p in prompts))

    try:
        results = asyncio.run(main())
    finally:
        front.shutdown()
    ttfts, tpots = [r[0] for r in results], [r[1] for r in results]
    return {
        "concurrency": concurrency,
        "ttft_p50_ms": 1e3 * pct(ttfts, 50), "ttft_p99_ms": 1e3 * pct(ttfts, 99),
        "tpot_p50_ms": 1e3 * pct(tpots, 50), "tpot_p99_ms": 1e3 * pct(tpots, 99),
    }  # fmt: skip


# ---------------------------------------------------------------------- HF transformers
def hf_throughput(model_dir: str, prompts: list[list[int]], out_len: int, batch_sizes: list[int], device, dtype,
                  pad_id: int) -> dict:  # fmt: skip
    """HF ``generate`` (greedy, no EOS stop) at each batch size; the best one's output tok/s."""
    import transformers

    try:  # straight onto the GPU (accelerate's device_map), not through 16 GB of host memory
        import accelerate  # noqa: F401

        placement = {"device_map": str(device)} if str(device).startswith("cuda") else {}
    except ImportError:
        placement = {}
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, **placement).to(device).eval()
    per_batch = {}
    for bs in batch_sizes:
        batch = prompts[:bs]
        ids = torch.tensor(batch, device=device)  # equal lengths: no padding needed
        with torch.inference_mode():
            model.generate(ids[:, :8], max_new_tokens=2, do_sample=False, eos_token_id=None, pad_token_id=pad_id)
            sync()
            start = time.perf_counter()
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=out_len, do_sample=False,
                                 eos_token_id=None, pad_token_id=pad_id)  # fmt: skip
            sync()
        seconds = time.perf_counter() - start
        per_batch[bs] = (out.shape[0] * (out.shape[1] - ids.shape[1])) / seconds
    del model
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    best = max(per_batch, key=per_batch.get)
    return {"best_batch": best, "output_tok_s": per_batch[best], "per_batch_tok_s": per_batch}


# ---------------------------------------------------------------------- sections
def run_cpu(args) -> dict:
    model_dir = str(tiny_model_dir("builtin", CPU_SPEC))
    n, in_len, out_len = args.cpu_prompts, 64, 128
    engine = LLMEngine.from_model(model_dir, device="cpu", max_model_len=512, max_num_seqs=64)
    vocab = len(engine.tokenizer) - 16
    prompts = random_prompts(n, in_len, vocab)
    engine_throughput(engine, prompts[:4], 4)  # warm-up
    result = {"model": "tiny llama (hidden 128, 2 layers), fp32", "prompts": n, "in": in_len, "out": out_len}
    result["engine"] = engine_throughput(engine, prompts, out_len)
    result["prefix_cache"] = prefix_cache_gain(engine, vocab, system_len=448)
    if not args.skip_hf:
        result["hf"] = hf_throughput(model_dir, prompts, out_len, sorted({1, 8, 32, n}), "cpu", torch.float32,
                                     engine.tokenizer.pad_token_id or 0)  # fmt: skip
        result["engine_over_hf"] = result["engine"]["output_tok_s"] / result["hf"]["output_tok_s"]
    return result


def run_tensor_parallel(args, sizes: list[int]) -> list[dict]:
    """One row per tensor-parallel size: throughput, decode step and communication per step."""
    model_dir = str(tiny_model_dir("builtin", CPU_SPEC))
    rows = []
    for size in sizes:
        engine = LLMEngine.from_model(model_dir, device="cpu", max_model_len=512, max_num_seqs=64,
                                      tensor_parallel_size=size)  # fmt: skip
        try:
            vocab = len(engine.tokenizer) - 16
            prompts = random_prompts(args.tp_prompts, 64, vocab)
            engine_throughput(engine, prompts[:4], 4)  # warm-up
            stats = engine.runner.tp.stats
            stats.clear()
            row = {"tensor_parallel_size": size, "engine": engine_throughput(engine, prompts, 64)}
            row.update(_communication(stats, "batch_"))
            stats.clear()
            row["decode_b1_ms"] = 1e3 * decode_step_time(engine, prompt_len=64, steps=64)
            row.update(_communication(stats, "decode_b1_"))
        finally:
            engine.close()
        rows.append(row)
        print(f"CPU  tensor_parallel_size={size}: {row['engine']['output_tok_s']:.0f} tok/s "
              f"(communication {row['batch_comm_per_step_ms']:.2f} ms/step), decode step at batch 1 "
              f"{row['decode_b1_ms']:.2f} ms (communication {row['decode_b1_comm_per_step_ms']:.2f} ms, "
              f"{row['decode_b1_all_reduces_per_step']:.0f} all-reduces)")  # fmt: skip
    return rows


def _communication(stats: dict, prefix: str) -> dict:
    """Rank 0's time in collectives per step (one broadcast per step), waiting for the others included."""
    steps = max(stats.get("broadcasts", 0), 1)
    seconds = {k: v for k, v in stats.items() if k.endswith("_s")}
    return {prefix + "comm_per_step_ms": 1e3 * sum(seconds.values()) / steps,
            prefix + "all_reduces_per_step": stats.get("all_reduces", 0) / steps,
            prefix + "collectives_s": seconds}  # fmt: skip


def run_families(names: list[str], gpu: bool, prompts: int) -> list[dict]:
    """One row per family: output tok/s over ``prompts`` requests (128 tokens in, 128 out; 64 on CPU)
    and the median decode step at batch 1."""
    specs = FAMILIES_GPU if gpu else FAMILIES_CPU
    rows = []
    for name in names:
        t = time.perf_counter()
        model_dir = str(tiny_model_dir("builtin", specs[name]))
        row = {"family": name, "arch": specs[name].arch, "build_s": time.perf_counter() - t}
        engine = LLMEngine.from_model(model_dir, dtype="bfloat16" if gpu else "float32", device="cuda" if gpu else "cpu",
                                      max_model_len=1024, max_num_seqs=64)  # fmt: skip
        vocab, length = len(engine.tokenizer) - 16, 128 if gpu else 64
        batch = random_prompts(prompts, length, vocab)
        engine_throughput(engine, batch[:4], 4)  # warm-up
        row["engine"] = engine_throughput(engine, batch, length)
        row["decode_b1_ms"] = 1e3 * decode_step_time(engine, prompt_len=length, steps=32)
        rows.append(row)
        print(f"{'GPU' if gpu else 'CPU'}  {name:24} {row['engine']['output_tok_s']:9.0f} tok/s, decode step at "
              f"batch 1 {row['decode_b1_ms']:.2f} ms")  # fmt: skip
        del engine
        gc.collect()
        if gpu:
            torch.cuda.empty_cache()
    return rows


def hbm_bandwidth() -> float:
    """Bytes/s of a large device-to-device copy (read + write)."""
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    sync()
    start = time.perf_counter()
    reps = 20
    for _ in range(reps):
        y.copy_(x)
    sync()
    return 2 * x.numel() * reps / (time.perf_counter() - start)


def weight_bytes(engine: LLMEngine) -> int:
    """Bytes a decode step reads: every parameter but the input embedding (one row of it is read)."""
    model = engine.runner.model
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    if not model.args.tie_word_embeddings:
        total -= model.embed_tokens.weight.numel() * model.embed_tokens.weight.element_size()
    return total


def run_gpu_model(name: str, spec: TinyModelSpec, args, bandwidth: float) -> dict:
    t = time.perf_counter()
    model_dir = str(tiny_model_dir("builtin", spec))
    result = {"model": name, "build_s": time.perf_counter() - t}
    engine = LLMEngine.from_model(model_dir, dtype="bfloat16", max_model_len=4096, max_num_seqs=256,
                                  max_num_batched_tokens=8192)  # fmt: skip
    vocab = len(engine.tokenizer) - 16
    step = decode_step_time(engine)
    roofline = weight_bytes(engine) / bandwidth
    result["decode_b1"] = {"step_ms": 1e3 * step, "roofline_ms": 1e3 * roofline, "ratio": step / roofline,
                           "target": "<= 1.25"}  # fmt: skip
    prompts = random_prompts(args.gpu_prompts, 256, vocab)
    engine_throughput(engine, prompts[:16], 8)  # warm-up
    result["offline"] = engine_throughput(engine, prompts, 256)
    result["latency"] = [latency_at_concurrency(engine, c, vocab, 256, 128) for c in (1, 16, 64, 256)]
    engine.block_manager.reset_prefix_cache()
    result["prefix_cache"] = prefix_cache_gain(engine, vocab, system_len=2048)
    result["prefix_cache"]["target"] = ">= 3"
    del engine
    gc.collect()
    torch.cuda.empty_cache()
    if not args.skip_hf:
        result["hf"] = hf_throughput(model_dir, prompts, 256, [64, 128, 256], "cuda", torch.bfloat16, 0)
        result["engine_over_hf"] = result["offline"]["output_tok_s"] / result["hf"]["output_tok_s"]
        result["engine_over_hf_target"] = ">= 10"
    return result


def run_gpu(args) -> dict:
    bandwidth = hbm_bandwidth()
    out = {"device": torch.cuda.get_device_name(), "hbm_bandwidth_gb_s": bandwidth / 1e9, "models": []}
    for name in args.models.split(","):
        key = {"1b": "llama-3.2-1b", "8b": "llama-3.1-8b"}.get(name, name)
        out["models"].append(run_gpu_model(key, GPU_SPECS[key], args, bandwidth))
        print(json.dumps(out["models"][-1], indent=1))
    return out


def families(args, meta: dict) -> None:
    """The per-family rows alone: CPU tiny models, then (with CUDA, unless --skip-gpu) real shapes."""
    def chosen(table: dict) -> list[str]:
        return list(table) if args.families == "all" else [n for n in args.families.split(",") if n in table]

    cpu = {**meta, "cpu_threads": args.cpu_threads, "families": run_families(chosen(FAMILIES_CPU), False, 16)}
    (args.out / "throughput-families-cpu.json").write_text(json.dumps(cpu, indent=1, default=str))
    if args.skip_gpu or not torch.cuda.is_available():
        print("GPU family rows skipped: " + ("--skip-gpu" if args.skip_gpu else "CUDA is not available"))
        return
    gpu = {**meta, "device": torch.cuda.get_device_name(), "families": run_families(chosen(FAMILIES_GPU), True, 64)}
    (args.out / "throughput-families-gpu.json").write_text(json.dumps(gpu, indent=1, default=str))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skip-gpu", action="store_true")
    ap.add_argument("--skip-hf", action="store_true", help="do not run HF transformers' generate")
    ap.add_argument("--models", default="1b,8b", help="GPU models: 1b, 8b")
    ap.add_argument("--cpu-prompts", type=int, default=64)
    ap.add_argument("--gpu-prompts", type=int, default=512)
    ap.add_argument("--cpu-threads", type=int, default=1,
                    help="torch threads for the CPU section (1 = robust to other load on the machine)")
    ap.add_argument("--tp-sizes", default="1,2", help="tensor-parallel sizes of the CPU rows ('' skips them)")
    ap.add_argument("--tp-prompts", type=int, default=16)
    ap.add_argument("--families", default="all", help="model families of the per-family rows (comma list; "
                    f"CPU: {', '.join(FAMILIES_CPU)}; GPU: {', '.join(FAMILIES_GPU)}; '' skips them)")
    ap.add_argument("--families-only", action="store_true", help="only the per-family rows (CPU, and GPU "
                    "unless --skip-gpu), into throughput-families-cpu.json / -gpu.json")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"torch": torch.__version__, "python": platform.python_version(), "time": time.strftime("%Y-%m-%d"),
            "cpus": os.cpu_count(), "load_average": os.getloadavg()}  # fmt: skip

    threads = torch.get_num_threads()
    torch.set_num_threads(args.cpu_threads)
    if args.families_only:
        return families(args, meta)
    cpu = run_cpu(args)
    cpu["cpu_threads"] = args.cpu_threads
    if args.tp_sizes:
        cpu["tensor_parallel"] = run_tensor_parallel(args, [int(n) for n in args.tp_sizes.split(",")])
    torch.set_num_threads(threads)
    (args.out / "throughput-cpu.json").write_text(json.dumps({**meta, **cpu}, indent=1, default=str))
    print(f"CPU  engine {cpu['engine']['output_tok_s']:.0f} tok/s", end="")
    if "hf" in cpu:
        print(f" | HF generate {cpu['hf']['output_tok_s']:.0f} tok/s (batch {cpu['hf']['best_batch']})"
              f" | engine/HF = {cpu['engine_over_hf']:.2f}x", end="")  # fmt: skip
    print(f" | prefix-cache TTFT gain {cpu['prefix_cache']['speedup']:.2f}x")
    if args.families:
        families(args, meta)

    if args.skip_gpu or not torch.cuda.is_available():
        print("GPU section skipped: " + ("--skip-gpu" if args.skip_gpu else "CUDA is not available"))
        return
    gpu = run_gpu(args)
    path = args.out / "throughput-gpu.json"
    # runs of one model at a time (--models 1b, then --models 8b) accumulate in one file
    previous = json.loads(path.read_text()).get("models", []) if path.exists() else []
    names = {m["model"] for m in gpu["models"]}
    gpu["models"] = [m for m in previous if m["model"] not in names] + gpu["models"]
    path.write_text(json.dumps({**meta, **gpu}, indent=1, default=str))


if __name__ == "__main__":
    main()
