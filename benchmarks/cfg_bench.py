"""Context-free grammars, guided vs llguidance, on the Llama 3 tokenizer (CPU, one thread, same process).

    .venv/bin/python benchmarks/cfg_bench.py [--docs N] [--out benchmarks/results/cfg-cpu.json]

Workloads: the JSON Lark grammar on MaskBench instances (valid test data, serialised compactly), and the
shared GBNF grammars (arithmetic, C, chess, JSON) on strings generated from the grammar. For each
workload and engine: compile time (text -> compiled grammar, the per-tokenizer setup excluded), and
TBM, the time to fill one bitmask, per token of each string: a fresh matcher per string, every token
checked to be allowed and then committed. guided's masks are cached per parser configuration inside a
compiled grammar, so "cold" compiles the grammar anew for each string (first visits pay for
determinising the parser) and "warm" reuses one compiled grammar across strings. Ratios are guided
over llguidance.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SHARED = Path(os.environ.get("GUIDED_SHARED", REPO.parent / "shared"))
GRAMMARS = SHARED / "data" / "grammars"
LLAMA3 = SHARED / "tokenizers" / "llama3" / "tokenizer.model"


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
    from guided.grammar.cfg_sample import CfgSampler

    sampler = CfgSampler(grammar, seed=1)
    out = [s for s in (sampler.sentence(max_depth=8, max_len=max_len) for _ in range(4 * n)) if len(s) >= 8]
    return out[:n]


def workloads(n: int):
    from guided.grammar.gbnf_frontend import parse_gbnf

    yield "json.lark/maskbench", "lark", (GRAMMARS / "lark" / "json.lark").read_text(), json_docs(n)
    for name in ("arithmetic", "c", "chess", "json"):
        text = (GRAMMARS / "gbnf" / f"{name}.gbnf").read_text()
        yield f"{name}.gbnf/generated", "gbnf", text, generated(parse_gbnf(text), n)


class Guided:
    name = "guided"

    def __init__(self, tokenizer):
        from guided.grammar import Vocabulary
        from guided.grammar.token_trie import trie_for

        self.vocab = Vocabulary.from_tokenizer(tokenizer)
        trie_for(self.vocab)
        self.words = self.vocab.bitmask_words
        self.compile("gbnf", 'root ::= "a" [b-c]+').matcher().allowed_tokens()  # load the numba walks

    def compile(self, kind, text):
        from guided.grammar.cfg_matcher import compile_gbnf, compile_lark

        return (compile_lark if kind == "lark" else compile_gbnf)(self.vocab, text)

    def matcher(self, compiled):
        return compiled.matcher()

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

    def compile(self, kind, text):
        if kind == "gbnf":
            from llguidance.gbnf_to_lark import gbnf_to_lark

            text = gbnf_to_lark(text)
        grammar = self.ll.LLMatcher.grammar_from_lark(text)
        m = self.ll.LLMatcher(self.tok, grammar)
        if m.is_error():
            raise ValueError(m.get_error())
        return grammar

    def matcher(self, grammar):
        return self.ll.LLMatcher(self.tok, grammar)

    def fill(self, m, bitmask):
        self.fill_mask(m, bitmask, 0)

    def commit(self, m, token):
        return m.consume_token(token)


def run_engine(engine, kind, text, docs, tokenizer, warm: bool):
    compile_ms, tbm, failures = [], [], 0
    shared = None
    if warm:
        t0 = time.perf_counter()
        shared = engine.compile(kind, text)
        compile_ms.append((time.perf_counter() - t0) * 1e3)
    bitmask = np.zeros((1, engine.words), dtype=np.int32)
    for doc in docs:
        if shared is None:
            t0 = time.perf_counter()
            compiled = engine.compile(kind, text)
            compile_ms.append((time.perf_counter() - t0) * 1e3)
        else:
            compiled = shared
        m = engine.matcher(compiled)
        for tok in tokenizer.encode(doc, add_special_tokens=False):
            t0 = time.perf_counter()
            engine.fill(m, bitmask)
            tbm.append((time.perf_counter() - t0) * 1e6)
            if not (int(bitmask[0, tok >> 5]) >> (tok & 31)) & 1 or not engine.commit(m, tok):
                failures += 1
                break
    return {
        "compile_ms_mean": float(np.mean(compile_ms)),
        "compile_ms_max": float(np.max(compile_ms)),
        "tbm_us_p50": float(np.percentile(tbm, 50)),
        "tbm_us_p99": float(np.percentile(tbm, 99)),
        "tbm_us_max": float(np.max(tbm)),
        "tokens": len(tbm),
        "rejected_docs": failures,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=20)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "cfg-cpu.json"))
    args = ap.parse_args()
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    from guided.tokenizer_files import load_tokenizer

    tokenizer = load_tokenizer(LLAMA3)
    engines = [Guided(tokenizer)]
    try:
        engines.append(LLGuidance(tokenizer))
    except ImportError:
        print("llguidance is not installed: guided only")
    # As a serving process would after loading: keep the startup heap (transformers, numba, the
    # vocabulary) out of the collector's way, or gen-2 collections cost ~0.25 s here whoever triggers them.
    gc.collect()
    gc.freeze()
    results = {}
    for wname, kind, text, docs in workloads(args.docs):
        row = {}
        for engine in engines:
            for warm in (False, True):
                key = f"{engine.name}_{'warm' if warm else 'cold'}"
                try:
                    row[key] = run_engine(engine, kind, text, docs, tokenizer, warm)
                except Exception as e:  # a peer refusing a grammar is a result, not a crash
                    row[key] = {"error": f"{type(e).__name__}: {e}"[:300]}
        for mode in ("cold", "warm"):
            g, p = row.get(f"guided_{mode}", {}), row.get(f"llguidance_{mode}", {})
            if "tbm_us_p50" in g and "tbm_us_p50" in p:
                row[f"ratio_{mode}"] = {
                    k: g[k] / max(p[k], 1e-9) for k in ("tbm_us_p50", "tbm_us_p99", "compile_ms_mean")
                }
        results[wname] = row
        print(wname, json.dumps(row, indent=1))
    out = {
        "machine": platform.platform(),
        "python": platform.python_version(),
        "tokenizer": "llama3",
        "docs_per_workload": args.docs,
        "note": "cold: a fresh compile per string; warm: one compiled grammar for all strings; gc.freeze() after setup",
        "results": results,
    }
    Path(args.out).write_text(json.dumps(out, indent=1))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
