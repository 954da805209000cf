"""Tool-call formats and the incremental parser: streamed pieces reassemble into the final calls."""

from __future__ import annotations

import json
import random

import jsonschema
import numpy as np
import pytest
from json_schema_oracle import one_value

from guided.errors import ConfigError
from guided.schema.unique_runtime import UniqueChecked
from guided.tool_calls import FORMATS, ToolCallParser, ToolCalls, detect_format

CALLS = [("get_weather", {"city": "Paris", "nested": {"a": [1, 2]}}), ("get_time", {"zone": "utc"}), ("noop", {})]


def _text(fmt_name: str, calls) -> str:
    fmt = FORMATS[fmt_name]
    return fmt.separator.join(f"{fmt.head(n)}{json.dumps(a, separators=(',', ':'))}{fmt.closer}" for n, a in calls)


@pytest.mark.parametrize("fmt_name", sorted(FORMATS))
@pytest.mark.parametrize("step", [1, 3, 7, 1000])
def test_stream_equals_final(fmt_name, step):
    text = _text(fmt_name, CALLS)
    parser = ToolCallParser(FORMATS[fmt_name])
    streamed: dict[int, list] = {}
    for end in range(step, len(text) + step, step):
        content, deltas = parser.update(text[:end], final=end >= len(text))
        assert content == ""
        for index, call_id, name, fragment in deltas:
            entry = streamed.setdefault(index, [call_id, name, ""])
            entry[2] += fragment
    final = ToolCallParser(FORMATS[fmt_name])
    _, calls = final.finish(text)
    assert [(c.name, json.loads(c.arguments)) for c in calls] == CALLS
    assert [(e[1], e[2]) for _, e in sorted(streamed.items())] == [(c.name, c.arguments) for c in calls]
    assert all(e[0].startswith("call_") for e in streamed.values())


def test_content_held_back_only_while_it_may_open_a_call():
    parser = ToolCallParser(FORMATS["hermes"])
    assert parser.update("<tool") == ("", [])
    content, deltas = parser.update("<tools are great", final=False)
    assert content == "<tools are great" and deltas == []
    parser = ToolCallParser(FORMATS["hermes"])
    assert parser.finish("<tool")[0] == "<tool"  # the text ended: it was content after all


def test_truncated_call_is_not_returned():
    text = _text("hermes", CALLS[:1])[:-5]
    assert ToolCallParser(FORMATS["hermes"]).finish(text)[1] == []


@pytest.mark.parametrize(
    "template, expected",
    [
        ("{% if tools %}<tool_call>{% endif %}", "hermes"),
        ("<|start_header_id|>ipython<|end_header_id|>", "llama3-json"),
        ("{{ '<|python_tag|>' }}", "llama3-json"),
        ("<|im_start|>", "hermes"),
        (None, "hermes"),
    ],
)
def test_detect_format(template, expected):
    assert detect_format(template) == expected


def test_tool_calls_constraint_checks():
    with pytest.raises(ConfigError):
        ToolCalls((), mode="required")
    with pytest.raises(ConfigError):
        ToolCalls((("f", "{}", False),), mode="sometimes")
    tc = ToolCalls.from_functions([{"name": "f"}], mode="auto", parallel=False)
    assert tc.key[0] == "tool_calls" and tc.node() is not None


# ---------------------------------------------------------------------- repeated names in arguments
PAIR = {"type": "object", "patternProperties": {"^[ab]$": {"type": "integer"}}, "additionalProperties": False,
        "minProperties": 2}  # fmt: skip
OPEN_TOOLS = [{"name": "pair", "parameters": PAIR},
              {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
              {"name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}},
                                             "required": ["a"], "additionalProperties": False}, "strict": True}]  # fmt: skip


def _taken(matcher, text: str) -> int:
    """How many bytes of text the matcher takes, one at a time."""
    data = text.encode()
    for i in range(len(data)):
        if not matcher.accept_bytes(data[i : i + 1]):
            return i
    return len(data)


@pytest.fixture(scope="module")
def compiler(vocab_builtin):
    from guided.grammar.compiler import GrammarCompiler

    return GrammarCompiler(vocab_builtin)


