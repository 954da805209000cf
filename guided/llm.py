"""LLM: the offline facade — load a local model once, generate for a batch of prompts, guided or not.

``response_format`` takes anything ``guided.constraints.to_constraint`` does (a pydantic model class, a
JSON Schema, ``Regex``, ``Choice``, ``Grammar``, an OpenAI ``response_format`` dict). Constraints
compile in the ``CompileService``'s worker threads while the engine runs; identical ones compile once.
"""

from __future__ import annotations

import json
import os
import sys
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from guided.builtin.tiny_model import default_model_dir
from guided.compile_service import CompileService
from guided.constraints import Constraint, JsonSchema, Reasoning, to_constraint
from guided.engine.config import Config
from guided.engine.llm_engine import LLMEngine
from guided.engine.parallel import torchrun_rank
from guided.engine.request import CompletionOutput, RequestOutput
from guided.engine.sampling_params import SamplingParams
from guided.engine.tp_worker import run_worker
from guided.errors import ConfigError, GuidedError, SchemaError
from guided.grammar.vocab import Vocabulary
from guided.schema.pydantic_models import parse_output
from guided.structural import is_harmony, reasoning_markers, split_reasoning, thinking_markers
from guided.tool_calls import (
    FORMATS,
    Tool,
    ToolCalls,
    ToolFormat,
    chat_text,
    detect_format,
    function_spec,
    read_calls,
)

__all__ = ["LLM", "AsyncLLM", "SamplingParams", "RequestOutput", "CompletionOutput"]

_PROGRESS_MIN = 8  # batches smaller than this get no progress bar


