"""Any key order past the permutation bound ("bag" places of ``key_order="any"``): the grammar takes
members in any order with repeats and the matcher refuses a name written twice, without ever leaving
the generation with no way on.

Oracles: the ``jsonschema`` validator and a duplicate-key check on every finished random walk; the
plain grammar's mask (a token is dropped exactly when it completes a name written before, or leaves
a name to write where none is left).
"""

from __future__ import annotations

import gc
import json
import random
import re
import weakref

import jsonschema
import numpy as np
import pytest
from grammar_oracle import tiny_vocab
from json_schema_oracle import ESCAPE_TOKENS, closing_tokens, masked_walk, one_value, refusals_by_simulation

from guided.grammar.compiler import GrammarCompiler
from guided.schema import unique_runtime
from guided.schema.compiler import compile_json_schema
from guided.schema.key_order import MAX_PERMUTED, KeyOrder
from guided.schema.resolver import SchemaResolver
from guided.schema.unique_runtime import UniqueChecked

NAMES = [f"p{i}" for i in range(MAX_PERMUTED + 3)]


def _object(closed: bool, required=("p3", "p0"), kinds=("integer", "string")) -> dict:
    props = {n: {"type": kinds[i % len(kinds)]} for i, n in enumerate(NAMES)}
    schema = {"type": "object", "properties": props, "required": list(required)}
    if closed:
        schema["additionalProperties"] = False
    return schema


def _value(kind: str, i: int):
    return i if kind == "integer" else f"v{i}"


# names that patternProperties alone admit: four, so that they can all be written
PATTERNED = {**_object(True, kinds=("null",)), "patternProperties": {"^q[0-3]$": {"type": "null"}}}
PATTERN_NAMES = ["q0", "q1", "q2", "q3"]


@pytest.fixture(scope="module")
def compiler(vocab_builtin):
    return GrammarCompiler(vocab_builtin)


def _compiled(compiler, schema, **options):
    compiled = compile_json_schema(compiler, schema, key_order="any", **options)
    assert isinstance(compiled, UniqueChecked) and compiled.keys is not None
    return compiled


@pytest.mark.parametrize("closed", [True, False])
def test_every_order_accepted_and_a_repeated_name_refused(compiler, closed):
    schema = _object(closed)
    compiled = _compiled(compiler, schema)
    rng = random.Random(1)
    for _ in range(30):
        names = rng.sample(NAMES, rng.randint(2, len(NAMES)))
        inst = {n: _value(schema["properties"][n]["type"], i) for i, n in enumerate(names)}
        m = compiled.matcher()
        ok = m.accept_text(json.dumps(inst)) and m.is_accepting()
        assert ok == jsonschema.Draft202012Validator(schema).is_valid(inst), inst
    m = compiled.matcher()
    assert m.accept_text('{"p1": "a", "p3": "b"')
    assert not m.accept_text(', "p1": "c"')  # refused, nothing consumed
    assert not m.accept_text(', "p3"')
    assert m.accept_text(', "p0": 3}') and m.is_accepting()


OPEN_SCHEMAS = {
    "object": {"type": "object"},
    "any-value": {},
    "counted": {"type": "object", "minProperties": 2},  # a repeat would pass the grammar's count
    "declared-and-others": {"type": "object", "properties": {"p": {"type": "integer"}}},
    "typed-others": {"type": "object", "additionalProperties": {"type": "integer"}},
    "patterns": {"type": "object", "patternProperties": {"^x": {}}, "additionalProperties": False},
    "in-array": {"type": "array", "items": {"type": "object", "additionalProperties": {"type": "integer"}}},
    "nested": {"type": "object", "properties": {"o": {"type": "object"}}, "additionalProperties": False},
}


@pytest.mark.parametrize("key_order", ["declared", "any"])
@pytest.mark.parametrize("name", list(OPEN_SCHEMAS))
def test_no_object_repeats_a_name(compiler, name, key_order):
    """Every object a grammar may write, declared or not, refuses a name written twice: the output
    parses to one value (``{"type": "object", "minProperties": 2}`` would otherwise take
    ``{"a": 1, "a": 2}``, which parses to one property)."""
    schema = OPEN_SCHEMAS[name]
    compiled = compile_json_schema(compiler, schema, key_order=key_order)
    head, again, other, close = {
        "in-array": ('[{"a": 1}, {"a": 2, "b": 3', ', "a"', ', "c": 4', "}]"),
        "nested": ('{"o": {"a": 1, "b": 2', ', "a"', ', "c": 4', "}}"),
    }.get(name, ('{"x1": 1, "x2": 2', ', "x1"', ', "x3": 4', "}"))
    m = compiled.matcher()
    assert m.accept_text(head)
    assert not m.accept_text(again)  # refused, nothing consumed
    assert m.accept_text(other + close) and m.is_accepting()
    text = head + other + close
    assert jsonschema.Draft202012Validator(schema).is_valid(one_value(text))


