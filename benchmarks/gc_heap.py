"""What cached grammars cost the garbage collector: tracked objects and the time of a full collection.

A server keeps its compiled grammars (256 by default, ``CompileService``); every full collection of
Python's collector walks every container object they hold, and the engine loop stops while it does.
This compiles every k-th MaskBench schema (``key_order="any"``, as MaskBench runs), replays its test
instances token by token (so the lazy automata grow as in use), keeps every grammar alive, then
counts the containers the collector tracks (by type) and times ``gc.collect()`` three times.

    python benchmarks/gc_heap.py ../shared/data/maskbench --every 6

Run it at two commits (a git worktree each) to compare; there is no peer to run beside it
(llguidance's grammars are not Python objects).
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import time
import warnings
from pathlib import Path

from guided.bench.engines import make_engine
from guided.bench.maskbench import check_tests
from guided.builtin.tokenizers import load_tokenizer


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("maskbench", help="MaskBench directory")
    p.add_argument("--tokenizer", default="../shared/tokenizers/llama3", help="run from the repository's root")
    p.add_argument("--every", type=int, default=6)
    args = p.parse_args()
    warnings.simplefilter("ignore")
    tok = load_tokenizer(args.tokenizer)
    engine = make_engine("guided", tok, key_order="any")
    engine.compile({"type": "object", "properties": {"a": {"type": "string"}}})  # per-vocabulary tables
    gc.collect()
    before = collections.Counter(type(o).__name__ for o in gc.get_objects())
    kept = []
    for path in sorted(Path(args.maskbench).glob("*.json"))[:: args.every]:
        doc = json.loads(path.read_text())
        try:
            compiled = engine.compile(doc["schema"])
            check_tests(engine, tok, compiled, doc["tests"])
        except Exception:  # noqa: BLE001 - schemas guided refuses keep nothing alive
            continue
        kept.append(compiled)
    gc.collect()
    after = collections.Counter(type(o).__name__ for o in gc.get_objects())
    added = after - before
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        gc.collect()
        times.append(time.perf_counter() - t0)
    print(json.dumps({
        "grammars": len(kept), "tracked_total": sum(after.values()), "tracked_added": sum(added.values()),
        "by_type": dict(added.most_common(8)), "full_collection_ms": round(min(times) * 1e3, 1),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
