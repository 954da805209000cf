"""LLM: the offline facade — load a local model once, generate for a batch of prompts, guided or not.

``response_format`` takes anything ``guided.constraints.to_constraint`` does (a pydantic model class, a
JSON Schema, ``Regex``, ``Choice``, ``Grammar``, an OpenAI ``response_format`` dict). Constraints
compile in the ``CompileService``'s worker threads while the engine runs; identical ones compile once.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from guided.builtin.tiny_model import default_model_dir
from guided.compile_service import CompileService
from guided.constraints import Constraint, JsonSchema, Reasoning, to_constraint
from guided.engine.config import Config
from guided.engine.llm_engine import LLMEngine
from guided.engine.request import CompletionOutput, RequestOutput
from guided.engine.sampling_params import SamplingParams
from guided.errors import ConfigError, SchemaError
from guided.grammar.vocab import Vocabulary
from guided.schema.pydantic_models import parse_output
from guided.structural import reasoning_markers, split_reasoning, thinking_markers

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput"]

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
        ``max_num_batched_tokens``, ``gpu_memory_utilization``, ``enable_prefix_caching``, ...

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
        self.engine = LLMEngine(Config(model=str(model), **config), tokenizer, stream=False)
        self.compile_timeout = compile_timeout
        self.grammar_cache, self.grammar_cache_bytes = grammar_cache, grammar_cache_bytes
        self._compile_service: CompileService | None = None

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
        single = isinstance(prompts, str) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int))
        prompts = [prompts] if single else list(prompts)
        params_list = _per_prompt(params, len(prompts))
        constraints = _per_prompt_constraints(response_format, len(prompts))
        grammars = [self.compile_service.submit(c) if c is not None else None for c in constraints]
        ids = [self.engine.add_request(p, sp, grammar=g) for p, sp, g in zip(prompts, params_list, grammars, strict=True)]
        try:
            done = self._run(set(ids), use_tqdm and len(ids) >= _PROGRESS_MIN)
        except BaseException:
            for request_id in ids:
                self.engine.abort(request_id)
            raise
        outputs = [done[i] for i in ids]
        for out, constraint in zip(outputs, constraints, strict=True):
            for completion in out.outputs:
                _read(constraint, completion)
        return outputs

    def chat(self, messages: list[dict] | Sequence[list[dict]], params=None, use_tqdm: bool = True,
             response_format=None, chat_template_kwargs: dict | None = None,
             reasoning_parser: str | None = "auto") -> list[RequestOutput]:  # fmt: skip
        """Generate replies to chat conversations, rendered with the model's own chat template.

        ``messages`` is one conversation (a list of ``{"role", "content"}`` dicts) or a list of them.
        ``chat_template_kwargs`` go to the template (e.g. ``{"enable_thinking": False}``). With a
        reasoning model (``reasoning_parser``: "auto" finds ``<think>``/``</think>`` in the template,
        as the server does), ``response_format`` applies after the reasoning, and each output's
        ``reasoning_content`` holds the reasoning (``parsed`` reads the answer after it).
        """
        conversations = [messages] if messages and isinstance(messages[0], dict) else list(messages)
        prompts = [self.render_chat(c, chat_template_kwargs) for c in conversations]
        template = getattr(self.tokenizer, "chat_template", None)
        markers = thinking_markers(reasoning_markers(reasoning_parser, template), chat_template_kwargs)
        if markers is not None:
            response_format = [None if c is None else Reasoning(c, *markers)
                               for c in _per_prompt_constraints(response_format, len(prompts))]  # fmt: skip
        return self.generate(prompts, params, use_tqdm, response_format)

    def render_chat(self, messages: list[dict], chat_template_kwargs: dict | None = None) -> list[int]:
        """Token ids of ``messages`` under the model's chat template, ending with the assistant's turn."""
        tok = self.tokenizer
        if not getattr(tok, "chat_template", None):
            raise ConfigError("this model's tokenizer has no chat template (tokenizer_config.json "
                              "'chat_template'); use generate() with a plain prompt")  # fmt: skip
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                       **(chat_template_kwargs or {}))  # fmt: skip
        # the template writes the BOS token itself when the model wants one
        return tok.encode(text, add_special_tokens=False)

    def _run(self, pending: set[str], progress: bool) -> dict[str, RequestOutput]:
        done: dict[str, RequestOutput] = {}
        bar = _progress_bar(len(pending)) if progress else None
        while pending and self.engine.has_unfinished():
            for out in self.engine.step():
                if out.finished and out.request_id in pending:
                    pending.discard(out.request_id)
                    done[out.request_id] = out
                    if bar is not None:
                        bar.update(1)
        if bar is not None:
            bar.close()
        return done


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


def _read(constraint, completion: CompletionOutput) -> None:
    """Fill ``parsed`` (a JSON constraint) and ``reasoning_content`` (a reasoning reply) of an output."""
    text = completion.text
    if isinstance(constraint, Reasoning):
        completion.reasoning_content, text = split_reasoning(text, constraint.start, constraint.end)
        constraint = constraint.answer
    if isinstance(constraint, JsonSchema) and text is not None:
        completion.parsed = _parse(constraint, completion, text)


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
