"""Where guided's compile and mask time goes on the slowest schemas, phase by phase.

    .venv/bin/python benchmarks/latency_profile.py RESULTS.json [RESULTS.json ...] [--top 50]
        [--by ttfm|tbm] [--out benchmarks/results/latency-profile.json]

Takes the ``--top`` slowest schemas of earlier ``benchmarks/maskbench.py`` runs (by TTFM or by the
slowest mask), replays each in this process the way MaskBench does (compile, first mask, then every
token of every test instance: mask + accept), timing the phases (lowering, grammar compile, first
mask, later masks, accepts) and, under ``cProfile``, splitting the time by where it is spent:

* ``lowering``: ``guided.schema`` (schema -> regex AST / grammar IR)
* ``expressions``: ``automata.expr_pool`` and its compiled core ``expr_core`` (interning,
  derivatives, rows, searches; numba calls count here as a whole) and ``regex_ast``
* ``emptiness``: ``automata.emptiness`` and ``automata.derivative_classes``
* ``dfa rows``: ``automata.lazy_dfa`` and ``automata.dfa_rows`` (rows of regular states)
* ``earley``: ``automata.earley`` (parser configurations, lexer steps)
* ``trie walk``: the numba walks and the Python rounds around them (``tokens.*``)
* ``other``: the rest (the interpreter's own overhead is spread over the callers above)

Prints a summary per phase and per place, and writes per-schema rows to ``--out``.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import sys
import time
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("GUIDED_SHARED", REPO.parent / "shared"))
PLACES = (
    ("lowering", ("/guided/schema/",)),
    ("emptiness", ("/automata/emptiness.py", "/automata/derivative_classes.py")),
    ("expressions", ("/automata/expr_pool.py", "/automata/expr_core.py", "/grammar/regex_ast.py", "/grammar/cfg_ir.py")),
    ("dfa rows", ("/automata/lazy_dfa.py", "/automata/state_table.py", "/automata/dfa_rows.py")),
    ("earley", ("/automata/earley.py",)),
    ("trie walk", ("/grammar/tokens/",)),
)


def place_of(filename: str) -> str:
    for name, parts in PLACES:
        if any(p in filename for p in parts):
            return name
    return "other"


def replay(engine, tokenizer, path: Path, profiler: cProfile.Profile) -> dict:
    from guided.schema.compiler import json_schema_to_grammar

    doc = json.loads(path.read_text())
    options = engine.options
    times: dict[str, float] = {}
    profiler.enable()
    t0 = time.perf_counter()
    json_schema_to_grammar(doc["schema"], **options)  # the lowering alone (cached below? no: timed here)
    t1 = time.perf_counter()
    compiled = engine.compile(doc["schema"])  # lowering again + grammar compile + first mask
    t2 = time.perf_counter()
    masks, accepts, mask_max = 0.0, 0.0, 0.0
    for test in doc["tests"]:
        m = compiled.matcher()
        for token in tokenizer.encode(json.dumps(test["data"], ensure_ascii=False), add_special_tokens=False):
            a = time.perf_counter()
            m.fill_bitmask(engine.bitmask, 0)
            b = time.perf_counter()
            ok = m.accept_token(token)
            c = time.perf_counter()
            masks, accepts, mask_max = masks + b - a, accepts + c - b, max(mask_max, b - a)
            if not ok:
                break
    profiler.disable()
    times.update(lower=t1 - t0, compile_and_first_mask=t2 - t1, masks=masks, accepts=accepts, mask_max=mask_max)
    return {"file": path.name, **{k: round(v * 1e3, 2) for k, v in times.items()}, "states": getattr(compiled.dfa, "n_states", 0),
            "kind": type(compiled).__name__}  # fmt: skip


def places(profiler: cProfile.Profile) -> dict[str, float]:
    out: dict[str, float] = {}
    for (filename, _, _), (_, _, tottime, _, _) in pstats.Stats(profiler).stats.items():
        out[place_of(filename)] = out.get(place_of(filename), 0.0) + tottime
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results", nargs="+", type=Path)
    p.add_argument("--top", type=int, default=50)
    p.add_argument("--by", choices=("ttfm", "tbm"), default="ttfm")
    p.add_argument("--tokenizer", default=str(SHARED / "tokenizers" / "llama3" / "tokenizer.model"))
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args()
    warnings.simplefilter("ignore")
    from guided.bench.engines import make_engine
    from guided.bench.maskbench import slowest_schemas, warm_up
    from guided.builtin.tokenizers import load_tokenizer

    tokenizer = load_tokenizer(a.tokenizer)
    engine = make_engine("guided", tokenizer, key_order="any")
    warm_up(engine)
    rows, totals = [], {}
    for path in slowest_schemas(a.results, a.top, SHARED / "data", a.by):
        profiler = cProfile.Profile()
        try:
            row = replay(engine, tokenizer, path, profiler)
        except Exception as e:  # noqa: BLE001 - a failing schema is a row too
            row = {"file": path.name, "error": f"{type(e).__name__}: {e}"[:200]}
        row["places_ms"] = {k: round(v * 1e3, 1) for k, v in sorted(places(profiler).items())}
        for k, v in row["places_ms"].items():
            totals[k] = totals.get(k, 0.0) + v
        rows.append(row)
        print(json.dumps(row), flush=True)
        gc.collect()
    phases = ("lower", "compile_and_first_mask", "masks", "accepts")
    summary = {ph: round(float(np.sum([r.get(ph, 0) for r in rows])), 1) for ph in phases}
    summary["places_ms"] = {k: round(v, 1) for k, v in sorted(totals.items(), key=lambda x: -x[1])}
    print(json.dumps({"schemas": len(rows), "by": a.by, "phases_ms": summary}), flush=True)
    if a.out:
        a.out.write_text(json.dumps({"by": a.by, "top": a.top, "summary": summary, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
