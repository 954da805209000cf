"""uniqueItems over unbounded items: the matcher refuses any token that completes a duplicate item.

Oracles: the ``jsonschema`` validator on every finished random walk, and plain JSON equality.
"""

from __future__ import annotations

import json
import random
import warnings

import jsonschema
import numpy as np
import pytest
from grammar_oracle import tiny_vocab
from json_schema_oracle import ESCAPE_TOKENS, refusals_by_simulation
from pydantic import BaseModel

from guided.constraints import to_constraint
from guided.errors import SchemaError
from guided.grammar.compiler import GrammarCompiler
from guided.schema.compiler import compile_json_schema
from guided.schema.facts import json_equal, json_value_key, number_key
from guided.schema.unique_runtime import UniqueChecked, _features

STRINGS = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
# a closed object: once "a" is written, only the closing brace can follow, which may be a duplicate
CLOSED = {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False}
# ... with a member of finitely many values: once "a" is written, true and false may both be duplicates
CLOSED_FINITE = {"type": "object", "properties": {"a": {"type": "boolean"}}, "additionalProperties": False}


@pytest.fixture(scope="module")
def compiler(vocab_builtin):
    return GrammarCompiler(vocab_builtin)


def _matcher(compiler, schema, **options):
    compiled = compile_json_schema(compiler, schema, **options)
    assert isinstance(compiled, UniqueChecked)
    return compiled.matcher()


def test_a_duplicate_string_item_is_refused_and_the_state_kept(compiler):
    m = _matcher(compiler, {"type": "object", "properties": {"tags": STRINGS}, "required": ["tags"]})
    assert m.accept_text('{"tags": ["a", "b"')
    assert not m.accept_text(', "a"')  # refused, nothing consumed
    assert m.accept_text(', "ab", "ba"]}') and m.is_accepting()


def test_equal_values_in_other_spellings_are_duplicates(compiler):
    numbers = _matcher(compiler, {"type": "array", "items": {"type": "number"}, "uniqueItems": True})
    assert numbers.accept_text("[1, 2.5")
    assert not numbers.accept_text(", 1.0,") and not numbers.accept_text(", 10e-1]")
    assert numbers.accept_text(", 1.5]")
    anything = _matcher(compiler, {"type": "array", "uniqueItems": True})
    assert anything.accept_text('[{"a": 1, "b": [true]}')
    assert not anything.accept_text(', {"b": [true], "a": 1.0}')  # member order and spelling differ
    assert anything.accept_text(', {"b": [true], "a": 2}, 1, "1", [1]]')


def test_items_decided_before_they_end_are_refused_early(compiler):
    anything = _matcher(compiler, {"type": "array", "uniqueItems": True})
    assert anything.accept_text("[true, null, ")
    assert not anything.accept_text("t") and not anything.accept_text("n")  # only true/null can follow
    assert anything.accept_text("f")
    integers = _matcher(compiler, {"type": "array", "items": {"type": "integer"}, "uniqueItems": True})
    assert integers.accept_text("[0, 7, ")
    assert not integers.accept_text("0") and not integers.accept_text("7.")
    assert integers.accept_text("70]")


def test_masks_drop_exactly_the_tokens_that_complete_a_duplicate(compiler, vocab_builtin):
    pres = {t.split(b'"')[0] for t in vocab_builtin.tokens if b'"' in t}
    ends = [b""] + sorted(p for p in pres if p and p.isascii() and p.decode().isprintable() and b"\\" not in p)[:1]
    text = '["' + '","'.join("hel" + e.decode() for e in ends) + '","hel'
    m = _matcher(compiler, STRINGS, whitespace="compact")
    assert m.accept_text(text)
    allowed = np.flatnonzero(m.allowed_tokens())
    plain = compile_json_schema(compiler, {"type": "array", "items": {"type": "string"}}, whitespace="compact")
    pm = plain.matcher()
    assert pm.accept_text(text)
    before = set(np.flatnonzero(pm.allowed_tokens()).tolist())
    dropped = before - set(allowed.tolist())
    assert dropped
    for t in before:
        tok = vocab_builtin.tokens[t]
        finishes = b'"' in tok and tok.split(b'"')[0] in ends
        assert (t in dropped) == finishes, tok


