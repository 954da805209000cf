"""Structural emptiness (``ExprPool.is_live``) against a plain search of the whole derivative
automaton, and the time bound on lazy mask work."""

from __future__ import annotations

import time

import pytest
from grammar_oracle import BOOL_REGEX, live_by_whole_search, tiny_vocab
from hypothesis import given, settings
from hypothesis import strategies as st

from guided.errors import LimitError
from guided.grammar import GrammarCompiler
from guided.grammar.automata import emptiness
from guided.grammar.automata.derivative_classes import DerivClasses
from guided.grammar.automata.expr_pool import EMPTY_ID, ExprPool
from guided.grammar.regex_ast import (
    alt,
    chars,
    complement,
    intersect,
    literal,
    repeat,
    seq,
)


@settings(max_examples=300, deadline=None)
@given(node=BOOL_REGEX, walk=st.lists(st.sampled_from(b"ab\xc3c"), max_size=4))
def test_structural_emptiness_matches_whole_search(node, walk):
    pool, ref = ExprPool(), ExprPool()
    e, r = pool.intern(node), ref.intern(node)
    assert pool.is_live(e) == live_by_whole_search(ref, r)
    for b in walk:  # derivatives too: they reuse memoised sub-results
        e, r = pool.deriv(e, b), ref.deriv(r, b)
        assert pool.is_live(e) == live_by_whole_search(ref, r)


@pytest.mark.parametrize("empty", [False, True])
def test_emptiness_does_not_search_the_context(empty):
    # an intersection after a large context: only the intersection's own automaton is searched
    context = seq(*(alt(literal(f"key{i}"), repeat(chars([(0x30, 0x39)]), 1, 40)) for i in range(30)))
    tail = intersect(repeat(literal("a")), complement(literal("aaa")))
    if empty:
        tail = intersect(literal("ab"), complement(seq(chars([(0x61, 0x62)]), literal("b"))))
    pool = ExprPool()
    e = pool.intern(seq(context, tail, context))
    assert pool.is_live(e, budget=50) is not empty  # a search of the whole expression needs far more
    ref = ExprPool()
    with pytest.raises(LimitError):
        _bounded_whole_search(ref, ref.intern(seq(context, tail, context)), budget=50)


def _bounded_whole_search(pool: ExprPool, e: int, budget: int) -> bool:
    reps = pool.classes_of(e)[1]
    seen, frontier = {e}, [e]
    while frontier:
        nxt = []
        for x in frontier:
            for b in reps:
                y = pool.deriv(x, b)
                if y != EMPTY_ID and y not in seen:
                    seen.add(y)
                    if len(seen) > budget:
                        raise LimitError("budget")
                    nxt.append(y)
        frontier = nxt
    return False


def test_complement_of_non_universal_is_live_without_search():
    pool = ExprPool()
    e = pool.intern(complement(repeat(chars([(0x61, 0x7A)]), 0, 100000)))
    assert pool.is_live(e, budget=1)


# --- the mask time bound ----------------------------------------------------------------------
def _needs_long_search(primes=(2, 3, 5, 7, 11, 13)):
    """'x' then a string of a's whose length is a positive multiple of 2*3*5*7*11*13 (the shortest has
    30,030 bytes: deciding that it exists searches 30,030 states), or simply 'y'."""
    a = literal("a")
    counts = [repeat(repeat(a, p, p)) for p in primes]
    return alt(seq(literal("x"), intersect(repeat(a, 1, None), *counts)), literal("y"))


def test_slow_first_mask_raises_limit_error_within_bound():
    vocab = tiny_vocab([b"x", b"y", b"a", b"xa"], size=8)
    # a multiple of 510,510 too: the search takes ~90 ms up to 13, and the second try below, resuming
    # from the first's memo, could end within the 50 ms bound on a quiet machine
    compiled = GrammarCompiler(vocab).compile_ast(_needs_long_search((2, 3, 5, 7, 11, 13, 17)))  # compiling stays cheap
    compiled.mask_timeout_s = compiled.dfa.timeout_s = 0.05
    m = compiled.matcher()
    t0 = time.monotonic()
    with pytest.raises(LimitError, match="mask_timeout_s"):
        m.allowed_tokens()
    assert time.monotonic() - t0 < 2.0
    with pytest.raises(LimitError, match="mask_timeout_s"):  # the state was left consistent: same answer
        m.allowed_tokens()


def test_slow_accept_raises_limit_error():
    vocab = tiny_vocab([b"x", b"y", b"a", b"xa"], size=8)
    compiled = GrammarCompiler(vocab, mask_timeout_s=0.05).compile_ast(_needs_long_search())
    m = compiled.matcher()
    with pytest.raises(LimitError, match="mask_timeout_s"):
        m.accept_token(3)  # "xa": its transition decides the intersection's emptiness
    assert m.num_accepted == 0


def test_unbounded_work_finishes():
    vocab = tiny_vocab([b"x", b"y", b"a", b"xa"], size=8)
    compiled = GrammarCompiler(vocab, mask_timeout_s=None).compile_ast(_needs_long_search())
    m = compiled.matcher()
    assert m.accept_token(0)  # "x": a live state (a 30,030-byte string completes it)


