"""Tool calling: the tool-call language of a model's format as a constraint, and calls parsed back out.

A model writes tool calls in the format its chat template taught it. Three are supported:

* ``hermes`` (Hermes, Qwen 2/2.5/3, and the default)::

      <tool_call>
      {"name": "get_weather", "arguments": {"city": "Paris"}}
      </tool_call>

  parallel calls are such blocks separated by one newline.
* ``llama3-json`` (Llama 3.1/3.2 JSON tool calls)::

      {"name": "get_weather", "parameters": {"city": "Paris"}}

  parallel calls are separated by ``"; "``.
* ``harmony`` (gpt-oss): after its reasoning messages, one commentary message to the function, its
  headers special tokens (matched as such: ``regex_ast.special_token``)::

      <|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}

  then ``<|call|>`` (an EOS) ends the reply: one call per reply.

``ToolCalls`` is a Constraint whose language is exactly the calls allowed by ``tool_choice``: each
call names one of the tools and its arguments are an instance of that tool's ``parameters`` schema
(compact JSON), so every parsed ``arguments`` string parses and validates. Under ``tool_choice="auto"``
the model may answer in free text that never contains the call opener, and calls may follow it. ``ToolCallParser``
reads calls out of text incrementally, so streamed deltas and the final answer are the same calls.

The server and the Python API share the rest: ``function_spec`` reads a tool given as an OpenAI dict,
a pydantic model class or a typed Python function; ``chat_text`` renders a conversation with tools
under the model's chat template (folding them into the system message for templates that know no
tools); ``read_calls`` turns a finished reply into ``ToolCall`` objects.
"""

from __future__ import annotations

import inspect
import json
import secrets
import typing
from collections.abc import Callable
from dataclasses import dataclass, field

from guided.constraints import Constraint
from guided.errors import ConfigError, LimitError, SchemaError
from guided.grammar.regex_ast import (
    alt,
    any_string,
    complement,
    literal,
    optional,
    repeat,
    seq,
    with_specials,
)
from guided.limits import Limits
from guided.schema.compiler import json_schema_to_node
from guided.schema.drafts import for_draft
from guided.schema.key_order import repeats_names, root_place
from guided.schema.unique_runtime import UniqueChecked
from guided.structural import HARMONY_CALL, HARMONY_END, json_content_node

__all__ = ["ToolFormat", "FORMATS", "detect_format", "ToolCalls", "ToolCallParser", "ParsedCall", "new_call_id",
           "Tool", "ToolCall", "function_spec", "chat_text", "read_calls"]


@dataclass(frozen=True, slots=True)
class ToolFormat:
    """How one call is written: ``opener + name + name_end + ARGS + closer``, calls joined by ``separator``."""

    name: str
    opener: str
    name_end: str
    closer: str
    separator: str

    def head(self, tool: str) -> str:
        return f"{self.opener}{tool}{self.name_end}"


FORMATS = {
    "hermes": ToolFormat("hermes", '<tool_call>\n{"name": "', '", "arguments": ', "}\n</tool_call>", "\n"),
    "llama3-json": ToolFormat("llama3-json", '{"name": "', '", "parameters": ', "}", "; "),
    # gpt-oss: a commentary message to the function (its headers are special tokens; the text here is
    # the reply decoded with them), one call per reply, ended by <|call|> (an EOS)
    "harmony": ToolFormat("harmony", f"{HARMONY_CALL}functions.", " <|constrain|>json<|message|>", "", ""),
}


HERMES_TOOLS_PROMPT = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)
LLAMA3_TOOLS_PROMPT = (
    "Given the following functions, please respond with a JSON for a function call with its proper "
    'arguments that best answers the given prompt.\n\nRespond in the format {{"name": function name, '
    '"parameters": dictionary of argument name and its value}}. Do not use variables.\n\n{tools}'
)


def detect_format(chat_template: str | None) -> str:
    """The tool-call format a chat template teaches: "hermes" (also the default), "llama3-json" or
    "harmony" (gpt-oss)."""
    text = chat_template or ""
    if "<|channel|>" in text:
        return "harmony"
    if "<tool_call>" in text:
        return "hermes"
    if "<|python_tag|>" in text or "Environment: ipython" in text or "ipython" in text:
        return "llama3-json"
    return "hermes"


