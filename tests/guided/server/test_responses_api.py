"""The Responses API (``POST /v1/responses``) through the official client's create, parse, stream and
retrieve, against a real server on 127.0.0.1 with the default tiny model (random text; constraints
keep it valid). Oracles: ``jsonschema``, pydantic, and the client's own stream accumulator."""

from __future__ import annotations

import json
import math
from typing import Literal

import jsonschema
import pytest

openai = pytest.importorskip("openai")
from pydantic import BaseModel, Field  # noqa: E402

MODEL = "tiny"
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 6}, "unit": {"enum": ["c", "f"]}},
    "required": ["city", "unit"],
}  # no additionalProperties, no strict: closed by default
TOOLS = [
    {"type": "function", "name": "get_weather", "description": "Weather in a city", "parameters": CITY},
    {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {
        "zone": {"enum": ["utc", "cet"]}}, "required": ["zone"]}},
]  # fmt: skip


class Forecast(BaseModel):
    day: Literal["mon", "tue", "wed"]
    rain: bool
    city: str = Field(max_length=6)


@pytest.fixture(scope="module")
def client():
    from guided.llm import LLM
    from guided.server.app import create_app, start_in_thread

    srv, thread, port = start_in_thread(create_app(LLM(), model_name=MODEL), "127.0.0.1", 0, timeout=60)
    yield openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=120)
    srv.should_exit = True
    thread.join(30)


def create(client, **kwargs):
    kwargs.setdefault("model", MODEL)
    kwargs.setdefault("input", "What is the weather in Paris?")
    kwargs.setdefault("temperature", 0)
    return client.responses.create(**kwargs)


def test_text_and_usage(client):
    r = create(client, instructions="Answer briefly.", max_output_tokens=6)
    assert r.object == "response" and r.id.startswith("resp_") and r.model == MODEL
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"  # 6 tokens of random text
    assert [o.type for o in r.output] == ["message"] and r.output_text == r.output[0].content[0].text
    assert r.usage.output_tokens == 6 and r.usage.total_tokens == r.usage.input_tokens + 6


def test_json_schema_format_without_strict_is_closed(client):
    fmt = {"type": "json_schema", "name": "city", "schema": CITY}
    for seed in range(3):
        r = create(client, text={"format": fmt}, max_output_tokens=200, temperature=1.0, extra_body={"seed": seed})
        assert r.status == "completed"
        value = json.loads(r.output_text)
        jsonschema.validate(value, CITY)
        assert sorted(value) == ["city", "unit"]


def test_parse_pydantic(client):
    r = client.responses.parse(model=MODEL, input="Weather in Paris?", text_format=Forecast, temperature=0,
                               max_output_tokens=120)  # fmt: skip
    assert isinstance(r.output_parsed, Forecast) and r.output_parsed.day in ("mon", "tue", "wed")


def test_stream_parse_matches_the_final_response(client):
    deltas, kinds, numbers = [], [], []
    with client.responses.stream(model=MODEL, input="Weather?", text_format=Forecast, temperature=0,
                                 max_output_tokens=120) as stream:  # fmt: skip
        for event in stream:
            kinds.append(event.type)
            numbers.append(event.sequence_number)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    assert numbers == list(range(len(numbers)))
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]  # fmt: skip
    assert kinds[-1] == "response.completed" and "response.output_text.done" in kinds
    assert "".join(deltas) == final.output_text
    assert isinstance(final.output_parsed, Forecast)


def test_function_calls_and_the_next_turn(client):
    r = create(client, tools=TOOLS, tool_choice="required", temperature=1.0, max_output_tokens=200, extra_body={"seed": 1})
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls and r.status == "completed"
    for call in calls:
        args = json.loads(call.arguments)
        schema = next(t["parameters"] for t in TOOLS if t["name"] == call.name)
        jsonschema.validate(args, schema)
        assert set(args) <= set(schema["properties"])  # closed without strict
        assert call.call_id and call.id.startswith("fc_")
    outputs = [{"type": "function_call_output", "call_id": c.call_id, "output": "sunny, 21"} for c in calls]
    # the stored turn: previous_response_id brings back the calls the outputs answer
    follow = create(client, previous_response_id=r.id, input=outputs, max_output_tokens=4)
    assert follow.previous_response_id == r.id and follow.output[0].type == "message"
    # or the whole conversation sent as items, as the client's tool loop writes it
    items = [{"role": "user", "content": "What is the weather in Paris?"},
             *[{"type": "function_call", "call_id": c.call_id, "name": c.name, "arguments": c.arguments} for c in calls],
             *outputs]  # fmt: skip
    again = create(client, input=items, max_output_tokens=4, store=False)
    assert again.output[0].type == "message"
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(again.id)  # store: false
    assert client.responses.retrieve(r.id).output[0].model_dump() == r.output[0].model_dump()


def test_streamed_function_calls_reassemble(client):
    arguments: dict[str, str] = {}
    events = list(create(client, tools=TOOLS, tool_choice="required", stream=True, temperature=1.0,
                         max_output_tokens=200, extra_body={"seed": 2}))  # fmt: skip
    for event in events:
        if event.type == "response.function_call_arguments.delta":
            arguments[event.item_id] = arguments.get(event.item_id, "") + event.delta
    final = events[-1]
    assert final.type == "response.completed"
    calls = [o for o in final.response.output if o.type == "function_call"]
    assert calls and {c.id: c.arguments for c in calls} == arguments
    for call in calls:
        json.loads(call.arguments)
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [d.model_dump() for d in done] == [o.model_dump() for o in final.response.output]


def test_logprobs_are_finite(client):
    fmt = {"type": "json_schema", "name": "city", "schema": CITY}
    r = create(client, text={"format": fmt}, include=["message.output_text.logprobs"], top_logprobs=3,
               max_output_tokens=60)  # fmt: skip
    logprobs = r.output[0].content[0].logprobs
    assert logprobs and len(logprobs) == r.usage.output_tokens
    for entry in logprobs:
        assert math.isfinite(entry.logprob) and len(entry.top_logprobs) <= 3
        assert all(math.isfinite(t.logprob) for t in entry.top_logprobs)


def test_stream_cut_by_max_output_tokens_ends_incomplete(client):
    events = list(create(client, stream=True, max_output_tokens=3))
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"
    assert events[-1].response.usage.output_tokens == 3


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"tools": [{"type": "web_search"}]}, "function tools"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "text only"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "not supported"),
        ({"previous_response_id": "resp_unknown"}, "no response with id"),
        ({"extra_body": {"reasoning": {"effort": "low"}}}, "reasoning"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "schema is required"),
        ({"include": ["file_search_call.results"]}, "not supported"),
    ],
)
def test_errors_are_clear(client, kwargs, needle):
    with pytest.raises((openai.BadRequestError, openai.NotFoundError)) as info:
        create(client, max_output_tokens=4, **kwargs)
    assert needle in str(info.value)
