"""The OpenAI Responses API (``POST /v1/responses``) over the chat machinery.

A Responses request becomes a chat request (``ResponsesTurn.chat_request``): ``instructions`` the
system message, ``input`` the conversation (messages, ``function_call`` and ``function_call_output``
items), ``text.format`` the ``response_format``, function ``tools`` and ``tool_choice`` the chat's, so
constraints, tool calls, reasoning and limits behave exactly as in ``/v1/chat/completions``. The chat
reply comes back as output items (``output_items``): a ``reasoning`` item (reasoning models), a
``message`` with one ``output_text`` part, then one ``function_call`` per tool call. A stream turns the
chat chunks into the Responses events (``ResponseEvents``). Finished responses are kept in a bounded
in-memory store (``ResponseStore``) for ``previous_response_id`` and ``GET /v1/responses/{id}``;
``store: false`` keeps one out of it.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from guided.server.api_errors import ApiError
from guided.server.protocol import ChatCompletionRequest

__all__ = ["ResponsesRequest", "ResponsesTurn", "ResponseEvents", "ResponseStore", "STORE_SIZE"]

STORE_SIZE = 512  # responses kept for previous_response_id (least recently used go first)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = Field(default=None, max_length=64)
    description: str | None = None
    schema_: dict[str, Any] | bool | None = Field(default=None, alias="schema")
    strict: bool | None = None

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class TextConfig(_Strict):
    format: TextFormat | None = None
    verbosity: Literal["medium"] | None = None  # the only one a local model can honour: as it writes


class ResponsesRequest(_Strict):
    """``POST /v1/responses``. Unknown fields are a 400; ``metadata``, ``user``, ``service_tier``,
    ``prompt_cache_key``, ``safety_identifier`` are accepted and change nothing here. Extensions:
    vLLM's sampling fields, ``json_open_objects``, ``chat_template_kwargs``, ``max_reasoning_tokens``."""

    model: str | None = None
    input: str | list[dict[str, Any]] | None = None
    instructions: str | None = None
    text: TextConfig | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    include: list[str] | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    store: bool | None = None
    previous_response_id: str | None = None
    truncation: Literal["disabled"] | None = None
    background: Literal[False] | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    # named so that setting them is a clear error
    reasoning: None = None
    conversation: None = None
    prompt: None = None
    max_tool_calls: None = None
    # extensions
    seed: int | None = Field(default=None, ge=-(2**63), le=2**64 - 1)
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(default=None, ge=1e-4, le=1e4)
    json_open_objects: bool | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    max_reasoning_tokens: int | None = Field(default=None, ge=0)


class ResponseStore:
    """Finished responses by id with the conversation they end (chat messages, instructions left
    out as the Responses API does), least recently used first out past ``size``."""

    def __init__(self, size: int = STORE_SIZE):
        self.size = size
        self._entries: OrderedDict[str, tuple[dict, list[dict]]] = OrderedDict()

    def put(self, response: dict, messages: list[dict]) -> None:
        self._entries[response["id"]] = (response, messages)
        self._entries.move_to_end(response["id"])
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def get(self, response_id: str, param: str | None = None) -> tuple[dict, list[dict]]:
        entry = self._entries.get(response_id)
        if entry is None:
            raise ApiError(404, f"no response with id {response_id!r} is stored here (responses are kept in memory, "
                           f"the last {self.size}, unless sent with store: false)", param=param,
                           code="response_not_found")  # fmt: skip
        self._entries.move_to_end(response_id)
        return entry


