"""LexTable: a CfgAutomaton's lexer states as flat arrays, so that compiled code can step them.

A lexer state is the tuple of (terminal, expression) pairs of the lexemes one origin has in flight
(``CfgAutomaton.lexstates``). Here state i is the int64 words ``terminal << 32 | expression`` in
``items[off[i]:off[i + 1]]``, found by its contents through ``ht``, an open-addressing table of state
ids (-1 where empty, at most half full). Python makes states through ``add``; ``step`` (numba) makes
them in a mask walk: the lexer transition of ``CfgAutomaton._lex_step``, from the expression arena's
derivatives, with the same pairs in the same order, so that a state is the same state whichever
side made it. What ``step`` cannot decide alone it leaves to Python (it answers UNKNOWN): the
liveness of an intersection or complement that needs a search, a full arena, full tables.

Before this, every lexer step of a first visit went back to Python between two walk rounds (~7 us
each, a fifth of the mask time of MaskBench's first visits); a key or a string value now takes one
round whatever its length.
"""

from __future__ import annotations

import numba
import numpy as np

from guided.grammar.automata import expr_core as core
from guided.grammar.automata.expr_pool import ExprPool
from guided.grammar.regex_ast import literal

__all__ = ["LexTable", "step", "warm_up", "DEAD", "UNKNOWN", "LEX_ACCEPTS", "LEX_GOES_ON", "TERM_SHIFT", "NATIVE_STEPS"]

NATIVE_STEPS = True  # lexer steps in compiled code (False: every one in Python, as a reference for tests)

LEX_ACCEPTS = 1  # lex_flags: some terminal of the lexer state accepts here
LEX_GOES_ON = 2  # lex_flags: some terminal of the lexer state can take another byte
TERM_SHIFT = 32  # an item: terminal << TERM_SHIFT | expression
_EXPR = (1 << TERM_SHIFT) - 1
DEAD = -1  # a transition to no state
UNKNOWN = -2  # a transition not computed yet


class LexTable:
    """The flat arrays (``items``, ``off``, ``ht``, ``hdr``: [number of states]) and their growth."""

    def __init__(self) -> None:
        self.items = np.zeros(256, dtype=np.int64)
        self.off = np.zeros(65, dtype=np.int64)
        self.ht = np.full(128, -1, dtype=np.int64)
        self.hdr = np.zeros(1, dtype=np.int64)

    def __len__(self) -> int:
        return int(self.hdr[0])

    def add(self, state: tuple) -> int:
        """Record a state Python made (new: not in the table), as the next id."""
        buf = np.array([t << TERM_SHIFT | e for t, e in state], dtype=np.int64)
        self.reserve(1, len(buf))
        slot = find(self.items, self.off, self.ht, buf, len(buf))
        if slot >= 0:
            raise AssertionError(f"internal: lexer state {state!r} recorded twice")
        return _add(self.items, self.off, self.ht, self.hdr, buf, len(buf), -1 - slot)

    def state(self, i: int) -> tuple:
        """State i as ``CfgAutomaton.lexstates`` holds it: a tuple of (terminal, expression)."""
        return self.states(i, i + 1)[0]

    def states(self, first: int, end: int) -> list[tuple]:
        """States first..end-1 as ``state`` gives them, their words read in one slice."""
        off = self.off[first : end + 1].tolist()
        base = off[0]
        words = self.items[base : off[-1]].tolist()
        return [
            tuple((x >> TERM_SHIFT, x & _EXPR) for x in words[lo - base : hi - base])
            for lo, hi in zip(off[:-1], off[1:], strict=True)
        ]

    def reserve(self, states: int, items: int) -> None:
        """Room for ``states`` more states of ``items`` more words in all (what a walk may add)."""
        n = len(self)
        if n + states + 2 > len(self.off):
            self.off = _grown(self.off, n + states + 2)
        used = int(self.off[n])
        if used + items > len(self.items):
            self.items = _grown(self.items, used + items)
        if 2 * (n + states + 1) > len(self.ht):
            cap = len(self.ht)
            while 2 * (n + states + 1) > cap:
                cap *= 2
            ht = np.full(cap, -1, dtype=np.int64)
            _rehash(self.items, self.off, n, ht)
            self.ht = ht


def warm_up() -> None:
    """Call the table's compiled functions from Python once, with the argument types the automaton
    passes (``add``, the regrowth's rehash, ``step``): numba compiles or loads them here, not inside
    a mask's time bound."""
    pool = ExprPool()
    e = pool.intern(literal("ab"))
    table = LexTable()
    for i in range(len(table.off)):
        table.add(((1, e + i),))
    lex_trans = np.full((len(table), 2), UNKNOWN, dtype=np.int32)
    words = np.zeros((2, 4), dtype=np.int64)
    words[0, ord("a") >> 6] = 1 << (ord("a") & 63)
    pool.call(step, 0, 0, np.array([ord("a"), 0], dtype=np.int64), table.items, table.off, table.ht, table.hdr,
              lex_trans, np.zeros(len(table), dtype=np.uint8), words)  # fmt: skip