@pytest.mark.parametrize("many", [False, True], ids=["2-names", "9-names"])
@pytest.mark.parametrize("key_order", ["declared", "any"])
def test_undeclared_names_another_keyword_restricts_are_searched(compiler, key_order, many):
    """An object ``enum`` beside a ``not`` with typed ``additionalProperties``: the grammar takes one
    undeclared name (``quux``) and no other, so no fresh name may stand for it; the check searches
    the grammar instead (a MaskBench schema whose valid instance was refused at the comma). With
    more names than a permutation holds, the place is a bag under ``key_order="any"``: the enum
    still makes its undeclared names differ."""
    props = {n: {} for n in ["bar", "foo", *(NAMES if many else [])]}
    schema = {"allOf": [{"enum": [{"bar": 2, "foo": 1, "quux": 12}]},
                        {"not": {"additionalProperties": {"type": "boolean"}, "properties": props}}]}  # fmt: skip
    compiled = compile_json_schema(compiler, schema, key_order=key_order)
    m = compiled.matcher()
    ok = all(m.accept_text(c) for c in '{"bar": 2, "foo": 1, "quux": 12}') and m.is_accepting()  # byte by byte
    assert ok


def test_requests_for_one_schema_share_the_checks_memos(compiler):
    """Compiling a schema again (every request does) gives the same checked grammar, so what its
    matchers memoised serves the next request."""
    first = compile_json_schema(compiler, {"type": "object", "minProperties": 1})
    m = first.matcher()
    assert m.accept_text('{"a": 1')
    m.allowed_tokens()  # memoises the refusals at this point
    again = compile_json_schema(compiler, {"type": "object", "minProperties": 1})
    assert again is first and len(again.refused_memo) > 0


def test_a_checked_grammar_lives_no_longer_than_the_compilers_cache(vocab_builtin):
    """The wrapper shared by requests lives on its grammar: once the compiler's cache drops the
    grammar, nothing keeps either alive (a cache of wrappers of its own kept grammars past it)."""
    small = GrammarCompiler(vocab_builtin, cache_size=2)
    first = weakref.ref(compile_json_schema(small, {"type": "object", "minProperties": 1}))
    for n in range(2, 6):
        compile_json_schema(small, {"type": "object", "minProperties": n})
    gc.collect()
    assert first() is None


def test_closed_objects_need_no_check(compiler):
    """Where no object can take a name it does not declare, the grammar alone is exact: no wrapper."""
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "array", "items": {"type": "integer"}}},
              "additionalProperties": False}  # fmt: skip
    assert not isinstance(compile_json_schema(compiler, schema), UniqueChecked)
    assert isinstance(compile_json_schema(compiler, {**schema, "additionalProperties": True}), UniqueChecked)


@pytest.mark.parametrize("name", ["object", "any-value", "typed-others", "in-array"])
def test_random_walks_in_open_objects_never_repeat_a_name(compiler, vocab_builtin, name):
    schema = OPEN_SCHEMAS[name]
    compiled = compile_json_schema(compiler, schema, whitespace="compact")
    validator = jsonschema.Draft202012Validator(schema)
    rng = random.Random(3)
    for _ in range(12):
        out = masked_walk(compiled, vocab_builtin, rng, steps=200)
        if out is not None:
            assert validator.is_valid(one_value(out.decode())), out


def test_the_grammar_alone_keeps_the_bounded_policy():
    """Without the matcher's check (``json_schema_to_grammar`` alone) a repeat is never accepted:
    the place keeps the declared / required-first orders."""
    from guided.schema.compiler import json_schema_to_node  # the grammar-only entry point

    node = json_schema_to_node(_object(True), key_order="any")
    from json_schema_oracle import accepts  # the test helpers' regex oracle

    assert not accepts(node, '{"p0": 1, "p0": 2, "p3": 1}')


def test_a_closed_object_with_every_name_written_can_only_close(compiler, vocab_builtin):
    compiled = _compiled(compiler, _object(True))
    m = compiled.matcher()
    inst = {n: _value(_object(True)["properties"][n]["type"], i) for i, n in enumerate(reversed(NAMES))}
    assert m.accept_text(json.dumps(inst)[:-1])
    allowed = np.flatnonzero(m.allowed_tokens())
    texts = [vocab_builtin.tokens[t] for t in allowed if not compiled.is_eos(int(t))]
    assert texts and all(b"," not in t for t in texts)  # no member can follow: no comma
    assert any(t.strip() == b"}" for t in texts)
    # one name left: the comma comes back, and then only that name's prefixes
    m = compiled.matcher()
    assert m.accept_text(json.dumps({k: v for k, v in inst.items() if k != "p5"})[:-1])
    assert m.accept_text(", ")
    nxt = [vocab_builtin.tokens[t] for t in np.flatnonzero(m.allowed_tokens())]
    assert nxt and all(b'"p5"'.startswith(t.strip()) or t.strip() == b"" for t in nxt), nxt


