"""Context-free grammars: guided vs llguidance vs xgrammar on the Llama 3 tokenizer (CPU, one thread, one run).

    .venv/bin/python benchmarks/cfg_bench.py [--docs N] [--only NAME,...] [--out benchmarks/results/cfg-cpu.json]

Workloads: the JSON Lark grammar on MaskBench instances (valid test data, serialised as MaskBench does);
the shared GBNF grammars c, vllm-sql, chess and arithmetic (and json) on strings generated from the
grammar; a recursive tree JSON Schema on generated trees. For each workload and engine: compile time
(text -> compiled grammar; the per-tokenizer setup excluded) and TBM as MaskBench counts it: per token,
the time to fill the bitmask plus the time to commit the token (each token is checked to be allowed),
both as wall time and as the process's CPU time: on a shared machine, other processes preempting this
one inflate the wall-clock tail of whichever engine happens to be running; the CPU time does not move.

"cold" compiles the grammar anew for every string, so every first visit of a parser state (guided's lazy
determinisation, its mask cache; the peers' caches) is paid inside the measured tokens: what the first
generation with a grammar sees. "warm" compiles once and reuses it across the strings. Ratios are the
engine's figure over llguidance's in the same mode. A peer that cannot take a grammar gets that error as
its result.

Peers: llguidance (defaults; GBNF through its gbnf_to_lark converter; the tree schema as JSON Schema),
xgrammar (its GrammarCompiler over a TokenizerInfo built from the same vocabulary bytes, max_threads=1,
cache off; GBNF as is, the JSON workload through its built-in JSON grammar since it reads no Lark, the
tree schema as JSON Schema).
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

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SHARED = Path(os.environ.get("GUIDED_SHARED", REPO.parent / "shared"))
GRAMMARS = SHARED / "data" / "grammars"
LLAMA3 = SHARED / "tokenizers" / "llama3" / "tokenizer.model"
GBNF = ("c", "vllm-sql", "chess", "arithmetic", "json")

TREE_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "children": {"type": "array", "items": {"$ref": "#"}},
    },
    "required": ["name", "children"],
    "additionalProperties": False,
}
# The tree schema's language as Lark (JSON whitespace between tokens, keys in order), for guided when
# compile_json_schema does not take recursive schemas.
TREE_LARK = r"""
start: tree
tree: "{" "\"name\"" ":" ESCAPED_STRING "," "\"children\"" ":" children "}"
children: "[" "]" | "[" tree ("," tree)* "]"
%import common.ESCAPED_STRING
%import common.WS
%ignore WS
"""


# ---------------------------------------------------------------------------------------- workloads
def json_docs(n: int) -> list[str]:
    out = []
    for path in sorted((SHARED / "data" / "maskbench").glob("*.json")):
        for test in json.loads(path.read_text())["tests"]:
            if test.get("valid"):
                out.append(json.dumps(test["data"], ensure_ascii=False))
                break
        if len(out) >= n:
            break
    return out


def generated(grammar, n: int, max_len: int = 200) -> list[str]:
    from guided.grammar.cfg_sampler import CfgSampler

    sampler = CfgSampler(grammar, seed=1)
    out = [s for s in (sampler.sentence(max_depth=8, max_len=max_len) for _ in range(4 * n)) if len(s) >= 8]
    return out[:n]


def trees(n: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    words = ["root", "leaf", "node ä", "x", 'branch "q"', "tab\tbed", "left", "right", "αβγ", ""]

    def tree(depth: int) -> dict:
        k = rng.randint(0, 3) if depth < 4 else 0
        return {"name": rng.choice(words), "children": [tree(depth + 1) for _ in range(k)]}

    return [json.dumps(tree(0), ensure_ascii=False) for _ in range(n)]


def workloads(n: int):
    """(name, {kind: grammar text or schema}, strings); kinds: lark, gbnf, schema, builtin-json."""
    from guided.grammar.frontends.gbnf_grammar import parse_gbnf

    lark = (GRAMMARS / "lark" / "json.lark").read_text()
    yield "json.lark/maskbench", {"lark": lark, "builtin-json": None}, json_docs(n)
    for name in GBNF:
        text = (GRAMMARS / "gbnf" / f"{name}.gbnf").read_text()
        yield f"{name}.gbnf/generated", {"gbnf": text}, generated(parse_gbnf(text), n)
    yield "tree-schema/generated", {"schema": TREE_SCHEMA, "lark": TREE_LARK}, trees(n)


# ---------------------------------------------------------------------------------------- engines
class Guided:
    name = "guided"

    def __init__(self, tokenizer):
        from guided.grammar import Vocabulary
        from guided.grammar.tokens.vocab_index import vocab_index

        self.vocab = Vocabulary.from_tokenizer(tokenizer)
        vocab_index(self.vocab)
        self.words = self.vocab.bitmask_words
        self.how: dict[str, str] = {}
        self.schema_ok = self._schema_works()
        for g in ('root ::= "a" [b-c]+', 'root ::= "(" root ")" | "x"'):  # load the numba walks
            self.compile({"gbnf": g}).matcher().allowed_tokens()

    def _schema_works(self) -> bool:
        try:
            self._compile_schema(TREE_SCHEMA)
            return True
        except Exception as e:  # recursive schemas not supported yet: the equivalent Lark grammar
            self.schema_error = f"{type(e).__name__}: {e}"[:200]
            return False

    def _compile_schema(self, schema):
        from guided.grammar import GrammarCompiler
        from guided.schema.compiler import compile_json_schema

        return compile_json_schema(GrammarCompiler(self.vocab, cache_size=1), schema)

    def compile(self, spec: dict):
        from guided.grammar.tokens.compiled_cfg import compile_gbnf, compile_lark

        if "schema" in spec and self.schema_ok:
            self.how["schema"] = "compile_json_schema"
            return self._compile_schema(spec["schema"])
        if "gbnf" in spec:
            return compile_gbnf(self.vocab, spec["gbnf"])
        self.how["schema"] = "equivalent Lark grammar"
        return compile_lark(self.vocab, spec["lark"])

    def matcher(self, compiled):
        return compiled.matcher()

    def new_bitmask(self):
        return np.zeros((1, self.words), dtype=np.int32)

    def fill(self, m, bitmask):
        m.fill_bitmask(bitmask, 0)

    def commit(self, m, token):
        return m.accept_token(token)


class LLGuidance:
    name = "llguidance"

    def __init__(self, tokenizer):
        import llguidance
        import llguidance.hf
        import llguidance.numpy

        self.ll = llguidance
        self.tok = llguidance.hf.from_tokenizer(tokenizer)
        self.fill_mask = llguidance.numpy.fill_next_token_bitmask
        self.words = (self.tok.vocab_size + 31) // 32

    def compile(self, spec: dict):
        if "schema" in spec:
            grammar = self.ll.LLMatcher.grammar_from_json_schema(json.dumps(spec["schema"]))
        elif "gbnf" in spec:
            from llguidance.gbnf_to_lark import gbnf_to_lark

            grammar = self.ll.LLMatcher.grammar_from_lark(gbnf_to_lark(spec["gbnf"]))
        else:
            grammar = self.ll.LLMatcher.grammar_from_lark(spec["lark"])
        m = self.ll.LLMatcher(self.tok, grammar)
        if m.is_error():
            raise ValueError(m.get_error())
        return grammar

    def matcher(self, grammar):
        return self.ll.LLMatcher(self.tok, grammar)

    def new_bitmask(self):
        return np.zeros((1, self.words), dtype=np.int32)

    def fill(self, m, bitmask):
        self.fill_mask(m, bitmask, 0)

    def commit(self, m, token):
        return m.consume_token(token) and not m.is_error()


class XGrammar:
    name = "xgrammar"

    def __init__(self, vocab):
        import xgrammar as xgr

        self.xgr = xgr
        tokens = [b"" if vocab.special[i] else t for i, t in enumerate(vocab.tokens)]
        self.info = xgr.TokenizerInfo(tokens, vocab_size=vocab.size, stop_token_ids=list(vocab.eos_ids))
        self.words = (vocab.size + 31) // 32

    def compile(self, spec: dict):
        compiler = self.xgr.GrammarCompiler(self.info, max_threads=1, cache_enabled=False)
        if "schema" in spec:
            return compiler.compile_json_schema(json.dumps(spec["schema"]))
        if "gbnf" in spec:
            return compiler.compile_grammar(spec["gbnf"])
        if "builtin-json" in spec:
            return compiler.compile_builtin_json_grammar()
        raise ValueError("xgrammar reads no Lark grammar")

    def matcher(self, compiled):
        return self.xgr.GrammarMatcher(compiled)

    def new_bitmask(self):
        return self.xgr.allocate_token_bitmask(1, self.info.vocab_size)

    def fill(self, m, bitmask):
        m.fill_next_token_bitmask(bitmask, 0)

    def commit(self, m, token):
        return m.accept_token(token)


# ---------------------------------------------------------------------------------------- measuring
def run_engine(engine, spec, docs, tokenizer, warm: bool) -> dict:
    compile_ms, wall, cpu, failures = [], [], [], 0
    shared = None
    if warm:
        t0 = time.perf_counter()
        shared = engine.compile(spec)
        compile_ms.append((time.perf_counter() - t0) * 1e3)
    bitmask = engine.new_bitmask()
    view = np.asarray(bitmask)  # xgrammar's is a torch tensor; numpy shares its memory
    for doc in docs:
        if shared is None:
            t0 = time.perf_counter()
            compiled = engine.compile(spec)
            compile_ms.append((time.perf_counter() - t0) * 1e3)
        else:
            compiled = shared
        m = engine.matcher(compiled)
        for tok in tokenizer.encode(doc, add_special_tokens=False):
            t0, c0 = time.perf_counter(), time.process_time()
            engine.fill(m, bitmask)
            allowed = (int(view[0, tok >> 5]) >> (tok & 31)) & 1
            ok = allowed and engine.commit(m, tok)
            cpu.append((time.process_time() - c0) * 1e6)
            wall.append((time.perf_counter() - t0) * 1e6)
            if not ok:
                failures += 1
                break
    out = {"compile_ms_mean": float(np.mean(compile_ms)), "compile_ms_max": float(np.max(compile_ms))}
    for name, xs in (("tbm_us", wall), ("tbm_cpu_us", cpu)):
        p = np.percentile(xs, [50, 90, 99]) if xs else [float("nan")] * 3
        out |= {f"{name}_p50": float(p[0]), f"{name}_p90": float(p[1]), f"{name}_p99": float(p[2])}
        out[f"{name}_max"] = float(np.max(xs)) if xs else float("nan")
    return out | {"tokens": len(wall), "rejected_docs": failures}


RATIO_KEYS = ("compile_ms_mean",) + tuple(
    f"{name}_{q}" for name in ("tbm_us", "tbm_cpu_us") for q in ("p50", "p90", "p99", "max")
)
SHOWN = ("tbm_cpu_us_p50", "tbm_cpu_us_p90", "tbm_cpu_us_p99", "tbm_cpu_us_max", "tbm_us_p99")


def add_ratios(row: dict, names: list[str]) -> None:
    for mode in ("cold", "warm"):
        base = row.get(f"llguidance_{mode}", {})
        for name in names:
            r = row.get(f"{name}_{mode}", {})
            if name != "llguidance" and "tbm_us_p50" in r and "tbm_us_p50" in base:
                r["vs_llguidance"] = {k: r[k] / max(base[k], 1e-9) for k in RATIO_KEYS}


def print_table(results: dict) -> None:
    """CPU time per token (process_time: robust to other processes on a shared machine), the wall p99
    beside it; ratios to llguidance of compile, CPU p50, CPU p99 and wall p99."""
    print(f"{'workload':26} {'engine/mode':16} {'compile':>8} {'cpu p50':>8} {'p90':>8} {'p99':>8} {'max':>8}"
          f" {'wall p99':>8} {'tok':>5} {'rej':>3}  x llg: compile p50 p99 wall-p99")  # fmt: skip
    for wname, row in results.items():
        for key, r in row.items():
            if not isinstance(r, dict):
                continue
            if "error" in r:
                print(f"{wname:26} {key:16} {r['error'][:90]}")
                continue
            line = f"{wname:26} {key:16} {r['compile_ms_mean']:8.2f} " + " ".join(
                f"{r[k]:8.1f}" for k in SHOWN
            )
            line += f" {r['tokens']:5d} {r['rejected_docs']:3d}"
            v = r.get("vs_llguidance")
            if v:
                keys = ("compile_ms_mean", "tbm_cpu_us_p50", "tbm_cpu_us_p99", "tbm_us_p99")
                line += "  " + " ".join(f"{v[k]:6.2f}" for k in keys)
            print(line)


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("guided", "llguidance", "xgrammar", "numpy", "numba"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def make_engines(tokenizer) -> list:
    engines = [Guided(tokenizer)]
    for make in (lambda: LLGuidance(tokenizer), lambda: XGrammar(engines[0].vocab)):
        try:
            engines.append(make())
        except ImportError as e:
            print(f"peer not installed ({e}): skipped")
    return engines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=20)
    ap.add_argument("--only", default="", help="comma-separated workload name prefixes")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "cfg-cpu.json"))
    args = ap.parse_args()
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    from guided.builtin.tokenizers import load_tokenizer

    tokenizer = load_tokenizer(LLAMA3)
    engines = make_engines(tokenizer)
    # As a serving process would after loading: keep the startup heap (transformers, numba, the
    # vocabulary) out of the collector's way, or gen-2 collections cost ~0.25 s here whoever triggers them.
    gc.collect()
    gc.freeze()
    only = [w for w in args.only.split(",") if w]
    results = {}
    for wname, spec, docs in workloads(args.docs):
        if only and not any(wname.startswith(w) for w in only):
            continue
        row = {}
        for engine in engines:
            for warm in (False, True):
                key = f"{engine.name}_{'warm' if warm else 'cold'}"
                try:
                    row[key] = run_engine(engine, spec, docs, tokenizer, warm)
                except Exception as e:  # a peer refusing a grammar is a result, not a crash
                    row[key] = {"error": f"{type(e).__name__}: {e}"[:300]}
        if "schema" in spec:
            row["guided_via"] = engines[0].how.get("schema")
        # CompiledCfg: the Earley path; CompiledGrammar: a grammar without recursion, on the regular engine
        row["guided_engine"] = type(engines[0].compile(spec)).__name__
        add_ratios(row, [e.name for e in engines])
        results[wname] = row
    print_table(results)
    out = {
        "command": "python benchmarks/cfg_bench.py " + " ".join(sys.argv[1:]),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor(),
            "cpus": os.cpu_count(),
        },
        "python": platform.python_version(),
        "versions": versions(),
        "tokenizer": "llama3",
        "docs_per_workload": args.docs,
        "note": "TBM = fill bitmask + commit, per token, microseconds: tbm_us wall clock, tbm_cpu_us the"
        " process's CPU time (unaffected by other processes preempting this one on a shared machine); cold: a"
        " fresh compile per string (first visits included); warm: one compiled grammar for all strings;"
        " gc.freeze() after setup; vs_llguidance: ratios over llguidance in the same mode",
        "results": results,
    }
    Path(args.out).write_text(json.dumps(out, indent=1))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
