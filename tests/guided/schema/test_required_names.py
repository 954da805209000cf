"""Required names checked by the matcher (``KeyOrder.matcher_required``): where ``key_order="any"``
takes an object's members in any order without a permutation automaton (a "bag"), at a place every
value must meet every schema of (``mark_mandatory``), the grammar takes the required names as
optional members and the matcher refuses the closing brace until each is written. Elsewhere
(branches, patterns, ``contains``, counted members) the grammar keeps tracking them.

Oracles: ``jsonschema`` on every instance; the plain grammar beside the checked one (what each
takes), and random walks over the checked masks (never a dead end, every output valid).
"""

from __future__ import annotations

import json
import random

import jsonschema
import numpy as np
import pytest
from grammar_oracle import tiny_vocab
from json_schema_oracle import masked_walk, one_value, refusals_by_simulation

from guided.grammar.compiler import GrammarCompiler
from guided.grammar.disk_cache import GrammarDiskCache
from guided.schema.compiler import compile_json_schema
from guided.schema.lowering import SchemaLowering
from guided.schema.object_bags import MAX_TRACKED_REQUIRED

NAMES = [f"p{i}" for i in range(10)]


@pytest.fixture(scope="module")
def compiler(vocab_builtin):
    return GrammarCompiler(vocab_builtin)


def _object(required, kind: str = "integer", **more) -> dict:
    return {"type": "object", "properties": {n: {"type": kind} for n in NAMES}, "required": list(required),
            "additionalProperties": False, **more}  # fmt: skip


def _compiled(compiler, schema):
    return compile_json_schema(compiler, schema, key_order="any", whitespace="compact")


def _takes(compiled, text: str) -> bool:
    m = compiled.matcher()
    return m.accept_text(text) and m.is_accepting()


def _agrees(compiled, schema, value) -> bool:
    """Whether the checked grammar takes the instance exactly when ``jsonschema`` finds it valid."""
    return _takes(compiled, json.dumps(value, separators=(",", ":"))) == _validator(schema).is_valid(value)


def _validator(schema):
    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)(schema)


def test_required_names_past_what_a_bag_tracks_in_any_order(compiler):
    """Nine required names (past ``MAX_TRACKED_REQUIRED``, where the grammar alone kept one order):
    every order is taken, and an object missing any one of them is refused at its closing brace,
    which the plain grammar takes (the names are left to the matcher)."""
    assert MAX_TRACKED_REQUIRED < 9
    schema = _object(NAMES[:9])
    compiled = _compiled(compiler, schema)
    rng = random.Random(3)
    for _ in range(6):
        names = NAMES[:9] + NAMES[9:] * rng.randint(0, 1)
        rng.shuffle(names)
        full = {n: i for i, n in enumerate(names)}
        assert _agrees(compiled, schema, full) and _takes(compiled, json.dumps(full, separators=(",", ":")))
        missing = {n: v for n, v in full.items() if n != rng.choice(NAMES[:9])}
        text = json.dumps(missing, separators=(",", ":"))
        assert _agrees(compiled, schema, missing) and not _takes(compiled, text)
        assert _takes(compiled.compiled, text)
        m = compiled.matcher()  # the mask drops every token that would close it there
        assert m.accept_text(text[:-1])
        allowed = [compiled.vocabulary.tokens[t] for t in np.flatnonzero(m.allowed_tokens())]
        assert allowed and not any(b"}" in t for t in allowed), allowed


