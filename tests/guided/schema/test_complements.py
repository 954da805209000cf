"""Complements (``not``, ``if``/``else``, ``oneOf`` exclusivity, ``contains``) are exact on values.

A value has many spellings (``1``, ``1.0``, ``1e0``; members in any order). A complement must refuse
every spelling of every value the complemented schema accepts; where the refused values have no
schema of their own the compiler takes the complement among spellings without exponent, so beside
it numbers have no exponent: a restriction of the output, never a relaxation. Oracle: ``jsonschema``.
"""

from __future__ import annotations

import json
import warnings

import jsonschema
import pytest

from guided.compile_service import CompileService
from guided.constraints import JsonSchema
from guided.grammar.cfg_ir import CfgGrammar

UNIQUE_OBJECT = {"type": "object", "properties": {"x": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}}
# (schema, accepted, refused): every text in `accepted` is valid and compiled-accepted; every text in
# `refused` is refused (invalid per jsonschema, or a valid number with an exponent beside a complement:
# the documented restriction).
CASES = [
    ({"not": {"type": "integer"}}, ["1.5", '"x"', "null", "[1]"], ["1", "1.0", "1.00", "1e0", "1e5", "-0"]),
    ({"not": {"const": 1}}, ["2", "1.5", '"1"'], ["1", "1.0", "1.00", "1e0", "10e-1"]),
    ({"not": {"const": 0}}, ["1", "0.5"], ["0", "-0", "0.0", "-0.0", "0e5"]),
    ({"not": {"type": "number", "minimum": 0}}, ["-1", "-0.5", '"a"'], ["0", "-0", "-0.0", "1e0", "1.50"]),
    ({"not": {"const": 1.5}}, ["1.25", "15"], ["1.5", "1.50", "15e-1"]),
    ({"not": {"enum": [1, 2.5]}}, ["2", "3"], ["1", "1.0", "2.5", "2.50", "25e-1"]),
    ({"not": {"multipleOf": 2}}, ["3", "1.5"], ["4", "4.0", "4e0"]),
    ({"not": {"const": {"a": 1, "b": 2}}}, ['{"a":1}', '{"a":1,"b":3}'], ['{"a":1,"b":2}', '{"b":2,"a":1}', '{"a":1.0,"b":2}']),
    ({"not": {"const": [1, 2]}}, ["[2,1]", "[1]"], ["[1,2]", "[1.0,2]", "[1e0,2]"]),
    (
        {"not": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a"]}},
        ['{"b":"x"}', '{"a":"s"}', '{"a":1.5}', "3"],
        ['{"a":1}', '{"b":"x","a":1}', '{"x":1,"a":1}', '{"a":1.0}'],
    ),
    ({"not": {"required": ["a", "b"]}}, ['{"a":1}', '{"c":{"a":1,"b":2}}'], ['{"a":1,"b":1}', '{"b":1,"a":1}', "1", "[]"]),
    ({"type": "number", "not": {"const": 1}}, ["2", "0.5", "2.50", "-0"], ["1", "1.0", "1.000", "1e0", "2e0"]),
    ({"not": {"type": "number", "multipleOf": 2}}, ["3", "2.5", "4.01"], ["2", "2.0", "4.00", "-0", "-0.0", "4e0"]),
    ({"not": {"type": "number", "multipleOf": 0.1}}, ["0.25", "1.75"], ["1.5", "1.50", "2", "2.0", "-0"]),
    ({"not": {"type": "integer", "maximum": 0}}, ["1", "0.5", "-0.5"], ["0", "-0", "-0.0", "-3", "-3.00"]),
    ({"type": "array", "items": {"type": "number"}, "not": {"const": [1]}}, ["[2]", "[1,1]"], ["[1]", "[1e0]", "[1.0]"]),
    ({"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 0}]}, ["-1", "0.5"], ["1", "1.0", "1e0", "0"]),
    # branches proved apart from every other need no complement: an object branch whose complement
    # cannot be written (duplicate items are left to the matcher) beside two that overlap on null or 1
    ({"oneOf": [{"type": ["array", "null"], "items": {"enum": ["a", "b"]}}, {"type": "null"}, UNIQUE_OBJECT]},
     ['["a","a"]', "[]", '{"x":["a","b"]}', "{}"], ["null", '{"x":["a","a"]}', '["c"]', "1"]),
    ({"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 0}, UNIQUE_OBJECT]},
     ["-1", "0.5", '{"x":["a"]}'], ["1", "1.0", "0", '{"x":["b","b"]}']),
    ({"if": {"const": 0}, "then": False}, ["1", '"a"'], ["0", "0.0", "-0", "0e5"]),
    ({"if": {"required": ["a"]}, "then": False}, ['{"b":1}'], ['{"a":1}', '{"b":1,"a":1}', "2"]),
    ({"not": {"properties": {"a": {"type": "integer"}}}}, ['{"a":"x"}', '{"a":0.5}'], ['{"a":1}', '{"a":1e0}', '{"b":1}', "3"]),
    ({"not": {"type": "array", "items": {"type": "integer"}}}, ['["x"]', "[0.5]"], ["[1.0]", "[1e0]", "[]"]),
    ({"type": "array", "contains": {"const": 1}, "maxContains": 1}, ["[1]", "[1,2]"], ["[1,1]", "[1,1.0]", "[1e0,1]", "[2]"]),
    ({"not": {"type": "array", "contains": {"const": 1}}}, ["[2]", "[]"], ["[1]", "[1.0]", "[2,1]"]),
]


@pytest.fixture(scope="module")
def service(vocab_builtin):
    s = CompileService(vocab_builtin, timeout_s=10.0, cache_size=4)
    yield s
    s.shutdown()


def _accepts(compiled, tokenizer, text: str) -> bool:
    matcher = compiled.matcher()
    ids = tokenizer.encode(text, add_special_tokens=False)
    return all(matcher.accept_token(t) for t in ids) and matcher.is_accepting()


@pytest.mark.parametrize("schema, accepted, refused", CASES, ids=[json.dumps(c[0]) for c in CASES])
def test_complement_exact_on_values(service, tokenizer_builtin, schema, accepted, refused):
    validator = jsonschema.Draft202012Validator(schema)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = service.compile(JsonSchema(schema, strict=False))
    for text in accepted:
        assert validator.is_valid(json.loads(text)), f"test data: {text} should be valid"
        assert _accepts(compiled, tokenizer_builtin, text), f"refuses valid {text}"
    for text in refused:
        got = _accepts(compiled, tokenizer_builtin, text)
        assert not got, f"accepts {text}" + ("" if validator.is_valid(json.loads(text)) else " (invalid)")


def test_generation_beside_a_complement_has_no_exponents(service, tokenizer_builtin):
    """Outside complements numbers keep every spelling; beside one, every spelling but exponents."""
    free = service.compile(JsonSchema({"type": "number"}))
    beside = service.compile(JsonSchema({"type": "number", "not": {"const": 3}}))
    for text in ("1.0", "1e5", "-0", "2.50"):
        assert _accepts(free, tokenizer_builtin, text)
        assert _accepts(beside, tokenizer_builtin, text) == ("e" not in text)
    assert not _accepts(beside, tokenizer_builtin, "3.0")


# `not` over every keyword family the complement schemas cover (and the internal member keyword):
# each compiled schema accepts only valid texts of this pool, and the listed ones.
POOL = [
    "null", "true", "0", "1", "1.0", "1e0", "-0", "2.5", "-3", "7", '""', '"a"', '"abc"', '"abcdef"',
    "[]", "[1]", "[1,2]", '["a",1]', "[1,1]", "[[]]", "{}", '{"a":1}', '{"b":1}', '{"a":1,"b":2}',
    '{"b":2,"a":1}', '{"a":"x"}', '{"x1":1}', '{"a":1,"c":3}', '{"c":{"a":1}}', '{"aa":1,"ab":"s"}',
]  # fmt: skip
FAMILIES = [
    ({"not": {"minLength": 2}}, ['"a"', '""']),
    ({"not": {"type": "string", "maxLength": 2}}, ['"abc"', "1", "[]"]),
    ({"not": {"minimum": 1}}, ["0", "-3"]),
    ({"not": {"type": "number", "exclusiveMaximum": 2}}, ["2.5", "7", "{}"]),
    ({"not": {"items": {"type": "integer"}}}, ['["a",1]']),
    ({"not": {"prefixItems": [{"type": "string"}]}}, ["[1]", "[1,2]"]),
    ({"not": {"minItems": 2}}, ["[]", "[1]"]),
    ({"not": {"contains": {"const": 1}, "maxContains": 1}}, ["[1,1]"]),
    ({"not": {"contains": {"type": "string"}}}, ["[1]", "[]"]),
    ({"not": {"additionalProperties": False, "properties": {"a": {}}}}, ['{"b":1}', '{"a":1,"b":2}']),
    ({"not": {"patternProperties": {"^a": {"type": "integer"}}}}, ['{"a":"x"}', '{"aa":1,"ab":"s"}']),
    ({"not": {"propertyNames": {"maxLength": 1}}}, ['{"x1":1}', '{"aa":1,"ab":"s"}']),
    ({"not": {"minProperties": 2}}, ["{}", '{"a":1}']),
    ({"not": {"dependentRequired": {"a": ["b"]}}}, ['{"a":1}', '{"a":1,"c":3}']),
    ({"not": {"anyOf": [{"type": "string"}, {"type": "array"}]}}, ["1", "{}", "null"]),
    ({"not": {"oneOf": [{"type": "integer"}, {"minimum": 2}]}}, ["7", "1.5"]),
    ({"not": {"if": {"type": "integer"}, "then": {"minimum": 5}, "else": {"type": "string"}}}, ["1", "2.5"]),
    ({"not": {"not": {"type": "string"}}}, ['"a"', '""']),
    ({"not": {"allOf": [{"type": "object"}, {"required": ["a"]}]}}, ['{"b":1}', "1"]),
    ({"not": {"$ref": "#/$defs/s"}, "$defs": {"s": {"type": "array", "maxItems": 1}}}, ["[1,2]", "1"]),
]


@pytest.mark.parametrize("schema, required", FAMILIES, ids=[json.dumps(f[0]) for f in FAMILIES])
def test_complement_families_sound(service, tokenizer_builtin, schema, required):
    validator = jsonschema.Draft202012Validator(schema)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = service.compile(JsonSchema(schema, strict=False))
        closed = service.compile(JsonSchema(schema))  # objects closed (the default): sound as well
    accepted = [t for t in POOL if _accepts(compiled, tokenizer_builtin, t)]
    assert [t for t in accepted if not validator.is_valid(json.loads(t))] == []
    assert [t for t in POOL if _accepts(closed, tokenizer_builtin, t) and not validator.is_valid(json.loads(t))] == []
    for text in required:
        assert validator.is_valid(json.loads(text)), f"test data: {text} should be valid"
        assert text in accepted or _accepts(compiled, tokenizer_builtin, text), f"refuses valid {text}"


def test_strict_closes_generated_objects_never_the_complemented_ones(service, tokenizer_builtin):
    """`strict` restricts what is generated and never relaxes the schema: inside `not`, the schema
    keeps its literal meaning (closing it there would let `{"a":1,"b":2}` through, an instance of
    the open inner schema), while the objects generated are closed to the names the schema speaks
    of. Every accepted text is valid under the literal schema."""
    schema = {"not": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = service.compile(JsonSchema(schema, strict=True))
        literal = service.compile(JsonSchema(schema, strict=False))
    validator = jsonschema.Draft202012Validator(schema)
    for text, expected in (('{"a":1}', False), ('{"a":1,"b":2}', False), ('{"a":"x"}', True), ("{}", True),
                           ('{"b":2}', True), ("3", True)):  # fmt: skip
        assert validator.is_valid(json.loads(text)) == expected
        assert _accepts(literal, tokenizer_builtin, text) == expected, text
    for text in ('{"a":1}', '{"a":1,"b":2}', '{"b":2}', '{"a":"x","b":2}'):  # refused, or a name it never speaks of
        assert not _accepts(compiled, tokenizer_builtin, text), text
    for text in ('{"a":"x"}', "{}", "3", '"s"'):
        assert _accepts(compiled, tokenizer_builtin, text), text


def test_one_of_disjointness_proofs_do_not_depend_on_the_clock(monkeypatch):
    """oneOf branches proved disjoint on upper bounds (arrays told apart by their first item, which
    facts.disjoint does not read; the items after it are schema-free) are their union however slow
    the proof runs: it is bounded by work (states per search, derivatives and
    expressions over the proof), never by seconds, so a loaded machine lowers a schema to the same
    grammar (and the disk cache holds one entry for it). A proof that took past 100 ms used to fail,
    and exclusivity was written with complements instead."""
    import time

    from guided.grammar import ExprPool
    from guided.schema import intersections
    from guided.schema.compiler import json_schema_to_grammar

    schema = {"oneOf": [{"type": "array", "minItems": 1, "prefixItems": [{"const": kind}]}
                        for kind in ("miter", "round", "bevel")]}  # fmt: skip
    searches = []

    class SlowPool(ExprPool):
        def is_live(self, e: int, budget: int = 200_000) -> bool:
            searches.append(e)
            time.sleep(0.15)
            return super().is_live(e, budget)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quick = json_schema_to_grammar(schema)
        monkeypatch.setattr(intersections, "ExprPool", SlowPool)
        slow = json_schema_to_grammar(schema)
    assert len(searches) == 3  # the three pairs, each proved apart
    # (a lowered tree's repr is not printed: it can be exponential)
    if isinstance(quick, CfgGrammar):
        same = (slow.start, slow.rules, slow.terminals) == (quick.start, quick.rules, quick.terminals)
    else:  # a regex (its schema-free values as Recursive leaves)
        same = slow == quick
    assert same


def test_one_of_open_objects_sharing_a_member_stay_exact(service, tokenizer_builtin):
    """Codux's scripts: a oneOf of two open objects, each with its own required name and a shared
    optional member of one schema. Exclusivity puts beside each branch the values the other refuses;
    one case of those is "the shared member is not an array of strings": an array that ``contains``
    a non-string, which the branch's own ``items: string`` leaves empty. It is dropped as such (no
    item meets both), instead of intersecting the two item languages, whose schema-free values
    needed a depth bound there (a warning, then an emptiness search past 200,000 states at the first
    mask, which failed the request). Exact against jsonschema with ``key_order="any"``, without a
    warning, at any depth; with the declared order (the default), sound, and the texts in that
    order accepted ("command" is a name of the place: it comes before "run", also in B's objects)."""
    from guided.schema.compiler import compile_json_schema

    strings = {"type": "array", "items": {"type": "string"}}
    schema = {"oneOf": [
        {"type": "object", "properties": {"command": {"type": "string"}, "trigger": strings}, "required": ["command"]},
        {"type": "object", "properties": {"run": strings, "trigger": strings}, "required": ["run"]}]}  # fmt: skip
    deep = "[" * 14 + "1" + "]" * 14
    validator = jsonschema.Draft202012Validator(schema)
    texts = ['{"command": "x"}', '{"run": ["a"]}', '{"command": "x", "trigger": ["a"], "title": {"a": [1, null]}}',
             '{"command": "x", "run": ["a"]}', '{"command": 2, "run": ["a"]}', '{"command": 1}', "{}",
             '{"command": "x", "trigger": [1]}', '{"run": [], "trigger": ["a"]}', '{"run": [], "trigger": [[]]}',
             '{"command": "x", "more": ' + deep + "}", '{"command": ' + deep + ', "run": ["b"]}',
             '{"run": ["a"], "command": 2}', '{"trigger": ["a"], "run": []}']  # fmt: skip
    for key_order in ("any", "declared"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            compiled = compile_json_schema(service.grammars, schema, key_order=key_order)
        for i, text in enumerate(texts):
            valid, accepted = validator.is_valid(json.loads(text)), _accepts(compiled, tokenizer_builtin, text)
            assert accepted == valid or (key_order == "declared" and i >= 12 and not accepted), (key_order, text)


def test_one_of_refusing_arrays_of_closed_objects_stays_exact(service, tokenizer_builtin):
    """Tye's services: a oneOf where one branch's member is an array of closed objects that the other
    branch leaves to any value. The other branch then takes that member's refusal: an array that
    ``contains`` an item which is no such object. Without ``maxContains`` the array is any items
    around one counted item, so the items not counted (a complement of the closed object, beside
    schema-free values: a depth bound, with a warning) are not needed. Exact against jsonschema,
    without a warning, at any depth."""
    from guided.schema.compiler import compile_json_schema

    volume = {"type": "object", "properties": {"source": {"type": "string"}, "target": {"type": "string"}},
              "required": ["target"], "additionalProperties": False}  # fmt: skip
    schema = {"oneOf": [
        {"type": "object", "properties": {"name": {"type": "string"}, "image": {"type": "string"},
                                          "volumes": {"type": "array", "items": volume}}, "required": ["name", "image"]},
        {"properties": {"name": {"type": "string"}, "include": {"type": "string"}}, "required": ["name", "include"]}]}  # fmt: skip
    deep = "[" * 13 + "1" + "]" * 13
    validator = jsonschema.Draft202012Validator(schema)
    texts = ['{"name": "a", "image": "x"}', '{"name": "a", "include": "y"}', '{"name": "a", "image": "x", "include": "y"}',
             '{"name": "a", "include": "y", "volumes": [{"target": "t"}]}',
             '{"name": "a", "image": "x", "include": "y", "volumes": [{"target": 1}]}',
             '{"name": "a", "image": "x", "include": "y", "volumes": [{"source": "s"}, {"target": "t"}]}',
             '{"name": "a", "image": "x", "include": "y", "volumes": [{"target": "t", "other": 1}]}',
             '{"name": "a", "image": "x", "include": "y", "volumes": [{"target": "t"}]}',
             '{"name": "a", "image": "x", "include": "y", "volumes": []}',
             '{"name": "a", "include": "y", "volumes": [' + deep + "]}",
             '{"name": "a", "image": "x", "include": "y", "volumes": [{"target": "t"}, ' + deep + "]}",
             '{"name": "a", "image": "x", "volumes": [{"target": "t"}, 1]}']  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled = compile_json_schema(service.grammars, schema, key_order="any")
    for text in texts:
        assert _accepts(compiled, tokenizer_builtin, text) == validator.is_valid(json.loads(text)), text


def test_one_of_sharing_an_array_of_closed_objects_stays_exact(service, tokenizer_builtin):
    """Tye's executable and azureFunction services: both declare ``env``, an array of closed objects,
    so each takes the other's refusal of it: an array that ``contains`` an item which is no such
    object, beside its own ``items``. The counted items are then met as one schema, which merges
    case by case (a closed object beside "a member named none of its names" is no object), so no
    intersection of item languages with schema-free values is left. Exact against jsonschema,
    without a warning."""
    from guided.schema.compiler import compile_json_schema

    env = {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"},
           "value": {"type": "string"}}, "required": ["name", "value"], "additionalProperties": False}}  # fmt: skip
    schema = {"oneOf": [
        {"type": "object", "properties": {"name": {"type": "string"}, "exe": {"type": "string"}, "env": env},
         "required": ["name", "exe"]},
        {"type": "object", "properties": {"name": {"type": "string"}, "func": {"type": "string"}, "env": env},
         "required": ["name", "func"]}]}  # fmt: skip
    validator = jsonschema.Draft202012Validator(schema)
    texts = ['{"name": "a", "exe": "x"}', '{"name": "a", "func": "f", "env": [{"name": "k", "value": "v"}]}',
             '{"name": "a", "exe": "x", "func": "f"}', '{"name": "a", "exe": "x", "func": "f", "env": [{"name": "k"}]}',
             '{"name": "a", "exe": "x", "env": [{"name": "k", "value": "v", "more": [[[[[[[[[[[[1]]]]]]]]]]]]}]}',
             '{"name": "a", "exe": "x", "env": [{"name": "k", "value": "v"}, 1]}', '{"name": "a", "exe": 1, "func": "f"}']  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled = compile_json_schema(service.grammars, schema, key_order="any")
    for text in texts:
        assert _accepts(compiled, tokenizer_builtin, text) == validator.is_valid(json.loads(text)), text
