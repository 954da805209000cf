"""Faults among healthy requests: aborts in prefill and in fast-forward, KV exhaustion, a compile
timeout, identical concurrent schemas, clients that disconnect mid-stream, and shutdown. Every other
request completes correctly and the KV block pool returns to full."""

from __future__ import annotations

import asyncio

import pytest
from fault_lib import SCENARIOS, greedy, make_llm
from phase_faults import PHASES, one_sequence_fails
from server_faults import SERVER_SCENARIOS


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.__name__ for s in SCENARIOS])
def test_engine_fault(scenario):
    result = scenario()
    assert result.ok, result


def test_shutdown_ends_requests_in_flight_with_an_error():
    from guided.engine.async_engine import AsyncEngine

    llm = make_llm()
    llm.engine.stream = True
    front = AsyncEngine(llm.engine)

    async def consume(prompt, max_tokens):
        outs = [out async for out in front.generate(prompt, greedy(max_tokens))]
        return outs[-1]

    async def main():
        short = asyncio.ensure_future(consume("x = 1", 2))
        long = asyncio.ensure_future(consume("import os", 400))
        await short
        ended = await asyncio.to_thread(front.shutdown, 0.2)
        return short.result(), await long, ended

    short, long, ended = asyncio.run(main())
    assert short.finished and short.error is None and short.finish_reason == "length"
    assert long.finished and long.finish_reason == "error" and "shut down" in long.error
    assert ended == [long.request_id]
    bm = llm.engine.block_manager
    assert bm.num_free_blocks == bm.num_blocks and not llm.engine.requests
    with pytest.raises(RuntimeError, match="shut down"):
        asyncio.run(consume("x", 1))


# ---------------------------------------------------------------------- through the server
@pytest.mark.parametrize("scenario", SERVER_SCENARIOS, ids=[s.__name__ for s in SERVER_SCENARIOS])
def test_server_fault(scenario):
    result = scenario()
    assert result.ok, result


# ---------------------------------------------------------------------- one sequence fails in one phase
@pytest.mark.parametrize("phase", list(PHASES))
def test_one_failing_sequence_ends_alone(phase):
    result = one_sequence_fails(phase)
    assert result.ok, result
