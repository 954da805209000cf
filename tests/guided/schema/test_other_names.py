"""The names of an object's other members (``strings.none_of``): every encoded string but the declared
names, as the names' trie (a ``TrieLeft``, interned from the words without building its items)."""

from __future__ import annotations

import json
import pickle
import random

import pytest

from guided.grammar import regex_ast
from guided.grammar.automata.end_bytes import last_bytes, may_be_empty
from guided.grammar.automata.expr_pool import EMPTY_ID, ExprPool
from guided.grammar.compiler import GrammarCompiler
from guided.grammar.regex_ast import Cofinite, TrieLeft, alt, chars, literal, seq
from guided.schema import strings
from guided.schema.compiler import _intern_common_lexemes, compile_json_schema
from guided.schema.strings import none_of

WORDS = ["name", "namespace", "kind", "apiVersion", "xName", "yName", "n"]


def _matches(pool: ExprPool, e: int, text: str) -> bool:
    for b in text.encode("utf-8"):
        e = pool.deriv(e, b)
        if e == EMPTY_ID:
            return False
    return bool(pool.nullable[e])


def test_every_string_but_the_names():
    pool = ExprPool()
    e = pool.intern(none_of(WORDS))
    others = ["", "na", "nam", "names", "namespaces", "Name", "kin", "kinds", "apiversion", "zName", "xNam",
              "x", "ñame", "name\n", 'na"me', "n\\", "nn", "yName2", "é"]  # fmt: skip
    for s in others:
        assert _matches(pool, e, json.dumps(s, ensure_ascii=False)[1:-1]), s
    for s in WORDS:
        assert not _matches(pool, e, json.dumps(s)[1:-1]), s


@pytest.mark.parametrize("common", [False, True], ids=["own-pool", "common-pool"])
@pytest.mark.parametrize("alphabet", ["ab", 'ab"\\\n', "aé😀b", "xyzXYZ_-"])
def test_the_words_intern_as_the_items_would(alphabet, common):
    """The expression made straight from the words (``ExprPool._intern_trie``) is the one the union's
    items intern to, with the same unions marked cofinite, whichever comes first; in a pool of the
    common expressions too, whose forks know the trie parts most names need (``intern_common``)."""
    if common:
        _intern_common_lexemes()
        assert ExprPool.with_common()._trie_parts, "the common pool holds no trie parts"
    new_pool = ExprPool.with_common if common else ExprPool
    rng = random.Random(alphabet)
    for _ in range(40):
        words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 5))) for _ in range(rng.randint(0, 8))]
        node = none_of(words)
        if node.__class__ is not TrieLeft:
            assert sorted(set(words)) == [""]
            continue
        items = Cofinite(node.items, node.body)
        for first, second in ((node, items), (items, node)):
            pool = new_pool()
            e = pool.intern(first)
            marked = dict(pool.cofinite)
            assert pool.intern(second) == e, words
            assert pool.cofinite == marked, words


def test_a_compile_never_builds_the_items(monkeypatch, vocab_builtin):
    """Objects with undeclared names compile and match without the union's nodes (a third of a big
    schema's compile, when they were built and interned node by node)."""
    def refuse(*_):
        raise AssertionError("the items of a TrieLeft were built")

    monkeypatch.setattr(regex_ast, "_left", refuse)
    props = {n: {"type": "string"} for n in WORDS}
    schema = {"type": "object", "properties": {**props, "inner": {"type": "object", "properties": props}}}
    compiled = compile_json_schema(GrammarCompiler(vocab_builtin, cache_size=4), schema, key_order="any")
    m = compiled.matcher()
    assert m.accept_text('{"zz": [1], "inner": {"kind": "a", "q": {}}, "name": "x"}') and m.is_accepting()
    m = compiled.matcher()
    assert not m.accept_text('{"inner": {"kind": 1')
    m = compiled.matcher()
    assert not m.accept_text('{"kind": "a", "kind"')  # a name written twice


def test_the_union_pickles_and_compares_by_its_words():
    a, b = none_of(["b", "a", "a"]), none_of(["a", "b"])
    assert a == b and hash(a) == hash(b) and a.words == ("a", "b")
    assert pickle.loads(pickle.dumps(a)) == a
    assert a != none_of(["a", "c"])
    assert none_of([""]).__class__ is not TrieLeft  # every non-empty string


def test_its_end_bytes_are_read_without_its_items(monkeypatch):
    """``end_bytes`` answers for the union from its body (the bytes its strings can end with are those
    of the body's characters): the same bytes the items give, without building them."""
    words = ["a", "ab", 'q"', "é"]
    node, items = none_of(words), Cofinite(none_of(words).items, none_of(words).body)
    expected = (last_bytes(items), may_be_empty(items))

    def refuse(*_):
        raise AssertionError("the items of a TrieLeft were built")

    monkeypatch.setattr(regex_ast, "_left", refuse)
    assert (last_bytes(node), may_be_empty(node)) == expected
    assert may_be_empty(none_of(["", "a"])) is False


@pytest.mark.parametrize("kids", [(), ("a",), ("_", "z"), ("é", "😀"), ('"',), ("\\", "a"), ("\n",)])
def test_a_first_other_character_is_every_encoded_one_but_the_kids(kids):
    """``other_than`` (its escapes one shared node, ``ESCAPES``, where all are in) is the expression of
    the plain encoding of the characters that are not ``kids``, every escape spelled whole (then any
    string)."""
    others = [c for c in range(0x110000) if chr(c) not in kids and not 0xD800 <= c <= 0xDFFF]
    raw = chars(_ranges(c for c in others if c >= 0x20 and c not in (0x22, 0x5C)))
    escapes = [literal(json.dumps(chr(c))[1:-1]) for c in others if c < 0x20 or c in (0x22, 0x5C)]
    plain = seq(alt(raw, *escapes), strings.ANY_STRING_BODY)
    for first, second in ((plain, strings.other_than(kids)), (strings.other_than(kids), plain)):
        pool = ExprPool()
        assert pool.intern(first) == pool.intern(second)


def _ranges(codes) -> list[tuple[int, int]]:
    """Sorted code points as inclusive ranges."""
    out: list[list[int]] = []
    for c in codes:
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return [(a, b) for a, b in out]
