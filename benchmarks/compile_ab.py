"""Time to first mask of two versions of guided, interleaved schema by schema on the same machine.

On a shared machine, two runs made minutes apart differ by 20-30% at every percentile (llguidance's
own figures move as much between runs), which hides the effect of most changes. This runs both
versions at once, each in its own worker process importing its own copy of the package (``git
archive REF``, laid out as the installed package), and hands them the same schema one after the
other (alternating which goes first); each compiles it ``--reps`` times with a fresh compiler and
keeps its fastest. Prints both versions' percentiles, per-schema ratios (B / A) and the total ratio
per band of A's time.

    python benchmarks/compile_ab.py 32999ca HEAD --every 40 --offset 3

A ref is anything ``git archive`` takes (a commit, a branch, HEAD): commit a change to measure it.

``--replay`` measures what MaskBench measures instead, paired the same way: each version's worker
keeps one engine for the whole run (no fresh compiler, no collection between schemas: the state a
long-lived process carries, its garbage collector's work included), compiles each schema once and
replays its test instances; wall-clock TTFM per schema and every mask's time (TBM) are compared.

    python benchmarks/compile_ab.py f319418 HEAD --every 8 --replay
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("GUIDED_SHARED", REPO.parent / "shared"))
# the repository's folders -> their place in the installed package (pyproject's package-dir)
LAYOUT = {"guided": "guided", "grammar": "guided/grammar", "engine": "guided/engine", "kernels": "guided/kernels",
          "schemas": "guided/schema_files"}  # fmt: skip

WORKER = r"""
import gc, json, sys, time, warnings
warnings.simplefilter("ignore")
from guided.bench.engines import make_engine
from guided.bench.maskbench import warm_up
from guided.builtin.tokenizers import load_tokenizer
from guided.grammar.compiler import GrammarCompiler
engine = make_engine("guided", load_tokenizer(sys.argv[1]))
warm_up(engine)
reps = int(sys.argv[2])
print("ready", flush=True)
for line in sys.stdin:
    schema = json.loads(open(line.strip()).read())["schema"]
    best, ok = float("inf"), False
    for _ in range(reps):
        engine.compiler = GrammarCompiler(engine.vocab, cache_size=2)
        gc.collect()
        t0 = time.process_time()
        try:
            engine.compile(schema)
            ok = True
        except Exception:
            ok = False
        best = min(best, time.process_time() - t0)
        if best > 0.5:
            break
    print(json.dumps([best, ok]), flush=True)
