"""MaskBench and the JSON Schema Test Suite, guided beside its peers, in one run (Llama 3 tokenizer).

    .venv/bin/python benchmarks/maskbench.py [--sets maskbench,maskbench-hard] [--every K] [--jobs N]
        [--engines guided,llguidance] [--timeout S] [--jsts] [--tag NAME] [--compare OLD.json.gz[,OLD2.json]]
        [--key-order any|declared]

Runs ``guided bench maskbench`` (``guided.bench.maskbench``) once per engine on the same schema files
(every K-th of each set under ../shared/data, sorted by name), each engine single-threaded per schema
with N schemas in flight, and writes every engine's per-schema lines, its summary over all files and
per split (the file name's prefix: ``Github_hard``, ``JsonSchemaStore``, ...) to
``benchmarks/results/maskbench-<tag>.json.gz`` (gzip-compressed JSON; ``guided.bench.runner.read_report``
reads it) with guided's ratios to each peer. ``--compare`` diffs guided's per-schema outcome against an
earlier result file (schemas that stopped passing, or started accepting invalid instances). ``--jsts``
does the same for the JSON Schema Test Suite. ``--key-order declared`` runs guided with the property
order llguidance keeps (MaskBench's valid instances list properties in any order: guided's default here
is "any", which accepts them, at a cost in compile time; ``results/key-order-s76.md``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from guided.bench.runner import read_report

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


def split_of(name: str) -> str:
    """MaskBench's split of a file: ``JsonSchemaStore---x.json`` -> JsonSchemaStore, ``Github_hard_12`` -> Github_hard."""
    return name.split("---")[0] if "---" in name else name.removesuffix(".json").rsplit("_", 1)[0]


def split_summaries(lines: list[dict]) -> dict:
    """Per split: schemas, passing, compile errors, timeouts, invalid accepted, valid rejected, TTFM p50/p99."""
    import numpy as np

    out: dict[str, dict] = {}
    for line in lines:
        s = out.setdefault(split_of(line["file"]), {"schemas": 0, "passing": 0, "compile_errors": 0, "timeouts": 0,
                                                     "accepts_invalid": 0, "rejects_valid": 0, "ttfm": []})  # fmt: skip
        s["schemas"] += 1
        s["passing"] += bool(line.get("passed"))
        s["compile_errors"] += line["status"] == "compile_error"
        s["timeouts"] += line["status"] == "timeout"
        s["accepts_invalid"] += line.get("accepts_invalid", 0)
        s["rejects_valid"] += line.get("rejects_valid", 0)
        if "ttfm_us" in line:
            s["ttfm"].append(line["ttfm_us"])
    for s in out.values():
        t = s.pop("ttfm")
        s["ttfm_p50_us"], s["ttfm_p99_us"] = (round(float(np.percentile(t, q)), 1) for q in (50, 99)) if t else (0, 0)
    return dict(sorted(out.items()))


def compare(old: list[dict], new: list[dict]) -> dict:
    """Schemas whose outcome got worse (or better) between two runs of guided."""
    before = {x["file"]: x for x in old}
    out: dict[str, list] = {"stopped_passing": [], "now_accept_invalid": [], "started_passing": []}
    for x in new:
        y = before.get(x["file"])
        if y is None:
            continue
        if y.get("passed") and not x.get("passed"):
            out["stopped_passing"].append(x["file"])
        if x.get("accepts_invalid", 0) > y.get("accepts_invalid", 0):
            out["now_accept_invalid"].append(x["file"])
        if x.get("passed") and not y.get("passed"):
            out["started_passing"].append(x["file"])
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sets", default="maskbench", help="comma-separated data sets under ../shared/data")
    p.add_argument("--compare", default=None, help="earlier maskbench-*.json[.gz] files, comma-separated: per-schema diff of guided")
    p.add_argument("--every", type=int, default=1)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--engines", default="guided,llguidance")
    p.add_argument("--jsts", action="store_true", help="also run the JSON Schema Test Suite")
    p.add_argument("--tag", default=None)
    p.add_argument("--key-order", default=None, choices=("any", "declared"),
                   help="guided's accepted property orders (default: guided bench maskbench's, any); llguidance "
                        "keeps the declared order, so 'declared' compares like with like")  # fmt: skip
    a = p.parse_args()
    engines = a.engines.split(",")
    tag = a.tag or ("full" if a.every == 1 and a.limit is None else f"every{a.every}")
    common = ["--tokenizer", str(LLAMA3), "--timeout", str(a.timeout), "--jobs", str(a.jobs)]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    meta = {"machine": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
            "jobs": a.jobs, "timeout_s": a.timeout, "tokenizer": "llama3", "commit": commit or None,
            "command": " ".join(sys.argv)}  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)

    sets = a.sets.split(",")
    mb = [str(SHARED / "data" / name) for name in sets] + ["--every", str(a.every)]
    mb += ["--limit", str(a.limit)] if a.limit else []
    report = {"meta": {**meta, "sets": sets, "every": a.every, "limit": a.limit}, "summaries": {}, "wall_s": {},
              "splits": {}, "lines": {}}  # fmt: skip
    for e in engines:
        order = ["--key-order", a.key_order] if a.key_order and e.startswith("guided") else []
        lines, summary, wall = run_engine("guided.bench.maskbench", mb + common + order, e)
        report["summaries"][e], report["wall_s"][e], report["lines"][e] = summary, round(wall, 1), lines
        report["splits"][e] = split_summaries(lines)
        print(json.dumps(summary), flush=True)
    if "guided" in engines:
        report["ratios"] = {e: ratios(report["summaries"]["guided"], report["summaries"][e]) for e in engines if e != "guided"}
        print(json.dumps(report["ratios"]), flush=True)
    if a.compare:
        old = [x for f in a.compare.split(",") for x in read_report(f)["lines"]["guided"]]
        report["compare"] = compare(old, report["lines"]["guided"])
        print(json.dumps({k: len(v) for k, v in report["compare"].items()}), flush=True)
    out = RESULTS / f"maskbench-{tag}.json.gz"  # a full run's report is ~6 MB of JSON, ~0.6 MB compressed
    out.write_bytes(gzip.compress(json.dumps(report, indent=1).encode() + b"\n", mtime=0))
    print(f"wrote {out}", flush=True)

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
