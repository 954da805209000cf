"""Guided-decoding overhead: output throughput with 0%, 50% and 100% JSON-Schema-guided requests, and the
end-to-end gain of fast-forward (forced tokens prefilled as a chunk) on schema-heavy outputs; then the
same on realistic outputs: requests steered toward valid MaskBench instances (``Steering``); and a
reasoning model's shape: free reasoning, ``</think>``, then the schema's JSON (``Reasoning``).

CUDA (bf16 random-weight models shaped like Llama-3.2-1B and Llama-3.1-8B, Llama 3 tokenizer, built on
the machine): 1, 64 and 256 concurrent requests. Targets: 100% guided >= 95% of unguided output
throughput at every concurrency; fast-forward >= 1.3x faster end to end on schema-heavy outputs.

CPU: the tiny model (builtin tokenizer by default), the same table, fewer requests.

Throughput: every request has the same ``max_tokens``; unguided requests ignore EOS and run to it,
guided ones end when their schema completes. Output tok/s = all output tokens / wall time of the
batch; req/s likewise. Concurrency C = C requests in flight (one ``generate`` call of C prompts,
repeated ``--rounds`` times). Schemas: a deterministic MaskBench sample (every K-th file by name) that
compiles, compiled before timing (compile time is not decode overhead; the compile cache holds them).

Usage: python benchmarks/guided_overhead.py [--device auto|cpu|cuda] [--models tiny|1b,8b]
    [--tokenizer builtin|llama3] [--concurrency 1,64,256] [--rounds N] [--max-tokens N] [--every K]
Writes ``benchmarks/results/guided-overhead-<cpu|gpu>.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import CPU_SPEC, GPU_SPECS, RESULTS, random_prompts, sync  # noqa: E402

from guided.builtin.tiny_model import tiny_model_dir  # noqa: E402
from guided.constraints import JsonSchema, Reasoning  # noqa: E402
from guided.engine.sampling_params import SamplingParams  # noqa: E402
from guided.errors import GuidedError  # noqa: E402
from guided.llm import LLM  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("GUIDED_SHARED", REPO.parent / "shared"))
LLAMA3 = SHARED / "tokenizers" / "llama3" / "tokenizer.model"
MASKBENCH = SHARED / "data" / "maskbench"
# Schemas with regex patterns are left out of the throughput pool: a few of them hit the regex
# engine's emptiness-check state limit lazily, mid-generation, which currently escapes as an
# exception from LLMEngine.step() and would abort the whole batch.
EXCLUDE_KEYWORDS = ('"pattern"', '"patternProperties"')
MASK_STATS = ("mask_rows_filled", "mask_rows_computed", "mask_rows_held", "mask_collect_s")


# ---------------------------------------------------------------------- workloads
def maskbench_pairs(llm: LLM, every: int, limit: int, folder: Path = MASKBENCH,
                    need_instance: bool = True) -> tuple[list, dict]:  # fmt: skip
    """(schema, compact JSON text of its first valid instance or None) for every ``every``-th MaskBench
    file that compiles (and has a valid instance, if ``need_instance``), up to ``limit``."""
    files = sorted(folder.glob("*.json"))[::every]
    chosen, failed, excluded, no_instance = [], 0, 0, 0
    for f in files:
        data = json.loads(f.read_text())
        schema = data["schema"]
        if any(k in json.dumps(schema) for k in EXCLUDE_KEYWORDS):
            excluded += 1
            continue
        valid = [t["data"] for t in data.get("tests", []) if t.get("valid")]
        if need_instance and not valid:
            no_instance += 1
            continue
        try:
            llm.compile_service.compile(JsonSchema(schema))
        except Exception:  # refused by the compiler (recursive, too large, ...): not part of the workload
            failed += 1
            continue
        text = json.dumps(valid[0], separators=(",", ":"), ensure_ascii=False) if valid else None
        chosen.append((schema, text))
        if len(chosen) >= limit:
            break
    return chosen, {"files_scanned": len(files), "every": every, "compiled": len(chosen),
                    "compile_failed": failed, "excluded_pattern": excluded, "no_valid_instance": no_instance}  # fmt: skip


def schema_heavy(n: int, seed: int = 0) -> list[dict]:
    """Schemas whose outputs are mostly fixed text: long required keys, consts, small enums, booleans."""
    rng = random.Random(seed)
    words = ["customer", "identifier", "shipping", "address", "billing", "status", "category", "priority",
             "created", "updated", "timestamp", "description", "quantity", "currency", "warehouse", "region"]  # fmt: skip
    out = []
    for _ in range(n):
        props = {}
        for j in range(rng.randrange(8, 14)):
            key = "_".join(rng.sample(words, 2)) + f"_{j}"
            kind = rng.randrange(4)
            if kind == 0:
                props[key] = {"const": rng.choice(words)}
            elif kind == 1:
                props[key] = {"enum": [w + "_value" for w in rng.sample(words, rng.randrange(1, 3))]}
            elif kind == 2:
                props[key] = {"type": "boolean"}
            else:
                props[key] = {"type": "integer", "minimum": 0, "maximum": 9}
        out.append(
            {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}
        )
    return out


class Steering:
    """Realistic outputs from random weights. Each request gets a target text (a valid instance of its
    schema, compact JSON; the same text for an unguided request) and, before every engine step, a
    ``logit_bias`` of +``bias`` on the target's next token, then on EOS once the target is written. A
    guided output follows its target unless the mask forbids the target's token (another key order or
    spelling); from there it is no longer steered ("lost") and runs as the random model does.

    Tokens the engine appended itself (fast-forward) may split the text differently from the target's
    own tokens: the rest of the target is then re-encoded from where the output's text stands."""

    def __init__(self, llm: LLM, bias: float = 30.0):
        self.llm, self.bias = llm, bias
        self.tokenizer = llm.tokenizer
        eos = llm.engine.eos_token_ids
        self.eos = eos[0] if eos else None
        self.targets: dict[int, dict] = {}  # id(SamplingParams) -> target state
        self._step = None

    def params(self, target: str, max_tokens: int, guided: bool) -> SamplingParams:
        """Fresh SamplingParams for one request steered toward ``target``."""
        ids = self.tokenizer.encode(target, add_special_tokens=False)
        # the first token's bias is there from the start: the prefill step samples it
        # (the plain decoder here and below: figures comparable with earlier runs; what budget-aware
        # decoding costs is benchmarks/budget.py's)
        p = SamplingParams(temperature=1.0, seed=1, max_tokens=max_tokens, logit_bias={ids[0]: self.bias},
                           budget_aware=False)  # fmt: skip
        self.targets[id(p)] = {"text": target, "ids": ids, "matched": 0, "seen": 0, "lost": False,
                               "guided": guided}  # fmt: skip
        return p

    def __enter__(self):
        engine = self.llm.engine
        self._step = engine.step

        def step():
            for seq in engine.scheduler.running:
                state = self.targets.get(id(seq.params))
                if state is not None and not state["lost"]:
                    seq.params.logit_bias = self._next(state, seq.output_token_ids)
            return self._step()

        engine.step = step
        return self

    def __exit__(self, *exc):
        self.llm.engine.step = self._step

    def _next(self, state: dict, out: list[int]) -> dict[int, float] | None:
        for token in out[state["seen"] :]:
            ids, m = state["ids"], state["matched"]
            if m < len(ids) and ids[m] == token:
                state["matched"] = m + 1
                continue
            text = self.tokenizer.decode(out, skip_special_tokens=True)  # realign on the text
            if not state["text"].startswith(text):
                state["lost"] = True
                return None
            rest = self.tokenizer.encode(state["text"][len(text) :], add_special_tokens=False)
            state["ids"], state["matched"] = out + rest, len(out)
            break
        state["seen"] = len(out)
        ids, m = state["ids"], state["matched"]
        token = ids[m] if m < len(ids) else self.eos
        return {token: self.bias} if token is not None else None

    def summary(self) -> dict:
        states = list(self.targets.values())
        return {"requests": len(states), "lost": sum(s["lost"] for s in states),
                "lost_guided": sum(s["lost"] and s["guided"] for s in states)}  # fmt: skip


