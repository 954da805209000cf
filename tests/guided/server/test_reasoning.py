"""Reasoning models through the server: think freely, then answer under the constraint.

A tiny random-weight Qwen3 with a Qwen3-style chat template (its ``enable_thinking`` switch writes an
empty ``<think></think>`` block into the prompt when off). The random model never ends its reasoning
on its own: the token budget (or ``max_reasoning_tokens``) ends it, and the answer after the marker
must validate. Oracles: ``jsonschema``; the reasoning never holds the marker and is never the answer.
"""

from __future__ import annotations

import json
import shutil

import jsonschema
import pytest

openai = pytest.importorskip("openai")

from guided.builtin.tiny_model import TinyModelSpec, tiny_model_dir  # noqa: E402

QWEN3_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)
SPEC = TinyModelSpec(arch="qwen3", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                     intermediate_size=128, seed=11)  # fmt: skip
CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"], "additionalProperties": False}  # fmt: skip
FORMAT = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY, "strict": True}}
USER = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """The tiny Qwen3 with the Qwen3-style template."""
    model = tmp_path_factory.mktemp("qwen3-thinking")
    shutil.copytree(tiny_model_dir("builtin", SPEC), model, dirs_exist_ok=True)
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": QWEN3_TEMPLATE}))
    return model


@pytest.fixture(scope="module")
def server(model):
    from guided.llm import LLM
    from guided.server.app import create_app, start_in_thread

    app = create_app(LLM(str(model), device="cpu", max_model_len=1024), model_name="qwen3-tiny")  # reasoning: auto
    srv, thread, port = start_in_thread(app, "127.0.0.1", 0, timeout=60)
    yield app, openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=120)
    srv.should_exit = True
    thread.join(30)


def chat(client, **kwargs):
    return client.chat.completions.create(model="qwen3-tiny", messages=USER, **kwargs)


def test_the_template_is_detected(server):
    assert server[0].state.served.reasoning == ("<think>", "</think>")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_reasoning_then_a_valid_answer(server, seed):
    client = server[1]
    r = chat(client, max_tokens=40 + 10 * seed, temperature=1.0, seed=seed, response_format=FORMAT)
    message = r.choices[0].message
    reasoning = message.model_extra["reasoning_content"]
    assert r.choices[0].finish_reason == "stop"
    assert reasoning and "</think>" not in reasoning and "</think>" not in message.content
    jsonschema.validate(json.loads(message.content), CITY)
    # streamed: the same reasoning and answer, in reasoning_content and content deltas
    chunks = list(chat(client, max_tokens=40 + 10 * seed, temperature=1.0, seed=seed, response_format=FORMAT,
                       stream=True))  # fmt: skip
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas) == reasoning
    assert "".join(d.content or "" for d in deltas) == message.content


def test_the_responses_api_returns_a_reasoning_item(server):
    """The Responses API: a reasoning item, then the answer's message; streamed, the reasoning comes
    in reasoning_text deltas and the answer in output_text deltas, the same as the final items."""
    client = server[1]
    fmt = {"type": "json_schema", "name": "city", "schema": CITY}
    r = client.responses.create(model="qwen3-tiny", input="Weather in Paris?", text={"format": fmt}, temperature=1.0,
                                max_output_tokens=60, extra_body={"seed": 2})  # fmt: skip
    reasoning, message = r.output
    assert reasoning.type == "reasoning" and message.type == "message" and r.status == "completed"
    thought = reasoning.content[0].text
    assert thought and "</think>" not in thought and "</think>" not in r.output_text
    jsonschema.validate(json.loads(r.output_text), CITY)
    events = list(client.responses.create(model="qwen3-tiny", input="Weather in Paris?", text={"format": fmt},
                                          temperature=1.0, max_output_tokens=60, stream=True, extra_body={"seed": 2}))  # fmt: skip
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == thought
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == r.output_text
    assert [o.type for o in events[-1].response.output] == ["reasoning", "message"]