def test_random_walks_end_valid_and_never_dead(compiler, vocab_builtin):
    schemas = [
        {"type": "array", "items": {"type": "string", "minLength": 1}, "uniqueItems": True, "minItems": 3},
        {"type": "array", "items": {"type": "integer"}, "uniqueItems": True, "minItems": 3},
        # every prefix of [ab]+ has infinitely many endings: refusing duplicates never dead-ends
        {"type": "array", "items": {"type": "string", "pattern": "^[ab]+$"}, "uniqueItems": True, "minItems": 4},
        {"type": "array", "items": {"type": "string", "format": "uri"}, "uniqueItems": True, "minItems": 2},
        {"type": "array", "uniqueItems": True, "minItems": 3, "maxItems": 6},
        {"properties": {"a": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "number"},
                                                               "uniqueItems": True}]}}},  # fmt: skip
        {"additionalProperties": {"$ref": "#/$defs/t"}, "$defs": {"t": {**STRINGS, "minItems": 2}}},
        # objects that take one more member with a fresh name after any prefix, and a mix of open kinds
        {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
         "uniqueItems": True, "minItems": 3},
        {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "object"}]}, "uniqueItems": True,
         "minItems": 3},
        # strings that run out: the matcher searches for an ending no earlier item has
        {"type": "array", "items": {"type": "string", "pattern": "^[ab]{1,2}$"}, "uniqueItems": True, "minItems": 3},
        {"type": "array", "items": {"type": ["string", "null"], "maxLength": 1}, "uniqueItems": True, "minItems": 2},
        # open kinds that refuse finitely many values, constants beside an open branch, an enum of
        # strings beside the array, typeless object keywords, an if that only tests members
        {"type": "array", "items": {"type": "integer", "not": {"enum": [0, 1]}}, "uniqueItems": True, "minItems": 3},
        {"type": "array", "items": {"anyOf": [{"type": "string"}, {"enum": ["a", "b", True]}]}, "uniqueItems": True,
         "minItems": 3},
        {"anyOf": [{"enum": ["x", "y"]}, {"type": "array", "items": {"enum": ["x", "y", "z"]}, "uniqueItems": True}]},
        {"type": "array", "items": {"properties": {"a": {"type": "integer"}}}, "uniqueItems": True, "minItems": 3},
        {"type": "array", "uniqueItems": True, "minItems": 3, "items": {
            "type": "object", "if": {"not": {"properties": {"k": {"const": False}}}},
            "then": {"properties": {"c": {"type": "string"}}, "required": ["c"]}}},
        # string constants beside strings that run out; several types, each open on its own
        {"type": "array", "uniqueItems": True, "minItems": 3, "items": {
            "type": "string", "oneOf": [{"enum": ["a", "b"]}, {"pattern": "^#[0-9]{1,2}$"}]}},
        {"type": "array", "items": {"type": ["string", "object", "boolean"]}, "uniqueItems": True, "minItems": 3},
        # closed objects whose members are all of open kinds: decided where the last member's value ends
        {"type": "array", "uniqueItems": True, "minItems": 4, "items": {"$ref": "#/$defs/c"}, "$defs": {"c": {
            "type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
            "additionalProperties": False}}},
        {"type": "array", "uniqueItems": True, "minItems": 4, "items": {
            "type": "object", "properties": {"k": {}, "v": {"type": "object"}, "n": {"type": "number"}},
            "required": ["k"], "additionalProperties": False}},
    ]
    rng = random.Random(1)
    eos = set(vocab_builtin.eos_ids)
    finished = 0
    seen_ws: list = []
    for schema in schemas:
        compiled = compile_json_schema(compiler, schema, whitespace="compact" if len(seen_ws) % 2 else "flexible")
        seen_ws.append(schema)
        for _ in range(6):
            m, seen, out = compiled.matcher(), [], b""
            for step in range(80):
                allowed = np.flatnonzero(m.allowed_tokens()).tolist()
                assert allowed, f"dead end after {out!r}"
                ok = set(allowed)
                if step % 3 == 0:  # the mask (only likely tokens simulated) equals simulating them all
                    grammar = np.flatnonzero(m.inner.allowed_tokens()).tolist()
                    assert ok == {t for t in grammar if m.is_allowed(t)}, out
                if ok & eos and (step > 60 or rng.random() < 0.4):
                    break
                again = [t for t in seen if t in ok and t not in eos]  # try to repeat earlier items
                short = [t for t in allowed if t not in eos and len(vocab_builtin.tokens[t]) <= 2]
                t = rng.choice(again if again and rng.random() < 0.6 else short or allowed)
                assert m.accept_token(t)
                if t in eos:
                    break
                seen.append(t)
                out += vocab_builtin.tokens[t]
            else:
                continue
            value = json.loads(out)
            if "inf" not in repr(value):  # a huge exponent: floats would call distinct values equal
                jsonschema.validate(value, schema)
                finished += 1
    assert finished >= 10


def test_rollback_and_copy_restore_the_items_seen(compiler):
    m = _matcher(compiler, STRINGS)
    assert m.accept_text('["a"')
    fork = m.copy()
    assert m.accept_text(', "b"')
    m.rollback(1)
    assert m.accept_text(', "b"') and not m.accept_text(', "b"')
    assert fork.accept_text(', "b"') and not fork.accept_text(', "a"')


def test_bytes_that_are_not_json_are_refused_not_crashed(compiler):
    m = _matcher(compiler, STRINGS)
    assert not m.accept_text("]")  # the tracker has no open array to close
    assert not m.accept_text("[1")  # a number where the grammar wants a string
    assert m.accept_text('["x"]') and m.is_accepting()


