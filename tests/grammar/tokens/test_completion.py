"""Shortest completions (``Matcher.shortest_completion``): from any state, the fewest bytes that end
the output validly, and tokens spelling them that the matcher takes. Checked against Python's ``re``
and Lark's parser by brute force over every shorter string of the grammar's alphabet."""

from __future__ import annotations

import itertools
import json
import re

import jsonschema
import pytest
from cfg_oracle import OK, automaton, recognizes, sentences

from guided.grammar.compiler import GrammarCompiler
from guided.grammar.tokens.compiled_cfg import compile_cfg
from guided.schema.compiler import compile_json_schema

REGEXES = {  # pattern, alphabet, whole matches whose prefixes are the states tried
    "alternation": ("a(bc|d)*e{3}", "abcde", ["aeee", "abcdbceee", "addeee"]),
    "overlap": ("(ab|abc)+x?y", "abcxy", ["aby", "abcabxy", "ababcy"]),
    "counters": ("[01]{2,5}(0|11)*", "01", ["01", "0110011", "11111110"]),
}


@pytest.fixture(scope="module")
def compiler(vocab_builtin):
    return GrammarCompiler(vocab_builtin)


def _check_tokens(compiler, matcher, completion) -> None:
    """The tokens spell the text, and the matcher takes them and can end there."""
    vocab = compiler.vocabulary
    assert b"".join(vocab.tokens[t] for t in completion.tokens) == completion.text
    probe = matcher.copy()
    assert probe.accept_tokens(completion.tokens) == len(completion.tokens)
    assert probe.is_accepting()


def _none_shorter(alphabet: str, n: int, ends) -> bool:
    return not any(ends("".join(p)) for k in range(n) for p in itertools.product(alphabet, repeat=k))


@pytest.mark.parametrize("name", list(REGEXES))
def test_regex_completions_are_shortest(compiler, name):
    pattern, alphabet, wholes = REGEXES[name]
    compiled = compiler.compile_regex(pattern)
    for whole in wholes:
        for i in range(len(whole) + 1):
            prefix = whole[:i]
            m = compiled.matcher()
            assert m.accept_text(prefix)
            got = m.shortest_completion()
            text = got.text.decode()
            assert re.fullmatch(pattern, prefix + text), (prefix, text)
            assert _none_shorter(alphabet, len(text), lambda s, p=prefix: re.fullmatch(pattern, p + s)), (prefix, text)
            _check_tokens(compiler, m, got)


@pytest.mark.parametrize("ignore", ["", "\n%ignore \" \""])
def test_context_free_completions_are_shortest(compiler, ignore):
    lark = pytest.importorskip("lark")
    grammar = 'start: e\ne: "(" e ")" | "x" e? | "[" e ("," e)* "]"' + ignore
    parser = lark.Lark(grammar)

    def parses(text: str) -> bool:
        try:
            parser.parse(text)
            return True
        except lark.exceptions.LarkError:
            return False

    compiled = compiler.compile_lark(grammar)
    for whole in ["((x))", "[x,(x),[x]]", "x(x)", "[(((x)))]"] + (["( [ x , x ] ) ", " x  ( x)"] if ignore else []):
        for i in range(len(whole) + 1):
            m = compiled.matcher()
            assert m.accept_text(whole[:i])
            got = m.shortest_completion()
            text = got.text.decode()
            assert parses(whole[:i] + text), (whole[:i], text)
            alphabet = "()x[], " if ignore else "()x[],"
            assert _none_shorter(alphabet, len(text), lambda s, p=whole[:i]: parses(p + s)), (whole[:i], text)
            _check_tokens(compiler, m, got)


