"""Structural tags (``guided.constraints.StructuralTag``) compiled, and read back out of outputs.

``StructuralTag(tags, triggers)`` is the language ``F (T F)*``: ``F`` is free text in which no
trigger occurs, ``T`` one tag: its ``begin`` text, its content (a JSON Schema, a regex or a choice)
and its ``end`` text. Each tag's ``begin`` starts with a trigger, so the moment a trigger is written
the output is inside a tag, constrained until its ``end``; outside tags the model writes what it
likes. ``at_least_one``: the output holds at least one tag; ``stop_after_first``: nothing follows the
first tag. Triggers are matched on bytes, whatever the tokenization (the automaton reads bytes).

This is XGrammar's and vLLM's ``structural_tag`` response format: ``{"type": "structural_tag",
"structures": [{"begin", "schema", "end"}], "triggers": [...]}`` (``from_openai``), and the shape of
tool calls inside free text (``<function=name>{...}</function>``) and of reasoning models' answers
after their thinking section (``Tag("</think>", schema, "")`` with the trigger ``"</think>"``).
"""

from __future__ import annotations

import json
import re

from guided.constraints import Choice, JsonSchema, Reasoning, Regex, StructuralTag, Tag
from guided.errors import ConfigError, SchemaError
from guided.grammar import parse_regex
from guided.grammar.regex_ast import (
    alt,
    any_string,
    chars,
    complement,
    literal,
    optional,
    repeat,
    seq,
    with_specials,
)
from guided.limits import Limits
from guided.schema.compiler import json_schema_to_node
from guided.schema.drafts import for_draft
from guided.schema.key_order import repeats_names, root_place

__all__ = ["compile_structural", "structural_node", "compile_reasoning", "reasoning_node", "parse_tags",
           "reasoning_markers", "thinking_markers", "split_reasoning", "is_harmony", "REASONING_PARSERS"]


def compile_structural(compiler, constraint: StructuralTag, limits: Limits | None = None):
    """The compiled grammar of ``constraint`` (cached under its key, like any lowered constraint)."""
    return compiler.compile_lowered(("ast", constraint.key), lambda: structural_node(constraint, limits or Limits()))


def structural_node(constraint: StructuralTag, limits: Limits):
    """The regex AST: ``F (T F)*`` (or its at-least-one / stop-after-first forms)."""
    free = complement(seq(any_string(), alt(*(literal(t) for t in constraint.triggers)), any_string()))
    tag = alt(*(seq(literal(t.begin), _content_node(t, limits), literal(t.end)) for t in constraint.tags))
    if constraint.stop_after_first:
        return seq(free, tag) if constraint.at_least_one else alt(free, seq(free, tag))
    more = repeat(seq(tag, free), 0, None)
    return seq(free, tag, free, more) if constraint.at_least_one else seq(free, more)


def compile_reasoning(compiler, constraint: Reasoning, limits: Limits | None = None):
    """The compiled grammar of a reasoning reply (cached under its key); tool calls keep their
    run-time name check (``checked``) over the calls after the reasoning."""
    compiled = compiler.compile_lowered(("ast", constraint.key), lambda: reasoning_node(constraint, limits or Limits()))
    checked = getattr(constraint.answer, "checked", None)
    return compiled if checked is None else checked(compiled, constraint.key)


def reasoning_node(constraint: Reasoning, limits: Limits):
    """Free text without the end marker, the marker, whitespace, then the answer's language. Before
    tool calls, the reasoning never holds the call opener either (the name check reads calls from it).
    Harmony (gpt-oss): ``_harmony_node``."""
    if constraint.end == HARMONY_END:
        return _harmony_node(constraint, limits)
    answer = constraint.answer
    excluded = [literal(constraint.end)]
    if answer is None:
        tail = any_string()
    elif hasattr(answer, "node"):  # tool calls
        tail = answer.node(limits)
        excluded.append(literal(answer.free_text_excludes))
    else:
        tail = _content_node(Tag(constraint.end, answer, ""), limits)  # (named by its marker in errors)
    reasoning = complement(seq(any_string(), alt(*excluded), any_string()))
    space = chars([(ord(c), ord(c)) for c in " \t\r\n"])
    return seq(reasoning, literal(constraint.end), repeat(space, 0, None), tail)


