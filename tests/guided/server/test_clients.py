"""Third-party clients against a real server on 127.0.0.1 with the default tiny model (random text;
constraints keep it valid): langchain-openai, litellm and pydantic-ai from the ``dev`` extra, each
called as its own documentation shows, and instructor, whose pins conflict with the project's openai,
from ``.venv-clients/`` (``scripts/client_venv.sh``) in a subprocess. Models are written as users write
them (no ``strict``, no ``extra="forbid"``). Oracles: pydantic and ``jsonschema``; objects must be
closed (no key the model does not declare)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import jsonschema
import pytest
from pydantic import BaseModel, Field

MODEL = "tiny"
ROOT = Path(__file__).resolve().parents[3]
PROMPT = "What is the weather in Paris?"
# litellm's own pydantic models warn about TypedDict ReadOnly items at import
pytestmark = pytest.mark.filterwarnings("ignore:.*ReadOnly.*:UserWarning")


class Forecast(BaseModel):
    """A weather forecast."""

    day: Literal["mon", "tue", "wed"]
    rain: bool
    city: str = Field(max_length=6)


class GetWeather(BaseModel):
    """Get the current weather in a city."""

    city: str = Field(max_length=6)
    unit: Literal["c", "f"]


class GetTime(BaseModel):
    """Get the current time in a time zone."""

    zone: Literal["utc", "cet"]


def check(value: Any, model: type[BaseModel]) -> BaseModel:
    """``value`` (a dict or JSON text) is an instance of ``model``'s schema, with no key it does not declare."""
    if isinstance(value, str):
        value = json.loads(value)
    assert isinstance(value, dict), value
    jsonschema.validate(value, model.model_json_schema())
    assert set(value) <= set(model.model_fields), f"undeclared keys in {value}"
    return model.model_validate(value)


@pytest.fixture(scope="module")
def base_url():
    from guided.llm import LLM
    from guided.server.app import create_app, start_in_thread

    srv, thread, port = start_in_thread(create_app(LLM(), model_name=MODEL), "127.0.0.1", 0, timeout=60)
    yield f"http://127.0.0.1:{port}/v1"
    srv.should_exit = True
    thread.join(30)


# --- langchain-openai -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chat_model(base_url):
    langchain_openai = pytest.importorskip("langchain_openai")
    return langchain_openai.ChatOpenAI(base_url=base_url, api_key="unused", model=MODEL, temperature=0,
                                       max_tokens=150, max_retries=0)  # fmt: skip


@pytest.fixture(scope="module")
def responses_chat_model(base_url):
    """The same, over the Responses API (``POST /v1/responses``)."""
    langchain_openai = pytest.importorskip("langchain_openai")
    return langchain_openai.ChatOpenAI(base_url=base_url, api_key="unused", model=MODEL, temperature=0,
                                       max_tokens=150, max_retries=0, use_responses_api=True)  # fmt: skip


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_with_structured_output(chat_model, method):
    out = chat_model.with_structured_output(Forecast, method=method, include_raw=True).invoke(PROMPT)
    assert out["parsing_error"] is None
    assert isinstance(out["parsed"], Forecast)
    raw = out["raw"]
    if method == "json_schema":
        assert raw.response_metadata["finish_reason"] == "stop"
        assert check(raw.content, Forecast) == out["parsed"]
    else:  # a forced call of the tool named after the model
        assert raw.response_metadata["finish_reason"] == "tool_calls"
        assert [c["name"] for c in raw.tool_calls] == ["Forecast"]
        assert check(raw.tool_calls[0]["args"], Forecast) == out["parsed"]


def test_langchain_json_mode_gives_a_json_object(chat_model):
    # json_mode sends only {"type": "json_object"}: the server guarantees an object, not the model's
    # fields (the schema is never sent), so a random model's object may fail Forecast's validation.
    out = chat_model.with_structured_output(Forecast, method="json_mode", include_raw=True).invoke(PROMPT)
    raw = out["raw"]
    assert raw.response_metadata["finish_reason"] == "stop"  # ended complete within max_tokens
    assert isinstance(json.loads(raw.content), dict)
    if out["parsing_error"] is None:
        assert isinstance(out["parsed"], Forecast)
    else:
        assert out["parsed"] is None


