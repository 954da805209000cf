"""Key order policies (``SchemaOptions.key_order``), with the jsonschema validator as the oracle.

"any" must accept an object exactly when it is valid, in every order of its members, wherever the
place has at most ``MAX_PERMUTED`` declared names (member counts included); past the bound it falls back
to declared / required-first order with other properties anywhere. Every policy must stay exact
under ``not`` and ``oneOf``: the orders accepted at a place never depend on which schema there is
lowered. "declared" (the default) keeps the declared order, so keys stay forced.
"""

from __future__ import annotations

import itertools
import json
import random

import pytest
from json_schema_oracle import accepts, fullmatch, is_valid

from guided.errors import ConfigError, SchemaError
from guided.schema.compiler import json_schema_to_node
from guided.schema.key_order import MAX_PERMUTED
from guided.schema.options import SchemaOptions

OBJ = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
    "required": ["b"],
}
VALUES = {"a": [1, "x"], "b": ["x", 2], "c": [True], "x": [0], "y": ["z"]}


def _orders(obj: dict) -> list[dict]:
    return [dict(p) for p in itertools.permutations(obj.items())]


def _instances(names: str, max_members: int = 4) -> list[dict]:
    """Objects over the given member names (each with one of its VALUES), every subset and order."""
    out = []
    for k in range(max_members + 1):
        for keys in itertools.permutations(names, k):
            for values in itertools.product(*(VALUES[n] for n in keys)):
                out.append(dict(zip(keys, values, strict=True)))
    return out


def _check_exact(schema: dict, instances: list) -> None:
    try:
        node = json_schema_to_node(schema, key_order="any")
    except SchemaError as e:  # an empty language may be refused up front: then nothing is valid
        assert "accepts no instance" in str(e), e
        assert not any(is_valid(schema, inst) for inst in instances), schema
        return
    for inst in instances:
        text = json.dumps(inst)
        got, want = accepts(node, text), is_valid(schema, inst)  # (a failing assert would print the node)
        assert got == want, (schema, text)


SCHEMAS = {
    "obj": OBJ,
    "closed": {**OBJ, "additionalProperties": False},
    "all-required": {**OBJ, "required": ["a", "b", "c"]},
    "not-both": {"properties": {"a": {}, "b": {}}, "not": {"required": ["a", "b"]}},
    "oneOf-overlap": {
        "type": "object",
        "oneOf": [{"required": ["a"]}, {"properties": {"b": {"type": "string"}}, "required": ["b"]}],
    },
    "anyOf-branches": {
        "anyOf": [
            {"properties": {"a": {"type": "integer"}, "c": {"type": "boolean"}}, "required": ["a", "c"]},
            {"properties": {"b": {"type": "string"}, "x": {"const": 0}}, "required": ["x", "b"]},
        ],
        "additionalProperties": False,
    },
    "dependent-required": {"properties": {"a": {}, "b": {}, "c": {}}, "dependentRequired": {"a": ["c"]}},
    "not-const-object": {"type": "object", "not": {"const": {"a": 1, "b": "x", "c": True}}},
}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_any_order_is_exact(name):
    _check_exact(SCHEMAS[name], _instances("abcx"))


def test_any_order_accepts_every_permutation_only_once_each():
    node = json_schema_to_node(OBJ, key_order="any")
    for inst in _orders({"a": 1, "b": "x", "c": True, "x": 0}):
        assert accepts(node, json.dumps(inst))
    assert not accepts(node, '{"b": "x", "a": 1, "a": 2}')  # a declared name at most once
    assert not accepts(node, '{"b": "x", "b": "y"}')
    assert not accepts(node, '{"a": 1, "c": true}')  # required "b" missing
    assert accepts(node, '{"x": 0, "x": 1, "b": "x"}')  # names nobody declares: as JSON allows
    assert fullmatch(node, '{"c": false, "b": "x"}')  # cross-check with the naive matcher


