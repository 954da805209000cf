"""Schema-free values: unbounded (context-free ``any`` nonterminal, the default) against the opt-in
regular bound ``any_depth=N``, on the same MaskBench schemas, in one process.

    python benchmarks/schema_any_policy.py MASKBENCH_DIR --tokenizer TOK [--every K] [--limit N]

For each schema (both variants compiled in turn, each with its own compiler cache) it records the
time to first mask (compile + first mask) and the time per mask over the schema's test instances,
then prints per-variant medians/p90 and the ratios unbounded / bounded, plus pass counts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import warnings

from guided.bench.engines import make_engine
from guided.bench.maskbench import run_file, schema_files
from guided.builtin.tokenizers import load_tokenizer


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("paths", nargs="+")
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--every", type=int, default=1)
    p.add_argument("--limit", type=int)
    p.add_argument("--any-depth", type=int, default=10)
    args = p.parse_args(argv)
    tok = load_tokenizer(args.tokenizer)
    variants = {
        "unbounded": make_engine("guided", tok),
        "bounded": make_engine("guided", tok, any_depth=args.any_depth),
    }
    stats = {v: {"ttfm": [], "tbm": [], "passing": 0, "cfg": 0} for v in variants}
    ratios_ttfm, ratios_tbm = [], []
    warnings.simplefilter("ignore")
    for path in schema_files(args.paths, args.every, args.limit):
        row = {}
        for name, engine in variants.items():
            try:
                r = run_file(engine, tok, path)
            except Exception as e:  # a mask over its time bound: counted as not compiled
                r = {"status": type(e).__name__}
            if r["status"] != "ok":
                row[name] = None
                continue
            s = stats[name]
            s["passing"] += r["passed"]
            s["ttfm"].append(r["ttfm_s"])
            s["tbm"] += r["tbm_s"]
            tbm = statistics.mean(r["tbm_s"]) if r["tbm_s"] else None
            row[name] = (r["ttfm_s"], tbm)
        if row.get("unbounded") and row.get("bounded"):
            (ua, ub), (ba, bb) = row["unbounded"], row["bounded"]
            ratios_ttfm.append(ua / ba)
            if ub and bb:
                ratios_tbm.append(ub / bb)
    for name, s in stats.items():
        line = {"variant": name, "compiled": len(s["ttfm"]), "passing": s["passing"]}
        line["ttfm_us"] = {
            "p50": round(_pct(s["ttfm"], 0.5) * 1e6, 1),
            "p90": round(_pct(s["ttfm"], 0.9) * 1e6, 1),
        }
        line["tbm_us"] = {"p50": round(_pct(s["tbm"], 0.5) * 1e6, 1), "p90": round(_pct(s["tbm"], 0.9) * 1e6, 1),
                          "p99": round(_pct(s["tbm"], 0.99) * 1e6, 1)}  # fmt: skip
        print(json.dumps(line))
    print(json.dumps({
        "schemas_both": len(ratios_ttfm),
        "ttfm_ratio_unbounded_over_bounded": {"median": round(statistics.median(ratios_ttfm), 3) if ratios_ttfm else None,
                                              "p90": round(_pct(ratios_ttfm, 0.9), 3)},
        "tbm_mean_ratio_unbounded_over_bounded": {"median": round(statistics.median(ratios_tbm), 3) if ratios_tbm else None,
                                                  "p90": round(_pct(ratios_tbm, 0.9), 3)},
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
