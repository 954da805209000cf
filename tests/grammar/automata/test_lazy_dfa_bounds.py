"""The regular automaton's bounds on lazy work: the start state's emptiness check and the total of
an automaton's lazy steps end in a clear ``LimitError`` instead of running on."""

from __future__ import annotations

import time

import pytest
from grammar_oracle import tiny_vocab

from guided.errors import LimitError
from guided.grammar import GrammarCompiler
from guided.grammar.automata import lazy_dfa
from guided.grammar.regex_ast import any_char, intersect, literal, repeat


def _long_search_root():
    """Strings of a's whose length is a positive multiple of 2*3*5*7*11*13: deciding that one exists
    searches 30,030 states (the shortest has 30,030 bytes)."""
    a = literal("a")
    return intersect(repeat(a, 1, None), *(repeat(repeat(a, p, p)) for p in (2, 3, 5, 7, 11, 13)))


def _new_state_per_byte():
    """a* within at most 10^6 characters: the counter inside the intersection makes every byte a new
    state, so each mask along a long output derives new states."""
    return intersect(repeat(literal("a")), repeat(any_char(), 0, 1_000_000))


def test_start_state_emptiness_check_is_bounded():
    vocab = tiny_vocab([b"a"], size=4)
    t0 = time.monotonic()
    with pytest.raises(LimitError, match="matches any string.*mask_timeout_s"):
        GrammarCompiler(vocab, mask_timeout_s=0.05).compile_ast(_long_search_root())
    assert time.monotonic() - t0 < 5.0


def test_start_state_emptiness_check_unbounded_finishes():
    vocab = tiny_vocab([b"a"], size=4)
    compiled = GrammarCompiler(vocab, mask_timeout_s=None).compile_ast(_long_search_root())
    assert not compiled.dfa.is_accepting(0)


def test_total_lazy_work_is_bounded(monkeypatch):
    # a generous step bound (no single step comes near it) and a total of 0.08 s
    monkeypatch.setattr(lazy_dfa, "WORK_FACTOR", 0.08)
    vocab = tiny_vocab([b"a", b"aa", b"aaaa"], size=8)
    compiled = GrammarCompiler(vocab, mask_timeout_s=1.0).compile_ast(_new_state_per_byte())
    dfa = compiled.dfa
    m = compiled.matcher()
    t0 = time.monotonic()
    with pytest.raises(LimitError, match="in total"):
        for _ in range(200_000):  # 800,000 bytes: far more lazy work than 0.08 s
            assert m.allowed_tokens()[2]
            assert m.accept_token(2)
    assert dfa.work_s > dfa.max_work_s == pytest.approx(0.08)
    assert time.monotonic() - t0 < 10.0
    with pytest.raises(LimitError, match="in total"):  # every further lazy step fails the same way
        dfa.materialize(dfa.state_of(dfa.pool.deriv(dfa.exprs[dfa.n_states - 1], ord("a"))))


def test_total_lazy_work_unbounded_without_timeout():
    vocab = tiny_vocab([b"a", b"aa", b"aaaa"], size=8)
    compiled = GrammarCompiler(vocab, mask_timeout_s=None).compile_ast(_new_state_per_byte())
    m = compiled.matcher()
    for _ in range(500):
        assert m.accept_token(2)
    assert m.is_accepting() and compiled.dfa.max_work_s is None
