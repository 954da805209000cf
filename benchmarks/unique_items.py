"""uniqueItems: the MaskBench schemas an earlier full run refused for uniqueItems, compiled again
beside llguidance in the same run (Llama 3 tokenizer): how many now pass, any invalid instance
accepted, and the time per mask of the arrays that carry the run-time check.

    python benchmarks/unique_items.py [--baseline results/maskbench-both.json.gz] [--engines guided,llguidance]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from guided.bench.engines import make_engine
from guided.bench.maskbench import run_file
from guided.bench.runner import read_report
from guided.builtin.tokenizers import load_tokenizer

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default=str(HERE / "results" / "maskbench-both.json.gz"))
    ap.add_argument("--engines", default="guided,llguidance")
    ap.add_argument("--out", default=str(HERE / "results" / "unique-items.json"))
    args = ap.parse_args()
    base = read_report(args.baseline)
    files = [x["file"] for x in base["lines"]["guided"] if "uniqueItems" in (x.get("error") or "")]
    # (the recursion-under-intersection message lists uniqueItems among the intersections too)
    paths = [p for f in files for p in (DATA / "maskbench" / f, DATA / "maskbench-hard" / f) if p.exists()]
    if not paths:
        print(f"no schemas: {DATA} is missing", file=sys.stderr)
        return 1
    tok = load_tokenizer(str(DATA.parent / "tokenizers" / "llama3"))
    out = {"files": len(paths), "engines": {}}
    for name in args.engines.split(","):
        # as the full MaskBench runs: test instances keep their own key order
        engine = make_engine(name, tok, key_order="any") if name == "guided" else make_engine(name, tok)
        rows = []
        for p in paths:
            r = run_file(engine, tok, p)
            r["file"] = p.name
            rows.append(r)
        ok = [r for r in rows if r["status"] == "ok"]
        tbm = sorted(t for r in ok for t in r.pop("tbm_s"))
        summary = {
            "compiled": len(ok),
            "passed": sum(r["passed"] for r in ok),
            "accepts_invalid": sum(r["accepts_invalid"] > 0 for r in ok),
            "rejects_valid": sum(r["rejects_valid"] > 0 for r in ok),
            "ttfm_p50_ms": round(statistics.median(r["ttfm_s"] for r in ok) * 1e3, 2) if ok else None,
            "tbm_p50_us": round(tbm[len(tbm) // 2] * 1e6, 1) if tbm else None,
            "tbm_p99_us": round(tbm[int(len(tbm) * 0.99)] * 1e6, 1) if tbm else None,
            "tbm_max_ms": round(tbm[-1] * 1e3, 2) if tbm else None,
            "errors": sorted({(r.get("error") or "")[:120] for r in rows if r["status"] != "ok"}),
        }
        out["engines"][name] = {"summary": summary, "rows": rows}
        print(name, json.dumps(summary, indent=1))
    Path(args.out).write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
