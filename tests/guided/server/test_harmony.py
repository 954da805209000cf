"""gpt-oss's harmony format: reasoning on the analysis channel, the answer on the final one.

A tiny random-weight gpt-oss whose tokenizer is the builtin one with harmony's special tokens added
and a harmony-style chat template. The channel headers are special tokens, which grammars match as
such (``Vocabulary`` spells them; no text matches them): the answer begins exactly after
``<|channel|>final<|message|>``. The random model never leaves its reasoning on its own; the token
budget (budget-aware decoding) ends it. Oracles: ``jsonschema``, the token ids of the headers.
"""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from guided.builtin.tiny_model import TinyModelSpec, write_tiny_model
from guided.structural import HARMONY_END, HARMONY_START

HARMONY = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"]
TEMPLATE = (
    "{%- for message in messages %}{{- '<|start|>' + message['role'] }}"
    "{%- if message['role'] == 'assistant' %}{{- '<|channel|>final' }}{%- endif %}"
    "{{- '<|message|>' + message['content'] + '<|end|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start|>assistant' }}{%- endif %}"
)
SPEC = TinyModelSpec(arch="gpt_oss", num_experts=4, sliding_window=5, seed=29)
CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"], "additionalProperties": False}  # fmt: skip
USER = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """The tiny gpt-oss with the harmony tokenizer (``<|return|>`` its EOS) and template."""
    from transformers import AutoTokenizer

    from guided.builtin.tokenizers import load_tokenizer

    tok_dir = tmp_path_factory.mktemp("harmony-tokenizer")
    load_tokenizer("builtin").save_pretrained(str(tok_dir))
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    tok.add_special_tokens({"additional_special_tokens": HARMONY})
    tok.eos_token = "<|return|>"
    tok.chat_template = TEMPLATE
    tok.save_pretrained(str(tok_dir))
    return write_tiny_model(tmp_path_factory.mktemp("gpt-oss-harmony"), str(tok_dir), SPEC)


@pytest.fixture(scope="module")
def llm(model):
    from guided.llm import LLM

    return LLM(str(model), device="cpu", max_model_len=512)


def test_headers_are_special_tokens_the_grammar_matches(llm):
    from guided.constraints import JsonSchema, Reasoning

    tok = llm.tokenizer
    vocab = llm.compile_service.grammars.vocabulary
    channel, message, end = (tok.convert_tokens_to_ids(t) for t in ("<|channel|>", "<|message|>", "<|end|>"))
    assert vocab.tokens[channel] == b"\xff<|channel|>\xfe" and not vocab.special[channel]
    assert end not in vocab.eos_ids and tok.convert_tokens_to_ids("<|return|>") in vocab.eos_ids
    assert not any(b"\xff" in t for i, t in enumerate(vocab.tokens) if i not in (channel, message, end)
                   and not vocab.special[i] and tok.convert_ids_to_tokens(i) not in HARMONY)  # fmt: skip
    grammar = llm.compile_service.compile(Reasoning(JsonSchema(CITY), HARMONY_START, HARMONY_END))

    def accepts(text: str) -> bool:
        m = grammar.matcher()
        ids = tok.encode(text, add_special_tokens=False)
        return all(m.accept_token(t) for t in ids) and m.is_accepting()

    answer = '{"city": "Oslo", "unit": "c"}'
    assert accepts(f"<|channel|>analysis<|message|>Hmm, Oslo.<|end|><|start|>assistant{HARMONY_END}{answer}")
    assert accepts(f"{HARMONY_END}{answer}")  # no reasoning at all
    assert accepts(f"<|channel|>analysis<|message|>cut short{HARMONY_END}{answer}")  # a budget's forced header
    assert not accepts(f"<|channel|>analysis<|message|>{answer}")  # an answer needs the final header
    assert not accepts(f"{HARMONY_END}not json")
    m = grammar.matcher()
    for t in tok.encode("<|channel|>analysis<|message|>thinking", add_special_tokens=False):
        assert m.accept_token(t)
    # the header written as text is text: it never opens the answer
    text_header = [i for i in tok.encode("<|channel|>", add_special_tokens=False, split_special_tokens=True)]
    assert channel not in text_header
    assert all(m.accept_token(t) for t in text_header)  # (plain reasoning text)
    allowed = m.allowed_tokens()
    assert allowed[channel] and allowed[end] and not allowed[tok.convert_tokens_to_ids("<|return|>")]