class LLM:
    """Offline batched generation.

    Parameters
    ----------
    model : str or path, optional
        A local Hugging Face model directory. None loads the embedded default: a tiny random-weight
        model (its text is meaningless; guided generation still keeps it valid).
    tokenizer : transformers tokenizer, optional
        Overrides the model directory's tokenizer.
    compile_timeout : float
        Seconds a constraint may take to compile before its request fails.
    grammar_cache : path, "auto" or None
        Directory where compiled grammars persist, so that a restarted process loads a constraint it
        compiled before instead of compiling it again. "auto" (the default): ``$GUIDED_GRAMMAR_CACHE``
        (a directory, or "off") else ``grammars/`` under ``$GUIDED_CACHE`` (``~/.cache/guided``);
        None or "off": no disk cache.
    grammar_cache_bytes : int
        Bound on that directory (least recently used entries are removed past it).
    **config
        Any ``guided.engine.config.Config`` field: ``dtype``, ``block_size``, ``max_num_seqs``,
        ``max_num_batched_tokens``, ``gpu_memory_utilization``, ``enable_prefix_caching``,
        ``tensor_parallel_size``, ...

    With ``tensor_parallel_size=N`` the model is split across N processes (spawned here, or the ranks
    ``torchrun`` started: there, ``LLM(...)`` on a rank other than 0 serves as a worker until rank 0
    shuts down, then exits the process). ``shutdown()`` (or ``with LLM(...) as llm:``) stops them;
    so does the end of the program.

    Examples
    --------
    >>> llm = LLM("path/to/model")
    >>> llm.generate(["Hello"], SamplingParams(max_tokens=8))[0].text
    """

    def __init__(self, model: str | os.PathLike | None = None, tokenizer=None, compile_timeout: float = 10.0,
                 grammar_cache: str | os.PathLike | None = "auto", grammar_cache_bytes: int = 1 << 30,
                 **config):  # fmt: skip
        if model is None:

            model = default_model_dir()
            print(f"guided: no model given; using the embedded random-weight default model ({model})",
                  file=sys.stderr)  # fmt: skip
        engine_config = Config(model=str(model), **config)
        if torchrun_rank(engine_config.tensor_parallel_size):  # a torchrun rank other than 0: a worker
            run_worker(engine_config)
            raise SystemExit(0)
        self.engine = LLMEngine(engine_config, tokenizer, stream=False)
        self.compile_timeout = compile_timeout
        self.grammar_cache, self.grammar_cache_bytes = grammar_cache, grammar_cache_bytes
        self._compile_service: CompileService | None = None
        self._streams: dict[str, deque[RequestOutput]] = {}  # outputs of open stream() calls, by request

    @property
    def compile_service(self) -> CompileService:
        """The constraint compiler for this model's vocabulary (built on first use)."""
        if self._compile_service is None:
            engine = self.engine
            vocab = Vocabulary.from_tokenizer(engine.tokenizer, size=engine.vocab_size, eos_ids=engine.eos_token_ids)
            self._compile_service = CompileService(vocab, encode=continuation_encoder(engine.tokenizer, vocab),
                                                   timeout_s=self.compile_timeout, grammar_cache=self.grammar_cache,
                                                   grammar_cache_bytes=self.grammar_cache_bytes)  # fmt: skip
        return self._compile_service

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    def shutdown(self) -> None:
        """Stop the tensor-parallel workers, if any; the LLM generates nothing after it."""
        self.engine.close()
        if self._compile_service is not None:
            self._compile_service.shutdown()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def generate(
        self,
        prompts: str | list[int] | Sequence[str | list[int]],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = True,
        response_format=None,
    ) -> list[RequestOutput]:
        """Generate completions for ``prompts`` (text or token ids), one output per prompt, in order.

        Parameters
        ----------
        prompts : str, list of int, or a sequence of them
        params : SamplingParams or one per prompt, optional
            Defaults to ``SamplingParams()``.
        use_tqdm : bool
            Show a progress bar (for batches of 8 prompts or more, when tqdm is installed).
        response_format : constraint, or a list with one per prompt, optional
            A pydantic model class, a JSON Schema dict, ``Regex(...)``, ``Choice([...])``,
            ``Grammar(...)`` or an OpenAI ``response_format`` dict; None leaves the output free.

        Returns
        -------
        list of RequestOutput
            ``.text``, ``.token_ids``, ``.finish_reason`` and ``.parsed``: for a JSON constraint the
            validated pydantic instance (or the parsed JSON) when the output is complete, else None.
            A constraint that fails to compile gives ``finish_reason == "error"`` and ``.error``; so
            does a ``max_tokens`` too small for the constraint's shortest complete output (the message
            names it). Otherwise a constrained output ends complete within ``max_tokens``
            (``SamplingParams.budget_aware``; ``outputs[i].budget_forced`` when that steered its end).
        """
        prompts = _prompt_list(prompts)
        constraints = _per_prompt_constraints(response_format, len(prompts))
        return self._generate(prompts, params, constraints, [_Reply(c) for c in constraints], use_tqdm)

    def _generate(self, prompts: list, params, constraints: list, replies: list[_Reply], use_tqdm: bool):
        params_list = _per_prompt(params, len(prompts))
        grammars = [self.compile_service.submit(c) if c is not None else None for c in constraints]
        ids = [self.engine.add_request(p, sp, grammar=g) for p, sp, g in zip(prompts, params_list, grammars, strict=True)]
        try:
            done = self._run(set(ids), use_tqdm and len(ids) >= _PROGRESS_MIN)
        except BaseException:
            for request_id in ids:
                self.engine.abort(request_id)
            raise
        outputs = [done[i] for i in ids]
        for out, reply in zip(outputs, replies, strict=True):
            for completion in out.outputs:
                reply.read(completion)
        return outputs

    def chat(self, messages: list[dict] | Sequence[list[dict]], params=None, use_tqdm: bool = True,
             response_format=None, chat_template_kwargs: dict | None = None, reasoning_parser: str | None = "auto",
             tools: Sequence | None = None, tool_choice=None, parallel_tool_calls: bool = True,
             tool_format: str | None = None) -> list[RequestOutput]:  # fmt: skip
        """Generate replies to chat conversations, rendered with the model's own chat template.

        ``messages`` is one conversation (a list of ``{"role", "content"}`` dicts) or a list of them.
        ``chat_template_kwargs`` go to the template (e.g. ``{"enable_thinking": False}``). With a
        reasoning model (``reasoning_parser``: "auto" finds ``<think>``/``</think>`` in the template,
        as the server does), ``response_format`` applies after the reasoning, and each output's
        ``reasoning_content`` holds the reasoning (``parsed`` reads the answer after it).

        ``tools``: OpenAI tool dicts, pydantic model classes or typed Python functions. The reply is
        then exactly tool calls in the model's format (``tool_format``: "hermes", "llama3-json" or "harmony",
        detected from the template when None), each naming a tool with arguments valid for it, or,
        under ``tool_choice="auto"`` (the default), free text instead (an answer in
        ``response_format`` when one is given). ``tool_choice``: "auto", "required", "none", or one
        tool (its name, an OpenAI ``{"type": "function", ...}`` dict, or the model class or function
        itself). Each output's ``tool_calls`` lists ``ToolCall`` objects (``name``, ``arguments``
        JSON text, ``parsed``, ``run()`` for a function tool, ``as_dict()`` to put back into the
        conversation) and ``content`` the text before them.
        """
        conversations = [messages] if messages and isinstance(messages[0], dict) else list(messages)
        constraints, replies, tool_dicts, fmt, plans = [], [], [], None, {}
        for c in _per_prompt_constraints(response_format, len(conversations)):
            if id(c) not in plans:  # one response_format for all: its plan (and the tools) read once
                plans[id(c)] = self._chat_plan(c, chat_template_kwargs, reasoning_parser, tools, tool_choice,
                                               parallel_tool_calls, tool_format)  # fmt: skip
            constraint, reply, tool_dicts, fmt = plans[id(c)]
            constraints.append(constraint)
            replies.append(reply)
        prompts = [self.render_chat(c, chat_template_kwargs, tool_dicts, fmt) for c in conversations]
        params = [_for_reply(p, r) for p, r in zip(_per_prompt(params, len(prompts)), replies, strict=True)]
        return self._generate(prompts, params, constraints, replies, use_tqdm)

    def stream(self, prompt: str | list[int] | list[dict], params: SamplingParams | None = None,
               response_format=None, chat_template_kwargs: dict | None = None,
               reasoning_parser: str | None = "auto") -> Iterator[str]:  # fmt: skip
        """Yield the text of one completion as it is generated (one delta per engine step with new text).

        ``prompt`` is a text, token ids, or a conversation (message dicts, rendered as ``chat`` does,
        reasoning included in the deltas). ``params.n`` must be 1. Closing the generator early (a
        ``break``, or dropping it) aborts the request and frees its blocks. A request that fails (its
        constraint does not compile) raises ``GuidedError`` with the reason.
        """
        prompt, params, constraint = self._stream_request(prompt, params, response_format, chat_template_kwargs,
                                                          reasoning_parser)  # fmt: skip
        grammar = self.compile_service.submit(constraint) if constraint is not None else None
        request_id = self.engine.add_request(prompt, params, grammar=grammar)
        buffer = self._streams[request_id] = deque()
        self.engine.stream = True
        finished = False
        try:
            while not finished:
                if not buffer:
                    self._step()
                    continue
                out = buffer.popleft()
                finished = out.finished
                if out.error is not None:
                    raise GuidedError(out.error)
                if out.outputs[0].delta_text:
                    yield out.outputs[0].delta_text
        finally:
            del self._streams[request_id]
            self.engine.stream = bool(self._streams)
            if not finished:
                self.engine.abort(request_id)

    def _stream_request(self, prompt, params, response_format, chat_template_kwargs, reasoning_parser):
        """(prompt, params, constraint) of a ``stream`` call (``LLM``'s and ``AsyncLLM``'s): one
        completion; a conversation rendered as ``chat`` renders it, its constraint after the reasoning."""
        params = params or SamplingParams()
        if params.n != 1:
            raise ConfigError(f"stream() follows one completion; got n={params.n} (use generate())")
        (constraint,) = _per_prompt_constraints(response_format, 1)
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], dict):
            constraint, reply, _, _ = self._chat_plan(constraint, chat_template_kwargs, reasoning_parser)
            params = _for_reply(params, reply)  # (a harmony reply streams its headers: the raw text)
            prompt = self.render_chat(prompt, chat_template_kwargs)
        return prompt, params, constraint

    def render_chat(self, messages: list[dict], chat_template_kwargs: dict | None = None,
                    tools: list[dict] | None = None, tool_format: ToolFormat | None = None) -> list[int]:  # fmt: skip
        """Token ids of ``messages`` under the model's chat template, ending with the assistant's turn
        (``tools``: OpenAI tool dicts, given to the template or folded into the system message)."""
        tok = self.tokenizer
        if not getattr(tok, "chat_template", None):
            raise ConfigError("this model's tokenizer has no chat template (tokenizer_config.json "
                              "'chat_template'); use generate() with a plain prompt")  # fmt: skip
        fmt = tool_format or FORMATS[detect_format(tok.chat_template)]
        text = chat_text(tok, messages, tools or [], fmt, chat_template_kwargs or {})
        # the template writes the BOS token itself when the model wants one
        return tok.encode(text, add_special_tokens=False)

    def _chat_plan(self, constraint, chat_template_kwargs, reasoning_parser, tools=None, tool_choice=None,
                   parallel: bool = True, tool_format=None) -> tuple[Constraint | None, _Reply, list[dict], ToolFormat]:  # fmt: skip
        """A chat reply's constraint, how to read it, the tools for the prompt and their format."""
        template = getattr(self.tokenizer, "chat_template", None)
        fmt = FORMATS[tool_format or detect_format(template)]
        markers = thinking_markers(reasoning_markers(reasoning_parser, template), chat_template_kwargs)
        specs = {}
        for t in tools or ():
            tool = function_spec(t)
            if tool.name in specs:
                raise ConfigError(f"two tools are named {tool.name!r}")
            specs[tool.name] = tool
        tool_dicts = [{"type": "function", "function": t.spec} for t in specs.values()]
        answer, call = constraint, _tool_choice(tool_choice, specs) if specs else None
        if call is not None:
            mode, names = call
            answer_schema = None
            if mode == "auto" and constraint is not None:
                if not isinstance(constraint, JsonSchema):
                    raise ConfigError(f"response_format beside tools under tool_choice 'auto' must be a JSON Schema "
                                      f"(the reply is then tool calls or an answer in it), got {type(constraint).__name__}")  # fmt: skip
                answer_schema = (json.dumps(constraint.schema), constraint.strict)
            one = mode == "one"  # a named tool: exactly one call of it
            constraint = ToolCalls.from_functions([specs[n].spec for n in names], format=fmt.name,
                                                  mode="required" if one else mode, parallel=parallel and not one,
                                                  answer=answer_schema)  # fmt: skip
            answer = answer if mode == "auto" else None
        if markers is not None and constraint is not None:
            constraint = Reasoning(constraint, *markers)
        reply = _Reply(answer, markers, specs if call is not None else None, fmt)
        return constraint, reply, tool_dicts, fmt

    def _run(self, pending: set[str], progress: bool) -> dict[str, RequestOutput]:
        done: dict[str, RequestOutput] = {}
        bar = _progress_bar(len(pending)) if progress else None
        while pending and self.engine.has_unfinished():
            for out in self._step():
                if out.finished and out.request_id in pending:
                    pending.discard(out.request_id)
                    done[out.request_id] = out
                    if bar is not None:
                        bar.update(1)
        if bar is not None:
            bar.close()
        return done

    def _step(self) -> list[RequestOutput]:
        """One engine step; the outputs of open ``stream()`` calls go to their buffers too."""
        outputs = self.engine.step()
        for out in outputs:
            buffer = self._streams.get(out.request_id)
            if buffer is not None:
                buffer.append(out)
        return outputs


