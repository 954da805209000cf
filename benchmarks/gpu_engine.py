"""The engine on a GPU, one model load for every measurement (run by scripts/gpu_check.sh).

Model: a random-weight Llama-3.1-8B-shaped checkpoint in bf16 drawn on the GPU (nothing downloaded),
on the Llama 3 tokenizer when ``GUIDED_SHARED`` holds it (else the builtin one, its lm_head padded to
Llama 3's 128,256 rows). Sections, in this order, each written to OUT as soon as it is done (a run cut
short keeps what it measured):

- decode step at batch 1 vs the memory roofline (weight bytes / measured copy bandwidth), target
  <= 1.25x, CUDA graphs on and off;
- offline output throughput with 1, 64 and 256 requests in flight (graphs on and off), and TTFT /
  TPOT p50/p99 through the asyncio front at the same concurrencies;
- realistic guided workload ("steered"): every request is steered toward a valid instance of its
  MaskBench schema by a logit bias on the instance's next token, so outputs end at realistic lengths
  with realistic forced shares; unguided vs guided vs guided without fast-forward, same targets, at
  1/64/256 (targets: guided >= 95% of unguided; fast-forward >= 1.3x);
- guided overhead on the plain random model: output throughput with 0% and 100% JSON-Schema-guided
  requests at 1/64/256 (random weights wander inside strings until max_tokens: a worst case);
- fast-forward on vs off, end to end, on schema-heavy outputs (target >= 1.3x);
- HF transformers' ``generate`` at batch 1 and 64 after the engine is freed (target: engine >= 10x at 64).

Writes ``throughput-<gpu>.json`` and ``guided-overhead-<gpu>.json``. ``--dry-run``: every section at
toy sizes on CPU with the tiny model (minutes become seconds; the figures mean nothing).

Usage: python benchmarks/gpu_engine.py [--dry-run] [--out DIR] [--model 8b|1b] [--sections a,b]
    [--maskbench DIR] [--every K] [--schemas N]
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import re
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from guided_overhead import LLAMA3, MASKBENCH, fast_forward_gain, maskbench_pairs, schema_heavy, steered_table  # noqa: E402
from guided_overhead import throughput as guided_throughput  # noqa: E402
from throughput import (  # noqa: E402
    CPU_SPEC,
    GPU_SPECS,
    decode_step_time,
    engine_throughput,
    hf_throughput,
    latency_at_concurrency,
    random_prompts,
    weight_bytes,
)

from guided.builtin.tiny_model import tiny_model_dir  # noqa: E402
from guided.llm import LLM  # noqa: E402

SECTIONS = ("decode", "throughput", "latency", "steered", "guided", "fast_forward", "hf")
GPU_SIZES = dict(concurrency=(1, 64, 256), in_len=256, out_len=128, guided_tokens=128, ff_requests=64,
                 ff_max_tokens=384, schemas=48, hf_batches=(1, 64), max_model_len=1024, steered_tokens=768,
                 rounds_at_1=8)  # fmt: skip
DRY_SIZES = dict(concurrency=(1, 4), in_len=16, out_len=8, guided_tokens=16, ff_requests=4, ff_max_tokens=64,
                 schemas=3, hf_batches=(1, 4), max_model_len=256, steered_tokens=200, rounds_at_1=1)  # fmt: skip


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def copy_bandwidth(device: str) -> float:
    """Bytes/s of a large device-to-device copy (read + written), median of 10 after warm-up."""
    n = (1 << 30) if device == "cuda" else (1 << 24)
    x = torch.empty(n, dtype=torch.uint8, device=device)
    y = torch.empty_like(x)
    times = []
    for i in range(13):
        sync(device)
        t = time.perf_counter()
        y.copy_(x)
        sync(device)
        if i >= 3:
            times.append(time.perf_counter() - t)
    return 2 * n / sorted(times)[len(times) // 2]


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


class Report:
    """Two JSON files under OUT, rewritten after every section."""

    def __init__(self, out: Path, device_name: str, meta: dict):
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.files = {"throughput": {**meta}, "guided-overhead": {**meta}}
        self.name = slug(device_name)

    def put(self, file: str, key: str, value) -> None:
        self.files[file][key] = value
        path = self.out / f"{file}-{self.name}.json"
        path.write_text(json.dumps(self.files[file], indent=1, default=str) + "\n")


def without_graphs(llm: LLM):
    """Context manager: decode steps run eagerly (the captured graphs are set aside, then restored)."""

    class _Eager:
        def __enter__(self):
            self.graphs = llm.engine.runner.graphs
            llm.engine.set_decode_graphs(None)

        def __exit__(self, *exc):
            llm.engine.set_decode_graphs(self.graphs)

    return _Eager()


def graph_replay_ms(llm: LLM) -> float | None:
    """GPU time of one batch-1 decode graph replay (CUDA events, median of 50): the step's device part."""
    graphs = llm.engine.runner.graphs
    if graphs is None or (1, 1) not in graphs.graphs:
        return None
    graph, times = graphs.graphs[1, 1], []
    for _ in range(60):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times[10:])[len(times[10:]) // 2]


def section_decode(llm: LLM, device: str, bandwidth: float) -> dict:
    engine = llm.engine
    result = {"graphs_on_ms": 1e3 * decode_step_time(engine)}
    if device == "cuda":  # the forward pass alone, without the host's share of the step
        result["graph_replay_ms"] = graph_replay_ms(llm)
    with without_graphs(llm):
        result["graphs_off_ms"] = 1e3 * decode_step_time(engine)
    roofline = weight_bytes(engine) / bandwidth
    result.update(weight_gb=weight_bytes(engine) / 1e9, roofline_ms=1e3 * roofline,
                  ratio=result["graphs_on_ms"] / (1e3 * roofline), target="<= 1.25 (graphs on)")  # fmt: skip
    return result


def section_throughput(llm: LLM, sizes: dict, vocab: int) -> list[dict]:
    rows = []
    for c in sizes["concurrency"]:
        prompts = random_prompts(c, sizes["in_len"], vocab, seed=c)
        row = {"concurrency": c, "in": sizes["in_len"], "out": sizes["out_len"]}
        llm.engine.block_manager.reset_prefix_cache()
        engine_throughput(llm.engine, prompts, 4)  # warm-up at this shape (first-use costs stay out)
        llm.engine.block_manager.reset_prefix_cache()
        row["graphs_on"] = engine_throughput(llm.engine, prompts, sizes["out_len"])
        with without_graphs(llm):
            llm.engine.block_manager.reset_prefix_cache()
            row["graphs_off"] = engine_throughput(llm.engine, prompts, sizes["out_len"])
        row["graphs_gain"] = row["graphs_on"]["output_tok_s"] / row["graphs_off"]["output_tok_s"]
        rows.append(row)
        print(f"  offline C={c}: {row['graphs_on']['output_tok_s']:.0f} tok/s with graphs, "
              f"{row['graphs_off']['output_tok_s']:.0f} without", flush=True)  # fmt: skip
    return rows


def section_latency(llm: LLM, sizes: dict, vocab: int) -> list[dict]:
    engine, rows = llm.engine, []
    engine.stream = True  # per-token outputs, so the first token's time is seen
    try:
        for c in sizes["concurrency"]:
            engine.block_manager.reset_prefix_cache()  # the throughput runs' prompts are these: no hits
            rows.append(latency_at_concurrency(engine, c, vocab, sizes["in_len"], sizes["out_len"]))
            print(f"  latency C={c}: {rows[-1]}", flush=True)
    finally:
        engine.stream = False
    return rows


def section_guided(llm: LLM, sizes: dict, vocab: int, schemas: list) -> dict:
    rows = []
    for c in sizes["concurrency"]:
        for f in (0.0, 1.0):
            guided_throughput(llm, schemas, c, 1, f, 8, 32, vocab)  # warm-up at this shape
            row = guided_throughput(llm, schemas, c, 2 if c == 1 else 1, f, sizes["guided_tokens"], 32, vocab)
            rows.append(row)
            print(f"  guided C={c} {int(100 * f)}%: {row['tok_s']:.0f} tok/s, forced "
                  f"{100 * row['forced_fraction']:.1f}%, {row['finish']}, masks {row['masks']}", flush=True)  # fmt: skip
    ratios = {}
    for c in sizes["concurrency"]:
        by = {r["guided_fraction"]: r for r in rows if r["concurrency"] == c}
        ratios[str(c)] = by[1.0]["tok_s"] / by[0.0]["tok_s"]
    return {"rows": rows, "guided100_over_free": ratios, "target": ">= 0.95 at every concurrency",
            "note": "unguided requests run to max_tokens; guided ones stop when their schema completes"}  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="toy sizes on CPU with the tiny model")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    ap.add_argument("--model", default="8b", choices=["8b", "1b"])
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--maskbench", type=Path, default=MASKBENCH, help="folder of MaskBench schema files")
    ap.add_argument("--every", type=int, default=25, help="every K-th MaskBench file, sorted by name")
    ap.add_argument("--schemas", type=int, default=None, help="guided schema pool size")
    args = ap.parse_args(argv)
    sections = [s for s in args.sections.split(",") if s]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        ap.error(f"unknown sections {sorted(unknown)}; known: {', '.join(SECTIONS)}")
    if not args.dry_run and not torch.cuda.is_available():
        print("gpu_engine.py needs a CUDA GPU (or --dry-run); none is available, nothing was measured.")
        return 0
    device = "cpu" if args.dry_run else "cuda"
    sizes = dict(DRY_SIZES if args.dry_run else GPU_SIZES)
    if args.schemas is not None:
        sizes["schemas"] = args.schemas
    tokenizer = str(LLAMA3) if LLAMA3.exists() else "builtin"
    if args.dry_run:
        spec, dtype, model_name = CPU_SPEC, "float32", "tiny llama (hidden 128, 2 layers), fp32"
    else:
        key = {"1b": "llama-3.2-1b", "8b": "llama-3.1-8b"}[args.model]
        spec, dtype, model_name = replace(GPU_SPECS[key], init_device="cuda"), "bfloat16", key + " (random, bf16)"
    device_name = torch.cuda.get_device_name() if device == "cuda" else "cpu-dry-run"
    meta = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "device": device_name,
            "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d"), "model": model_name, "tokenizer": Path(tokenizer).parent.name
            if tokenizer != "builtin" else "builtin", "sizes": sizes}  # fmt: skip
    report = Report(args.out, device_name, meta)
    failures = []

    def run(name: str, file: str, fn):
        if name not in sections:
            return None
        print(f"[{name}]", flush=True)
        start = time.perf_counter()
        try:
            value = fn()
        except Exception as e:  # one section's failure is reported; the others still run
            traceback.print_exc()
            failures.append(name)
            value = {"error": f"{type(e).__name__}: {e}"}
        report.put(file, name, value)
        report.put(file, f"{name}_seconds", round(time.perf_counter() - start, 1))
        return value

    start = time.perf_counter()
    model_dir = str(tiny_model_dir(tokenizer, spec))
    report.put("throughput", "model_build_s", round(time.perf_counter() - start, 1))
    bandwidth = copy_bandwidth(device)
    report.put("throughput", "copy_bandwidth_gb_s", bandwidth / 1e9)
    engine_sections = [s for s in sections if s != "hf"]
    if engine_sections:
        start = time.perf_counter()
        llm = LLM(model_dir, device=device, dtype=dtype, max_model_len=sizes["max_model_len"],
                  max_num_seqs=max(sizes["concurrency"]), max_num_batched_tokens=8192 if device == "cuda" else 2048,
                  compile_timeout=30.0)  # fmt: skip
        llm.compile_service.grammars.cache_size = 4096
        graphs = llm.engine.runner.graphs
        report.put("throughput", "engine_load_s", round(time.perf_counter() - start, 1))
        report.put("throughput", "engine", {**llm.engine.stats(), "graph_error": graphs.error if graphs else None})
        if device == "cuda" and not llm.engine.stats()["num_cuda_graphs"]:
            failures.append("cuda_graphs")  # the engine runs, but not as it should on a GPU
        vocab = len(llm.tokenizer) - 16
        llm.engine.stream = False
        engine_throughput(llm.engine, random_prompts(4, sizes["in_len"], vocab, seed=99), 4)  # warm-up
        run("decode", "throughput", lambda: section_decode(llm, device, bandwidth))
        run("throughput", "throughput", lambda: section_throughput(llm, sizes, vocab))
        run("latency", "throughput", lambda: section_latency(llm, sizes, vocab))
        if "guided" in sections or "steered" in sections:
            t = time.perf_counter()
            pairs, pool = maskbench_pairs(llm, args.every, sizes["schemas"], args.maskbench)
            pool["compile_s"] = round(time.perf_counter() - t, 1)
            report.put("guided-overhead", "schema_pool", pool)
            if not pairs:
                failures.append("guided")
                report.put("guided-overhead", "guided", {"error": f"no MaskBench schema compiled from {args.maskbench}"})
            else:
                run("steered", "guided-overhead", lambda: steered_table(
                    llm, pairs, sizes["concurrency"], sizes["steered_tokens"], 32, vocab,
                    log=lambda line: print(line, flush=True), rounds_at_1=sizes["rounds_at_1"]))
                schemas = [schema for schema, _ in pairs]
                run("guided", "guided-overhead", lambda: section_guided(llm, sizes, vocab, schemas))
        run("fast_forward", "guided-overhead", lambda: fast_forward_gain(
            llm, schema_heavy(sizes["ff_requests"]), sizes["ff_requests"], sizes["ff_max_tokens"], vocab))
        engine_tok_s = {str(r["concurrency"]): r["graphs_on"]["output_tok_s"]
                        for r in report.files["throughput"].get("throughput") or [] if "graphs_on" in r}  # fmt: skip
        del llm, graphs
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
    else:
        engine_tok_s = {}

    def hf():
        pad = 0
        batches = list(sizes["hf_batches"])
        prompts = random_prompts(max(batches), sizes["in_len"], 1000, seed=max(batches))
        result = hf_throughput(model_dir, prompts, sizes["out_len"], batches, device,
                               torch.bfloat16 if device == "cuda" else torch.float32, pad)  # fmt: skip
        top = str(max(batches))
        if top in engine_tok_s:
            result["engine_over_hf_at_batch"] = {top: engine_tok_s[top] / result["per_batch_tok_s"][int(top)]}
            result["target"] = ">= 10 at batch 64"
        return result

    run("hf", "throughput", hf)
    print(json.dumps(report.files, indent=1, default=str)[-6000:])
    if failures:
        print(f"gpu_engine.py: failed sections: {', '.join(failures)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