@dataclass(frozen=True)
class ToolCalls(Constraint):
    """The output is tool calls (``mode="required"``), or free text or tool calls (``mode="auto"``).

    Parameters
    ----------
    tools : tuple of (name, parameters schema as JSON text, strict)
    format : str
        A key of ``FORMATS``.
    mode : str
        "required": at least one call; "auto": free text without the call opener, or calls.
    parallel : bool
        More than one call allowed.
    """

    tools: tuple[tuple[str, str, bool], ...]
    format: str = "hermes"
    mode: str = "required"
    parallel: bool = True
    answer: tuple[str, bool] | None = None  # under "auto": (schema as JSON text, strict) of the other reply

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ConfigError(f"tool-call format must be one of {sorted(FORMATS)}, got {self.format!r}")
        if self.mode not in ("auto", "required"):
            raise ConfigError(f"tool-call mode must be 'auto' or 'required', got {self.mode!r}")
        if not self.tools:
            raise ConfigError("tool calls need at least one tool")
        if self.answer is not None and self.mode != "auto":
            raise ConfigError("an answer schema beside tool calls needs tool_choice 'auto'")
        if self.answer is not None and self.format not in ("hermes", "harmony"):
            raise ConfigError(f"an answer schema beside tool calls is not supported in the {self.format} format "
                              "(its calls are JSON objects too, so a reply could be read either way)")  # fmt: skip

    @classmethod
    def from_functions(cls, functions: list[dict], strict: bool = True, **kwargs) -> ToolCalls:
        """From OpenAI ``function`` objects (``name``, ``parameters``, ``strict``). ``strict``: every
        tool's arguments are generated with objects closed where ``additionalProperties`` is unset
        (as ``JsonSchema``'s); False keeps their literal meaning, except for a tool whose own
        ``strict`` flag is true."""
        tools = []
        for f in functions:
            schema = f.get("parameters") or {"type": "object", "properties": {}}
            tools.append((f["name"], json.dumps(schema), strict or bool(f.get("strict"))))  # declared key order
        return cls(tuple(tools), **kwargs)

    @property
    def key(self) -> tuple:
        return ("tool_calls", self.format, self.mode, self.parallel, self.tools, self.answer)

    def compile(self, compiler, limits=None):
        """The compiled grammar of this constraint (the CompileService's generic hook); ``limits``
        (``Limits``) bound each tool's parameter schema like any other schema. Where some tool's
        arguments hold an object that may take a name twice (one open to undeclared names), the
        matcher refuses the repeat (``UniqueChecked`` over each call's JSON object), so every
        ``arguments`` string parses to the value it spells."""
        # a cached grammar skips the lowering of every tool's schema; the check is made once per grammar
        compiled = compiler.compile_lowered(("ast", self.key), lambda: self.node(limits))
        return self.checked(compiled, self.key)

    def checked(self, compiled, key: tuple):
        """``compiled`` (a language whose calls are this constraint's, e.g. after a reasoning section)
        with the run-time name check where some tool needs it, one per grammar (``key``)."""
        return UniqueChecked.shared(compiled, key, lambda: self._checked(compiled))

    @property
    def free_text_excludes(self) -> str:
        """What text outside calls never holds: the start of the call opener (it starts a call)."""
        fmt = FORMATS[self.format]
        return fmt.opener.split("\n")[0] if self.format == "hermes" else fmt.opener

    def _checked(self, compiled) -> UniqueChecked | None:
        """The grammar with the name check over each call's JSON object, or None when no tool's
        arguments hold an object that may take a name twice. Under one strictness for every tool:
        a check more where some are strict, never a refusal more."""
        keys = self.call_places()
        if keys is None:
            return None
        if self.format == "harmony":  # (the check reads calls written as JSON objects with their name)
            raise ConfigError("in gpt-oss's harmony format, tool parameters must not hold objects that may repeat a "
                              "name: keep them strict (objects closed), or set additionalProperties: false")  # fmt: skip
        strict = all(strict for _, _, strict in self.tools)
        return UniqueChecked(compiled, None, keys, strict, "declared", FORMATS[self.format].opener.encode())

    def call_places(self):
        """The key-order place of one call's JSON object (``{"name": ..., "arguments": ...}``) when an
        object of some tool's arguments may repeat a name, else None."""
        fmt = FORMATS[self.format]
        member = json.loads(fmt.name_end.strip(' ,:"').join('""'))  # "arguments" / "parameters"
        registry = {f"urn:guided:tool:{i}": for_draft(json.loads(schema)) for i, (_, schema, _) in enumerate(self.tools)}
        try:  # each tool under its own strictness (the places of the call below join every tool's)
            if not any(repeats_names(root_place(schema, registry), "declared", strict)
                       for schema, (_, _, strict) in zip(registry.values(), self.tools, strict=True)):  # fmt: skip
                return None
            call = {"type": "object", "additionalProperties": False, "required": ["name", member],
                    "properties": {"name": {"type": "string"}, member: {"anyOf": [{"$ref": uri} for uri in registry]}}}  # fmt: skip
            return root_place(call, registry)
        except (SchemaError, RecursionError):
            return None  # the lowering reports a malformed schema with its own message

    def node(self, limits=None):
        """The regex AST of the allowed outputs."""
        fmt = FORMATS[self.format]
        one = alt(*(self._call_node(fmt, name, schema, strict, limits) for name, schema, strict in self.tools))
        if self.format == "harmony":  # one call; under "auto" the final message instead (an answer, or text)
            if self.mode == "required":
                return one
            final = with_specials(HARMONY_END)
            return alt(one, seq(final, self._answer_node(limits) if self.answer is not None else any_string()))
        calls = seq(one, repeat(seq(literal(fmt.separator), one), 0, None)) if self.parallel else one
        if self.mode == "required":
            return calls
        if self.answer is not None:  # the calls, or an answer in the schema: the model chooses
            return alt(calls, self._answer_node(limits))
        # free text that never opens a call (so a call, once started, is always constrained), then
        # the calls or nothing: calls may follow text
        free = complement(seq(any_string(), literal(self.free_text_excludes), any_string()))
        return seq(free, optional(calls))

    def _answer_node(self, limits=None):
        """The answer's language: its schema (closed where strict; see ``json_content_node``)."""
        text, strict = self.answer
        return json_content_node(json.loads(text), strict, limits or Limits(), "response_format beside tools")

    @staticmethod
    def _call_node(fmt: ToolFormat, name: str, schema: str, strict: bool, limits=None):
        try:
            args = json_schema_to_node(
                json.loads(schema), whitespace="compact", strict=strict, limits=limits or Limits()
            )
        except SchemaError as e:
            raise SchemaError(f"tool {name!r}: parameters: {e}", e.path) from None
        except LimitError as e:
            raise LimitError(f"tool {name!r}: parameters: {e}") from None
        if fmt.name == "harmony":  # its headers are special tokens, which no text matches
            return seq(with_specials(fmt.head(name)), args)
        return seq(literal(fmt.head(name)), args, literal(fmt.closer))


