"""ServedModel: one model behind the server — requests turned into prompts, params and constraints.

It takes an ``LLM`` over: the engine switches to streaming and is driven by an ``AsyncEngine``
thread from then on (the event loop never runs model code), and constraints compile in the LLM's
``CompileService``. A request's constraint is compiled *before* its response starts, so a bad schema
or grammar is a 400 and not a broken stream; waiting for it never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import replace
from pathlib import Path

from guided.constraints import (
    JSON_OBJECT,
    Choice,
    Grammar,
    JsonSchema,
    Reasoning,
    Regex,
    StructuralTag,
    to_constraint,
)
from guided.engine.async_engine import AsyncEngine
from guided.engine.sampling_params import SamplingParams
from guided.errors import ConfigError
from guided.limits import Limits
from guided.server.api_errors import ApiError, api_error
from guided.server.metrics import ServerMetrics
from guided.server.protocol import ChatCompletionRequest, ChatMessage, CompletionRequest
from guided.structural import is_harmony, reasoning_markers, thinking_markers
from guided.tool_calls import FORMATS, ToolCalls, ToolFormat, chat_text, detect_format

__all__ = ["ServedModel", "ToolPlan"]

logger = logging.getLogger(__name__)

COMPILE_POLL_S = 0.002  # how often a request waiting for its compile looks again

class ToolPlan:
    """What a chat request's ``tools``/``tool_choice`` ask for: the constraint and how to parse."""

    def __init__(self, constraint: ToolCalls | None, fmt: ToolFormat):
        self.constraint = constraint
        self.format = fmt

    @property
    def active(self) -> bool:
        return self.constraint is not None


class Slot:
    """Admission of one API request; ``release`` is idempotent."""

    def __init__(self, model: ServedModel, count: int):
        self.model, self.count = model, count

    def release(self) -> None:
        self.model.in_flight -= self.count
        self.count = 0

    def split(self) -> list[Slot]:
        """One slot per admitted request, each released on its own."""
        parts = [Slot(self.model, 1) for _ in range(self.count)]
        self.count = 0
        return parts