@pytest.mark.parametrize(
    "schema",
    [
        _object(True, kinds=("integer", "boolean")),
        _object(True, required=()),
        _object(False, kinds=("boolean", "null")),
        {"type": "array", "items": _object(True, required=("p1",), kinds=("boolean",)), "maxItems": 3},
        {"type": "object", "properties": {"inner": _object(True, kinds=("null",))}, "required": ["inner"],
         "additionalProperties": False},
        {"allOf": [_object(True, required=("p2",), kinds=("boolean",)), {"required": ["p7"]}]},
        {"anyOf": [_object(True, kinds=("null",)), {**_object(True, kinds=("boolean",)), "required": ["p8"]}]},
        PATTERNED,
        {**_object(False, kinds=("null",)), "patternProperties": {"^x": {"type": "boolean"}}},
    ],
    ids=["closed", "closed-optional", "open", "in-array", "nested", "allOf", "anyOf", "patterns", "open-patterns"],
)  # fmt: skip
def test_random_walks_never_dead_end_and_finish_valid(compiler, vocab_builtin, schema):
    compiled = _compiled(compiler, schema, whitespace="compact")
    validator = jsonschema.Draft202012Validator(schema)
    rng = random.Random(5)
    finished = 0
    for _ in range(12):
        out = masked_walk(compiled, vocab_builtin, rng)
        if out is None:
            continue
        finished += 1
        value = one_value(out.decode())
        assert validator.is_valid(value), out
    # open objects take any names: uniform walks rarely close them, there only dead ends are checked
    assert finished >= (0 if schema.get("additionalProperties", True) is True and "properties" in schema else 3)


@pytest.mark.parametrize(
    "schema",
    [
        _object(True, kinds=("integer", "boolean")),
        _object(False, kinds=("boolean", "null")),
        {"type": "array", "items": _object(True, required=("p1",), kinds=("string",)), "maxItems": 3},
        {"type": "object", "properties": {"inner": _object(True, kinds=("null",))}, "required": ["inner"],
         "additionalProperties": False},
        PATTERNED,
    ],
    ids=["closed", "open", "in-array", "nested", "patterns"],
)  # fmt: skip
def test_memoised_refusals_equal_fresh_ones(compiler, vocab_builtin, schema):
    """The refusals and the tracks after a token are memoised across a grammar's matchers by what
    they depend on (the grammar state, each open frame's names, the name begun): along random walks
    that revisit states with other names written, every mask equals the one computed with empty
    memos, and so does every token's acceptance."""
    compiled = _compiled(compiler, schema, whitespace="compact")
    fresh = UniqueChecked(compiled.compiled, compiled.plan, compiled.keys, compiled.strict, compiled.key_order)
    unique_runtime.TRACK_MEMOS.flush()  # the process-wide budget starts afresh: earlier tests' entries must not empty these memos
    rng = random.Random(11)
    closers = closing_tokens(compiled, vocab_builtin)
    hits = 0
    for _ in range(10):
        m, f = compiled.matcher(), fresh.matcher()
        for _ in range(300):
            hits += m._refusal_key(m._tracks[-1]) in compiled.refused_memo
            fresh.refused_memo.clear()
            fresh.advance_memo.clear()
            fresh.step_memo.clear()
            allowed = m.allowed_tokens()
            same = bool(np.array_equal(allowed, f.allowed_tokens()))
            assert same, bytes(m._bytes)
            ids = np.flatnonzero(allowed)
            closing = ids[closers[ids]].tolist()
            ids = ids.tolist()
            t = int(rng.choice(closing if closing and rng.random() < 0.5 else ids))
            if compiled.is_eos(t):
                break
            assert m.accept_token(t) and f.accept_token(t)
            for probe in rng.sample(ids, min(4, len(ids))) + rng.sample(range(len(vocab_builtin.tokens)), 4):
                fresh.advance_memo.clear()
                fresh.step_memo.clear()
                assert m.copy().accept_token(probe) == f.copy().accept_token(probe), (bytes(m._bytes), probe)
    assert hits > 40 and len(compiled.advance_memo) > 40 and len(compiled.step_memo) > 40, hits


