"""Fault scenarios through a real loopback server: clients that leave mid-stream, and a graceful
shutdown with requests in flight. Each returns a ``FaultResult`` (see ``fault_lib``)."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
from fault_lib import FaultResult
from load_lib import drained, serve


async def _stream_then_leave(client, base: str, i: int) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": f"leave {i}"}], "max_tokens": 400,
            "ignore_eos": True, "stream": True}  # fmt: skip
    async with client.stream("POST", f"{base}/v1/chat/completions", json=body) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                return  # the client disconnects mid-stream


async def _answer(client, base: str, i: int) -> tuple[int, str]:
    body = {"model": "tiny", "messages": [{"role": "user", "content": f"stay {i}"}], "max_tokens": 12,
            "seed": i, "temperature": 0.7, **({"guided_choice": ["yes", "no"]} if i % 2 else {})}  # fmt: skip
    r = await client.post(f"{base}/v1/chat/completions", json=body)
    return r.status_code, r.json()["choices"][0]["message"]["content"] if r.status_code == 200 else r.text


def clients_leave_mid_stream(leavers: int = 6, stayers: int = 6) -> FaultResult:
    """Streaming clients disconnect after their first chunk while others wait for whole answers."""
    result = FaultResult(f"{leavers} clients disconnect mid-stream", healthy=stayers, faulted=leavers)

    async def main(base):
        async with httpx.AsyncClient(timeout=120) as client:
            jobs = [_stream_then_leave(client, base, i) for i in range(leavers)]
            jobs += [_answer(client, base, i) for i in range(stayers)]
            return (await asyncio.gather(*jobs))[leavers:]

    with serve() as (app, base):
        answers = asyncio.run(main(base))
        result.healthy_ok = sum(
            s == 200 and (i % 2 == 0 or t in ("yes", "no")) for i, (s, t) in enumerate(answers)
        )
        result.blocks_full = drained(app)  # the leavers were aborted and freed their blocks
        finished = app.state.served.metrics.e2e.count
        result.faulted_ended = leavers if finished == stayers else 0  # only the stayers ran to their end
        result.notes.append(f"requests run to their end: {finished}")
    return result


def graceful_shutdown(grace_s: float = 2.0) -> FaultResult:
    """Shutdown with a short and a long request in flight: the short one finishes within the grace
    period, the long one is ended with a 503, and the shutdown report names each."""
    result, statuses = FaultResult("graceful shutdown with requests in flight", healthy=1, faulted=1), {}

    def call(name, max_tokens):
        body = {"model": "tiny", "messages": [{"role": "user", "content": name}], "max_tokens": max_tokens,
                "ignore_eos": True}  # fmt: skip
        try:
            r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=60)
            statuses[name] = (r.status_code, r.json().get("id") if r.status_code == 200 else r.text)
        except httpx.HTTPError as e:
            statuses[name] = (None, type(e).__name__)

    with serve(graceful_s=grace_s, max_model_len=2048) as (app, base):
        served = app.state.served
        threads = [threading.Thread(target=call, args=a) for a in (("short", 40), ("long", 1900))]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while len(served.active) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        in_flight = set(served.active)
    for t in threads:  # the server has shut down (leaving the with block)
        t.join(60)
    report, (short_status, short_id), (long_status, long_text) = served.shutdown_report, *statuses.values()
    result.healthy_ok = int(short_status == 200 and set(report["finished"]) <= {short_id})
    result.faulted_ended = int(long_status == 503 and "shut down" in long_text and len(in_flight) == 2
                               and report["aborted"] == sorted(in_flight - {short_id}))  # fmt: skip
    engine = served.llm.engine
    result.blocks_full = (
        engine.block_manager.num_free_blocks == engine.block_manager.num_blocks and not engine.requests
    )
    result.notes.append(f"statuses {statuses}, report {report}")
    return result


SERVER_SCENARIOS = [clients_leave_mid_stream, graceful_shutdown]
