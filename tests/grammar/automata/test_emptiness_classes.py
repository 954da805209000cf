"""Emptiness costs: searches derive one byte per derivative class (``DerivClasses``), not one per
global byte class, and a concatenation's shared rest is decided once; answers stay those of a plain
search of the whole derivative automaton."""

from __future__ import annotations

import pytest
from grammar_oracle import BOOL_REGEX, live_by_whole_search
from hypothesis import given, settings
from hypothesis import strategies as st

from guided.grammar.automata.expr_pool import ExprPool
from guided.grammar.regex_ast import alt, any_char, chars, intersect, literal, repeat, seq


def _pool_with_global_classes(node):
    pool = ExprPool()
    e = pool.intern(node)
    pool.reps = pool.byte_classes(e)[1]  # as LazyDFA sets them
    return pool, e


@settings(max_examples=300, deadline=None)
@given(node=BOOL_REGEX, walk=st.lists(st.sampled_from(b"ab\xc3c"), max_size=4))
def test_emptiness_with_global_classes_matches_whole_search(node, walk):
    pool, e = _pool_with_global_classes(node)
    ref = ExprPool()
    r = ref.intern(node)
    assert pool.is_live(e) == live_by_whole_search(ref, r)
    for b in walk:
        e, r = pool.deriv(e, b), ref.deriv(r, b)
        assert pool.is_live(e) == live_by_whole_search(ref, r)


def test_search_derives_once_per_derivative_class():
    # keys that split a-z into many global classes, then an empty intersection: a word ending in "!"
    # within letters only. Proving it empty derives every state's every class: 65 derivatives by
    # derivative class, about 1,400 by global class.
    keys = alt(*(literal(w) for w in ("abc", "efg", "ijk", "mno", "qrs", "uvw", "xyz")))
    word = seq(repeat(chars([(0x61, 0x7A)]), 1, None), literal("!"))
    letters = repeat(chars([(0x61, 0x7A)]), 0, 30)
    pool, _ = _pool_with_global_classes(seq(keys, intersect(word, letters)))
    assert len(pool.reps) > 20
    w = pool.and_([pool.intern(word), pool.intern(letters)])
    before = pool._work
    assert not pool.is_live(w)
    assert pool._work - before < 200


# --- concatenations: the shared rest is decided once -------------------------------------------
def _document(n: int, empty_at: int | None = None):
    """A word within 50 characters, then n members, each a bounded word (one of them empty when
    empty_at is set: a word of letters that must end in a digit)."""
    letters = repeat(chars([(0x61, 0x7A)]), 1, None)
    members = []
    for i in range(n):
        value = seq(letters, chars([(0x30, 0x39)])) if i == empty_at else letters
        members.append(seq(literal(f",k{i}:"), intersect(value, repeat(chars([(0x61, 0x7A)]), 0, 9))))
    return seq(intersect(letters, repeat(any_char(), 0, 50)), *members)


@pytest.mark.parametrize("empty_at", [None, 0, 29])
def test_concatenation_liveness_matches_whole_search(empty_at):
    pool, ref = ExprPool(), ExprPool()
    e, r = pool.intern(_document(30, empty_at)), ref.intern(_document(30, empty_at))
    for _ in range(5):
        assert pool.is_live(e) == live_by_whole_search(ref, r) == (empty_at is None)
        e, r = pool.deriv(e, ord("a")), ref.deriv(r, ord("a"))


@pytest.mark.parametrize("empty_at", [None, 150])
def test_concatenation_rest_is_memoised(empty_at):
    pool = ExprPool()
    e = pool.intern(_document(300, empty_at))
    rest = pool.args[e][1]  # everything after the first word: shared by every state inside the word
    assert pool.is_live(e) == (empty_at is None)
    assert pool.emptiness.memo[rest] == (empty_at is None)
    for _ in range(40):  # each state's check stops at the memoised rest
        e = pool.deriv(e, ord("a"))
        assert pool.is_live(e) == (empty_at is None)
