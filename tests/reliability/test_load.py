"""Load on a real loopback server: mixed guided and free chat requests from many concurrent clients.

CI: 400 requests from 64 clients; ``GUIDED_LONG_TESTS=1``: 2,000 requests from 64 clients."""

from __future__ import annotations

from fuzz_lib import scaled
from load_lib import drained, run_load, serve

MEMORY_GROWTH = 0.05  # RSS after the run within 5% of before (after a warm-up)


def test_load_mixed_requests():
    with serve(max_queue_len=256) as (app, base):
        result = run_load(base, total=scaled(400, 2000), concurrency=64)
        assert result.statuses == {200: result.total} and result.lost == 0 and result.duplicated == 0, result
        assert result.guided > 0 and result.guided_valid == result.guided, result.invalid[:5]
        assert result.rss_growth < MEMORY_GROWTH, (
            f"RSS {result.rss_before >> 20} -> {result.rss_after >> 20} MiB"
        )
        assert drained(app)
        metrics = app.state.served.metrics
        assert metrics.e2e.count >= result.total  # every request ran to its end in the engine