def test_track_memos_are_bounded_over_all_grammars(compiler, vocab_builtin, monkeypatch):
    """The memos that keep tracks (containers the garbage collector walks at every full pass) are
    bounded over every checked grammar of the process, not per grammar only: along random walks in
    two grammars, the entries held never pass the budget, the memos are emptied when it is spent
    (and fill again), every acceptance equals one computed with empty memos, and a grammar dropped
    is not kept alive by the bound's registry."""
    budget = 60
    monkeypatch.setattr(unique_runtime, "TRACK_MEMO_BUDGET", budget)
    monkeypatch.setattr(unique_runtime, "TRACK_MEMOS", unique_runtime._TrackMemos())
    memos = unique_runtime.TRACK_MEMOS
    schemas = [_object(True, kinds=("integer", "boolean")), _object(False, kinds=("boolean", "null"))]
    pairs = []
    for schema in schemas:
        compiled = _compiled(GrammarCompiler(vocab_builtin), schema, whitespace="compact")
        fresh = UniqueChecked(compiled.compiled, compiled.plan, compiled.keys, compiled.strict, compiled.key_order)
        pairs.append((compiled, fresh))
    rng = random.Random(5)
    most, flushes = 0, 0
    for walk in range(16):
        compiled, fresh = pairs[walk % 2]
        m, f = compiled.matcher(), fresh.matcher()
        for _ in range(120):
            ids = np.flatnonzero(m.allowed_tokens()).tolist()
            t = int(rng.choice(ids))
            if compiled.is_eos(t):
                break
            before = memos.entries()
            fresh.advance_memo.clear()
            fresh.step_memo.clear()
            assert m.accept_token(t) and f.accept_token(t)
            after = memos.entries()
            flushes += after < before
            most = max(most, after)
            assert after <= budget, after
    assert flushes >= 2 and most > budget // 2, (flushes, most)
    ref = weakref.ref(pairs[0][0])
    del pairs[:], compiled, fresh, m, f
    gc.collect()  # (a grammar and its checked wrapper hold each other until their compiler evicts them)
    assert ref() is None and len(memos.grammars) == 0


@pytest.mark.parametrize("schema, extra", [(_object(True, kinds=("null",)), []), (PATTERNED, PATTERN_NAMES)],
                         ids=["declared", "patterns"])  # fmt: skip
def test_masks_drop_exactly_the_repeats_and_the_dead_ends(compiler, vocab_builtin, schema, extra):
    """At states along valid instances, compare the mask with the plain grammar's: a token is dropped
    exactly when it completes a name already written, or ends where a name is due or begun and no
    name not yet written can complete it (found by trying every name the schema admits), or closes
    the object before every required name is written (the grammar leaves those to the matcher)."""
    compiled = _compiled(compiler, schema, whitespace="compact")
    inner = compiled.compiled
    tokens = vocab_builtin.tokens
    rng = random.Random(2)
    order = rng.sample(NAMES + extra, len(NAMES + extra))
    text = "{" + ",".join(f'"{n}":null' for n in order) + "}"
    checked = 0
    for cut in range(2, len(text) - 1):
        prefix = text[:cut]
        m = compiled.matcher()
        assert m.accept_text(prefix)
        plain = inner.matcher()
        assert plain.accept_text(prefix)
        got = set(np.flatnonzero(m.allowed_tokens()).tolist())
        before = set(np.flatnonzero(plain.allowed_tokens()).tolist())
        assert got <= before
        for t in before:
            if inner.is_eos(t):
                continue
            after = (prefix.encode() + tokens[t]).decode("utf-8", "replace")
            keys = re.findall(r'"([^"]*)":', after)  # values are null: every string followed by a colon is a name
            repeat = len(keys) != len(set(keys))
            in_name = after.count('"') % 2 == 1
            stuck = False
            if in_name or after.endswith(","):  # a name begun or due: can a name not written complete it?
                begun = after[after.rfind('"') + 1 :] if in_name else ""
                stuck = not any(n.startswith(begun) for n in NAMES + extra if n not in keys)
            early = not in_name and "}" in after and not set(schema["required"]) <= set(keys)
            assert (t in got) == (not repeat and not stuck and not early), (prefix, tokens[t])
            checked += 1
    assert checked > 50


