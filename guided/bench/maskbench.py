"""``guided bench maskbench PATH... --tokenizer TOK --engine E``: MaskBench's runner, replayed.

For each schema file (``{"schema", "tests": [{"valid", "data"}]}``): compile (TTFM: compile and first
mask); for each test instance serialize it with ``json.dumps(data, indent=None, ensure_ascii=False)``,
tokenize without special tokens, then per token compute the mask, check the token is allowed and
commit it (TBM). A valid instance must have every token allowed and end where the grammar accepts;
an invalid one must hit a disallowed token or end where it does not accept. A schema passes when it
compiled and every instance came out right. One JSON line per schema, then a JSON summary line.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

from guided.bench.engines import ENGINES, make_engine
from guided.bench.runner import BenchRunner, read_report, stats
from guided.builtin.tokenizers import load_tokenizer

__all__ = ["main", "build_parser", "schema_files"]


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = parser or argparse.ArgumentParser(prog="guided bench maskbench", description=__doc__.split("\n")[0])
    p.add_argument("paths", nargs="+", metavar="PATH", help="MaskBench .json files or directories of them")
    p.add_argument(
        "--tokenizer", required=True, help="tokenizer directory, tokenizer.json or tiktoken .model"
    )
    p.add_argument("--engine", default="guided", choices=ENGINES)
    p.add_argument("--limit", type=int, default=None, help="at most this many schemas")
    p.add_argument("--every", type=int, default=1, help="take every k-th schema (sorted by name)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per schema (compile and tests)")
    p.add_argument("--max-depth", type=int, default=None, help="guided: unroll recursive schemas this deep")
    p.add_argument("--jobs", type=int, default=1, help="schemas run in parallel (each single-threaded)")
    p.add_argument(
        "--key-order",
        default="any",
        choices=("any", "declared"),
        help="guided: accepted property orders (MaskBench's valid instances list properties in any order)",
    )
    return p


def schema_files(paths, every: int = 1, limit: int | None = None) -> list[Path]:
    files: list[Path] = []
    for p in map(Path, paths):
        files += sorted(p.glob("*.json")) if p.is_dir() else [p]
    files = files[:: max(every, 1)]
    return files[:limit] if limit is not None else files


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    files = schema_files(args.paths, args.every, args.limit)
    tokenizer = load_tokenizer(args.tokenizer)
    opts = {}
    if args.engine.startswith("guided"):
        opts["key_order"] = args.key_order
        if args.max_depth is not None:
            opts["max_depth"] = args.max_depth
    engine = make_engine(args.engine, tokenizer, **opts)
    warm_up(engine)

    def job(i: int) -> dict:
        return run_file(engine, tokenizer, files[i])

    summary = Summary(args.engine, opts)
    for i, result in BenchRunner(args.jobs).run(len(files), job, args.timeout):
        result = {"file": files[i].name, **result}
        summary.add(result)
        tbm = result.pop("tbm_s", None)
        if tbm:  # the slowest mask, and how many masks were slow (which schemas make the tail)
            result["tbm_max_us"] = round(max(tbm) * 1e6, 1)
            result["tbm_n"] = len(tbm)
            result["tbm_over_1ms"] = sum(t > 1e-3 for t in tbm)
            result["tbm_over_5ms"] = sum(t > 5e-3 for t in tbm)
        print(json.dumps(result), flush=True)
    print(json.dumps(summary.line()), flush=True)
    return 0


def slowest_schemas(results, top: int, data: Path, by: str = "ttfm") -> list[Path]:
    """The ``top`` schema files guided handled slowest in earlier ``benchmarks/maskbench.py`` result
    files (by time to first mask, or by ``"tbm"``: its slowest mask), found under ``data/<set>/``."""
    rows = []
    for path in results:
        report = read_report(path)
        sets = report["meta"].get("sets", ["maskbench"])
        for line in report["lines"]["guided"]:
            if line["status"] != "ok":
                continue
            found = [data / s / line["file"] for s in sets if (data / s / line["file"]).exists()]
            if found:
                rows.append((line.get("ttfm_us", 0) if by == "ttfm" else line.get("tbm_max_us", 0), found[0]))
    rows.sort(reverse=True)
    return [f for _, f in rows[:top]]


def warm_up(engine) -> None:
    """Compile something small in the parent so forked workers inherit JIT-compiled code; then
    freeze what is alive (vocabulary, token trie, JIT state: ~500k objects) out of the garbage
    collector, whose full passes over it would otherwise land in single masks (~0.25 s each)."""
    try:
        h = engine.compile({"type": "object", "properties": {"a": {"type": "string"}}})
        engine.check(h, [])
    except Exception:  # a broken engine shows up per schema, with its error
        pass
    gc.collect()
    gc.freeze()


def run_file(engine, tokenizer, path: Path) -> dict:
    doc = json.loads(path.read_text())
    t0 = time.perf_counter()
    try:
        handle = engine.compile(doc["schema"])
    except Exception as e:
        return {"status": "compile_error", "error": f"{type(e).__name__}: {e}"[:300]}
    ttfm = time.perf_counter() - t0
    return {"status": "ok", "ttfm_s": ttfm, **check_tests(engine, tokenizer, handle, doc["tests"])}


def check_tests(engine, tokenizer, handle, tests, serialize=None) -> dict:
    rejects_valid = accepts_invalid = 0
    tbm: list[float] = []
    for test in tests:
        text = (
            serialize(test["data"])
            if serialize
            else json.dumps(test["data"], indent=None, ensure_ascii=False)
        )
        tokens = tokenizer.encode(text, add_special_tokens=False)
        all_allowed, accepting, times = engine.check(handle, tokens)
        tbm += times
        accepted = all_allowed and accepting
        if test["valid"] and not accepted:
            rejects_valid += 1
        elif not test["valid"] and accepted:
            accepts_invalid += 1
    return {"tests": len(tests), "rejects_valid": rejects_valid, "accepts_invalid": accepts_invalid,
            "passed": rejects_valid == 0 and accepts_invalid == 0, "tbm_s": tbm}  # fmt: skip


class Summary:
    def __init__(self, engine: str, options: dict | None = None):
        self.engine = engine
        self.options = options or {}
        self.n = self.compiled = self.passing = self.compile_errors = self.timeouts = self.crashes = 0
        self.rejects_valid = self.accepts_invalid = 0
        self.schemas_rejecting_valid = self.schemas_accepting_invalid = 0
        self.ttfm: list[float] = []
        self.tbm: list[float] = []

    def add(self, r: dict) -> None:
        self.n += 1
        status = r["status"]
        if status == "ok":
            self.compiled += 1
            self.passing += r["passed"]
            self.rejects_valid += r["rejects_valid"]
            self.accepts_invalid += r["accepts_invalid"]
            self.schemas_rejecting_valid += r["rejects_valid"] > 0
            self.schemas_accepting_invalid += r["accepts_invalid"] > 0
            self.ttfm.append(r["ttfm_s"])
            self.tbm += r.get("tbm_s", [])
            r["ttfm_us"] = round(r.pop("ttfm_s") * 1e6, 1)
        elif status == "compile_error":
            self.compile_errors += 1
        elif status == "timeout":
            self.timeouts += 1
        else:
            self.crashes += 1

    def line(self) -> dict:
        return {
            "engine": self.engine, "options": self.options, "schemas": self.n, "compiled": self.compiled, "passing": self.passing,
            "compile_errors": self.compile_errors, "timeouts": self.timeouts, "crashes": self.crashes,
            "rejects_valid": self.rejects_valid, "accepts_invalid": self.accepts_invalid,
            "schemas_rejecting_valid": self.schemas_rejecting_valid,
            "schemas_accepting_invalid": self.schemas_accepting_invalid,
            "ttfm_us": stats(self.ttfm), "tbm_us": stats(self.tbm),
        }  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
