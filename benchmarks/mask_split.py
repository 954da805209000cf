"""Where time per mask (TBM) goes: grammars with run-time checks against plain ones, beside llguidance.

Takes every k-th MaskBench schema, compiles it with guided (``key_order="any"``, as MaskBench runs)
and with llguidance, and replays every test instance token by token three times: ``cold`` (masks of
states never seen), then ``warm`` twice (the same instances again: every grammar mask is cached, so
what is left is each mask's fixed cost). guided's masks are split by the kind of grammar: ``checked``
(wrapped by the run-time checks of ``unique_runtime``: uniqueItems, member names at "bag" places)
and ``plain``. Prints p50/p90/p99 per pass and kind, llguidance's over the same instances, and the
ratios. Only schemas both engines compile are counted.

    python benchmarks/mask_split.py ../shared/data/maskbench --every 60 --offset 5
"""

from __future__ import annotations

import argparse
import gc
import json
import warnings
from pathlib import Path

import numpy as np

from guided.bench.engines import make_engine
from guided.builtin.tokenizers import load_tokenizer
from guided.schema.unique_runtime import UniqueChecked

PASSES = ("cold", "warm", "warm2")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("maskbench", help="MaskBench directory")
    p.add_argument("--tokenizer", default="../shared/tokenizers/llama3", help="run from the repository's root")
    p.add_argument("--every", type=int, default=60)
    p.add_argument("--offset", type=int, default=5)
    args = p.parse_args()
    warnings.simplefilter("ignore")
    tok = load_tokenizer(args.tokenizer)
    engines = {"guided": make_engine("guided", tok, key_order="any"), "llguidance": make_engine("llguidance", tok)}
    work = []
    for f in sorted(Path(args.maskbench).glob("*.json"))[args.offset :: args.every]:
        doc = json.loads(f.read_text())
        try:
            handles = {name: e.compile(doc["schema"]) for name, e in engines.items()}
        except Exception:  # refused by either: not comparable
            continue
        tests = [tok.encode(json.dumps(t["data"], ensure_ascii=False), add_special_tokens=False) for t in doc["tests"]]
        work.append((handles, tests))
    gc.collect()
    gc.freeze()
    kinds = ("checked", "plain", "llguidance")
    times = {(ph, k): [] for ph in PASSES for k in kinds}
    for ph in PASSES:
        for handles, tests in work:
            kind = "checked" if isinstance(handles["guided"], UniqueChecked) else "plain"
            for tokens in tests:
                times[ph, kind] += engines["guided"].check(handles["guided"], tokens)[2]
                times[ph, "llguidance"] += engines["llguidance"].check(handles["llguidance"], tokens)[2]
    checked = sum(isinstance(h["guided"], UniqueChecked) for h, _ in work)
    print(json.dumps({"schemas": len(work), "checked": checked, "options": vars(args)}))
    for ph in PASSES:
        llg = np.percentile(np.array(times[ph, "llguidance"]) * 1e6, [50, 90, 99])
        both = np.array(times[ph, "checked"] + times[ph, "plain"]) * 1e6
        for kind, a in (("checked", times[ph, "checked"]), ("plain", times[ph, "plain"]), ("guided", None),
                        ("llguidance", times[ph, "llguidance"])):  # fmt: skip
            arr = both if a is None else np.array(a) * 1e6
            q = np.percentile(arr, [50, 90, 99])
            ratio = "" if kind == "llguidance" else "  vs llguidance " + " / ".join(f"{x / y:.2f}x" for x, y in zip(q, llg, strict=True))
            print(f"{ph:5s} {kind:10s} masks {len(arr):6d}  p50 {q[0]:7.1f}  p90 {q[1]:7.1f}  p99 {q[2]:8.1f} us{ratio}")


if __name__ == "__main__":
    main()
