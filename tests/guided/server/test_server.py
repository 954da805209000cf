"""The OpenAI-compatible server, end to end: a real uvicorn server on 127.0.0.1 and the official client.

The default tiny model writes random text; constraints keep it valid. Assertions that need a finished
answer use schemas with bounded strings and enums, greedy decoding and modest ``max_tokens``.
"""

from __future__ import annotations

import json
import re
import time

import httpx
import jsonschema
import pytest

openai = pytest.importorskip("openai")
from pydantic import BaseModel, Field  # noqa: E402

MODEL = "tiny"
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 6}, "unit": {"enum": ["c", "f"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": CITY}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"enum": ["utc", "cet"]}}, "required": ["zone"],
        "additionalProperties": False}}},
]  # fmt: skip


class Weather(BaseModel):
    city: str = Field(max_length=6)
    degrees: int = Field(ge=-50, le=50)


@pytest.fixture(scope="module")
def server():
    from guided.llm import LLM
    from guided.server.app import create_app, start_in_thread

    app = create_app(LLM(), model_name=MODEL, max_queue_len=64)
    srv, thread, port = start_in_thread(app, "127.0.0.1", 0, timeout=60)
    yield app, f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(30)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server[1]}/v1", api_key="unused", max_retries=0, timeout=120)


def chat(client, **kwargs):
    kwargs.setdefault("model", MODEL)
    kwargs.setdefault("messages", USER)
    kwargs.setdefault("temperature", 0)
    return client.chat.completions.create(**kwargs)


# ---------------------------------------------------------------------- basics
def test_models_retrieve(client):
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("org/other-model")


def test_models_health_metrics(server, client):
    assert [m.id for m in client.models.list()] == [MODEL]
    base = server[1]
    assert httpx.get(f"{base}/health").json() == {"status": "ok"}
    chat(client, max_tokens=4)
    text = httpx.get(f"{base}/metrics").text
    for name in ("guided_requests_total", "guided_time_to_first_token_seconds_bucket", "guided_num_requests_waiting",
                 "guided_compile_cache_hits_total", "guided_forced_token_fraction", "guided_generation_tokens_total"):
        assert name in text


def test_chat_text_and_usage(client):
    r = chat(client, max_tokens=8)
    choice = r.choices[0]
    assert r.object == "chat.completion" and choice.message.role == "assistant"
    assert choice.finish_reason in ("stop", "length") and isinstance(choice.message.content, str)
    assert r.usage.completion_tokens <= 8 and r.usage.prompt_tokens > 0
    assert r.usage.prompt_tokens_details.cached_tokens >= 0
    again = chat(client, max_tokens=8, max_completion_tokens=8)
    assert again.choices[0].message.content == choice.message.content  # greedy is deterministic
    assert again.usage.prompt_tokens_details.cached_tokens > 0  # the prompt's blocks were cached


def test_seed_n_stop(client):
    a = chat(client, max_tokens=12, temperature=1.0, seed=7, n=2)
    b = chat(client, max_tokens=12, temperature=1.0, seed=7, n=2)
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]
    assert len(a.choices) == 2 and {c.index for c in a.choices} == {0, 1}
    text = a.choices[0].message.content
    if len(text) > 4:
        stop = text[2:4]
        cut = chat(client, max_tokens=12, temperature=1.0, seed=7, stop=[stop]).choices[0]
        assert stop not in cut.message.content and cut.finish_reason == "stop"


def test_logprobs(client):
    r = chat(client, max_tokens=5, logprobs=True, top_logprobs=3, presence_penalty=0.5, frequency_penalty=0.5)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0 and isinstance(entry.bytes, list) and 1 <= len(entry.top_logprobs) <= 3
    assert "".join(e.token for e in content) == r.choices[0].message.content


# ---------------------------------------------------------------------- structured outputs
def test_response_format_text_and_json_object(client):
    assert chat(client, max_tokens=4, response_format={"type": "text"}).choices[0].message.content is not None
    r = chat(client, max_tokens=40, response_format={"type": "json_object"})
    text = r.choices[0].message.content
    assert text.lstrip().startswith("{")
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)