@pytest.mark.parametrize("fmt", ["hermes", "llama3-json"])
@pytest.mark.parametrize("mode", ["required", "auto"])
def test_arguments_never_repeat_a_name(compiler, fmt, mode):
    """An argument object open to more names refuses one written twice, in every call of the output;
    the same names in other objects, in other calls, or in free text stay allowed."""
    compiled = ToolCalls.from_functions(OPEN_TOOLS, format=fmt, mode=mode, strict=False).compile(compiler)
    f = FORMATS[fmt]

    def call(name, args):
        return f"{f.head(name)}{args}{f.closer}"

    good = f.separator.join([call("get_weather", '{"city":"x","a":1,"b":{"a":1,"c":[{"a":2}]}}'),
                             call("pair", '{"a":1,"b":2}'), call("pair", '{"b":1,"a":2}')])  # fmt: skip
    m = compiled.matcher()
    assert _taken(m, good) == len(good.encode()) and m.is_accepting()
    # refused at the repeated name's closing quote, or at its first letter where only the names a
    # and b fit (then no name left to write begins with it)
    for first, args, back in [("", '{"a":1,"a":2}', 1), ("", '{"city":"x","b":{"q":1,"q":2}}', 0),
                              (call("add", '{"a":1}') + f.separator, '{"city":"x","city":"y"}', 0)]:  # fmt: skip
        name = "pair" if args.startswith('{"a"') else "get_weather"
        text = first + call(name, args)
        assert _taken(compiled.matcher(), text) == text.rindex('":') - back, text
    if mode == "auto":  # free text is not a call: its braces are not read as JSON
        m = compiled.matcher()
        text = 'Use {"a": 1, "a": 2} here'
        assert _taken(m, text) == len(text) and m.is_accepting()


def test_arguments_are_closed_by_default(compiler):
    """Tools as clients send them (no strict): the arguments hold the declared names only, so they
    need no run-time name check; ``strict=False`` keeps the literal meaning (any other name)."""
    tools = [t for t in OPEN_TOOLS if t["name"] != "pair"]
    head, closer = FORMATS["hermes"].head("get_weather"), FORMATS["hermes"].closer
    closed = ToolCalls.from_functions(tools).compile(compiler)
    literal = ToolCalls.from_functions(tools, strict=False).compile(compiler)
    assert not isinstance(closed, UniqueChecked) and isinstance(literal, UniqueChecked)
    for text, ok in ((f'{head}{{"city":"x"}}{closer}', True), (f'{head}{{"city":"x","a":1}}{closer}', False)):
        assert (_taken(closed.matcher(), text) == len(text.encode())) == ok, text
        assert _taken(literal.matcher(), text) == len(text.encode()), text


def test_strict_closed_arguments_need_no_check(compiler):
    closed = [t for t in OPEN_TOOLS if t.get("strict")]
    assert not isinstance(ToolCalls.from_functions(closed).compile(compiler), UniqueChecked)


@pytest.mark.parametrize("fmt", ["hermes", "llama3-json"])
def test_random_calls_never_dead_end_nor_repeat_a_name(compiler, vocab_builtin, fmt):
    compiled = ToolCalls.from_functions(OPEN_TOOLS[:2], format=fmt, parallel=True).compile(compiler)
    f = FORMATS[fmt]
    rng = random.Random(5)
    finished = 0
    # the tokens that can end a string, a member or a call: EOS, or a quote, brace, comma or '<'
    closers = np.array([compiled.is_eos(t) or any(c in tok for c in b'"},<') for t, tok in enumerate(vocab_builtin.tokens)])
    for _ in range(10):
        m, out = compiled.matcher(), b""
        for _ in range(300):
            ids = np.flatnonzero(m.allowed_tokens())
            allowed = ids.tolist()
            assert allowed, out  # never a dead end
            closing = ids[closers[ids]].tolist()
            t = rng.choice(closing if closing and rng.random() < 0.6 else allowed)
            if compiled.is_eos(t):
                assert m.is_accepting()
                finished += 1
                for one in out.decode().split(f.separator if fmt == "llama3-json" else "\n<tool_call>\n"):
                    body = one[one.index("{") : one.rindex("}") + 1] if fmt == "llama3-json" else one
                    body = body[body.index("{") : body.rindex("}") + 1]
                    jsonschema.validate(one_value(body)["arguments" if fmt == "hermes" else "parameters"],
                                        {"anyOf": [t["parameters"] for t in OPEN_TOOLS[:2]]})  # fmt: skip
                break
            assert m.accept_token(t)
            out += vocab_builtin.tokens[t]
    assert finished


def test_requests_for_the_same_tools_share_one_checked_grammar(compiler, monkeypatch):
    """A second compile of the same tools is the cached grammar and its check: no schema is lowered
    again, and the check's memos serve every request."""
    tools = ToolCalls.from_functions(OPEN_TOOLS)
    first = tools.compile(compiler)
    monkeypatch.setattr(ToolCalls, "node", lambda self, limits=None: pytest.fail("lowered again"))
    assert tools.compile(compiler) is first and isinstance(first, UniqueChecked)


@pytest.mark.parametrize("fmt_name", sorted(FORMATS))
@pytest.mark.parametrize("step", [1, 4, 1000])
def test_calls_after_text(fmt_name, step):
    """Under tool_choice auto, calls may follow text: streamed, the text comes as content (a tail that
    may open a call held back) and the calls as deltas; the same as the final reading."""
    lead = "Let me look that up <tool and then\n"
    text = lead + _text(fmt_name, CALLS[:2])
    parser = ToolCallParser(FORMATS[fmt_name])
    content, args = "", {}
    for end in range(step, len(text) + step, step):
        delta, deltas = parser.update(text[:end], final=end >= len(text))
        content += delta
        assert lead.startswith(content)
        for index, _, _, fragment in deltas:
            args[index] = args.get(index, "") + fragment
    final = ToolCallParser(FORMATS[fmt_name])
    delta, calls = final.finish(text)
    assert content == delta == final.content == lead
    assert [(c.name, json.loads(c.arguments)) for c in calls] == CALLS[:2]
    assert [args[i] for i in sorted(args)] == [c.arguments for c in calls]


