"""Serving benchmark on loopback: N concurrent streaming clients vs the offline engine, free and guided.

Reports TTFT/TPOT p50/p99 and output tokens per second for the server, next to the offline engine's
throughput on the same model, prompts and lengths (target: >= 90% of offline at 64 clients).

Usage: python benchmarks/serve.py [--model DIR] [--device cpu] [--concurrency 64] [--requests 256]
       [--max-tokens 64] [--out benchmarks/results/serve-cpu.json]
(the same as ``guided bench serve ...``; the logic lives in ``guided.bench.serve``).
"""

from __future__ import annotations

import sys

from guided.bench.serve import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