class ResponsesTurn:
    """One Responses request: its chat request, and its response built from the chat reply."""

    def __init__(self, req: ResponsesRequest, store: ResponseStore):
        self.req = req
        self.id = f"resp_{secrets.token_hex(24)}"
        self.created = int(time.time())
        history = store.get(req.previous_response_id, "previous_response_id")[1] if req.previous_response_id else []
        if req.input is None and not history:
            raise ApiError(400, "input is required", param="input")
        self.history = history + _messages(req.input)  # the conversation this turn answers
        self.logprobs = "message.output_text.logprobs" in (req.include or []) or req.top_logprobs is not None
        unknown = sorted(set(req.include or []) - {"message.output_text.logprobs", "reasoning.encrypted_content"})
        if unknown:
            raise ApiError(400, f"include values {unknown} are not supported (message.output_text.logprobs is)",
                           param="include")  # fmt: skip

    # ------------------------------------------------------------------ request
    def chat_request(self, stream: bool) -> ChatCompletionRequest:
        req = self.req
        system = [{"role": "system", "content": req.instructions}] if req.instructions else []
        fields: dict[str, Any] = {
            "model": req.model, "messages": system + self.history, "stream": stream,
            "max_completion_tokens": req.max_output_tokens, "temperature": req.temperature, "top_p": req.top_p,
            "tools": _tools(req.tools), "tool_choice": _tool_choice(req.tool_choice),
            "parallel_tool_calls": req.parallel_tool_calls, "response_format": _response_format(req.text),
            "seed": req.seed, "top_k": req.top_k, "min_p": req.min_p, "repetition_penalty": req.repetition_penalty,
            "json_open_objects": req.json_open_objects, "chat_template_kwargs": req.chat_template_kwargs,
            "max_reasoning_tokens": req.max_reasoning_tokens,
        }  # fmt: skip
        if self.logprobs:
            fields.update(logprobs=True, top_logprobs=req.top_logprobs or 0)
        if stream:
            fields["stream_options"] = {"include_usage": True}
        fields = {k: v for k, v in fields.items() if v is not None}
        try:
            return ChatCompletionRequest.model_validate(fields)
        except ValueError as e:  # what the chat request refuses, said in this request's terms
            raise ApiError(400, _first_error(e)) from None

    # ------------------------------------------------------------------ response
    def response(self, status: str, output: list[dict], usage: dict | None, served_name: str) -> dict:
        req = self.req
        fmt = req.text.format.model_dump(by_alias=True, exclude_none=True) if req.text and req.text.format else {"type": "text"}
        return {
            "id": self.id, "object": "response", "created_at": self.created, "status": status,
            "error": None, "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": req.instructions, "max_output_tokens": req.max_output_tokens, "model": served_name,
            "output": output, "parallel_tool_calls": req.parallel_tool_calls is not False,
            "previous_response_id": req.previous_response_id, "reasoning": None, "store": req.store is not False,
            "temperature": req.temperature, "text": {"format": fmt}, "tool_choice": req.tool_choice or "auto",
            "tools": req.tools or [], "top_p": req.top_p, "truncation": "disabled", "usage": usage,
            "user": req.user, "metadata": req.metadata or {},
        }  # fmt: skip

    def stored_messages(self, message: dict) -> list[dict]:
        """The conversation up to and with this reply, as chat messages (for ``previous_response_id``)."""
        reply = {"role": "assistant", "content": message.get("content")}
        if message.get("tool_calls"):
            reply["tool_calls"] = message["tool_calls"]
        return [*self.history, reply]


def output_items(message: dict, status: str, logprobs: list | None = None) -> list[dict]:
    """A chat reply's ``message`` as Responses output items: reasoning, message, function calls."""
    items = []
    if message.get("reasoning_content"):
        items.append(_reasoning_item(_id("rs"), message["reasoning_content"], status))
    calls = message.get("tool_calls") or []
    if message.get("content") or not calls:
        items.append(_message_item(_id("msg"), message.get("content") or "", status, logprobs))
    for call in calls:
        items.append(_call_item(_id("fc"), call["id"], call["function"]["name"], call["function"]["arguments"], status))
    return items


