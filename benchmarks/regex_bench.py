"""Regex constraints, guided vs llguidance vs outlines-core, on the Llama 3 tokenizer (CPU, one thread).

    .venv/bin/python benchmarks/regex_bench.py [--limit N] [--engines guided,llguidance,outlines]

For every regex of the corpus (benchmarks/regex_corpus.py) and every engine, in the same run:
- TTFM: pattern -> compiled grammar -> first bitmask (the per-tokenizer setup is excluded and timed
  apart: guided's vocabulary trie, llguidance's tokenizer, outlines-core's Vocabulary);
- TBM: per token of each matching string (Llama 3 encoding), fill the bitmask, check the token is
  allowed, commit it; p50 / p99 / max over all tokens;
- memory: resident-set growth of the worker while it compiles and runs the regex.
Each engine runs in its own worker process pinned to one CPU, and the engines take turns regex by regex
(so they see the same machine load); a regex that takes longer than ``--timeout`` seconds, or more
memory than ``--memory-gb``, is recorded as a timeout or crash and that worker restarts. Ratios are guided's
figure over the peer's, on the regexes both handled. Results go to benchmarks/results/regex-cpu.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import queue
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
SHARED = Path(os.environ.get("GUIDED_SHARED", REPO.parent / "shared"))
LLAMA3 = SHARED / "tokenizers" / "llama3" / "tokenizer.model"
ENGINES = ("guided", "llguidance", "outlines")
EOS = 128009  # <|eot_id|>


# ---------------------------------------------------------------------- engines (worker side)
class GuidedEngine:
    name = "guided"

    def __init__(self, vocab):
        from guided.grammar import GrammarCompiler
        from guided.grammar.tokens.vocab_index import vocab_index

        self.vocab = vocab
        vocab_index(self.vocab)
        self.compiler_cls = GrammarCompiler
        self.words = self.vocab.bitmask_words
        # load the JIT-compiled walk (from numba's on-disk cache, or compile it) before timing anything
        GrammarCompiler(vocab).compile_regex("[0-9]").matcher().allowed_tokens()

    def compile(self, regex):
        return self.compiler_cls(self.vocab).compile_regex(regex)

    def matcher(self, compiled):
        return compiled.matcher()

    def fill(self, m, bitmask):
        m.fill_bitmask(bitmask, 0)

    def commit(self, m, token):
        return m.accept_token(token)


class LLGuidanceEngine:
    name = "llguidance"

    def __init__(self, tokenizer):
        import llguidance
        import llguidance.hf
        import llguidance.numpy

        self.ll = llguidance
        self.tok = llguidance.hf.from_tokenizer(tokenizer)
        self.fill_mask = llguidance.numpy.fill_next_token_bitmask
        self.words = (self.tok.vocab_size + 31) // 32

    def compile(self, regex):
        grammar = self.ll.LLMatcher.grammar_from_regex(regex)
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


class OutlinesEngine:
    name = "outlines"

    def __init__(self, vocab):
        import outlines_core

        table: dict[bytes, list[int]] = {}
        for i, t in enumerate(vocab.tokens):
            if t and not vocab.special[i]:
                table.setdefault(t, []).append(i)
        self.oc = outlines_core
        self.vocabulary = outlines_core.Vocabulary(EOS, table)
        self.words = vocab.bitmask_words

    def compile(self, regex):
        return self.oc.Index(regex, self.vocabulary)

    def matcher(self, index):
        return self.oc.Guide(index)

    def fill(self, g, bitmask):
        row = bitmask[0]
        g.write_mask_into(row.ctypes.data, row.size, 4)

    def commit(self, g, token):
        g.advance(token, return_tokens=False)
        return True


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _run_regex(engine, entry) -> dict:
    bitmask = np.zeros((1, engine.words), dtype=np.int32)
    rss0 = _rss()
    t0 = time.perf_counter()
    try:
        compiled = engine.compile(entry["regex"])
        m = engine.matcher(compiled)
        engine.fill(m, bitmask)
    except Exception as e:  # noqa: BLE001 - an engine refusing a regex is a result
        return {"status": "compile_error", "error": f"{type(e).__name__}: {str(e)[:200]}"}
    ttfm = time.perf_counter() - t0
    tbm: list[float] = []
    status = "ok"
    for ids in entry["ids"]:
        m = engine.matcher(compiled)
        for k, tok in enumerate(ids):
            t = time.perf_counter()
            engine.fill(m, bitmask)
            allowed = (bitmask[0, tok >> 5] >> (tok & 31)) & 1
            ok = allowed and engine.commit(m, tok)
            tbm.append(time.perf_counter() - t)
            if not ok:
                status = f"rejected token {k}"
                break
    return {"status": status, "ttfm": ttfm, "tbm": tbm, "rss": max(0, _rss() - rss0)}


def worker(engine_name: str, job: str, memory_gb: float) -> None:
    """Serve regex indexes from stdin, one JSON result line each."""
    import resource

    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    limit = int(memory_gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))  # a runaway compile fails alone
    warnings.simplefilter("ignore")
    corpus = json.loads(Path(job).read_text())
    if engine_name == "llguidance":
        from guided.builtin.tokenizers import load_tokenizer

        source = load_tokenizer(str(LLAMA3))
    else:  # the exact token bytes, saved by the driver (loading the tokenizer again costs seconds)
        from guided.grammar import Vocabulary

        source = Vocabulary.load(job + ".vocab.npz")
    t = time.perf_counter()
    engine = {"guided": GuidedEngine, "llguidance": LLGuidanceEngine, "outlines": OutlinesEngine}[
        engine_name
    ](source)
    setup = time.perf_counter() - t
    gc.collect()
    gc.freeze()  # as a serving engine does after start-up: the tokenizer's objects leave the GC's scans
    print(json.dumps({"setup": setup}), flush=True)
    for line in sys.stdin:
        i = int(line)
        r = _run_regex(engine, corpus[i])
        r["index"] = i
        print(json.dumps(r), flush=True)


# ---------------------------------------------------------------------- driver
class WorkerProcess:
    """One engine's worker; regexes are sent one at a time so the engines interleave (same machine load)."""

    def __init__(self, name: str, job: str, memory_gb: float):
        env = dict(os.environ, NUMBA_NUM_THREADS="1", RAYON_NUM_THREADS="1", OMP_NUM_THREADS="1",
                   TOKENIZERS_PARALLELISM="false")  # fmt: skip
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", name, "--job", job, "--memory-gb", str(memory_gb)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
        )  # fmt: skip
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.setup = self.read(300.0)
        if self.setup is None or "setup" not in self.setup:
            raise RuntimeError(f"{name} worker did not start")

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def read(self, timeout: float):
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            return None
        return json.loads(line) if line is not None else {"status": f"crash rc={self.proc.wait()}"}

    def run(self, i: int, timeout: float) -> dict:
        self.proc.stdin.write(f"{i}\n")
        self.proc.stdin.flush()
        r = self.read(timeout)
        if r is None:
            self.kill()
            return {"status": "timeout", "index": i}
        r["index"] = i
        return r

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def run_engines(names: list[str], job: str, n: int, timeout: float, memory_gb: float):
    results = {name: [None] * n for name in names}
    setups: dict[str, float | None] = {name: None for name in names}
    workers: dict[str, WorkerProcess | None] = {name: None for name in names}
    for i in range(n):
        for name in names:
            w = workers[name]
            if w is None or not w.alive():
                w = workers[name] = WorkerProcess(name, job, memory_gb)
                if setups[name] is None:
                    setups[name] = w.setup["setup"]
            results[name][i] = w.run(i, timeout)
        if (i + 1) % 50 == 0:
            print(f"  {i + 1}/{n}", file=sys.stderr, flush=True)
    for w in workers.values():
        if w is not None:
            w.kill()
    return results, setups


