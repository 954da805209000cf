"""OpenAI response bodies and stream chunks built from engine outputs (plain dicts, JSON-ready).

``ChatChoiceState`` follows one completion through a stream: its tool-call parser, how many
logprobs were sent, whether its role was announced. The same parser reads the final answer, so
streamed tool-call deltas reassemble into exactly the calls of the non-streaming answer.
"""

from __future__ import annotations

from guided.server.api_errors import ApiError
from guided.structural import split_reasoning
from guided.tool_calls import ParsedCall, ToolCallParser, ToolFormat, marker_prefix

__all__ = ["ChatChoiceState", "usage", "finish_reason", "choice_extensions", "chat_logprobs", "completion_logprobs"]


def usage(outputs) -> dict:
    """``usage`` over the final RequestOutputs of one API request (one per prompt)."""
    prompt = sum(len(o.prompt_token_ids) for o in outputs)
    completion = sum(len(c.token_ids) for o in outputs for c in o.outputs)
    cached = sum(o.num_cached_tokens for o in outputs)
    steered = sum(c.budget_forced for o in outputs for c in o.outputs)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
            **({"budget_forced_choices": steered} if steered else {})}  # fmt: skip


def choice_extensions(completion) -> dict:
    """guided's fields of a finished choice: ``budget_forced`` when the token budget steered its end."""
    return {"budget_forced": True} if completion.budget_forced else {}


def check_failed(output) -> None:
    """An engine request that failed (its constraint, or a bug) is a server error, not an answer."""
    failed = [c for c in output.outputs if c.finish_reason == "error"]
    if failed:
        raise ApiError(500, f"generation failed: {output.error or 'unknown error'}", type_="server_error")


def finish_reason(completion, calls: list[ParsedCall] | None = None) -> str | None:
    reason = completion.finish_reason
    if reason == "stop" and calls:
        return "tool_calls"
    if reason == "abort":
        return "stop"
    return reason


def _top(model, row: dict[int, float], k: int) -> list[dict]:
    """The ``k`` most likely alternatives; tokens the constraint masked (logprob -inf) are left out,
    so under a constraint the list may be shorter than ``k`` (never a non-finite number in JSON)."""
    best = sorted(((t, lp) for t, lp in row.items() if lp > float("-inf")), key=lambda kv: -kv[1])[:k]
    out = []
    for token_id, lp in best:
        text, data = model.token_text(token_id)
        out.append({"token": text, "logprob": lp, "bytes": data})
    return out


def chat_logprobs(model, token_ids: list[int], rows: list[dict[int, float]] | None, k: int) -> dict | None:
    """OpenAI chat ``logprobs``: per token its text, bytes, logprob and the top ``k`` alternatives."""
    if rows is None:
        return None
    content = []
    for token_id, row in zip(token_ids, rows, strict=False):
        text, data = model.token_text(token_id)
        content.append({"token": text, "logprob": row.get(token_id, 0.0), "bytes": data,
                        "top_logprobs": _top(model, row, k)})  # fmt: skip
    return {"content": content, "refusal": None}


def completion_logprobs(model, token_ids: list[int], rows: list[dict[int, float]] | None, k: int,
                        offset: int = 0) -> dict | None:  # fmt: skip
    """Legacy completions ``logprobs``: tokens, token_logprobs, top_logprobs, text_offset."""
    if rows is None:
        return None
    tokens, lps, tops, offsets = [], [], [], []
    for token_id, row in zip(token_ids, rows, strict=False):
        text, _ = model.token_text(token_id)
        tokens.append(text)
        lps.append(row.get(token_id, 0.0))
        tops.append({t["token"]: t["logprob"] for t in _top(model, row, k)} if k else None)
        offsets.append(offset)
        offset += len(text)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}


class ChatChoiceState:
    """One chat choice: what was streamed so far, and its tool-call parser when tools are active."""

    def __init__(self, index: int, tool_format: ToolFormat | None, reasoning: tuple[str, str] | None = None):
        self.index = index
        self.parser = ToolCallParser(tool_format) if tool_format is not None else None
        self.reasoning = reasoning  # (start, end) markers of a reasoning model's reply, or None
        self.num_logprobs = 0
        self.started = False
        self.sent_reasoning = self.sent_content = 0  # characters streamed (reasoning models)

    def split(self, text: str, final: bool) -> tuple[str, str | None]:
        """(reasoning, answer text or None while the reasoning goes on) of a reasoning model's text;
        while streaming, a tail that may be the start of the end marker is held back."""
        start, end = self.reasoning
        if not final and end not in text:
            if start.startswith(text.lstrip()):
                return "", None  # the opening marker may still be being written
            text = text[: len(text) - marker_prefix(text, end)]
        return split_reasoning(text, start, end)

    def message(self, completion) -> tuple[dict, list[ParsedCall]]:
        """The final ``message`` of a non-streaming answer and its tool calls."""
        text, extra = completion.text, {}
        if self.reasoning is not None:
            reasoning, answer = self.split(text, True)
            extra = {"reasoning_content": reasoning}
            text = answer or ""
        if self.parser is None:  # (a reasoning reply with no answer: content None, as vLLM's)
            content = (text or None) if self.reasoning is not None else text
            return {"role": "assistant", "content": content, "refusal": None, **extra}, []
        self.parser.finish(text)
        calls = [c for c in self.parser.calls if c.complete]
        message = {"role": "assistant", "content": self.parser.content or None, "refusal": None, **extra}
        if calls:
            message["tool_calls"] = [{"id": c.id, "type": "function",
                                      "function": {"name": c.name, "arguments": c.arguments}} for c in calls]  # fmt: skip
        elif self.parser.content == "" and text:
            message["content"] = None  # an unfinished call: nothing valid to show
        return message, calls

    def delta(self, completion) -> dict:
        """The ``delta`` of a stream chunk for what is new in ``completion``."""
        delta: dict = {}
        if not self.started:
            delta["role"] = "assistant"
            self.started = True
        text = completion.text
        if self.reasoning is not None:
            reasoning, answer = self.split(text, completion.finished)
            if len(reasoning) > self.sent_reasoning:
                delta["reasoning_content"] = reasoning[self.sent_reasoning :]
                self.sent_reasoning = len(reasoning)
            if answer is None:
                return delta
            text = answer
            if self.parser is None:
                if len(text) > self.sent_content:
                    delta["content"] = text[self.sent_content :]
                    self.sent_content = len(text)
                return delta
        elif self.parser is None:
            if completion.delta_text:
                delta["content"] = completion.delta_text
            return delta
        content, call_deltas = self.parser.update(text, final=completion.finished)
        if content:
            delta["content"] = content
        if call_deltas:
            delta["tool_calls"] = [_call_delta(*d) for d in call_deltas]
        return delta

    def calls(self) -> list[ParsedCall]:
        return [c for c in self.parser.calls if c.complete] if self.parser is not None else []


def _call_delta(index: int, call_id: str | None, name: str | None, arguments: str) -> dict:
    if call_id is not None:
        return {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"index": index, "function": {"arguments": arguments}}