def test_llm_chat_reasons_then_answers_on_the_final_channel(llm):
    from guided.engine.sampling_params import SamplingParams

    tok = llm.tokenizer
    channel, message = tok.convert_tokens_to_ids("<|channel|>"), tok.convert_tokens_to_ids("<|message|>")
    for seed in (1, 2):
        (out,) = llm.chat(USER, SamplingParams(temperature=1.0, seed=seed, max_tokens=60), response_format=CITY,
                          use_tqdm=False)  # fmt: skip
        c = out.outputs[0]
        assert c.finish_reason == "stop", c.text
        assert HARMONY_END not in c.reasoning_content and "<|" not in c.reasoning_content
        jsonschema.validate(json.loads(c.content), CITY)
        assert c.parsed == json.loads(c.content)
        # the answer is what follows the last channel header, whose special tokens frame "final"
        ids = c.token_ids
        at = max(i for i, t in enumerate(ids) if t == channel)
        body = ids.index(message, at)
        assert tok.decode(ids[at + 1 : body]) == "final"
        assert json.loads(tok.decode(ids[body + 1 :], skip_special_tokens=True)) == c.parsed
    # LLM.stream of a conversation: the raw text with its headers, the chat reply's
    streamed = "".join(llm.stream(USER, SamplingParams(temperature=1.0, seed=2, max_tokens=60), response_format=CITY))
    assert streamed == c.text and HARMONY_END in streamed
    # max_reasoning_tokens forces the final header (mid-message: the grammar takes it there)
    forced = SamplingParams(temperature=1.0, seed=3, max_tokens=80, max_reasoning_tokens=8,
                            reasoning_end_ids=tok.encode(HARMONY_END, add_special_tokens=False))  # fmt: skip
    (out,) = llm.chat(USER, forced, response_format=CITY, use_tqdm=False)
    c = out.outputs[0]
    assert c.text.index(HARMONY_END) < 60 and c.finish_reason == "stop"
    jsonschema.validate(json.loads(c.content), CITY)


def test_server_splits_reasoning_and_answer_streamed_or_not(llm):
    openai = pytest.importorskip("openai")
    from guided.server.app import create_app, start_in_thread

    app = create_app(llm, model_name="gpt-oss-tiny")  # reasoning parser: auto (the template has channels)
    srv, thread, port = start_in_thread(app, "127.0.0.1", 0, timeout=60)
    try:
        assert app.state.served.reasoning == (HARMONY_START, HARMONY_END)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=120)
        fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY, "strict": True}}
        kwargs = dict(model="gpt-oss-tiny", messages=USER, max_tokens=60, temperature=1.0, seed=4, response_format=fmt)
        message = client.chat.completions.create(**kwargs).choices[0].message
        reasoning = message.model_extra["reasoning_content"]
        assert "<|" not in reasoning and "<|" not in message.content
        jsonschema.validate(json.loads(message.content), CITY)
        deltas = [c.choices[0].delta for c in client.chat.completions.create(**kwargs, stream=True) if c.choices]
        assert "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas) == reasoning
        assert "".join(d.content or "" for d in deltas) == message.content
        # a tool call: a commentary message to the function after the reasoning, streamed or not
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": CITY}}]
        call_kwargs = dict(model="gpt-oss-tiny", messages=USER, max_tokens=60, temperature=1.0, seed=5, tools=tools,
                           tool_choice="required")  # fmt: skip
        choice = client.chat.completions.create(**call_kwargs).choices[0]
        (call,) = choice.message.tool_calls
        assert choice.finish_reason == "tool_calls" and call.function.name == "get_weather"
        jsonschema.validate(json.loads(call.function.arguments), CITY)
        assert "<|" not in choice.message.model_extra["reasoning_content"] and not choice.message.content
        chunks = [c.choices[0].delta for c in client.chat.completions.create(**call_kwargs, stream=True) if c.choices]
        streamed = "".join(tc.function.arguments or "" for d in chunks for tc in d.tool_calls or [])
        assert streamed == call.function.arguments
    finally:
        srv.should_exit = True
        thread.join(30)


def test_other_tokenizers_spell_no_special_token():
    from guided.builtin.tokenizers import load_tokenizer
    from guided.grammar.vocab import Vocabulary

    vocab = Vocabulary.from_tokenizer(load_tokenizer("builtin"))
    assert not any(t.startswith(b"\xff<|") for t in vocab.tokens)
    byte_ff = vocab.tokens.index(b"\xff")  # the byte token: unflagged as before (only harmony ones flag it)
    assert not vocab.special[byte_ff] and np.count_nonzero(~vocab.special) > 8000


def test_llm_chat_tools_under_auto_call_or_answer_on_the_final_channel(llm):
    """Under tool_choice "auto" the reply after the reasoning is a call message or the final message;
    calls validate, and either kind is read back (tool_calls, or content)."""
    from guided.engine.sampling_params import SamplingParams

    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": CITY}}]
    kinds = set()
    for seed in range(6):
        (out,) = llm.chat(USER, SamplingParams(temperature=1.0, seed=seed, max_tokens=50), tools=tools, use_tqdm=False)
        c = out.outputs[0]
        assert "<|" not in c.reasoning_content
        if c.tool_calls:
            (call,) = c.tool_calls
            assert call.name == "get_weather"
            jsonschema.validate(call.parsed, CITY)
            kinds.add("call")
        else:
            assert HARMONY_END in c.text and c.content is not None
            kinds.add("answer")
    assert kinds  # (which kinds a random model picks depends on the seeds)
