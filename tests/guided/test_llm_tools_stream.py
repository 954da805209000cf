"""The Python API beyond batches: ``LLM.chat(tools=...)``, ``LLM.stream`` and ``AsyncLLM``, on the
default tiny random-weight model (meaningless text; the constraints keep it valid).

Oracles: ``jsonschema`` for tool arguments, pydantic for parsed answers, ``LLM.generate`` for what a
stream must add up to, and the block manager for what an aborted request must give back."""

from __future__ import annotations

import asyncio
import json
from typing import Literal

import jsonschema
import pytest
from pydantic import BaseModel, Field

from guided.constraints import Regex
from guided.engine.sampling_params import SamplingParams
from guided.errors import ConfigError, GuidedError
from guided.llm import LLM, AsyncLLM
from guided.tool_calls import ToolCall, function_spec

GREEDY = SamplingParams(temperature=0.0, max_tokens=80)
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


class Weather(BaseModel):
    """Weather in a city.

    More text that is not the description."""

    city: str = Field(max_length=6)
    unit: Literal["c", "f"]


def get_time(zone: Literal["utc", "cet"], precise: bool = False) -> str:
    """The time in a zone."""
    return f"time in {zone} ({'precise' if precise else 'rough'})"


NOOP = {"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}}}
TOOLS = [Weather, get_time, NOOP]
SCHEMAS = {function_spec(t).name: function_spec(t).spec["parameters"] for t in TOOLS}


@pytest.fixture(scope="module")
def llm():
    return LLM()


def check_calls(calls: list[ToolCall], allowed: set[str]) -> None:
    for call in calls:
        assert call.name in allowed and call.id.startswith("call_")
        args = json.loads(call.arguments)
        jsonschema.validate(args, SCHEMAS[call.name])
        assert not set(args) - set(SCHEMAS[call.name]["properties"])  # closed: no invented key


def test_function_spec_reads_each_kind_of_tool():
    assert function_spec(Weather).spec == {
        "name": "Weather", "description": "Weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 6, "title": "City"},
            "unit": {"enum": ["c", "f"], "type": "string", "title": "Unit"}}, "required": ["city", "unit"]}}  # fmt: skip
    spec = function_spec(get_time).spec
    assert spec["name"] == "get_time" and spec["description"] == "The time in a zone."
    assert spec["parameters"]["required"] == ["zone"] and spec["parameters"]["properties"]["precise"]["default"] is False
    assert function_spec(NOOP).spec == NOOP["function"]
    flat = {"type": "function", "name": "noop", "parameters": {"type": "object"}}  # the Responses API's shape
    assert function_spec(flat).spec == {"name": "noop", "parameters": {"type": "object"}}


@pytest.mark.parametrize("bad, message", [
    (lambda *args: None, "cannot be given by name"),
    ({"type": "function", "function": {"description": "no name"}}, "with a name"),
    (42, "a tool is"),
])  # fmt: skip
def test_bad_tools_are_clear_errors(llm, bad, message):
    with pytest.raises(ConfigError, match=message):
        llm.chat(ASK, GREEDY, tools=[bad])


def test_tool_choice_errors(llm):
    with pytest.raises(ConfigError, match="not among the tools"):
        llm.chat(ASK, GREEDY, tools=TOOLS, tool_choice="get_weather")
    with pytest.raises(ConfigError, match="two tools are named"):
        llm.chat(ASK, GREEDY, tools=[NOOP, NOOP])
    with pytest.raises(ConfigError, match="must be a JSON Schema"):
        llm.chat(ASK, GREEDY, tools=TOOLS, response_format=Regex("a+"))


@pytest.mark.parametrize("seed", [None, 1, 2])
def test_required_gives_valid_calls(llm, seed):
    params = GREEDY if seed is None else SamplingParams(temperature=1.0, seed=seed, max_tokens=120)
    (out,) = llm.chat(ASK, params, tools=TOOLS, tool_choice="required")
    c = out.outputs[0]
    assert c.finish_reason == "stop" and c.tool_calls, c.text
    check_calls(c.tool_calls, set(SCHEMAS))
    for call in c.tool_calls:  # parsed: into the model of a model or function tool, JSON for a dict tool
        if call.name == "Weather":
            assert isinstance(call.parsed, Weather) and call.function is None
        elif call.name == "noop":
            assert call.parsed == {}