def usage_of(chat_usage: dict) -> dict:
    return {"input_tokens": chat_usage["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": chat_usage["prompt_tokens_details"]["cached_tokens"]},
            "output_tokens": chat_usage["completion_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": chat_usage["total_tokens"]}  # fmt: skip


def status_of(finish_reason: str | None) -> str:
    return "incomplete" if finish_reason == "length" else "completed"


class ResponseEvents:
    """Chat stream chunks (one choice) in, Responses stream events out, each with its
    ``sequence_number``. Items open as their first delta comes and close in order; the last event is
    ``response.completed`` (``response.incomplete`` when ``max_output_tokens`` cut the reply)."""

    def __init__(self, turn: ResponsesTurn, served_name: str):
        self.turn, self.name = turn, served_name
        self.seq = 0
        self.items: list[dict] = []  # output items, as they stand
        self.open: dict | None = None  # the item being written
        self.calls: dict[int, dict] = {}  # chat tool-call index -> its function_call item
        self.message: dict = {"content": None, "tool_calls": []}  # the reply, as a chat message
        self.status: str | None = None  # of the reply, once its finish reason came
        self.usage: dict | None = None
        self.final: dict | None = None  # the finished response

    def _event(self, kind: str, **fields) -> dict:
        self.seq += 1
        return {"type": kind, "sequence_number": self.seq - 1, **fields}

    def start(self) -> list[dict]:
        snapshot = self.turn.response("in_progress", [], None, self.name)
        return [self._event("response.created", response=snapshot), self._event("response.in_progress", response=snapshot)]

    def chunk(self, chunk: dict) -> list[dict]:
        events: list[dict] = []
        for choice in chunk.get("choices", []):
            delta = choice.get("delta") or {}
            lp = (choice.get("logprobs") or {}).get("content") or []
            if delta.get("reasoning_content"):
                events += self._write("reasoning", delta["reasoning_content"])
            if delta.get("content"):
                events += self._write("message", delta["content"], lp)
            for call in delta.get("tool_calls") or []:
                events += self._call(call)
            if choice.get("finish_reason"):
                self.status = status_of(choice["finish_reason"])
        if chunk.get("usage"):
            self.usage = usage_of(chunk["usage"])
        return events

    def finish(self) -> list[dict]:
        status = self.status or "incomplete"
        events = self._close(status)
        self.final = self.turn.response(status, self.items, self.usage, self.name)
        events.append(self._event(f"response.{status}", response=self.final))
        return events

    # ------------------------------------------------------------------ items
    def _begin(self, item: dict) -> list[dict]:
        events = self._close("completed")
        self.items.append(item)
        self.open = item
        added = {**item, "content": []} if "content" in item else dict(item)  # parts come with their own events
        events.append(self._event("response.output_item.added", output_index=len(self.items) - 1, item=added))
        if item["type"] == "message":
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            events.append(self._event("response.content_part.added", item_id=item["id"], output_index=len(self.items) - 1,
                                      content_index=0, part=part))  # fmt: skip
        return events

    def _write(self, kind: str, text: str, logprobs: list | None = None) -> list[dict]:
        events = []
        if self.open is None or self.open["type"] != kind:
            events += self._begin(_reasoning_item(_id("rs"), "", "in_progress") if kind == "reasoning"
                                  else _message_item(_id("msg"), "", "in_progress", [] if self.turn.logprobs else None))  # fmt: skip
        item, index = self.open, len(self.items) - 1
        if kind == "reasoning":
            item["content"][0]["text"] += text
            events.append(self._event("response.reasoning_text.delta", item_id=item["id"], output_index=index,
                                      content_index=0, delta=text))  # fmt: skip
        else:
            part = item["content"][0]
            part["text"] += text
            if part.get("logprobs") is not None:
                part["logprobs"] += logprobs or []
            self.message["content"] = (self.message["content"] or "") + text
            events.append(self._event("response.output_text.delta", item_id=item["id"], output_index=index,
                                      content_index=0, delta=text, logprobs=logprobs or []))  # fmt: skip
        return events

    def _call(self, delta: dict) -> list[dict]:
        events = []
        item = self.calls.get(delta["index"])
        if item is None:
            function = delta["function"]
            item = self.calls[delta["index"]] = _call_item(_id("fc"), delta["id"], function["name"], "", "in_progress")
            self.message["tool_calls"].append({"id": delta["id"], "type": "function",
                                               "function": {"name": function["name"], "arguments": ""}})  # fmt: skip
            events += self._begin(item)
        arguments = delta["function"].get("arguments") or ""
        if arguments:
            item["arguments"] += arguments
            self.message["tool_calls"][-1]["function"]["arguments"] += arguments
            events.append(self._event("response.function_call_arguments.delta", item_id=item["id"],
                                      output_index=self.items.index(item), delta=arguments))  # fmt: skip
        return events

    def _close(self, status: str) -> list[dict]:
        item, self.open = self.open, None
        if item is None:
            return []
        index = self.items.index(item)
        events = []
        if item["type"] == "message":
            part = item["content"][0]
            events.append(self._event("response.output_text.done", item_id=item["id"], output_index=index,
                                      content_index=0, text=part["text"], logprobs=part.get("logprobs") or []))  # fmt: skip
            events.append(self._event("response.content_part.done", item_id=item["id"], output_index=index,
                                      content_index=0, part=_copy(part)))  # fmt: skip
        elif item["type"] == "reasoning":
            events.append(self._event("response.reasoning_text.done", item_id=item["id"], output_index=index,
                                      content_index=0, text=item["content"][0]["text"]))  # fmt: skip
        else:
            events.append(self._event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                                      name=item["name"], arguments=item["arguments"]))  # fmt: skip
        item["status"] = status
        events.append(self._event("response.output_item.done", output_index=index, item=_copy(item)))
        return events