def test_response_format_json_schema_strict(client):
    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY, "strict": True}}
    r = chat(client, max_tokens=80, response_format=fmt)
    assert r.choices[0].finish_reason == "stop"
    value = json.loads(r.choices[0].message.content)
    jsonschema.validate(value, CITY)
    # strict forbids unlisted properties even when the schema leaves additionalProperties open
    open_schema = {k: v for k, v in CITY.items() if k != "additionalProperties"}
    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": open_schema, "strict": True}}
    r = chat(client, max_tokens=80, response_format=fmt)
    assert set(json.loads(r.choices[0].message.content)) == {"city", "unit"}


OPEN_CITY = {k: v for k, v in CITY.items() if k != "additionalProperties"}


def _members(choices) -> list:
    """Each finished choice's member names; a choice cut at max_tokens gives None."""
    return [sorted(json.loads(c.message.content)) if c.finish_reason == "stop" else None for c in choices]


@pytest.mark.parametrize("how", ["no_strict", "strict_false", "guided_json", "structured_outputs"])
def test_schemas_without_strict_close_their_objects(client, how):
    """What instructor, LangChain and pydantic-ai send: a schema with neither strict nor
    additionalProperties. Its objects are generated closed, as vLLM does: all 5 samples of the random
    model finish within 200 tokens with the declared names only (open, they invent keys and run on)."""
    spec = {"name": "city", "schema": OPEN_CITY} | ({"strict": False} if how == "strict_false" else {})
    body = {"guided_json": {"extra_body": {"guided_json": OPEN_CITY}},
            "structured_outputs": {"extra_body": {"structured_outputs": {"json": OPEN_CITY}}}}.get(
        how, {"response_format": {"type": "json_schema", "json_schema": spec}})  # fmt: skip
    r = chat(client, max_tokens=200, n=5, temperature=1.0, seed=3, **body)
    assert _members(r.choices) == [["city", "unit"]] * 5


def test_json_open_objects_keeps_the_literal_meaning(server, client, monkeypatch):
    """The request's json_open_objects, else the server's setting (``--json-open-objects``): the same
    request as above then lets the model write names the schema does not declare."""
    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": OPEN_CITY}}
    r = chat(client, max_tokens=200, n=5, temperature=1.0, seed=3, response_format=fmt,
             extra_body={"json_open_objects": True})  # fmt: skip
    members = _members(r.choices)
    assert any(m != ["city", "unit"] for m in members), members
    monkeypatch.setattr(server[0].state.served, "open_objects", True)
    again = chat(client, max_tokens=200, n=5, temperature=1.0, seed=3, response_format=fmt)
    assert _members(again.choices) == members
    closed = chat(client, max_tokens=200, n=5, temperature=1.0, seed=3, response_format=fmt,
                  extra_body={"json_open_objects": False})  # fmt: skip
    assert _members(closed.choices) == [["city", "unit"]] * 5