def marker_prefix(text: str, marker: str) -> int:
    """The length of the longest end of ``text`` that begins ``marker`` (shorter than it): text held
    back while streaming, as it may still become the marker."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-k:]):
            return k
    return 0


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


@dataclass(slots=True)
class ParsedCall:
    """One call read so far: ``arguments`` grows until ``complete``."""

    index: int
    id: str
    name: str
    arguments: str = ""
    complete: bool = False


@dataclass(slots=True)
class ToolCallParser:
    """Reads tool calls out of a growing text in one format.

    Feed the whole text so far to ``update``; it returns the content delta (the text before the calls)
    and, per call, what is new: ``(index, id and name when the call first appears, argument fragment)``.
    A tail of the text that may still be the start of a call is held back.
    """

    format: ToolFormat
    calls: list[ParsedCall] = field(default_factory=list)
    content: str = ""  # free text emitted so far
    _in_calls: bool = False
    _pos: int = 0  # where the next unread call (or separator) starts, once in calls

    def update(self, text: str, final: bool = False) -> tuple[str, list[tuple[int, str | None, str | None, str]]]:
        """Consume ``text`` (everything so far); return (content delta, call deltas)."""
        delta = self._update_content(text, final) if not self._in_calls else ""
        return delta, (self._update_calls(text) if self._in_calls else [])

    def _update_content(self, text: str, final: bool) -> str:
        opener = self.format.opener
        end = text.find(opener)
        if end >= 0:  # the calls start here; the text before them is content
            self._in_calls, self._pos = True, end
        else:  # a tail that may still become the opener is held back
            end = len(text) if final else len(text) - marker_prefix(text, opener)
        delta = text[len(self.content) : end]
        self.content = text[:end]
        return delta

    def _update_calls(self, text: str) -> list[tuple[int, str | None, str | None, str]]:
        fmt, out = self.format, []
        while True:
            call = self.calls[-1] if self.calls and not self.calls[-1].complete else None
            if call is None:
                start = self._pos + (len(fmt.separator) if self.calls else 0)
                if not text.startswith(fmt.opener, start):
                    return out
                name_at = start + len(fmt.opener)
                end = text.find(fmt.name_end, name_at)
                if end < 0:
                    return out
                call = ParsedCall(len(self.calls), new_call_id(), text[name_at:end])
                self.calls.append(call)
                self._pos = end + len(fmt.name_end)
                out.append((call.index, call.id, call.name, ""))
            fragment = self._read_arguments(call, text)
            if fragment:
                if out and out[-1][0] == call.index:
                    index, cid, name, args = out[-1]
                    out[-1] = (index, cid, name, args + fragment)
                else:
                    out.append((call.index, None, None, fragment))
            if not call.complete:
                return out

    def _read_arguments(self, call: ParsedCall, text: str) -> str:
        """Append the new part of the call's arguments; mark it complete once its closer follows."""
        args_text = text[self._pos :]
        try:
            _, end = json.JSONDecoder().raw_decode(args_text)
        except json.JSONDecodeError:
            end = len(args_text)  # still inside the arguments
        else:
            closer = self.format.closer
            if args_text.startswith(closer, end):
                call.complete = True
                self._pos += end + len(closer)
        fragment = args_text[len(call.arguments) : end]
        call.arguments += fragment
        return fragment

    def finish(self, text: str) -> tuple[str, list[ParsedCall]]:
        """Read the final text: (content delta not yet emitted, the complete calls)."""
        delta, _ = self.update(text, final=True)
        return delta, [c for c in self.calls if c.complete]