class AsyncLLM:
    """The ``LLM`` for asyncio: one request per call, many at once, over the engine's async core.

    The engine runs in its own thread (``guided.engine.async_engine.AsyncEngine``, the server's core):
    coroutines only wait. Takes the same arguments as ``LLM``. Cancelling a task that awaits
    ``generate``/``chat``, or leaving a ``stream`` early, aborts its request and frees its blocks.
    Call ``shutdown()`` (or use ``async with``) when done.

    Examples
    --------
    >>> async with AsyncLLM("path/to/model") as llm:
    ...     out = await llm.generate("Hello", SamplingParams(max_tokens=8))
    ...     async for delta in llm.stream("Hello"):
    ...         print(delta, end="")
    """

    def __init__(self, model: str | os.PathLike | None = None, tokenizer=None, **kwargs):
        from guided.engine.async_engine import AsyncEngine  # starts a thread: only for asyncio users

        self.llm = LLM(model, tokenizer, **kwargs)
        self.llm.engine.stream = True
        self.engine = AsyncEngine(self.llm.engine)

    @property
    def tokenizer(self):
        return self.llm.tokenizer

    async def generate(self, prompt: str | list[int], params: SamplingParams | None = None,
                       response_format=None) -> RequestOutput:  # fmt: skip
        """The finished output of one prompt (as ``LLM.generate`` gives for a batch of one)."""
        (constraint,) = _per_prompt_constraints(response_format, 1)
        return await self._finish(prompt, params, constraint, _Reply(constraint))

    async def chat(self, messages: list[dict], params: SamplingParams | None = None, response_format=None,
                   chat_template_kwargs: dict | None = None, reasoning_parser: str | None = "auto",
                   tools: Sequence | None = None, tool_choice=None, parallel_tool_calls: bool = True,
                   tool_format: str | None = None) -> RequestOutput:  # fmt: skip
        """The reply to one conversation; the arguments and the output's fields are ``LLM.chat``'s."""
        (constraint,) = _per_prompt_constraints(response_format, 1)
        constraint, reply, tool_dicts, fmt = self.llm._chat_plan(constraint, chat_template_kwargs, reasoning_parser,
                                                                 tools, tool_choice, parallel_tool_calls, tool_format)  # fmt: skip
        prompt = self.llm.render_chat(messages, chat_template_kwargs, tool_dicts, fmt)
        return await self._finish(prompt, _for_reply(params or SamplingParams(), reply), constraint, reply)

    async def stream(self, prompt: str | list[int] | list[dict], params: SamplingParams | None = None,
                     response_format=None, chat_template_kwargs: dict | None = None,
                     reasoning_parser: str | None = "auto"):  # fmt: skip
        """``async for delta in llm.stream(...)``: the text of one completion as it comes (``LLM.stream``)."""
        prompt, params, constraint = self.llm._stream_request(prompt, params, response_format, chat_template_kwargs,
                                                              reasoning_parser)  # fmt: skip
        outputs = self._outputs(prompt, params, constraint)
        try:
            async for out in outputs:
                if out.error is not None:
                    raise GuidedError(out.error)
                if out.outputs[0].delta_text:
                    yield out.outputs[0].delta_text
        finally:
            await outputs.aclose()  # an early exit aborts the request

    def shutdown(self, grace_s: float = 0.0) -> list[str]:
        """Stop the engine thread; returns the ids of requests it had to end (see ``AsyncEngine.shutdown``)."""
        return self.engine.shutdown(grace_s)

    async def __aenter__(self) -> AsyncLLM:
        return self

    async def __aexit__(self, *exc) -> None:
        self.shutdown()

    async def _finish(self, prompt, params, constraint, reply: _Reply) -> RequestOutput:
        last = None
        async for out in self._outputs(prompt, params or SamplingParams(), constraint):
            last = out
        for completion in last.outputs:
            reply.read(completion)
        return last

    def _outputs(self, prompt, params: SamplingParams, constraint):
        grammar = self.llm.compile_service.submit(constraint) if constraint is not None else None
        return self.engine.generate(prompt, params, grammar=grammar)


