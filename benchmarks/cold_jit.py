"""Cold start: numba's JIT of the mask code in a process that finds no cache, for two versions of guided.

    .venv/bin/python benchmarks/cold_jit.py A B [--rounds 2]

Each round runs ``guided.warmup.warm_up`` (generation under one constraint of each kind on the embedded
model) once per version, in a fresh process with an empty numba cache, the order alternating between
rounds. Printed per run: numba's compile seconds (the warm-up's ``jit_seconds``, imports included) and
the process's seconds; then each version's median and B / A. The embedded model and its tokenizer come from the
user's cache (linked), so that only the JIT is cold. Both refs need ``guided.warmup`` (ac95408 on); a ref
before b903386 starts the clock after its imports, missing what compiles there (the explicit-signature
constructors from 8f1bcc6 on): compare such a ref by its process seconds (``results/cold-jit-s60.txt``
was measured with a listener registered at the process's start, for both refs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compile_ab import checkout  # noqa: E402 - the versions laid out as the installed package

# the warm-up's own clock counts numba's compiles from before guided's compiled modules are imported
# (functions with explicit signatures compile at import); the process's seconds from its first line
CODE = ("import json, time; t0 = time.perf_counter(); from guided.warmup import warm_up; "
        "r = warm_up(log=lambda line: None); "
        "print(json.dumps({'jit_s': r['jit_seconds'], 'process_s': time.perf_counter() - t0, 'outputs': r['outputs']}))")


def cold_run(pkg: Path, tmp: Path, tag: str) -> dict:
    cache = tmp / f"cache-{tag}"
    cache.mkdir()
    user = Path(os.environ.get("GUIDED_CACHE") or Path.home() / ".cache" / "guided")
    for kept in ("models", "tokenizers"):  # built once by the project itself: not what is measured
        if (user / kept).exists():
            (cache / kept).symlink_to(user / kept)
    env = {**os.environ, "PYTHONPATH": str(pkg), "GUIDED_CACHE": str(cache)}
    env.pop("NUMBA_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", CODE], cwd=tmp, env=env, capture_output=True, text=True,
                         timeout=900)  # fmt: skip
    if out.returncode:
        raise SystemExit(f"{tag} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", help="git ref of version A (the baseline)")
    ap.add_argument("b", help="git ref of version B")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    runs: dict[str, list[dict]] = {"a": [], "b": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        pkgs = {v: checkout(ref, tmp / v) for v, ref in (("a", args.a), ("b", args.b))}
        for r in range(args.rounds):
            for v in ("ab" if r % 2 == 0 else "ba"):
                run = cold_run(pkgs[v], tmp, f"{v}{r}")
                runs[v].append(run)
                print(f"round {r} {v.upper()} ({getattr(args, v)}): JIT {run['jit_s']:.1f} s, process "
                      f"{run['process_s']:.1f} s, {run['outputs']} outputs", flush=True)  # fmt: skip
    jit = {v: statistics.median(x["jit_s"] for x in runs[v]) for v in runs}
    wall = {v: statistics.median(x["process_s"] for x in runs[v]) for v in runs}
    print(f"median JIT: A {jit['a']:.1f} s, B {jit['b']:.1f} s, B/A {jit['b'] / jit['a']:.2f}; "
          f"process (import + warm-up): A {wall['a']:.1f} s, B {wall['b']:.1f} s, B/A {wall['b'] / wall['a']:.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