def _pct(xs, q):
    return float(np.percentile(xs, q)) if len(xs) else None


def summarize(results: list[dict | None]) -> dict:
    ok = [r for r in results if r and r["status"] == "ok"]
    ttfm = [r["ttfm"] for r in ok]
    tbm = [x for r in ok for x in r["tbm"]]
    statuses: dict[str, int] = {}
    for r in results:
        key = (r or {"status": "missing"})["status"].split(" ")[0]
        statuses[key] = statuses.get(key, 0) + 1
    return {
        "regexes_ok": len(ok),
        "statuses": statuses,
        "ttfm_ms": {"p50": _ms(_pct(ttfm, 50)), "p90": _ms(_pct(ttfm, 90)), "p99": _ms(_pct(ttfm, 99)),
                    "max": _ms(max(ttfm, default=None)), "mean": _ms(float(np.mean(ttfm)) if ttfm else None)},
        "tbm_us": {"p50": _us(_pct(tbm, 50)), "p99": _us(_pct(tbm, 99)), "max": _us(max(tbm, default=None)),
                   "mean": _us(float(np.mean(tbm)) if tbm else None), "tokens": len(tbm)},
        "rss_mb": {"max": round(max((r["rss"] for r in ok), default=0) / 2**20, 1)},
    }  # fmt: skip


def _ms(x):
    return None if x is None else round(x * 1e3, 3)


def _us(x):
    return None if x is None else round(x * 1e6, 2)


