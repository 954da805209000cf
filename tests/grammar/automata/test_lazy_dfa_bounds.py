"""The regular automaton's bounds on lazy work: the start state's emptiness check and the total of
an automaton's lazy steps end in a clear ``LimitError`` instead of running on."""

from __future__ import annotations

import time

import numpy as np
import pytest
from grammar_oracle import tiny_vocab

from guided.errors import LimitError
from guided.grammar import GrammarCompiler
from guided.grammar.automata import dfa_rows, lazy_dfa
from guided.grammar.automata import expr_core as core
from guided.grammar.regex_ast import any_char, any_string, complement, intersect, literal, repeat, seq


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


def _walk_until_limit(compiled, token: int, match: str, steps: int = 100_000) -> None:
    m = compiled.matcher()
    with pytest.raises(LimitError, match=match):
        for _ in range(steps):
            assert m.allowed_tokens()[token]
            assert m.accept_token(token)


@pytest.mark.parametrize("bound", ["states", "expressions", "configurations", "in total"])
def test_a_grammar_spent_at_mask_time_is_compiled_afresh(monkeypatch, bound):
    """A capacity bound hit while masks are computed (the automaton's states, the expression arena,
    the parser's configurations, the total lazy work) leaves that grammar unable to make any new
    state: the compiler cache drops it, so the next compile of the same constraint (the next request)
    starts afresh instead of failing at its first new state. A grammar that hit no bound stays cached."""
    vocab = tiny_vocab([b"a", b"aa", b"(", b")", b"x"], size=8)
    if bound == "in total":
        monkeypatch.setattr(lazy_dfa, "WORK_FACTOR", 0.05)
    compiler = GrammarCompiler(vocab, max_states=60 if bound in ("states", "configurations") else 500_000,
                               mask_timeout_s=1.0)  # fmt: skip
    if bound == "configurations":  # nesting: one more parser configuration per "("
        compile_ = lambda: compiler.compile_lark('start: "(" start ")" | "x"')  # noqa: E731
        token = 2
    else:
        compile_ = lambda: compiler.compile_ast(_new_state_per_byte())  # noqa: E731
        token = 0
    compiled = compile_()
    assert compile_() is compiled and not compiled.spent
    if bound == "expressions":  # room for a few more expressions only
        compiled.pool.arena[core.H_MAX] = compiled.pool.arena[core.H_N] + 8
    _walk_until_limit(compiled, token, bound)
    assert compiled.spent
    _walk_until_limit(compiled, token, bound)  # its matchers keep failing, at their first new state
    fresh = compile_()
    assert fresh is not compiled and not fresh.spent and compile_() is fresh
    m = fresh.matcher()
    for _ in range(5):  # new states again
        assert m.allowed_tokens()[token] and m.accept_token(token)


@pytest.mark.skipif(not core.HAS_CYCLES, reason="no cycle counter here: compiled walks get no deadline")
def test_a_mask_walk_round_carries_the_step_bound():
    """The compiled trie walk reads its deadline as a cycle count (``LazyDFA.native_rows``): the step
    bound ``mask_timeout_s`` from now, or the calling thread's earlier deadline; none without a bound.
    Its work counts toward the automaton's total."""
    vocab = tiny_vocab([b"a", b"aa"], size=4)

    def seconds_left(job) -> float:
        assert job.native
        return (job.deadline - core.cycles_now()) / core._rate[0]

    dfa = GrammarCompiler(vocab, mask_timeout_s=0.5).compile_ast(_new_state_per_byte()).dfa
    before = dfa.work_s
    with dfa.native_rows() as job:
        assert 0.3 < seconds_left(job) <= 0.5
        time.sleep(0.01)
    assert dfa.work_s - before >= 0.01
    with dfa.pool.bound.limit(0.05, "an outer step"), dfa.native_rows() as job:
        assert 0 < seconds_left(job) <= 0.05
    unbounded = GrammarCompiler(vocab, mask_timeout_s=None).compile_ast(_new_state_per_byte()).dfa
    with unbounded.native_rows() as job:
        assert job.native and job.deadline == -1


@pytest.mark.parametrize(
    ("node", "text"),
    [
        (seq(literal('"'), repeat(any_char(), 0, 40), literal('"')), '"caf\u00e9 au lait, s\'il vous pla\u00eet"'),
        # a lookahead-style intersection: its derivatives' liveness is searched (first budget, then Python)
        (intersect(repeat(any_char(), 1, 30), complement(seq(any_string(), literal("ab"), any_string()))),
         "xaxbxaaxbbxa"),
    ],
)
def test_accepting_where_no_mask_walked_builds_the_transitions_in_compiled_code(node, text, monkeypatch):
    """A token accepted from a state no mask walked (its mask came from another state) builds its
    transitions as a mask walk does (``dfa_rows.walk``), not one Python call per byte; the states are
    the expressions the derivatives give, and a transition compiled code cannot build (the search
    past its first budget) is built in Python and the walk goes on."""
    vocab = tiny_vocab([b"a"], size=4)
    data = text.encode()
    for native in (True, False):
        monkeypatch.setattr(lazy_dfa, "NATIVE_ROWS", native)
        dfa = GrammarCompiler(vocab, mask_timeout_s=5.0).compile_ast(node).dfa
        calls = []
        single = dfa._single
        monkeypatch.setattr(dfa, "_single", lambda s, c, calls=calls, single=single: calls.append(c) or single(s, c))
        end = dfa.walk(0, data)
        e = dfa.exprs[0]
        for b in data:
            e = dfa.pool.deriv(e, b)
        assert end >= 0 and dfa.exprs[end] == e and dfa.is_accepting(end)
        assert (len(calls) < len(data) / 2) if native else len(calls) == len(data), (native, len(calls))
        assert dfa.walk(0, data[:-1] + b"\xff") == lazy_dfa.DEAD


def test_the_compiled_accept_walk_is_compiled_once_whatever_the_argument_types():
    """``warm_up_core`` compiles ``dfa_rows.walk``; a state read from the transition table (a numpy
    int32) or bytes given as a bytearray must not make numba compile another version of it, which
    would happen inside a time bound (seconds, in one mask)."""
    lazy_dfa.warm_up_core()
    vocab = tiny_vocab([b"a"], size=4)
    for state, data in ((np.int32(0), b"abc"), (np.int64(0), bytearray(b"xyz")), (0, memoryview(b"q"))):
        dfa = GrammarCompiler(vocab).compile_ast(repeat(any_char(), 1, 50)).dfa
        assert dfa.walk(state, data) >= 0
    assert len(dfa_rows.walk.signatures) == 1, dfa_rows.walk.signatures
