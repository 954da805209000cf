"""Recursive JSON Schemas and unbounded schema-free values: the context-free path.

Instances run token by token through the compiled matcher on the Llama-3 vocabulary, with the
``jsonschema`` validator as the oracle; masks are checked against a brute-force viable-prefix
oracle on a tiny vocabulary; limits and errors name what they refuse.
"""

from __future__ import annotations

import json
import warnings

import jsonschema
import numpy as np
import pytest
from shared_data import shared_path

from guided.errors import SchemaError
from guided.grammar.cfg_ir import CfgGrammar
from guided.grammar.compiler import GrammarCompiler
from guided.grammar.regex_ast import And, Let, Not, alt, literal, repeat, seq
from guided.grammar.tokens.compiled_cfg import CompiledCfg
from guided.grammar.vocab import Vocabulary
from guided.schema.any_value import ANY, ANY_NAMES, ANY_PLAIN
from guided.schema.compiler import compile_json_schema, json_schema_to_grammar, json_schema_to_node
from guided.schema.recursion import Hole, has_meet, survey_holes

TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "v": {"type": "integer"},
                "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
            },
            "required": ["v"],
            "additionalProperties": False,
        }
    },
    "$ref": "#/$defs/node",
}
LINKED = {
    "type": "object",
    "properties": {"head": {"type": "string"}, "tail": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
    "required": ["head", "tail"],
    "additionalProperties": False,
}


def _nested(depth: int, leaf, wrap):
    value = leaf
    for _ in range(depth):
        value = wrap(value)
    return value


@pytest.fixture(scope="module")
def compiler(vocab_llama3):
    return GrammarCompiler(vocab_llama3)


def _accepts(compiled, tokenizer, text: str) -> bool:
    m = compiled.matcher()
    ids = tokenizer.encode(text, add_special_tokens=False)
    return all(m.is_allowed(t) and m.accept_token(t) for t in ids) and m.is_accepting()


def _check(compiler, tokenizer, schema, instances, registry=None):
    compiled = compile_json_schema(compiler, schema, registry=registry)
    grammar = getattr(compiled, "compiled", compiled)  # (inside the name check)
    assert isinstance(grammar, CompiledCfg) or _has_json_values(grammar)
    validator = jsonschema.Draft202012Validator(schema)
    for text in instances:
        try:
            expected = validator.is_valid(json.loads(text))
        except ValueError:  # not JSON at all
            expected = False
        assert _accepts(compiled, tokenizer, text) == expected, text


# ---------------------------------------------------------------------- structure
def test_non_recursive_schemas_stay_regular():
    for schema in (
        {"type": "string"},
        {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
    ):
        assert not isinstance(json_schema_to_grammar(schema), CfgGrammar)


def _has_json_values(compiled) -> bool:
    """Whether a grammar of the regular engine holds a schema-free value (a K_REC expression)."""
    from guided.grammar.automata.expr_pool import K_REC

    pool = getattr(compiled, "pool", None)
    return pool is not None and any(pool.kind[e] == K_REC for e in range(len(pool)))


def _json_value_leaves(node) -> set:
    from guided.grammar.regex_ast import Recursive

    found, stack, seen = set(), [node], set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, Recursive):
            found.add(x)
        stack.extend(getattr(x, "items", ()) or ((x.item,) if hasattr(x, "item") else ()))
    return found


def test_recursion_is_context_free():
    for schema in (TREE, LINKED):
        assert isinstance(json_schema_to_grammar(schema), CfgGrammar)


def test_schema_free_values_are_recursive_leaves_of_a_regex():
    """Without a recursive $ref, the only nonterminal is the schema-free value: it becomes a
    ``Recursive`` leaf of one regex (the regular engine derives through it), one leaf per lowering
    options, shared by every schema compiled with them."""
    leaves = [_json_value_leaves(json_schema_to_grammar(s)) for s in ({}, True, {"type": "object"}, {"type": "array"})]
    assert all(len(x) == 1 for x in leaves) and len(set().union(*leaves)) == 1
    (leaf,) = leaves[0]
    assert _json_value_leaves(leaf.body) == {leaf}  # the value nests inside itself
    compact = _json_value_leaves(json_schema_to_grammar({}, whitespace="compact"))
    assert len(compact) == 1 and compact != leaves[0]


def test_a_compile_binds_the_schema_free_values_where_no_intersection_is_above_them():
    # what compile_json_schema interns: the lowering's node as it is, its holes bound to the leaves
    # (a Let), the same expression as the node rebuilt with the leaves in place
    from guided.grammar.automata.expr_pool import ExprPool

    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {}}, "b": {"type": "object"}}}
    bound, filled = json_schema_to_grammar(schema, _bind=True), json_schema_to_grammar(schema)
    assert isinstance(bound, Let) and set(bound.values) == _json_value_leaves(filled) and not isinstance(filled, Let)
    pool = ExprPool()
    assert pool.intern(bound) == pool.intern(filled)


def test_the_schema_free_value_is_built_once_per_options():
    # its kinds, their union and the separator inside are the same objects for every lowering with
    # the same options (the context-free path finds separators by identity), others for other options
    from guided.schema.lowering import SchemaLowering
    from guided.schema.options import SchemaOptions

    def lowering(**options):
        return SchemaLowering({"type": "object"}, SchemaOptions(**options), None)

    a, b, c = lowering(), lowering(), lowering(whitespace="compact")
    assert a.anys.body() is b.anys.body() and a.sep is b.sep and a.anys_p.body() is b.anys_p.body()
    assert c.anys.body() != a.anys.body() and c.sep != a.sep
    assert lowering(max_ws=2).anys.body() != a.anys.body()


def test_an_intersection_beside_the_schema_free_values_keeps_the_context_free_path():
    # a oneOf of two patterns is an intersection with no hole below: beside an open object's other
    # members (schema-free values) the schema stays context-free; closed, it is one regex with it
    one_of = {"oneOf": [{"type": "string", "pattern": "^a"}, {"type": "string", "pattern": "b$"}]}
    schema = {"type": "object", "properties": {"a": one_of}}
    assert isinstance(json_schema_to_grammar(schema), CfgGrammar)
    closed = json_schema_to_grammar({**schema, "additionalProperties": False})
    assert not isinstance(closed, CfgGrammar) and has_meet(closed)
    assert not isinstance(json_schema_to_grammar({"type": "object", "properties": {"a": {"type": "string"}}}), CfgGrammar)