# ---------------------------------------------------------------------------------------- tools in Python
@dataclass(frozen=True)
class Tool:
    """One tool: its OpenAI ``function`` object, and the Python side it came from (a pydantic model
    class its arguments parse into, or a function they are passed to)."""

    spec: dict  # {"name", "description"?, "parameters"?, "strict"?}
    model: object = None  # pydantic class the arguments validate into
    function: Callable | None = None

    @property
    def name(self) -> str:
        return self.spec["name"]


def function_spec(tool) -> Tool:
    """A tool as the Python API takes it: an OpenAI tool dict (``{"type": "function", "function":
    {...}}``, or the Responses API's flat ``{"type": "function", "name": ...}``), a pydantic model
    class (its name, docstring and schema), or a typed Python function (its name, docstring and
    parameters; a parameter without a default is required)."""
    from pydantic import BaseModel  # a dependency; imported here so that the server's parser stays light

    if isinstance(tool, dict):
        spec = tool.get("function", tool) if tool.get("type", "function") == "function" else None
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise ConfigError(f"a tool dict is an OpenAI function tool with a name, got {tool!r}")
        return Tool({k: v for k, v in spec.items() if k != "type"})
    if isinstance(tool, type) and issubclass(tool, BaseModel):
        return Tool(_spec(tool.__name__, tool.__doc__, tool.model_json_schema()), model=tool)
    if callable(tool) and hasattr(tool, "__name__"):
        model = _arguments_model(tool)
        return Tool(_spec(tool.__name__, tool.__doc__, model.model_json_schema()), model=model, function=tool)
    raise ConfigError(f"a tool is an OpenAI function dict, a pydantic model class or a function, got {tool!r}")


def _spec(name: str, doc: str | None, schema: dict) -> dict:
    schema = dict(schema)
    schema.pop("title", None)
    schema.pop("description", None)  # the docstring: the tool's description below
    spec = {"name": name, "parameters": schema}
    if doc and doc.strip():
        spec["description"] = inspect.cleandoc(doc).split("\n\n")[0]
    return spec