def ratios(a: list, b: list) -> dict:
    """guided / peer on the regexes both compiled and ran to the end."""
    both = [
        i
        for i, (x, y) in enumerate(zip(a, b, strict=True))
        if x and y and x["status"] == "ok" and y["status"] == "ok"
    ]
    if not both:
        return {"regexes": 0}
    ta, tb = [a[i]["ttfm"] for i in both], [b[i]["ttfm"] for i in both]
    ba = [x for i in both for x in a[i]["tbm"]]
    bb = [x for i in both for x in b[i]["tbm"]]
    return {
        "regexes": len(both),
        "ttfm_p50": round(_pct(ta, 50) / _pct(tb, 50), 3),
        "ttfm_mean": round(float(np.mean(ta)) / float(np.mean(tb)), 3),
        "tbm_p50": round(_pct(ba, 50) / _pct(bb, 50), 3),
        "tbm_p99": round(_pct(ba, 99) / _pct(bb, 99), 3),
        "tbm_mean": round(float(np.mean(ba)) / float(np.mean(bb)), 3),
    }


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {"python": platform.python_version(), "numpy": np.__version__}
    for mod in ("numba", "llguidance", "outlines_core", "transformers", "tokenizers"):
        try:
            from importlib.metadata import version

            versions[mod] = version(mod.replace("_", "-"))
        except Exception:  # noqa: BLE001
            versions[mod] = None
    return {"cpu": cpu, "cores_used": 1, "platform": platform.platform(), "versions": versions}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, help="only the first N regexes of the corpus")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument(
        "--timeout", type=float, default=10.0, help="seconds per regex before it counts as a timeout"
    )
    ap.add_argument("--memory-gb", type=float, default=6.0, help="address-space limit of each worker")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "regex-cpu.json"))
    ap.add_argument("--worker")
    ap.add_argument("--job")
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker, args.job, args.memory_gb)
    if not LLAMA3.exists():
        sys.exit(f"{LLAMA3} is absent: the benchmark needs the Llama 3 tokenizer")
    warnings.simplefilter("ignore")
    from regex_corpus import build_corpus

    from guided.builtin.tokenizers import load_tokenizer

    tokenizer = load_tokenizer(str(LLAMA3))
    corpus = build_corpus(args.limit)
    for e in corpus:
        e["ids"] = [tokenizer.encode(s, add_special_tokens=False) for s in e["strings"]]
    engines = []
    for name in args.engines.split(","):
        mod = {"llguidance": "llguidance", "outlines": "outlines_core"}.get(name)
        if mod:
            try:
                __import__(mod)
            except ImportError:
                print(f"{name} is not importable (pip install {mod.replace('_', '-')}); running without it")
                continue
        engines.append(name)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(corpus, f)
        job = f.name
    from guided.grammar import Vocabulary

    Vocabulary.from_tokenizer(tokenizer).save(job + ".vocab.npz")
    print(
        f"running {', '.join(engines)} on {len(corpus)} regexes, interleaved ...", file=sys.stderr, flush=True
    )
    load_start = os.getloadavg()[0]
    per_engine, setups = run_engines(engines, job, len(corpus), args.timeout, args.memory_gb)
    summary = {}
    for name in engines:
        summary[name] = summarize(per_engine[name])
        summary[name]["tokenizer_setup_s"] = None if setups[name] is None else round(setups[name], 3)
    os.unlink(job)
    os.unlink(job + ".vocab.npz")
    out = {
        "command": "python benchmarks/regex_bench.py" + (f" --limit {args.limit}" if args.limit else ""),
        "machine": dict(machine(), cpus=os.cpu_count(), load_avg_1m=[round(load_start, 2), round(os.getloadavg()[0], 2)]),
        "corpus": {"regexes": len(corpus), "strings": sum(len(e["strings"]) for e in corpus),
                   "tokens": sum(len(i) for e in corpus for i in e["ids"])},
        "summary": summary,
        "ratios_guided_over_peer": {p: ratios(per_engine["guided"], per_engine[p]) for p in engines if p != "guided"}
        if "guided" in per_engine else {},
        "slowest_guided_ttfm": _slowest(per_engine.get("guided"), corpus),
        "failures": {n: _failures(per_engine[n], corpus) for n in engines},
        "per_regex": [
            {"name": e["name"], "regex": e["regex"][:80],
             **{n: _brief(per_engine[n][i]) for n in engines}}
            for i, e in enumerate(corpus)
        ],
    }  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    md = Path(args.out).with_suffix(".md")
    md.write_text(render_markdown(out))
    print(md.read_text())
    print(f"wrote {args.out} and {md}")


def _load_line(m: dict) -> list[str]:
    """The machine's load during the run: absolute times grow with it, ratios much less (the engines
    take turns regex by regex)."""
    if "load_avg_1m" not in m:
        return []
    start, end = m["load_avg_1m"]
    return [f"Load average (1 min) at start / end: {start} / {end} on {m.get('cpus')} CPUs  "]