@pytest.mark.parametrize(
    "schema, reason",
    [
        ({"anyOf": [STRINGS, {"type": "array", "items": {"type": "string"}}]}, "some branches"),
        ({"not": STRINGS}, "under 'not'"),
        ({"type": "array", "items": CLOSED_FINITE, "uniqueItems": True}, "exact only for items"),
        ({"type": "array", "items": {**CLOSED, "maxProperties": 1}, "uniqueItems": True}, "exact only for items"),
        ({"type": "array", "items": {"allOf": [CLOSED, {**CLOSED, "properties": {"a": {}, "b": {}}}]},
          "uniqueItems": True}, "exact only for items"),  # fmt: skip
        ({"type": "array", "items": {"type": "object", "maxProperties": 2}, "uniqueItems": True}, "exact only"),
        ({"type": "array", "items": {"type": "object", "not": {"required": ["a"]}}, "uniqueItems": True}, "exact only"),
        ({"type": "array", "items": {"anyOf": [{"type": "string"}, CLOSED]}, "uniqueItems": True}, "exact only"),
        # an if that counts members may end an object's openness; so may a not that is no enum
        ({"type": "array", "uniqueItems": True, "items": {"type": "object", "if": {"maxProperties": 1},
                                                          "then": {"required": ["a"]}}}, "exact only"),  # fmt: skip
        ({"type": "array", "uniqueItems": True, "items": {"type": "string", "not": {"minLength": 2}}}, "exact only"),
        ({"type": "array", "items": {"anyOf": [{"type": "string"}, {"enum": [1]}]}, "uniqueItems": True}, "exact only"),
    ],
)
def test_unenforceable_places_are_refused_with_the_reason(compiler, schema, reason):
    with pytest.raises(SchemaError, match=reason):
        compile_json_schema(compiler, schema)
    with warnings.catch_warnings(record=True) as w:  # lenient: relaxed, said so
        warnings.simplefilter("always")
        compile_json_schema(compiler, schema, lenient=True)
    assert any("uniqueItems" in str(x.message) for x in w)


def test_unique_items_inside_a_complement_is_refused_saying_so(compiler):
    # each branch is unique; oneOf exclusivity complements the other, which would need arrays that repeat
    schema = {"oneOf": [{"type": "array", "items": {"type": "string"}, "uniqueItems": True, "maxItems": 3},
                        {"type": "array", "items": {"type": "string", "pattern": "^a"}, "uniqueItems": True}]}  # fmt: skip
    with pytest.raises(SchemaError, match="inside a complement") as e:
        compile_json_schema(compiler, schema)
    assert e.value.path.endswith("/uniqueItems")


def test_finite_items_stay_in_the_grammar(compiler):
    m = _matcher(compiler, {"type": "array", "items": {"enum": ["a", "b"]}, "uniqueItems": True})
    assert m.accept_text('["a", "b"') and not m.accept_text(', ')  # the grammar itself ends it
    plain = compile_json_schema(compiler, {"type": "array", "items": {"type": "string"}})
    assert not isinstance(plain, UniqueChecked)


def test_value_keys_follow_json_equality():
    assert number_key("1") == number_key("1.0") == number_key("10e-1") == number_key("0.1e1")
    assert number_key("-0") == number_key("0.00") and number_key("1e999999999999999999999") != number_key("1e2")
    assert json_value_key(True) != json_value_key(1) and json_value_key({"a": [1]}) == json_value_key({"a": [1.0]})
    values = [1, 1.0, True, False, 0, -0.0, None, "a", "1", [1], [1.0], [True], {"a": 1}, {"a": 1.0}, {"a": True},
              {"b": 1, "a": 2}, {"a": 2, "b": 1}, [], {}, "", [[1]], [[1.0]], 2**60, 2**60 + 1, 1e308, 0.1,
              float("inf"), float("-inf"), float("nan")]  # fmt: skip
    for a in values:
        for b in values:
            assert (json_value_key(a) == json_value_key(b)) == json_equal(a, b), (a, b)
    # a float is the number its JSON text prints (the text a grammar writes), not its binary value
    assert json_value_key(float(2**60)) == json_value_key(1152921504606847000) != json_value_key(2**60)


def _diverges_by_lists(dfa, s, rests):
    """_diverges as defined over the list of spellings: a byte the state allows that begins none of
    them (but a backslash); an escape it takes whose character's spelling begins none of them, or
    does and is followed by a divergence (escapes walked one by one, ``\\u`` ones over all 65,536);
    or a byte that begins some of them, followed by a divergence (but a backslash, whose strings
    the escapes stand for)."""
    if not rests:
        return True
    dfa.materialize(s)
    allowed = dfa.trans[s][dfa.class_map] >= 0
    firsts = {r[0] for r in rests}
    if any(allowed[b] and b not in firsts and b != 0x5C for b in range(256)):
        return True
    if allowed[0x5C]:
        escapes = [(e, json.loads('"' + e + '"')) for e in ('\\"', "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t")]
        if dfa.walk(s, b"\\u") >= 0:
            escapes += [(f"\\u{c:04x}", chr(c)) for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF]
        for escape, ch in escapes:
            after = dfa.walk(s, escape.encode())
            if after < 0:
                continue
            spelled = json.dumps(ch, ensure_ascii=False)[1:-1].encode()
            below = [r[len(spelled) :] for r in rests if r.startswith(spelled)]
            if not below or any(below) and _diverges_by_lists(dfa, after, [r for r in below if r]):
                return True
    return any(
        allowed[b] and _diverges_by_lists(dfa, dfa.walk(s, bytes((b,))), [r[1:] for r in rests if r[:1] == bytes((b,)) and r[1:]])
        for b in sorted(firsts) if b != 0x5C and any(r[:1] == bytes((b,)) and r[1:] for r in rests)
    )  # fmt: skip


