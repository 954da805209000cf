"""What stalls single masks in a long-lived process: the garbage collector's passes and page faults.

Replays every k-th MaskBench schema (sorted by name, over the given directories) in one process, as
a MaskBench worker does (one engine for the whole run, set-up frozen out of the collector), and times
every mask with its token's acceptance. Per mask it records the collector's time inside it
(``gc.callbacks``; full passes counted apart) and the page faults it took (``getrusage``'s minor
faults: memory touched for the first time, as when an automaton's arrays grow). Prints the
distribution, the totals, and the slowest masks with what they contained. A diagnostic for #17's
tail, not a comparison: MaskBench itself (``benchmarks/maskbench.py``) measures beside llguidance.

    python benchmarks/mask_stalls.py ../shared/data/maskbench ../shared/data/maskbench-hard --every 25 --offset 3
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import time
import warnings
from pathlib import Path

import numpy as np

from guided.bench.engines import _bit, make_engine
from guided.bench.maskbench import warm_up
from guided.builtin.tokenizers import load_tokenizer


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dirs", nargs="+", help="MaskBench directories")
    p.add_argument("--tokenizer", default="../shared/tokenizers/llama3", help="run from the repository's root")
    p.add_argument("--every", type=int, default=25)
    p.add_argument("--offset", type=int, default=3)
    p.add_argument("--over-ms", type=float, default=20.0, help="list the masks slower than this")
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args()
    warnings.simplefilter("ignore")
    files = sorted((f for d in args.dirs for f in Path(d).glob("*.json")), key=lambda f: f.name)
    files = files[args.offset :: args.every]
    tok = load_tokenizer(args.tokenizer)
    engine = make_engine("guided", tok, key_order="any")
    warm_up(engine)  # compiles something, then gc.freeze(): what set-up made is out of the collector's passes
    clock = {"in_gc": 0.0, "start": 0.0, "full": 0}

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            clock["start"] = time.perf_counter()
        else:
            clock["in_gc"] += time.perf_counter() - clock["start"]
            clock["full"] += info["generation"] == 2

    def faults() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    gc.callbacks.append(on_gc)
    bitmask, times, slow = engine.bitmask, [], []
    for f in files:
        doc = json.loads(f.read_text())
        try:
            compiled = engine.compile(doc["schema"])
        except Exception:  # a refused schema has no masks
            continue
        for test in doc["tests"]:
            matcher = compiled.matcher()
            for token in tok.encode(json.dumps(test["data"], ensure_ascii=False), add_special_tokens=False):
                gc0, full0, f0 = clock["in_gc"], clock["full"], faults()
                t0 = time.perf_counter()
                matcher.fill_bitmask(bitmask, 0)
                ok = _bit(bitmask[0], token) and matcher.accept_token(token)
                dt = time.perf_counter() - t0
                times.append(dt)
                if dt * 1e3 > args.over_ms:
                    slow.append((dt, clock["in_gc"] - gc0, clock["full"] - full0, faults() - f0, f.name))
                if not ok:
                    break
    gc.callbacks.remove(on_gc)
    ms = np.array(times) * 1e3
    print(f"{len(files)} schemas, {len(ms)} masks: p50 {np.percentile(ms, 50):.3f} ms, p99 {np.percentile(ms, 99):.3f} "
          f"ms, max {ms.max():.1f} ms; over 1 ms {int((ms > 1).sum())}, over 5 ms {int((ms > 5).sum())}, "
          f"over {args.over_ms:g} ms {len(slow)}")  # fmt: skip
    print(f"collector: {clock['in_gc'] * 1e3:.0f} ms in all, {clock['full']} full passes")
    in_gc = sum(1 for s in slow if s[1] > s[0] / 2)
    in_faults = sum(1 for s in slow if s[1] <= s[0] / 2 and s[3] > 1000)
    print(f"masks over {args.over_ms:g} ms: {in_gc} mostly a collector pass, {in_faults} with over 1000 page faults")
    for dt, g, full, nf, name in sorted(slow, reverse=True)[: args.top]:
        print(f"  {dt * 1e3:7.1f} ms  collector {g * 1e3:6.1f} ms ({full} full)  page faults {nf:6d}  {name}")


if __name__ == "__main__":
    main()