@pytest.mark.parametrize("keyword, draft", [("dependentRequired", "2020-12"), ("dependencies", "draft-07")])
def test_dependencies_that_only_require_names_leave_the_place_mandatory(compiler, keyword, draft):
    """Property dependencies that only require names (``dependentRequired``, array-valued
    ``dependencies``) add no schema to the place: its own required names, nine of them, stay the
    matcher's and every order is taken, while the grammar tracks the trigger and what it requires
    (``t`` present: ``d1`` and ``d2`` required)."""
    uri = "https://json-schema.org/draft/2020-12/schema" if draft == "2020-12" else "http://json-schema.org/draft-07/schema#"
    required = [f"r{i}" for i in range(9)]
    schema = {"$schema": uri, "type": "object", "properties": {n: {"type": "integer"} for n in [*required, "t", "d1", "d2"]},
              "required": required, "additionalProperties": False, keyword: {"t": ["d1", "d2"]}}  # fmt: skip
    compiled = _compiled(compiler, schema)
    rng = random.Random(5)
    for _ in range(6):
        names = [*required, *rng.sample(["t", "d1", "d2"], rng.randint(0, 3))]
        rng.shuffle(names)
        full = {n: i for i, n in enumerate(names)}
        for value in (full, {n: v for n, v in full.items() if n != rng.choice(required)}):
            assert _agrees(compiled, schema, value), value
    for extra in ({"t": 1}, {"t": 1, "d1": 1}, {"t": 1, "d1": 1, "d2": 1}, {"d2": 1}):
        value = {**{n: 1 for n in reversed(required)}, **extra}
        assert _agrees(compiled, schema, value), value


@pytest.mark.parametrize(
    "schema, valid, invalid",
    [
        # a branch's required names hold in that branch only
        ({"type": "object", "required": ["x"], "additionalProperties": False, "properties": {"x": {"anyOf": [
            _object(["p0"], "null"), {"type": "object", "properties": {"q": {"type": "null"}}, "additionalProperties": False},
        ]}}}, {"x": {"q": None}}, {"x": {"p1": None}}),
        # patterns and additionalProperties: each name's value meets its own schemas only
        ({"type": "object", "patternProperties": {"^x": _object(["p0"], "null")},
          "additionalProperties": _object(["p1"], "null")},
         {"xa": {"p0": None}, "zz": {"p1": None}}, {"xa": {"p1": None}}),
        # contains: one item needs the name, not every item
        ({"type": "array", "items": _object([], "null"), "contains": {"required": ["p0"]}},
         [{"p1": None}, {"p0": None}], [{"p1": None}]),
        # below an if: the condition decides
        ({"type": "object", "properties": {"k": {"type": "null"}, "v": _object([], "null")},
          "if": {"required": ["k"]}, "then": {"properties": {"v": {"required": ["p0"]}}}},
         {"v": {"p1": None}}, {"k": None, "v": {"p1": None}}),
        # before draft 2019-09 a $ref's siblings are ignored, a required among them too
        ({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "definitions": {"W": _object([])},
          "properties": {"w": {"required": ["p0"], "$ref": "#/definitions/W"}}},
         {"w": {"p1": 1}}, {"w": {"p1": "x"}}),
        # a dependency's schema applies where its trigger is present only
        ({"type": "object", "properties": {"k": {"type": "null"}, "v": _object([], "null")},
          "dependentSchemas": {"k": {"properties": {"v": {"required": ["p0"]}}}}},
         {"v": {"p1": None}}, {"k": None, "v": {"p1": None}}),
    ],
    ids=["anyOf", "patterns", "contains", "if", "draft-07-ref-siblings", "dependentSchemas"],
)  # fmt: skip
@pytest.mark.filterwarnings("ignore:JSON Schema relaxed")  # (values under dependentSchemas nest 10 deep at most)
def test_required_names_that_hold_only_somewhere_are_not_the_places(compiler, schema, valid, invalid):
    """A place reached through a branch, a pattern, ``contains``, a condition or a dependency's schema
    is not mandatory: its schemas' required names are the grammar's to track, so valid instances that
    take another way are not refused. Nor are the names of a keyword its draft ignores."""
    compiled = _compiled(compiler, schema)
    validator = _validator(schema)
    assert validator.is_valid(valid) and not validator.is_valid(invalid)
    assert _agrees(compiled, schema, valid) and _agrees(compiled, schema, invalid)