def test_the_bag_policy_where_names_are_alike_only():
    props = {n: {"type": "integer"} for n in NAMES}
    res = SchemaResolver({})
    place = KeyOrder.at(res, [({"type": "object", "properties": props}, "")])
    assert place.policy("any", False) == "bag"
    assert place.policy("any", False, bags=False) == "around"
    pats = {"type": "object", "properties": props, "patternProperties": {"^x-": {"type": "integer"}}}
    assert KeyOrder.at(res, [(pats, "")]).policy("any", False) == "bag"  # names not alike: the matcher searches
    assert not KeyOrder.at(res, [(pats, "")]).names_alike(False) and place.names_alike(False)
    any_x = {"type": "object", "properties": props, "patternProperties": {"^x-": {"title": "any"}}}
    assert KeyOrder.at(res, [(any_x, "")]).names_alike(False)  # every undeclared name fits anyway
    assert not KeyOrder.at(res, [(any_x, "")]).names_alike(True)  # strict: only ^x- names fit
    many = {"type": "object", "properties": props, "required": NAMES}  # 9 names to track: past the bag's count
    assert KeyOrder.at(res, [(many, "")]).policy("any", False) == "around"
    # oneOf: a bag, whether its branches are apart, overlap, or are intersections themselves
    # (exclusivity writes the refusals as schemas merged into each branch: no bag is complemented)
    kinds = [{"type": "object", "properties": {"kind": {"const": k}}, "required": ["kind"]} for k in "ab"]
    apart = {"type": "object", "properties": props, "oneOf": kinds}
    assert KeyOrder.at(res, [(apart, "")]).policy("any", False) == "bag"
    overlapping = {"type": "object", "properties": props, "oneOf": [{"required": ["p0"]}, {"required": ["p1"]}]}
    assert KeyOrder.at(res, [(overlapping, "")]).policy("any", False) == "bag"
    meets = [{"allOf": [{"required": [n]}, {"properties": {n: {"type": "integer"}}}]} for n in ("p0", "p1")]
    meeting = {"type": "object", "properties": props, "oneOf": meets}
    assert KeyOrder.at(res, [(meeting, "")]).policy("any", False) == "bag"
    # a few names: a bag where undeclared names come in (the matcher tracks names there anyway),
    # the permutation where the object is closed (no check needed)
    few = {"type": "object", "properties": {"a": {}, "b": {}, "c": {}}}
    assert KeyOrder.at(res, [(few, "")]).policy("any", False) == "bag"
    assert KeyOrder.at(res, [(few, "")]).policy("any", False, bags=False) == "permuted"
    assert KeyOrder.at(res, [(few, "")]).policy("any", True) == "permuted"  # strict closes it
    closed = {**few, "additionalProperties": False}
    assert KeyOrder.at(res, [(closed, "")]).policy("any", False) == "permuted"


def test_branches_with_many_required_names_between_them_take_any_order(compiler):
    """Past the bag's tracked bound only together: each anyOf branch requires five names of its own
    (ten at the place), so each branch's object is a bag and takes its members in any order."""
    branches = []
    for b in range(2):
        own = [f"b{b}n{i}" for i in range(5)]
        branches.append({"type": "object", "properties": {n: {"type": "integer"} for n in own + NAMES[:3]},
                         "required": own, "additionalProperties": False})  # fmt: skip
    schema = {"anyOf": branches}
    compiled = _compiled(compiler, schema)
    rng = random.Random(3)
    for _ in range(10):
        b = rng.randrange(2)
        names = rng.sample(list(branches[b]["properties"]), 7)
        inst = {n: i for i, n in enumerate(names)}
        m = compiled.matcher()
        ok = m.accept_text(json.dumps(inst)) and m.is_accepting()
        assert ok == jsonschema.Draft202012Validator(schema).is_valid(inst), inst
    m = compiled.matcher()
    assert m.accept_text('{"p1": 1, "b1n3": 2, "b1n0": 3')
    assert not m.accept_text(', "b1n3": 4')  # a repeat: refused
    assert not m.accept_text('}')  # b1n1, b1n2, b1n4 missing
    assert m.accept_text(', "b1n4": 4, "b1n1": 5, "b1n2": 6}') and m.is_accepting()


# ---------------------------------------------------------------------- closed by default (strict)
OVERLAPPING = {"oneOf": [  # branches that need exclusivity: the lowering keeps their literal meaning
    {"properties": {"x": {"properties": {"a": {"type": "integer"}}}}, "required": ["x"]},
    {"properties": {"x": {"properties": {"a": {"type": "string"}}}}, "required": ["x"]},
]}  # fmt: skip


def test_objects_left_open_under_strict_still_refuse_a_repeat(compiler):
    """Objects are closed by default (strict), except in the branches of a oneOf that needs
    exclusivity, which keep the literal meaning beside the others' complements: there an undeclared
    name may come, so the places say so and the matcher refuses it written twice."""
    m = compile_json_schema(compiler, OVERLAPPING, strict=True, whitespace="compact").matcher()
    assert m.accept_text('{"x":{"a":1,"c":true,')
    assert not m.copy().accept_text('"c"')
    assert m.accept_text('"w":2}}') and m.is_accepting()
    jsonschema.validate(json.loads('{"x":{"a":1,"c":true,"w":2}}'), OVERLAPPING)


def test_what_a_complement_generates_is_closed_to_its_places_names(compiler):
    """``not`` keeps its literal meaning inside; the objects its schema form generates close to the
    names of their place (here x.y speaks of z only), so no name can repeat there."""
    schema = {"properties": {"x": {"not": {"properties": {"y": {"properties": {"z": {"type": "integer"}},
                                                              "required": ["z"]}}, "required": ["y"]}}}}  # fmt: skip
    m = compile_json_schema(compiler, schema, strict=True, whitespace="compact").matcher()
    assert m.accept_text('{"x":{"y":{"z":"s"')
    assert not m.copy().accept_text(',"q"') and m.accept_text("}}}") and m.is_accepting()
    jsonschema.validate({"x": {"y": {"z": "s"}}}, schema)