def _for_reply(params: SamplingParams, reply: _Reply) -> SamplingParams:
    """A harmony reply (gpt-oss) decodes with its special tokens: its split into reasoning and answer
    reads them."""
    return replace(params, skip_special_tokens=False) if is_harmony(reply.markers) else params


def _per_prompt(params, n: int) -> list[SamplingParams]:
    if params is None:
        return [SamplingParams()] * n
    if isinstance(params, SamplingParams):
        return [params] * n
    params = list(params)
    if len(params) != n:

        raise ConfigError(f"got {len(params)} SamplingParams for {n} prompts")
    return params


def _per_prompt_constraints(response_format, n: int) -> list[Constraint | None]:
    if isinstance(response_format, list):  # one format per prompt (a JSON Schema is never a list)
        if len(response_format) != n:
            raise ConfigError(f"got {len(response_format)} response formats for {n} prompts")
        return [to_constraint(f) for f in response_format]
    return [to_constraint(response_format)] * n


@dataclass(frozen=True)
class _Reply:
    """How to read a finished output: the answer's constraint, and for chat the reasoning markers and
    the tools whose calls it may hold (None: no tool-call constraint)."""

    answer: Constraint | None
    markers: tuple[str, str] | None = None
    tools: dict[str, Tool] | None = None
    format: ToolFormat | None = None

    def read(self, completion: CompletionOutput) -> None:
        """Fill ``parsed``, and for chat ``reasoning_content``, ``content`` and ``tool_calls``."""
        text = completion.text
        if self.markers is not None:
            completion.reasoning_content, text = split_reasoning(text, *self.markers)
        if self.tools is not None and text is not None:
            text, completion.tool_calls = read_calls(self.format, text, self.tools)
        if self.markers is not None or self.tools is not None:
            completion.content = text
        if isinstance(self.answer, JsonSchema) and text is not None and not completion.tool_calls:
            completion.parsed = _parse(self.answer, completion, text)