@pytest.mark.parametrize("choice", ["get_time", {"type": "function", "function": {"name": "get_time"}}, get_time])
def test_named_tool_is_called_once_and_runs(llm, choice):
    (out,) = llm.chat(ASK, GREEDY, tools=TOOLS, tool_choice=choice)
    (call,) = out.outputs[0].tool_calls
    check_calls([call], {"get_time"})
    args = json.loads(call.arguments)
    assert call.run() == get_time(**args)
    assert call.as_dict() == {"id": call.id, "type": "function",
                              "function": {"name": "get_time", "arguments": call.arguments}}  # fmt: skip


def test_none_keeps_tools_in_the_prompt_only(llm):
    (out,) = llm.chat(ASK, SamplingParams(temperature=0.0, max_tokens=12), tools=TOOLS, tool_choice="none")
    assert out.outputs[0].tool_calls is None and out.outputs[0].content is None  # plain reply, nothing read
    prompt = llm.tokenizer.decode(llm.render_chat(ASK, tools=[{"type": "function", "function": function_spec(t).spec}
                                                              for t in TOOLS]))  # fmt: skip
    assert all(name in prompt for name in SCHEMAS) and "<tool_call>" in prompt
    assert out.prompt_token_ids == llm.render_chat(ASK, tools=[{"type": "function", "function": function_spec(t).spec}
                                                               for t in TOOLS])  # fmt: skip


@pytest.mark.parametrize("seed", range(4))
def test_auto_with_response_format_is_calls_or_an_answer(llm, seed):
    params = SamplingParams(temperature=1.0, seed=seed, max_tokens=120)
    (out,) = llm.chat(ASK, params, tools=[get_time], response_format=Weather)
    c = out.outputs[0]
    assert c.finish_reason == "stop", c.text
    if c.tool_calls:
        check_calls(c.tool_calls, {"get_time"})
        assert c.parsed is None
    else:
        assert isinstance(c.parsed, Weather) and c.content == c.text
        assert Weather.model_validate_json(c.text) == c.parsed


def test_a_conversation_with_calls_and_results_renders(llm):
    (out,) = llm.chat(ASK, GREEDY, tools=[get_time], tool_choice="get_time")
    (call,) = out.outputs[0].tool_calls
    turn = ASK + [{"role": "assistant", "content": None, "tool_calls": [call.as_dict()]},
                  {"role": "tool", "tool_call_id": call.id, "content": call.run()}]  # fmt: skip
    prompt = llm.tokenizer.decode(llm.render_chat(turn, tools=[{"type": "function", "function": function_spec(get_time).spec}]))
    assert call.run() in prompt and call.arguments.replace(",", ", ").replace(":", ": ") in prompt
    (again,) = llm.chat(turn, GREEDY, tools=[get_time], response_format=Weather)
    assert again.outputs[0].finish_reason == "stop"


# ---------------------------------------------------------------------------------------- LLM.stream
def free_blocks(llm) -> int:
    return llm.engine.block_manager.num_free_blocks


def test_stream_adds_up_to_generate(llm):
    params = SamplingParams(temperature=0.0, max_tokens=24)
    (full,) = llm.generate(["Once upon a time"], params, use_tqdm=False)
    deltas = list(llm.stream("Once upon a time", params))
    assert len(deltas) > 1 and "".join(deltas) == full.text
    (chat,) = llm.chat(ASK, GREEDY, response_format=Weather)
    streamed = "".join(llm.stream(ASK, GREEDY, response_format=Weather))
    assert streamed == chat.text and Weather.model_validate_json(streamed) == chat.outputs[0].parsed