def test_tool_arguments_close_their_objects(client):
    """Tools sent without strict (LangChain's bind_tools, pydantic-ai): arguments hold the declared
    names only."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": OPEN_CITY}}]
    for seed in range(3):
        r = chat(client, max_tokens=120, tools=tools, tool_choice="required", parallel_tool_calls=False,
                 temperature=1.0, seed=seed)  # fmt: skip
        calls = _calls(r.choices[0].message)
        assert r.choices[0].finish_reason == "tool_calls" and len(calls) == 1
        assert sorted(json.loads(calls[0][1])) == ["city", "unit"]


def test_parse_pydantic(client):
    r = client.chat.completions.parse(model=MODEL, messages=USER, temperature=0, max_tokens=80, response_format=Weather)
    parsed = r.choices[0].message.parsed
    assert isinstance(parsed, Weather) and -50 <= parsed.degrees <= 50


@pytest.mark.parametrize(
    "body, check",
    [
        ({"guided_regex": "[a-c]{3}-[0-9]{2}"}, lambda t: len(t) == 6 and t[3] == "-"),
        ({"regex": "(yes|no)!"}, lambda t: t in ("yes!", "no!")),
        ({"guided_choice": ["red", "green", "blue"]}, lambda t: t in ("red", "green", "blue")),
        ({"choice": ["up", "down"]}, lambda t: t in ("up", "down")),
        ({"guided_grammar": 'start: "a" NUM\nNUM: /[0-9]{2}/'}, lambda t: t[0] == "a" and t[1:].isdigit()),
        ({"grammar": 'root ::= "(" [xy] ")"'}, lambda t: t in ("(x)", "(y)")),
        ({"guided_json": {"type": "integer", "minimum": 3, "maximum": 9}}, lambda t: 3 <= int(t) <= 9),
    ],
    ids=["guided_regex", "regex", "guided_choice", "choice", "lark", "gbnf", "guided_json"],
)
def test_extensions(client, body, check):
    r = chat(client, max_tokens=20, extra_body=body)
    assert r.choices[0].finish_reason == "stop"
    assert check(r.choices[0].message.content), r.choices[0].message.content


@pytest.mark.parametrize(
    "outputs, check",
    [
        ({"regex": "[a-c]{3}-[0-9]{2}"}, lambda t: len(t) == 6 and t[3] == "-"),
        ({"choice": ["up", "down"]}, lambda t: t in ("up", "down")),
        ({"grammar": 'root ::= "(" [xy] ")"'}, lambda t: t in ("(x)", "(y)")),
        ({"json": {"type": "array", "items": {"type": "integer"}, "maxItems": 3}, "disable_any_whitespace": True},
         lambda t: " " not in t and isinstance(json.loads(t), list)),
        ({"json": '{"type": "integer", "minimum": 3, "maximum": 9}'}, lambda t: 3 <= int(t) <= 9),
        ({"json_object": True}, lambda t: isinstance(json.loads(t), dict)),
        ({"structural_tag": json.dumps({"structures": [{"begin": "<a>", "schema": {"type": "integer"}, "end": "</a>"}],
                                         "triggers": ["<a>"]})}, lambda t: "<a" not in t or "</a>" in t),
    ],
    ids=["regex", "choice", "grammar", "json_compact", "json_text", "json_object", "structural_tag"],
)  # fmt: skip
def test_structured_outputs(client, outputs, check):
    """vLLM >= 0.12's structured_outputs object."""
    r = chat(client, max_tokens=40, extra_body={"structured_outputs": outputs})
    assert r.choices[0].finish_reason == "stop" and check(r.choices[0].message.content), r.choices[0].message.content


@pytest.mark.parametrize("outputs", [{}, {"regex": "a", "choice": ["b"]}, {"whitespace_pattern": " "},
                                     {"json": {"type": "object"}, "json_object": True}])  # fmt: skip
def test_structured_outputs_errors(client, outputs):
    with pytest.raises(openai.BadRequestError):
        chat(client, max_tokens=4, extra_body={"structured_outputs": outputs})
    with pytest.raises(openai.BadRequestError, match="at most one"):
        chat(client, max_tokens=4, extra_body={"structured_outputs": {"regex": "a"}, "regex": "b"})


def test_completions(client):
    r = client.completions.create(model=MODEL, prompt=["Hello", "World"], max_tokens=5, temperature=0, n=2,
                                  logprobs=2)  # fmt: skip
    assert len(r.choices) == 4 and sorted(c.index for c in r.choices) == [0, 1, 2, 3]
    assert all(len(c.logprobs.tokens) == len(c.logprobs.token_logprobs) for c in r.choices)
    r = client.completions.create(model=MODEL, prompt="Answer:", max_tokens=10, extra_body={"guided_choice": ["A", "B"]})
    assert r.choices[0].text in ("A", "B") and r.choices[0].finish_reason == "stop"
    full = client.completions.create(model=MODEL, prompt="Hello", max_tokens=10, temperature=0).choices[0].text
    parts = client.completions.create(model=MODEL, prompt="Hello", max_tokens=10, temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in parts if c.choices) == full


# ---------------------------------------------------------------------- streaming
def test_stream_text_matches(client):
    full = chat(client, max_tokens=16).choices[0]
    chunks = list(chat(client, max_tokens=16, stream=True, stream_options={"include_usage": True}))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == full.finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0


def test_stream_done_marker(server):
    body = {"model": MODEL, "messages": USER, "max_tokens": 3, "stream": True}
    with httpx.stream("POST", f"{server[1]}/v1/chat/completions", json=body, timeout=60) as r:
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]" and all(line.startswith("data: ") for line in lines)


