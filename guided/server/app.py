"""The OpenAI-compatible HTTP server: ``create_app(llm)`` builds the FastAPI app.

Endpoints: ``POST /v1/chat/completions``, ``POST /v1/completions``, ``POST /v1/responses`` (and
``GET /v1/responses/{id}``), ``GET /v1/models``, ``GET /health``, ``GET /metrics`` (Prometheus text).
Errors are OpenAI error objects. Streaming is server-sent events ending with ``data: [DONE]`` (the
Responses API's: ``event:``/``data:`` pairs ending with ``response.completed``). A client that
disconnects aborts its request: a stream is cancelled, a plain request is polled for disconnection
while it runs.

Security and limits: bodies over ``Limits.body_bytes`` are a 413 before they are parsed; with an API
key every route but ``/health`` answers 401 to a request without ``Authorization: Bearer <key>``;
request counts (``max_tokens``, ``n``, ``tools``, stop strings) and constraint sizes are 400s naming
the limit. On shutdown (``GracefulServer``) the server refuses new requests, lets those in flight
finish for a grace period, ends the rest with a 503 or an error event, and logs which finished and
which were aborted.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException as StarletteHTTPException

from guided.errors import ConfigError
from guided.limits import Limits
from guided.llm import LLM
from guided.server.api_errors import ApiError, api_error
from guided.server.guards import ApiKeyCheck, BodyLimit, GracefulServer
from guided.server.protocol import ChatCompletionRequest, CompletionRequest
from guided.server.responses import (
    ChatChoiceState,
    chat_logprobs,
    check_failed,
    choice_extensions,
    completion_logprobs,
    finish_reason,
    usage,
)
from guided.server.responses_api import (
    ResponseEvents,
    ResponsesRequest,
    ResponseStore,
    ResponsesTurn,
    output_items,
    status_of,
    usage_of,
)
from guided.server.served_model import ServedModel

__all__ = ["create_app", "ServedModel"]

logger = logging.getLogger(__name__)

DISCONNECT_POLL_S = 0.25
ROUTES = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/models", "/health", "/metrics"})


def create_app(llm=None, *, model_name: str | None = None, api_key: str | None = None,
               max_queue_len: int | None = None, tool_format: str | None = None, limits: Limits | None = None,
               reasoning_parser: str | None = "auto", open_objects: bool = False):  # fmt: skip
    """The FastAPI app serving ``llm``.

    Parameters
    ----------
    llm : guided.LLM or ServedModel, optional
        The model; None loads the embedded default model. The server takes it over.
    model_name : str, optional
        The model id clients send (default: the model directory's name).
    api_key : str, optional
        When set, requests must send ``Authorization: Bearer <api_key>``.
    max_queue_len : int, optional
        Requests that may wait beyond the engine's batch; more are answered 503 with Retry-After
        (default: ``limits.queue_len``).
    tool_format : str, optional
        "hermes", "llama3-json" or "harmony" (default: detected from the chat template).
    limits : Limits, optional
        Request and constraint limits (default: ``Limits()`` with the LLM's compile timeout).
    reasoning_parser : str, optional
        "qwen3", "deepseek_r1", "auto" (detected from the chat template) or None (see ``ServedModel``).
    open_objects : bool
        JSON Schemas keep their literal meaning (undeclared members allowed where
        ``additionalProperties`` is unset); by default objects are generated closed (see ``ServedModel``).
    """
    if api_key is not None and not api_key:
        raise ConfigError("the API key must not be empty")
    if llm is None:

        llm = LLM()
    if not isinstance(llm, ServedModel):
        queue = max_queue_len if max_queue_len is not None else (limits or Limits()).queue_len
        llm = ServedModel(llm, model_name, queue, tool_format, limits, reasoning_parser, open_objects)
    served = llm

    @contextlib.asynccontextmanager
    async def lifespan(app):
        # model, vocabulary and token trie stay alive for the server's life: out of the garbage
        # collector's full passes, which would otherwise stall a step (and its masks) now and then
        gc.collect()
        gc.freeze()
        yield
        served.shutdown()
        gc.unfreeze()  # a process that goes on after its server (an embedding, a test) gets its heap back

    app = FastAPI(title="guided", version="0.1.0", description="OpenAI-compatible structured generation.",
                  lifespan=lifespan)  # fmt: skip
    app.state.served = served
    store = app.state.responses = ResponseStore()  # for previous_response_id and GET /v1/responses/{id}

    @app.exception_handler(ApiError)
    async def _api_error(request, exc: ApiError):
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request, exc: RequestValidationError):
        return JSONResponse(_validation_body(exc), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request, exc: StarletteHTTPException):
        kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
        body = {"error": {"message": str(exc.detail), "type": kind, "param": None, "code": None}}
        return JSONResponse(body, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(RecursionError)
    async def _too_deep(request, exc: RecursionError):
        body = ApiError(400, "the request body nests too deeply to parse", code="limit_exceeded").body()
        return JSONResponse(body, status_code=400)

    app.add_middleware(_Unexpected)  # innermost: unexpected errors answered here, not re-raised
    app.add_middleware(BodyLimit, limit=served.limits.body_bytes)
    if api_key is not None:
        app.add_middleware(ApiKeyCheck, api_key=api_key)
    app.add_middleware(_StatusCounter, metrics=served.metrics)  # outermost: counts 401 and 413 too

    @app.get("/health")
    async def health():
        dead = served.llm.engine.dead()  # a tensor-parallel worker gone
        alive = served.async_engine._thread.is_alive() and dead is None
        status = "ok" if alive else dead or "engine stopped"
        return JSONResponse({"status": status}, status_code=200 if alive else 503)

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics():
        text = served.metrics.render(served.llm.engine.stats(), served.compile_service, served.in_flight)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    def model_card() -> dict:
        return {"id": served.name, "object": "model", "created": served.created, "owned_by": "guided",
                "max_model_len": served.max_model_len}  # fmt: skip

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str):  # client.models.retrieve; ids may hold "/" (org/name)
        served.check_model(model_id)
        return model_card()

    async def start_chat(body: ChatCompletionRequest) -> ChatRun:
        """A chat request checked, its constraint compiled and its generation started (admitted)."""
        served.check_model(body.model)
        served.check_limits(body)
        plan = served.tool_plan(body)
        constraint, param = served.constraint(body)
        if plan.active:  # the tool-call language (it includes free text under "auto")
            constraint, param = plan.constraint, "tools"
        constraint = served.chat_constraint(body, constraint)  # after the reasoning, for a reasoning model
        prompt = served.chat_prompt(body)
        served.prompt_ids(prompt)
        max_tokens = body.max_completion_tokens or body.max_tokens or served.default_max_tokens(len(prompt))
        logprobs = (body.top_logprobs or 0) if body.logprobs else None
        params = served.reasoning_params(body, served.sampling_params(body, max_tokens, logprobs))
        slot = served.admit()
        try:
            grammar = await served.compile(constraint, param)
            served.check_budget(grammar, params, len(prompt))
        except BaseException:
            slot.release()
            raise
        rid = f"chatcmpl-{secrets.token_hex(12)}"
        reasoning = served.reasoning if served.thinks(body) else None
        states = [ChatChoiceState(i, plan.format if plan.active else None, reasoning) for i in range(body.n)]
        return ChatRun(rid, states, _guarded(served, slot, served.generate(prompt, params, grammar, rid), rid), slot)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request):
        run = await start_chat(body)
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            chunks = _chat_stream(served, run.gen, run.rid, run.states, body.top_logprobs or 0, include_usage)
            return StreamingResponse(
                _sse(chunks),
                media_type="text/event-stream",
                background=BackgroundTask(_release, [run.slot]),
            )
        final = await _until_done(run.gen, request, served)
        return _chat_response(served, final, run.rid, run.states, body)

    @app.post("/v1/responses")
    async def responses(body: ResponsesRequest, request: Request):
        turn = ResponsesTurn(body, store)
        chat = turn.chat_request(body.stream)
        run = await start_chat(chat)
        if body.stream:
            chunks = _chat_stream(served, run.gen, run.rid, run.states, chat.top_logprobs or 0, True)
            return StreamingResponse(
                _response_events(served, turn, chunks, store),
                media_type="text/event-stream",
                background=BackgroundTask(_release, [run.slot]),
            )
        final = await _until_done(run.gen, request, served)
        choice = _chat_response(served, final, run.rid, run.states, chat)
        message, reason = choice["choices"][0]["message"], choice["choices"][0]["finish_reason"]
        logprobs = choice["choices"][0]["logprobs"]
        status = status_of(reason)
        output = output_items(message, status, logprobs["content"] if logprobs else None)
        response = turn.response(status, output, usage_of(choice["usage"]), served.name)
        if body.store is not False:
            store.put(response, turn.stored_messages(message))
        return response

    @app.get("/v1/responses/{response_id}")
    async def stored_response(response_id: str):  # client.responses.retrieve
        return store.get(response_id)[0]

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        served.check_model(body.model)
        served.check_limits(body)
        constraint, param = served.constraint(body)
        prompts = [served.prompt_ids(p) for p in served.completion_prompts(body)]
        max_tokens = body.max_tokens or served.default_max_tokens(max(len(p) for p in prompts))
        params = served.sampling_params(body, max_tokens, body.logprobs)
        slots = served.admit(len(prompts)).split()
        try:
            grammar = await served.compile(constraint, param)
            served.check_budget(grammar, params, max(len(p) for p in prompts))
        except BaseException:
            for slot in slots:
                slot.release()
            raise
        rid = f"cmpl-{secrets.token_hex(12)}"
        gens = [_guarded(served, slot, served.generate(p, params, grammar, f"{rid}-{i}"), f"{rid}-{i}")
                for i, (p, slot) in enumerate(zip(prompts, slots, strict=True))]  # fmt: skip
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            chunks = _completion_stream(served, gens, rid, body, include_usage)
            return StreamingResponse(
                _sse(chunks),
                media_type="text/event-stream",
                background=BackgroundTask(_release, slots),
            )
        finals = await asyncio.gather(*(_until_done(g, request, served) for g in gens))
        return _completion_response(served, finals, rid, body)

    return app


class _Unexpected:
    """An error no handler answers becomes an OpenAI error object (500 unless it is bad input), logged
    with an error id that the message repeats; it is not re-raised to the server, so the client's
    keep-alive connection stays usable. Errors after a response began travel in its stream instead."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def tracking_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            if started:
                raise
            error_id = secrets.token_hex(6)
            logger.exception("%s %s failed (error id %s)", scope.get("method"), scope.get("path"), error_id)
            err = api_error(exc)
            body = err.body()
            body["error"]["message"] += f" (error id {error_id})"
            await JSONResponse(body, status_code=err.status)(scope, receive, send)


class _StatusCounter:
    """Counts responses by path and status (plain ASGI: it leaves disconnect detection intact)."""

    def __init__(self, app, metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def counting_send(message):
            if message["type"] == "http.response.start":
                path = scope["path"] if scope["path"] in ROUTES else "other"  # bounded label values
                self.metrics.request(path, message["status"])
            await send(message)

        await self.app(scope, receive, counting_send)


async def _release(slots) -> None:
    for slot in slots:
        slot.release()


# ---------------------------------------------------------------------- generation plumbing
async def _guarded(served: ServedModel, slot, gen: AsyncIterator, request_id: str) -> AsyncIterator:
    """The engine's outputs; releases the admission slot and records metrics when done."""
    final = None
    try:
        async for out in gen:
            final = out
            yield out
    finally:
        slot.release()
        served.request_done(request_id, final is not None and final.finished and final.error is None)
        if final is not None and final.finished:
            served.metrics.finished(final, sum(len(c.token_ids) for c in final.outputs))


SHUTDOWN = ApiError(
    503, "the server shut down before this request finished", type_="server_error", code="shutdown"
)


async def _until_done(gen: AsyncIterator, request, served: ServedModel):
    """The final output; the generation is cancelled (and aborted) if the client disconnects, and
    answers 503 if the server's graceful shutdown period ended it first."""

    async def drain():
        final = None
        async for out in gen:
            final = out
        return final

    task = asyncio.ensure_future(drain())
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                final = task.result()
                if final is not None and final.error and served.draining is not None:
                    raise SHUTDOWN  # ended by the shutdown, not by its own fault
                return final
            if await request.is_disconnected():
                raise ApiError(499, "the client disconnected", code="client_disconnected")
    finally:
        if not task.done():
            task.cancel()  # thrown into the engine stream, which aborts the request
            await asyncio.gather(task, return_exceptions=True)


async def _merge(gens: list[AsyncIterator]) -> AsyncIterator[tuple[int, object]]:
    """Outputs of several generations as they come, tagged with the generation's index."""
    if len(gens) == 1:
        async for out in gens[0]:
            yield 0, out
        return
    queue: asyncio.Queue = asyncio.Queue()
    done = object()

    async def pump(i, gen):
        try:
            async for out in gen:
                await queue.put((i, out))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            await queue.put((i, e))
        finally:
            await queue.put((i, done))

    tasks = [asyncio.ensure_future(pump(i, g)) for i, g in enumerate(gens)]
    try:
        remaining = len(gens)
        while remaining:
            i, item = await queue.get()
            if item is done:
                remaining -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield i, item
    finally:
        for t in tasks:
            t.cancel()  # each pump's engine stream aborts its request
        await asyncio.gather(*tasks, return_exceptions=True)


async def _sse(chunks: AsyncIterator[dict]) -> AsyncIterator[str]:
    try:
        async for chunk in chunks:
            yield f"data: {json.dumps(chunk, ensure_ascii=False, allow_nan=False)}\n\n"  # strict JSON, as the bodies
    except asyncio.CancelledError:
        raise
    except Exception as e:  # after the response started, errors travel in the stream
        yield f"data: {json.dumps(api_error(e).body())}\n\n"
    yield "data: [DONE]\n\n"


# ---------------------------------------------------------------------- chat
@dataclass
class ChatRun:
    """A started chat request: its id, per-choice states, engine outputs and admission slot."""

    rid: str
    states: list[ChatChoiceState]
    gen: AsyncIterator
    slot: object


def _chat_response(
    served, final, rid: str, states: list[ChatChoiceState], body: ChatCompletionRequest
) -> dict:
    check_failed(final)
    choices = []
    for c, state in zip(final.outputs, states, strict=True):
        message, calls = state.message(c)
        lp = chat_logprobs(served, c.token_ids, c.logprobs, body.top_logprobs or 0) if body.logprobs else None
        choices.append(
            {"index": c.index, "message": message, "logprobs": lp, "finish_reason": finish_reason(c, calls),
             **choice_extensions(c)}
        )
    return {"id": rid, "object": "chat.completion", "created": int(time.time()), "model": served.name,
            "choices": choices, "usage": usage([final]), "system_fingerprint": None}  # fmt: skip


async def _chat_stream(served, gen, rid: str, states: list[ChatChoiceState], top: int, include_usage: bool):
    created, final = int(time.time()), None
    base = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": served.name,
            "system_fingerprint": None}  # fmt: skip
    async for _, out in _merge([gen]):
        final = out
        check_failed(out)
        choices = []
        for c, state in zip(out.outputs, states, strict=True):
            delta = state.delta(c)
            new = len(c.token_ids) - state.num_logprobs
            lp = None
            if c.logprobs is not None and new > 0:
                lp = chat_logprobs(served, c.token_ids[-new:], c.logprobs[-new:], top)
                state.num_logprobs = len(c.token_ids)
            reason = finish_reason(c, state.calls()) if c.finished else None
            if delta or lp or reason:
                choices.append({"index": c.index, "delta": delta, "logprobs": lp, "finish_reason": reason,
                                **(choice_extensions(c) if reason else {})})  # fmt: skip
        if choices:
            yield {**base, "choices": choices, **({"usage": None} if include_usage else {})}
    if include_usage and final is not None:
        yield {**base, "choices": [], "usage": usage([final])}


# ---------------------------------------------------------------------- responses
async def _response_events(served, turn: ResponsesTurn, chunks: AsyncIterator[dict], store: ResponseStore):
    """The Responses stream: ``event:``/``data:`` pairs, from the chat chunks of its one choice; an error
    after the stream began is an ``error`` event (the client raises it). Stored once complete."""
    events = ResponseEvents(turn, served.name)

    def line(event: dict) -> str:
        return f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False, allow_nan=False)}\n\n"

    try:
        for event in events.start():
            yield line(event)
        async for chunk in chunks:
            for event in events.chunk(chunk):
                yield line(event)
        for event in events.finish():
            yield line(event)
        if turn.req.store is not False:
            store.put(events.final, turn.stored_messages(events.message))
    except asyncio.CancelledError:
        raise
    except Exception as e:
        error = api_error(e).body()["error"]
        yield line({"type": "error", "sequence_number": events.seq, "code": error["code"],
                    "message": error["message"], "param": error["param"], "error": error})  # fmt: skip


