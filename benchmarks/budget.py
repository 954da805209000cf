"""Budget-aware decoding: how many constrained outputs end complete and valid, and what it costs.

    .venv/bin/python benchmarks/budget.py [--every K] [--max-tokens N] [--slack S] [--seeds 1,2] [--tag NAME]

A tiny random-weight Llama (the Llama 3 tokenizer of ../shared) generates under every K-th schema of
MaskBench and maskbench-hard, twice per seed: with ``budget_aware=False`` (the plain decoder: what
guided did before) and with the default budget-aware decoding, at the same ``max_tokens``: a fixed
budget (``--max-tokens``, the held-out check's 64) and a small one (each schema's shortest complete
output plus 0..``--slack`` tokens). A random model wanders in free strings, so the plain decoder's
outputs are mostly cut; an output counts as valid when it finished and ``jsonschema`` (the schema's
draft, with its format checker) accepts it.

Cost: every budget-aware output is replayed token by token on a fresh compile (the masks' first
visits, as in MaskBench's TBM), timing per token guided's plain mask, its budget check
(``BudgetSteering.fits`` of the token, with the room the output had), and llguidance's plain mask of
the same token (its own matcher, same tokenizer), in the same process: p50/p99 and ratios; then
guided's again on the same grammar (masks and needs cached: a schema served before). The engine's
own time in steering (checks, resampling, endings) is reported beside its wall time; on CPU the
resampling runs the reference sampler (a full Philox pass over the vocabulary per draw).

Writes ``benchmarks/results/budget-<tag>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("GUIDED_SHARED", REPO.parent / "shared"))
RESULTS = REPO / "benchmarks" / "results"


def quantiles(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    a = np.asarray(values) * 1e6
    return {"n": len(values), "p50_us": round(float(np.percentile(a, 50)), 2),
            "p99_us": round(float(np.percentile(a, 99)), 2), "max_us": round(float(a.max()), 2)}  # fmt: skip


def valid(schema, out) -> bool:
    import jsonschema

    if out.finish_reason != "stop":
        return False
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls(schema, format_checker=cls.FORMAT_CHECKER).validate(json.loads(out.text))
    except (jsonschema.ValidationError, json.JSONDecodeError):
        return False
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--every", type=int, default=40)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--slack", type=int, default=20)
    ap.add_argument("--seeds", default="1")
    ap.add_argument("--tag", default="cpu")
    args = ap.parse_args()
    warnings.simplefilter("ignore")  # schema relaxation notes

    from guided.bench.engines import LLGuidanceEngine
    from guided.builtin.tiny_model import TinyModelSpec, tiny_model_dir
    from guided.builtin.tokenizers import load_tokenizer
    from guided.constraints import JsonSchema
    from guided.engine.budget import BudgetSteering
    from guided.engine.sampling_params import SamplingParams
    from guided.grammar.compiler import GrammarCompiler
    from guided.llm import LLM
    from guided.schema.compiler import compile_json_schema

    llama3 = SHARED / "tokenizers" / "llama3" / "tokenizer.model"
    spec = TinyModelSpec(arch="llama", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                         intermediate_size=128, seed=7)  # fmt: skip
    llm = LLM(tiny_model_dir(str(llama3), spec), device="cpu", max_model_len=2048, max_num_seqs=256,
              compile_timeout=60.0)  # fmt: skip
    llm.compile_service.grammars.cache_size = 4096
    files = []
    for name in ("maskbench", "maskbench-hard"):
        files += sorted((SHARED / "data" / name).glob("*.json"))[:: args.every]
    sample, refused_compile, needs = [], 0, []
    for f in files:
        schema = json.loads(f.read_text(encoding="utf-8"))["schema"]
        try:
            compiled = llm.compile_service.compile(JsonSchema(schema))
        except Exception:  # noqa: BLE001 - refused by the compiler: outside this benchmark
            refused_compile += 1
            continue
        need = llm.engine.budget.start_need(compiled.matcher())[0]
        sample.append((f.name, schema, need))
        needs.append(need)
    known = [n for n in needs if n is not None]
    print(f"{len(files)} schemas, {len(sample)} compiled, shortest output known for {len(known)} "
          f"(median {int(np.median(known))} tokens, max {max(known)})", file=sys.stderr)  # fmt: skip

    report = {"command": " ".join(["benchmarks/budget.py", *sys.argv[1:]]), "schemas": len(files),
              "compiled": len(sample), "needs_known": len(known), "need_median": int(np.median(known)),
              "need_max": max(known), "machine": platform.platform(), "python": platform.python_version(),
              "budgets": {}}  # fmt: skip
    replay = []  # (schema name, schema, token ids, max_tokens) of budget-aware outputs
    for budget_name in ("fixed", "small"):
        rows = {}
        for aware in (False, True):
            counts = {"valid": 0, "stop_invalid": 0, "length": 0, "refused": 0, "error": 0, "budget_forced": 0}
            wall = steer = 0.0
            for seed in [int(s) for s in args.seeds.split(",")]:
                budgets = [args.max_tokens if budget_name == "fixed" else
                           (n if n is not None else args.max_tokens) + (i * 7) % (args.slack + 1)
                           for i, (_, _, n) in enumerate(sample)]  # fmt: skip
                params = [SamplingParams(temperature=1.0, seed=seed, max_tokens=b, budget_aware=aware) for b in budgets]
                steer0 = llm.engine.budget.steer_s
                t0 = time.perf_counter()
                outs = llm.generate(["JSON:"] * len(sample), params, use_tqdm=False,
                                    response_format=[JsonSchema(s) for _, s, _ in sample])  # fmt: skip
                wall += time.perf_counter() - t0
                steer += llm.engine.budget.steer_s - steer0
                for (name, schema, _), b, out in zip(sample, budgets, outs, strict=True):
                    if out.finish_reason == "error":
                        counts["refused" if out.error and "too small" in out.error else "error"] += 1
                    elif valid(schema, out):
                        counts["valid"] += 1
                    elif out.finish_reason == "length":
                        counts["length"] += 1
                    else:
                        counts["stop_invalid"] += 1
                    counts["budget_forced"] += out.outputs[0].budget_forced
                    if aware and budget_name == "small" and seed == int(args.seeds.split(",")[0]):
                        replay.append((name, schema, out.token_ids, b))
            n = len(sample) * len(args.seeds.split(","))
            counts["valid_share"] = round(counts["valid"] / n, 4)
            counts["wall_s"], counts["steer_s"] = round(wall, 2), round(steer, 3)
            rows["budget_aware" if aware else "plain"] = counts
            print(budget_name, "budget_aware" if aware else "plain", counts, file=sys.stderr)
        report["budgets"][budget_name] = rows

    # ------------------------------------------------------------------ per-token cost, beside llguidance
    tokenizer = load_tokenizer(str(llama3))
    llg = LLGuidanceEngine(tokenizer)
    compiler = GrammarCompiler(llm.compile_service.grammars.vocabulary, cache_size=2)  # fresh: first visits
    steering = BudgetSteering(list(compiler.vocabulary.eos_ids), fast_forward=True)
    bitmask = np.zeros((1, compiler.vocabulary.bitmask_words), dtype=np.int32)
    ours_mask, ours_check, ours_both, theirs = [], [], [], []
    clock = time.perf_counter
    warm_mask, warm_check = [], []
    for _, schema, tokens, max_tokens in replay:
        compiled = compile_json_schema(compiler, schema)
        for mask_times, check_times, both in ((ours_mask, ours_check, ours_both), (warm_mask, warm_check, None)):
            m = compiled.matcher()  # first pass: first visits; second: masks and needs cached
            for i, t in enumerate(tokens):
                t0 = clock()
                m.fill_bitmask(bitmask, 0)
                t1 = clock()
                steering.fits(m, t, max_tokens - i)
                t2 = clock()
                if not m.accept_token(t):
                    break
                mask_times.append(t1 - t0)
                check_times.append(t2 - t1)
                if both is not None:
                    both.append(t2 - t0)
        try:
            handle = llg.compile(schema)
        except Exception:  # noqa: BLE001 - llguidance refuses some schemas
            continue
        ok, _, times = llg.check(handle, [t for t in tokens if t not in compiler.vocabulary.eos_ids])
        theirs += times
    cost = {"guided_mask": quantiles(ours_mask), "guided_budget_check": quantiles(ours_check),
            "guided_mask_plus_check": quantiles(ours_both), "llguidance_mask": quantiles(theirs),
            "guided_mask_warm": quantiles(warm_mask), "guided_budget_check_warm": quantiles(warm_check)}  # fmt: skip
    for q in ("p50_us", "p99_us"):
        cost[f"mask_plus_check_{q}_ratio"] = round(cost["guided_mask_plus_check"][q] / cost["llguidance_mask"][q], 3)
        cost[f"check_over_mask_{q}"] = round(cost["guided_budget_check"][q] / cost["guided_mask"][q], 3)
    report["per_token_cost"] = cost
    try:
        import llguidance

        report["llguidance"] = getattr(llguidance, "__version__", "?")
    except ImportError:
        pass
    print(json.dumps(cost, indent=1), file=sys.stderr)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"budget-{args.tag}.json"
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out.relative_to(REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