# ---------------------------------------------------------------------- measurements
def run_batch(llm: LLM, prompts, guided_fraction: float, schemas: list, max_tokens: int, offset: int) -> dict:
    """One generate call of len(prompts) requests; request k (counted from ``offset`` across a cell's
    rounds) is guided when it moves floor(k * f) on, so a share f of them is guided even at batch 1."""
    n = len(prompts)

    def is_guided(k: int) -> bool:
        return int((k + 1) * guided_fraction) > int(k * guided_fraction)

    formats = [JsonSchema(schemas[(offset + i) % len(schemas)]) if is_guided(offset + i) else None
               for i in range(n)]  # fmt: skip
    free = SamplingParams(temperature=1.0, seed=1, max_tokens=max_tokens, ignore_eos=True)
    guided = SamplingParams(temperature=1.0, seed=1, max_tokens=max_tokens, budget_aware=False)
    params = [guided if f is not None else free for f in formats]
    sync()
    start = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False, response_format=formats)
    sync()
    seconds = time.perf_counter() - start
    reasons: dict[str, int] = {}
    for o in outs:
        reasons[o.finish_reason] = reasons.get(o.finish_reason, 0) + 1
    return {
        "tokens": sum(len(o.token_ids) for o in outs),
        "requests": n,
        "seconds": seconds,
        "finish": reasons,
    }