"""

REPLAY = r"""
import json, sys, warnings
from pathlib import Path
warnings.simplefilter("ignore")
from guided.bench.engines import make_engine
from guided.bench.maskbench import run_file, warm_up
from guided.builtin.tokenizers import load_tokenizer
tokenizer = load_tokenizer(sys.argv[1])
engine = make_engine("guided", tokenizer, key_order="any")
warm_up(engine)
print("ready", flush=True)
for line in sys.stdin:
    try:
        r = run_file(engine, tokenizer, Path(line.strip()))
    except Exception as e:  # a mask past its bound, say: the schema fails, the run goes on
        print(f"{line.strip()}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        r = {"status": "error"}
    print(json.dumps([r.get("ttfm_s", 0.0), r["status"] == "ok" and r["passed"], r.get("tbm_s", [])]), flush=True)
"""


def checkout(ref: str, into: Path) -> Path:
    """``git archive ref`` unpacked into ``into``, laid out as the installed package."""
    raw = into / "raw"
    raw.mkdir(parents=True)
    data = subprocess.run(["git", "archive", ref], cwd=REPO, capture_output=True, check=True).stdout
    with tempfile.TemporaryFile() as f:
        f.write(data)
        f.seek(0)
        with tarfile.open(fileobj=f) as tar:
            tar.extractall(raw, filter="data")
    pkg = into / "pkg"
    for src, dst in LAYOUT.items():
        (pkg / dst).parent.mkdir(parents=True, exist_ok=True)
        (raw / src).rename(pkg / dst)
    return pkg


def run_paired(refs: tuple[str, str], code: list[str], files: list[Path]) -> list[dict]:
    """One worker per ref (``python -c *code``, importing that version of the package), handed the
    same files one after the other, alternating which goes first: per version, {file name: the JSON
    line its worker answered}. A worker prints "ready" once set up, then one line per file."""
    with tempfile.TemporaryDirectory() as tmp:
        workers = []
        for name, ref in zip(("a", "b"), refs, strict=True):
            env = {**os.environ, "PYTHONPATH": str(checkout(ref, Path(tmp) / name))}
            w = subprocess.Popen([sys.executable, "-c", *code], cwd=tmp, env=env,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
            if w.stdout.readline().strip() != "ready":
                sys.exit(f"the worker for {ref} did not start")
            workers.append(w)
        got: list[dict] = [{}, {}]
        for i, f in enumerate(files):
            for k in (0, 1) if i % 2 == 0 else (1, 0):
                workers[k].stdin.write(f"{f}\n")
                workers[k].stdin.flush()
                got[k][f.name] = json.loads(workers[k].stdout.readline())
        for w in workers:
            w.stdin.close()
            w.wait(timeout=60)
    return got


def percentile(values: list[float], q: float) -> float:
    """The q-th value of ``values`` (NaN when there is none: every schema failed in a version)."""
    v = sorted(values)
    return v[min(len(v) - 1, int(len(v) * q))] if v else float("nan")


def paired_parser(description: str, every: int) -> argparse.ArgumentParser:
    """The arguments of a paired run: two refs and which MaskBench schemas (``selected``)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("a", help="git ref of version A (the baseline)")
    p.add_argument("b", help="git ref of version B")
    p.add_argument("--sets", default="maskbench,maskbench-hard", help="data sets under ../shared/data")
    p.add_argument("--every", type=int, default=every)
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--only", default=None, help="comma-separated schema file names (then --every/--offset are ignored)")
    return p


def selected(args) -> list[Path]:
    files = [f for s in args.sets.split(",") for f in sorted((SHARED / "data" / s).glob("*.json"))]
    if args.only:
        names = set(args.only.split(","))
        files = [f for f in files if f.name in names or f.stem in names]
    else:
        files = files[args.offset :: args.every]
    if not files:
        sys.exit(f"no schemas under {SHARED / 'data'} for {args.sets}")
    return files


def main() -> None:
    p = paired_parser(__doc__.split("\n")[0], every=40)
    p.add_argument("--reps", type=int, default=3, help="compiles per schema and version (the fastest counts)")
    p.add_argument("--tokenizer", default=str(SHARED / "tokenizers" / "llama3"))
    p.add_argument("--json", default=None, help="write the per-schema figures here")
    p.add_argument("--replay", action="store_true", help="MaskBench's measure: wall-clock TTFM and every mask (TBM)")
    args = p.parse_args()
    files = selected(args)
    code = [REPLAY, args.tokenizer] if args.replay else [WORKER, args.tokenizer, str(args.reps)]
    times = run_paired((args.a, args.b), code, files)
    a, b = times
    names = [f.name for f in files]
    if args.replay:
        replay_report(args, names, a, b)
        return
    ta, tb = [a[n][0] for n in names], [b[n][0] for n in names]
    print(f"{len(names)} schemas, CPU seconds per compile (fastest of {args.reps}); A = {args.a}, B = {args.b}")
    for q in (0.5, 0.9, 0.99):
        print(f"  p{int(q * 100):<2}  A {percentile(ta, q) * 1e3:9.1f} ms   B {percentile(tb, q) * 1e3:9.1f} ms")
    ratios = sorted(b[n][0] / a[n][0] for n in names)
    print(f"  B/A per schema: median {percentile(ratios, 0.5):.3f}, p10 {percentile(ratios, 0.1):.3f}, "
          f"p90 {percentile(ratios, 0.9):.3f}; total {sum(tb) / sum(ta):.3f}")  # fmt: skip
    for lo, hi in ((0, 0.01), (0.01, 0.03), (0.03, 0.1), (0.1, 1), (1, float("inf"))):
        band = [n for n in names if lo <= a[n][0] < hi]
        if band:
            r = sum(b[n][0] for n in band) / sum(a[n][0] for n in band)
            print(f"  A in [{lo * 1e3:g}, {hi * 1e3:g}) ms: {len(band):4d} schemas, B/A total {r:.3f}")
    print(f"  compiled: A {sum(a[n][1] for n in names)}, B {sum(b[n][1] for n in names)} of {len(names)}")
    if args.json:
        Path(args.json).write_text(json.dumps({"a": args.a, "b": args.b, "times": {"a": a, "b": b}}, indent=1))


def replay_report(args, names: list[str], a: dict, b: dict) -> None:
    print(f"{len(names)} schemas replayed as MaskBench does (wall clock); A = {args.a}, B = {args.b}")
    ok = [n for n in names if a[n][1] and b[n][1]]
    if not ok:  # nothing to pair (a failing schema has no figures)
        print(f"  passing: A {sum(a[n][1] for n in names)}, B {sum(b[n][1] for n in names)} of {len(names)}")
        return
    ta, tb = [a[n][0] for n in ok], [b[n][0] for n in ok]
    ma, mb = [t for n in ok for t in a[n][2]], [t for n in ok for t in b[n][2]]
    for label, xa, xb in (("TTFM", ta, tb), ("TBM", ma, mb)):
        row = "   ".join(f"p{int(q * 100)} {percentile(xa, q) * 1e3:8.2f} / {percentile(xb, q) * 1e3:8.2f}"
                         for q in (0.5, 0.9, 0.99))  # fmt: skip
        print(f"  {label:4s} ms, A / B:  {row}   max {max(xa, default=0.0) * 1e3:8.1f} / {max(xb, default=0.0) * 1e3:8.1f}")
    row = "   ".join(f"p{int(q * 100)} {percentile(ma, q) * 1e6:6.2f} / {percentile(mb, q) * 1e6:6.2f}"
                     for q in (0.25, 0.5, 0.75))  # fmt: skip
    print(f"  TBM  us, A / B:  {row}   (the typical mask: MaskBench's TBM p50 is compared in microseconds)")
    ratios = sorted(b[n][0] / a[n][0] for n in ok if a[n][0] > 0)
    print(f"  TTFM B/A per schema: median {percentile(ratios, 0.5):.3f}, p10 {percentile(ratios, 0.1):.3f}, "
          f"p90 {percentile(ratios, 0.9):.3f}; total {sum(tb) / sum(ta):.3f}")  # fmt: skip
    for bound in (0.001, 0.005, 0.01, 0.1):  # the first two: how many first visits make the TBM tail
        print(f"  masks over {bound * 1e3:g} ms: A {sum(t > bound for t in ma)}, B {sum(t > bound for t in mb)} "
              f"of {len(ma)}")  # fmt: skip
    print(f"  passing: A {sum(a[n][1] for n in names)}, B {sum(b[n][1] for n in names)} of {len(names)}")
    if args.json:
        slim = {k: {n: [v[n][0], v[n][1], max(v[n][2], default=0.0)] for n in names} for k, v in (("a", a), ("b", b))}
        Path(args.json).write_text(json.dumps({"a": args.a, "b": args.b, "replay": slim}, indent=1))


if __name__ == "__main__":
    main()
