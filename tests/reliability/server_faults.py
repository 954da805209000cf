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


# Values outside what the engine can honour, each sent while an innocent request is generating.
BAD_VALUES = [
    {"top_k": 2**40}, {"top_k": 6603219693803}, {"top_k": -2}, {"seed": 2**70}, {"seed": -(2**63)},
    {"n": 10**6}, {"n": 0}, {"max_tokens": 10**12}, {"max_tokens": 0}, {"min_tokens": 10**12},
    {"stop_token_ids": [10**9]}, {"stop_token_ids": [-1]}, {"logprobs": True, "top_logprobs": 10**6},
    {"temperature": 1e308}, {"temperature": -1}, {"temperature": 1e-300}, {"top_p": 0}, {"top_p": 1e-300},
    {"min_p": 2}, {"presence_penalty": 1e9}, {"frequency_penalty": -1e9}, {"repetition_penalty": 1e308},
    {"repetition_penalty": 1e-300}, {"repetition_penalty": 0}, {"max_completion_tokens": 2**63},
]
COMPLETION_BAD_VALUES = [{"logprobs": 10**6}, {"prompt": [10**9]}, {"prompt": [-5]}, {"best_of": 10**6}]


def _innocent_body() -> dict:
    return {"model": "tiny", "messages": [{"role": "user", "content": "innocent"}], "max_tokens": 120,
            "temperature": 0.0, "ignore_eos": True}  # fmt: skip


def _answered_well(status: int, body: dict) -> bool:
    """A 4xx with an OpenAI error object naming a message, or a 200 whose choices all ended normally."""
    if 400 <= status < 500:
        return bool(body.get("error", {}).get("message"))
    if status == 200:
        return all(c["finish_reason"] in ("stop", "length") for c in body["choices"])
    return False


def bad_sampling_values_beside_live_requests() -> FaultResult:
    """Every out-of-range value above is answered 4xx (or well) while an innocent request generates;
    the innocent request's text is what it is alone."""
    bad = [("/v1/chat/completions", v) for v in BAD_VALUES] + [("/v1/completions", v) for v in COMPLETION_BAD_VALUES]
    result = FaultResult("bad sampling values beside live requests", healthy=1, faulted=len(bad))

    async def main(base):
        async with httpx.AsyncClient(timeout=120) as client:
            alone = (await client.post(f"{base}/v1/chat/completions", json=_innocent_body())).json()
            innocent = asyncio.ensure_future(client.post(f"{base}/v1/chat/completions", json=_innocent_body()))
            await asyncio.sleep(0.2)  # it is generating now
            answers = []
            for path, extra in bad:
                body = {"model": "tiny", "max_tokens": 4, **extra}
                body.setdefault("prompt" if path == "/v1/completions" else "messages",
                                "x" if path == "/v1/completions" else [{"role": "user", "content": "x"}])
                r = await client.post(base + path, json=body)
                answers.append((extra, r.status_code, r.json()))
            return alone, await innocent, answers, innocent

    with serve() as (app, base):
        alone, innocent, answers, _ = asyncio.run(main(base))
        text = lambda r: r["choices"][0]["message"]["content"]  # noqa: E731
        result.healthy_ok = int(innocent.status_code == 200 and text(innocent.json()) == text(alone))
        result.faulted_ended = sum(_answered_well(status, body) for _, status, body in answers)
        result.notes += [f"{extra} -> {status}" for extra, status, body in answers if not _answered_well(status, body)]
        result.notes.append(f"statuses: {sorted({status for _, status, _ in answers})}")
        result.blocks_full = drained(app)
    return result


SERVER_SCENARIOS = [clients_leave_mid_stream, graceful_shutdown, bad_sampling_values_beside_live_requests]