def _strict_json(text: str):
    """json.loads that refuses NaN and Infinity (Python's accepts them; JSON and browsers do not)."""

    def refuse(name):
        raise ValueError(f"non-finite number {name} in JSON")

    return json.loads(text, parse_constant=refuse)


def test_logprobs_under_a_constraint_stay_finite(server):
    """top_logprobs beyond the tokens a constraint allows: the masked ones are left out, in the
    answer and in the stream, and every number is finite JSON."""
    body = {"model": MODEL, "messages": USER, "max_tokens": 4, "logprobs": True, "top_logprobs": 20,
            "choice": ["yes", "no"]}  # fmt: skip
    r = httpx.post(f"{server[1]}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    content = _strict_json(r.text)["choices"][0]["logprobs"]["content"]
    assert content and all(len(t["top_logprobs"]) < 20 for t in content)
    with httpx.stream("POST", f"{server[1]}/v1/chat/completions", json={**body, "stream": True}, timeout=60) as r:
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: {")]
    assert lines and all(_strict_json(line) for line in lines)


def test_an_unexpected_error_is_a_500_and_the_connection_stays(server, monkeypatch):
    """One keep-alive connection: a request that hits a bug gets a 500 error object, and the next
    request on the same connection is answered."""
    import socket

    served = server[0].state.served
    original = served.chat_prompt

    def buggy(req):
        if req.messages[0].text() == "boom":
            raise RuntimeError("a bug")
        return original(req)

    monkeypatch.setattr(served, "chat_prompt", buggy)
    host, port = server[1].removeprefix("http://").split(":")

    def request(sock, content: str) -> tuple[int, dict]:
        payload = json.dumps({"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": content}]})
        sock.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(payload)}\r\n\r\n{payload}").encode())  # fmt: skip
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, "the server closed the connection"
            data += chunk
        head, rest = data.split(b"\r\n\r\n", 1)
        length = int(re.search(rb"content-length: (\d+)", head, re.I).group(1))
        while len(rest) < length:
            chunk = sock.recv(65536)
            assert chunk, "the server closed the connection"
            rest += chunk
        return int(head.split()[1]), json.loads(rest[:length])

    with socket.create_connection((host, int(port)), timeout=60) as sock:
        status, body = request(sock, "boom")
        assert status == 500 and body["error"]["type"] == "server_error" and "error id" in body["error"]["message"]
        status, body = request(sock, "hello")
        assert status == 200 and body["choices"][0]["finish_reason"] in ("stop", "length")