def throughput(llm: LLM, schemas: list, concurrency: int, rounds: int, fraction: float, max_tokens: int,
               prompt_len: int, vocab: int) -> dict:  # fmt: skip
    before = llm.engine.stats()
    total = {"tokens": 0, "requests": 0, "seconds": 0.0, "finish": {}}
    for r in range(rounds):
        prompts = random_prompts(concurrency, prompt_len, vocab, seed=1000 * concurrency + r)
        b = run_batch(llm, prompts, fraction, schemas, max_tokens, offset=r * concurrency)
        for k in ("tokens", "requests", "seconds"):
            total[k] += b[k]
        for k, v in b["finish"].items():
            total["finish"][k] = total["finish"].get(k, 0) + v
    return {"concurrency": concurrency, "guided_fraction": fraction, **total,
            "tok_s": total["tokens"] / total["seconds"], "req_s": total["requests"] / total["seconds"],
            **engine_delta(before, llm.engine.stats())}  # fmt: skip


def reasoning_then_json(llm: LLM, schemas: list, concurrency: int, rounds: int, max_tokens: int, prompt_len: int,
                        vocab: int) -> dict:  # fmt: skip
    """Every request a reasoning model's reply: free reasoning, ``</think>`` (forced after
    ``max_tokens // 2`` tokens: a random model never ends it), then the schema's JSON in the rest
    (budget-aware, as served by default). Constraints compiled and their masks computed (one untimed
    pass of the same requests) before timing."""
    end_ids = llm.tokenizer.encode("</think>", add_special_tokens=False)
    params = SamplingParams(temperature=1.0, seed=1, max_tokens=max_tokens, max_reasoning_tokens=max_tokens // 2,
                            reasoning_end_ids=end_ids)  # fmt: skip
    before = llm.engine.stats()
    total = {"tokens": 0, "requests": 0, "seconds": 0.0, "finish": {}, "valid_answers": 0, "refused": 0}
    for r in range(rounds):
        prompts = random_prompts(concurrency, prompt_len, vocab, seed=1000 * concurrency + r)
        picked = [schemas[(r * concurrency + i) % len(schemas)] for i in range(concurrency)]
        # strict answers (as clients send them): after a reasoning section no run-time name check reads
        # the JSON, so a schema whose objects could still repeat a name is refused; those are skipped
        formats = [Reasoning(JsonSchema(s, strict=True)) for s in picked]
        for f in list(formats):
            try:
                llm.compile_service.compile(f)
            except GuidedError:
                total["refused"] += 1
                picked.pop(formats.index(f))
                formats.remove(f)
        prompts = prompts[: len(formats)]
        # an untimed pass first: these grammars are new to the engine (the JSON rows' share masks
        # with earlier rows); the row measures decoding with masks computed, not first visits
        llm.generate(prompts, params, use_tqdm=False, response_format=formats)
        sync()
        start = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False, response_format=formats)
        sync()
        total["seconds"] += time.perf_counter() - start
        total["tokens"] += sum(len(o.token_ids) for o in outs)
        total["requests"] += len(formats)
        for o, schema in zip(outs, picked, strict=True):
            total["finish"][o.finish_reason] = total["finish"].get(o.finish_reason, 0) + 1
            total["valid_answers"] += o.finish_reason == "stop" and _valid(schema, o.text.partition("</think>")[2])
    return {"concurrency": concurrency, **total, "tok_s": total["tokens"] / total["seconds"],
            "req_s": total["requests"] / total["seconds"], **engine_delta(before, llm.engine.stats())}  # fmt: skip


