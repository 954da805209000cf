"""``oneOf`` branches told apart cheaply, so that the ``oneOf`` needs no exclusivity: by the sizes
they allow (``maxItems: 1`` against ``minItems: 2``, likewise string lengths and member counts, on
every type both take), or by a name one requires that the other, closed to its declared names and
its ``patternProperties``, refuses.

Exclusivity of recursive branches needs an intersection no context-free grammar holds (a
SchemaError); proved apart, they compile exactly. Where the ranges meet, or a type is left unbounded
on one side, the branches stay exclusive. Oracle: ``jsonschema``, warnings as errors.
"""

from __future__ import annotations

import pytest
from json_schema_oracle import assert_exact

from guided.grammar import GrammarCompiler


@pytest.fixture(scope="module")
def grammars(vocab_builtin):
    return GrammarCompiler(vocab_builtin, cache_size=4)


def _one_of(a: dict, b: dict) -> dict:
    """A recursive schema whose ``to`` member is one of two arrays of the schema itself."""
    return {"type": "object", "properties": {"name": {"type": "string"}, "to": {"oneOf": [
        {"type": "array", "items": {"$ref": "#"}, **a}, {"type": "array", "items": {"$ref": "#"}, **b}]}}}  # fmt: skip


def test_recursive_branches_apart_by_item_count(grammars, tokenizer_builtin):
    """One recipient or several, each a nested object of the same schema (the e-mail schema
    o89710's shape: it was a SchemaError)."""
    schema = _one_of({"maxItems": 1}, {"minItems": 2})
    texts = ['{"to": []}', '{"to": [{}]}', '{"to": [{"name": "a"}, {"to": [{"to": [{}, {}]}]}]}',
             '{"to": [{"to": 1}]}', '{"to": [{}, {"to": [{"name": 2}]}]}', '{"name": "x"}', '{"to": "a"}']  # fmt: skip
    assert_exact(grammars, tokenizer_builtin, schema, texts)


def test_string_lengths_and_member_counts_apart(grammars, tokenizer_builtin):
    schema = {"oneOf": [{"type": ["string", "object"], "maxLength": 2, "maxProperties": 1},
                        {"type": ["string", "object"], "minLength": 3, "minProperties": 2,
                         "additionalProperties": {"$ref": "#"}}]}  # fmt: skip
    texts = ['"ab"', '"abc"', '""', '{}', '{"a": "xyz"}', '{"a": "x", "b": "yz"}', '{"a": {"b": "c", "d": "ef"}, "g": "h"}',
             '{"a": 1, "b": "x"}', "1", "[]"]  # fmt: skip
    assert_exact(grammars, tokenizer_builtin, schema, texts)


@pytest.mark.parametrize(
    "branches",
    [
        [{"type": "array", "maxItems": 2}, {"type": "array", "minItems": 2}],  # both take two items
        [{"type": ["array", "string"], "maxItems": 1}, {"type": ["array", "string"], "minItems": 2}],  # strings
        [{"maxItems": 1}, {"minItems": 2}],  # no type: every non-array takes both
    ],
)
def test_sizes_that_meet_stay_exclusive(grammars, tokenizer_builtin, branches):
    """Where some value fits both branches, ``oneOf`` refuses it: the proof must not claim them apart."""
    schema = {"oneOf": branches}
    texts = ["[]", "[1]", "[1, 2]", "[1, 2, 3]", '"s"', "1", "{}"]
    assert_exact(grammars, tokenizer_builtin, schema, texts)


def test_closed_by_patterns_refuses_a_required_name(grammars, tokenizer_builtin):
    """A branch closed to its patterns' names (``additionalProperties: false`` beside
    ``patternProperties``) refuses a name another branch requires when no pattern matches it:
    the platform pair ``{ios, android}`` against locale keys (o37786's colour selectors)."""
    schema = {"oneOf": [
        {"type": "object", "properties": {"ios": {"$ref": "#"}, "android": {"$ref": "#"}},
         "required": ["ios", "android"], "additionalProperties": False},
        {"type": "object", "patternProperties": {"^[a-z]{2,3}$": {"$ref": "#"}}, "additionalProperties": False,
         "minProperties": 1},
        {"type": "string"}]}  # fmt: skip
    texts = ['{"ios": "a", "android": "b"}', '{"ios": "a"}', '{"en": "x", "de": {"fr": "y"}}', '{"android": "x"}',
             "{}", '"s"', '{"ios": "a", "android": "b", "en": "c"}', '{"ios": {"android": "x", "ios": "y"}}']  # fmt: skip
    assert_exact(grammars, tokenizer_builtin, schema, texts)


def test_a_required_name_a_pattern_matches_stays_exclusive(grammars, tokenizer_builtin):
    schema = {"oneOf": [
        {"type": "object", "properties": {"ios": {"type": "string"}}, "required": ["ios"], "additionalProperties": False},
        {"type": "object", "patternProperties": {"^i": {"type": "string"}}, "additionalProperties": False}]}  # fmt: skip
    texts = ['{"ios": "a"}', '{"ix": "a"}', "{}", '{"ios": "a", "ix": "b"}', '{"x": "a"}']
    assert_exact(grammars, tokenizer_builtin, schema, texts)