# ---------------------------------------------------------------------- token budget
LONG = {"type": "object", "properties": {"note": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["note", "n"], "additionalProperties": False}  # fmt: skip
LONG_FORMAT = {"type": "json_schema", "json_schema": {"name": "long", "schema": LONG, "strict": True}}


def test_a_budget_too_small_for_the_schema_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as err:
        chat(client, max_tokens=4, response_format=LONG_FORMAT)
    body = err.value.body
    assert body["param"] == "max_tokens" and "max_tokens=4 is too small" in body["message"]
    assert '{"note":"","n":0}' in body["message"]
    with pytest.raises(openai.BadRequestError):  # the completions endpoint too
        client.completions.create(model=MODEL, prompt="x", max_tokens=2, extra_body={"guided_json": LONG})


def test_a_small_budget_ends_complete_and_says_so(client, server):
    """A random model wanders in the free string; the budget steers it to a complete answer, and the
    choice and the usage say so. ``budget_aware: false`` gives the cut output instead."""
    for stream in (False, True):
        if not stream:
            r = chat(client, max_tokens=12, temperature=1.0, seed=3, response_format=LONG_FORMAT)
            choice, usage, content = r.choices[0], r.usage, r.choices[0].message.content
        else:
            chunks = list(chat(client, max_tokens=12, temperature=1.0, seed=3, response_format=LONG_FORMAT,
                               stream=True, stream_options={"include_usage": True}))  # fmt: skip
            content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            choice, usage = [c.choices[0] for c in chunks if c.choices][-1], chunks[-1].usage
        assert choice.finish_reason == "stop", (stream, content)
        jsonschema.validate(json.loads(content), LONG)
        assert choice.model_extra.get("budget_forced") is True
        assert usage.completion_tokens <= 12 and usage.model_extra.get("budget_forced_choices") == 1
    r = chat(client, max_tokens=12, temperature=1.0, seed=3, response_format=LONG_FORMAT,
             extra_body={"budget_aware": False})  # fmt: skip
    assert r.choices[0].finish_reason == "length" and "budget_forced" not in r.choices[0].model_extra
    r = chat(client, max_tokens=12, temperature=1.0, seed=3)  # unconstrained: nothing to steer
    assert "budget_forced" not in r.choices[0].model_extra


def test_structural_tag_response_format(server, client):
    """vLLM's structural_tag: free text where each trigger opens a tag whose JSON is the schema's
    (a bias on the trigger's tokens brings the random model to it; the budget ends each output complete)."""
    fmt = {"type": "structural_tag", "triggers": ["<function="],
           "structures": [{"begin": "<function=get_weather>", "schema": CITY, "end": "</function>"}]}  # fmt: skip
    ids = server[0].state.served.llm.tokenizer.encode("<function=", add_special_tokens=False)
    tags = 0
    for seed in range(6):
        r = chat(client, max_tokens=80, temperature=1.0, seed=seed, response_format=fmt,
                 logit_bias={str(t): 9 for t in ids})  # fmt: skip
        text = r.choices[0].message.content
        assert r.choices[0].finish_reason == "stop", text
        for i in (m.start() for m in re.finditer("<function=", text)):
            assert text.startswith("<function=get_weather>", i), text
            value, end = json.JSONDecoder().raw_decode(text, i + len("<function=get_weather>"))
            jsonschema.validate(value, CITY)
            assert text[end:].lstrip().startswith("</function>"), text
            tags += 1
    assert tags >= 1
    with pytest.raises(openai.BadRequestError):
        chat(client, max_tokens=8, response_format={"type": "structural_tag", "structures": []})
    with pytest.raises(openai.BadRequestError):  # a tag whose begin no trigger starts
        chat(client, max_tokens=8, response_format={**fmt, "triggers": ["<tool>"]})


# ---------------------------------------------------------------------- tools
def _calls(message):
    return [(c.function.name, c.function.arguments) for c in message.tool_calls or []]


def _check_call(name, arguments):
    schema = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}[name]
    jsonschema.validate(json.loads(arguments), schema)


def test_tool_choice_required_single(client):
    r = chat(client, max_tokens=80, tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.id.startswith("call_") and call.type == "function"
    _check_call(call.function.name, call.function.arguments)


def test_tool_choice_named(client):
    choice = {"type": "function", "function": {"name": "get_time"}}
    r = chat(client, max_tokens=60, tools=TOOLS, tool_choice=choice)
    calls = _calls(r.choices[0].message)
    assert r.choices[0].finish_reason == "tool_calls" and [n for n, _ in calls] == ["get_time"]
    _check_call(*calls[0])


def test_tool_choice_allowed_tools(client):
    choice = {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
        {"type": "function", "function": {"name": "get_weather"}}]}}  # fmt: skip
    r = chat(client, max_tokens=80, tools=TOOLS, tool_choice=choice, parallel_tool_calls=False)
    assert [n for n, _ in _calls(r.choices[0].message)] == ["get_weather"]


def test_tool_choice_parallel(client):
    r = chat(client, max_tokens=160, tools=TOOLS, tool_choice="required", temperature=1.0, seed=3)
    calls = _calls(r.choices[0].message)
    assert calls
    for call in calls:
        _check_call(*call)
    ids = [c.id for c in r.choices[0].message.tool_calls]
    assert len(set(ids)) == len(ids)


def test_tool_arguments_never_repeat_a_name(client):
    """A tool whose arguments take the names a and b (at least two members): the random model may
    pick either at each member, and the matcher refuses the repeat, so every ``arguments`` string
    parses to the object it spells, with both names."""
    digit = {"type": "integer", "minimum": 0, "maximum": 9}
    pair = {"type": "object", "patternProperties": {"^[ab]$": digit}, "additionalProperties": False, "minProperties": 2}
    tools = [{"type": "function", "function": {"name": "pair", "parameters": pair}}]
    finished = 0
    for seed in range(6):
        r = chat(client, max_tokens=60, tools=tools, tool_choice="required", parallel_tool_calls=False,
                 temperature=1.0, seed=seed)  # fmt: skip
        for _, arguments in _calls(r.choices[0].message):
            names = [k for k, _ in json.loads(arguments, object_pairs_hook=list)]
            assert sorted(names) == ["a", "b"], arguments
            finished += 1
    assert finished