def test_what_filling_the_holes_meets():
    a, b = literal("a"), literal("b")
    free, plain, other = Hole(ANY), Hole(ANY_PLAIN), Hole("def")
    assert survey_holes(seq(a, free, repeat(alt(b, plain), 0, None)), ANY_NAMES) == ({ANY, ANY_PLAIN}, False)
    assert survey_holes(seq(a, free, alt(b, other)), ANY_NAMES) is None  # another nonterminal
    assert survey_holes(seq(free, And((a, b))), ANY_NAMES) is None  # an intersection no filling resolves
    assert survey_holes(seq(free, repeat(Not(a), 1, 2)), ANY_NAMES) is None
    # below an intersection, the holes are the resolution's: neither is an obstacle nor counted
    assert survey_holes(seq(free, And((seq(a, other), seq(a, plain)))), ANY_NAMES) == ({ANY}, True)
    assert survey_holes(alt(b, Not(seq(a, other))), ANY_NAMES) == (set(), True)


# holes under an intersection that on_meet replaces (their parents become regular pieces), shared
# definitions, repeats over holes, alternatives of both kinds
def _with_recursion(schema: dict) -> dict:
    """The schema or an array of itself: a recursive $ref keeps it on the context-free path."""
    return {"anyOf": [schema, {"type": "array", "items": {"$ref": "#"}}]}


BUILDER_SCHEMAS = [
    TREE,
    LINKED,
    _with_recursion({}),
    _with_recursion({"allOf": [{"enum": [{"bar": 8}]}, {"not": {"not": {"oneOf": [
        {"properties": {"bar": {}, "baz": {}}, "required": ["bar"]},
        {"properties": {"foo": {}}, "required": ["foo"]}]}}}]}),
    _with_recursion({"allOf": [{"enum": [{"bar": 2, "foo": "quux"}]}, {"not": {
        "properties": {"bar": {"type": "integer"}, "baz": {"type": "null"}}, "required": ["bar", "baz"]}}]}),
    {"type": "object", "properties": {"a": {"$ref": "#"}, "b": {"$ref": "#"}, "c": {"type": "array",
        "items": {"anyOf": [{"$ref": "#"}, {"type": "string"}]}, "minItems": 2, "maxItems": 4}}},
]  # fmt: skip


@pytest.mark.parametrize("schema", BUILDER_SCHEMAS, ids=range(len(BUILDER_SCHEMAS)))
def test_schema_rules_equal_the_generic_builders(schema, monkeypatch):
    # SchemaCfg's builder takes every non-Lex expression as non-regular and finds a run's terminal
    # by its nodes' identities: without the separator cut (its own test below), the grammar is the
    # one the generic GrammarBuilder makes, name for name
    from guided.grammar.cfg_ir import GrammarBuilder
    from guided.schema import recursion

    rules = recursion._HoleRules
    monkeypatch.setattr(recursion, "_HoleRules", lambda start, separator=None: rules(start))
    fast = json_schema_to_grammar(schema, key_order="any")
    monkeypatch.setattr(recursion, "_HoleRules", lambda start, separator=None: GrammarBuilder(start))
    generic = json_schema_to_grammar(schema, key_order="any")
    assert isinstance(fast, CfgGrammar) and isinstance(generic, CfgGrammar)
    assert list(fast.rules.items()) == list(generic.rules.items())
    assert list(fast.terminals.items()) == list(generic.terminals.items())


# an open object with declared names (the other names' member carries its comma) inside a recursion
SEPARATED = {
    "type": "object",
    "properties": {"target": {"type": "string"}, "type": {"type": "string"}, "kids": {"type": "array",
                   "items": {"$ref": "#"}}},
    "required": ["target"],
}  # fmt: skip


def test_separators_are_terminals_of_their_own(monkeypatch, vocab_builtin):
    """Runs are cut around the lowering's ``ws , ws``: no terminal holds it beside anything else, so
    after a comma and a quote one lexeme is in flight (the mask walk goes on in the lexer alone,
    where two lexemes, the comma alone and the comma begun with a name, made a parser step per
    byte). The masks along random paths are those of the grammar without the cut."""
    import random

    from guided.grammar.tokens.compiled_cfg import compile_cfg
    from guided.schema import recursion

    cut = json_schema_to_grammar(SEPARATED, key_order="any")
    rules = recursion._HoleRules
    monkeypatch.setattr(recursion, "_HoleRules", lambda start, separator=None: rules(start))
    whole = json_schema_to_grammar(SEPARATED, key_order="any")
    comma = [n for n, t in cut.terminals.items() if t.node == _separator()]
    assert len(comma) == 1
    for t in cut.terminals.values():
        assert t.node == _separator() or "," not in _plain(t.node), t.node
    assert any("," in _plain(t.node) and t.node != _separator() for t in whole.terminals.values())
    masks = {}
    for name, g in (("cut", cut), ("whole", whole)):
        compiled, rng, out = compile_cfg(vocab_builtin, g, regular_fast_path=False), random.Random(4), []
        dfa = compiled.dfa
        for _ in range(12):
            m = compiled.matcher()
            for _ in range(30):
                allowed = m.allowed_tokens()
                out.append(np.packbits(allowed).tobytes())
                options = np.flatnonzero(allowed)
                if not len(options) or not m.accept_token(int(rng.choice(options))):
                    break
        masks[name] = out
        after = dfa.walk(dfa.walk(0, b'{"target": "x"'), b', "')
        masks[name + " lexemes"] = len(dfa.configs[after][1])
    assert masks["cut"] == masks["whole"]
    assert masks["cut lexemes"] == 1 < masks["whole lexemes"], masks


def test_separator_cut_keeps_everything_else_whole():
    """The cut at its edges: a run that ends in the separator's first items, or spells a comma in a
    literal, is left whole; a separator at either end is cut off; pieces keep their order."""
    from guided.grammar.regex_ast import literal, seq
    from guided.schema.recursion import _HoleRules

    sep = _separator()
    ws = sep.items[0]
    cut = _HoleRules("start", sep)._pieces
    a, b = literal("a"), literal("b")
    assert cut(seq(a, b, ws, literal(","))) == [seq(a, b, ws, literal(","))]
    assert cut(literal('"a,b"')) == [literal('"a,b"')]
    assert cut(seq(a, sep, b)) == [a, sep, b]
    assert cut(seq(sep, a, sep)) == [sep, a, sep]
    assert cut(seq(a, sep, sep, b)) == [a, sep, sep, b]