def test_thinking_off_answers_at_once(server):
    r = chat(server[1], max_tokens=40, temperature=1.0, seed=4, response_format=FORMAT,
             extra_body={"chat_template_kwargs": {"enable_thinking": False}})  # fmt: skip
    message = r.choices[0].message
    assert "reasoning_content" not in (message.model_extra or {})
    jsonschema.validate(json.loads(message.content), CITY)


def test_max_reasoning_tokens_ends_the_reasoning(server):
    app, client = server
    tokenizer = app.state.served.llm.tokenizer
    marker = tokenizer.encode("</think>", add_special_tokens=False)
    r = chat(client, max_tokens=30, temperature=1.0, seed=5, logprobs=True, extra_body={"max_reasoning_tokens": 6})
    message = r.choices[0].message
    assert message.model_extra["reasoning_content"] and "</think>" not in message.content
    assert r.choices[0].finish_reason == "length" and message.content  # free text after the marker
    tokens = [t.token for t in r.choices[0].logprobs.content]
    ends = next(k for k in range(len(tokens) + 1) if "</think>" in "".join(tokens[:k]))
    assert ends == 6 + len(marker)  # six tokens of reasoning, then the marker (forced: logprob 0)
    assert all(t.logprob == 0.0 for t in r.choices[0].logprobs.content[6:ends])
    with pytest.raises(openai.BadRequestError, match="reasoning model"):
        chat(client, max_tokens=8, extra_body={"max_reasoning_tokens": 3,
                                               "chat_template_kwargs": {"enable_thinking": False}})  # fmt: skip


def test_a_reasoning_budget_under_a_constraint(server):
    """The forced marker is taken by the constraint; the answer after it validates."""
    r = chat(server[1], max_tokens=200, temperature=1.0, seed=6, response_format=FORMAT, logprobs=True,
             extra_body={"max_reasoning_tokens": 4})  # fmt: skip
    message = r.choices[0].message
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(message.content), CITY)
    tokens = [t.token for t in r.choices[0].logprobs.content]
    assert next(k for k in range(len(tokens) + 1) if "</think>" in "".join(tokens[:k])) <= 4 + 8


def test_tool_calls_after_the_reasoning(server):
    tools = [{"type": "function", "function": {"name": "get_weather", "strict": True, "parameters": CITY}}]
    r = chat(server[1], max_tokens=80, temperature=1.0, seed=7, tools=tools, tool_choice="required")
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.model_extra["reasoning_content"]
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), CITY)


def test_reasoning_that_never_ends_has_no_content(server):
    r = chat(server[1], max_tokens=6, temperature=1.0, seed=8)  # unconstrained: a random model never ends it
    message = r.choices[0].message
    assert r.choices[0].finish_reason == "length" and message.content is None
    assert message.model_extra["reasoning_content"]


def test_the_python_api_reasons_then_answers(model):
    """LLM.chat with a reasoning model: the constraint applies after the reasoning, the reasoning
    comes back in reasoning_content and parsed reads the answer; thinking off answers at once."""
    from guided import LLM, SamplingParams

    llm = LLM(str(model), device="cpu", max_model_len=1024)
    outs = llm.chat([USER] * 3, [SamplingParams(temperature=1.0, seed=s, max_tokens=40 + 10 * s) for s in range(3)],
                    use_tqdm=False, response_format=CITY)  # fmt: skip
    for out in outs:
        c = out.outputs[0]
        assert c.finish_reason == "stop" and c.reasoning_content and "</think>" not in c.reasoning_content
        jsonschema.validate(c.parsed, CITY)
        assert json.loads(c.text.partition("</think>")[2]) == c.parsed
    [off] = llm.chat(USER, SamplingParams(temperature=1.0, seed=9, max_tokens=40), use_tqdm=False,
                     response_format=CITY, chat_template_kwargs={"enable_thinking": False})  # fmt: skip
    assert off.outputs[0].reasoning_content is None and json.loads(off.text) == off.parsed
    jsonschema.validate(off.parsed, CITY)

