"""OpenAI request bodies as pydantic models: what the server accepts, field by field.

Unknown fields are an error (400 naming the field), never silently ignored; a few OpenAI fields that
change nothing here (``user``, ``metadata``, ``store``, ``service_tier``, ``prompt_cache_key``,
``safety_identifier``) are accepted and ignored. Known fields we cannot honour (``echo``, ``best_of`` > n,
non-text modalities, audio) are a 400 when set to anything but their default.

Structured-output extensions in the body (vLLM's names, with short aliases):
``guided_json`` (a JSON Schema), ``guided_regex`` / ``regex``, ``guided_choice`` / ``choice``,
``guided_grammar`` / ``grammar`` (Lark or GBNF, told apart by ``::=``).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "ChatCompletionRequest",
    "CompletionRequest",
    "ChatMessage",
    "Tool",
    "FunctionDef",
    "ResponseFormat",
    "StreamOptions",
]

TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JsonSchemaFormat(_Strict):
    name: str = Field(default="response", max_length=64)
    description: str | None = None
    schema_: dict[str, Any] | bool | None = Field(default=None, alias="schema")
    strict: bool | None = None

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ResponseFormat(_Strict):
    type: Literal["text", "json_object", "json_schema", "structural_tag"]
    json_schema: JsonSchemaFormat | None = None
    structures: list[dict[str, Any]] | None = None  # structural_tag: [{begin, schema, end}]
    triggers: list[str] | None = None  # structural_tag

    @model_validator(mode="after")
    def _needs_schema(self):
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("response_format.json_schema is required when type is 'json_schema'")
        if self.type == "structural_tag" and (self.structures is None or self.triggers is None):
            raise ValueError("response_format.structures and .triggers are required when type is 'structural_tag'")
        if self.type != "structural_tag" and (self.structures is not None or self.triggers is not None):
            raise ValueError("response_format.structures and .triggers belong to type 'structural_tag'")
        return self


class StructuredOutputs(_Strict):
    """vLLM's (>= 0.12) ``structured_outputs``: one of json, regex, choice, grammar, structural_tag,
    json_object; ``disable_any_whitespace`` writes JSON compactly."""

    json_: dict[str, Any] | bool | str | None = Field(default=None, alias="json")
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    structural_tag: dict[str, Any] | str | None = None
    json_object: bool | None = None
    disable_any_whitespace: bool = False
    whitespace_pattern: None = None  # named so that setting it is a clear error

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _one(self):
        given = [k for k in ("json_", "regex", "choice", "grammar", "structural_tag") if getattr(self, k) is not None]
        given += ["json_object"] if self.json_object else []
        if len(given) != 1:
            raise ValueError("structured_outputs takes exactly one of json, regex, choice, grammar, structural_tag, "
                             f"json_object; got {[g.rstrip('_') for g in given] or 'none'}")  # fmt: skip
        return self


class FunctionDef(_Strict):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @model_validator(mode="after")
    def _check_name(self):
        if not TOOL_NAME.match(self.name):
            raise ValueError(f"function name {self.name!r} must match [A-Za-z0-9_-]{{1,64}}")
        return self


class Tool(_Strict):
    type: Literal["function"] = "function"
    function: FunctionDef


class FunctionName(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"] = "function"
    function: FunctionName


class AllowedTools(_Strict):
    mode: Literal["auto", "required"] = "auto"
    tools: list[NamedToolChoice | dict[str, Any]]


class AllowedToolsChoice(_Strict):
    type: Literal["allowed_tools"]
    allowed_tools: AllowedTools


class ToolCallFunction(_Strict):
    name: str
    arguments: str


class ToolCall(_Strict):
    id: str
    type: Literal["function"] = "function"
    function: ToolCallFunction


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    refusal: str | None = None

    def text(self) -> str:
        """The message's text; parts other than text are an error."""
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        texts = []
        for part in self.content:
            if part.type not in ("text", "input_text", "output_text") or part.text is None:  # (Responses items too)
                raise ValueError(f"message content parts of type {part.type!r} are not supported (text only)")
            texts.append(part.text)
        return "".join(texts)


class StreamOptions(_Strict):
    include_usage: bool = False
    include_obfuscation: bool | None = None


class _Common(_Strict):
    """Fields shared by chat and completions requests."""

    model: str | None = None
    n: int = Field(default=1, ge=1, le=128)
    seed: int | None = Field(default=None, ge=-(2**63), le=2**64 - 1)
    stop: str | list[str] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    stream: bool = False
    stream_options: StreamOptions | None = None
    logit_bias: dict[str, float] | None = None
    # accepted and ignored: they change nothing in a local server
    user: str | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    # extensions (vLLM's names and short aliases)
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(default=None, ge=1e-4, le=1e4)
    min_tokens: int | None = Field(default=None, ge=0)
    ignore_eos: bool | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool | None = None
    skip_special_tokens: bool | None = None
    guided_json: dict[str, Any] | bool | str | None = None
    guided_regex: str | None = None
    regex: str | None = None
    guided_choice: list[str] | None = None
    choice: list[str] | None = None
    guided_grammar: str | None = None
    grammar: str | None = None
    guided_whitespace_pattern: None = None  # named so that setting it is a clear error
    structured_outputs: StructuredOutputs | None = None  # vLLM >= 0.12's spelling of the above
    budget_aware: bool | None = None  # guided's: a constrained output ends complete within max_tokens
    speculative: bool | None = None  # guided's: false opts this request out of the server's speculative decoding
    json_open_objects: bool | None = None  # guided's: JSON Schemas keep undeclared members (default: the server's)

    @model_validator(mode="after")
    def _checks(self):
        for token in self.logit_bias or {}:
            if not token.strip().isdigit():
                raise ValueError(f"logit_bias keys must be token ids (digit strings), got {token!r}")
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options is only allowed when stream is true")
        return self


class ChatCompletionRequest(_Common):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | AllowedToolsChoice | None = None
    parallel_tool_calls: bool | None = None
    modalities: list[Literal["text"]] | None = None
    reasoning_effort: None = None
    audio: None = None
    prediction: None = None
    web_search_options: None = None
    # extensions (vLLM's): the chat template's switches (e.g. enable_thinking), a reasoning budget
    chat_template_kwargs: dict[str, Any] | None = None
    max_reasoning_tokens: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _check(self):
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs requires logprobs to be true")
        if self.tool_choice not in (None, "none") and not self.tools:
            raise ValueError("tool_choice is set but no tools are given")
        names = [t.function.name for t in self.tools or []]
        if len(set(names)) != len(names):
            raise ValueError("tool names must be unique")
        return self


class CompletionRequest(_Common):
    prompt: str | list[str] | list[int] | list[list[int]] = Field(min_length=1)
    max_tokens: int | None = Field(default=16, ge=1)
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: Literal[False] = False
    best_of: int | None = Field(default=None, ge=1)
    suffix: None = None
    response_format: ResponseFormat | None = None

    @model_validator(mode="after")
    def _check(self):
        if self.best_of is not None and self.best_of != self.n:
            raise ValueError("best_of other than n is not supported")
        return self