def _prompt_list(prompts) -> list:
    single = isinstance(prompts, str) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int))
    return [prompts] if single else list(prompts)


def _tool_choice(choice, tools: dict[str, Tool]) -> tuple[str, list[str]] | None:
    """("auto" | "required", tool names) of a Python ``tool_choice``; None for "none"."""
    if choice is None or choice == "auto":
        return "auto", list(tools)
    if choice == "none":
        return None
    if choice == "required":
        return "required", list(tools)
    if isinstance(choice, str):
        name = choice
    elif isinstance(choice, dict):
        name = choice.get("function", choice).get("name")
    else:
        name = function_spec(choice).name
    if name not in tools:
        raise ConfigError(f"tool_choice names {name!r}, which is not among the tools {list(tools)}; it is "
                          "'auto', 'required', 'none' or one of the tools")  # fmt: skip
    return "one", [name]


def _parse(constraint: JsonSchema, completion: CompletionOutput, text: str):
    """The validated instance of a finished JSON output; None when it was cut short (length, abort)."""
    if completion.finish_reason != "stop":
        return None
    try:
        return parse_output(constraint.model if constraint.model is not None else constraint.schema, text)
    except SchemaError:
        return None  # lenient compiles may relax a keyword; the raw text is still there


def continuation_encoder(tokenizer, vocab: Vocabulary):
    """``encode(bytes) -> ids``: the tokenizer's tokens for text that continues a sequence (no BOS, no
    SentencePiece dummy prefix). Text that is not valid UTF-8 encodes to [] (nothing is forced)."""

    def encode(data: bytes) -> list[int]:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return []
        ids = tokenizer.encode(text, add_special_tokens=False)
        if vocab.add_prefix_space and not text.startswith(" "):
            if not ids or vocab.tokens[ids[0]] != b" ":
                return []  # the dummy space merged into the first token: no exact continuation
            ids = ids[1:]
        return ids

    return encode


def _progress_bar(total: int):
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="generating", unit="req", dynamic_ncols=True)
