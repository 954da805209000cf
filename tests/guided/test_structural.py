"""Structural tags: free text in which every trigger opens a constrained segment.

Oracles: Python ``re`` over every short string of a small alphabet (the language written as a
tempered regex), ``jsonschema`` for JSON contents of generated outputs, and the openai client
against a real server for the ``structural_tag`` response format (tests/guided/server).
"""

from __future__ import annotations

import itertools
import json
import re

import jsonschema
import pytest

from guided import LLM, SamplingParams
from guided.builtin.tiny_model import TinyModelSpec, tiny_model_dir
from guided.constraints import Choice, JsonSchema, Reasoning, Regex, StructuralTag, Tag, to_constraint
from guided.errors import ConfigError
from guided.structural import parse_tags

SPEC = TinyModelSpec(arch="llama", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                     intermediate_size=128, seed=7)  # fmt: skip
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"],
           "additionalProperties": False}  # fmt: skip


@pytest.fixture(scope="module")
def llm():
    return LLM(tiny_model_dir("builtin", SPEC), device="cpu", max_model_len=1024)


# ---------------------------------------------------------------------- the language, exactly
FREE = r"(?:(?!<a).)*"
CASES = {  # name -> (constraint, the same language as a Python regex)
    "many": (StructuralTag([Tag("<ab", Choice(["x", "xx"]), ">")], ["<a"]),
             rf"{FREE}(?:<ab(?:x|xx)>{FREE})*"),
    "at_least_one": (StructuralTag([Tag("<ab", Regex("x+"), ">"), Tag("<a>", None, "b")], ["<a"], at_least_one=True),
                     rf"{FREE}(?:(?:<abx+>|<a>(?:(?!b).)*b){FREE})+"),
    "stop_after_first": (StructuralTag([Tag("<ab", Choice(["x"]), ">")], ["<a"], stop_after_first=True),
                         rf"{FREE}(?:<abx>)?"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_the_language_is_exactly_free_text_and_tags(llm, name):
    constraint, pattern = CASES[name]
    compiled = llm.compile_service.compile(constraint)
    oracle = re.compile(pattern, re.DOTALL)
    checked = 0
    for n in range(8):
        for letters in itertools.product("<ab>x", repeat=n):
            text = "".join(letters)
            m = compiled.matcher()
            got = m.accept_text(text) and m.is_accepting()
            assert got == bool(oracle.fullmatch(text)), (name, text)
            checked += 1
    assert checked > 90_000


# ---------------------------------------------------------------------- generation
def _check_output(constraint: StructuralTag, text: str) -> int:
    """Every trigger outside tags opens a tag whose content is valid; returns the number of tags."""
    tags = parse_tags(text, constraint.tags, constraint.triggers)
    for tag, content in tags:
        if isinstance(tag.content, JsonSchema):
            jsonschema.validate(json.loads(content), tag.content.schema)
        elif isinstance(tag.content, Regex):
            assert re.fullmatch(tag.content.pattern, content), content
    return len(tags)


@pytest.mark.parametrize("stop_after_first", [False, True])
def test_generated_outputs_hold_valid_tags(llm, stop_after_first):
    constraint = StructuralTag([Tag("<function=get_weather>", WEATHER, "</function>"),
                                Tag("<function=clock>", Regex("[0-9]{2}:[0-9]{2}"), "</function>")],
                               ["<function="], at_least_one=True, stop_after_first=stop_after_first)  # fmt: skip
    # a random model never writes the trigger on its own: a bias on "<" brings tags mid-text
    lt = llm.tokenizer.encode("<", add_special_tokens=False)[0]
    params = [SamplingParams(temperature=1.0, seed=s, max_tokens=80, logit_bias={lt: 6.0} if s % 2 else None)
              for s in range(8)]  # fmt: skip
    outs = llm.generate(["Call:"] * 8, params, use_tqdm=False, response_format=constraint)
    counts = []
    for out in outs:
        assert out.finish_reason == "stop", out
        counts.append(_check_output(constraint, out.text))
    assert all(c >= 1 for c in counts)
    if stop_after_first:
        assert all(c == 1 for c in counts) and all(out.text.endswith("</function>") for out in outs)


# ---------------------------------------------------------------------- the API shapes
def test_vllm_structural_tag_format():
    fmt = {"type": "structural_tag", "triggers": ["<function="],
           "structures": [{"begin": "<function=get_weather>", "schema": WEATHER, "end": "</function>"}]}  # fmt: skip
    constraint = to_constraint(fmt)
    assert isinstance(constraint, StructuralTag) and constraint.triggers == ("<function=",)
    assert constraint.tags[0].content == JsonSchema(WEATHER)
    with pytest.raises(ConfigError, match="starts with none of the triggers"):
        to_constraint({**fmt, "triggers": ["<tool>"]})
    with pytest.raises(ConfigError, match="unknown fields"):
        to_constraint({**fmt, "structures": [{**fmt["structures"][0], "extra": 1}]})
    with pytest.raises(ConfigError, match="context-free grammars inside tags"):
        from guided.constraints import Grammar

        Tag("<a", Grammar('root ::= "x"'), ">")


def test_think_freely_then_answer(llm):
    """A reasoning model's shape: free text up to the end-of-reasoning marker, then the answer
    under the schema, nothing after it; the reasoning is never read as the answer."""
    constraint = StructuralTag([Tag("</think>", JsonSchema(WEATHER, whitespace="compact"), "")], ["</think>"],
                               at_least_one=True, stop_after_first=True)  # fmt: skip
    outs = llm.generate(["<think>"] * 6, [SamplingParams(temperature=1.0, seed=s, max_tokens=30 + 10 * s)
                                          for s in range(6)], use_tqdm=False, response_format=constraint)  # fmt: skip
    for out in outs:
        assert out.finish_reason == "stop", out
        reasoning, marker, answer = out.text.partition("</think>")
        assert marker and "</think>" not in answer and len(reasoning) > 0
        jsonschema.validate(json.loads(answer), WEATHER)


def test_reasoning_constraint_in_the_python_api(llm):
    from guided.constraints import Reasoning

    constraint = Reasoning(WEATHER)
    assert constraint.answer == JsonSchema(WEATHER)
    with pytest.raises(ConfigError, match="not supported"):
        from guided.constraints import Grammar

        Reasoning(Grammar('root ::= "x"'))
    outs = llm.generate(["<think>"] * 4, [SamplingParams(temperature=1.0, seed=s, max_tokens=24 + 8 * s)
                                          for s in range(4)], use_tqdm=False, response_format=constraint)  # fmt: skip
    for out in outs:
        assert out.finish_reason == "stop", out
        reasoning, marker, answer = out.text.partition("</think>")
        assert marker and "</think>" not in answer
        jsonschema.validate(json.loads(answer), WEATHER)


@pytest.mark.parametrize("make", [lambda s: StructuralTag([Tag("<a>", s, "</a>")], ["<a>"]), Reasoning])
def test_open_objects_inside_a_larger_output_are_refused(llm, make):
    """No run-time name check reads a schema inside a tag or after reasoning: an object open to more
    names (which could repeat one: the literal meaning, strict=False) is a clear error; closed (the
    default) it compiles."""
    open_schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    with pytest.raises(ConfigError, match="cannot repeat a name"):
        llm.compile_service.compile(make(JsonSchema(open_schema, strict=False)))
    llm.compile_service.compile(make(JsonSchema(open_schema)))

