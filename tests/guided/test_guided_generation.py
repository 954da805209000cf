"""Guided decoding end to end through the Python API on a tiny random-weight model.

Random weights make the text meaningless, which is the point: only the constraint keeps it valid.
Oracles: Python ``re`` for regexes, the ``jsonschema`` validator for schemas.
"""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
from json_schema_oracle import one_value
from pydantic import BaseModel, Field

from guided.builtin.tiny_model import TinyModelSpec, tiny_model_dir
from guided.constraints import Choice, JsonSchema, Regex
from guided.engine.sampling_params import SamplingParams
from guided.llm import LLM

SPEC = TinyModelSpec(arch="llama", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                     intermediate_size=128, seed=7)  # fmt: skip


@pytest.fixture(scope="module")
def llm():
    return LLM(tiny_model_dir("builtin", SPEC), device="cpu", max_model_len=1024)


@pytest.fixture(scope="module")
def llm_no_ff():
    return LLM(tiny_model_dir("builtin", SPEC), device="cpu", max_model_len=1024, fast_forward=False)


def sampling(seed: int | None, max_tokens: int = 200) -> SamplingParams:
    if seed is None:
        return SamplingParams(temperature=0.0, max_tokens=max_tokens)
    return SamplingParams(temperature=1.0, seed=seed, max_tokens=max_tokens)


REGEXES = [
    r"[0-9]{3}-[0-9]{4}",
    r"(red|green|blue)( and (red|green|blue))?",
    r"[a-z]+@[a-z]+\.(com|org)",
    r"-?(0|[1-9][0-9]{0,5})(\.[0-9]{1,3})?",
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z",
    r"[A-Z][a-z ]{0,20}\.",
]


@pytest.mark.parametrize("fast_forward", [True, False])
@pytest.mark.parametrize("seed", [None, 1, 2])
def test_regex_outputs_match(llm, llm_no_ff, fast_forward, seed):
    engine = llm if fast_forward else llm_no_ff
    outs = engine.generate(["Q: "] * len(REGEXES), sampling(seed, 120), use_tqdm=False,
                           response_format=[Regex(r) for r in REGEXES])  # fmt: skip
    for pattern, out in zip(REGEXES, outs, strict=True):
        if out.finish_reason == "stop":
            assert re.fullmatch(pattern, out.text), (pattern, out.text)
        else:  # cut by max_tokens: still a prefix of the language
            assert out.finish_reason == "length"
    assert sum(o.finish_reason == "stop" for o in outs) >= len(REGEXES) - 1


def test_choice(llm):
    options = ["yes", "no", "maybe later", "n/a"]
    outs = llm.generate(["Answer:"] * 6, [sampling(s) for s in range(6)], use_tqdm=False,
                        response_format=Choice(options))  # fmt: skip
    assert all(o.text in options and o.finish_reason == "stop" for o in outs)


def test_unique_items_through_the_engine(llm):
    """uniqueItems over any value: the matcher's run-time check through masks and fast-forward."""
    schema = {"type": "array", "items": {}, "uniqueItems": True, "minItems": 3, "maxItems": 6}
    outs = llm.generate(["Set:"] * 6, [sampling(s, 120) for s in range(6)], use_tqdm=False,
                        response_format=JsonSchema(schema))  # fmt: skip
    done = [o for o in outs if o.finish_reason == "stop"]
    assert done and all(o.finish_reason in ("stop", "length") for o in outs)
    for o in done:
        jsonschema.validate(json.loads(o.text), schema)


def test_objects_never_repeat_a_name_through_the_engine(llm):
    """Objects taking undeclared names: the matcher refuses a name written twice, so every finished
    output parses to one value (here one that has both names: a repeat would parse to one)."""
    schema = {"type": "object", "patternProperties": {"^[ab]$": {"type": "integer"}}, "additionalProperties": False,
              "minProperties": 2}  # fmt: skip
    outs = llm.generate(["Map:"] * 8, [sampling(s, 160) for s in range(8)], use_tqdm=False,
                        response_format=JsonSchema(schema))  # fmt: skip
    done = [o for o in outs if o.finish_reason == "stop"]
    assert done
    for o in done:
        jsonschema.validate(one_value(o.text), schema)


class Pet(BaseModel):
    name: str = Field(max_length=12)
    kind: str = Field(pattern="^(cat|dog|fish)$")
    age: int = Field(ge=0, le=30)
    vaccinated: bool


