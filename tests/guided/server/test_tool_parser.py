"""Tool-call formats and the incremental parser: streamed pieces reassemble into the final calls."""

from __future__ import annotations

import json

import pytest

from guided.errors import ConfigError
from guided.server.tool_calling import FORMATS, ToolCallParser, ToolCalls, detect_format

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