def test_the_spelling_search_answers_as_its_definition_over_lists(compiler):
    """_diverges over a trie of spellings gives the answers of the definition over the list of
    spellings, from every state along every spelling, with one memo and rows cache for all the
    tries (which share subtrees: an earlier one with a spelling inserted, where there is one)."""
    from guided.schema.unique_runtime import _descend, _diverges, _trie_with, spelling_trie

    rng = random.Random(5)
    dfa = compiler.compile_regex(r'(?:[ab]{0,3}|a\\b|ab[ab]c)"').dfa
    words = ["", "a", "b", "aa", "ab", "ba", "bb", "aaa", "aab", "aba", "abb", "bab", "bbb", "abac", "abbc", "a\\b"]
    memo, rows = {}, {}
    for _ in range(300):
        rests = [(w + '"').encode() for w in rng.sample(words, rng.randint(1, len(words)))]
        base = spelling_trie(rests[:-1])
        trie = _trie_with(base, rests[-1])
        assert trie == spelling_trie(rests)
        for spellings, t in ((rests[:-1], base), (rests, trie)):  # the base's nodes first, then shared
            for head in {r[:k] for r in spellings for k in range(len(r))}:
                s = dfa.walk(0, head)  # state 0: the start
                if s < 0:
                    continue
                expected = _diverges_by_lists(dfa, s, [r[len(head) :] for r in spellings if r.startswith(head)])
                assert _diverges(dfa, s, _descend(t, head), memo, rows) == expected, (spellings, head)


def test_finite_values_keep_the_first_of_equal_values_in_order():
    from guided.schema.resolver import SchemaResolver
    from guided.schema.unique_plan import finite_values

    enum = [1, "a", 1.0, True, {"x": [1], "y": None}, {"y": None, "x": [1.0]}, "a", 0, -0.0]
    assert finite_values(SchemaResolver({}), {"enum": enum}, "") == [1, "a", True, {"x": [1], "y": None}, 0]


def test_object_items_that_stay_open_are_compared_as_values(compiler):
    items = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    m = _matcher(compiler, {"type": "array", "items": items, "uniqueItems": True})
    assert m.accept_text('[{"a": 1, "b": [2]}, {"a": 1}')
    assert not m.accept_text(', {"b": [2.0], "a": 1}')  # equal to the first item
    assert not m.accept_text(', {"a": 1.0}')  # equal to the second
    assert m.accept_text(', {"a": 1, "c": 0}]') and m.is_accepting()


def test_closed_object_items_are_decided_where_their_last_member_ends(compiler):
    m = _matcher(compiler, {"type": "array", "items": CLOSED, "uniqueItems": True})
    assert m.accept_text('[{"a": "x"}, {"a": "x') and not m.accept_text('"')  # only "}" could follow it
    assert m.accept_text('y"}]') and m.is_accepting()
    two = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
           "additionalProperties": False}  # fmt: skip
    m = _matcher(compiler, {"type": "array", "items": two, "uniqueItems": True})
    assert m.accept_text('[{"a": 10}, {"a": 1, "b": "x"}, {"a": 1') and m.copy().accept_text("0")
    assert not m.copy().accept_text("0}")  # {"a": 10} again: decided at the closing brace
    assert m.accept_text(', "b": "x') and not m.copy().accept_text('"')  # the second item again
    assert m.accept_text('z"}]') and m.is_accepting()
    m = _matcher(compiler, {"type": "array", "items": two, "uniqueItems": True}, key_order="any")
    assert m.accept_text('[{"a": 1, "b": "x"}, {"b": "x", "a": 1') and not m.copy().accept_text("}")
    assert m.accept_text("2}]") and m.is_accepting()
    one = {"type": "object", "properties": {"b": {"type": "integer"}}, "additionalProperties": False}
    m = _matcher(compiler, {"type": "array", "items": one, "uniqueItems": True})
    assert m.accept_text('[{"b": 0}, {"b": ') and not m.copy().accept_text("0")  # decided at the 0 itself
    assert m.accept_text("-1}]") and m.is_accepting()
    anything = {"type": "object", "properties": {"k": {}}, "additionalProperties": False}
    m = _matcher(compiler, {"type": "array", "items": anything, "uniqueItems": True})
    assert m.accept_text('[{"k": true}, {"k": [1]}, {"k": ') and not m.copy().accept_text("t")
    assert not m.copy().accept_text("[1]") and m.accept_text("[1, 2]}]") and m.is_accepting()


