"""dfa_rows: many rows of a LazyDFA in one compiled call.

A vocabulary trie walk over a pattern under a length bound (``pattern`` with ``maxLength: 300``)
meets thousands of new states per mask; built one at a time, each row cost ~25 us of Python around
~5 us of compiled derivatives (a lock, a time bound, a dict of states, a liveness call per new
state). ``rows`` builds a list of rows at once: per row, the derivatives by byte class
(``expr_core.deriv_classes``), their liveness (with the emptiness searches an intersection needs),
each new live derivative made a state (the expression -> state column), dead ones the DEAD
transition. It stops and says why where compiled code cannot go on: the state arrays must grow, a
search outgrows its first budget (the caller builds that row in Python, which searches on), the
state bound or the deadline is reached.

Walks build transitions, not rows: ``single`` builds one (what a mask's trie walk takes at a node,
``token_trie._walk_batch``), ``walk`` those along a token's bytes (``LazyDFA.walk``). A row makes a
state of every live derivative of its state, where a walk follows one byte; rows are for
``LazyDFA.materialize_many`` (a walk that could build nothing, another thread holding the automaton).
"""

from __future__ import annotations

import numba
import numpy as np

from guided.grammar.automata import expr_core as core

__all__ = ["rows", "single", "walk", "DONE", "GROW_STATES", "GROW_COLUMN", "NEEDS_SEARCH", "TOO_MANY_STATES", "TIMEOUT",
           "UNSEEN", "DEAD", "UNKNOWN"]  # fmt: skip

DEAD = -1  # the state column's value of a dead expression (the DEAD transition)
UNKNOWN = -2  # a transition not computed yet (rows may be partly filled by single steps)
UNSEEN = -3  # the state column's value of an expression no row has met yet
# rows() statuses beside the arena's (core.FULL, core.LIMIT, core.DEEP)
DONE, GROW_STATES, GROW_COLUMN, NEEDS_SEARCH, TOO_MANY_STATES, TIMEOUT = 0, -10, -11, -12, -13, -14


@numba.njit(cache=True, nogil=True)
def _live(a, d, reps, max_heads, search_budget, deadline):
    """(1 / 0: whether d is live, or a status: NEEDS_SEARCH, TIMEOUT, an arena status; the arena).
    The structural rules, and the emptiness searches they rest on (Emptiness._search's first try,
    ``search_budget`` states, memoised in the arena like it); a search past its budget is left to
    the caller's Python, which tries again with the full budget and reports."""
    while True:
        v = core.live(a, d)
        if v >= 0:
            return v, a
        x = core.SEARCH - v
        r, a = core.search(a, x, search_budget, reps, True, max_heads, deadline, False)
        if r == core.TIMEOUT:
            return TIMEOUT, a
        if r < 0:
            return NEEDS_SEARCH if r == core.BUDGET else r, a
        a[a[core.O_LIVE] + core.NW * x] = core.LIVE_YES if r == 1 else core.LIVE_NO


@numba.njit(cache=True, nogil=True)
def _live_grown(a, d, reps, max_heads, search_budget, deadline):
    """``_live``, the arena grown (and the search made again) while it is full."""
    v, a = _live(a, d, reps, max_heads, search_budget, deadline)
    while v == core.FULL:
        a = core._grow(a)
        v, a = _live(a, d, reps, max_heads, search_budget, deadline)
    return v, a


