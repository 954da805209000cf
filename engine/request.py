"""Request and its outputs: the n completions of one prompt, their text and what is new since last time."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .detokenizer import IncrementalDetokenizer
from .sampling_params import SamplingParams
from .sequence import Sequence


@dataclass(slots=True)
class CompletionOutput:
    """One completion: text and ids so far, the part new in this output, and why it ended."""

    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None = None  # "stop", "length", "abort", "error"
    stop_reason: int | str | None = None  # the stop string or token id that ended it
    logprobs: list[dict[int, float]] | None = None  # per token: {sampled id: logprob, top ids...}
    delta_text: str = ""
    delta_token_ids: list[int] = field(default_factory=list)
    forced: list[bool] = field(default_factory=list)  # per output token: forced (grammar or budget), not sampled
    budget_forced: bool = False  # the token budget steered the end (a draw refused, or the end appended)
    parsed: object = None  # the output parsed under its constraint (set by guided's API)
    reasoning_content: str | None = None  # a reasoning model's reasoning (set by guided's LLM.chat)
    content: str | None = None  # a chat reply's answer: after the reasoning, before tool calls (LLM.chat)
    tool_calls: list | None = None  # a chat reply's tool calls when tools were given (LLM.chat)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(slots=True)
class RequestOutput:
    """What a request has produced; ``text``/``token_ids``/``finish_reason`` are those of completion 0."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    error: str | None = None  # why the request failed (e.g. its constraint did not compile)
    num_cached_tokens: int = 0
    arrival_time: float = 0.0
    first_token_time: float | None = None
    finish_time: float | None = None

    @property
    def text(self) -> str:
        return self.outputs[0].text

    @property
    def token_ids(self) -> list[int]:
        return self.outputs[0].token_ids

    @property
    def finish_reason(self) -> str | None:
        return self.outputs[0].finish_reason

    @property
    def parsed(self):
        return self.outputs[0].parsed


class Completion:
    """Output bookkeeping of one sequence: detokenizer, text (stop-trimmed) and what was sent."""

    __slots__ = ("seq", "detokenizer", "text", "num_decoded", "num_sent_tokens", "num_sent_chars", "hold")

    def __init__(self, seq: Sequence, tokenizer, hold: int):
        self.seq = seq
        self.detokenizer = IncrementalDetokenizer(tokenizer, seq.token_ids, seq.params.skip_special_tokens)
        self.text = ""
        self.num_decoded = 0  # output tokens given to the detokenizer
        self.num_sent_tokens = 0
        self.num_sent_chars = 0
        self.hold = hold  # chars held back while streaming: a stop string may still complete

    def detokenize(self) -> str:
        """Feed the output tokens not yet decoded; append and return the new text."""
        ids = self.seq.token_ids[self.seq.num_prompt_tokens + self.num_decoded :]
        self.num_decoded += len(ids)
        delta = self.detokenizer.add(ids) if ids else ""
        self.text += delta
        return delta


class Request:
    __slots__ = ("request_id", "prompt", "prompt_token_ids", "params", "completions", "arrival_time",
                 "first_token_time", "finish_time", "grammar", "error")  # fmt: skip

    def __init__(self, request_id: str, prompt: str | None, prompt_ids: list[int], params: SamplingParams,
                 seqs: list[Sequence], tokenizer):  # fmt: skip
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_token_ids = prompt_ids
        self.params = params
        hold = max((len(s) for s in params.stop), default=1) - 1
        self.completions = [Completion(s, tokenizer, hold) for s in seqs]
        self.arrival_time = time.perf_counter()
        self.first_token_time: float | None = None
        self.finish_time: float | None = None
        self.grammar = None  # a pending compile (ready()/result()) until the matchers are made
        self.error: str | None = None

    @property
    def seqs(self) -> list[Sequence]:
        return [c.seq for c in self.completions]

    @property
    def finished(self) -> bool:
        return all(c.seq.is_finished for c in self.completions)

    def output(self) -> RequestOutput:
        """The request's state, with each completion's new tokens and text since the last output."""
        return RequestOutput(
            request_id=self.request_id,
            prompt=self.prompt,
            prompt_token_ids=self.prompt_token_ids,
            outputs=[self._completion_output(c) for c in self.completions],
            finished=self.finished,
            error=self.error,
            num_cached_tokens=self.completions[0].seq.num_cached_tokens,
            arrival_time=self.arrival_time,
            first_token_time=self.first_token_time,
            finish_time=self.finish_time,
        )

    def _completion_output(self, c: Completion) -> CompletionOutput:
        seq = c.seq
        ids = seq.output_token_ids
        visible = len(c.text) if seq.is_finished else max(c.num_sent_chars, len(c.text) - c.hold)
        delta_text, delta_ids = c.text[c.num_sent_chars : visible], ids[c.num_sent_tokens :]
        c.num_sent_chars, c.num_sent_tokens = visible, len(ids)
        return CompletionOutput(
            index=seq.index,
            text=c.text[:visible],
            token_ids=list(ids),
            finish_reason=seq.finish_reason,
            stop_reason=seq.stop_reason,
            logprobs=list(seq.logprobs) if seq.logprobs is not None else None,
            delta_text=delta_text,
            delta_token_ids=delta_ids,
            forced=list(seq.forced),
            budget_forced=seq.budget_forced,
        )