def _grown(a: np.ndarray, need: int) -> np.ndarray:
    out = np.zeros(max(need, 2 * len(a)), dtype=a.dtype)
    out[: len(a)] = a
    return out


@numba.njit(cache=True, nogil=True, inline="always")
def _hash(buf, n):
    h = np.int64(n)
    for k in range(n):
        h = core._mix(h, buf[k])
    return h


@numba.njit(cache=True, nogil=True)
def find(items, off, ht, buf, n):
    """The id of the state whose words are buf[:n], or -1 - the empty slot of ht where it goes."""
    m = len(ht) - 1
    i = _hash(buf, n) & m
    while True:
        s = ht[i]
        if s < 0:
            return -1 - i
        lo = off[s]
        if off[s + 1] - lo == n:
            same = True
            for k in range(n):
                if items[lo + k] != buf[k]:
                    same = False
                    break
            if same:
                return s
        i = (i + 1) & m


@numba.njit(cache=True, nogil=True)
def _add(items, off, ht, hdr, buf, n, slot):
    s = hdr[0]
    lo = off[s]
    for k in range(n):
        items[lo + k] = buf[k]
    off[s + 1] = lo + n
    ht[slot] = s
    hdr[0] = s + 1
    return s


@numba.njit(cache=True, nogil=True)
def _rehash(items, off, n, ht):
    m = len(ht) - 1
    for s in range(n):
        lo = off[s]
        i = _hash(items[lo : off[s + 1]], off[s + 1] - lo) & m
        while ht[i] >= 0:
            i = (i + 1) & m
        ht[i] = s


@numba.njit(cache=True, nogil=True)
def step(a, lex, c, reps, items, off, ht, hdr, lex_trans, lex_flags, class_words):
    """lex_trans[lex, c] made here, as ``CfgAutomaton._lex_step`` makes it: each pair's derivative by
    the class's byte, empty ones dropped; a new state gets its LEX_* flags and its DEAD classes (no
    byte any of its expressions can take) as ``CfgAutomaton._lex_id`` gives them. Returns the state,
    DEAD, or UNKNOWN where Python must decide: the liveness of an intersection or complement that
    only a search decides (``expr_core.live`` settles the rest, structurally or from its memo), a
    full arena (its derivatives' memo and nodes grow in Python), no room left in the tables."""
    lo, hi = off[lex], off[lex + 1]
    buf = np.empty(hi - lo, np.int64)
    b = reps[c]
    n = 0
    for k in range(lo, hi):
        x = items[k]
        e = x & _EXPR
        d = core.deriv(a, e, b)
        if d < 0:
            return UNKNOWN
        if d == 0:  # EMPTY
            continue
        if core._hasb(a, d):
            v = core.live(a, d)
            if v < 0:
                return UNKNOWN
            if v == 0:
                continue
        buf[n] = x - e + d
        n += 1
    if n == 0:
        r = DEAD
    else:
        r = find(items, off, ht, buf, n)
        if r < 0:
            s = hdr[0]
            if s >= lex_trans.shape[0] or s + 2 > len(off) or off[s] + n > len(items) or 2 * (s + 1) > len(ht):
                return UNKNOWN
            flags = 0
            f0 = f1 = f2 = f3 = 0
            for k in range(n):
                e = buf[k] & _EXPR
                if core._null(a, e):
                    flags |= LEX_ACCEPTS
                if flags & LEX_GOES_ON == 0:
                    g = _goes_on(a, e, reps)
                    if g < 0:
                        return UNKNOWN
                    if g == 1:
                        flags |= LEX_GOES_ON
                f = a[core.O_FIRST] + core.NW * e
                f0 |= a[f]
                f1 |= a[f + 1]
                f2 |= a[f + 2]
                f3 |= a[f + 3]
            r = _add(items, off, ht, hdr, buf, n, -1 - r)
            lex_flags[r] = flags
            for c2 in range(lex_trans.shape[1]):
                w = class_words[c2]
                if (w[0] & f0) | (w[1] & f1) | (w[2] & f2) | (w[3] & f3) == 0:
                    lex_trans[r, c2] = DEAD
    lex_trans[lex, c] = r
    return r


@numba.njit(cache=True, nogil=True)
def _goes_on(a, e, reps):
    """Whether e (live, as every expression of a lexer state) matches a non-empty string: 1 or 0, as
    ``CfgAutomaton._can_continue`` decides it, or -1 where a search or a full arena leaves it to
    Python. Only a nullable expression with an intersection or complement needs its derivatives."""
    if e == 1:  # EPS
        return 0
    if not core._hasb(a, e) or not core._null(a, e):
        return 1  # intersection-free and not EPS, or live without the empty string: more than ""
    for c in range(len(reps)):
        d = core.deriv(a, e, reps[c])
        if d < 0:
            return -1
        if d != 0:
            v = core.live(a, d)
            if v != 0:
                return 1 if v == 1 else -1
    return 0