def _arguments_model(function: Callable):
    """A pydantic model of ``function``'s parameters (annotations resolved; none means any value)."""
    from pydantic import create_model  # as in function_spec

    try:
        hints = typing.get_type_hints(function)
    except Exception as e:
        raise ConfigError(f"cannot read the type hints of tool {function.__name__!r}: {e}") from e
    fields = {}
    for p in inspect.signature(function).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            raise ConfigError(f"tool {function.__name__!r}: parameter {p.name!r} cannot be given by name "
                              "from a JSON object (no *args, **kwargs or positional-only parameters)")  # fmt: skip
        default = ... if p.default is p.empty else p.default
        fields[p.name] = (hints.get(p.name, typing.Any), default)
    return create_model(function.__name__, **fields)


@dataclass
class ToolCall:
    """A tool call of a finished reply. ``arguments`` is the JSON text the model wrote (an instance of
    the tool's parameters schema); ``parsed`` is it validated into the tool's pydantic model (model
    and function tools) or parsed JSON (dict tools); ``run()`` calls a function tool with it."""

    id: str
    name: str
    arguments: str
    parsed: object = None
    function: Callable | None = None

    def run(self):
        """Call the function this tool came from with the call's arguments."""
        if self.function is None:
            raise ConfigError(f"tool {self.name!r} was not given as a Python function; read .parsed")
        return self.function(**{k: getattr(self.parsed, k) for k in type(self.parsed).model_fields})

    def as_dict(self) -> dict:
        """The call as an OpenAI ``tool_calls`` entry, to put back into the conversation."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


def read_calls(fmt: ToolFormat, text: str, tools: dict[str, Tool]) -> tuple[str, list[ToolCall]]:
    """(the free text before the calls, the complete calls) of a finished reply in format ``fmt``."""
    parser = ToolCallParser(fmt)
    parser.finish(text)
    calls = []
    for c in parser.calls:
        if not c.complete:
            continue
        tool = tools.get(c.name)
        if tool is not None and tool.model is not None:
            parsed = tool.model.model_validate_json(c.arguments)
        else:
            parsed = json.loads(c.arguments)
        calls.append(ToolCall(c.id, c.name, c.arguments, parsed, tool.function if tool else None))
    return parser.content, calls


# ---------------------------------------------------------------------------------------- prompts
def chat_text(tokenizer, messages: list[dict], tools: list[dict], fmt: ToolFormat, template_kwargs: dict) -> str:
    """The chat template's text of ``messages`` ending with the assistant's turn. ``tools`` (OpenAI tool
    dicts) go to a template that speaks of tools; for one that does not, they are folded into the
    system message, and earlier calls and results into plain text in ``fmt``. A call's
    ``arguments`` may be JSON text (as OpenAI sends them): templates get the parsed object."""
    messages = [_parsed_arguments(m) for m in messages]
    template = getattr(tokenizer, "chat_template", None) or ""
    kwargs = dict(template_kwargs)
    if tools and "tools" in template:
        kwargs["tools"] = tools
    else:
        messages = _fold_tools(messages, tools, fmt)
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kwargs)


def _parsed_arguments(message: dict) -> dict:
    if not message.get("tool_calls"):
        return message
    calls = []
    for c in message["tool_calls"]:
        function = dict(c["function"])
        if isinstance(function.get("arguments"), str):
            try:
                function["arguments"] = json.loads(function["arguments"])
            except json.JSONDecodeError:
                pass  # the template gets the text as it is
        calls.append({**c, "function": function})
    return {**message, "tool_calls": calls}


def _fold_tools(messages: list[dict], tools: list[dict], fmt: ToolFormat) -> list[dict]:
    """For templates that know nothing of tools: tools into the system message, calls and results
    into plain text in the model's tool-call format."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            calls = [f"{fmt.head(c['function']['name'])}{json.dumps(c['function']['arguments'])}{fmt.closer}"
                     for c in m.pop("tool_calls")]  # fmt: skip
            m["content"] = ((m["content"] + "\n") if m.get("content") else "") + fmt.separator.join(calls)
        if m["role"] == "tool":
            m = {"role": "user", "content": f"<tool_response>\n{m['content']}\n</tool_response>"}
        out.append({"role": m["role"], "content": m["content"]})
    if tools:
        listing = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        template = HERMES_TOOLS_PROMPT if fmt.name == "hermes" else LLAMA3_TOOLS_PROMPT
        block = template.format(tools=listing)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{block}"}
        else:
            out.insert(0, {"role": "system", "content": block})
    return out