def _separator():
    """The lowering's member separator under the default whitespace (up to 8 characters)."""
    from guided.grammar.regex_ast import chars, literal, repeat, seq

    ws = repeat(chars([(9, 10), (13, 13), (32, 32)]), 0, 8)
    return seq(ws, literal(","), ws)


def _plain(node) -> str:
    """The characters of a node's single-character leaves (enough to find a comma among them)."""
    from guided.grammar.regex_ast import Chars

    out, stack = [], [node]
    while stack:
        x = stack.pop()
        if isinstance(x, Chars):
            if len(x.ranges) == 1 and x.ranges[0][0] == x.ranges[0][1]:
                out.append(chr(x.ranges[0][0]))
        else:
            stack.extend(getattr(x, "items", ()) or ([x.item] if hasattr(x, "item") else []))
    return "".join(out)


def test_regex_api_keeps_its_bounds():
    with pytest.raises(SchemaError, match="context-free path"):
        json_schema_to_node(TREE)
    assert not isinstance(json_schema_to_node(TREE, max_depth=2), CfgGrammar)
    assert not isinstance(json_schema_to_grammar({}, any_depth=3), CfgGrammar)


def test_recursion_without_a_base_case_accepts_nothing():
    with pytest.raises(SchemaError, match="no \\(finite\\) instance"):
        json_schema_to_grammar(
            {
                "type": "object",
                "properties": {"next": {"$ref": "#"}},
                "required": ["next"],
                "additionalProperties": False,
            }
        )


def test_an_if_whose_then_and_else_take_everything_asks_nothing(compiler, tokenizer_llama3):
    """``if`` with an empty ``then`` and no ``else`` holds for every value. pulumi's schema has one that
    tests a member holding a recursive ``$ref``: split into cases, or complemented, it put the recursion
    under an intersection (an error). It is dropped, and the recursion stays exact."""
    node = {"type": "object", "required": ["type"],
            "properties": {"type": {"oneOf": [{"type": "string", "maxLength": 5}, {"$ref": "#/$defs/node"}]}},
            "if": {"properties": {"type": {"const": "array"}}}, "then": {}}  # fmt: skip
    schema = {"$defs": {"node": node}, "$ref": "#/$defs/node"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no relaxation
        _check(compiler, tokenizer_llama3, schema, [
            '{"type": "array"}', '{"type": {"type": {"type": "int"}}}', '{"type": {"type": "toolong"}}',
            '{"type": {}}', '{"type": "a", "x": 1}',
        ])  # fmt: skip
    # where unevaluatedProperties reads what the if evaluates, the if is kept (refused or exact)
    reads = {"if": {"properties": {"a": True}}, "then": {}, "unevaluatedProperties": False}
    try:
        compile_json_schema(compiler, reads)
    except SchemaError:
        return
    _check(compiler, tokenizer_llama3, reads, ['{"a": 1}', '{"b": 1}', "{}"])


def test_recursive_reference_under_not_is_an_error_or_relaxed():
    # the refused values have no schema of their own here (draft-07 `dependencies`): a complement of
    # a recursive language, which a context-free grammar cannot express
    schema = {
        "$defs": {
            "t": {"type": "object", "properties": {"a": {"not": {"$ref": "#/$defs/u"}}}},
            "u": {"dependencies": {"x": ["y"]}, "properties": {"b": {"$ref": "#/$defs/t"}}},
        },
        "$ref": "#/$defs/t",
    }
    with pytest.raises(SchemaError, match="not") as e:
        json_schema_to_grammar(schema)
    assert e.value.path.startswith("#/$defs/")
    with pytest.warns(UserWarning, match="recursive reference"):
        json_schema_to_grammar(schema, lenient=True)


def test_recursion_through_not_with_a_complement_schema(compiler, tokenizer_llama3):
    """t: arrays none of whose items is a t. Its complement is a schema (non-arrays, or arrays
    containing a t), so the two compile to mutually recursive nonterminals, exactly."""
    schema = {"$defs": {"t": {"type": "array", "items": {"not": {"$ref": "#/$defs/t"}}}}, "$ref": "#/$defs/t"}
    texts = ["[]", "[1]", "[[]]", "[[1]]", "[[[]]]", "[[[[]]]]", "[1,[]]", "[1,[[]]]", "1", "[[],[[]]]"]
    _check(compiler, tokenizer_llama3, schema, texts)


# ---------------------------------------------------------------------- token by token
def test_tree_and_linked_list(compiler, tokenizer_llama3):
    tree = {"v": 1, "kids": [{"v": 2, "kids": [{"v": 3, "kids": []}]}, {"v": 4}]}
    bad = {"v": 1, "kids": [{"v": 2, "kids": [{"w": 3}]}]}
    deep = _nested(30, {"v": 0}, lambda x: {"v": 1, "kids": [x]})
    _check(compiler, tokenizer_llama3, TREE, [json.dumps(x) for x in (tree, bad, deep, {"v": "x"})])
    linked = _nested(40, None, lambda x: {"head": "a", "tail": x})
    _check(
        compiler,
        tokenizer_llama3,
        LINKED,
        [json.dumps(linked), '{"head": "a", "tail": {"head": 1, "tail": null}}'],
    )


PRESENCE = [  # oneOf/anyOf that only say which names are present, beside properties that recurse
    {"properties": {"a": {"$ref": "#"}, "b": {}, "c": {}}, "additionalProperties": False,
     "oneOf": [{"required": ["a"]}, {"required": ["b", "c"]}]},
    {"type": "object", "properties": {"a": {"$ref": "#"}, "b": {}}, "anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
    {"properties": {"a": {"$ref": "#"}, "b": {}}, "oneOf": [{"required": ["a"]}]},
    {"properties": {"a": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}, "b": {}, "c": {}}, "required": ["c"],
     "oneOf": [{"required": ["a"]}, {"required": ["a", "b"]}]},
    # a property its patterns also match, both recursing: one allOf, merged on the schemas
    {"properties": {"a": {"type": "array", "items": {"$ref": "#"}, "title": "A"}, "b": {}},
     "patternProperties": {"^a": {"type": "array", "items": {"$ref": "#"}}}, "required": ["b"]},
]  # fmt: skip


@pytest.mark.parametrize("schema", PRESENCE)
def test_recursion_beside_presence_only_branches_and_patterns(compiler, tokenizer_llama3, schema):
    texts = ['{"b": 1, "c": 2}', '{"a": {"b": 1, "c": 2}}', '{"a": {"b": 1}}', '{"a": {"a": {"b": 1, "c": 1}}}',
             '{"a": {"b": 1}, "b": 2, "c": 3}', '{"b": 1}', '{"c": 1}', '{}', '1', '"s"', "null",
             '{"a": [{"b": 1}], "b": 0}', '{"a": [{"a": [], "b": 1}], "b": 0}', '{"a": [{"c": 1}], "b": 0}',
             '{"a": null, "c": 1}', '{"a": null, "b": 1, "c": 1}', '{"a": {"a": null, "c": 2}, "c": 1}']  # fmt: skip
    _check(compiler, tokenizer_llama3, schema, texts)


def test_recursion_through_two_items_schemas(compiler, tokenizer_llama3):
    """A property whose pattern gives other ``items`` (WashingtonPost's ``related_content``: a
    ``redirect`` list beside ``.*`` lists of content that recurses): one ``items: {allOf: [...]}``,
    still context-free."""
    n = {"type": "object", "properties": {"type": {"const": "n"}, "k": {"$ref": "#"}}, "required": ["type"],
         "additionalProperties": False}  # fmt: skip
    m = {"type": "object", "properties": {"type": {"const": "m"}, "url": {"type": "string"}}, "required": ["type"],
         "additionalProperties": False}  # fmt: skip
    schema = {"properties": {"r": {"type": "array", "items": {"$ref": "#/$defs/m"}, "maxItems": 1}},
              "patternProperties": {".*": {"type": "array", "items": {"anyOf": [{"$ref": "#/$defs/n"}, {"$ref": "#/$defs/m"}]}}},
              "$defs": {"n": n, "m": m}}  # fmt: skip
    texts = ['{"r": [{"type": "m", "url": "u"}]}', '{"r": [{"type": "n"}]}', '{"r": [{"type": "m"}, {"type": "m"}]}',
             '{"x": [{"type": "n", "k": {"r": [{"type": "m"}]}}]}', '{"x": [{"type": "n", "k": {"r": [{"type": "n"}]}}]}',
             '{"x": [{"type": "m", "k": {}}]}', '{"x": [1]}']  # fmt: skip
    _check(compiler, tokenizer_llama3, schema, texts)


def test_schema_free_values_nest_50_deep(compiler, tokenizer_llama3):
    arrays = json.dumps(_nested(50, 1, lambda x: [x]))
    objects = json.dumps(_nested(50, {}, lambda x: {"k": x}))
    mixed = json.dumps(_nested(50, "s", lambda x: {"a": [x, None]}))
    _check(compiler, tokenizer_llama3, {}, [arrays, objects, mixed, arrays[:-1]])
    _check(compiler, tokenizer_llama3, {"type": "object"}, [objects, mixed, arrays])
    open_props = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}
    _check(compiler, tokenizer_llama3, open_props, ['{"id": 1, "x": ' + mixed + "}", '{"x": ' + mixed + "}"])


