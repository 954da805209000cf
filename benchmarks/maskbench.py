"""MaskBench and the JSON Schema Test Suite, guided beside its peers, in one run (Llama 3 tokenizer).

    .venv/bin/python benchmarks/maskbench.py [--every K] [--jobs N] [--engines guided,llguidance]
        [--timeout S] [--jsts] [--tag NAME]

Runs ``guided bench maskbench`` (``guided.bench.maskbench``) once per engine on the same schema files
(every K-th of ../shared/data/maskbench, sorted by name), each engine single-threaded per schema with
N schemas in flight, and writes every engine's per-schema lines and summary to
``benchmarks/results/maskbench-<tag>.json`` with guided's ratios to each peer. ``--jsts`` does the
same for the JSON Schema Test Suite (``jsts-<tag>.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("GUIDED_SHARED", REPO.parent / "shared"))
LLAMA3 = SHARED / "tokenizers" / "llama3" / "tokenizer.model"
RESULTS = REPO / "benchmarks" / "results"


def run_engine(module: str, args: list[str], engine: str) -> tuple[list[dict], dict, float]:
    cmd = [sys.executable, "-m", module, *args, "--engine", engine]
    env = dict(os.environ, OMP_NUM_THREADS="1", RAYON_NUM_THREADS="1", MKL_NUM_THREADS="1")
    t0 = time.time()
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    if out.returncode or not lines:
        raise SystemExit(f"{engine} failed: {out.stderr[-2000:]}")
    return lines[:-1], lines[-1], time.time() - t0


def ratios(ours: dict, peer: dict) -> dict:
    def r(a, b):
        return round(a / b, 3) if b else None

    out = {
        "passing_pp": round(100 * (ours["passing"] - peer["passing"]) / max(ours["schemas"], 1), 2),
        "rejects_valid_diff": ours["rejects_valid"] - peer["rejects_valid"],
    }
    for k in ("ttfm_us", "tbm_us"):
        for q in ("p50", "p99", "max"):
            out[f"{k}_{q}_ratio"] = r(ours[k][q], peer[k][q])
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--every", type=int, default=1)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--engines", default="guided,llguidance")
    p.add_argument("--jsts", action="store_true", help="also run the JSON Schema Test Suite")
    p.add_argument("--tag", default=None)
    a = p.parse_args()
    engines = a.engines.split(",")
    tag = a.tag or ("full" if a.every == 1 and a.limit is None else f"every{a.every}")
    common = ["--tokenizer", str(LLAMA3), "--timeout", str(a.timeout), "--jobs", str(a.jobs)]
    meta = {"machine": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
            "jobs": a.jobs, "timeout_s": a.timeout, "tokenizer": "llama3"}  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)

    mb = [str(SHARED / "data" / "maskbench"), "--every", str(a.every)] + (["--limit", str(a.limit)] if a.limit else [])
    report = {"meta": {**meta, "every": a.every, "limit": a.limit}, "summaries": {}, "wall_s": {}, "lines": {}}
    for e in engines:
        lines, summary, wall = run_engine("guided.bench.maskbench", mb + common, e)
        report["summaries"][e], report["wall_s"][e], report["lines"][e] = summary, round(wall, 1), lines
        print(json.dumps(summary), flush=True)
    if "guided" in engines:
        report["ratios"] = {e: ratios(report["summaries"]["guided"], report["summaries"][e]) for e in engines if e != "guided"}
        print(json.dumps(report["ratios"]), flush=True)
    (RESULTS / f"maskbench-{tag}.json").write_text(json.dumps(report, indent=1) + "\n")

    if a.jsts:
        suite = [str(SHARED / "data" / "json-schema-test-suite")]
        rep = {"meta": meta, "summaries": {}, "lines": {}}
        for e in engines:
            lines, summary, _ = run_engine("guided.bench.jsts", suite + common, e)
            rep["summaries"][e], rep["lines"][e] = summary, lines
            print(json.dumps(summary), flush=True)
        (RESULTS / "jsts-llama3.json").write_text(json.dumps(rep, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