@pytest.mark.parametrize("tool_choice", ["any", "GetWeather", None], ids=["any", "named", "auto"])
def test_langchain_bind_tools(chat_model, tool_choice):
    tools = {"GetWeather": GetWeather, "GetTime": GetTime}
    reply = chat_model.bind_tools(list(tools.values()), tool_choice=tool_choice).invoke(PROMPT)
    finish = reply.response_metadata["finish_reason"]
    if tool_choice is not None or reply.tool_calls:
        assert reply.tool_calls and finish == "tool_calls"
        assert not reply.invalid_tool_calls
        for call in reply.tool_calls:
            assert call["name"] in tools and call["id"].startswith("call_")
            check(call["args"], tools[call["name"]])
        if tool_choice == "GetWeather":
            assert [c["name"] for c in reply.tool_calls] == ["GetWeather"]
    else:  # auto: the random model answered in text
        assert isinstance(reply.content, str) and finish in ("stop", "length")


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_responses_api_structured_output(responses_chat_model, method):
    out = responses_chat_model.with_structured_output(Forecast, method=method, include_raw=True).invoke(
        PROMPT
    )
    assert out["parsing_error"] is None and isinstance(out["parsed"], Forecast)
    raw = out["raw"]
    assert raw.response_metadata["status"] == "completed"
    if method == "json_schema":
        assert check(raw.text, Forecast) == out["parsed"]
    else:
        assert [c["name"] for c in raw.tool_calls] == ["Forecast"]
        assert check(raw.tool_calls[0]["args"], Forecast) == out["parsed"]


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_langchain_stream_tool_calls(chat_model, responses_chat_model, api):
    model = chat_model if api == "chat" else responses_chat_model
    tools = {"GetWeather": GetWeather, "GetTime": GetTime}
    message = None
    for chunk in model.bind_tools(list(tools.values()), tool_choice="any").stream(PROMPT):
        message = chunk if message is None else message + chunk  # the documented accumulation
    assert message.tool_calls and not message.invalid_tool_calls
    for call in message.tool_calls:
        assert call["name"] in tools and call["id"]
        check(call["args"], tools[call["name"]])


# --- litellm ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def litellm():
    # the cost map is otherwise fetched from GitHub at import (retried for seconds without network)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    return pytest.importorskip("litellm")


def test_litellm_response_format_pydantic(litellm, base_url):
    r = litellm.completion(model=f"openai/{MODEL}", api_base=base_url, api_key="unused",
                           messages=[{"role": "user", "content": PROMPT}], response_format=Forecast,
                           max_tokens=150, temperature=0)  # fmt: skip
    choice = r.choices[0]
    assert choice.finish_reason == "stop"
    check(choice.message.content, Forecast)


NAMED = {"type": "function", "function": {"name": "get_time"}}


@pytest.mark.parametrize("tool_choice", ["required", NAMED, None], ids=["required", "named", "auto"])
def test_litellm_tools(litellm, base_url, tool_choice):
    schemas = {"get_weather": GetWeather, "get_time": GetTime}
    tools = [{"type": "function", "function": {"name": name, "description": model.__doc__,
                                               "parameters": model.model_json_schema()}}
             for name, model in schemas.items()]  # fmt: skip
    kwargs = {"tool_choice": tool_choice} if tool_choice is not None else {}
    r = litellm.completion(model=f"openai/{MODEL}", api_base=base_url, api_key="unused",
                           messages=[{"role": "user", "content": PROMPT}], tools=tools, max_tokens=150,
                           temperature=0, **kwargs)  # fmt: skip
    choice = r.choices[0]
    calls = choice.message.tool_calls or []
    if tool_choice is not None or calls:
        assert calls and choice.finish_reason == "tool_calls"
        for call in calls:
            assert call.type == "function" and call.function.name in schemas
            check(call.function.arguments, schemas[call.function.name])
        if isinstance(tool_choice, dict):
            assert [c.function.name for c in calls] == ["get_time"]
    else:
        assert isinstance(choice.message.content, str) and choice.finish_reason in ("stop", "length")


def test_litellm_stream(litellm, base_url):
    common = dict(model=f"openai/{MODEL}", api_base=base_url, api_key="unused", max_tokens=150, temperature=0,
                  messages=[{"role": "user", "content": PROMPT}], stream=True)  # fmt: skip
    r = litellm.stream_chunk_builder(list(litellm.completion(response_format=Forecast, **common)))
    assert r.choices[0].finish_reason == "stop"
    check(r.choices[0].message.content, Forecast)
    tools = [{"type": "function", "function": {"name": "get_weather", "description": GetWeather.__doc__,
                                               "parameters": GetWeather.model_json_schema()}}]  # fmt: skip
    r = litellm.stream_chunk_builder(list(litellm.completion(tools=tools, tool_choice="required", **common)))
    calls = r.choices[0].message.tool_calls
    assert calls and r.choices[0].finish_reason == "tool_calls"
    for call in calls:
        assert call.function.name == "get_weather"
        check(call.function.arguments, GetWeather)