def test_an_intersection_lowers_the_schema_again_tracking_the_names(compiler, monkeypatch):
    """Where the lowering intersects values (here ``uniqueItems`` over booleans), an intersection may
    refuse a member the matcher would wait for: the schema is lowered again with the grammar tracking
    its required names, within the first lowering's time bound. Either way the checked grammar takes
    the same instances."""
    props = {**_object([])["properties"], "tags": {"type": "array", "uniqueItems": True, "items": {"type": "boolean"}}}
    plain, crossed = _object(NAMES[:3]), _object(NAMES[:3], properties=props)
    early = '{"p5":1}'
    runs = []  # (deadline, untrack) of each lowering, in order
    lower_root = SchemaLowering.lower_root
    monkeypatch.setattr(SchemaLowering, "lower_root", lambda self: runs.append((self.deadline, self.untrack)) or lower_root(self))
    for schema, tracked in ((plain, False), (crossed, True)):
        runs.clear()
        compiled = _compiled(compiler, schema)
        again = [i for i, (_, untrack) in enumerate(runs) if not untrack]
        assert len(again) == (1 if tracked else 0) and all(runs[i][0] == runs[i - 1][0] for i in again), runs
        assert _takes(compiled.compiled, early) is not tracked
        assert not _takes(compiled, early) and _agrees(compiled, schema, json.loads(early))
        assert _takes(compiled, '{"p2":1,"p5":1,"p0":2,"p1":3}')


def test_counted_members_keep_the_grammar_tracking(compiler):
    """With ``maxProperties`` the grammar keeps the required names (a count reached with one missing
    would leave no way on): a walk that writes other names first still finishes valid."""
    schema = _object(NAMES[:3], maxProperties=4)
    compiled = _compiled(compiler, schema)
    assert not _takes(compiled.compiled, '{"p5":1}')
    m = compiled.matcher()
    assert m.accept_text('{"p5":1,')
    allowed = [compiled.vocabulary.tokens[t] for t in np.flatnonzero(m.allowed_tokens())]
    assert allowed and all(b"p5" not in t for t in allowed)


def test_a_grammar_from_the_disk_cache_checks_the_same(vocab_builtin, tmp_path):
    """A grammar loaded from the disk cache gets its checks worked out again (its wrapper is not
    saved): the same instances are taken as from the compile that saved it."""
    schema = _object(NAMES[:9])
    texts = ['{"p8":0,"p7":1,"p6":2,"p5":3,"p4":4,"p3":5,"p2":6,"p1":7,"p0":8}', '{"p8":0,"p7":1}',
             '{"p0":1,"p1":2,"p2":3,"p3":4,"p4":5,"p5":6,"p6":7,"p7":8,"p9":9}']  # fmt: skip
    seen = []
    for _ in range(2):
        compiler = GrammarCompiler(vocab_builtin, disk_cache=GrammarDiskCache(tmp_path, min_build_s=0.0))
        compiled = _compiled(compiler, schema)
        seen.append([_takes(compiled, t) for t in texts])
    assert len(list(tmp_path.rglob("*"))) > 0
    assert seen[0] == seen[1] == [True, False, False]


def test_a_token_holding_a_whole_object():
    """A token that opens and closes an object (``{"p1":1}``) is refused where the object would miss a
    required name: outside every object (the root) and inside one."""
    pieces = [b"{", b"}", b'"', b":", b",", b"1", *(n.encode() for n in NAMES), b'{"p1":1}', b'{"p0":1}']
    vocab = tiny_vocab(pieces)
    compiler = GrammarCompiler(vocab)
    whole = {t: vocab.tokens.index(t) for t in (b'{"p1":1}', b'{"p0":1}')}
    inner = _object(["p0"])
    for schema, prefix in ((inner, ""), ({"type": "object", "properties": {"a": inner}, "required": ["a"],
                                          "additionalProperties": False}, '{"a":')):  # fmt: skip
        compiled = _compiled(compiler, schema)
        m = compiled.matcher()
        assert m.accept_text(prefix)
        allowed = set(np.flatnonzero(m.allowed_tokens()).tolist())
        plain = compiled.compiled.matcher()
        assert plain.accept_text(prefix)
        assert whole[b'{"p1":1}'] in set(np.flatnonzero(plain.allowed_tokens()).tolist())
        assert whole[b'{"p1":1}'] not in allowed and whole[b'{"p0":1}'] in allowed
        assert not m.copy().accept_token(whole[b'{"p1":1}'])


