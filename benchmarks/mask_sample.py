"""Where the time of guided's masks (or compiles) goes, sampled: a replay to run under a sampling
profiler, and the aggregation of its raw output by place.

cProfile (``latency_profile.py``) charges every Python call its own overhead, which inflates the
many small calls around the compiled code three- to fourfold; a sampling profiler does not. With
``py-spy`` (``pip install py-spy``; native frames are charged to the Python frame that called them):

    py-spy record -r 250 -f raw -o masks.txt -- .venv/bin/python benchmarks/mask_sample.py replay \\
        benchmarks/results/maskbench-every8-clamp.json.gz --what masks --band 4 60 --count 60
    .venv/bin/python benchmarks/mask_sample.py aggregate masks.txt --what masks

``replay`` takes ``--count`` schemas (seeded shuffle) of an earlier ``benchmarks/maskbench.py`` result
whose slowest mask (``--what masks``) or time to first mask (``--what compile``) lies in ``--band``
(ms), and replays what MaskBench times: every mask of every test instance, or ``--reps`` fresh
compiles of each schema. ``aggregate`` keeps the samples inside what was timed and prints the share
of each place (``latency_profile.PLACES``) and the heaviest functions, by self and by inclusive time.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import re
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from latency_profile import SHARED, place_of  # noqa: E402

# the frame that marks a sample as timed work, per --what (MaskBench's TBM: each token's mask and
# accept, in GuidedEngine.check; TTFM: the compile and its first mask)
TIMED = {"masks": "GuidedEngine.check (", "compile": "GuidedEngine.compile ("}


def replay(args) -> None:
    from guided.bench.engines import make_engine
    from guided.bench.maskbench import warm_up
    from guided.bench.runner import read_report
    from guided.builtin.tokenizers import load_tokenizer
    from guided.grammar import GrammarCompiler

    warnings.simplefilter("ignore")
    tokenizer = load_tokenizer(args.tokenizer)
    engine = make_engine("guided", tokenizer, key_order="any")
    warm_up(engine)
    field = "tbm_max_us" if args.what == "masks" else "ttfm_us"
    lines = read_report(args.results)["lines"]["guided"]
    rows = [x for x in lines if x["status"] == "ok" and args.band[0] * 1e3 < x.get(field, 0) < args.band[1] * 1e3]
    random.Random(args.seed).shuffle(rows)
    docs = []
    for row in rows[: args.count]:
        found = [SHARED / "data" / s / row["file"] for s in ("maskbench", "maskbench-hard")]
        docs.append(json.loads(next(p for p in found if p.exists()).read_text()))
    for _ in range(args.reps):
        for doc in docs:
            engine.compiler = GrammarCompiler(engine.vocab, cache_size=2)  # a fresh compile every time
            try:
                compiled = engine.compile(doc["schema"])
            except Exception:  # noqa: BLE001 - a schema that fails now is only left out
                continue
            if args.what == "masks":
                for test in doc["tests"]:
                    text = json.dumps(test["data"], ensure_ascii=False)
                    engine.check(compiled, tokenizer.encode(text, add_special_tokens=False))
    print(f"replayed {len(docs)} schemas", file=sys.stderr)


def aggregate(args) -> None:
    marker = TIMED[args.what]
    total, places = 0, collections.Counter()
    leaf, inclusive = collections.Counter(), collections.Counter()
    for line in Path(args.raw).read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if not count.isdigit() or not any(marker in f for f in frames):
            continue
        n = int(count)
        total += n
        name = re.sub(r":\d+\)$", ")", frames[-1])  # "function (file:line)" -> "function (file)"
        leaf[name] += n
        places[place_of("/" + name[name.rfind("(") + 1 :])] += n
        for f in {re.sub(r":\d+\)$", ")", f) for f in frames}:
            inclusive[f] += n
    print(f"{total} samples inside {marker}")
    for title, table, k in (("self time by place", places, 10), ("self time", leaf, args.top),
                            ("inclusive time", inclusive, args.top)):  # fmt: skip
        print(f"--- {title}")
        for name, n in table.most_common(k):
            print(f"{100 * n / max(total, 1):5.1f}%  {name[:140]}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("replay", help="replay schemas of a band (run under the sampling profiler)")
    r.add_argument("results")
    r.add_argument("--what", choices=tuple(TIMED), default="masks")
    r.add_argument("--band", type=float, nargs=2, default=(4.0, 60.0), metavar=("LO_MS", "HI_MS"))
    r.add_argument("--count", type=int, default=60)
    r.add_argument("--reps", type=int, default=1)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--tokenizer", default=str(SHARED / "tokenizers" / "llama3" / "tokenizer.model"))
    a = sub.add_parser("aggregate", help="split a py-spy raw file (-f raw) by place and function")
    a.add_argument("raw")
    a.add_argument("--what", choices=tuple(TIMED), default="masks")
    a.add_argument("--top", type=int, default=25)
    args = p.parse_args()
    replay(args) if args.cmd == "replay" else aggregate(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
