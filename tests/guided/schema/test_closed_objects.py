"""Objects closed by default (``strict``, the API's default): where a schema describes objects and
leaves ``additionalProperties`` unset, only the names it speaks of are generated. A restriction of
the output only: every accepted text is an instance of the schema as written (oracle: ``jsonschema``
on the literal schema), and closing never leaves a satisfiable schema without the instances it
names. Membership through the grammar core's derivatives (``accepts``)."""

from __future__ import annotations

import json

import jsonschema
import pytest
from json_schema_oracle import accepts

from guided.schema.compiler import json_schema_to_node

CAT = {"properties": {"name": {"type": "string"}, "meow": {"type": "boolean"}}, "required": ["name"]}
DOG = {"properties": {"name": {"type": "string"}, "bark": {"type": "boolean"}}, "required": ["name"]}

# (schema, texts accepted closed, texts refused closed); the literal schema accepts all of them
CASES = [
    ({"type": "object", "properties": {"a": {"type": "integer"}}}, ['{"a":1}', "{}"], ['{"a":1,"b":2}']),
    ({"type": "object", "properties": {"a": {}}, "additionalProperties": True}, ['{"a":1,"b":2}'], []),
    ({}, ['{"b":{"c":1}}', "3"], []),  # describes no object: schema-free values stay open
    ({"enum": [{"foo": "bar"}]}, ['{"foo":"bar"}'], []),  # listed objects are whole
    ({"required": ["x"]}, ['{"x":1}'], ['{"x":1,"y":2}']),  # a required name takes any value
    ({"properties": {"a": {}}, "dependentRequired": {"a": ["z"]}}, ['{"a":1,"z":2}'], ['{"a":1,"z":2,"q":3}']),
    ({"anyOf": [CAT, DOG]}, ['{"name":"x","meow":true}', '{"name":"x","bark":true}'],
     ['{"name":"x","bark":false,"meow":true}']),  # a branch's names do not open its sibling
    ({"allOf": [{"properties": {"b": {"type": "integer"}}}, {"properties": {"a": {"type": "string"}}}]},
     ['{"b":1,"a":"x"}'], ['{"b":1,"c":2}']),
    ({"type": "object", "oneOf": [{"properties": {"key": {"type": "string"}}, "required": ["key"]},
                                  {"properties": {"keys": {"type": "array"}}, "required": ["keys"]}]},
     ['{"key":"k"}', '{"keys":[]}'], ['{"key":"k","x":1}']),  # the names of its branches
    ({"allOf": [{"enum": [{"foo": "bar"}]}, {"not": {"const": 3}}]}, ['{"foo":"bar"}'], []),
    ({"properties": {"a": {}}, "not": {"required": ["b"]}}, ['{"a":1}'], ['{"a":1,"b":2}', '{"c":1}']),
    ({"if": {"properties": {"kind": {"const": "a"}}, "required": ["kind"]}, "then": {"required": ["a"]},
      "properties": {"kind": {"type": "string"}, "a": {"type": "integer"}}},
     ['{"kind":"a","a":1}', '{"kind":"b"}'], ['{"kind":"a"}', '{"kind":"b","z":1}']),
]  # fmt: skip


@pytest.mark.parametrize("schema, closed_ok, closed_refused", CASES, ids=[json.dumps(c[0])[:60] for c in CASES])
def test_closing_restricts_and_never_relaxes(schema, closed_ok, closed_refused):
    closed = json_schema_to_node(schema, strict=True)
    literal = json_schema_to_node(schema, strict=False)
    validator = jsonschema.Draft202012Validator(schema)
    for text in closed_ok:  # (bools first: a failed assert would print the nodes)
        assert validator.is_valid(json.loads(text)), f"test data: {text}"
        ok = accepts(closed, text), accepts(literal, text)
        assert ok == (True, True), text
    for text in closed_refused:
        refused = not accepts(closed, text)
        assert refused, text
        if validator.is_valid(json.loads(text)):  # (in the literal's key order: the data is written so)
            taken = accepts(literal, text)
            assert taken, text


def test_not_keeps_the_literal_meaning_inside():
    """Closing inside ``not`` would be a relaxation: ``{"a":1,"b":2}`` is an instance of the open
    inner schema, so the complement refuses it, closed or not."""
    schema = {"not": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}
    closed = json_schema_to_node(schema, strict=True)
    assert not accepts(closed, '{"a":1,"b":2}') and not accepts(closed, '{"a":1}')
    assert accepts(closed, '{"a":"x"}') and accepts(closed, "3")
