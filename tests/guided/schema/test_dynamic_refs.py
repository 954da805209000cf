"""``$dynamicRef`` and ``$recursiveRef`` where they are plain ``$ref`` s (``guided.schema.dynamic_refs``):
the compiled language is jsonschema's, instance by instance; a reference whose target depends on the
dynamic scope is a SchemaError that says so."""

from __future__ import annotations

import pytest
from json_schema_oracle import accepts, dumps, is_valid

from guided.errors import SchemaError
from guided.grammar.compiler import GrammarCompiler
from guided.schema.compiler import compile_json_schema, json_schema_to_node

TREE = {  # one bookend: the dynamic scope can only find the tree itself
    "$dynamicAnchor": "node",
    "type": "object",
    "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$dynamicRef": "#node"}}},
    "additionalProperties": False,
}
TREES = [{}, {"v": 1, "kids": [{"v": 2}, {"kids": []}]}, {"kids": [{"v": "x"}]}, {"kids": [{"kids": [{"w": 1}]}]},
         {"v": 1.5}, []]  # fmt: skip

CASES = {
    "one-bookend": (TREE, TREES),
    "recursive-anchor": (
        {"$schema": "https://json-schema.org/draft/2019-09/schema", "$recursiveAnchor": True, "type": "object",
         "properties": {"name": {"type": "string"}, "kids": {"type": "array", "items": {"$recursiveRef": "#"}}},
         "additionalProperties": False},
        [{"kids": [{"name": "a"}]}, {"kids": [{"x": 1}]}, {"kids": [{"kids": [{"name": 1}]}]}, {"name": "r"}],
    ),
    "recursive-ref-without-anchor": (  # no $recursiveAnchor: "#" is the resource root, as a $ref
        {"$schema": "https://json-schema.org/draft/2019-09/schema", "type": ["integer", "array"],
         "items": {"$recursiveRef": "#"}},
        [1, [1, [2]], [1, ["a"]], "a"],
    ),
    "to-an-anchor": (  # the target is no bookend ($anchor): a $ref
        {"$defs": {"s": {"$anchor": "s", "type": "string", "maxLength": 2}}, "type": "array",
         "items": {"$dynamicRef": "#s"}},
        [["ab"], ["abc"], [1], []],
    ),
    "pointer-fragment": (  # a JSON pointer is never looked up in the dynamic scope
        {"$defs": {"s": {"$dynamicAnchor": "s", "type": "string"}}, "$dynamicRef": "#/$defs/s"},
        ["a", 1],
    ),
    "beside-ref": (  # both apply in place
        {"$defs": {"pos": {"$anchor": "p", "minimum": 1}, "small": {"maximum": 5}}, "type": "integer",
         "$ref": "#/$defs/small", "$dynamicRef": "#p"},
        [3, 0, 6],
    ),
    "ref-to-a-dynamic-anchor": (  # a $dynamicAnchor is a plain-name fragment for $ref too
        {"$defs": {"s": {"$dynamicAnchor": "s", "type": "string"}}, "$ref": "#s"},
        ["a", 1],
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_static_dynamic_references_match_the_validator(name):
    schema, instances = CASES[name]
    node = json_schema_to_node(schema, max_depth=4)  # (recursion unrolled past the instances' depth)
    for inst in instances:
        assert accepts(node, dumps(inst)) == is_valid(schema, inst), (name, inst)


def test_a_recursive_dynamic_reference_compiles_to_the_context_free_grammar(vocab_builtin):
    compiled = compile_json_schema(GrammarCompiler(vocab_builtin), TREE)
    for inst in [*TREES, {"kids": [{"kids": [{"kids": [{"kids": [{"v": 7}]}]}]}]}]:
        m = compiled.matcher()
        assert (m.accept_bytes(dumps(inst).encode()) and m.is_accepting()) == is_valid(TREE, inst), inst


def test_a_reference_resolved_through_the_dynamic_scope_is_refused_by_name():
    schema = {"$defs": {"a": {"$id": "https://example.com/a", "$dynamicAnchor": "x", "type": "string"},
                        "b": {"$id": "https://example.com/b", "$dynamicAnchor": "x", "type": "integer"}},
              "$dynamicRef": "https://example.com/a#x"}  # fmt: skip
    with pytest.raises(SchemaError, match=r"\$dynamicRef .* dynamic scope .*\$dynamicAnchor 'x'"):
        json_schema_to_node(schema)
    recursive = {"$schema": "https://json-schema.org/draft/2019-09/schema", "$recursiveAnchor": True,
                 "$defs": {"o": {"$id": "https://example.com/o", "$recursiveAnchor": True}},
                 "items": {"$recursiveRef": "#"}}  # fmt: skip
    with pytest.raises(SchemaError, match=r"\$recursiveRef .* dynamic scope"):
        json_schema_to_node(recursive)


def test_only_the_documents_a_schema_reaches_count():
    """Registry documents nothing refers to declare the same anchor: the tree's reference stays static."""
    registry = {f"https://example.com/other{i}": {"$dynamicAnchor": "node", "type": "null"} for i in range(2)}
    node = json_schema_to_node(TREE, registry=registry, max_depth=4)
    for inst in TREES:
        assert accepts(node, dumps(inst)) == is_valid(TREE, inst), inst
    with pytest.raises(SchemaError, match="dynamic scope"):  # once one is reached, two declare it
        json_schema_to_node({**TREE, "$defs": {"o": {"$ref": "https://example.com/other0"}}}, registry=registry,
                            max_depth=4)


def test_unique_items_reached_through_a_dynamic_reference_are_checked(vocab_builtin):
    """The uniqueItems plan reads the rewritten schema too: string items behind a $dynamicRef to an
    $anchor are checked at run time."""
    schema = {"$defs": {"s": {"$anchor": "s", "type": "string"}}, "type": "array", "uniqueItems": True,
              "items": {"$dynamicRef": "#s"}}  # fmt: skip
    compiled = compile_json_schema(GrammarCompiler(vocab_builtin), schema)
    for inst in (["a", "b"], ["a", "a"], [1]):
        m = compiled.matcher()
        assert (m.accept_bytes(dumps(inst).encode()) and m.is_accepting()) == is_valid(schema, inst), inst