@pytest.mark.parametrize(
    "schema",
    [
        _object(NAMES[:9], "boolean"),
        {"type": "array", "items": _object(["p1", "p4"], "null"), "maxItems": 3},
        {"type": "object", "properties": {"a": _object(["p0", "p2"], "null"), "b": {"type": "null"}},
         "required": ["a"], "additionalProperties": False},
        {"allOf": [_object(["p2"], "null"), {"required": ["p7", "p8"]}]},
        {**_object(["p0", "p1"], "null"), "additionalProperties": {"type": "null"}},
        {**_object(NAMES[:9], "null"), "dependentRequired": {"p9": ["p0"]}},
    ],
    ids=["nine-required", "in-array", "nested", "allOf", "open", "dependentRequired"],
)  # fmt: skip
def test_random_walks_never_dead_end_and_finish_valid(compiler, vocab_builtin, schema):
    """Random walks over the checked masks: never a token-less step, every finished output valid
    (open objects take any names: uniform walks rarely close them, there only dead ends count)."""
    compiled = _compiled(compiler, schema)
    validator = jsonschema.Draft202012Validator(schema)
    rng = random.Random(11)
    finished = 0
    for _ in range(10):
        out = masked_walk(compiled, vocab_builtin, rng, chars=b'"},]')  # (asserts: no dead end, mask = accept)
        if out is not None:
            finished += 1
            assert validator.is_valid(one_value(out.decode())), out
    assert finished >= (0 if schema.get("additionalProperties") else 3)


CLOSING_PIECES = [b"{", b"}", b"[", b"]", b'"', b":", b",", b"1", b"a", b"x", b"s", b"in", b"arr", *(n.encode() for n in NAMES),
                  b"}}", b"} }", b"]}", b"1}", b"1}}", b"1]}", b'"}', b'"}}', b"},", b"}]", b'a"}}', b"]},",
                  b'],"p1":1}', b'},"p1":1}']  # fmt: skip


def test_tokens_closing_several_frames_at_once_are_refused_by_their_shape():
    """Inside an object or an array within an object that still misses a required name: a token whose
    first closing brackets (after the value in progress) close the outer object too is refused; one
    that closes the inner frame alone, or writes the missing name before it closes the outer one, is
    allowed, as simulating every token finds. The first are decided by their shape, unsimulated."""
    vocab = tiny_vocab(CLOSING_PIECES)
    ids = {t: i for i, t in enumerate(vocab.tokens)}
    props = {n: {"type": "integer"} for n in NAMES} | {
        "in": {"type": "object", "properties": {"x": {"type": "integer"}, "s": {"type": "string"}}},
        "arr": {"type": "array", "items": {"type": "integer"}}}  # fmt: skip
    schema = {"type": "object", "properties": props, "required": ["p0", "p1"], "additionalProperties": False}
    cases = [  # prefix, refused, of those the ones decided by their shape (unsimulated)
        ('{"in":{"x":1', [b"}}", b"} }", b"1}}", b'},"p1":1}'], [b"}}", b"} }", b"1}}"]),  # (p1 written, p0 missing)
        ('{"in":{"x":1}', [b"}"], [b"}"]),
        ('{"in":{"s":"a', [b'"}}', b'a"}}'], [b'"}}', b'a"}}']),
        ('{"arr":[1', [b"]}", b"1]}", b'],"p1":1}'], [b"]}", b"1]}"]),
        ('{"p0":1,"arr":[', [b"]}", b"1]}"], [b"]}"]),
        ('{"p0":1,"p1":1,"in":{"x":1', [b'},"p1":1}'], []),  # (a repeat)
        ('{"p0":1,"in":{"x":1', [b"}}", b"} }", b"1}}"], [b"}}", b"} }", b"1}}"]),  # (not '},"p1":1}': p1 is written first)
        ('{"p0":1,"arr":[1', [b"]}", b"1]}"], [b"]}", b"1]}"]),
    ]
    for prefix, refused, shaped in cases:
        compiled = compile_json_schema(GrammarCompiler(vocab), schema, key_order="any")  # fresh memos; spaces taken
        dropped, simulated, asked = refusals_by_simulation(compiled, vocab, prefix)
        assert dropped == simulated == {ids[t] for t in refused}, (prefix, [vocab.tokens[t] for t in dropped ^ simulated])
        assert not asked & {ids[t] for t in shaped}, (prefix, [vocab.tokens[t] for t in asked])