def test_not_of_a_kind_stays_exact(compiler, tokenizer_llama3):
    deep = json.dumps(_nested(20, 1, lambda x: [x]))
    _check(compiler, tokenizer_llama3, {"not": {"type": "string"}}, [deep, '"s"', "1"])
    _check(compiler, tokenizer_llama3, {"not": {"type": "object"}}, [deep, '{"a": 1}', "null"])


def test_pydantic_recursive_model(compiler, tokenizer_llama3):
    pydantic = pytest.importorskip("pydantic")
    from guided.schema.pydantic_models import json_schema_for

    class Node(pydantic.BaseModel):
        name: str
        children: list[Node] = []

    Node.model_rebuild()
    schema = json_schema_for(Node)
    compiled = compile_json_schema(compiler, schema)
    assert isinstance(getattr(compiled, "compiled", compiled), CompiledCfg)  # (inside the name check)
    good = Node(name="a", children=[Node(name="b", children=[Node(name="c")]), Node(name="d")])
    text = good.model_dump_json()
    assert _accepts(compiled, tokenizer_llama3, text)
    assert Node.model_validate_json(text) == good
    assert not _accepts(compiled, tokenizer_llama3, '{"name": "a", "children": [{"children": []}]}')


# JSON Schema Test Suite groups (draft 2020-12) whose schema has a $ref cycle
SUITE_GROUPS = [
    ("ref.json", "root pointer ref"),
    ("ref.json", "Recursive references between schemas"),
    ("unevaluatedProperties.json", "unevaluatedProperties + single cyclic ref"),
]


def test_json_schema_test_suite_recursive_groups(compiler, tokenizer_llama3):
    from guided.bench.jsts import load_groups, remote_registry, serialize

    root = shared_path("data", "json-schema-test-suite")
    registry = remote_registry(root)
    groups = {(g["file"], g["description"]): g for g in load_groups(root)}
    for key in SUITE_GROUPS:
        g = groups[key]
        assert isinstance(json_schema_to_grammar(g["schema"], registry=registry, any_depth=10), CfgGrammar), (
            key
        )
        compiled = compile_json_schema(compiler, g["schema"], registry=registry)
        for t in g["tests"]:
            text = serialize(g["schema"], t["data"], registry)
            assert _accepts(compiled, tokenizer_llama3, text) == t["valid"], (key, t["description"])


# MaskBench files whose schema has a $ref cycle (they failed as recursive before)
MASKBENCH_RECURSIVE = ["Github_easy---o21858.json", "Github_medium---o27787.json", "Github_trivial---o47165.json",
                       "Github_medium---o5462.json", "Github_medium---o43196.json"]  # fmt: skip