# ---------------------------------------------------------------------- escapes in names


def test_tokens_with_escapes_are_refused_exactly_where_a_name_can_only_repeat():
    """Names with quotes, spelled with escapes: a token whose escapes decode toward written names
    only is refused (``\\"`` after ``a`` once ``a"b`` and ``a"c`` are written), as simulating every
    token finds, in an object with patterns (searched along the written names) and in a bag of
    declared names (the names it accepts known). Tokens that end inside an escape, or whose escaped
    quotes keep the name going off the written ones, decide nothing and are not simulated."""
    vocab = tiny_vocab(ESCAPE_TOKENS)
    compiler = GrammarCompiler(vocab)
    ids = {t: i for i, t in enumerate(vocab.tokens)}
    null = {"type": "null"}
    patterned = {"type": "object", "properties": {'a"b': null, 'a"c': null, "ab": null},
                 "patternProperties": {'^z[ab"]?$': null}, "additionalProperties": False}  # fmt: skip
    bag = {"type": "object", "properties": {n: null for n in ['a"b', 'a"c', "ab", "b", "c", "z", "zb", "ba", "ca"]},
           "additionalProperties": False}  # fmt: skip
    written_both = '{"a\\"b":null,"a\\"c":null,"'
    cases = [
        (patterned, '{"a\\"b":null,"', set()),
        (patterned, written_both, {b'a\\"'}),
        (patterned, written_both + "a", {b'\\"', b'\\"b', b'\\"c', b'\\"b"', b'\\"c":'}),
        (patterned, written_both + "z", set()),
        (patterned, '{"zb":null,"z', {b"b", b'b"'}),
        (patterned, '{"ab":null,"z\\"":null,"z', {b'\\"', b'\\""'}),
        (bag, written_both + "a", {b'\\"', b'\\"b', b'\\"c', b'\\"b"', b'\\"c":'}),
        (bag, '{"a\\"b":null,"ab":null,"a\\"', {b"b", b'b"'}),
    ]
    undecided = {ids[t] for t in (b"\\", b"\\u", b"\\u00", b'\\"', b'\\"\\"')}
    for schema, prefix, refused in cases:
        dropped, simulated, _ = refusals_by_simulation(_compiled(compiler, schema, whitespace="compact"), vocab, prefix)
        assert dropped == simulated == {ids[t] for t in refused}, prefix
    # off the written names, the escaped quote leads to z" (new): a fresh grammar, whose memos are empty
    fresh = _compiled(GrammarCompiler(vocab), patterned, whitespace="compact")
    _, _, asked = refusals_by_simulation(fresh, vocab, written_both + "z")
    assert not asked & undecided, [vocab.tokens[t] for t in asked]


SHAPE_TOKENS = [b"{", b"}", b",", b":", b'"', b" ", b"null", b"a", b"b", b"z", b"null,", b" null,", b"null ", b"null}",
                b": null,", b"null,\n", b" null", b'"a"', b' "a"', b'"a":', b',"a"', b', "a":', b'"z"', b' "', b'"a',
                b' "a', b' "z', b'"\\', b',"', b', "', b'"b": null,', b'null,"', b'null, "a', b'null,"z', b"{}", b"{} ",
                b"{},"]  # fmt: skip


def test_tokens_of_one_shape_are_decided_by_one_simulation():
    """Names a, b and (by a pattern) z only, so that a comma after all three is a dead end: where a value
    is due, tokens writing the same value and a comma (whitespace apart) are decided by simulating one
    of them; where a name is due, a token writing a whole name is refused exactly when it was written,
    without simulation, and tokens beginning the same name are decided by one. The masks equal
    simulating every token."""
    vocab = tiny_vocab(SHAPE_TOKENS)
    ids = {t: i for i, t in enumerate(vocab.tokens)}
    schema = {"type": "object", "properties": {"a": {"type": "null"}, "b": {"type": "null"}},
              "patternProperties": {"^z$": {"maxProperties": 0}}, "additionalProperties": False}  # fmt: skip
    ended = [b"null,", b" null,", b"null,\n", b'null,"', b'null, "a', b'null,"z', b"{},"]  # a comma after a, b, z: stuck
    cases = {  # prefix: (refused, simulated)
        '{"a": null, "b": null, "z": null': ([b",", b',"a"', b', "a":', b',"', b', "'], [b",", b"}", b',"']),
        '{"a": null, "b": null, "z":': (ended, [b"null,", b"null}", b'null,"', b'null, "a', b'null,"z', b"{}", b"{} ",
                                               b"{},"]),
        '{"a": null, "b": null,': ([b'"a"', b' "a"', b'"a":', b'"a', b' "a', b'"b": null,'], [b'"a', b'"', b'"b": null,']),
    }
    for prefix, (refused, simulated_only) in cases.items():
        compiled = compile_json_schema(GrammarCompiler(vocab), schema, key_order="any")  # fresh memos
        dropped, simulated, asked = refusals_by_simulation(compiled, vocab, prefix)
        assert dropped == simulated == {ids[t] for t in refused}, prefix
        assert asked == {ids[t] for t in simulated_only}, (prefix, [vocab.tokens[t] for t in asked])