def test_an_empty_item_is_never_left_where_only_a_duplicate_can_close_it(compiler):
    # flexible whitespace takes max_ws (8) characters before a first member and as many again before
    # "}": past 8 inside "{", only "}" can follow, which here would repeat the first item
    m = _matcher(compiler, {"type": "array", "items": {"type": "object"}, "uniqueItems": True})
    assert m.accept_text("[{}, {" + " " * 8) and not m.copy().accept_text(" ")
    assert not any(m.is_allowed(t) for t in range(len(m.compiled.vocabulary.tokens))
                   if m.compiled.vocabulary.tokens[t].isspace())  # fmt: skip
    assert m.accept_text('"a": 1}]') and m.is_accepting()
    m = _matcher(compiler, {"type": "array", "uniqueItems": True})  # any items: the same for "[]"
    assert m.accept_text("[[], [" + "\n" * 5) and m.accept_text("\t" * 3) and not m.copy().accept_text(" ")
    assert m.accept_text("0]]") and m.is_accepting()
    m = _matcher(compiler, {"type": "array", "uniqueItems": True})  # no earlier "[]": nothing refused
    assert m.accept_text("[[0], [" + " " * 12 + "]]") and m.is_accepting()


class _Tag(BaseModel, frozen=True):
    name: str
    weight: int


class _Tagged(BaseModel):
    tags: set[_Tag]  # pydantic writes uniqueItems over closed objects (guided closes pydantic models)


def test_a_set_of_pydantic_models_keeps_its_items_unique(compiler):
    spec = to_constraint(_Tagged)
    m = compile_json_schema(compiler, spec.schema, strict=spec.strict).matcher()
    assert m.accept_text('{"tags": [{"name": "a", "weight": 1}, {"name": "a", "weight": 1')
    assert not m.copy().accept_text("}") and not m.copy().accept_text(" }")  # the first tag again
    text = '{"tags": [{"name": "a", "weight": 1}, {"name": "a", "weight": 12}]}'
    assert m.accept_text("2}]}") and m.is_accepting()
    assert len(_Tagged.model_validate_json(text).tags) == 2


def test_undeclared_names_are_checked_per_pattern_they_match(compiler):
    schema = {"type": "object", "patternProperties": {"^x": {"type": "object", "properties": {"e": STRINGS}}}}
    m = _matcher(compiler, schema)  # uniqueItems under names matching ^x only: not a mixed place
    assert m.accept_text('{"b": {"e": ["a", "a"]}, "xa": {"e": ["a"')
    assert not m.accept_text(', "a"')
    assert m.accept_text(', "b"]}}') and m.is_accepting()
    value = json.loads('{"b": {"e": ["a", "a"]}, "xa": {"e": ["a", "b"]}}')
    jsonschema.validate(value, schema)


def test_strings_that_run_out_are_cut_where_only_earlier_items_remain(compiler, vocab_builtin):
    """Items of ^[ab]{2}$ (four values): once "aa" and "ab" are written, an item begun with "a" can
    only repeat one; every token that begins it so is dropped, exactly those."""
    schema = {"type": "array", "items": {"type": "string", "pattern": "^[ab]{2}$"}, "uniqueItems": True}
    m = _matcher(compiler, schema, whitespace="compact")
    assert m.accept_text('["aa","ab",')
    fork = m.copy()
    assert not m.accept_text('"a') and not fork.accept_text('"ab"')
    assert m.accept_text('"b') and m.accept_text('a","bb"]') and m.is_accepting()
    m = _matcher(compiler, schema, whitespace="compact")
    plain = compile_json_schema(compiler, {"type": "array", "items": {"type": "string", "pattern": "^[ab]{2}$"}},
                                whitespace="compact").matcher()  # fmt: skip
    for prefix in ('["aa","ab",', '["aa","ab","', '["ba","aa","b'):
        m, p = _matcher(compiler, schema, whitespace="compact"), plain.copy()
        p.reset()
        assert m.accept_text(prefix) and p.accept_text(prefix)
        got = set(np.flatnonzero(m.allowed_tokens()).tolist())
        before = set(np.flatnonzero(p.allowed_tokens()).tolist())
        earlier = set(json.loads(prefix.rsplit(",", 1)[0] + "]"))
        begun = prefix.rsplit(",", 1)[1]
        for t in before:
            text = begun + vocab_builtin.tokens[t].decode("utf-8", "replace")
            body = text.lstrip('"').split('"')[0]  # the item's text so far (one item per token here)
            new = [v for v in ("aa", "ab", "ba", "bb") if v.startswith(body) and v not in earlier]
            ends = text.count('"') == 2
            ok = (body not in earlier) if ends else bool(new)
            assert (t in got) == ok, (prefix, vocab_builtin.tokens[t])


