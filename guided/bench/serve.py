"""Serving benchmark: N concurrent streaming clients on loopback against ``guided serve``, vs offline.

For each workload (free text, and guided by a regex) it runs, on the same model and the same prompts:

1. the offline engine (``LLM.generate`` on all requests at once, at most ``--concurrency`` sequences
   per step: the batch the server sees) - output tokens per second;
2. the server, started as a subprocess on 127.0.0.1, loaded by ``--concurrency`` httpx streaming
   clients that send ``--requests`` streaming ``/v1/completions`` requests in all - TTFT and TPOT
   p50/p99 measured by the clients, and output tokens per second from first send to last byte.

Every request generates exactly ``--max-tokens`` tokens (``ignore_eos``), so both sides do the same
work. Offline and served runs alternate ``--repeats`` times and the best of each is compared (the run
least disturbed by other work on the machine); medians are reported too. Bounded: a fixed request count, a per-request timeout and a wall-clock bound on the server.
Usage: ``guided bench serve [--model DIR] [--concurrency 64] [--requests 256] [--max-tokens 64]
[--out FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from guided.builtin.tiny_model import default_model_dir
from guided.constraints import Regex
from guided.engine.loader import load_hf_tokenizer
from guided.engine.sampling_params import SamplingParams
from guided.llm import LLM

__all__ = ["build_parser", "main"]

GUIDED_REGEX = "[a-z0-9 ,.]*"  # unbounded, so ignore_eos keeps every request at max_tokens
WORKLOADS = {"free": None, "guided": GUIDED_REGEX}


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = parser or argparse.ArgumentParser(prog="guided bench serve", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="local model directory (default: the embedded tiny model)")
    p.add_argument("--device", default="auto")
    p.add_argument("--concurrency", type=int, default=64, help="concurrent streaming clients (default: 64)")
    p.add_argument("--requests", type=int, default=256, help="requests per workload (default: 256)")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens per request (default: 64)")
    p.add_argument("--prompt-tokens", type=int, default=32, help="prompt length in tokens (default: 32)")
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3, help="alternated offline/server runs per workload (default: 3)")
    p.add_argument("--timeout", type=float, default=600.0, help="bound on each server run, seconds")
    p.add_argument("--out", help="write the results as JSON here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    model = str(args.model or default_model_dir())
    prompts = _prompts(model, args.requests, args.prompt_tokens)
    llm = _offline_llm(model, args)
    port, proc = _start_server(model, args)
    rows = []
    try:
        for name, regex in WORKLOADS.items():
            rows.append(_compare(llm, port, args, prompts, name, regex))
    finally:
        _stop(proc)
    result = {"model": Path(model).name, "device": args.device, "concurrency": args.concurrency, "requests": args.requests,
              "max_tokens": args.max_tokens, "prompt_tokens": args.prompt_tokens, "repeats": args.repeats,
              "machine": _machine(), "results": rows}  # fmt: skip
    _print(result)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


def _compare(llm, port: int, args, prompts, name: str, regex) -> dict:
    """Offline and served runs of one workload, alternated ``--repeats`` times; the best of each counts
    (the least disturbed by anything else on the machine), the medians are reported too."""
    offline, served = [], []
    for _ in range(args.repeats):
        offline.append(_offline(llm, args, prompts, regex))
        served.append(asyncio.run(asyncio.wait_for(_load(port, args, prompts, regex), args.timeout)))
    best = max(served, key=lambda r: r["tok_s"])
    return {"workload": name, "offline_tok_s": max(offline), "offline_tok_s_median": statistics.median(offline),
            **best, "tok_s_median": statistics.median(r["tok_s"] for r in served),
            "server_vs_offline": best["tok_s"] / max(offline)}  # fmt: skip


def _prompts(model: str, n: int, length: int) -> list[list[int]]:
    import random

    tok = load_hf_tokenizer(model)
    words = [w for w in tok.get_vocab() if w.isalpha()][:2000]
    rng = random.Random(0)
    out = []
    for _ in range(n):
        ids = tok.encode(" ".join(rng.choice(words) for _ in range(length)), add_special_tokens=False)[:length]
        out.append(ids)
    return out


def _params(args):

    return SamplingParams(max_tokens=args.max_tokens, temperature=1.0, seed=0, ignore_eos=True)


def _offline_llm(model: str, args):

    # the same batch the server can see: at most one sequence per client
    return LLM(model, device=args.device, max_num_seqs=min(args.max_num_seqs, args.concurrency))


def _offline(llm, args, prompts, regex) -> float:
    """Output tokens per second of the offline engine on all requests at once (after a warm-up)."""
    fmt = Regex(regex) if regex else None
    llm.generate(prompts[:4], _params(args), use_tqdm=False, response_format=fmt)  # warm-up, compile
    t0 = time.perf_counter()
    outs = llm.generate(prompts, _params(args), use_tqdm=False, response_format=fmt)
    elapsed = time.perf_counter() - t0
    return sum(len(o.token_ids) for o in outs) / elapsed


def _start_server(model: str, args):
    port = _free_port()
    cmd = [sys.executable, "-m", "guided", "serve", "--model", model, "--host", "127.0.0.1", "--port", str(port),
           "--served-model-name", "bench", "--device", args.device, "--max-num-seqs", str(args.max_num_seqs),
           "--max-queue-len", str(args.requests), "--log-level", "warning"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_ready(port, proc, 120.0)
    except BaseException:
        _stop(proc)
        raise
    return port, proc


def _stop(proc) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(port: int, proc, timeout: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {proc.stderr.read()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the server did not start within {timeout:g} s")


async def _load(port: int, args, prompts, regex) -> dict:
    import httpx

    url = f"http://127.0.0.1:{port}/v1/completions"
    base = {"model": "bench", "max_tokens": args.max_tokens, "temperature": 1.0, "seed": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    if regex:
        base["guided_regex"] = regex
    limits = httpx.Limits(max_connections=args.concurrency + 4)
    async with httpx.AsyncClient(timeout=httpx.Timeout(300.0), limits=limits) as client:
        await _one(client, url, {**base, "prompt": prompts[0], "max_tokens": 4})  # warm-up, compile
        queue: asyncio.Queue = asyncio.Queue()
        for p in prompts:
            queue.put_nowait(p)
        results: list[tuple[float, float, int]] = []

        async def worker():
            while not queue.empty():
                prompt = queue.get_nowait()
                results.append(await _one(client, url, {**base, "prompt": prompt}))

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(args.concurrency)))
        elapsed = time.perf_counter() - t0
    ttft = [r[0] for r in results]
    tpot = [r[1] for r in results if r[2] > 1]
    tokens = sum(r[2] for r in results)
    return {"tok_s": tokens / elapsed, "output_tokens": tokens, "elapsed_s": elapsed,
            "ttft_p50_ms": _pct(ttft, 50) * 1e3, "ttft_p99_ms": _pct(ttft, 99) * 1e3,
            "tpot_p50_ms": _pct(tpot, 50) * 1e3, "tpot_p99_ms": _pct(tpot, 99) * 1e3}  # fmt: skip


async def _one(client, url: str, body: dict) -> tuple[float, float, int]:
    """(TTFT, TPOT, output tokens) of one streaming request, measured at the client."""
    start = time.perf_counter()
    first = None
    tokens = 0
    async with client.stream("POST", url, json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread())[:500]!r}")
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            elif first is None and chunk.get("choices"):
                first = time.perf_counter()
    end = time.perf_counter()
    first = first or end
    return first - start, (end - first) / max(tokens - 1, 1), tokens


def _pct(values: list[float], q: int) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def _machine() -> dict:
    info = {"python": platform.python_version(), "cpus": os.cpu_count()}
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        pass
    return info


def _print(result: dict) -> None:
    print(f"serve benchmark: {result['concurrency']} streaming clients, {result['requests']} requests x "
          f"{result['max_tokens']} tokens, model {Path(result['model']).name}")  # fmt: skip
    head = f"{'workload':<9} {'offline tok/s':>13} {'server tok/s':>12} {'ratio':>6} {'TTFT p50/p99 ms':>17} {'TPOT p50/p99 ms':>17}"
    print(head)
    for r in result["results"]:
        print(f"{r['workload']:<9} {r['offline_tok_s']:>13.0f} {r['tok_s']:>12.0f} {r['server_vs_offline']:>6.2f} "
              f"{r['ttft_p50_ms']:>8.0f}/{r['ttft_p99_ms']:<8.0f} {r['tpot_p50_ms']:>8.1f}/{r['tpot_p99_ms']:<8.1f}")


if __name__ == "__main__":
    raise SystemExit(main())