def test_tool_choice_auto_and_none(client):
    for seed in (1, 2):
        r = chat(client, max_tokens=40, tools=TOOLS, tool_choice="auto", temperature=1.0, seed=seed)
        message = r.choices[0].message
        for call in _calls(message):
            _check_call(*call)
        if not message.tool_calls:
            assert "<tool_call>" not in (message.content or "")
    r = chat(client, max_tokens=10, tools=TOOLS, tool_choice="none")
    assert r.choices[0].message.tool_calls is None and r.choices[0].finish_reason != "tool_calls"


def test_parse_with_tools_under_auto(client):
    """client.chat.completions.parse with a pydantic response_format and tools (tool_choice auto):
    each reply is tool calls whose arguments validate, or an answer that parses into the model."""
    tools = [openai.pydantic_function_tool(Weather, name="get_weather")]
    kinds = set()
    for seed in range(6):
        r = client.chat.completions.parse(model=MODEL, messages=USER, tools=tools, response_format=Weather,
                                          max_tokens=80, temperature=1.0, seed=seed)  # fmt: skip
        message = r.choices[0].message
        if message.tool_calls:
            assert r.choices[0].finish_reason == "tool_calls"
            for call in message.tool_calls:
                assert isinstance(call.function.parsed_arguments, Weather)
            kinds.add("calls")
        else:
            assert r.choices[0].finish_reason == "stop" and isinstance(message.parsed, Weather)
            kinds.add("answer")
    assert kinds == {"calls", "answer"}, kinds
    with pytest.raises(openai.BadRequestError, match="json_schema"):
        chat(client, max_tokens=8, tools=TOOLS, tool_choice="auto", response_format={"type": "json_object"})


@pytest.mark.parametrize("parallel", [False, True])
def test_streamed_tool_calls_match(client, parallel):
    kwargs = dict(max_tokens=120, tools=TOOLS, tool_choice="required", temperature=1.0, seed=11,
                  parallel_tool_calls=parallel)  # fmt: skip
    full = chat(client, **kwargs).choices[0]
    calls: dict[int, dict] = {}
    finish = None
    for chunk in chat(client, stream=True, **kwargs):
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for d in choice.delta.tool_calls or []:
                slot = calls.setdefault(d.index, {"id": None, "name": None, "arguments": ""})
                if d.id:
                    slot["id"], slot["name"] = d.id, d.function.name
                slot["arguments"] += d.function.arguments or ""
    streamed = [(c["name"], c["arguments"]) for _, c in sorted(calls.items())]
    complete = _calls(full.message)
    assert streamed[: len(complete)] == complete and finish == full.finish_reason
    assert all(calls[i]["id"].startswith("call_") for i in calls)


def test_tool_history_renders(client):
    messages = USER + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris", "unit": "c"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21 degrees"},
    ]  # fmt: skip
    r = chat(client, messages=messages, max_tokens=5, tools=TOOLS, tool_choice="none")
    assert r.usage.prompt_tokens > 40


# ---------------------------------------------------------------------- errors
def test_error_bad_schema_has_path(client):
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"type": "string", "pattern": "(x)\\1"}}}}}  # fmt: skip
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, response_format=fmt)
    assert "#/properties/a" in e.value.message and e.value.body["param"] == "response_format"


def test_error_bad_grammar_has_position(client):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, extra_body={"guided_grammar": 'root ::= "a" (\n'})
    assert "line" in e.value.message and e.value.body["code"] == "invalid_grammar"