@pytest.mark.parametrize("name", OK)
def test_shared_grammars_complete_from_inside_their_sentences(name, vocab_builtin):
    """Cut sampled sentences of every shared grammar anywhere: the completion ends a sentence the
    byte-level recognizer (a separate implementation) accepts, and the matcher takes its tokens."""
    grammar, reference = automaton(name)
    compiled = compile_cfg(vocab_builtin, grammar)
    for text in sentences(name, n=3, max_len=60):
        data = text.encode()
        for cut in sorted({0, len(data) // 3, len(data) // 2, len(data) - 1, len(data)}):
            m = compiled.matcher()
            if not m.accept_bytes(data[:cut]):
                continue  # (cut inside a character)
            got = m.shortest_completion()
            assert got is not None, (name, data[:cut])
            assert recognizes(reference, (data[:cut] + got.text).decode("utf-8", "surrogateescape")), (name, data[:cut])
            probe = m.copy()
            assert probe.accept_tokens(got.tokens) == len(got.tokens) and probe.is_accepting()


SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"},
                                      "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2}},
     "required": ["name", "tags"], "additionalProperties": False},
    {"type": "object"},  # schema-free values: a context-free grammar
    {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$", "not": {"enum": ["ab", "abc"]}}, "minItems": 1},
]  # fmt: skip
INSTANCES = [
    {"name": "ab\"c", "tags": ["x", "y", "z"], "n": 12},
    {"a": [1, {"b": [[None, "x"]]}], "c": {"d": True}},
    ["abcd", "ab", "q"],  # "ab" is refused at its closing quote: its prefixes are tried
]


@pytest.mark.parametrize("key_order", ["declared", "any"])
@pytest.mark.parametrize("i", range(len(SCHEMAS)))
def test_json_completions_are_valid_instances(compiler, i, key_order):
    schema, instance = SCHEMAS[i], INSTANCES[i]
    compiled = compile_json_schema(compiler, schema, key_order=key_order)
    text = json.dumps(instance)
    tried = 0
    for k in range(len(text) + 1):
        m = compiled.matcher()
        if not m.accept_text(text[:k]):
            break
        got = m.shortest_completion()
        assert got is not None, text[:k]
        jsonschema.validate(json.loads(text[:k] + got.text.decode()), schema)
        _check_tokens(compiler, m, got)
        tried += 1
    assert tried > 10


def test_checked_grammars_never_offer_a_refused_completion(compiler):
    """Where the grammar's shortest ending would repeat a member name, the checked matcher says
    None (not known) rather than offer it; elsewhere it offers the grammar's."""
    compiled = compile_json_schema(compiler, {"type": "object", "minProperties": 2})
    for prefix in ['{"":1,', '{"a":1,', "{"]:
        m = compiled.matcher()
        assert m.accept_text(prefix)
        got = m.shortest_completion()
        if got is not None:
            _check_tokens(compiler, m, got)
    m = compiled.matcher()
    assert m.accept_text("{") and m.shortest_completion() is not None


def test_after_the_end_nothing_is_left(compiler):
    compiled = compiler.compile_regex("ab")
    m = compiled.matcher()
    assert m.accept_text("ab")
    assert m.shortest_completion().text == b""
    assert m.accept_token(compiler.vocabulary.eos_ids[0])
    got = m.shortest_completion()
    assert got.text == b"" and got.tokens == []


def test_checked_completions_are_verified_before_any_container_opens(compiler):
    """At the start of an array of unique items, the grammar's shortest ([0,0,0]) repeats an item:
    the checked matcher does not offer it (it finds one the checks take, or says None)."""
    compiled = compile_json_schema(compiler, {"type": "array", "items": {}, "uniqueItems": True, "minItems": 3})
    m = compiled.matcher()
    got = m.shortest_completion()
    if got is not None:
        _check_tokens(compiler, m, got)


@pytest.mark.parametrize(
    "items, prefix, alphabet",
    [
        ({"type": "string"}, '["","', 'a"],'),
        ({"type": "string"}, '["ab","ab', 'ab"],'),
        ({"type": "object", "properties": {"k": {"type": "integer"}}}, "[{},{", '{}"k:0],'),
        ({"type": "integer"}, "[1,1", "0],1"),
        ({}, '[{},"",[],{', '{}":0],'),
    ],
)
def test_inside_unique_items_a_completion_that_repeats_none_is_found(compiler, items, prefix, alphabet):
    """Inside an item of an array of unique items, where the grammar's shortest ending repeats an
    earlier item: the checked search (merging no states, their items' text counts) finds an ending
    the checks take, as short in bytes as any over a small alphabet (brute force, jsonschema); it
    was None here, and budget steering could not end such an output."""
    schema = {"type": "array", "items": items, "uniqueItems": True}
    m = compile_json_schema(compiler, schema).matcher()
    assert m.accept_text(prefix)
    got = m.shortest_completion()
    assert got is not None
    _check_tokens(compiler, m, got)
    jsonschema.validate(json.loads(prefix + got.text.decode()), schema)
    validator = jsonschema.Draft202012Validator(schema)

    def valid(text: str) -> bool:
        try:
            return validator.is_valid(json.loads(prefix + text))
        except json.JSONDecodeError:
            return False

    shortest = next(n for n in range(1, 7) if any(valid("".join(t)) for t in itertools.product(alphabet, repeat=n)))
    assert len(got.text) == shortest, got.text


def test_equally_short_completions_break_ties_by_their_bytes(compiler):
    # Three completions of two bytes each, listed in every order: the answer is the smallest bytes,
    # whatever order the automaton numbers its states in (before: the first state id won).
    for words in itertools.permutations(["bx", "ay", "cz"]):
        compiled = compiler.compile_regex("q(" + "|".join(words) + ")")
        m = compiled.matcher()
        assert m.accept_text("q")
        assert m.shortest_completion().text == b"ay", words