def test_pydantic_model_parsed(llm):
    outs = llm.generate(["Pet:"] * 4, [sampling(s, 160) for s in (None, 1, 2, 3)], use_tqdm=False,
                        response_format=Pet)  # fmt: skip
    stopped = [o for o in outs if o.finish_reason == "stop"]
    assert len(stopped) >= 3
    for out in stopped:
        assert isinstance(out.parsed, Pet), out.text
        assert Pet.model_validate_json(out.text) == out.parsed
        assert list(json.loads(out.text)) == ["name", "kind", "age", "vaccinated"]  # declared order


FIXED = {"type": "object", "properties": {"status": {"const": "ok"}, "code": {"enum": [200]},
         "items": {"const": [1, 2, 3]}}, "required": ["status", "code", "items"],
         "additionalProperties": False}  # fmt: skip


def test_fast_forward_prefills_forced_text(llm):
    engine = llm.engine
    grammar = llm.compile_service.compile(JsonSchema(FIXED, whitespace="compact"))
    rid = engine.add_request("Status:", sampling(None, 100), grammar=grammar)
    steps = 0
    out = None
    while engine.has_unfinished():
        steps += 1
        for o in engine.step():
            if o.request_id == rid:
                out = o
    assert out is not None and out.finish_reason == "stop"
    assert json.loads(out.text) == {"status": "ok", "code": 200, "items": [1, 2, 3]}
    n_text = len(out.token_ids) - 1  # the last token is EOS
    assert sum(out.outputs[0].forced) >= n_text - 2
    assert steps < n_text  # the prompt and forced text are prefilled together: few steps, not one per token
    # the forced tokens are the tokenizer's own encoding of the text
    assert out.token_ids[:-1] == llm.tokenizer.encode(out.text, add_special_tokens=False)


def test_fast_forward_on_and_off_agree_greedy(llm, llm_no_ff):
    schema = {"type": "object", "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 999},
              "tag": {"enum": ["alpha", "beta"]}}, "required": ["id", "tag"], "additionalProperties": False}
    a = llm.generate(["X"], sampling(None), use_tqdm=False, response_format=schema)[0]
    b = llm_no_ff.generate(["X"], sampling(None), use_tqdm=False, response_format=schema)[0]
    assert a.finish_reason == b.finish_reason == "stop"
    jsonschema.validate(json.loads(a.text), schema)
    jsonschema.validate(json.loads(b.text), schema)
    assert any(a.outputs[0].forced) and not any(b.outputs[0].forced)


def test_free_requests_unaffected_by_guided_neighbours(llm):
    prompts = ["def f(x):", "import os\n", "class A:"]
    alone = llm.generate(prompts, sampling(None, 24), use_tqdm=False)
    mixed = llm.generate(prompts + ["P:", "Q:"], sampling(None, 24), use_tqdm=False,
                         response_format=[None, None, None, Pet, Regex("[a-z]{2,8}")])  # fmt: skip
    for a, m in zip(alone, mixed[:3], strict=True):
        assert a.token_ids == m.token_ids


def test_failed_compile_fails_only_its_request(llm):
    good = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    compiles = llm.compile_service.compiles
    outs = llm.generate(["a", "b", "c", "d"], sampling(None, 40), use_tqdm=False,
                        response_format=[Regex("(x)\\1"), good, good, None])  # fmt: skip
    assert outs[0].finish_reason == "error" and "backreference" in outs[0].error.lower()
    assert outs[1].finish_reason in ("stop", "length") and outs[1].error is None
    assert outs[3].error is None
    assert llm.compile_service.compiles - compiles == 2  # the bad regex and the schema, once


def test_logprobs_mark_forced_tokens(llm):
    params = SamplingParams(temperature=0.0, max_tokens=60, logprobs=2)
    out = llm.generate(["S:"], params, use_tqdm=False, response_format=JsonSchema(FIXED))[0]
    c = out.outputs[0]
    assert len(c.logprobs) == len(c.token_ids) == len(c.forced)
    for lp, tok, forced in zip(c.logprobs, c.token_ids, c.forced, strict=True):
        if forced:
            assert lp == {tok: 0.0}
        else:
            assert tok in lp and lp[tok] <= 0.0


def test_chat_uses_template(llm):
    out = llm.chat([{"role": "user", "content": "Give a number"}], sampling(None, 20),
                   response_format=Regex("[0-9]{1,3}"))[0]  # fmt: skip
    assert re.fullmatch("[0-9]{1,3}", out.text)
    ids = llm.render_chat([{"role": "user", "content": "hi"}])
    assert llm.tokenizer.decode(ids).startswith("<|im_start|>user\nhi<|im_end|>")