def test_string_keywords_without_a_type_bound_only_the_strings(compiler):
    schema = {"type": "array", "items": {"pattern": "^[ab]$"}, "uniqueItems": True}
    m = _matcher(compiler, schema, whitespace="compact")
    assert m.accept_text('["a","b",1,{"x":[true]},')
    assert not m.accept_text('"')  # both strings written: no string item is left
    assert not m.accept_text("1,") and m.accept_text('{"x":[false]}]') and m.is_accepting()


def test_many_strings_or_strings_narrowed_elsewhere_are_searched(compiler):
    """Past 64 values the grammar cannot hold uniqueness; string values are left to the matcher."""
    words = [f"w{i:02d}" for i in range(70)]
    schema = {"type": "array", "items": {"type": "string", "enum": words}, "uniqueItems": True}
    m = _matcher(compiler, schema, whitespace="compact")
    assert m.accept_text('["w00","w01",')
    assert not m.accept_text('"w00"') and m.accept_text('"w02"]') and m.is_accepting()
    one_of = [{"enum": ["a"]}, {"enum": ["b"]}]
    narrowed = {"type": "array", "uniqueItems": True, "items": {"type": "string", "oneOf": one_of}}
    m = _matcher(compiler, narrowed, whitespace="compact")
    assert m.accept_text('["a",') and not m.accept_text('"a"') and m.accept_text('"b"]')
    m = _matcher(compiler, narrowed, whitespace="compact")
    assert m.accept_text('["a","b"') and not m.accept_text(",")  # no third value: the array must close
    with pytest.raises(SchemaError, match="strings, booleans and null only"):
        compile_json_schema(compiler, {"type": "array", "uniqueItems": True,
                                       "items": {"type": "number", "enum": list(range(70))}})  # fmt: skip


def test_constants_beside_strings_that_run_out_are_searched_with_them(compiler):
    """An enum of strings beside a pattern that runs out (SchemaStore's colour names or ``#rrggbb``):
    one search over both, so an item is refused exactly where only earlier ones remain."""
    schema = {"type": "array", "uniqueItems": True,
              "items": {"type": "string", "oneOf": [{"enum": ["red", "blue"]}, {"pattern": "^#[01]$"}]}}
    m = _matcher(compiler, schema, whitespace="compact")
    assert m.accept_text('["red","#1",')
    assert not m.copy().accept_text('"red"') and not m.copy().accept_text('"#1"')
    assert m.accept_text('"blue","#0"') and not m.copy().accept_text(",")  # all four written
    assert m.accept_text("]") and m.is_accepting()
    m = _matcher(compiler, {**schema, "items": {"type": "string", "anyOf": [{"enum": ["("]}, {"maxLength": 1}]}},
                 whitespace="compact")  # fmt: skip
    assert m.accept_text('["(",') and not m.copy().accept_text('"("') and m.accept_text('")"]')


def test_several_open_types_are_compared_as_values(compiler):
    schema = {"type": "array", "uniqueItems": True, "items": {"type": ["string", "object", "null"]}}
    m = _matcher(compiler, schema, whitespace="compact")
    assert m.accept_text('["a",{"x":1},null,')
    for again in ('"a"', '{"x":1}', "null"):
        assert not m.copy().accept_text(again), again
    assert m.accept_text('{"x":2}]') and m.is_accepting()
    # strict: objects would take no undeclared member, so {} would be the only object and could
    # repeat: no exact check, so the schema keeps its literal meaning (objects open), still exact
    closed = _matcher(compiler, schema, whitespace="compact", strict=True)
    assert closed.accept_text('[{},{"x":1},') and not closed.copy().accept_text("{}")
    assert closed.accept_text('{"y":true}]') and closed.is_accepting()


def test_a_refusal_points_at_the_unique_items_it_refuses(compiler):
    """The error names the uniqueItems that cannot be enforced and the instance place, not the first
    unique array the lowering happens to meet."""
    schema = {"type": "object", "properties": {"ok": STRINGS, "bad": {"type": "array", "items": CLOSED_FINITE,
                                                                      "uniqueItems": True}}}  # fmt: skip
    with pytest.raises(SchemaError) as e:
        compile_json_schema(compiler, schema)
    assert e.value.path == "#/properties/bad/uniqueItems"
    assert "the instance's #/bad/0" in str(e.value)


def test_a_literal_item_other_than_the_earlier_ones_may_follow(compiler, vocab_builtin):
    """JSON Schema Test Suite, "uniqueItems with an array of items": after ``[false`` the comma is
    allowed (``true`` is new); the search for a new item used to try only null, numbers, objects,
    arrays and strings, so masks refused the comma and every valid instance."""
    m = _matcher(compiler, {"prefixItems": [{"type": "boolean"}, {"type": "boolean"}], "uniqueItems": True})
    assert m.accept_text("[false")
    assert m.allowed_tokens()[vocab_builtin.tokens.index(b",")]
    assert m.accept_text(",") and m.accept_text(' true, "foo", "bar"]') and m.is_accepting()
    again = _matcher(compiler, {"prefixItems": [{"type": "boolean"}, {"type": "boolean"}], "uniqueItems": True})
    assert again.accept_text("[true") and again.accept_text(",") and not again.accept_text(" true")