def test_streams_interleave_with_each_other_and_generate(llm):
    params = SamplingParams(temperature=0.0, max_tokens=16)
    alone = {p: llm.generate([p], params, use_tqdm=False)[0].text for p in ("one", "two", "three")}
    a, b = llm.stream("one", params), llm.stream("two", params)
    got_a, got_b = [next(a)], [next(b)]
    (mid,) = llm.generate(["three"], params, use_tqdm=False)  # steps the engine for the streams too
    got_a += list(a)
    got_b += list(b)
    assert "".join(got_a) == alone["one"] and "".join(got_b) == alone["two"] and mid.text == alone["three"]
    assert not llm.engine.has_unfinished()


def test_leaving_a_stream_aborts_its_request(llm):
    before = free_blocks(llm)
    stream = llm.stream("Once", SamplingParams(temperature=0.0, max_tokens=400, ignore_eos=True))
    next(stream)
    assert llm.engine.has_unfinished()
    stream.close()
    assert not llm.engine.has_unfinished() and free_blocks(llm) == before


def test_stream_errors(llm):
    with pytest.raises(ConfigError, match="n=2"):
        next(llm.stream("x", SamplingParams(n=2)))
    with pytest.raises(GuidedError, match="max_tokens"):  # the constraint cannot finish in 2 tokens
        list(llm.stream("x", SamplingParams(max_tokens=2), response_format=Weather))
    assert not llm.engine.has_unfinished()


# ---------------------------------------------------------------------------------------- AsyncLLM
@pytest.fixture(scope="module")
def async_llm():
    engine = AsyncLLM()
    yield engine
    assert engine.shutdown() == []


def run(coro, timeout: float = 120):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def test_async_generate_matches_llm(llm, async_llm):
    params = SamplingParams(temperature=0.0, max_tokens=20)
    prompts = ["Once upon a time", "Hello", "The answer is"]
    expected = [o.text for o in llm.generate(prompts, params, use_tqdm=False)]

    async def go():
        return await asyncio.gather(*(async_llm.generate(p, params) for p in prompts))

    assert [o.text for o in run(go())] == expected


def test_async_chat_tools_and_stream(llm, async_llm):
    async def go():
        chat = await async_llm.chat(ASK, GREEDY, tools=TOOLS, tool_choice="required")
        answer = await async_llm.chat(ASK, GREEDY, response_format=Weather)
        deltas = [d async for d in async_llm.stream(ASK, GREEDY, response_format=Weather)]
        return chat, answer, deltas

    chat, answer, deltas = run(go())
    (expected,) = llm.chat(ASK, GREEDY, tools=TOOLS, tool_choice="required")
    assert [c.arguments for c in chat.outputs[0].tool_calls] == [c.arguments for c in expected.outputs[0].tool_calls]
    check_calls(chat.outputs[0].tool_calls, set(SCHEMAS))
    assert isinstance(answer.outputs[0].parsed, Weather) and "".join(deltas) == answer.text


def wait_idle(engine, timeout: float = 10.0) -> bool:
    async def go():
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while engine.has_unfinished() and loop.time() < deadline:
            await asyncio.sleep(0.01)
        return not engine.has_unfinished()

    return run(go())


def test_cancelling_a_task_aborts_its_request(async_llm):
    engine = async_llm.llm.engine
    before = engine.block_manager.num_free_blocks
    long = SamplingParams(temperature=0.0, max_tokens=2000, ignore_eos=True)  # seconds of work left when cancelled

    async def go():
        started = asyncio.Event()

        async def consume():
            async for _ in async_llm.stream("Once", long):
                started.set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(started.wait(), 60)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gen = asyncio.create_task(async_llm.generate("Once", long))
        await asyncio.sleep(0.2)
        gen.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gen

    run(go())
    assert wait_idle(engine, timeout=1.0) and engine.block_manager.num_free_blocks == before


def test_async_errors_are_raised(async_llm):
    async def go():
        with pytest.raises(GuidedError, match="max_tokens"):
            async for _ in async_llm.stream("x", SamplingParams(max_tokens=2), response_format=Weather):
                pass
        out = await async_llm.generate("x", SamplingParams(max_tokens=2), response_format=Weather)
        return out

    out = run(go())
    assert out.outputs[0].finish_reason == "error" and "max_tokens" in out.error