# --- pydantic-ai ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pai_model(base_url):
    pytest.importorskip("pydantic_ai")
    from pydantic_ai.providers.openai import OpenAIProvider

    try:
        from pydantic_ai.models.openai import OpenAIChatModel
    except ImportError:  # before 1.0
        from pydantic_ai.models.openai import OpenAIModel as OpenAIChatModel
    return OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=base_url, api_key="unused"))


def pai_output(kind: str):
    from pydantic_ai import NativeOutput

    return Forecast if kind == "tool" else NativeOutput(Forecast)


PAI_SETTINGS = {"max_tokens": 150, "temperature": 0}


def tool_calls(messages) -> list:
    return [p for m in messages if m.kind == "response" for p in m.parts if p.part_kind == "tool-call"]


def test_pydantic_ai_tool_output(pai_model):
    from pydantic_ai import Agent

    agent = Agent(pai_model, output_type=Forecast, model_settings=PAI_SETTINGS, retries=0)
    result = agent.run_sync(PROMPT)
    assert isinstance(result.output, Forecast)
    calls = tool_calls(result.all_messages())
    assert calls and all(c.tool_name == "final_result" for c in calls)
    assert check(calls[0].args, Forecast) == result.output  # the first call is the output
    for call in calls:
        check(call.args, Forecast)


def test_pydantic_ai_native_output(pai_model):
    from pydantic_ai import Agent, NativeOutput

    agent = Agent(pai_model, output_type=NativeOutput(Forecast), model_settings=PAI_SETTINGS, retries=0)
    result = agent.run_sync(PROMPT)
    assert isinstance(result.output, Forecast)
    response = result.all_messages()[-1]
    assert response.kind == "response" and not tool_calls([response])
    text = "".join(p.content for p in response.parts if p.part_kind == "text")
    assert check(text, Forecast) == result.output


@pytest.mark.parametrize("output", ["tool", "native"])
def test_pydantic_ai_run_stream(pai_model, output):
    from pydantic_ai import Agent

    agent = Agent(pai_model, output_type=pai_output(output), model_settings=PAI_SETTINGS, retries=0)

    async def main():
        async with agent.run_stream(PROMPT) as result:
            partial = [p async for p in result.stream_output(debounce_by=None)]
            return partial, await result.get_output()

    partial, final = asyncio.run(main())
    assert isinstance(final, Forecast) and partial and partial[-1] == final


@pytest.mark.parametrize("output", ["tool", "native"])
def test_pydantic_ai_responses_model(base_url, pai_model, output):
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIResponsesModel(MODEL, provider=OpenAIProvider(base_url=base_url, api_key="unused"))
    agent = Agent(model, output_type=pai_output(output), model_settings=PAI_SETTINGS, retries=0)
    result = agent.run_sync(PROMPT)
    assert isinstance(result.output, Forecast)
    calls = tool_calls(result.all_messages())
    if output == "tool":
        assert calls and all(c.tool_name == "final_result" for c in calls)
        assert check(calls[0].args, Forecast) == result.output
    else:
        assert not calls


def test_pydantic_ai_tool_plain(pai_model):
    from pydantic_ai import Agent, capture_run_messages
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.exceptions import UsageLimitExceeded
    from pydantic_ai.usage import UsageLimits

    @dataclass
    class CallFirst(AbstractCapability):
        """Forces a call of ``tool`` on the first step (a random model under "auto" rarely calls one)."""

        tool: str

        def get_model_settings(self):
            return lambda ctx: {"tool_choice": [self.tool]} if ctx.run_step <= 1 else {}

    def run(capabilities: list) -> tuple[list, list, Any]:
        agent = Agent(pai_model, model_settings=PAI_SETTINGS, retries=1, capabilities=capabilities)
        seen: list[tuple[str, str]] = []

        @agent.tool_plain
        def get_weather(city: Annotated[str, Field(max_length=6)], unit: Literal["c", "f"]) -> str:
            """Get the current weather in a city."""
            seen.append((city, unit))
            return "sunny, 21"

        finished = None
        with capture_run_messages() as messages:
            try:
                finished = agent.run_sync(PROMPT, usage_limits=UsageLimits(request_limit=3))
            except UsageLimitExceeded:
                pass  # "auto" after the tool result: the random model may call again and again
        return messages, seen, finished

    for capabilities in ([CallFirst("get_weather")], []):
        messages, seen, finished = run(capabilities)
        calls = tool_calls(messages)
        if capabilities:  # the forced first step: a call, whose result went back to the model
            assert calls and messages[1].parts[0].part_kind == "tool-call"
            assert any(p.part_kind == "tool-return" for p in messages[2].parts)
        assert len(seen) == len(calls)  # every call valid: run, never sent back for a retry
        for call in calls:
            assert call.tool_name == "get_weather"
            check(call.args, GetWeather)
        if finished is not None:
            assert isinstance(finished.output, str)


