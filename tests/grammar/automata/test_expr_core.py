"""The compiled expression core under ``ExprPool`` (``expr_core``): one arena that grows as nodes are
added, interning that gives one id per expression across growth, pickles and forks, and a
derivative memo that outlives growth."""

from __future__ import annotations

import pickle

from guided.grammar.automata import expr_core as core
from guided.grammar.automata.expr_pool import ExprPool
from guided.grammar.regex_ast import alt, chars, intersect, literal, repeat, seq
from guided.grammar.safe_pickle import safe_loads


def _words(n: int) -> list:
    return [literal(f"w{i}x") for i in range(n)]


def _columns(pool: ExprPool, e: int) -> tuple:
    return (pool.kind[e], pool.args[e], pool.nullable[e], pool.has_bool[e], pool.first[e], pool.counter[e],
            pool.min_len[e])  # fmt: skip


def test_the_arena_grows_and_interning_keeps_one_id_per_expression():
    pool = ExprPool()
    start = len(pool.arena)
    ids = [pool.intern(w) for w in _words(3000)]  # far past the first arena's room
    assert len(pool.arena) > start
    n = len(pool)
    fresh = ExprPool()
    assert [fresh.intern(w) for w in _words(3000)] == ids  # the same order gives the same ids
    assert [pool.cat(pool.args[e][0], pool.args[e][1]) for e in ids] == ids  # rebuilt, not added
    assert len(pool) == n
    assert len(set(ids)) == len(ids)


def test_derivatives_are_memoised_across_growth():
    pool = ExprPool()
    e = pool.intern(alt(*_words(200)))
    d = pool.deriv(e, ord("w"))
    work = pool._work
    for w in _words(3000):  # grow the arena many times over
        pool.intern(w)
    assert pool.deriv(e, ord("w")) == d
    assert pool._work == work  # answered from the memo, not derived again


def test_a_pool_pickles_and_forks_with_the_same_ids_and_memos():
    pool = ExprPool()
    node = seq(alt(*_words(20)), intersect(repeat(chars([(0x61, 0x7A)]), 1, 5), repeat(literal("ab"))))
    e = pool.intern(node)
    d = pool.deriv(e, ord("w"))
    assert pool.is_live(e)
    for copy in (safe_loads(pickle.dumps(pool)), pool.fork()):
        assert len(copy) == len(pool)
        assert all(_columns(copy, x) == _columns(pool, x) for x in range(len(pool)))
        work = copy._work
        assert copy.deriv(e, ord("w")) == d and copy._work == work
        assert copy.emptiness.memo.get(e) is True  # the emptiness memo lives in the arena too
        assert copy.intern(node) == e


def test_a_pickled_pool_is_independent_of_its_source():
    pool = ExprPool()
    e = pool.intern(alt(*_words(5)))
    copy = safe_loads(pickle.dumps(pool))
    x = copy.intern(literal("only in the copy"))
    assert len(copy) > len(pool)
    assert pool.intern(literal("only in the copy")) == x  # the same next id, added on its own
    assert copy.args[e] == pool.args[e] and copy.kind[e] == pool.kind[e] == core.K_CAT  # w(0x|1x|...)