def _valid(schema, text: str) -> bool:
    import jsonschema

    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError, jsonschema.SchemaError):
        return False
    return True


def engine_delta(before: dict, after: dict) -> dict:
    """The share of output tokens that were forced, and the mask statistics, between two ``stats()``."""
    produced = after["num_output_tokens"] - before["num_output_tokens"]
    return {"forced_fraction": (after["num_forced_tokens"] - before["num_forced_tokens"]) / max(produced, 1),
            "masks": {k: after[k] - before[k] for k in MASK_STATS}}  # fmt: skip


def fast_forward_gain(llm: LLM, schemas: list, concurrency: int, max_tokens: int, vocab: int) -> dict:
    """End-to-end wall time of the same schema-heavy batch (greedy), fast-forward on then off, on one
    engine (the setting is read per step; a second engine would need a second model's memory)."""
    prompts = random_prompts(len(schemas), 16, vocab, seed=7)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, budget_aware=False)
    result = {"requests": len(schemas), "concurrency": concurrency}
    for s in schemas:  # compile outside the timed region
        llm.compile_service.compile(JsonSchema(s))
    setting = llm.engine.config.fast_forward
    try:
        for name, on in (("ff_off", False), ("ff_on", True)):
            llm.engine.config.fast_forward = on
            warm = SamplingParams(temperature=0.0, max_tokens=24, budget_aware=False)  # first-use costs out
            llm.generate(prompts, warm, use_tqdm=False, response_format=[JsonSchema(s) for s in schemas])
            before = llm.engine.stats()
            sync()
            start = time.perf_counter()
            outs = llm.generate(prompts, params, use_tqdm=False, response_format=[JsonSchema(s) for s in schemas])
            sync()
            seconds = time.perf_counter() - start
            after = llm.engine.stats()
            produced = after["num_output_tokens"] - before["num_output_tokens"]
            result[name] = {
                "seconds": seconds, "output_tokens": produced,
                "forced_fraction": (after["num_forced_tokens"] - before["num_forced_tokens"]) / max(produced, 1),
                "stopped": sum(o.finish_reason == "stop" for o in outs),
                "texts": [o.text for o in outs],
            }  # fmt: skip
    finally:
        llm.engine.config.fast_forward = setting
    # outputs whose text is the same either way (forced tokens take the grammar's tokenization, so the
    # model's free choices after them can differ; both are valid)
    result["same_text"] = sum(a == b for a, b in zip(result["ff_on"].pop("texts"), result["ff_off"].pop("texts"), strict=True))
    result["speedup"] = result["ff_off"]["seconds"] / result["ff_on"]["seconds"]
    result["target"] = ">= 1.3"
    return result