# --- instructor (in .venv-clients) ----------------------------------------------------------------------

INSTRUCTOR_SCRIPT = r"""
import json, sys
from typing import Literal
import instructor, openai
from pydantic import BaseModel, Field

class Forecast(BaseModel):
    day: Literal["mon", "tue", "wed"]
    rain: bool
    city: str = Field(max_length=6)

out = {"versions": {"instructor": instructor.__version__, "openai": openai.__version__}}
for name in ("TOOLS", "JSON", "JSON_SCHEMA"):
    kwargs = {} if name == "TOOLS" else {"mode": getattr(instructor.Mode, name)}  # TOOLS: the default
    client = instructor.from_openai(openai.OpenAI(base_url=sys.argv[1], api_key="unused", max_retries=0), **kwargs)
    attempts = []
    def record(response):
        m = response.choices[0].message
        attempts.append({"finish": response.choices[0].finish_reason, "content": m.content,
                         "calls": [[c.function.name, c.function.arguments] for c in m.tool_calls or []]})
    client.on("completion:response", record)
    entry = out[name] = {"attempts": attempts}
    try:
        forecast = client.chat.completions.create(model="tiny", response_model=Forecast, max_retries=1,
            max_tokens=150, temperature=0, messages=[{"role": "user", "content": "What is the weather in Paris?"}])
        entry["parsed"] = forecast.model_dump()
    except Exception as e:
        entry["error"] = f"{type(e).__name__}: {e}"[:2000]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def instructor_run(base_url):
    venv = ROOT / ".venv-clients"
    try:
        build = subprocess.run(["bash", str(ROOT / "scripts" / "client_venv.sh")], cwd=ROOT, capture_output=True,
                               text=True, timeout=600)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("scripts/client_venv.sh (instructor's .venv-clients) did not finish in 600 s")
    if build.returncode != 0:
        pytest.fail(f"scripts/client_venv.sh could not build {venv} for instructor (network?):\n"
                    f"{build.stdout[-2000:]}\n{build.stderr[-3000:]}")  # fmt: skip
    run = subprocess.run([str(venv / "bin" / "python"), "-c", INSTRUCTOR_SCRIPT, base_url], capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    if run.returncode != 0:
        pytest.fail(f"the instructor script failed in {venv}:\n{run.stderr[-3000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_instructor_tools_mode(instructor_run):
    entry = instructor_run["TOOLS"]
    assert "error" not in entry, entry.get("error")
    parsed = Forecast.model_validate(entry["parsed"])
    [attempt] = entry["attempts"]  # right the first time: no validation retry
    assert attempt["finish"] == "tool_calls"
    [[name, arguments]] = attempt["calls"]  # instructor names the tool: one call
    assert name == "Forecast" and check(arguments, Forecast) == parsed


def test_instructor_json_schema_mode(instructor_run):
    entry = instructor_run["JSON_SCHEMA"]  # response_format json_schema without strict
    assert "error" not in entry, entry.get("error")
    [attempt] = entry["attempts"]
    assert attempt["finish"] == "stop"
    assert check(attempt["content"], Forecast) == Forecast.model_validate(entry["parsed"])


def test_instructor_json_mode_gives_json_objects(instructor_run):
    # JSON mode puts the schema in the system prompt and sends {"type": "json_object"}: the server
    # guarantees an object on every attempt; that a random model's object has Forecast's fields is not
    # promised, so instructor may give up after its retry (a validation error, never a JSON error).
    entry = instructor_run["JSON"]
    assert 1 <= len(entry["attempts"]) <= 2
    for attempt in entry["attempts"]:
        assert attempt["finish"] == "stop" and isinstance(json.loads(attempt["content"]), dict)
    if "error" in entry:
        assert "validation error" in entry["error"] and "JSONDecodeError" not in entry["error"]
    else:
        assert check(entry["attempts"][-1]["content"], Forecast) == Forecast.model_validate(entry["parsed"])