def test_fresh_names_fit_beside_patterns_that_match_none_of_them():
    """Undeclared names are open (any value) and a pattern narrows z's value only: a name other than
    a, b, z and the written ones always fits, so no comma is a dead end and only repeats are refused,
    with nothing to simulate where a value is due or a name is begun toward written ones (``a``, which
    may go on to ``a~q``); so too where other names' schema holds annotations only. A pattern matching the names the check would write instead (``q``) leaves
    the grammar to be searched, with the same masks."""
    vocab = tiny_vocab(SHAPE_TOKENS)
    ids = {t: i for i, t in enumerate(vocab.tokens)}
    null = {"type": "null"}
    cases = {  # prefix: refused
        '{"a": null, "b": null, "z": null': [b',"a"', b', "a":'],
        '{"a": null, "b": null, "z":': [],
        '{"a": null, "b": null,': [b'"a"', b' "a"', b'"a":', b'"b": null,'],
        '{"a": null, "b": null, "': [],
    }
    annotated = {"title": "any other name"}  # additionalProperties that take every value
    for patterns, others, searched in (({"^z$": null}, True, False), ({"^z$": null}, annotated, False),
                                       ({"^z$": null, "q": null}, True, True)):  # fmt: skip
        schema = {"type": "object", "properties": {"a": null, "b": null}, "patternProperties": patterns,
                  "additionalProperties": others}  # fmt: skip
        for prefix, refused in cases.items():
            compiled = compile_json_schema(GrammarCompiler(vocab), schema, key_order="any")  # fresh memos
            dropped, simulated, asked = refusals_by_simulation(compiled, vocab, prefix)
            assert dropped == simulated == {ids[t] for t in refused}, (patterns, prefix)
            if prefix.endswith((":", '"')):  # a value due (then a comma, a name due), or a name begun
                assert bool(asked) == searched, (patterns, prefix, [vocab.tokens[t] for t in asked])


BAG_TOKENS = [b"{", b"}", b",", b":", b'"', b" ", b"null", b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h", b"ab", b"ba",
              b"ca", b'a"', b'b"', b'"a', b'"b', b'"c"', b"\\u0061", b"\\"]  # fmt: skip


def test_a_name_begun_in_a_closed_bag_with_branches_is_decided_by_the_names_left():
    """Closed bags of declared names under anyOf / oneOf: the names the grammar accepts may change from
    member to member, so they are not noted once; where a name is begun, the declared names not written
    that the grammar takes on from there decide each token by its text (``b`` is refused once ``ba`` is
    written and oneOf excludes ``b`` beside ``a``), with no simulation, and the masks equal simulating
    every token."""
    vocab = tiny_vocab(BAG_TOKENS)
    ids = {t: i for i, t in enumerate(vocab.tokens)}
    null = {"type": "null"}

    def closed(names, **branches):
        return {"type": "object", "properties": {n: null for n in names}, "additionalProperties": False, **branches}

    either = closed(["a", "b", "c", "ab", "ba", "ca", "d", "e", "f"], anyOf=[{"required": ["a"]}, {"required": ["f"]}])
    one = closed(["a", "b", "ba", "c", "d", "e", "f"], oneOf=[{"required": ["a"]}, {"required": ["b"]}])
    cases = [
        (either, '{"a": null, "ab": null, "', [b"a", b"ab", b'a"']),
        (either, '{"b": null, "ba": null, "', [b"b", b"ba", b'b"']),
        (either, '{"a": null, "ab": null, "b": null, "c": null, "ca": null, "', [b"a", b"c", b"ab", b"ca", b'a"', b'b"']),
        (one, '{"a": null, "ba": null, "', [b"a", b"b", b"ba", b'a"']),
        (one, '{"ba": null, "', [b"ba"]),
    ]
    for schema, prefix, refused in cases:
        compiled = compile_json_schema(GrammarCompiler(vocab), schema, key_order="any")  # fresh memos
        dropped, simulated, asked = refusals_by_simulation(compiled, vocab, prefix)
        assert dropped == simulated == {ids[t] for t in refused}, prefix
        assert not asked, (prefix, [vocab.tokens[t] for t in asked])