def steered(llm: LLM, pairs: list, concurrency: int, fraction: float, max_tokens: int, prompt_len: int,
            vocab: int, fast_forward: bool = True, rounds: int = 1) -> dict:  # fmt: skip
    """``rounds`` batches of ``concurrency`` requests steered toward valid instances (``Steering``; each
    round the next targets of ``pairs``); a share ``fraction`` of them guided by their schema. Output
    tok/s, stop reasons, forced share, masks."""
    steer = Steering(llm)
    setting = llm.engine.config.fast_forward
    llm.engine.config.fast_forward = fast_forward
    before = llm.engine.stats()
    outs, seconds = [], 0.0
    try:
        for r in range(rounds):
            prompts = random_prompts(concurrency, prompt_len, vocab, seed=1000 * concurrency + r)
            formats, params = [], []
            for i in range(concurrency):
                schema, text = pairs[(r * concurrency + i) % len(pairs)]
                guided = int((i + 1) * fraction) > int(i * fraction)
                formats.append(JsonSchema(schema) if guided else None)
                params.append(steer.params(text, max_tokens, guided))
            with steer:
                sync()
                start = time.perf_counter()
                outs += llm.generate(prompts, params, use_tqdm=False, response_format=formats)
                sync()
                seconds += time.perf_counter() - start
    finally:
        llm.engine.config.fast_forward = setting
    concurrency *= rounds
    delta = engine_delta(before, llm.engine.stats())
    finish: dict[str, int] = {}
    for o in outs:
        finish[o.finish_reason] = finish.get(o.finish_reason, 0) + 1
    tokens = sum(len(o.token_ids) for o in outs)
    return {"concurrency": concurrency // rounds, "rounds": rounds, "guided_fraction": fraction, "fast_forward": fast_forward,
            "tokens": tokens, "seconds": seconds, "tok_s": tokens / seconds, "req_s": concurrency / seconds,
            "finish": finish, **delta, "steering": steer.summary()}  # fmt: skip


def steered_table(llm: LLM, pairs: list, concurrencies, max_tokens: int, prompt_len: int, vocab: int,
                  log=print, rounds_at_1: int = 8) -> dict:  # fmt: skip
    """At each concurrency: unguided, guided and guided without fast-forward, the same targets each
    time, each after an untimed warm-up of the same batch. Ratios: guided / unguided output
    throughput (target >= 0.95) and the end-to-end gain of fast-forward (target >= 1.3)."""
    rows, ratios = [], {}
    for c in concurrencies:
        cells = {}
        for name, fraction, ff in (("free", 0.0, True), ("guided", 1.0, True), ("guided_no_ff", 1.0, False)):
            rounds = rounds_at_1 if c == 1 else 1
            steered(llm, pairs, c, fraction, max_tokens, prompt_len, vocab, ff, rounds)  # warm-up
            cells[name] = steered(llm, pairs, c, fraction, max_tokens, prompt_len, vocab, ff, rounds)
            r = cells[name]
            log(f"  steered C={c} {name}: {r['tok_s']:.0f} tok/s, {r['tokens']} tokens in {r['seconds']:.2f} s, "
                f"{r['finish']}, forced {100 * r['forced_fraction']:.1f}%, {r['steering']}, masks {r['masks']}")  # fmt: skip
        rows += list(cells.values())
        ratios[str(c)] = {"guided_over_free": cells["guided"]["tok_s"] / cells["free"]["tok_s"],
                          "fast_forward_gain": cells["guided_no_ff"]["seconds"] / cells["guided"]["seconds"]}  # fmt: skip
    return {"rows": rows, "ratios": ratios,
            "targets": {"guided_over_free": ">= 0.95", "fast_forward_gain": ">= 1.3 where >= 25% is forced"}}  # fmt: skip