@numba.njit(cache=True, nogil=True)
def rows(a, todo, reps, class_of, max_heads, column, exprs, trans, computed, accepting, counts, deadline,
         search_budget):  # fmt: skip
    """Build the rows of the states ``todo`` (skipping computed ones) in order.

    ``column``: expression -> state (UNSEEN, DEAD or a state); ``exprs``, ``trans``, ``computed``,
    ``accepting``: the DFA's arrays (capacity at least its states); ``counts``: [rows done (where to
    resume), states so far, the state bound]; both updated. Returns (DONE, or why it stopped at row
    ``counts[0]``, not built: an arena status other than FULL, GROW_STATES (the arrays are full),
    GROW_COLUMN (an expression past the column), NEEDS_SEARCH (a derivative's liveness needs a
    search larger than ``search_budget``), TOO_MANY_STATES, TIMEOUT (``deadline`` cycles passed, -1:
    none); the arena, grown here when it was full: the caller keeps the one returned)."""
    n_classes = trans.shape[1]
    groups = np.empty((256, 4), np.int64)
    uniq = np.empty(257, np.int64)
    index = np.empty(n_classes, np.int64)
    target = np.empty(257, np.int32)
    for j in range(counts[0], len(todo)):
        counts[0] = j
        s = todo[j]
        if computed[s]:
            continue
        if deadline >= 0 and core.cycles_now() > deadline:
            return TIMEOUT, a
        k = core.deriv_classes(a, exprs[s], reps, class_of, max_heads, groups, uniq, index)
        while k == core.FULL:
            a = core._grow(a)
            k = core.deriv_classes(a, exprs[s], reps, class_of, max_heads, groups, uniq, index)
        if k < 0:
            return k, a
        new = 0
        for t in range(1, k):  # liveness first: nothing is committed for a row that must stop
            d = uniq[t]
            if d >= len(column):
                return GROW_COLUMN, a
            if column[d] == UNSEEN:
                v, a = _live_grown(a, d, reps, max_heads, search_budget, deadline)
                if v < 0:
                    return v, a
                new += v
        n = counts[1]
        if n + new > counts[2]:
            return TOO_MANY_STATES, a
        if n + new > len(computed):
            return GROW_STATES, a
        target[0] = DEAD
        for t in range(1, k):
            d = uniq[t]
            st = column[d]
            if st == UNSEEN:
                if core.live(a, d) == 1:  # decided and memoised by the pass above
                    st = n
                    exprs[n] = d
                    accepting[n] = 1 if core._null(a, d) else 0
                    n += 1
                else:
                    st = DEAD
                column[d] = st
            target[t] = st
        for c in range(n_classes):
            trans[s, c] = target[index[c]]
        computed[s] = 1
        counts[1] = n
    counts[0] = len(todo)
    return DONE, a


@numba.njit(cache=True, nogil=True)
def single(a, s, c, byte, reps, max_heads, column, exprs, trans, computed, accepting, counts, deadline,
           search_budget):  # fmt: skip
    """Build the one transition ``trans[s, c]`` (``byte``: a byte of class c), as ``rows`` builds a
    whole row: for a walk along few paths (the vocabulary's long tokens), where a row makes a state of
    every live derivative and the walk follows one. Arguments, statuses and the arena as ``rows``;
    ``counts[1]``, the states so far, is updated."""
    if deadline >= 0 and core.cycles_now() > deadline:
        return TIMEOUT, a
    d = core.deriv(a, exprs[s], byte)
    while d == core.FULL:
        a = core._grow(a)
        d = core.deriv(a, exprs[s], byte)
    if d < 0:
        return d, a
    if d >= len(column):
        return GROW_COLUMN, a
    st = column[d]
    if st == UNSEEN:
        v, a = _live_grown(a, d, reps, max_heads, search_budget, deadline)
        if v < 0:
            return v, a
        st = DEAD
        if v == 1:
            n = counts[1]
            if n + 1 > counts[2]:
                return TOO_MANY_STATES, a
            if n + 1 > len(computed):
                return GROW_STATES, a
            st = n
            exprs[n] = d
            accepting[n] = 1 if core._null(a, d) else 0
            counts[1] = n + 1
        column[d] = st
    trans[s, c] = st
    return DONE, a


@numba.njit(cache=True, nogil=True)
def walk(a, s, data, class_of, reps, max_heads, column, exprs, trans, computed, accepting, counts, deadline,
         search_budget, rep_bytes):  # fmt: skip
    """The state after ``data`` (uint8) from state s, building the transitions it takes as ``single``
    builds them (a token accepted where no mask walk went: its mask came from another state).
    Returns (the state reached or DEAD, the bytes taken, the arena): fewer than ``data`` where a
    transition could not be built here (a search past ``search_budget``, full arrays, the deadline;
    the caller builds it and goes on)."""
    for i in range(len(data)):
        c = class_of[data[i]]
        t = trans[s, c]
        if t == UNKNOWN:
            _, a = single(a, s, c, rep_bytes[c], reps, max_heads, column, exprs, trans, computed, accepting,
                          counts, deadline, search_budget)  # fmt: skip
            t = trans[s, c]
            if t == UNKNOWN:
                return s, i, a
        if t < 0:
            return DEAD, i + 1, a
        s = t
    return s, len(data), a