# --- derivative classes ---------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(node=BOOL_REGEX, walk=st.lists(st.sampled_from(b"ab\xc3c"), max_size=3))
def test_bytes_of_one_derivative_class_share_the_derivative(node, walk):
    pool = ExprPool()
    e = pool.intern(node)
    for b in walk:
        e = pool.deriv(e, b)
    groups = DerivClasses(pool).partition(e, (1 << 256) - 1)
    seen = 0
    for g in groups:
        assert g and not g & seen  # disjoint, non-empty
        seen |= g
        members = [b for b in range(256) if (g >> b) & 1]
        assert len({pool.deriv(e, b) for b in members}) == 1
    assert seen == (1 << 256) - 1


def test_head_sets_of_a_dag_are_found_once_per_node():
    """Derivative classes read the head byte sets of an expression; a oneOf's branches intersected
    with each other's complements share their parts, and a walk of every path through the shared
    parts took 4 s at depth 26 here, doubling at each level (the emptiness searches of a schema's
    oneOf of open objects spent 90% of their time there). Each node is now walked once: at depth 28,
    microseconds (the walk runs in compiled code, which no test timeout can interrupt, hence the
    depth: the old walk fails here in about half a minute rather than hanging)."""
    pool = ExprPool()
    x = pool.or_([pool.intern(literal(w)) for w in ("k", "m", "z")])
    a, b = pool.intern(literal("a")), pool.intern(literal("b"))
    for _ in range(28):  # 2**28 paths to the heads
        x = pool.or_([pool.cat(x, a), pool.cat(x, b)])
    t0 = time.perf_counter()
    groups = DerivClasses(pool).partition(x, (1 << 256) - 1)
    assert time.perf_counter() - t0 < 2.0
    assert sum(1 << ord(c) for c in "kmz") in groups  # the one head set (the three first letters)
    for g in groups:
        assert len({pool.deriv(x, b) for b in range(256) if (g >> b) & 1}) == 1
    assert pool.is_live(pool.deriv(x, ord("m"))) and not pool.is_live(pool.deriv(x, ord("q")))


def test_complementary_intersection_is_empty_syntactically():
    pool = ExprPool()
    x, y = pool.intern(literal("ab")), pool.intern(literal("cd"))
    assert pool.and_([x, pool.not_(pool.or_([x, y]))]) == EMPTY_ID
    assert pool.and_([x, pool.not_(y)]) != EMPTY_ID


@settings(max_examples=150, deadline=None)
@given(node=BOOL_REGEX, walk=st.lists(st.sampled_from(b"ab\xc3c"), max_size=3))
def test_the_second_search_order_is_exact_too(node, walk):
    """With no room for the first (min_len) try, every search runs in the second order (the parts'
    bounds summed plus the depth): the answers stay those of the whole search."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(emptiness, "FIRST_TRY", 0)
        pool, ref = ExprPool(), ExprPool()
        e, r = pool.intern(node), ref.intern(node)
        assert pool.is_live(e) == live_by_whole_search(ref, r)
        for b in walk:
            e, r = pool.deriv(e, b), ref.deriv(r, b)
            assert pool.is_live(e) == live_by_whole_search(ref, r)


def test_a_search_grows_the_arena_and_goes_on_without_starting_again(monkeypatch):
    """An empty intersection whose search visits hundreds of states, each making new expressions, in
    a new (small) arena: the search grows the arena where it stands, in one compiled call, instead of
    returning FULL and walking every state again; the answer stays the whole search's."""
    ab = chars([(0x61, 0x62)])
    ninth_from_end = [seq(repeat(ab), literal(c), repeat(ab, 8, 8)) for c in "ab"]
    node = intersect(*ninth_from_end)  # the ninth byte from the end both "a" and "b": empty
    calls = []
    real = emptiness.core.search

    def counted(*args):
        calls.append(args[1])
        return real(*args)

    monkeypatch.setattr(emptiness.core, "search", counted)
    pool, ref = ExprPool(), ExprPool()
    e = pool.intern(node)
    start = len(pool.arena)
    assert pool.is_live(e) is False
    assert live_by_whole_search(ref, ref.intern(node)) is False
    assert len(pool.arena) > start  # it grew during the search
    assert calls == [e]  # one call: no restart


def test_the_guide_that_answered_the_last_search_goes_first(monkeypatch):
    """A pool's searches share their shape (a lexeme's derivatives, one oneOf's exclusions): once the
    min_len guide runs out of its first budget and the parts' guide answers, the next search starts
    with the parts' guide (the min_len try had cost ~2,000 states each time: 55-140 ms masks on
    SchemaStore's tye schema), and back again when min_len answers where the parts' guide ran out."""
    calls = []
    answers = {False: emptiness.core.BUDGET, True: 1}

    def fake(arena, e, budget, *rest):
        by_parts = rest[-1]
        calls.append((by_parts, budget == emptiness.FIRST_TRY))
        return (answers[by_parts] if budget == emptiness.FIRST_TRY else 1), arena

    monkeypatch.setattr(emptiness.core, "search", fake)
    pool = ExprPool()
    searcher = emptiness.Emptiness(pool)
    assert searcher._search(1) is True
    assert calls == [(False, True), (True, False)]  # min_len ran out, the parts' guide answered
    del calls[:]
    assert searcher._search(1) is True
    assert calls == [(True, True)]  # the parts' guide first, within the first budget
    del calls[:]
    answers = {False: 1, True: emptiness.core.BUDGET}
    assert searcher._search(1) is True and searcher._search(1) is True
    assert calls == [(True, True), (False, True), (False, True)]  # back to min_len first