class ServedModel:
    """The served model: prompts, sampling parameters, constraints, admission and generation.

    Parameters
    ----------
    llm : guided.LLM
        Taken over by the server (its engine is driven by an AsyncEngine thread from now on).
    name : str, optional
        The model id clients send; defaults to the model directory's name.
    max_queue_len : int
        Requests that may wait beyond the engine's ``max_num_seqs``; more get 503 with Retry-After.
    tool_format : str, optional
        "hermes", "llama3-json" or "harmony"; detected from the chat template when None.
    limits : Limits, optional
        Request and constraint limits (default: the compile service's, i.e. ``Limits()`` with the
        LLM's compile timeout).
    reasoning_parser : str, optional
        "qwen3" or "deepseek_r1" (``<think>...</think>``), "auto" (those markers when the chat template
        has them) or None: with one, chat constraints apply after the end of reasoning and replies
        carry ``reasoning_content``.
    open_objects : bool
        JSON Schemas (``response_format``, tools, the ``guided_json``/``structured_outputs`` fields)
        keep their literal meaning: objects that leave ``additionalProperties`` unset accept
        undeclared members. By default they are generated closed (``JsonSchema``'s ``strict``), as
        vLLM does; a request's ``json_open_objects`` overrides this.
    """

    def __init__(self, llm, name: str | None = None, max_queue_len: int = 256, tool_format: str | None = None,
                 limits: Limits | None = None, reasoning_parser: str | None = "auto", open_objects: bool = False):  # fmt: skip
        if max_queue_len < 0:
            raise ConfigError(f"max_queue_len must be >= 0, got {max_queue_len}")
        self.llm = llm
        config = llm.engine.config
        self.name = name or config.hub_id or Path(config.model).name
        self.compile_service = llm.compile_service  # built now, not inside the first request
        self.limits = limits or self.compile_service.limits
        self.compile_service.set_limits(self.limits)
        self.vocab = self.compile_service.grammars.vocabulary
        template = getattr(llm.tokenizer, "chat_template", None)
        self.tool_format = FORMATS[tool_format or detect_format(template)]
        self.reasoning = reasoning_markers(reasoning_parser, template)  # (start, end) or None
        self._reasoning_end_ids = (llm.tokenizer.encode(self.reasoning[1], add_special_tokens=False)
                                   if self.reasoning else None)  # fmt: skip
        self.open_objects = bool(open_objects)
        self.max_in_flight = llm.engine.config.max_num_seqs + max_queue_len
        self.max_model_len = llm.engine.max_seq_len
        self.in_flight = 0
        self.metrics = ServerMetrics()
        llm.engine.stream = True
        self.async_engine = AsyncEngine(llm.engine)
        self.created = int(time.time())
        self.active: set[str] = set()  # engine request ids in flight
        self.draining: set[str] | None = None  # those in flight when shutdown began
        self.outcomes: dict[str, str] = {}  # of the draining ones: "finished" or "aborted"
        self.shutdown_report: dict[str, list[str]] | None = None

    def begin_shutdown(self) -> None:
        """Refuse new requests (503) and remember which are in flight, to report on them."""
        if self.draining is None:
            self.draining = set(self.active)

    def shutdown(self) -> dict[str, list[str]]:
        """Stop the engine; requests still running end with an error. Logs and returns which of the
        requests in flight at ``begin_shutdown`` finished and which were aborted."""
        self.begin_shutdown()
        ended = set(self.async_engine.shutdown())
        finished = sorted(r for r in self.draining if self.outcomes.get(r) == "finished" and r not in ended)
        aborted = sorted(r for r in self.draining | ended if r not in finished)
        self.shutdown_report = {"finished": finished, "aborted": aborted}
        logger.info("shutdown: %d in-flight request(s) finished %s, %d aborted %s", len(finished), finished,
                    len(aborted), aborted)  # fmt: skip
        return self.shutdown_report

    def request_done(self, request_id: str, finished: bool) -> None:
        """Called when a request's stream ends: ``finished`` unless it was aborted or failed."""
        self.active.discard(request_id)
        if self.draining is not None and request_id in self.draining:
            self.outcomes[request_id] = "finished" if finished else "aborted"

    # ------------------------------------------------------------------ admission
    def admit(self, count: int = 1) -> Slot:
        """Count ``count`` engine requests in, or refuse with 503 when the queue is full."""
        if self.draining is not None:
            raise ApiError(
                503, "the server is shutting down", type_="server_overloaded", code="shutting_down"
            )
        if self.in_flight + count > self.max_in_flight:
            raise ApiError(503, f"the server is at capacity ({self.in_flight} requests in flight); retry later",
                           type_="server_overloaded", code="queue_full", headers={"Retry-After": "1"})  # fmt: skip
        self.in_flight += count
        return Slot(self, count)

    def check_limits(self, req: ChatCompletionRequest | CompletionRequest) -> None:
        """Request-size limits: a 400 naming the field and the limit."""
        limits = self.limits
        counts = {"max_tokens": req.max_tokens, "max_completion_tokens": getattr(req, "max_completion_tokens", None),
                  "n": req.n, "tools": len(getattr(req, "tools", None) or []),
                  "stop": len(req.stop) if isinstance(req.stop, list) else 0}  # fmt: skip
        names = {"max_completion_tokens": "max_tokens", "stop": "stop_strings"}
        for param, value in counts.items():
            name = names.get(param, param)
            if value is not None and value > getattr(limits, name):
                raise ApiError(
                    400, str(limits.exceeded(name, value, param)), param=param, code="limit_exceeded"
                )

    def check_model(self, model: str | None) -> None:
        if model is not None and model != self.name:
            raise ApiError(404, f"the model {model!r} does not exist; this server serves {self.name!r}",
                           param="model", code="model_not_found")  # fmt: skip

    # ------------------------------------------------------------------ request -> engine inputs
    def sampling_params(self, req: ChatCompletionRequest | CompletionRequest, max_tokens: int | None,
                        logprobs: int | None) -> SamplingParams:  # fmt: skip
        fields = dict(
            temperature=req.temperature, top_p=req.top_p, top_k=req.top_k, min_p=req.min_p,
            presence_penalty=req.presence_penalty, frequency_penalty=req.frequency_penalty,
            repetition_penalty=req.repetition_penalty, seed=req.seed, stop=req.stop,
            stop_token_ids=req.stop_token_ids, ignore_eos=req.ignore_eos, min_tokens=req.min_tokens,
            include_stop_str_in_output=req.include_stop_str_in_output,
            skip_special_tokens=req.skip_special_tokens, budget_aware=req.budget_aware, speculative=req.speculative,
            logit_bias={int(t): b for t, b in req.logit_bias.items()} if req.logit_bias else None,
        )  # fmt: skip
        fields = {k: v for k, v in fields.items() if v is not None}
        engine = self.llm.engine
        try:
            params = SamplingParams(n=req.n, max_tokens=max_tokens or 16, logprobs=logprobs, **fields)
            params.check_for_engine(engine.vocab_size, engine.config.max_num_seqs)
        except ConfigError as e:  # a 400 naming the field and its range, before anything runs
            raise api_error(e) from None
        return params

    def default_max_tokens(self, num_prompt_tokens: int) -> int:
        return max(self.max_model_len - num_prompt_tokens, 1)

    def constraint(self, req: ChatCompletionRequest | CompletionRequest):
        """The structured-output constraint of a request (``response_format`` or an extension)."""
        given = {
            "response_format": req.response_format if req.response_format and req.response_format.type != "text"
            else None,
            "guided_json": req.guided_json,
            "guided_regex": req.guided_regex, "regex": req.regex,
            "guided_choice": req.guided_choice, "choice": req.choice,
            "guided_grammar": req.guided_grammar, "grammar": req.grammar,
            "structured_outputs": req.structured_outputs,
        }  # fmt: skip
        given = {k: v for k, v in given.items() if v is not None}
        if len(given) > 1:
            raise ApiError(
                400, f"give at most one output constraint; got {', '.join(given)}", param=list(given)[1]
            )
        if not given:
            return None, None
        ((param, value),) = given.items()
        try:
            return self._constraint(param, value, self.closes_objects(req)), param
        except Exception as e:
            raise api_error(e, param) from None

    def closes_objects(self, req: ChatCompletionRequest | CompletionRequest) -> bool:
        """Whether this request's JSON Schemas are generated with objects closed (``JsonSchema``'s
        ``strict``): the request's ``json_open_objects``, else the server's setting. The OpenAI
        ``strict`` flag closes a schema's objects either way; unset or false, it changes nothing
        (every output is exact, with or without it)."""
        open_ = req.json_open_objects if req.json_open_objects is not None else self.open_objects
        return not open_

    @staticmethod
    def _constraint(param: str, value, strict: bool):
        if param == "response_format":
            if value.type == "json_object":
                return JSON_OBJECT
            if value.type == "structural_tag":
                return StructuralTag.from_openai(value.model_dump(exclude_none=True), strict)
            spec = value.json_schema
            if spec.schema_ is None:
                raise ConfigError("response_format.json_schema.schema is required")
            return JsonSchema(spec.schema_, strict=strict or bool(spec.strict))
        if param == "guided_json":
            return to_constraint(json.loads(value) if isinstance(value, str) else value, strict=strict)
        if param == "structured_outputs":
            return _structured_outputs(value, strict)
        if param in ("guided_regex", "regex"):
            return Regex(value)
        if param in ("guided_choice", "choice"):
            return Choice(value)
        return Grammar(value)

    def tool_plan(self, req: ChatCompletionRequest) -> ToolPlan:
        """The tool-call constraint that ``tools``, ``tool_choice`` and ``parallel_tool_calls`` ask for."""
        choice = req.tool_choice if req.tool_choice is not None else ("auto" if req.tools else "none")
        if not req.tools or choice == "none":
            return ToolPlan(None, self.tool_format)
        functions = {t.function.name: t.function.model_dump(exclude_none=True) for t in req.tools}
        parallel = req.parallel_tool_calls is not False
        if isinstance(choice, str):
            mode, names = choice, list(functions)
        elif choice.type == "function":
            mode, names, parallel = "required", [choice.function.name], False
        else:
            mode, names = choice.allowed_tools.mode, [_tool_name(t) for t in choice.allowed_tools.tools]
        unknown = [n for n in names if n not in functions]
        if unknown:
            raise ApiError(400, f"tool_choice names unknown tool(s) {unknown}; tools are {list(functions)}",
                           param="tool_choice")  # fmt: skip
        answer, closed = None, self.closes_objects(req)
        fmt = req.response_format
        if mode == "auto" and fmt is not None and fmt.type != "text":
            if fmt.type != "json_schema" or fmt.json_schema.schema_ is None:
                raise ApiError(400, f"response_format {fmt.type!r} with tool_choice 'auto' is not supported; use a "
                               "json_schema (the reply is then tool calls or an answer in it)", param="response_format")  # fmt: skip
            answer = (json.dumps(fmt.json_schema.schema_), closed or bool(fmt.json_schema.strict))
        try:
            constraint = ToolCalls.from_functions([functions[n] for n in names], format=self.tool_format.name,
                                                  mode=mode, parallel=parallel, answer=answer,
                                                  strict=closed)  # fmt: skip
        except Exception as e:
            raise api_error(e, "tools") from None
        return ToolPlan(constraint, self.tool_format)

    def thinks(self, req: ChatCompletionRequest) -> bool:
        """Whether this chat request's reply starts with reasoning (a reasoning model, thinking on)."""
        return thinking_markers(self.reasoning, req.chat_template_kwargs) is not None

    def chat_constraint(self, req: ChatCompletionRequest, constraint):
        """The constraint of a chat reply: after the reasoning when the model thinks."""
        if constraint is None or not self.thinks(req):
            return constraint
        start, end = self.reasoning
        try:
            return Reasoning(constraint, start, end)
        except ConfigError as e:
            raise api_error(e, "response_format") from None

    def reasoning_params(self, req: ChatCompletionRequest, params: SamplingParams) -> SamplingParams:
        """``max_reasoning_tokens`` into ``params`` (a 400 without a reasoning model); a harmony reply
        (gpt-oss) decodes with its special tokens, which split it into reasoning and answer."""
        if is_harmony(self.reasoning) and self.thinks(req) and req.skip_special_tokens is None:
            params = replace(params, skip_special_tokens=False)
        if req.max_reasoning_tokens is None:
            return params
        if not self.thinks(req):
            raise ApiError(400, "max_reasoning_tokens needs a reasoning model with thinking on (guided serve "
                           "--reasoning-parser)", param="max_reasoning_tokens")  # fmt: skip
        return replace(params, max_reasoning_tokens=req.max_reasoning_tokens,
                       reasoning_end_ids=list(self._reasoning_end_ids))  # fmt: skip (checked again)

    def chat_prompt(self, req: ChatCompletionRequest) -> list[int]:
        """Token ids of the conversation under the model's chat template, ready for the reply."""
        tok = self.llm.tokenizer
        if not getattr(tok, "chat_template", None):
            raise ApiError(400, "this model has no chat template; use /v1/completions", param="messages")
        try:
            messages = [self._message(m) for m in req.messages]
        except ValueError as e:
            raise ApiError(400, str(e), param="messages") from None
        tools = [t.model_dump(exclude_none=True) for t in req.tools or []]
        kwargs = dict(req.chat_template_kwargs or {})
        for reserved in ("messages", "tools", "add_generation_prompt", "tokenize"):
            if reserved in kwargs:
                raise ApiError(400, f"chat_template_kwargs may not set {reserved!r}", param="chat_template_kwargs")
        try:
            text = chat_text(tok, messages, tools, self.tool_format, kwargs)
        except Exception as e:  # jinja errors in the model's template
            raise ApiError(
                400, f"the chat template failed on these messages: {e}", param="messages"
            ) from None
        return tok.encode(text, add_special_tokens=False)

    def _message(self, m: ChatMessage) -> dict:
        out = {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
        if m.tool_calls:
            out["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.function.name, "arguments": c.function.arguments}}
                                 for c in m.tool_calls]  # fmt: skip
        if m.tool_call_id is not None:
            out["tool_call_id"] = m.tool_call_id
        if m.name is not None:
            out["name"] = m.name
        return out

    def completion_prompts(self, req: CompletionRequest) -> list[str | list[int]]:
        p = req.prompt
        if isinstance(p, str):
            return [p]
        if p and isinstance(p[0], int):
            return [p]
        return list(p)

    def prompt_ids(self, prompt: str | list[int]) -> list[int]:
        ids = self.llm.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        engine = self.llm.engine
        try:
            engine._check_prompt(ids)
        except ConfigError as e:
            raise ApiError(400, str(e), param="prompt") from None
        return ids

    # ------------------------------------------------------------------ compile and generate
    async def compile(self, constraint, param: str | None):
        """Compile ``constraint`` within its time bound without blocking the loop; errors are 400s."""
        if constraint is None:
            return None
        self.metrics.compile_requests += 1
        if self.compile_service.is_known(constraint):
            self.metrics.compile_cache_hits += 1
        pending = self.compile_service.submit(constraint)
        try:
            while not pending.ready():  # the bound runs from when a worker starts the compile
                await asyncio.sleep(COMPILE_POLL_S)
            compiled = pending.result()
        except Exception as e:  # CompileTimeoutError and the compiler's own errors: 400s
            raise api_error(e, param) from None
        return compiled

    def check_budget(self, grammar, params: SamplingParams, num_prompt_tokens: int) -> None:
        """A 400 when ``max_tokens`` cannot hold any complete output of the constraint (budget_aware)."""
        if grammar is None:
            return
        refusal = self.llm.engine.budget_refusal(grammar, params, num_prompt_tokens)
        if refusal is not None:
            raise ApiError(400, refusal, param="max_tokens", code="max_tokens_too_small")

    def generate(self, prompt_ids: list[int], params: SamplingParams, grammar, request_id: str):
        self.active.add(request_id)
        return self.async_engine.generate(prompt_ids, params, request_id=request_id, grammar=grammar)

    def token_text(self, token_id: int) -> tuple[str, list[int]]:
        """A token's text and bytes, for logprobs."""
        special = self.vocab.special_text.get(token_id)
        if special is not None:
            return special, list(special.encode())
        data = self.vocab.token_bytes(token_id)
        return data.decode("utf-8", errors="replace"), list(data)


def _tool_name(entry) -> str:
    if isinstance(entry, dict):
        function = entry.get("function")
        name = function.get("name") if isinstance(function, dict) else entry.get("name")
        if not isinstance(name, str):
            raise ApiError(400, "allowed_tools.tools entries must name a function", param="tool_choice")
        return name
    return entry.function.name


def _structured_outputs(value, strict: bool):
    """The constraint of vLLM's ``structured_outputs`` object (exactly one kind, checked by the model)."""
    whitespace = "compact" if value.disable_any_whitespace else "flexible"
    if value.json_ is not None:
        schema = json.loads(value.json_) if isinstance(value.json_, str) else value.json_
        return JsonSchema(schema, strict=strict, whitespace=whitespace)
    if value.json_object:
        return replace(JSON_OBJECT, whitespace=whitespace)
    if value.regex is not None:
        return Regex(value.regex)
    if value.choice is not None:
        return Choice(value.choice)
    if value.grammar is not None:
        return Grammar(value.grammar)
    tag = json.loads(value.structural_tag) if isinstance(value.structural_tag, str) else value.structural_tag
    return StructuralTag.from_openai({"type": "structural_tag", **tag}, strict)