# ---------------------------------------------------------------------- request parts
def _messages(value) -> list[dict]:
    """``input`` as chat messages: a text is one user message; items are messages, function calls
    (joined to the assistant message before them) and their outputs (tool messages)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    out: list[dict] = []
    for i, item in enumerate(value):
        where = f"input[{i}]"
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise ApiError(400, f"{where}.role must be user, system, developer or assistant", param=f"{where}.role")
            _only(item, {"type", "role", "content", "id", "status", "phase"}, where)
            out.append({"role": role, "content": item.get("content")})  # text parts: ChatMessage.text
        elif kind == "function_call":
            _only(item, {"type", "call_id", "name", "arguments", "id", "status"}, where)
            call = {"id": _string(item, "call_id", where), "type": "function",
                    "function": {"name": _string(item, "name", where), "arguments": _string(item, "arguments", where)}}  # fmt: skip
            if out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            _only(item, {"type", "call_id", "output", "id", "status"}, where)
            out.append({"role": "tool", "tool_call_id": _string(item, "call_id", where), "content": item.get("output")})
        elif kind == "reasoning":
            continue  # earlier reasoning: the chat templates leave it out of the prompt
        else:
            raise ApiError(400, f"{where}: input items of type {kind!r} are not supported (message, function_call, "
                           "function_call_output and reasoning are)", param=f"{where}.type")  # fmt: skip
    return out


def _string(item: dict, key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise ApiError(400, f"{where}.{key} must be a string", param=f"{where}.{key}")
    return value


def _only(item: dict, keys: set, where: str) -> None:
    unknown = sorted(set(item) - keys)
    if unknown:
        raise ApiError(400, f"{where}: unknown field {unknown[0]!r}", param=f"{where}.{unknown[0]}")


def _tools(tools) -> list[dict] | None:
    if not tools:
        return None
    out = []
    for i, tool in enumerate(tools):
        if tool.get("type") != "function":
            raise ApiError(400, f"tools[{i}]: tools of type {tool.get('type')!r} are not supported (function tools are)",
                           param=f"tools[{i}].type")  # fmt: skip
        _only(tool, {"type", "name", "description", "parameters", "strict"}, f"tools[{i}]")
        function = {k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None}
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice):
    if choice is None or isinstance(choice, str):
        return choice
    kind = choice.get("type")
    if kind == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    if kind == "allowed_tools":
        tools = [{"type": "function", "function": {"name": t.get("name")}} for t in choice.get("tools") or []]
        return {"type": "allowed_tools", "allowed_tools": {"mode": choice.get("mode", "auto"), "tools": tools}}
    raise ApiError(400, f"tool_choice {choice!r} is not supported ('none', 'auto', 'required', a function or "
                   "allowed_tools)", param="tool_choice")  # fmt: skip


def _response_format(text: TextConfig | None):
    fmt = text.format if text is not None else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"type": "json_object"}
    if fmt.schema_ is None:
        raise ApiError(400, "text.format.schema is required when its type is 'json_schema'", param="text.format.schema")
    spec = {"name": fmt.name or "response", "schema": fmt.schema_, "description": fmt.description, "strict": fmt.strict}
    return {"type": "json_schema", "json_schema": {k: v for k, v in spec.items() if v is not None}}


def _first_error(e: ValueError) -> str:
    errors = getattr(e, "errors", lambda: [])()
    return errors[0].get("msg", str(e)) if errors else str(e)


# ---------------------------------------------------------------------- items
def _id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"


def _message_item(item_id: str, text: str, status: str, logprobs: list | None = None) -> dict:
    part = {"type": "output_text", "text": text, "annotations": []}
    if logprobs is not None:
        part["logprobs"] = logprobs
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": [part]}


def _reasoning_item(item_id: str, text: str, status: str) -> dict:
    return {"type": "reasoning", "id": item_id, "summary": [], "content": [{"type": "reasoning_text", "text": text}],
            "status": status}  # fmt: skip


def _call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict:
    return {"type": "function_call", "id": item_id, "call_id": call_id, "name": name, "arguments": arguments,
            "status": status}  # fmt: skip


def _copy(item: dict) -> dict:
    out = dict(item)
    if "content" in out:
        out["content"] = [dict(p) for p in out["content"]]
    return out