def _harmony_node(constraint: Reasoning, limits: Limits):
    """gpt-oss's reply in harmony: messages on the analysis or commentary channel (each its channel
    header, text, and optionally the ``<|end|><|start|>assistant`` that closes it and opens the next;
    a budget forcing the final header mid-message skips it), then the final channel's header and the
    answer. Headers are special tokens, which no text matches, so the answer begins exactly at the
    final one."""
    answer = constraint.answer
    if answer is not None and hasattr(answer, "node") and getattr(answer, "format", None) != "harmony":
        raise ConfigError(f"a harmony reply (gpt-oss) calls tools in the harmony format, not {answer.format!r}")
    close = with_specials("<|end|><|start|>assistant")
    header = alt(with_specials(HARMONY_START), with_specials("<|channel|>commentary<|message|>"))
    reasoning = repeat(seq(header, any_string(), optional(close)), 0, None)
    if answer is not None and hasattr(answer, "node"):  # tool calls: a call message (or, under auto, the final)
        return seq(reasoning, answer.node(limits))
    tail = any_string() if answer is None else _content_node(Tag(HARMONY_END, answer, ""), limits)
    space = chars([(ord(c), ord(c)) for c in " \t\r\n"])
    return seq(reasoning, with_specials(HARMONY_END), repeat(space, 0, None), tail)


def _content_node(tag: Tag, limits: Limits):
    content = tag.content
    if content is None:
        return complement(seq(any_string(), literal(tag.end), any_string())) if tag.end else any_string()
    if isinstance(content, Regex):
        return parse_regex(content.pattern)
    if isinstance(content, Choice):
        return alt(*(literal(o) for o in content.options))
    return json_content_node(content.schema, content.strict, limits, f"tag {tag.begin!r}", content.whitespace)


def json_content_node(schema, strict: bool, limits: Limits, where: str, whitespace: str = "flexible"):
    """A JSON Schema's language as a part of a larger text (a tag, an answer after reasoning or beside
    tool calls), where no run-time name check reads it: a schema whose objects may repeat a member
    name (open to undeclared names, not strict) is refused with the way out, never let through."""
    try:
        if repeats_names(root_place(for_draft(schema) if isinstance(schema, dict) else schema), "declared", strict):
            raise ConfigError(f"{where}: a JSON Schema inside a larger output needs objects that cannot repeat a name "
                              "(no run-time check reads it there): keep objects closed (strict, the default; no json_open_objects) "
                              "or set additionalProperties: false")  # fmt: skip
        return json_schema_to_node(schema, strict=strict, whitespace=whitespace, limits=limits)
    except SchemaError as e:
        raise SchemaError(f"{where}: {e}", e.path) from None


def parse_tags(text: str, tags: tuple[Tag, ...], triggers: tuple[str, ...]) -> list[tuple[Tag, str]]:
    """The tags in ``text`` (an output of the constraint): ``[(tag, content text)]`` in order. A tag
    starts at each trigger outside tags; its content ends at the first ``end`` after its begin where
    the content is complete (JSON: where it parses)."""
    out, i = [], 0
    while True:
        hits = [(j, x) for x in triggers if (j := text.find(x, i)) >= 0]
        if not hits:
            return out
        j = min(hits)[0]
        tag = next((t for t in tags if text.startswith(t.begin, j)), None)
        if tag is None:
            raise ValueError(f"a trigger at {j} opens no tag: {text[j : j + 40]!r}")
        start = j + len(tag.begin)
        k = _content_end(text, start, tag)
        out.append((tag, text[start:k]))
        i = k + len(tag.end)