# ---------------------------------------------------------------------- one model
def run_model(name: str, model_dir: str, args, device: str, dtype: str) -> dict:
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    common = dict(device=device, dtype=dtype, max_model_len=max(args.prompt_len + args.max_tokens, args.ff_max_tokens) + 64,
                  max_num_seqs=max(concurrencies), compile_timeout=600.0)  # fmt: skip
    llm = LLM(model_dir, **common)
    llm.compile_service.grammars.cache_size = 4096  # the whole schema pool stays compiled
    vocab = len(llm.tokenizer) - 16
    t = time.perf_counter()
    pairs, pool = maskbench_pairs(llm, args.every, args.max_schemas)
    schemas = [schema for schema, _ in pairs]
    pool["compile_s"] = time.perf_counter() - t
    run_batch(llm, random_prompts(4, args.prompt_len, vocab), 0.5, schemas, 8, 0)  # warm-up
    rows = []
    for c in concurrencies:
        rounds = max(1, args.rounds if c == 1 else args.rounds // 2)
        for f in (0.0, 0.5, 1.0):
            row = throughput(llm, schemas, c, rounds, f, args.max_tokens, args.prompt_len, vocab)
            rows.append(row)
            print(f"{name:14s} C={c:<4d} guided={int(100 * f):3d}%  {row['tok_s']:9.1f} tok/s  "
                  f"{row['req_s']:7.2f} req/s  forced {100 * row['forced_fraction']:5.1f}%  {row['finish']}",
                  flush=True)  # fmt: skip
    reasoning = []
    for c in concurrencies:
        rounds = max(1, args.rounds if c == 1 else args.rounds // 2)
        row = reasoning_then_json(llm, schemas, c, rounds, args.max_tokens, args.prompt_len, vocab)
        reasoning.append(row)
        print(f"{name:14s} C={c:<4d} reasoning then JSON  {row['tok_s']:9.1f} tok/s  {row['req_s']:7.2f} req/s  "
              f"valid answers {row['valid_answers']}/{row['requests']} (refused {row['refused']})  {row['finish']}", flush=True)  # fmt: skip
    ratios = {}
    for c in concurrencies:
        by = {r["guided_fraction"]: r for r in rows if r["concurrency"] == c}
        think = next(r for r in reasoning if r["concurrency"] == c)
        ratios[str(c)] = {"guided50_over_free": by[0.5]["tok_s"] / by[0.0]["tok_s"],
                          "guided100_over_free": by[1.0]["tok_s"] / by[0.0]["tok_s"],
                          "reasoning_then_json_over_free": think["tok_s"] / by[0.0]["tok_s"]}  # fmt: skip
    heavy = schema_heavy(args.ff_requests)
    ff = fast_forward_gain(llm, heavy, args.ff_requests, args.ff_max_tokens, vocab)
    steer = steered_table(llm, pairs, concurrencies, args.ff_max_tokens, args.prompt_len, vocab,
                          rounds_at_1=args.rounds)  # fmt: skip
    del llm
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return {"model": name, "schema_pool": pool, "throughput": rows, "reasoning_then_json": reasoning, "ratios": ratios,
            "ratio_target": "guided100_over_free >= 0.95 at every concurrency", "fast_forward": ff,
            "steered": steer}  # fmt: skip


def print_table(result: dict) -> None:
    print(f"\n{result['model']}: output tok/s (req/s) by share of guided requests")
    print(f"{'concurrency':>11} | {'0%':>18} | {'50%':>18} | {'100%':>18} | 100%/0% | forced@100%")
    for c, r in result["ratios"].items():
        by = {row["guided_fraction"]: row for row in result["throughput"] if str(row["concurrency"]) == c}
        cells = [f"{by[f]['tok_s']:9.1f} ({by[f]['req_s']:6.2f})" for f in (0.0, 0.5, 1.0)]
        print(f"{c:>11} | {cells[0]:>18} | {cells[1]:>18} | {cells[2]:>18} | {r['guided100_over_free']:7.3f} | "
              f"{100 * by[1.0]['forced_fraction']:9.1f}%")  # fmt: skip
    for c, r in result["ratios"].items():
        print(f"reasoning then JSON, concurrency {c}: {r['reasoning_then_json_over_free']:.3f} of unguided tok/s")
    for c, r in result["steered"]["ratios"].items():
        print(f"steered (realistic) outputs, concurrency {c}: guided/unguided {r['guided_over_free']:.3f}, "
              f"fast-forward {r['fast_forward_gain']:.2f}x")  # fmt: skip
    ff = result["fast_forward"]
    print(f"fast-forward on schema-heavy outputs ({ff['requests']} requests): off {ff['ff_off']['seconds']:.2f} s, "
          f"on {ff['ff_on']['seconds']:.2f} s -> {ff['speedup']:.2f}x (target {ff['target']}); "
          f"forced {100 * ff['ff_on']['forced_fraction']:.1f}% of output tokens")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--models", default=None, help="cuda: 1b,8b (default); cpu: tiny")
    ap.add_argument(
        "--tokenizer", default=None, help="builtin or llama3 (default: builtin on CPU, llama3 on CUDA)"
    )
    ap.add_argument("--concurrency", default=None, help="default 1,64,256 (CUDA) / 1,16,64 (CPU)")
    ap.add_argument(
        "--rounds", type=int, default=None, help="generate calls per cell at concurrency 1 (half above)"
    )
    ap.add_argument("--max-tokens", type=int, default=None)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--every", type=int, default=25, help="MaskBench sample: every K-th file by name")
    ap.add_argument("--max-schemas", type=int, default=None, help="default 256 (CUDA) / 64 (CPU)")
    ap.add_argument(
        "--ff-requests", type=int, default=None, help="schema-heavy requests for the fast-forward run"
    )
    ap.add_argument(
        "--ff-max-tokens", type=int, default=512, help="max_tokens of the fast-forward run (outputs complete)"
    )
    ap.add_argument("--cpu-threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    defaults = (dict(models="1b,8b", tokenizer="llama3", concurrency="1,64,256", rounds=8, max_tokens=256,
                     ff_requests=256, max_schemas=256) if cuda else
                dict(models="tiny", tokenizer="builtin", concurrency="1,16,64", rounds=4, max_tokens=128,
                     ff_requests=64, max_schemas=64))  # fmt: skip
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.cpu_threads:
        torch.set_num_threads(args.cpu_threads)
    tokenizer = str(LLAMA3) if args.tokenizer == "llama3" else args.tokenizer
    meta = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "machine": platform.platform(),
            "processor": platform.processor(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(), "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
            "device": torch.cuda.get_device_name() if cuda else "cpu", "tokenizer": args.tokenizer,
            "settings": {k: getattr(args, k) for k in ("concurrency", "rounds", "max_tokens", "prompt_len", "every",
                                                        "max_schemas", "ff_requests", "ff_max_tokens")}}  # fmt: skip
    if not cuda:
        meta["note"] = (
            f"CPU run on the tiny random-weight model at concurrency {args.concurrency} (the GPU run: 1,64,256) "
            f"with {args.rounds} round(s) at concurrency 1 and fewer above, max_tokens {args.max_tokens}, "
            f"{args.max_schemas} MaskBench schemas, to keep it to a few minutes; absolute numbers mean little"
        )
    results = []
    for name in args.models.split(","):
        if cuda:
            key = {"1b": "llama-3.2-1b", "8b": "llama-3.1-8b"}.get(name, name)
            model_dir, dtype = str(tiny_model_dir(tokenizer, GPU_SPECS[key])), "bfloat16"
        else:
            key, model_dir, dtype = (
                "tiny-llama (hidden 128, 2 layers), fp32",
                str(tiny_model_dir(tokenizer, CPU_SPEC)),
                "float32",
            )
        result = run_model(key, model_dir, args, "cuda" if cuda else "cpu", dtype)
        print_table(result)
        results.append(result)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"guided-overhead-{'gpu' if cuda else 'cpu'}.json"
    path.write_text(json.dumps({**meta, "models": results}, indent=1, default=str) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