def render_markdown(out: dict) -> str:
    m = out["machine"]
    lines = [
        "# Regex constraints: guided vs llguidance vs outlines-core (CPU, one thread, Llama 3 tokenizer)",
        "",
        f"Command: `{out['command']}`  ",
        f"Machine: {m['cpu']}, {m['platform']}  ",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()) + "  ",
        *_load_line(m),
        f"Corpus: {out['corpus']['regexes']} regexes, {out['corpus']['strings']} strings, "
        f"{out['corpus']['tokens']} tokens",
        "",
        "| engine | regexes ok | TTFM p50 ms | TTFM p99 ms | TTFM max ms | TBM p50 µs | TBM p99 µs | TBM max µs"
        " | RSS growth max MB | other outcomes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in out["summary"].items():
        t, b = s["ttfm_ms"], s["tbm_us"]
        other = ", ".join(f"{k}: {v}" for k, v in s["statuses"].items() if k != "ok") or "-"
        lines.append(
            f"| {name} | {s['regexes_ok']} | {t['p50']} | {t['p99']} | {t['max']} | {b['p50']} | {b['p99']} | "
            f"{b['max']} | {s['rss_mb']['max']} | {other} |"
        )
    lines += [
        "",
        "Ratios guided / peer on the regexes both ran to the end (below 1: guided is faster):",
        "",
        "| peer | regexes | TTFM p50 | TTFM mean | TBM p50 | TBM p99 | TBM mean |",
        "|---|---|---|---|---|---|---|",
    ]
    for peer, r in out["ratios_guided_over_peer"].items():
        if r.get("regexes"):
            lines.append(
                f"| {peer} | {r['regexes']} | {r['ttfm_p50']} | {r['ttfm_mean']} | {r['tbm_p50']} | "
                f"{r['tbm_p99']} | {r['tbm_mean']} |"
            )
    lines += ["", "Targets (issue 3):", ""] + [f"- {t}" for t in check_targets(out)]
    return "\n".join(lines) + "\n"


def check_targets(out: dict) -> list[str]:
    g = out["summary"].get("guided")
    if not g:
        return ["guided did not run"]
    llg = out["ratios_guided_over_peer"].get("llguidance", {})
    oc = out["summary"].get("outlines", {})
    worst_ttfm = max(
        (x["guided"]["ttfm_ms"] for x in out["per_regex"] if isinstance(x["guided"], dict)), default=0
    )

    def verdict(ok):
        return "met" if ok else "MISSED"

    rows = [
        f"TBM p50 <= 10 us: {g['tbm_us']['p50']} us, {verdict(g['tbm_us']['p50'] <= 10)}",
        f"TBM p50 <= 0.5x llguidance: {llg.get('tbm_p50')}x, {verdict((llg.get('tbm_p50') or 9) <= 0.5)}",
        f"TBM p99 <= 100 us: {g['tbm_us']['p99']} us, {verdict(g['tbm_us']['p99'] <= 100)}",
        f"TTFM p50 <= 5 ms: {g['ttfm_ms']['p50']} ms, {verdict(g['ttfm_ms']['p50'] <= 5)}",
    ]
    if oc.get("ttfm_ms", {}).get("p50") is not None:
        rows.append(
            f"TTFM p50 below outlines-core's ({oc['ttfm_ms']['p50']} ms): "
            f"{verdict(g['ttfm_ms']['p50'] < oc['ttfm_ms']['p50'])}"
        )
    rows.append(f"no regex over 1 s to first mask: worst {worst_ttfm} ms, {verdict(worst_ttfm < 1000)}")
    rows.append(
        f"no regex over 256 MB: worst RSS growth {g['rss_mb']['max']} MB, {verdict(g['rss_mb']['max'] < 256)}"
    )
    return rows


def _slowest(results, corpus, k: int = 10):
    if not results:
        return []
    ok = sorted((r for r in results if r and r["status"] == "ok"), key=lambda r: -r["ttfm"])[:k]
    return [{"name": corpus[r["index"]]["name"], "regex": corpus[r["index"]]["regex"][:120],
             "ttfm_ms": _ms(r["ttfm"]), "tbm_max_us": _us(max(r["tbm"], default=0))} for r in ok]  # fmt: skip


def _brief(r):
    if not r or r["status"] != "ok":
        return (r or {}).get("status", "missing")
    return {
        "ttfm_ms": _ms(r["ttfm"]),
        "tbm_p50_us": _us(_pct(r["tbm"], 50)),
        "tbm_max_us": _us(max(r["tbm"], default=0)),
    }


def _failures(results, corpus):
    return [{"name": corpus[r["index"]]["name"], "regex": corpus[r["index"]]["regex"][:120], "status": r["status"],
             "error": r.get("error")} for r in results if r and r["status"] != "ok"]  # fmt: skip


if __name__ == "__main__":
    main()