def test_declared_is_the_default_and_keeps_keys_in_order():
    node = json_schema_to_node(OBJ)
    assert accepts(node, '{"a": 1, "b": "x", "c": true}')
    assert not accepts(node, '{"c": true, "a": 1, "b": "x"}')
    assert not accepts(node, '{"x": 0, "b": "x"}')  # others come last
    assert accepts(node, '{"b": "x", "x": 0}')


def test_past_the_bound_declared_order_with_others_around():
    names = [f"p{i}" for i in range(MAX_PERMUTED + 1)]
    schema = {"type": "object", "properties": {n: {"type": "integer"} for n in names}, "required": ["p3"]}
    node = json_schema_to_node(schema, key_order="any")
    declared = {n: 1 for n in names}
    assert accepts(node, json.dumps(declared))
    assert accepts(
        node, json.dumps({"p3": 1, **{n: 1 for n in reversed(names) if n != "p3"}})
    )  # required first
    assert accepts(node, json.dumps({"z": 0, "q": 2, "p0": 1, "p3": 1, "r": 3}))  # others before or after
    assert not accepts(node, json.dumps({"p0": 1, "q": 2, "p3": 1}))  # not between: a restriction
    assert not accepts(node, json.dumps(dict(reversed(declared.items()))))
    assert not accepts(node, '{"p0": 1, "p0": 2, "p3": 1}')  # a declared name at most once


@pytest.mark.parametrize(
    "counts",
    [{"minProperties": 2}, {"maxProperties": 2}, {"minProperties": 1, "maxProperties": 3},
     {"minProperties": 3}, {"maxProperties": 0}, {"minProperties": 2, "maxProperties": 1}],
)  # fmt: skip
def test_counted_members_in_any_order(counts):
    schema = {**OBJ, **counts}
    if counts == {"minProperties": 2}:
        node = json_schema_to_node(schema, key_order="any")
        assert accepts(node, '{"a": 1, "b": "x"}') and accepts(node, '{"b": "x", "a": 1}')
        assert accepts(node, '{"x": 0, "a": 1, "b": "x"}') and not accepts(node, '{"b": "x"}')
    _check_exact(schema, _instances("abcx"))
    _check_exact({**schema, "additionalProperties": False}, _instances("abcx"))
    # the same place seen through "not": the complement stays exact in every order
    _check_exact({"type": "object", "properties": OBJ["properties"], "not": counts}, _instances("abcx", 3))


