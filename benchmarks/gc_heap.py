"""What cached grammars cost the garbage collector: tracked objects and the time of a full collection.

A server keeps its compiled grammars (256 by default, ``CompileService``); every full collection of
Python's collector walks every container object they hold, and the engine loop stops while it does.
This compiles every k-th MaskBench schema (``key_order="any"``, as MaskBench runs), replays its test
instances token by token (so the lazy automata grow as in use), keeps every grammar alive, then
counts the containers the collector tracks (by type) and times ``gc.collect()`` three times.

    python benchmarks/gc_heap.py ../shared/data/maskbench --every 6

``--freeze`` freezes the start-up heap first (vocabulary, token trie, JIT state), as ``guided serve``
does when it starts: the full collection then walks what the grammars added alone.

``--long-lived`` measures what a long-lived process carries instead, as MaskBench's worker runs:
one engine (its compiler keeps 2 grammars), the start-up heap frozen (``warm_up``), every k-th
schema compiled and replayed in turn; it prints the objects the collector still walks (the
unfrozen heap) every 25 schemas and every pass over the oldest generation that took over 10 ms
(the schema it landed in, its milliseconds, the heap then): those passes land inside single masks.

    python benchmarks/gc_heap.py ../shared/data/maskbench-hard --every 13 --long-lived

Run it at two commits (a git worktree each, or ``git archive`` laid out as the installed package
on ``PYTHONPATH``, from outside the checkout) to compare; there is no peer to run beside it
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
from guided.bench.maskbench import check_tests, run_file, warm_up
from guided.builtin.tokenizers import load_tokenizer


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("maskbench", help="MaskBench directory")
    p.add_argument("--tokenizer", default="../shared/tokenizers/llama3", help="run from the repository's root")
    p.add_argument("--every", type=int, default=6)
    p.add_argument("--long-lived", action="store_true", help="the heap a long-lived process carries (see above)")
    p.add_argument("--freeze", action="store_true", help="freeze the start-up heap first, as the server does")
    args = p.parse_args()
    warnings.simplefilter("ignore")
    tok = load_tokenizer(args.tokenizer)
    if args.long_lived:
        long_lived(tok, sorted(Path(args.maskbench).glob("*.json"))[:: args.every])
        return
    engine = make_engine("guided", tok, key_order="any")
    engine.compile({"type": "object", "properties": {"a": {"type": "string"}}})  # per-vocabulary tables
    gc.collect()
    if args.freeze:
        gc.freeze()
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


def long_lived(tok, files: list[Path]) -> None:
    engine = make_engine("guided", tok, key_order="any")
    warm_up(engine)  # compiles something small, then collects and freezes the start-up heap
    started, passes = [0.0], []

    def probe(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        elif info["generation"] == 2:
            passes.append(time.perf_counter() - started[0])

    gc.callbacks.append(probe)
    slow, heap, all_passes, failed = [], [], [], 0
    for i, path in enumerate(files):
        passes.clear()
        try:
            run_file(engine, tok, path)
        except Exception:  # noqa: BLE001 - a mask over its bound: MaskBench counts a crash, and so do we
            failed += 1
        all_passes += passes
        slow += [{"schema": path.name, "ms": round(t * 1e3, 1), "heap": len(gc.get_objects())} for t in passes if t > 0.01]
        if (i + 1) % 25 == 0 or i + 1 == len(files):
            heap.append(len(gc.get_objects()))
    gc.callbacks.remove(probe)
    all_passes.sort()
    print(json.dumps({
        "schemas": len(files), "failed": failed, "unfrozen_heap_every_25": heap, "full_passes": len(all_passes),
        "full_pass_ms_p50_max": [round(all_passes[len(all_passes) // 2] * 1e3, 1), round(all_passes[-1] * 1e3, 1)]
        if all_passes else None, "passes_over_10ms": slow,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