@pytest.mark.parametrize("fmt", ["hermes", "llama3-json"])
def test_the_auto_language_takes_calls_after_text(compiler, fmt):
    compiled = ToolCalls.from_functions(OPEN_TOOLS, format=fmt, mode="auto").compile(compiler)
    f = FORMATS[fmt]
    call = f"{f.head('add')}" + '{"a":1}' + f.closer
    for text in ["Sure.\n" + call, call, "Sure.", ""]:
        m = compiled.matcher()
        assert _taken(m, text) == len(text.encode()) and m.is_accepting(), text
    # the opener in free text starts a call: what follows must be one
    bad = "Sure " + f.opener + "nope"
    assert _taken(compiled.matcher(), bad) < len(bad.encode())


def test_chat_message_of_text_then_calls():
    """The server's chat message and stream deltas for a reply that writes text, then a call."""
    from types import SimpleNamespace

    from guided.server.responses import ChatChoiceState

    text = "Checking.\n" + _text("hermes", CALLS[:1])
    final = SimpleNamespace(text=text, finished=True, delta_text="")
    message, calls = ChatChoiceState(0, FORMATS["hermes"]).message(final)
    assert message["content"] == "Checking.\n" and len(calls) == 1
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == CALLS[0][1]
    state, content, args = ChatChoiceState(0, FORMATS["hermes"]), "", ""
    for end in range(1, len(text) + 1):
        delta = state.delta(SimpleNamespace(text=text[:end], finished=end == len(text), delta_text=""))
        content += delta.get("content") or ""
        args += "".join(c["function"]["arguments"] for c in delta.get("tool_calls") or [])
    assert content == message["content"] and args == message["tool_calls"][0]["function"]["arguments"]



@pytest.mark.parametrize("fmt", ["hermes", "llama3-json"])
def test_calls_after_reasoning_keep_the_name_check(compiler, fmt):
    """A reasoning model's tool calls: the reasoning, then calls whose argument objects never repeat
    a name; the reasoning never holds the call opener (the check reads calls from it)."""
    from guided.constraints import Reasoning
    from guided.structural import compile_reasoning

    tools = ToolCalls.from_functions(OPEN_TOOLS, format=fmt, mode="required")
    compiled = compile_reasoning(compiler, Reasoning(tools))
    assert isinstance(compiled, UniqueChecked)
    f = FORMATS[fmt]
    good = "I should call it.</think>\n" + f"{f.head('pair')}" + '{"a":1,"b":2}' + f.closer
    m = compiled.matcher()
    assert _taken(m, good) == len(good.encode()) and m.is_accepting()
    repeated = "ok</think>" + f"{f.head('pair')}" + '{"a":1,"a":2}'
    assert _taken(compiled.matcher(), repeated) == repeated.rindex('":') - 1
    opener_in_reasoning = "think " + tools.free_text_excludes + " more</think>"
    assert _taken(compiled.matcher(), opener_in_reasoning) < len(opener_in_reasoning.encode())


def test_tools_or_an_answer_under_auto(compiler):
    """Under tool_choice auto with a response_format: the reply is tool calls or an answer in the
    schema (closed where strict), nothing else; a schema that could repeat a name is refused."""
    answer = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    tc = ToolCalls.from_functions(OPEN_TOOLS[2:], mode="auto", answer=(json.dumps(answer), True))
    compiled = tc.compile(compiler)
    f = FORMATS["hermes"]
    for text in ['{"city": "Paris"}', f"{f.head('add')}" + '{"a":1}' + f.closer]:
        m = compiled.matcher()
        assert _taken(m, text) == len(text.encode()) and m.is_accepting(), text
    for text in ["Sure, Paris.", '{"city": "Paris", "x": 1}', '{"town": "Paris"}']:
        m = compiled.matcher()
        assert not (_taken(m, text) == len(text.encode()) and m.is_accepting()), text
    with pytest.raises(ConfigError, match="cannot repeat a name"):
        ToolCalls.from_functions(OPEN_TOOLS[2:], mode="auto", answer=(json.dumps(answer), False)).compile(compiler)
    with pytest.raises(ConfigError, match="needs tool_choice 'auto'"):
        ToolCalls.from_functions(OPEN_TOOLS[2:], mode="required", answer=(json.dumps(answer), True))
    with pytest.raises(ConfigError, match="not supported in the llama3-json format"):
        ToolCalls.from_functions(OPEN_TOOLS[2:], mode="auto", format="llama3-json", answer=(json.dumps(answer), True))