def test_a_closed_item_decided_at_a_zero_survives_a_second_zero(compiler):
    """Closed items whose last member is an integer are decided at its ``0``; a second ``0`` (which
    the grammar refuses) once reached the item check as ``{"k":00}`` and crashed parsing it."""
    item = {"type": "object", "properties": {"k": {"type": "integer"}}, "additionalProperties": False}
    schema = {"type": "array", "items": item, "uniqueItems": True, "minItems": 2}
    m = _matcher(compiler, schema, whitespace="compact")
    assert m.shortest_completion().text == b'[{},{"k":0}]'
    assert m.accept_text('[{"k":0},{"k":')
    assert not m.copy().accept_text("0")  # the duplicate, refused where its 0 decides it
    assert not m.copy().accept_text("00") and m.accept_text("1}]") and m.is_accepting()


def test_string_items_begun_with_escapes_are_cut_where_only_earlier_items_remain():
    """Items of two characters of a, b, a quote or a newline once ``a"``, ``a\\n`` and ``ab`` are
    written: after ``a`` an escape that decodes to an earlier item's text is refused (``\\"``,
    ``\\n``), as simulating every token finds; one that ends inside an escape is not."""
    vocab = tiny_vocab(ESCAPE_TOKENS)
    schema = {"type": "array", "items": {"type": "string", "pattern": '^[ab"\\n]{2}$'}, "uniqueItems": True}
    compiled = compile_json_schema(GrammarCompiler(vocab), schema, whitespace="compact")
    ids = {t: i for i, t in enumerate(vocab.tokens)}
    earlier = '["a\\"","a\\n","ab",'
    expect = {earlier + '"': {b'a\\"'}, earlier + '"a': {b"b", b'\\"', b"\\n", b'b"', b'\\""'}, earlier + '"b': set()}
    for prefix, refused in expect.items():
        dropped, simulated, _ = refusals_by_simulation(compiled, vocab, prefix)
        assert dropped == simulated == {ids[t] for t in refused}, prefix


def test_tokens_with_escapes_are_filed_by_the_text_they_spell():
    """The vocabulary's table for the checks above: a token with escapes (and no quote that ends a
    string) by the text it decodes to; one ending inside an escape nowhere; one spelling half a
    surrogate pair apart, always simulated."""
    vocab = tiny_vocab(ESCAPE_TOKENS)
    feats = _features(vocab)
    ids = {t: i for i, t in enumerate(vocab.tokens)}
    spelled = {text: {vocab.tokens[t] for t in got} for text, got in feats.by_escaped.items()}
    assert spelled[b"a"] == {b"\\u0061"} and spelled[b"ab"] == {b"a\\u0062"} and spelled[b'"'] == {b'\\"', b"\\u0022"}
    assert spelled[b"\n"] == {b"\\n"} and spelled[b'""'] == {b'\\"\\"'} and spelled[b'"b'] == {b'\\"b'}
    assert not any(t in got for t in (b"\\", b"\\u", b"\\u00", b'\\""', b'\\"b"') for got in spelled.values())
    odd = np.flatnonzero(np.unpackbits(feats.odd_escape.view(np.uint8), bitorder="little")).tolist()
    assert odd == [ids[b"\\ud83d"]]


ITEM_END_TOKENS = [b"{", b"}", b"[", b"]", b",", b":", b'"', b" ", b"a", b"b", b"c", b'",', b'", ', b'",\n', b'"]',
                   b'"]\n', b'"],', b'"]}', b'" ,', b'"],"', b'","', b'"k"', b'":', b'"m"']  # fmt: skip


def test_tokens_ending_an_item_alike_are_decided_by_one_simulation():
    """Items a, b or c: once all three are written, ending the last with a comma (whatever whitespace
    around it) leaves no item to write and is refused; ending it with the bracket is not. Tokens that
    end the item with the same separators (whitespace apart) are decided by simulating one; the mask
    equals simulating every token."""
    vocab = tiny_vocab(ITEM_END_TOKENS)
    ids = {t: i for i, t in enumerate(vocab.tokens)}
    items = {"type": "array", "items": {"type": "string", "pattern": "^[abc]$"}, "uniqueItems": True}
    schema = {"type": "object", "properties": {"k": items, "m": {"type": "null"}}, "additionalProperties": False}
    asked_there = [b'",', b'"]', b'"],', b'"]}', b'"],"', b'","']
    cases = {  # prefix: (refused, simulated)
        '{"k": ["a", "b", "c': ([b'",', b'", ', b'",\n', b'" ,', b'","'], asked_there),
        '{"k": ["a", "b': ([], asked_there),
    }
    for prefix, (refused, simulated_only) in cases.items():
        compiled = compile_json_schema(GrammarCompiler(vocab), schema, key_order="any")  # fresh memos
        dropped, simulated, asked = refusals_by_simulation(compiled, vocab, prefix)
        assert dropped == simulated == {ids[t] for t in refused}, prefix
        assert asked == {ids[t] for t in simulated_only}, (prefix, [vocab.tokens[t] for t in asked])