def test_const_objects_in_any_order():
    value = dict(zip("abcdefgh"[:MAX_PERMUTED], [1, "x", True, None, 2, [3], {}, 0.5], strict=False))
    node = json_schema_to_node({"const": value})
    orders = _orders(value)
    for inst in orders[:: max(len(orders) // 200, 1)]:  # every order's prefix is shared: a sample
        assert accepts(node, json.dumps(inst))
    assert accepts(node, json.dumps(dict(reversed(value.items()))))
    assert not accepts(node, json.dumps({**value, "a": 2}))
    assert not accepts(node, json.dumps(value)[:-1] + ', "a": 1}')  # a member twice
    big = {**value, "z": 0}  # past the bound: the value's own order only (a restriction)
    node = json_schema_to_node({"const": big})
    assert accepts(node, json.dumps(big)) and not accepts(node, json.dumps(dict(reversed(big.items()))))


def test_random_object_schemas_exact():
    rng = random.Random(7)
    for _ in range(25):
        names = rng.sample("abcx", rng.randint(1, 3))
        props = {n: {"type": rng.choice(["integer", "string", "boolean"])} for n in names}
        schema = {
            "type": "object",
            "properties": props,
            "required": rng.sample(names, rng.randint(0, len(names))),
        }
        if rng.random() < 0.5:
            schema["additionalProperties"] = False
        if rng.random() < 0.3:
            schema["not"] = {"required": rng.sample(names, 1)}
        _check_exact(schema, _instances("abcxy", 3))


def test_key_order_option_is_checked():
    with pytest.raises(ConfigError, match="key_order"):
        SchemaOptions(key_order="sorted")


def test_past_the_bound_required_first_then_optional_in_any_order():
    names = [f"p{i}" for i in range(MAX_PERMUTED + 2)]
    schema = {
        "type": "object",
        "properties": {n: {"type": "integer"} for n in names},
        "required": ["p5", "p1"],
    }
    node = json_schema_to_node(schema, key_order="any")
    rest = [n for n in reversed(names) if n not in ("p5", "p1")]
    assert accepts(node, json.dumps({"p5": 1, "p1": 1, **{n: 1 for n in rest}}))
    assert accepts(node, json.dumps({"x": 0, "p5": 1, "p1": 1, "p4": 1, "p0": 1, "y": 0}))
    assert not accepts(node, json.dumps({"p1": 1, "p5": 1, "p0": 1}))  # required ones keep their order
    assert not accepts(node, '{"p5": 1, "p1": 1, "p0": 1, "p0": 2}')


def test_past_the_bound_exact_under_not_and_one_of():
    """Never an invalid instance accepted where two schemas at one place differ in their slots."""
    names = [f"p{i}" for i in range(MAX_PERMUTED + 2)]
    props = {n: {"type": "integer"} for n in names}
    schemas = [
        {"type": "object", "properties": props, "not": {"properties": {"p0": False}, "required": ["p1"]}},
        {"type": "object", "properties": props, "required": ["p2"], "not": {"required": ["p3", "p4"]}},
        {"type": "object", "properties": props, "oneOf": [{"required": ["p0"]}, {"required": ["p6", "p7"]}]},
    ]
    rng = random.Random(3)
    for schema in schemas:
        node = json_schema_to_node(schema, key_order="any")
        for _ in range(400):
            keys = rng.sample([*names, "x"], rng.randint(0, 5))
            inst = {k: rng.choice([1, "s"]) if k != "x" else 0 for k in keys}
            valid = is_valid(schema, inst)
            assert not accepts(node, json.dumps(inst)) or valid, (schema, inst)
            ordered = {k: inst[k] for k in sorted(inst, key=lambda k: (k == "x", k))}  # declared order
            assert accepts(node, json.dumps(ordered)) == valid, (schema, ordered)


@pytest.mark.parametrize("key_order", ["declared", "any"])
def test_branches_keep_their_own_declared_order(key_order):
    """anyOf/oneOf branches share one place: the merged order keeps each branch's own order."""
    tcp = {"cidr": {}, "endport": {}, "protocol": {"const": "tcp"}, "ruleid": {}, "startport": {}}
    icmp = {"cidr": {}, "icmpcode": {}, "icmptype": {}, "protocol": {"const": "icmp"}, "ruleid": {}}
    schema = {
        "oneOf": [
            {"properties": tcp, "required": list(tcp), "additionalProperties": False},
            {"properties": icmp, "required": list(icmp), "additionalProperties": False},
        ]
    }
    node = json_schema_to_node(schema, key_order=key_order)
    a = {"cidr": "0/0", "endport": 1, "protocol": "tcp", "ruleid": "r", "startport": 1}
    b = {"cidr": "0/0", "icmpcode": 0, "icmptype": 8, "protocol": "icmp", "ruleid": "r"}
    assert accepts(node, json.dumps(a)) and accepts(node, json.dumps(b))
    assert not accepts(node, json.dumps({**b, "protocol": "tcp"}))


def test_any_order_at_the_bound_is_exact():
    """``MAX_PERMUTED`` declared names at one place: every order of every subset is accepted exactly
    when valid (required ones present, values right, each declared name at most once)."""
    names = [f"k{i}" for i in range(MAX_PERMUTED)]
    kinds = ["integer", "string", "boolean"]
    props = {n: {"type": kinds[i % 3]} for i, n in enumerate(names)}
    good = {"integer": 1, "string": "s", "boolean": True}
    rng = random.Random(11)
    for closed in (False, True):
        schema = {"type": "object", "properties": props, "required": [names[1], names[4]]}
        if closed:
            schema["additionalProperties"] = False
        node = json_schema_to_node(schema, key_order="any")
        for _ in range(300):
            keys = rng.sample([*names, "x"], rng.randint(0, len(names) + 1))
            inst = {}
            for k in keys:
                kind = props[k]["type"] if k in props else "integer"
                inst[k] = good[kind] if rng.random() < 0.9 else good[rng.choice(kinds)]
            text = json.dumps(inst)
            assert accepts(node, text) == is_valid(schema, inst), (schema, text)
        full = {n: good[props[n]["type"]] for n in reversed(names)}
        assert accepts(node, json.dumps(full))
        assert not accepts(node, json.dumps(full)[:-1] + f', "{names[0]}": 1}}')  # a name twice
        missing = {k: v for k, v in full.items() if k != names[4]}
        assert not accepts(node, json.dumps(missing))


def test_bound_is_the_place_not_the_schema():
    """A place with one name more than ``MAX_PERMUTED`` keeps the "around" orders, even where the
    schema lowered there lists fewer (another ``oneOf`` branch declares the rest): oneOf stays exact."""
    names = [f"k{i}" for i in range(MAX_PERMUTED + 1)]
    small = {"properties": {n: {"type": "integer"} for n in names[:3]}, "required": names[:3]}
    rest = {"properties": {n: {"type": "integer"} for n in names[3:]}, "required": [names[3]]}
    schema = {"type": "object", "oneOf": [small, rest]}
    node = json_schema_to_node(schema, key_order="any")
    rng = random.Random(5)
    for _ in range(300):
        keys = rng.sample(names, rng.randint(0, len(names)))
        inst = {k: 1 for k in keys}
        assert not accepts(node, json.dumps(inst)) or is_valid(schema, inst), inst
    ordered = {n: 1 for n in names[:3]}
    assert accepts(node, json.dumps(ordered)) == is_valid(schema, ordered)


def _chain(items, tail):
    from guided.grammar.regex_ast import seq

    node = tail
    for x in reversed(items):
        node = seq(x, node)
    return node


@pytest.mark.parametrize("shape", ["required", "optional", "mixed", "empty-member", "lone-tail", "epsilon"])
def test_member_suffixes_equal_the_seq_chain(shape):
    # _members builds only the suffixes it uses (a long list of required members made every one,
    # quadratic in its length); each must be the node the chain of seq calls made, so the grammar
    # stays the same
    from guided.grammar.regex_ast import EMPTY, EPSILON, Seq, literal, optional, repeat, seq
    from guided.schema.objects import _Suffixes

    sep = literal(",")
    member = [seq(literal(f'"k{i}":'), literal(str(i))) for i in range(7)]
    req = {"required": [True] * 7, "optional": [False] * 7, "mixed": [i % 3 == 0 for i in range(7)],
           "empty-member": [True] * 7, "lone-tail": [False], "epsilon": [True] * 3}[shape]  # fmt: skip
    items = [seq(sep, m) if r else optional(seq(sep, m)) for m, r in zip(member, req, strict=False)]
    if shape == "empty-member":
        items[4] = seq(sep, EMPTY)
    tail = {"lone-tail": EPSILON, "epsilon": EPSILON}.get(shape, repeat(seq(sep, literal("x"))))
    after = _Suffixes(items, tail)
    for i in range(len(items) + 1):
        want = _chain(items[i:], tail)
        got = after(i)
        assert got == want and got.__class__ is want.__class__, (shape, i)
    assert _Suffixes([Seq((Seq((literal("a"), literal("b"))),))], EPSILON)(0) == _chain(
        [Seq((Seq((literal("a"), literal("b"))),))], EPSILON
    )


def test_many_required_members_in_declared_order():
    names = [f"p{i}" for i in range(120)]
    schema = {"type": "object", "properties": {n: {"type": "integer"} for n in names}, "required": names[::2]}
    node = json_schema_to_node(schema)
    good = {n: i for i, n in enumerate(names) if i % 3}
    good.update({n: 0 for n in names[::2]})
    ordered = {n: good[n] for n in names if n in good}
    assert is_valid(schema, ordered) and fullmatch(node, json.dumps(ordered))
    missing = dict(ordered)
    del missing["p4"]
    assert not fullmatch(node, json.dumps(missing))
