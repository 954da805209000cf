"""Where JSON Schema compile time (TTFM) goes: lowering, grammar compile, first mask, per schema.

Takes every k-th MaskBench schema (sorted by name, starting at ``--offset``), and for each one times
``json_schema_to_grammar`` (the lowering), ``compile_ast``/``compile_cfg`` (the grammar compile) and
the first ``fill_bitmask``, wall clock and CPU time of this process (the CPU figure is the one to
compare on a shared machine). Prints p50/p90/p99 per phase and the slowest schemas; ``--key-order``
and ``--any-depth`` select the lowering options, so two policies can be compared on the same files.

    python benchmarks/schema_compile_phases.py ../shared/data/maskbench \\
        --tokenizer ../shared/tokenizers/llama3/tokenizer.model --every 40 --key-order any

``--json rows.json`` keeps the per-schema figures, to compare two runs schema by schema.
``--gc-freeze`` moves what set-up allocated (imports, tokenizer, vocabulary: ~400k objects) out of
the cyclic collector's reach, as a serving engine would after start-up (``regex_bench.py`` and
``cfg_bench.py`` do the same): otherwise each full collection walks them (0.1-0.5 s on a loaded
machine) and lands on whichever schema happens to trigger it, which is most of a run's CPU p99.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
import warnings
from pathlib import Path

import numpy as np

from guided.builtin.tokenizers import load_tokenizer
from guided.grammar.cfg_ir import CfgGrammar
from guided.grammar.compiler import GrammarCompiler
from guided.grammar.vocab import Vocabulary
from guided.schema.compiler import SchemaOptions, cache_key, compile_json_schema, json_schema_to_grammar

PHASES = ("lower", "compile", "mask")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("maskbench", help="MaskBench directory")
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--every", type=int, default=40)
    p.add_argument("--offset", type=int, default=3)
    p.add_argument("--key-order", default="declared", choices=("declared", "any"))
    p.add_argument("--any-depth", type=int, default=None)
    p.add_argument("--top", type=int, default=10, help="print the slowest schemas")
    p.add_argument("--json", default=None, help="write the per-schema rows to this file")
    p.add_argument("--gc-freeze", action="store_true", help="gc.freeze() after set-up (see the docstring)")
    args = p.parse_args()
    warnings.simplefilter("ignore")
    files = sorted(Path(args.maskbench).glob("*.json"))[args.offset :: args.every]
    vocab = Vocabulary.from_tokenizer(load_tokenizer(args.tokenizer))
    compiler = GrammarCompiler(vocab, cache_size=2)
    bitmask = np.zeros((1, vocab.bitmask_words), dtype=np.int32)
    compile_json_schema(compiler, {"type": "object", "properties": {"a": {"type": "string"}}})  # warm-up
    options = SchemaOptions(key_order=args.key_order, any_depth=args.any_depth)
    if args.gc_freeze:
        gc.collect()
        gc.freeze()
    rows = [_one(compiler, bitmask, options, f) for f in files]
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=0))
    ok = [r for r in rows if r["kind"] in ("regex", "cfg")]
    print(json.dumps({"schemas": len(rows), "kinds": _count(r["kind"] for r in rows), "options": vars(args)}))
    for clock in ("wall", "cpu"):
        for phase in (*PHASES, "total"):
            ms = np.array([r[clock][phase] for r in ok]) * 1e3
            print(f"{clock:4s} {phase:8s} p50={np.percentile(ms, 50):8.2f} ms  p90={np.percentile(ms, 90):8.2f}"
                  f"  p99={np.percentile(ms, 99):9.1f}  sum={ms.sum():8.0f}")  # fmt: skip
    for r in sorted(ok, key=lambda r: -r["cpu"]["total"])[: args.top]:
        cpu = r["cpu"]
        print(f"{cpu['total'] * 1e3:9.1f} ms cpu  {r['kind']:5s} lower={cpu['lower'] * 1e3:7.1f} "
              f"compile={cpu['compile'] * 1e3:7.1f} mask={cpu['mask'] * 1e3:6.1f}  {r['file']}")  # fmt: skip


def _one(compiler, bitmask, options, path: Path) -> dict:
    schema = json.loads(path.read_text())["schema"]
    marks = [(time.perf_counter(), time.process_time())]
    try:
        lang = json_schema_to_grammar(schema, options=options)
        marks.append((time.perf_counter(), time.process_time()))
        key = ("phases", cache_key(schema, options))
        cfg = isinstance(lang, CfgGrammar)
        compiled = compiler.compile_cfg(lang, key) if cfg else compiler.compile_ast(lang, key)
        marks.append((time.perf_counter(), time.process_time()))
        compiled.matcher().fill_bitmask(bitmask, 0)
        marks.append((time.perf_counter(), time.process_time()))
    except Exception as e:  # a refused schema is counted by its error type, not timed
        return {"file": path.name, "kind": f"error:{type(e).__name__}"}
    out = {"file": path.name, "kind": "cfg" if cfg else "regex"}
    for c, clock in enumerate(("wall", "cpu")):
        spans = {ph: marks[i + 1][c] - marks[i][c] for i, ph in enumerate(PHASES)}
        out[clock] = {**spans, "total": marks[-1][c] - marks[0][c]}
    return out


def _count(kinds) -> dict:
    out: dict[str, int] = {}
    for k in kinds:
        out[k] = out.get(k, 0) + 1
    return out


if __name__ == "__main__":
    main()
