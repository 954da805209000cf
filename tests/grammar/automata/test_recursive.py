"""``regex_ast.Recursive``: a language defined in terms of itself, derived by the regular engine
(``K_REC`` in the expression core). Membership against a direct recognizer of nested brackets, at
any depth; the leaf's checks; pickling as its definition."""

from __future__ import annotations

import itertools
import pickle
import random

import pytest

from guided.errors import GrammarError
from guided.grammar.automata.expr_pool import ExprPool
from guided.grammar.automata.lazy_dfa import LazyDFA
from guided.grammar.regex_ast import Chars, Let, Recursive, alt, literal, optional, recursive, repeat, seq

MARK = Chars(((0x40, 0x40),))  # "@": the template's stand-in for the language itself
# V = n | [ (V (, V)*)? ]
TEMPLATE = alt(literal("n"), seq(literal("["), optional(seq(MARK, repeat(seq(literal(","), MARK)))), literal("]")))
FIRST = (1 << ord("n")) | (1 << ord("["))


def _value(text: str, i: int = 0) -> int:
    """The end of the value at text[i:], or -1 (a direct recognizer of V)."""
    if text.startswith("n", i):
        return i + 1
    if not text.startswith("[", i):
        return -1
    i += 1
    if text.startswith("]", i):
        return i + 1
    while True:
        i = _value(text, i)
        if i < 0:
            return -1
        if text.startswith("]", i):
            return i + 1
        if not text.startswith(",", i):
            return -1
        i += 1


def _in_language(text: str) -> bool:
    return text.startswith("<") and text.endswith(">") and _value(text, 1) == len(text) - 1


def test_membership_is_exact_at_any_depth():
    leaf = recursive(TEMPLATE, MARK, FIRST, 1)
    pool = ExprPool()
    dfa = LazyDFA(pool, pool.intern(seq(literal("<"), leaf, literal(">"))))
    texts = {"<" + "".join(t) + ">" for k in range(7) for t in itertools.product("n[],", repeat=k)}
    rng = random.Random(3)
    for depth in (10, 40):  # deep nesting, valid and cut short
        deep = "[" * depth + "n" + "]" * depth
        texts |= {f"<{deep}>", f"<{deep[:-1]}>", f"<[{deep},{deep}]>"}
    texts |= {"<" + "".join(rng.choice("n[],") for _ in range(12)) + ">" for _ in range(300)}
    for text in texts:
        s = dfa.walk(0, text.encode())
        assert (s >= 0 and bool(dfa.accepting[s])) == _in_language(text), text
    assert sum(map(_in_language, texts)) >= 10  # (valid texts among them, deep ones included)


def test_one_leaf_per_definition_and_its_body_refers_to_it():
    a, b = recursive(TEMPLATE, MARK, FIRST, 1), recursive(TEMPLATE, MARK, FIRST, 1)
    assert a == b and a.body != TEMPLATE
    other = recursive(alt(literal("m"), seq(literal("("), MARK, literal(")"))), MARK, (1 << ord("m")) | (1 << ord("(")), 1)
    assert other != a


def test_a_leaf_whose_first_bytes_or_length_are_wrong_is_refused():
    wrong = recursive(alt(literal("q"), seq(literal("{"), MARK, literal("}"))), MARK, 1 << ord("q"), 1)
    with pytest.raises(GrammarError, match="first bytes or length"):
        ExprPool().intern(wrong)
    short = recursive(alt(literal("qq"), seq(literal("{"), MARK, literal("}"))), MARK, (1 << ord("q")) | (1 << ord("{")), 1)
    with pytest.raises(GrammarError, match="first bytes or length"):
        ExprPool().intern(short)


def test_it_pickles_as_its_definition():
    leaf = recursive(TEMPLATE, MARK, FIRST, 1)
    back = pickle.loads(pickle.dumps(seq(literal("<"), leaf)))
    assert back == seq(literal("<"), leaf) and isinstance(back.items[-1], Recursive)
    assert pickle.loads(pickle.dumps(leaf)).body == leaf.body


def test_a_let_binds_its_placeholders_where_interning_meets_them():
    from guided.schema.recursion import Hole  # a placeholder class (the schema compiler's nonterminal)

    leaf = recursive(TEMPLATE, MARK, FIRST, 1)
    slot = Hole("v")

    def shape(x):
        return seq(literal("<"), x, repeat(seq(literal(";"), alt(x, literal("z"))), 0, 3), literal(">"))

    pool = ExprPool()
    e = pool.intern(Let(shape(slot), (slot,), (leaf,)))
    n = len(pool)
    assert pool.intern(shape(leaf)) == e and len(pool) == n  # the expression of the leaf put in place
    dfa = LazyDFA(pool, e)
    for text, ok in (("<[n,[]];z;n>", True), ("<n;[n];[[]]>", True), ("<n;q>", False), ("<[n>", False)):
        s = dfa.walk(0, text.encode())
        assert (s >= 0 and bool(dfa.accepting[s])) == ok, text
    bound = Let(shape(slot), (slot,), (leaf,))
    assert pickle.loads(pickle.dumps(bound)) == bound
    with pytest.raises(GrammarError, match="stands for two"):  # one pool, one meaning
        pool.intern(Let(shape(slot), (slot,), (literal("q"),)))
    with pytest.raises(GrammarError, match="not a regex AST node"):
        ExprPool().intern(shape(slot))  # unbound
    with pytest.raises(GrammarError, match="not a regex AST node"):
        ExprPool().intern(seq(literal("a"), bound))  # a Let is a root only