@pytest.mark.parametrize("name", MASKBENCH_RECURSIVE)
def test_maskbench_recursive(name, compiler, tokenizer_llama3):
    doc = json.loads(shared_path("data", "maskbench", name).read_text())
    schema = doc["schema"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert isinstance(json_schema_to_grammar(schema, any_depth=10), CfgGrammar)
        compiled = compile_json_schema(compiler, schema)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    for t in doc["tests"]:
        assert validator.is_valid(t["data"]) == t["valid"]
        text = json.dumps(t["data"], ensure_ascii=False)
        assert _accepts(compiled, tokenizer_llama3, text) == t["valid"], text


# ---------------------------------------------------------------------- masks against brute force
TOKENS = [
    b"[",
    b"]",
    b"1",
    b",",
    b" ",
    b"[[",
    b"]]",
    b"1]",
    b", ",
    b"  ",
    b"[1",
    b"11",
    b"],",
    b" ]",
    b"[ ",
    b"[]",
]
MAX_WS = 8


def _tiny_vocab() -> Vocabulary:
    toks = [*TOKENS, b""]
    special = np.zeros(len(toks), dtype=np.bool_)
    special[-1] = True
    return Vocabulary(
        tokens=tuple(toks),
        special=special,
        eos_ids=(len(toks) - 1,),
        size=len(toks),
        special_text={len(toks) - 1: "<eos>"},
    )


def _ws_ok(text: str) -> bool:
    """The whitespace policy: runs of at most MAX_WS after ``[ ,`` and before ``] ,``, none at the ends."""
    i, n = 0, len(text)
    while i < n:
        if text[i] != " ":
            i += 1
            continue
        j = i
        while j < n and text[j] == " ":
            j += 1
        before, after = text[i - 1] if i else "", text[j] if j < n else ""
        limit = MAX_WS * ((before in "[,") and before != "") + MAX_WS * ((after in "],") and after != "")
        if j - i > limit or not before or not after:
            return False
        i = j
    return True


def _in_language(text: str, validator) -> bool:
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return _ws_ok(text) and validator.is_valid(value)


def _viable(text: str, validator) -> bool:
    """Whether some completion puts text in the language (over this alphabet these suffice)."""
    depth = max(text.count("[") - text.count("]"), 0)
    return any(_in_language(text + mid + "]" * depth, validator) for mid in ("", "1", "[]", "[1]"))


@pytest.mark.parametrize(
    "schema",
    [{}, {"$defs": {"t": {"type": "array", "items": {"$ref": "#/$defs/t"}}}, "$ref": "#/$defs/t"},
     {"type": "array", "items": {"anyOf": [{"type": "integer"}, {"$ref": "#"}]}, "maxItems": 2}],
)  # fmt: skip
def test_masks_match_brute_force(schema):
    vocab = _tiny_vocab()
    compiled = compile_json_schema(GrammarCompiler(vocab), schema)
    grammar = getattr(compiled, "compiled", compiled)  # (inside the name check)
    assert isinstance(grammar, CompiledCfg) or _has_json_values(grammar)
    validator = jsonschema.Draft202012Validator(schema)
    rng = np.random.default_rng(0)
    eos = vocab.size - 1
    for _ in range(12):
        m, text = compiled.matcher(), ""
        for _ in range(14):
            mask = np.zeros((1, (vocab.size + 31) // 32), dtype=np.int32)
            m.fill_bitmask(mask, 0)
            allowed = [bool((int(mask[0, i // 32]) >> (i % 32)) & 1) for i in range(vocab.size)]
            for i, tok in enumerate(TOKENS):
                assert allowed[i] == _viable(text + tok.decode(), validator), (schema, text, tok)
            assert allowed[eos] == _in_language(text, validator), (schema, text)
            choices = [i for i in range(len(TOKENS)) if allowed[i]]
            if not choices:
                break
            pick = int(rng.choice(choices))
            assert m.accept_token(pick)
            text += TOKENS[pick].decode()


def test_context_free_work_is_bounded_by_mask_timeout(vocab_builtin):
    """The eager terminal checks and the lazy masks of a context-free grammar honour ``mask_timeout_s``."""
    from guided.errors import LimitError
    from guided.grammar.compiler import GrammarCompiler
    from guided.grammar.tokens.compiled_cfg import CompiledCfg
    from guided.schema.compiler import compile_json_schema

    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "allOf": [{"pattern": "^[a-c]+$"}, {"pattern": "c$"}]},
            "kids": {"type": "array", "items": {"$ref": "#"}},
        },
    }
    bitmask = np.zeros((1, vocab_builtin.bitmask_words), dtype=np.int32)
    with pytest.raises(LimitError, match="mask_timeout_s"):  # at compile (terminals) or at the first mask
        compile_json_schema(GrammarCompiler(vocab_builtin, mask_timeout_s=1e-9), schema).matcher().fill_bitmask(
            bitmask, 0
        )
    compiled = compile_json_schema(GrammarCompiler(vocab_builtin, mask_timeout_s=None), schema)
    assert isinstance(getattr(compiled, "compiled", compiled), CompiledCfg)  # (inside the name check) and compiled.mask_timeout_s is None
    compiled.matcher().fill_bitmask(bitmask, 0)
    assert bitmask.any()


def test_if_chains_over_recursion_spread_into_cases(compiler, tokenizer_llama3):
    """An allOf of if/then on one discriminator whose branches recurse (SchemaStore's Minecraft number
    providers): each if splits in two, the conjunction spreads into cases, and impossible ones (the
    required discriminator equal to two constants, or to none of an enum's values) drop as they are
    built: one case per value plus "absent", no intersection over the recursion; exact against jsonschema.
    1 and 1.0 are one constant; `true` in a nested allOf does not stop a merge."""
    from guided.schema.merge import merge, merge_cases

    provider = {"properties": {"type": {"enum": ["const", "uniform", "binomial", 1]}},
                "allOf": [{"if": {"properties": {"type": {"const": "const"}}},
                           "then": {"properties": {"value": {"type": "number"}}}},
                          {"if": {"properties": {"type": {"const": "uniform"}}},
                           "then": {"properties": {"min": {"$ref": "#/$defs/p"}, "max": {"$ref": "#/$defs/p"}}}},
                          {"if": {"properties": {"type": {"const": "binomial"}}},
                           "then": {"properties": {"n": {"$ref": "#/$defs/p"}}, "required": ["n"]}},
                          {"if": {"properties": {"type": {"const": 1.0}}}, "then": {"required": ["one"]}}]}  # fmt: skip
    parts = [{k: v for k, v in provider.items() if k != "allOf"}, *provider["allOf"]]
    cases = merge_cases(parts)
    # 4 values + absent ("another value" is impossible: the enum beside the ifs allows none)
    assert cases is not None and len(cases["anyOf"]) == 5
    assert merge([{"type": "object"}, {"allOf": [True, {"required": ["a"]}]}]) == {"type": ["object"], "required": ["a"]}
    values = [{}, {"type": "const", "value": 1}, {"type": "const", "value": "x"}, {"type": "uniform", "min": {}},
              {"type": "uniform", "min": {"type": "binomial"}}, {"type": "uniform", "min": {"type": "binomial", "n": {}}},
              {"type": "binomial"}, {"type": "binomial", "n": {"type": "const", "value": []}}, {"value": "x"},
              {"min": {"type": "x"}}, {"type": 1}, {"type": 1, "one": 0}, {"type": "other"}, {"n": 1}, [],
              {"type": "uniform", "max": {"type": "uniform", "min": {"type": "const", "value": 2.5}}}]  # fmt: skip
    schema = {"$defs": {"p": provider}, "$ref": "#/$defs/p"}
    _check(compiler, tokenizer_llama3, schema, [json.dumps(v) for v in values])


def test_if_beside_other_keywords_spreads_into_cases(compiler, tokenizer_llama3):
    """An if/then/else beside an object's own keywords, its then holding another if (SchemaStore's
    ui5.yaml and codeship-steps): each case is the object's keywords merged with one way through the
    ifs, one object per case, so nothing meets the object's own language in an intersection. Here a
    recursive value sits beside the ifs (an intersection over it is refused); nested ifs on enums
    prune the cases that cannot hold. Exact against jsonschema."""
    node = {
        "type": "object",
        "required": ["version"],
        "properties": {"version": {"enum": ["1", "2", "3"]}, "kids": {"type": "array", "items": {"$ref": "#"}}},
        "if": {"properties": {"version": {"enum": ["2", "3"]}}},
        "then": {
            "required": ["kind"],
            "properties": {"kind": {"enum": ["leaf", "group"]}},
            "if": {"properties": {"kind": {"const": "group"}}},
            "then": {"required": ["kids"]},
            "else": {"properties": {"version": {"const": "3"}, "kids": False}},
        },
        "else": {"properties": {"kind": False}},
    }
    grammar = json_schema_to_grammar(node)
    assert isinstance(grammar, CfgGrammar)
    values = ['{"version": "1"}', '{"version": "1", "kind": "leaf"}', '{"version": "1", "kids": [{"version": "1"}]}',
              '{"version": "2"}', '{"version": "2", "kind": "leaf"}', '{"version": "3", "kind": "leaf"}',
              '{"version": "3", "kind": "leaf", "kids": []}', '{"version": "2", "kind": "group"}',
              '{"version": "2", "kind": "group", "kids": [{"version": "3", "kind": "leaf"}]}',
              '{"version": "2", "kind": "group", "kids": [{"version": "2", "kind": "leaf"}]}',
              '{"version": "4"}', '{"kind": "leaf"}', '{"version": "3", "kind": "other"}', "[]"]  # fmt: skip
    _check(compiler, tokenizer_llama3, node, values)


def test_merge_meets_enums_and_cases_read_them():
    """Two enums merge into the values they share (as JSON values: 1 and 1.0 are one, true is not
    1); none shared: no merge. A case whose required name must take an enum's value and also one
    of the values a failed if excludes, with none left, cannot hold."""
    from guided.schema.merge import merge, merge_cases

    assert merge([{"enum": [1, "a", True, {"x": [1]}]}, {"enum": [1.0, True, "b", {"x": [1.0]}]}]) == {
        "enum": [1, True, {"x": [1]}]
    }
    assert merge([{"enum": [1, "a"]}, {"enum": [True, "b"]}]) is None
    rest = {"type": "object", "required": ["v"], "properties": {"v": {"enum": ["1", "2"]}}}
    chained = {"if": {"properties": {"v": {"enum": ["1", "2"]}}}, "then": {"required": ["a"]}, "else": {"required": ["b"]}}
    cases = merge_cases([rest, chained])
    assert cases is not None and len(cases["anyOf"]) == 1 and cases["anyOf"][0]["required"] == ["v", "a"]
    # without type: object, the case no object meets keeps the other values (each if holds for them),
    # without the keywords that only read objects (two thens' propertyNames would not merge)
    ifs = [{"if": {"properties": {"v": {"const": c}}}, "then": {"propertyNames": {"enum": ["v", c]}}} for c in "xy"]
    cases = merge_cases([{"required": ["v"]}, *ifs])
    assert cases is not None
    assert [c["type"] for c in cases["anyOf"] if "object" not in c.get("type", ["object"])] == [
        ["null", "boolean", "array", "number", "integer", "string"]
    ]


def test_recursion_under_allof_of_references_and_typed_discriminators(compiler, tokenizer_llama3):
    """Two SchemaStore shapes: an allOf member that is a reference to an allOf of references (theme.json's
    settings) is spread into one merged object; a typed property met by a branch's enum (Thrift's
    type descriptors: {type: string} and {enum: [...]}) merges flat, so the oneOf branches are proved
    apart on it. Both recurse; both exact against jsonschema."""
    settings = {"$defs": {"all": {"allOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/b"}]},
                          "a": {"properties": {"a": {"type": "integer"}}},
                          "b": {"properties": {"b": {"type": "object", "additionalProperties": {"$ref": "#/$defs/b"}}}}},
                "allOf": [{"$ref": "#/$defs/all"}, {"properties": {"a": {}, "b": {}}, "additionalProperties": False}]}  # fmt: skip
    _check(compiler, tokenizer_llama3, settings,
           ['{"a": 1}', '{"a": "x"}', '{"b": {"k": {"b": {}}}}', '{"b": {"k": {"b": 1}}}', '{"c": 1}', "{}"])  # fmt: skip
    thrift = {"$defs": {"desc": {"allOf": [{"type": "object", "properties": {"id": {"type": "string"}}},
                                           {"oneOf": [{"$ref": "#/$defs/base"}, {"$ref": "#/$defs/list"}]}]},
                        "base": {"type": "object", "properties": {"id": {"enum": ["i32", "string"]}}, "required": ["id"]},
                        "list": {"type": "object", "properties": {"id": {"enum": ["list"]}, "elem": {"$ref": "#/$defs/desc"}},
                                 "required": ["id", "elem"]}},
              "$ref": "#/$defs/desc"}  # fmt: skip
    _check(compiler, tokenizer_llama3, thrift,
           ['{"id": "i32"}', '{"id": "list", "elem": {"id": "string"}}', '{"id": "list", "elem": {"id": "x"}}',
            '{"id": "list"}', '{"id": "list", "elem": {"id": "list", "elem": {"id": "i32"}}}', '{"id": 1}'])  # fmt: skip


def test_recursion_under_one_of_closed_objects_with_names_apart(compiler, tokenizer_llama3):
    """oneOf of closed objects whose names are pairwise apart (and / or / not / value, the shape of
    many condition languages): two branches share only {} (and every non-object), so each branch is
    taken as a non-empty object and oneOf is their union, no complement over the recursion; exact
    against jsonschema, {} and non-objects refused."""
    expr = {"oneOf": [{"properties": {"and": {"type": "array", "items": {"$ref": "#/$defs/e"}}}, "additionalProperties": False},
                      {"properties": {"not": {"$ref": "#/$defs/e"}}, "additionalProperties": False},
                      {"properties": {"value": {"type": "integer"}}, "additionalProperties": False}]}  # fmt: skip
    schema = {"$defs": {"e": expr}, "$ref": "#/$defs/e"}
    _check(compiler, tokenizer_llama3, schema,
           ["{}", '{"and": []}', '{"and": [{"value": 1}, {"not": {"value": 2}}]}', '{"not": {}}', '{"not": {"value": 1}}',
            '{"value": 1, "not": {"value": 1}}', '"x"', "1", '{"and": [{}]}', '{"value": "x"}'])  # fmt: skip


def test_recursion_under_one_of_apart_on_optional_or_typed_members(compiler, tokenizer_llama3):
    """Hayson's shape. oneOf branches are apart when a member one requires is declared by the other
    with other constants (an optional `_kind`) or other types (`val` number vs string), with a
    pattern-keyed recursive dict among them. Exact against jsonschema."""
    value = {"oneOf": [{"type": "string"}, {"$ref": "#/$defs/dict"}, {"$ref": "#/$defs/num"}, {"$ref": "#/$defs/special"},
                       {"type": "object", "required": ["_kind"], "properties": {"_kind": {"enum": ["marker"]}},
                        "additionalProperties": False}]}  # fmt: skip
    schema = {"$defs": {"v": value,
                        "dict": {"type": "object", "properties": {"_kind": {"enum": ["dict"]}}, "additionalProperties": False,
                                 "patternProperties": {"^[a-z]": {"$ref": "#/$defs/v"}}},
                        "num": {"type": "object", "required": ["_kind", "val"], "additionalProperties": False,
                                "properties": {"_kind": {"enum": ["number"]}, "val": {"type": "number"}}},
                        "special": {"type": "object", "required": ["_kind", "val"], "additionalProperties": False,
                                    "properties": {"_kind": {"enum": ["number"]}, "val": {"type": "string"}}}},
              "type": "object", "properties": {"v": {"$ref": "#/$defs/v"}}}  # fmt: skip
    _check(compiler, tokenizer_llama3, schema,
           ['{"v": "x"}', '{"v": {"_kind": "marker"}}', '{"v": {"_kind": "dict", "a": {"_kind": "number", "val": 1}}}',
            '{"v": {"a": "x"}}', '{"v": {"_kind": "number", "val": "NaN"}}', '{"v": {"_kind": "number", "val": []}}',
            '{"v": {"A": 1}}', '{"v": 1}'])  # fmt: skip


def test_recursion_through_branches_that_merge_a_sibling_closes(compiler, tokenizer_llama3):
    """resjson's shape: a sibling keyword (minProperties) merged into each anyOf branch, one of which
    is a $ref back to the schema. The rewrite inlines the target, so the cycle closes at the
    rewritten schema (same dict per content), not at a $ref: it recursed without end before."""
    value = {"minProperties": 1, "anyOf": [{"type": "string"}, {"$ref": "#/$defs/res"}]}
    schema = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object", "additionalProperties": value,
              "$defs": {"res": {"type": "object", "additionalProperties": value}}}  # fmt: skip
    _check(compiler, tokenizer_llama3, schema,
           ['{"a": "x"}', '{"a": {"b": "y", "c": {"d": "z"}}}', '{"a": {}}', '{"a": {"b": {}}}', '{"a": 1}', "{}",
            '{"a": {"b": {"c": {"d": {"e": "f"}}}}}'])  # fmt: skip


def test_recursion_under_one_of_apart_on_patterns_negation_and_nested_branches(compiler, tokenizer_llama3):
    """oneOf branches proved apart, so a recursive reference under them needs no exclusivity:
    discriminators spelled as anchored patterns (tree-sitter's rule schema), a branch that is the
    ``not`` of another (Avro's custom type names), a discriminator read through a property's $ref
    and an allOf member, and a branch whose own oneOf alternatives are each apart. Exact against
    jsonschema, instances that two unanchored patterns would both take included."""
    rule = {"oneOf": [
        {"type": "object", "properties": {"type": {"type": "string", "pattern": "^SEQ$"},
                                          "members": {"type": "array", "items": {"$ref": "#/$defs/rule"}}},
         "required": ["type", "members"]},
        {"type": "object", "properties": {"type": {"type": "string", "pattern": "^(REPEAT|REPEAT1)$"},
                                          "content": {"$ref": "#/$defs/rule"}}, "required": ["type", "content"]},
        {"type": "object", "properties": {"type": {"type": "string", "pattern": "^STRING$"},
                                          "value": {"type": "string"}}, "required": ["type", "value"]},
        {"$ref": "#/$defs/prim"},
        {"type": "string", "not": {"$ref": "#/$defs/prim"}, "pattern": "^[a-z]+$"},
        {"allOf": [{"$ref": "#/$defs/tagged"}, {"properties": {"kind": {"$ref": "#/$defs/kindName"}}}]},
        {"type": "object", "oneOf": [
            {"required": ["type", "and"], "properties": {"type": {"const": "AND"}, "and": {"type": "array", "items": {"$ref": "#/$defs/rule"}}}},
            {"required": ["type", "not"], "properties": {"type": {"const": "NOT"}, "not": {"$ref": "#/$defs/rule"}}}]},
    ]}  # fmt: skip
    schema = {"$defs": {"rule": rule, "prim": {"enum": ["int", "bool"]}, "kindName": {"enum": ["k1", "k2"]},
                        "tagged": {"type": "object", "required": ["kind", "type"], "properties": {"type": {"const": "TAG"}}}},
              "$ref": "#/$defs/rule"}  # fmt: skip
    _check(compiler, tokenizer_llama3, schema,
           ['{"type": "SEQ", "members": ["int", "abc", {"type": "STRING", "value": "x"}]}',
            '{"type": "REPEAT1", "content": {"type": "REPEAT", "content": "bool"}}',
            '{"type": "SEQX", "members": []}', '{"type": "xSEQ", "members": []}', '"int"', '"intx"', '"Int"',
            '{"type": "TAG", "kind": "k2"}', '{"type": "TAG", "kind": "k3"}',
            '{"type": "AND", "and": ["bool"]}', '{"type": "NOT", "not": "int"}', '{"type": "AND", "not": "int"}',
            '{"type": "NOT", "and": [], "not": {"type": "NOT", "not": "bool"}}', '{"type": "NOT"}'])  # fmt: skip


def test_the_compile_starts_from_the_pool_that_checked_the_terminals(vocab_builtin, tokenizer_builtin):
    """A terminal with a complement inside is interned, and its emptiness decided, while the grammar
    is built (empty ones are dropped): the grammar carries that pool, and its compile starts from it
    instead of interning and deciding them again. Masks are those of a compile from a fresh pool."""
    from guided.grammar.tokens.compiled_cfg import compile_cfg

    schema = {"$defs": {"n": {"type": "object", "properties": {
        "tag": {"type": "string", "pattern": "^[a-c]+$", "not": {"enum": ["ab", "b"]}},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/n"}}}, "required": ["tag"],
        "additionalProperties": False}}, "$ref": "#/$defs/n"}  # fmt: skip
    hinted, fresh = json_schema_to_grammar(schema), json_schema_to_grammar(schema)
    assert isinstance(hinted, CfgGrammar) and hinted.pool is not None
    pool = hinted.pool
    assert any(pool.has_bool[e] for e in pool._interned.values())  # the tag's terminal, checked
    fresh.pool = None
    a, b = compile_cfg(vocab_builtin, hinted), compile_cfg(vocab_builtin, fresh)
    assert isinstance(a, CompiledCfg) and a.pool is pool and hinted.pool is None
    assert b.pool is not pool
    for text in ('{"tag": "ca", "kids": [{"tag": "abc"}, {"tag": "cc", "kids": []}]}',
                 '{"tag": "ca", "kids": [{"tag": "abc"}, {"tag": "b", "kids": []}]}'):  # fmt: skip
        ma, mb, ok = a.matcher(), b.matcher(), True
        for token in tokenizer_builtin.encode(text, add_special_tokens=False):
            assert np.array_equal(a.mask(ma.state), b.mask(mb.state))
            ok = ma.accept_token(token)
            assert ok == mb.accept_token(token)
            if not ok:
                break
        assert (ok and ma.is_accepting()) == jsonschema.Draft202012Validator(schema).is_valid(json.loads(text))


def test_a_schema_met_at_two_places_lowers_to_one_object():
    """The lowering's memo is per place (key-order places differ by the schemas that apply there), so
    a schema met at two places lowers twice; equal languages are then one object, which the grammar's
    later lookups (the pool's interning memo, the terminals' runs) find by identity instead of
    comparing two equal trees node by node."""
    from guided.schema.compiler import SchemaOptions
    from guided.schema.key_order import KeyOrder
    from guided.schema.lowering import SchemaLowering

    item = {"type": "object", "properties": {"k": {"type": "string"}, "n": {"type": "integer"}}}
    lowering = SchemaLowering(item, SchemaOptions(), None)
    base = lowering.resolver.root_base
    here = KeyOrder.at(lowering.resolver, [(item, base)])
    there = KeyOrder.at(lowering.resolver, [(item, base), ({"required": []}, base)])
    assert here.key != there.key
    assert lowering.lower(item, "#", base, here) is lowering.lower(item, "#", base, there)


def test_recursion_beside_not_required_merges_into_the_object(compiler, tokenizer_llama3):
    """``not: {required: [...]}`` beside an object whose members recurse through ``patternProperties``
    (Tabris.js's locale selector: ``{"patternProperties": {"^[a-z]{2,3}$": {"$ref": ...}},
    "additionalProperties": false, "not": {"required": ["ios"]}}``) is the object with those names
    forbidden: the refused values' schema (``{"type": "object", "properties": {"ios": false}}``, or
    one such case per name) merges into the object, whatever pattern the name matches, so nothing is
    left to intersect with the recursion. It was a SchemaError. Exact against jsonschema."""
    node = {"type": "object", "patternProperties": {"^[a-z]{2,3}$": {"$ref": "#/$defs/node"}},
            "additionalProperties": False, "minProperties": 1, "not": {"required": ["ios"]}}  # fmt: skip
    schema = {"$defs": {"node": {"anyOf": [{"type": "integer"}, node]}}, "$ref": "#/$defs/node"}
    _check(compiler, tokenizer_llama3, schema,
           ["1", '{"en": 1}', '{"ios": 1}', '{"en": {"ios": 2}}', '{"en": {"de": 2}, "fr": 3}', "{}",
            '{"en": {}}', '{"abcd": 1}', '{"en": {"fr": {"ios": 1}}}', '{"io": {"iso": 1}}'])  # fmt: skip
    both = {**node, "not": {"required": ["en", "fr"]}}  # either name absent: two cases
    schema = {"$defs": {"node": {"anyOf": [{"type": "integer"}, both]}}, "$ref": "#/$defs/node"}
    _check(compiler, tokenizer_llama3, schema,
           ['{"en": 1}', '{"fr": 1, "de": {"en": 2}}', '{"en": 1, "fr": 2}', '{"fr": 1, "en": 2}',
            '{"de": {"fr": {"en": 1, "fr": 1}}}', '{"de": {"fr": {"en": 1, "de": 1}}}'])  # fmt: skip
