"""Load on a real server (loopback only): many concurrent clients, guided and free requests mixed.

``run_load`` sends ``total`` requests from ``concurrency`` clients and checks every answer: none
lost (each request got exactly one response), none duplicated (response ids unique), every guided
output valid for its constraint, no error status. ``serve`` starts the tiny default model's server
in a thread of this process, so memory before and after is measured on the serving process itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import time
from dataclasses import dataclass, field

import httpx
import jsonschema
from fuzz_lib import rss_bytes

SCHEMA = {"type": "object", "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 999},
          "ok": {"type": "boolean"}, "tag": {"enum": ["a", "b", "c"]}}, "required": ["id", "ok", "tag"],
          "additionalProperties": False}  # fmt: skip
CHOICES = ["red", "green", "blue"]
REGEX = "[a-f]{2}-[0-9]{3}"


@contextlib.contextmanager
def serve(graceful_s: float | None = None, max_model_len: int = 256, **create_kw):
    """A server on 127.0.0.1 (a free port) over a fresh tiny model: yields ``(app, base_url)``."""
    from guided.llm import LLM
    from guided.server.app import create_app, start_in_thread

    create_kw.setdefault("model_name", "tiny")
    app = create_app(LLM(device="cpu", max_model_len=max_model_len), **create_kw)
    srv, thread, port = start_in_thread(app, "127.0.0.1", 0, timeout=60, graceful_s=graceful_s)
    try:
        yield app, f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(60)


def request_for(i: int, rng: random.Random) -> tuple[str, dict, object]:
    """The i-th request of a mix: (kind, body, checker of the output text or None)."""
    kind = rng.choice(["free", "free", "choice", "json", "regex"])
    body = {"model": "tiny", "messages": [{"role": "user", "content": f"request {i}"}], "temperature": 0.8,
            "seed": i, "max_tokens": 8}  # fmt: skip
    if kind == "choice":
        body["guided_choice"] = CHOICES
        return kind, body, lambda t: t in CHOICES
    if kind == "json":
        body.update(max_tokens=160, response_format={"type": "json_schema", "json_schema": {
            "name": "rec", "schema": SCHEMA, "strict": True}})  # fmt: skip
        return kind, body, _json_valid
    if kind == "regex":
        body.update(guided_regex=REGEX, max_tokens=12)
        return kind, body, lambda t: re.fullmatch(REGEX, t) is not None
    return kind, body, None


def _json_valid(text: str) -> bool:
    try:
        jsonschema.validate(json.loads(text), SCHEMA)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


@dataclass
class LoadResult:
    total: int
    concurrency: int
    ok: int = 0
    guided: int = 0
    guided_valid: int = 0
    statuses: dict = field(default_factory=dict)
    lost: int = 0
    duplicated: int = 0
    latencies: list = field(default_factory=list)
    wall_s: float = 0.0
    rss_before: int = 0
    rss_after: int = 0
    invalid: list = field(default_factory=list)

    @property
    def errors(self) -> int:
        return self.total - self.ok

    def p(self, q: float) -> float:
        s = sorted(self.latencies)
        return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")

    @property
    def rss_growth(self) -> float:
        return (self.rss_after - self.rss_before) / self.rss_before


async def _client(base: str, jobs: asyncio.Queue, result: LoadResult, ids: list, client: httpx.AsyncClient):
    while True:
        try:
            i, kind, body, check = jobs.get_nowait()
        except asyncio.QueueEmpty:
            return
        t0 = time.perf_counter()
        try:
            r = await client.post(f"{base}/v1/chat/completions", json=body)
        except httpx.HTTPError:
            result.lost += 1
            continue
        result.latencies.append(time.perf_counter() - t0)
        result.statuses[r.status_code] = result.statuses.get(r.status_code, 0) + 1
        if r.status_code != 200:
            continue
        data = r.json()
        result.ok += 1
        ids.append(data["id"])
        if check is not None:
            result.guided += 1
            text = data["choices"][0]["message"]["content"]
            if data["choices"][0]["finish_reason"] == "stop" and check(text):
                result.guided_valid += 1
            else:
                result.invalid.append((kind, data["choices"][0]["finish_reason"], text))


async def _load(base: str, total: int, concurrency: int, seed: int, result: LoadResult) -> None:
    rng, jobs, ids = random.Random(seed), asyncio.Queue(), []
    for i in range(total):
        jobs.put_nowait((i, *request_for(i, rng)))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:
        await asyncio.gather(*(_client(base, jobs, result, ids, client) for _ in range(concurrency)))
    result.duplicated = len(ids) - len(set(ids))
    result.lost += total - sum(result.statuses.values()) - result.lost


def run_load(base: str, total: int, concurrency: int, seed: int = 0, warmup: int = 20) -> LoadResult:
    """Warm up, measure memory, run the load, measure memory again."""
    asyncio.run(_load(base, warmup, min(warmup, concurrency), seed + 1, LoadResult(warmup, concurrency)))
    result = LoadResult(total, concurrency, rss_before=rss_bytes())
    t0 = time.perf_counter()
    asyncio.run(_load(base, total, concurrency, seed, result))
    result.wall_s = time.perf_counter() - t0
    result.rss_after = rss_bytes()
    return result


def drained(app, timeout: float = 20.0) -> bool:
    """Whether the server ends with no request in flight and its KV block pool full."""
    served = app.state.served
    engine = served.llm.engine
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        bm = engine.block_manager
        if not engine.requests and served.in_flight == 0 and bm.num_free_blocks == bm.num_blocks:
            return True
        time.sleep(0.05)
    return False
