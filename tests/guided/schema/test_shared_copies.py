"""Copies of a subschema are lowered once (``resolver.shared_copies``): what is shared, what is kept
apart, and that schemas with copies still compile to the language the jsonschema validator accepts."""

from __future__ import annotations

import copy
import json

from json_schema_oracle import accepts, dumps, is_valid

from guided.schema.compiler import json_schema_to_node
from guided.schema.resolver import shared_copies


def _member(kind: str, note: str) -> dict:
    return {
        "description": note,
        "allOf": [{"$ref": "#/$defs/base"}, {"properties": {"kind": {"enum": [kind]}}, "required": ["kind"]}],
    }


BASE = {"type": "object", "properties": {"kind": {"type": "string"}, "size": {"type": "integer"}}}
SCHEMA = {
    "$defs": {"base": BASE},
    "type": "object",
    "properties": {
        "a": _member("x", "the first"),
        "b": _member("x", "the second, described otherwise"),
        "c": _member("y", "the first"),
        # property names that are annotation keywords, and an annotation-looking const: data, kept
        "title": {"type": "string", "title": "Title"},
        "description": {"const": {"description": "kept"}},
        "examples": {"enum": [1]},
        "one": {"enum": [1.0]},
        "yes": {"enum": [True]},
    },
}


def test_copies_are_one_object_and_the_document_is_left_alone():
    before = copy.deepcopy(SCHEMA)
    out = shared_copies(SCHEMA)
    assert SCHEMA == before and SCHEMA["properties"]["a"] is not SCHEMA["properties"]["b"]
    props = out["properties"]
    assert props["a"] is props["b"]  # equal once their descriptions are gone
    assert props["a"] is not props["c"] and props["a"]["allOf"][0] is props["c"]["allOf"][0]
    assert "description" not in props["a"] and props["title"] == {"type": "string"}
    assert props["description"] == {"const": {"description": "kept"}}
    assert [props[n]["enum"] for n in ("examples", "one", "yes")] == [[1], [1.0], [True]]
    assert props["examples"] is not props["one"] is not props["yes"]
    assert shared_copies(BASE) is BASE  # nothing to share or drop: the same object


def test_copies_under_different_bases_stay_apart():
    registry = {"https://a.test/item.json": {"type": "integer"}, "https://b.test/item.json": {"type": "string"}}
    item = {"properties": {"v": {"$ref": "item.json"}}}
    for shared in (False, True):  # two equal objects (as parsed JSON), or one object put in twice
        x, y = (item, item) if shared else (copy.deepcopy(item), copy.deepcopy(item))
        schema = {"properties": {"x": {"$id": "https://a.test/x.json", **x}, "y": {"$id": "https://b.test/y.json", **y}}}
        out = shared_copies(schema)
        assert out["properties"]["x"]["properties"]["v"] is not out["properties"]["y"]["properties"]["v"]
        node = json_schema_to_node(schema, registry=registry)
        assert accepts(node, '{"x": {"v": 1}, "y": {"v": "s"}}'), shared
        assert not accepts(node, '{"y": {"v": 1}}') and not accepts(node, '{"x": {"v": "s"}}'), shared


def test_a_schema_with_copies_is_the_language_the_validator_accepts():
    node = json_schema_to_node(SCHEMA)
    instances = [
        {"a": {"kind": "x"}, "b": {"kind": "x", "size": 3}, "c": {"kind": "y"}},
        {"a": {"kind": "y"}},
        {"b": {"kind": "y"}},
        {"c": {"kind": "x"}},
        {"b": {"size": 1}},
        {"a": {"kind": "x", "size": "big"}},
        {"title": "t", "description": {"description": "kept"}, "examples": 1, "one": 1.0, "yes": True},
        {"description": {"description": "other"}},
        {"one": 2},
        {"title": 3},
    ]
    assert {is_valid(SCHEMA, i) for i in instances} == {True, False}
    for inst in instances:
        for compact in (False, True):
            text = dumps(inst, compact)
            assert accepts(node, text) == is_valid(SCHEMA, inst), json.dumps(inst)


def test_a_compile_shares_once_and_keeps_nothing_after(vocab_builtin):
    """The run-time checks and the lowering read one shared document (asked twice, made once), and
    nothing of it stays remembered once no compile runs."""
    from guided.grammar.compiler import GrammarCompiler
    from guided.schema import resolver
    from guided.schema.compiler import compile_json_schema

    doc = copy.deepcopy(SCHEMA)
    out = shared_copies(doc)
    assert shared_copies(doc) is out and shared_copies(out) is out
    made = []
    real = resolver._shared_copies
    resolver._shared_copies = lambda root: made.append(root) or real(root)
    schema = {**doc, "uniqueItems": False}
    try:
        compile_json_schema(GrammarCompiler(vocab_builtin), schema, key_order="any")
    finally:
        resolver._shared_copies = real
    assert made.count(schema) == 1 and not resolver._SHARED  # (a first compile also shares {} once)
