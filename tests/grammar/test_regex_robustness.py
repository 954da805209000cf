"""Robustness of the regex core on big inputs: long concatenations and deep nesting never raise a bare
RecursionError, and AST hashing/equality stay linear on DAG-shaped (heavily shared) ASTs."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time

import pytest
from grammar_oracle import tiny_vocab

from guided.errors import GrammarError, LimitError
from guided.grammar import GrammarCompiler, regex_ast
from guided.grammar.automata.expr_pool import EPS_ID, ExprPool
from guided.grammar.regex_ast import EMPTY, EPSILON, Alt, Chars, Repeat, Seq, alt, literal, repeat, seq

TOKENS = [b"a", b"b", b"c", b"ab", b"abc", b"x", b"y"]
VOCAB = tiny_vocab(TOKENS, size=16)
WORDS = ["ab", "abc", "c", "b", "a"]


def compile_node(node):
    return GrammarCompiler(VOCAB).compile_ast(node)


def accepts(compiled, text: str) -> bool:
    m = compiled.matcher()
    return bool(m.accept_text(text)) and m.is_accepting()


# ---------------------------------------------------------------------------------- long concatenations


def test_long_seq_of_literals_compiles_and_matches():
    words = [WORDS[i % len(WORDS)] for i in range(20_000)]
    text = "".join(words)
    compiled = compile_node(seq(*(literal(w) for w in words)))
    assert accepts(compiled, text)
    assert not accepts(compiled, text[:-1])
    assert not accepts(compiled, text + "a")
    assert not accepts(compiled, "b" + text[1:])


def test_long_seq_of_literal_nodes_is_not_flattened_away():
    # Seq items that are themselves (short) Seq nodes, as the JSON compiler builds them.
    words = [WORDS[i % len(WORDS)] for i in range(20_000)]
    node = Seq(tuple(literal(w) for w in words))
    compiled = compile_node(node)
    assert accepts(compiled, "".join(words))


def test_cat_of_long_chains_matches_recursive_definition():
    pool = ExprPool()
    letters = [pool.intern(literal(c)) for c in "abcxy"]
    left = pool.cat_all(letters[i % 5] for i in range(30_000))  # a long right-nested chain
    right = pool.cat_all(letters[i % 3] for i in range(10))
    both = pool.cat(left, right)
    assert both == pool.cat_all([letters[i % 5] for i in range(30_000)] + [letters[i % 3] for i in range(10)])
    assert pool.cat(left, EPS_ID) == left and pool.cat(EPS_ID, left) == left
    # (x y) z == x (y z) on small pieces, and the chain stays right-nested
    a, b, c = letters[:3]
    assert pool.cat(pool.cat(a, b), c) == pool.cat(a, pool.cat(b, c))


def test_long_chain_of_optional_items():
    # Derivatives follow a chain of nullable heads (objects with many optional properties); the
    # chain is longer than the recursion limit would allow with one frame per link.
    n = 1_200
    node = seq(*(repeat(literal("ab"), 0, 1) for _ in range(n)), literal("c"))
    compiled = compile_node(node)
    assert accepts(compiled, "c")
    assert accepts(compiled, "ab" * 17 + "c")
    assert not accepts(compiled, "ab" * 17 + "a")
    small = seq(*(repeat(literal("ab"), 0, 1) for _ in range(3)), literal("c"))
    assert accepts(compile_node(small), "ababc") and not accepts(compile_node(small), "abababababc")


def test_long_chain_with_big_counter_clamps():
    # Mask computation clamps counters over the whole (long) chain.
    node = seq(*(literal(WORDS[i % 5]) for i in range(10_000)), repeat(literal("x"), 0, 100_000))
    compiled = compile_node(node)
    text = "".join(WORDS[i % 5] for i in range(10_000))
    m = compiled.matcher()
    assert m.accept_text(text) and m.is_accepting()
    m.allowed_tokens()
    assert m.accept_text("x" * 50) and m.is_accepting()
    m.allowed_tokens()


# ---------------------------------------------------------------------------------- deep nesting


def _nested_alt_repeat(depth: int):
    x = literal("a")
    for _ in range(depth):
        x = Alt((Seq((literal("b"), Repeat(x, 0, 2))), literal("c")))
    return x


def _nested_repeat(depth: int):
    x = literal("a")
    for _ in range(depth):
        x = Repeat(Seq((x, literal("b"))), 0, 2)
    return x


def _nested_seq(depth: int):
    x = literal("a")
    for _ in range(depth):
        x = Seq((literal("b"), Alt((x, literal("c")))))
    return x


@pytest.mark.parametrize("build", [_nested_alt_repeat, _nested_repeat, _nested_seq])
def test_deep_nesting_works_or_raises_a_clear_limit(build):
    node = build(5_000)
    hash(node)
    assert node == build(5_000)
    try:
        compiled = compile_node(node)
        m = compiled.matcher()
        m.accept_text("b" * 20)
        m.allowed_tokens()
        m.is_accepting()
    except (LimitError, GrammarError) as e:  # a clear error naming the limit, never a RecursionError
        assert not isinstance(e, RecursionError)
        assert "limit" in str(e) or "exceeded" in str(e)


def test_deep_nesting_interns_without_recursion():
    pool = ExprPool()
    for build in (_nested_alt_repeat, _nested_repeat, _nested_seq):
        pool.intern(build(5_000))


def test_deep_nested_alternation_matches():
    compiled = compile_node(_nested_alt_repeat(3_000))
    assert accepts(compiled, "c")
    assert accepts(compiled, "bc")
    assert accepts(compiled, "b")
    assert not accepts(compiled, "a")


# ---------------------------------------------------------------------------------- hashing


def _dag(n: int):
    x = literal("xy")
    for _ in range(n):
        x = Alt((x, x))
    return x


def test_dag_hash_and_equality_are_fast():
    t = time.perf_counter()
    a, b = _dag(60), _dag(60)
    assert hash(a) == hash(b)
    assert a == b and not a != b
    assert a != _dag(59)
    assert len({a: 1, b: 2}) == 1
    y = literal("q")
    for _ in range(60):
        y = alt(seq(y, literal("r")), seq(literal("s"), y))
    hash(y)
    assert y == y and {y: 1}[y] == 1
    assert time.perf_counter() - t < 1.0


def test_equal_pairs_are_remembered_only_when_equal():
    """A walk that ends equal remembers its pairs of distinct subtrees (``regex_ast._SAME``: later
    walks stop at them); one that ends unequal remembers nothing, so asking again gives the same
    answer; ``forget_equal_pairs`` drops them (a compile's end does: what they keep alive goes)."""
    regex_ast.forget_equal_pairs()
    a, b = _dag(12), _dag(12)
    c = Alt((_dag(11), Alt((_dag(10), literal("xz")))))  # equal to a but for one leaf, deep on the right
    assert a == b and len(regex_ast._SAME) >= 12
    assert a != c and a != c and b != c
    # equal hashes, unequal nodes (CPython hashes -1 as -2): the walk goes down before it finds out
    d, e = Seq((Chars(((-1, -1),)), literal("x"))), Seq((Chars(((-2, -2),)), literal("x")))
    assert hash(d) == hash(e) and d != e and d != e
    assert all(x == y for x, y in regex_ast._SAME.values())
    regex_ast.forget_equal_pairs()
    assert not regex_ast._SAME and a == b


def test_dag_compiles():
    y = literal("q")
    for _ in range(30):
        y = alt(seq(y, literal("r")), y)
    compiled = compile_node(y)
    assert accepts(compiled, "q") and accepts(compiled, "qrrr")


def test_equality_semantics():
    assert literal("abc") == literal("abc") and hash(literal("abc")) == hash(literal("abc"))
    assert literal("abc") != literal("abd")
    assert Seq(()) != Alt(()) and EMPTY == Alt(()) and EPSILON == Seq(())
    assert Repeat(literal("a"), 0, 1) != Repeat(literal("a"), 0, 2)
    assert Repeat(literal("a"), 0, None) != Repeat(literal("a"), 0, 3)
    assert Chars(((1, 2),)) != Chars(((1, 3),))
    assert Seq((literal("ab"),)) != Alt((literal("ab"),))
    assert (Chars(((1, 2),)) == "x") is False


def test_pickle_recomputes_hash():
    node = alt(seq(literal("ab"), repeat(literal("c"), 2, None)), literal("d"))
    back = pickle.loads(pickle.dumps(node))
    assert back == node and hash(back) == hash(node)
    assert "_hash" not in repr(pickle.dumps(node))
    # pickled in another process (different string hash randomization): the hash is recomputed here
    code = (
        "import pickle, sys\n"
        "from guided.grammar.regex_ast import alt, literal, repeat, seq\n"
        "node = alt(seq(literal('ab'), repeat(literal('c'), 2, None)), literal('d'))\n"
        "sys.stdout.buffer.write(pickle.dumps(node))\n"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")
    data = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True).stdout
    other = pickle.loads(data)
    assert other == node and hash(other) == hash(node)
    assert {node: 1}[other] == 1


def test_compiled_grammar_pickle_keeps_behaviour():
    compiled = compile_node(seq(*(literal(WORDS[i % 5]) for i in range(2_000))))
    back = pickle.loads(pickle.dumps(compiled))
    text = "".join(WORDS[i % 5] for i in range(2_000))
    assert accepts(back, text) and not accepts(back, text + "c")