PLAIN_ITEM_TOKENS = [b"[", b"]", b",", b'"', b'",', b'"]', b"a", b"b", b"aa", b"ab", b"ba", b"bb", b'\\"', b'a\\"']


def test_tokens_adding_plain_text_to_an_item_are_decided_without_simulation():
    """Items of two characters: a token that only adds plain text to the item (no quote, backslash or
    control character) is refused exactly when the item can then only repeat an earlier one, decided
    from the earlier items' spellings and the grammar's state after it, without simulating the token;
    a token with an escape is still simulated. The mask equals simulating every token."""
    vocab = tiny_vocab(PLAIN_ITEM_TOKENS)
    ids = {t: i for i, t in enumerate(vocab.tokens)}
    plain = {ids[t] for t in (b"a", b"b", b"aa", b"ab", b"ba", b"bb")}
    cases = {  # (pattern, prefix): refused
        ("^[ab]{2}$", '["aa","ab","'): {b"a", b"aa", b"ab"},
        ("^[ab]{2}$", '["aa","ba","b'): {b"a"},
        ("^[ab]{2}$", '["bb","'): {b"bb"},
        ('^[ab"]{2}$', '["a\\"","aa","'): {b"aa", b'a\\"'},  # a may still end as ab
        ('^[ab"]{2}$', '["a\\"","aa","ab","'): {b"a", b"aa", b"ab", b'a\\"'},
    }
    for (pattern, prefix), refused in cases.items():
        schema = {"type": "array", "items": {"type": "string", "pattern": pattern}, "uniqueItems": True}
        compiled = compile_json_schema(GrammarCompiler(vocab), schema, whitespace="compact")  # fresh memos
        dropped, simulated, asked = refusals_by_simulation(compiled, vocab, prefix)
        assert dropped == simulated == {ids[t] for t in refused}, (prefix, sorted(vocab.tokens[t] for t in dropped))
        assert not asked & plain, (prefix, [vocab.tokens[t] for t in asked])
        if '"' in pattern:  # the tokens with an escape that the grammar allows there are simulated
            assert ids[b'a\\"'] in asked or ids[b'\\"'] in asked, (prefix, [vocab.tokens[t] for t in asked])


ESCAPED_ITEM_TOKENS = [b"[", b"]", b",", b'"', b'",', b'"]', b"a", b"b", b'\\"', b'a\\"', b'b\\"']
_ESCAPED_TEXT = {b"a": "a", b"b": "b", b'\\"': '"', b'a\\"': 'a"', b'b\\"': 'b"'}


def test_an_item_whose_only_new_endings_begin_with_an_escape_may_go_on():
    """Items of two characters of a, b or a quote (nine values): an item begun is cut exactly where
    every value it can still become was written, escapes decoded: after aa and ab, "a may still end
    as a\\" (the quote spelled with a backslash), which was refused before; after a\\", aa and ab it
    may not. Checked against the nine values, token by token, and by accepting whole items."""
    vocab = tiny_vocab(ESCAPED_ITEM_TOKENS)
    ids = {t: i for i, t in enumerate(vocab.tokens)}
    schema = {"type": "array", "items": {"type": "string", "pattern": '^[ab"]{2}$'}, "uniqueItems": True}
    values = [x + y for x in 'ab"' for y in 'ab"']
    for earlier, typed in ((["aa", "ab"], ""), (["aa", "ab"], "a"), (['a"', "aa", "ab"], ""),
                           (['a"', "aa", "ab"], "b"), (['"a', '"b', '""'], ""), (['"a', '"b'], '"')):  # fmt: skip
        prefix = "[" + ",".join(json.dumps(e) for e in earlier) + "," + json.dumps(typed)[:-1]
        compiled = compile_json_schema(GrammarCompiler(vocab), schema, whitespace="compact")
        dropped, simulated, _ = refusals_by_simulation(compiled, vocab, prefix)
        assert dropped == simulated, prefix
        for token, text in _ESCAPED_TEXT.items():
            possible = [v for v in values if v.startswith(typed + text)]  # (none: the grammar refuses it)
            if possible:
                assert (ids[token] in dropped) == all(v in earlier for v in possible), (prefix, token)
    m = compile_json_schema(GrammarCompiler(vocab), schema, whitespace="compact").matcher()
    for ch in '["aa","ab","a\\"","b\\"","\\"\\""]':  # the items a", b" and "" after aa and ab
        assert m.accept_text(ch), ch
    assert m.is_accepting()
    m = compile_json_schema(GrammarCompiler(vocab), schema, whitespace="compact").matcher()
    assert all(m.accept_text(ch) for ch in '["aa","ab","a\\"",')
    assert not m.copy().accept_text('"a') and m.accept_text('"b')  # every a-value written; b-values left
