"""Instances generated for each schema are accepted; mutations of them are accepted exactly when the
jsonschema validator accepts them.

The instances come from a small hypothesis strategy per keyword (``instances``), filtered by the
validator, rather than hypothesis-jsonschema, whose object strategy does not run on current
hypothesis releases.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from json_schema_oracle import accepts, dumps, is_valid

from guided.schema.compiler import json_schema_to_node
from guided.schema.key_order import order_instance

SCHEMAS = {
    "object": {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": -50, "maximum": 5000},
            "name": {"type": "string", "minLength": 1, "maxLength": 6},
            "ratio": {"type": "number", "minimum": 0, "maximum": 1},
            "kind": {"enum": ["a", "b", None]},
            "flags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
        },
        "required": ["id", "kind"],
        "additionalProperties": False,
    },
    "nested": {
        "type": "object",
        "properties": {
            "user": {
                "type": "object",
                "properties": {"tag": {"type": "string", "pattern": "^[a-c]+$"}, "age": {"type": "integer", "exclusiveMinimum": 0}},
                "required": ["tag"],
                "additionalProperties": False,
            },
            "items": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "null"}], "items": {"type": "integer"}},
        },
        "additionalProperties": False,
    },
    "anyof": {"anyOf": [{"type": "integer", "multipleOf": 4}, {"type": "string", "format": "date"}, {"type": "null"}]},
    "oneof": {"oneOf": [{"type": "integer", "minimum": 0}, {"type": "integer", "maximum": 10}]},
    "map": {"type": "object", "additionalProperties": {"type": "integer"}, "propertyNames": {"pattern": "^[a-z]{1,3}$"}, "maxProperties": 3},
}  # fmt: skip

NODES = {name: json_schema_to_node(schema) for name, schema in SCHEMAS.items()}
MUTATIONS = [None, True, 0, -1, 1.5, "", "x", [], {}, [1], {"z": 1}]


def _mutate(value, choice: int, pick):
    """Replace one sub-value (chosen by ``choice``) with a value from MUTATIONS."""
    spots = []

    def walk(v, setter):
        spots.append(setter)
        if isinstance(v, dict):
            for k in v:
                walk(v[k], lambda new, k=k, v=v: v.__setitem__(k, new))
        elif isinstance(v, list):
            for i in range(len(v)):
                walk(v[i], lambda new, i=i, v=v: v.__setitem__(i, new))

    holder = [json.loads(json.dumps(value))]
    walk(holder[0], lambda new: holder.__setitem__(0, new))
    spots[choice % len(spots)](pick)
    return holder[0]


def instances(schema: dict):
    """A hypothesis strategy of (mostly valid) instances for the keywords these schemas use."""
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    for kw in ("anyOf", "oneOf"):
        if kw in schema:
            return st.one_of([instances(s) for s in schema[kw]])
    t = schema.get("type")
    if t == "integer":
        lo = schema.get("minimum", schema.get("exclusiveMinimum", -(10**6) - 1) + 1)
        hi = schema.get("maximum", 10**6)
        return st.integers(lo, hi)
    if t == "number":
        # rounded: bounded numbers are generated without an exponent, and Python writes 1e-05 with one
        floats = st.floats(schema.get("minimum", -1e6), schema.get("maximum", 1e6), allow_nan=False)
        return floats.map(lambda x: round(x, 4))
    if t == "boolean":
        return st.booleans()
    if t == "null":
        return st.none()
    if t == "string":
        if "pattern" in schema:
            return st.from_regex(schema["pattern"], fullmatch=True)
        if schema.get("format") == "date":
            return st.dates().map(lambda d: d.isoformat())
        return st.text(min_size=schema.get("minLength", 0), max_size=schema.get("maxLength", 10))
    if t == "array":
        heads = [instances(s) for s in schema.get("prefixItems", [])]
        tail = st.lists(instances(schema["items"]), max_size=3) if "items" in schema else st.just([])
        lists = st.tuples(*heads).map(list) if heads else st.just([])
        rest = st.lists(instances(schema["items"]), max_size=schema.get("maxItems", 3)) if not heads else tail
        return st.builds(lambda a, b: a + b, lists, rest)
    if t == "object":
        props = schema.get("properties", {})
        req = set(schema.get("required", []))
        if props:
            return st.fixed_dictionaries(
                {k: instances(v) for k, v in props.items() if k in req},
                optional={k: instances(v) for k, v in props.items() if k not in req},
            )
        names = st.from_regex(schema["propertyNames"]["pattern"], fullmatch=True)
        return st.dictionaries(names, instances(schema["additionalProperties"]), max_size=schema.get("maxProperties", 3))
    raise AssertionError(f"no strategy for {schema}")


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_generated_instances(name):
    schema, node = SCHEMAS[name], NODES[name]

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(instances(schema).filter(lambda v: is_valid(schema, v)), st.integers(0, 50), st.sampled_from(MUTATIONS), st.booleans())
    def check(instance, choice, pick, compact):
        text = dumps(order_instance(schema, instance), compact)
        assert accepts(node, text), text
        mutated = order_instance(schema, _mutate(instance, choice, pick))
        text = dumps(mutated, compact)
        assert accepts(node, text) == is_valid(schema, mutated), text

    check()