def test_a_grammar_cannot_import_the_servers_files(client, tmp_path, monkeypatch):
    (tmp_path / "secret.lark").write_text('KEY: "hunter2"\n')
    monkeypatch.chdir(tmp_path)  # where Lark would look for a relative %import
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, extra_body={"guided_grammar": '%import .secret.KEY\nstart: KEY'})
    assert "relative import" in e.value.message and e.value.body["code"] == "invalid_grammar"


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        (dict(temperature=5), "temperature"),
        (dict(top_p=0), "top_p"),
        (dict(extra_body={"bogus_field": 1}), "bogus_field"),
        (dict(extra_body={"regex": "a", "choice": ["b"]}), "at most one"),
        (dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}), "nope"),
        (dict(logit_bias={"a": 2}), "logit_bias"),
        (dict(logit_bias={"1": 101}), "logit_bias"),
        (dict(logit_bias={"99999999": 1}), "logit_bias"),
        (dict(extra_body={"guided_regex": "(a)\\1"}), "backreference"),
    ],
    ids=["temperature", "top_p", "unknown-field", "two-constraints", "unknown-tool", "logit_bias-key",
         "logit_bias-value", "logit_bias-token", "bad-regex"],
)
def test_error_bad_parameters(client, kwargs, needle):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, max_tokens=4, **kwargs)
    assert needle in e.value.message


def test_logit_bias(server, client):
    """OpenAI's logit_bias: +100 on one token makes it the only one sampled; -100 on the greedy choice
    moves greedy decoding off it; under a constraint the mask still wins."""
    tokenizer = server[0].state.served.llm.tokenizer
    token = tokenizer.encode("x", add_special_tokens=False)[0]
    out = chat(client, max_tokens=4, temperature=1.0, seed=3, logit_bias={str(token): 100}, logprobs=True)
    assert [t.token for t in out.choices[0].logprobs.content] == [tokenizer.decode([token])] * 4
    plain = chat(client, max_tokens=1, logprobs=True).choices[0].logprobs.content[0]
    first = tokenizer.encode(plain.token, add_special_tokens=False)
    banned = chat(client, max_tokens=1, logprobs=True, logit_bias={str(first[0]): -100}).choices[0]
    assert banned.logprobs.content[0].token != plain.token
    choice = chat(client, max_tokens=8, logit_bias={str(token): 100}, extra_body={"choice": ["yes", "no"]})
    assert choice.choices[0].message.content in ("yes", "no")


def test_error_unknown_model(client):
    with pytest.raises(openai.NotFoundError) as e:
        chat(client, model="gpt-4o")
    assert "gpt-4o" in e.value.message


def test_error_queue_full(server, client):
    served = server[0].state.served
    saved = served.max_in_flight
    served.max_in_flight = served.in_flight
    try:
        with pytest.raises(openai.InternalServerError) as e:
            chat(client, max_tokens=2)
        assert e.value.status_code == 503 and e.value.response.headers["retry-after"] == "1"
    finally:
        served.max_in_flight = saved


def test_disconnect_aborts(server):
    served = server[0].state.served
    engine = served.llm.engine
    body = {"model": MODEL, "messages": USER, "max_tokens": 1500, "stream": True, "ignore_eos": True}
    finished_before = served.metrics.e2e.count
    with httpx.stream("POST", f"{server[1]}/v1/chat/completions", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                break
    deadline = time.monotonic() + 20
    while (engine.requests or served.in_flight) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not engine.requests and served.in_flight == 0
    assert served.metrics.e2e.count == finished_before  # aborted, not run to its end
    # a plain (non-streaming) request whose client gives up is aborted too
    try:
        httpx.post(f"{server[1]}/v1/chat/completions", json={**body, "stream": False}, timeout=0.5)
    except httpx.TimeoutException:
        pass
    deadline = time.monotonic() + 20
    while (engine.requests or served.in_flight) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not engine.requests and served.in_flight == 0
    assert served.metrics.e2e.count == finished_before


def test_a_server_in_a_process_leaves_its_heap_unfrozen():
    """The server freezes its start-up heap while it runs; when it ends, the process that embedded it
    gets a normal heap back (the collector's view of it as before)."""
    import gc

    from guided.llm import LLM
    from guided.server.app import create_app, start_in_thread

    app = create_app(LLM(), model_name=MODEL)
    srv, thread, _ = start_in_thread(app, "127.0.0.1", 0, timeout=60)
    assert gc.get_freeze_count() > 0
    srv.should_exit = True
    thread.join(30)
    assert gc.get_freeze_count() == 0