def _content_end(text: str, start: int, tag: Tag) -> int:
    if isinstance(tag.content, JsonSchema):
        while start < len(text) and text[start] in " \t\n\r":
            start += 1
        _, k = json.JSONDecoder().raw_decode(text, start)
        while k < len(text) and text[k] in " \t\n\r" and not text.startswith(tag.end, k):
            k += 1
        return k
    k = text.find(tag.end, start) if tag.end else len(text)
    return len(text) if k < 0 else k


# gpt-oss's harmony format: reasoning in "analysis" (and "commentary") messages, the answer in the "final"
# one; the markers are special tokens (grammars match them as ``special_token``s, text as decoded with them)
HARMONY_START = "<|channel|>analysis<|message|>"
HARMONY_END = "<|channel|>final<|message|>"
HARMONY_CALL = "<|channel|>commentary to="  # a message to a tool (tool_calls.FORMATS["harmony"])
REASONING_PARSERS = {"qwen3": ("<think>", "</think>"), "deepseek_r1": ("<think>", "</think>"),
                     "openai_gptoss": (HARMONY_START, HARMONY_END)}  # fmt: skip
_HARMONY_TAIL = ("<|return|>", "<|call|>", "<|end|>", "<|endoftext|>")


def reasoning_markers(parser: str | None, template: str | None) -> tuple[str, str] | None:
    """The (start, end) markers of a reasoning parser; "auto": ``<think>`` ones when the template has
    them, harmony's when it writes channels (gpt-oss)."""
    if parser is None or parser == "none":
        return None
    if parser == "auto":
        if template and "<|channel|>" in template:
            return REASONING_PARSERS["openai_gptoss"]
        return REASONING_PARSERS["qwen3"] if template and "</think>" in template else None
    if parser not in REASONING_PARSERS:
        raise ConfigError(f"reasoning parser must be one of {sorted(REASONING_PARSERS)}, 'auto' or 'none'; got {parser!r}")
    return REASONING_PARSERS[parser]


def thinking_markers(markers: tuple[str, str] | None, chat_template_kwargs: dict | None) -> tuple[str, str] | None:
    """The markers when a chat reply starts with reasoning: a reasoning model whose template's
    ``enable_thinking`` switch (where it has one) is not off."""
    return markers if markers is not None and (chat_template_kwargs or {}).get("enable_thinking", True) is not False else None


def is_harmony(markers: tuple[str, str] | None) -> bool:
    """Whether reasoning ``markers`` are gpt-oss's harmony channels (outputs then decode with their
    special tokens, which the split reads)."""
    return markers is not None and markers[1] == HARMONY_END


def split_reasoning(text: str, start: str, end: str) -> tuple[str, str | None]:
    """(reasoning, answer) of a reasoning model's reply: the text before ``end`` without ``start``
    and the whitespace around it, and the text after it (None: the reasoning never ended). Harmony:
    the texts of the messages before the final channel, one per line, and the final message's."""
    if end == HARMONY_END:
        return _split_harmony(text)
    reasoning, marker, answer = text.partition(end)
    reasoning = reasoning.lstrip()
    reasoning = (reasoning[len(start) :] if start and reasoning.startswith(start) else reasoning).strip()
    return reasoning, (answer.lstrip() if marker else None)


def _split_harmony(text: str) -> tuple[str, str | None]:
    """Each message's text (from its channel header to its ``<|end|>``, or to a header begun after it:
    a streamed text may end inside one), one per line; then the final message's text, or a tool call
    message whole (its header is the tool-call opener)."""
    call = text.find(HARMONY_CALL)
    final = text.find(HARMONY_END)
    if call >= 0 and (final < 0 or call < final):
        return _split_harmony(text[:call])[0], text[call:]
    before, marker, answer = text.partition(HARMONY_END)
    bodies = re.split(r"<\|channel\|>[^<]*<\|message\|>", before)[1:]
    texts = (body.split("<|end|>")[0].split("<|channel|>")[0].strip() for body in bodies)
    reasoning = "\n".join(t for t in texts if t)
    if not marker:
        return reasoning, None
    for tail in _HARMONY_TAIL:
        answer = answer.removesuffix(tail)
    return reasoning, answer.strip()
