"""Compile time of a seen schema in a restarted process: cold vs loaded from the on-disk grammar cache.

    .venv/bin/python benchmarks/grammar_cache.py RESULTS.json [RESULTS.json ...] [--top 20]
        [--out benchmarks/results/grammar-cache.json]

Takes the ``--top`` slowest-to-compile schemas (by guided's TTFM) of earlier ``benchmarks/maskbench.py``
runs and times, each in its own fresh process after the same warm-up (Llama 3 tokenizer, one thread):

* ``cold``: guided compiles each schema (lowering, grammar, first mask) with an empty cache directory,
  writing every entry;
* ``warm``: a second process, the same directory: every schema loads (time to first mask again);
* ``llguidance``: llguidance's compile + first mask, in the cold process, for scale.

Each process also walks every schema's first valid test instance token by token (mask, accept):
the warm process must give the same verdict as the cold one. Prints per-schema times and
``cold / warm`` ratios (and warm vs llguidance), and writes them to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("GUIDED_SHARED", REPO.parent / "shared"))
LLAMA3 = SHARED / "tokenizers" / "llama3" / "tokenizer.model"


def child(mode: str, directory: str, files: list[str]) -> None:
    """One process: compile each file's schema (guided through the disk cache; llguidance too when cold)."""
    warnings.simplefilter("ignore")
    import guided
    import guided.schema
    from guided.bench.engines import make_engine
    from guided.bench.maskbench import warm_up
    from guided.builtin.tokenizers import load_tokenizer
    from guided.grammar.disk_cache import GrammarDiskCache

    tokenizer = load_tokenizer(str(LLAMA3))
    engines = [make_engine("guided", tokenizer, key_order="any")]
    engines[0].compiler.disk_cache = GrammarDiskCache(directory, version=guided.__version__,
                                                      source_dirs=[Path(guided.schema.__file__).parent])  # fmt: skip
    if mode == "cold":
        engines.append(make_engine("llguidance", tokenizer))
    for engine in engines:
        warm_up(engine)
    for name in files:
        doc = json.loads(Path(name).read_text())
        valid = next((t["data"] for t in doc["tests"] if t["valid"]), None)
        tokens = [] if valid is None else tokenizer.encode(json.dumps(valid, ensure_ascii=False), add_special_tokens=False)
        row = {"file": Path(name).name}
        for engine in engines:
            try:
                t0 = time.perf_counter()
                compiled = engine.compile(doc["schema"])
                row[f"{engine.name}_ms"] = round((time.perf_counter() - t0) * 1e3, 2)
                ok, accepting, _ = engine.check(compiled, tokens)
                row[f"{engine.name}_valid_accepted"] = bool(ok and accepting)
            except Exception as e:  # noqa: BLE001 - a schema that fails is a row too
                row[f"{engine.name}_error"] = f"{type(e).__name__}: {e}"[:160]
        disk = engines[0].compiler.disk_cache
        row["disk"] = {"hits": disk.hits, "writes": disk.writes, "rejected": disk.rejected}
        print(json.dumps(row), flush=True)


def run_child(mode: str, directory: str, files: list[Path]) -> list[dict]:
    cmd = [sys.executable, __file__, "--child", mode, "--dir", directory, *map(str, files)]
    env = dict(os.environ, OMP_NUM_THREADS="1", RAYON_NUM_THREADS="1", GUIDED_GRAMMAR_CACHE="off")
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    if out.returncode:
        raise SystemExit(f"{mode} process failed: {out.stderr[-3000:]}")
    return [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("files", nargs="*", type=Path, help="maskbench result files (or, with --child, schema files)")
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--child", choices=("cold", "warm"), help=argparse.SUPPRESS)
    p.add_argument("--dir", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a.child, a.dir, [str(f) for f in a.files])
        return 0
    from guided.bench.maskbench import slowest_schemas

    files = slowest_schemas(a.files, a.top, SHARED / "data")
    with tempfile.TemporaryDirectory(prefix="guided-grammar-cache-") as directory:
        cold = run_child("cold", directory, files)
        size = sum(f.stat().st_size for f in Path(directory).iterdir())
        warm = run_child("warm", directory, files)
    rows = []
    for c, w in zip(cold, warm, strict=True):
        row = {"file": c["file"], "cold_ms": c.get("guided_ms"), "warm_ms": w.get("guided_ms"),
               "llguidance_ms": c.get("llguidance_ms"), "same_verdict": c.get("guided_valid_accepted") ==
               w.get("guided_valid_accepted"), "error": c.get("guided_error") or w.get("guided_error"),
               "llguidance_error": c.get("llguidance_error")}  # fmt: skip
        if row["cold_ms"] and row["warm_ms"]:
            row["speedup"] = round(row["cold_ms"] / row["warm_ms"], 1)
        if row["warm_ms"] and row["llguidance_ms"]:
            row["warm_vs_llguidance"] = round(row["warm_ms"] / row["llguidance_ms"], 2)
        rows.append(row)
        print(json.dumps(row), flush=True)
    ok = [r for r in rows if "speedup" in r]
    speedups = np.array([r["speedup"] for r in ok]) if ok else np.array([0.0])
    summary = {
        "schemas": len(rows), "loaded": sum(1 for r in ok), "errors": sum(1 for r in rows if r["error"]),
        "same_verdict": sum(r["same_verdict"] for r in rows), "cache_bytes": size,
        "cold_ms_total": round(sum(r["cold_ms"] for r in ok), 1), "warm_ms_total": round(sum(r["warm_ms"] for r in ok), 1),
        "llguidance_ms_total": round(sum(r["llguidance_ms"] or 0 for r in ok), 1),
        "speedup_min": float(speedups.min()), "speedup_median": float(np.median(speedups)),
        "warm_ms_max": max((r["warm_ms"] for r in ok), default=None),
    }  # fmt: skip
    print(json.dumps({"summary": summary}), flush=True)
    if a.out:
        meta = {"command": " ".join(sys.argv), "top": a.top, "tokenizer": "llama3", "threads": 1}
        a.out.write_text(json.dumps({"meta": meta, "summary": summary, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