def test_a_schema_declaring_its_properties_in_another_order_is_another_grammar(compiler):
    """The compile cache tells apart schemas that differ only in the order of ``properties``: that
    order is the one the grammar follows (``key_order="declared"``; and past the permutation bound,
    under "any" too)."""
    value = {"type": "integer"}
    for names in (["a", "b"], ["b", "a"]):
        schema = {"type": "object", "properties": {n: value for n in names}, "required": ["a", "b"],
                  "additionalProperties": False}  # fmt: skip
        m = compile_json_schema(compiler, schema, key_order="declared").matcher()
        text = json.dumps({n: 1 for n in names})
        assert m.accept_text(text) and m.is_accepting(), text


BEGUN_TOKENS = [b"{", b"}", b",", b":", b'"', b" ", b"null", b"x", b"al", b"pha", b"bravo", b'"a', b'"al', b' "al',
                b'"b', b',"a', b', "al', b'null,"a', b'", "al', b'"x', b'},"a', b"}, ", b'}, "b', b'"alpha"']  # fmt: skip


def test_a_token_beginning_a_name_only_written_names_begin_with_is_refused():
    """In a closed bag whose names the grammar accepts are known (so a name not written surely fits
    where one is due): a token that begins a name (and may do more before it: a comma, a value's
    end, closing brackets) and stops inside it, toward written names only, is a dead end. Where a
    name is due, a value or a string value is in progress, or an inner object can close, the masks
    equal simulating every token."""
    vocab = tiny_vocab(BEGUN_TOKENS)
    ids = {t: i for i, t in enumerate(vocab.tokens)}
    null = {"type": "null"}
    inner = {"type": "object", "properties": {"x": null}, "additionalProperties": False}
    names = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf"]
    schema = {"type": "object", "properties": {n: null for n in names} | {"bravo": inner, "echo": {"type": "string"}},
              "additionalProperties": False}  # fmt: skip
    begun = [b'"a', b'"al', b' "al']
    cases = [
        ('{"alpha": null, ', [*begun, b'"alpha"']),
        ('{"alpha": null', [b',"a', b', "al']),
        ('{"alpha": ', [b'null,"a']),
        ('{"alpha": null, "echo": "x', [b'", "al']),
        ('{"alpha": null, "bravo": {"x": null', [b'},"a', b'}, "b']),
        ('{"bravo": {"x": null', [b'}, "b']),
    ]
    for prefix, refused in cases:
        compiled = compile_json_schema(GrammarCompiler(vocab), schema, key_order="any")  # fresh memos
        dropped, simulated, _ = refusals_by_simulation(compiled, vocab, prefix)
        assert dropped == simulated == {ids[t] for t in refused}, (prefix, [vocab.tokens[t] for t in dropped ^ simulated])


def test_a_name_begun_inside_a_character_is_decided_by_its_bytes():
    """A token that stops inside a name's multi-byte character is decided by the bytes so far: where
    only written names begin with them it is refused (a dead end), and inside the character every
    next token is simulated, so the mask never allows a token ``accept_token`` refuses."""
    e = "é".encode()
    pieces = [b"{", b"}", b",", b":", b'"', b"null", b'"' + e[:1], e[1:], e[1:] + b"a", e[1:] + b"b", b"b", b"c",
              b"d", b"f", b"g", b'a"', b'b"', e[1:] + b'a"']  # fmt: skip
    vocab = tiny_vocab(pieces)
    ids = {t: i for i, t in enumerate(vocab.tokens)}
    null = {"type": "null"}
    for names, prefix, refused in (
        (["éa", "b", "c", "d", "f", "g", "h"], '{"éa":null,', {b'"' + e[:1]}),
        (["éa", "éb", "c", "d", "f", "g", "h"], '{"éa":null,', set()),
    ):
        schema = {"type": "object", "properties": {n: null for n in names}, "additionalProperties": False}
        compiled = compile_json_schema(GrammarCompiler(vocab), schema, key_order="any", whitespace="compact")
        dropped, simulated, _ = refusals_by_simulation(compiled, vocab, prefix)
        assert dropped == simulated == {ids[t] for t in refused}, (names, [vocab.tokens[t] for t in dropped ^ simulated])
    m = compiled.matcher()  # éa written, éb not: past '"\xc3', tokens toward éa again are refused
    assert m.accept_text('{"éa":null,') and m.accept_token(ids[b'"' + e[:1]])
    allowed = set(np.flatnonzero(m.allowed_tokens()).tolist())
    assert {t for t in allowed if m.copy().accept_token(t)} == allowed
    assert ids[e[1:] + b"a"] not in allowed and ids[e[1:] + b'a"'] not in allowed and ids[e[1:] + b"b"] in allowed