# ---------------------------------------------------------------------- completions
def _completion_response(served, finals, rid: str, body: CompletionRequest) -> dict:
    choices = []
    for p, final in enumerate(finals):
        check_failed(final)
        for c in final.outputs:
            lp = (
                completion_logprobs(served, c.token_ids, c.logprobs, body.logprobs or 0)
                if body.logprobs is not None
                else None
            )
            choices.append({"index": p * body.n + c.index, "text": c.text, "logprobs": lp,
                            "finish_reason": finish_reason(c), **choice_extensions(c)})  # fmt: skip
    return {"id": rid, "object": "text_completion", "created": int(time.time()), "model": served.name,
            "choices": choices, "usage": usage(finals), "system_fingerprint": None}  # fmt: skip


async def _completion_stream(served, gens, rid: str, body: CompletionRequest, include_usage: bool):
    base = {"id": rid, "object": "text_completion", "created": int(time.time()), "model": served.name,
            "system_fingerprint": None}  # fmt: skip
    finals: dict[int, object] = {}
    sent: dict[int, int] = {}
    async for p, out in _merge(gens):
        check_failed(out)
        finals[p] = out
        choices = []
        for c in out.outputs:
            index = p * body.n + c.index
            new = len(c.token_ids) - sent.get(index, 0)
            lp = None
            if c.logprobs is not None and new > 0:
                lp = completion_logprobs(served, c.token_ids[-new:], c.logprobs[-new:], body.logprobs or 0)
                sent[index] = len(c.token_ids)
            reason = finish_reason(c) if c.finished else None
            if c.delta_text or lp or reason:
                choices.append({"index": index, "text": c.delta_text, "logprobs": lp, "finish_reason": reason,
                                **(choice_extensions(c) if reason else {})})  # fmt: skip
        if choices:
            yield {**base, "choices": choices}
    if include_usage and finals:
        yield {**base, "choices": [], "usage": usage(list(finals.values()))}


def _validation_body(exc) -> dict:
    errors = exc.errors()
    first = errors[0] if errors else {}
    loc = [str(x) for x in first.get("loc", ()) if x != "body"]
    param = ".".join(loc) or None
    message = first.get("msg", "invalid request")
    if first.get("type") == "extra_forbidden":
        message = f"unknown field {param!r}: this server does not support it"
    elif param:
        message = f"{param}: {message}"
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})"
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": param,
            "code": "invalid_value",
        }
    }


def start_in_thread(app, host: str = "127.0.0.1", port: int = 0, timeout: float = 60.0,
                    graceful_s: float | None = None):  # fmt: skip
    """Run ``app`` under uvicorn in a daemon thread; returns ``(server, thread, port)`` once it listens.

    ``port=0`` picks a free port. Stop it with ``server.should_exit = True; thread.join()``; requests in
    flight get ``graceful_s`` seconds to finish (None: as long as they take).
    """
    import threading

    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    server = GracefulServer(config, app.state.served, graceful_s)
    thread = threading.Thread(target=server.run, name="guided-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the server did not start on {host}:{port} within {timeout:g} s")
        time.sleep(0.02)
    bound = server.servers[0].sockets[0].getsockname()[1]
    return server, thread, bound
