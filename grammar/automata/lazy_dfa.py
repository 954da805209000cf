"""LazyDFA: a byte-level DFA whose states are derivatives, materialised row by row on first visit.

States are live expressions of an ExprPool (every state can still reach acceptance: dead
derivatives become the transition -1, so walking the DFA never enters a dead end). A state's row of
transitions, one per byte class, is computed the first time anything asks for it; the numba trie
walk reads ``trans``/``computed`` directly and returns to Python when it meets an unmaterialised
row. Growth reallocates the arrays, so readers must re-fetch them after ``materialize``.

Lazy work is bounded twice when ``timeout_s`` is set: each step (a row, a token's walk, the start
state's emptiness check) by ``timeout_s``, and all of an automaton's lazy work together by
``WORK_FACTOR * timeout_s``. A constraint whose product of counters and patterns yields a new state
at every step (``pattern`` with ``maxLength`` 5000, say) would otherwise keep every mask under the
step bound and still never finish a long output; past the total bound every further lazy step
raises ``LimitError`` naming the bound.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import numpy as np

from guided.errors import GrammarError, LimitError
from guided.grammar.automata import dfa_rows
from guided.grammar.automata import expr_core as core
from guided.grammar.automata.derivative_classes import MAX_HEADS
from guided.grammar.automata.emptiness import FIRST_TRY
from guided.grammar.automata.expr_pool import EMPTY_ID, ExprPool
from guided.grammar.automata.state_table import StateTable, grown
from guided.grammar.regex_ast import alt, any_string, chars, complement, intersect, literal, repeat, seq

__all__ = ["LazyDFA", "DEAD", "warm_up_core"]

DEAD = -1
UNKNOWN = dfa_rows.UNKNOWN  # a transition not computed yet (rows may be partly filled by single steps)
WORK_FACTOR = 4  # all lazy work of one automaton: at most this many step bounds (timeout_s)
NATIVE_ROWS = True  # mask walks build their transitions in compiled code (False: rows in Python's call per round)


class NativeRows:
    """What a compiled trie walk needs to build the transitions it takes itself (see
    ``LazyDFA.native_rows``); with ``native`` False the walk only reads the arrays and builds none."""

    __slots__ = ("native", "arena", "reps", "rep_bytes", "class_of", "column", "exprs", "trans", "computed",
                 "accepting", "counts", "deadline", "search_budget")  # fmt: skip

    def __init__(self, dfa: LazyDFA, native: bool, deadline: int = -1, search_budget: int = 0):
        self.native = native
        self.arena, self.reps, self.class_of = dfa.pool.arena, dfa._rep_words, dfa.class_map
        self.rep_bytes = dfa.rep_bytes  # one byte per class, for single transitions (``dfa_rows.single``)
        self.column, self.exprs, self.trans = dfa._column, dfa.exprs, dfa.trans
        self.computed, self.accepting = dfa.computed, dfa.accepting
        self.counts = np.array([0, dfa._n, dfa.max_states], dtype=np.int64)
        self.deadline, self.search_budget = deadline, search_budget


class LazyDFA(StateTable):
    """Byte DFA over byte equivalence classes; state 0 is the start."""

    def __init__(self, pool: ExprPool, root: int, max_states: int = 500_000, timeout_s: float | None = None):
        self.pool = pool
        self.max_states = max_states
        self.timeout_s = timeout_s  # bound of one lazy step (a row, a token's walk): LimitError past it
        self.work_s = 0.0  # seconds of lazy work done so far
        cls, reps = pool.byte_classes(root)
        self.class_map = np.asarray(cls, dtype=np.int32)  # [256] byte -> class
        self.reps = reps  # one byte per class
        self.rep_bytes = np.asarray(reps, dtype=np.int64)
        pool.reps = reps
        self.n_classes = len(reps)
        self._rep_bits = sum(1 << b for b in reps)
        self._rep_words = core.words(self._rep_bits)
        self.lock = threading.RLock()
        cap = 64
        self._n = 0
        self.exprs = np.zeros(cap, dtype=np.int64)  # state -> its expression (first n_states entries)
        # expression id -> its state, DEAD, or UNSEEN (an array: compiled code reads and extends it),
        # with room for the derivatives to come: an expression past it stops a mask walk for a round
        # (every first mask of a fresh grammar took two rounds and a transition built in Python)
        self._column = np.full(max(2 * len(pool), 1024), dfa_rows.UNSEEN, dtype=np.int32)
        self.trans = np.full((cap, self.n_classes), UNKNOWN, dtype=np.int32)  # [states, classes]
        self.computed = np.zeros(cap, dtype=np.uint8)
        self.accepting = np.zeros(cap, dtype=np.uint8)
        with pool.bound.limit(timeout_s, "deciding whether the constraint matches any string"):
            live = pool.is_live(root)
        if not live:
            raise GrammarError("the constraint matches no string at all (its language is empty)")
        self.state_of(root)

    @property
    def n_states(self) -> int:
        return self._n

    @property
    def max_work_s(self) -> float | None:
        """The bound of all lazy work together (None: unbounded), from the step bound."""
        return None if self.timeout_s is None else WORK_FACTOR * self.timeout_s

    def state_of(self, e: int) -> int:
        """The state id of a live expression, or DEAD."""
        if e >= len(self._column):
            self._grow_column(e)
        s = int(self._column[e])
        if s != dfa_rows.UNSEEN:
            return s
        if e == EMPTY_ID or not self.pool.is_live(e):
            self._column[e] = DEAD
            return DEAD
        s = self._n
        if s >= self.max_states:
            self.spent = True
            raise LimitError(f"regex automaton exceeded {self.max_states} states")
        if s >= len(self.computed):
            self._grow()
        self.exprs[s] = e
        self.accepting[s] = self.pool.nullable[e]
        self._column[e] = s
        self._n = s + 1
        return s

    def _grow(self) -> None:
        cap = 2 * len(self.computed)
        self.trans, self.accepting = grown(self.trans, cap, UNKNOWN), grown(self.accepting, cap, 0)
        self.computed, self.exprs = grown(self.computed, cap, 0), grown(self.exprs, cap, 0)

    def _grow_column(self, e: int = -1) -> None:
        """Room in the expression -> state column for e and every expression the pool has."""
        cap = len(self._column)
        while cap <= max(e, len(self.pool)):
            cap *= 2
        self._column = grown(self._column, cap, dfa_rows.UNSEEN)

    def materialize(self, s: int) -> None:
        """Compute state s's transition row (idempotent, thread-safe)."""
        if not self.computed[s]:
            self.materialize_many((s,))

    def materialize_many(self, states) -> None:
        """Compute the rows of several states (idempotent, thread-safe): one compiled call builds them
        (``dfa_rows.rows``) under one time bound; only a row whose new states need an emptiness search
        past its first budget is built here in Python (``_materialize``), which searches on."""
        computed = self.computed
        todo = np.fromiter((s for s in states if not computed[s]), dtype=np.int64)
        if not len(todo):
            return
        pool = self.pool
        with self.lock, pool.bound.limit(self.timeout_s, "computing automaton states"), self._timed():
            counts = np.array([0, self._n, self.max_states], dtype=np.int64)
            while True:
                with pool._lock:
                    r, pool.arena = dfa_rows.rows(
                        pool.arena, todo, self._rep_words, self.class_map, MAX_HEADS, self._column, self.exprs,
                        self.trans, self.computed, self.accepting, counts, core.deadline_cycles(pool.bound.remaining()),
                        min(FIRST_TRY, pool.emptiness.budget),
                    )  # fmt: skip
                    self._n = int(counts[1])
                if r == dfa_rows.DONE:
                    break
                if r == dfa_rows.GROW_STATES:
                    self._grow()
                elif r == dfa_rows.GROW_COLUMN:
                    self._grow_column()
                elif r == dfa_rows.NEEDS_SEARCH:
                    self._materialize(int(todo[counts[0]]))
                    counts[0] += 1
                    counts[1] = self._n
                elif r == dfa_rows.TOO_MANY_STATES:
                    self.spent = True
                    raise LimitError(f"regex automaton exceeded {self.max_states} states")
                elif r == dfa_rows.TIMEOUT:  # raises once the bound has passed by the monotonic clock too
                    pool.bound.check()
                else:
                    pool._grow_or_raise(r)  # raises: LIMIT or DEEP (FULL grows in compiled code)
            pool._checked = pool._work

    @contextmanager
    def native_rows(self):
        """Transitions built inside a mask walk (``dfa_rows.single`` called from the compiled trie
        walk: the ones it takes, not whole rows), where this thread can hold the automaton and its pool's arena
        at once: yields ``NativeRows`` (the arrays; the walk puts back the arena it may have grown;
        ``native`` False where the thread cannot), and takes the walk's states in after it. Bounded by
        the step bound (``timeout_s``, or the thread's earlier deadline) as a cycle count the compiled
        walk reads, and counted as lazy work (``_timed``); what the walk leaves (a search past its
        first budget, full arrays, the deadline) its caller builds in Python. (Set up without nested
        context managers: this runs at every round of every mask walk.)"""
        pool = self.pool
        if not NATIVE_ROWS or not self.lock.acquire(blocking=False):
            yield NativeRows(self, False)
            return
        try:
            if not pool.try_hold():
                yield NativeRows(self, False)
                return
            try:
                self._check_work()
                left = pool.bound.remaining(self.timeout_s)  # as ``pool.bound.limit(self.timeout_s)`` would set it
                t0 = time.monotonic()
                try:
                    job = NativeRows(self, True, core.deadline_cycles(left), min(FIRST_TRY, pool.emptiness.budget))
                    yield job
                    pool.arena = job.arena
                    self._n = int(job.counts[1])
                finally:
                    self.work_s += time.monotonic() - t0
            finally:
                pool.let_go()
            pool._checked = pool._work
        finally:
            self.lock.release()

    def _materialize(self, s: int) -> None:
        """The row of state s: one compiled call derives e once per derivative class it tells apart
        and maps every byte class to one of the distinct derivatives; each of those becomes a state
        here (live ones; the empty language is DEAD)."""
        uniq, index = self.pool.deriv_classes(self.exprs[s], self._rep_words, self.class_map, self.n_classes)
        states = [self.state_of(d) for d in uniq]
        self.trans[s] = np.asarray(states, dtype=np.int32)[index]  # trans may have been regrown
        self.computed[s] = 1

    def _check_work(self) -> None:
        """LimitError once the automaton's lazy work together is past its bound (``max_work_s``)."""
        bound = self.max_work_s
        if bound is not None and self.work_s > bound:
            self.spent = True
            raise LimitError(
                f"regex automaton: its lazy construction took over {bound:g} s in total "
                f"({self.n_states} states; bound: {WORK_FACTOR} x mask_timeout_s); the constraint "
                "is too large to enforce (e.g. a pattern combined with a large maxLength)"
            )

    @contextmanager
    def _timed(self):
        """Count the block's time against the automaton's total work bound (LimitError past it)."""
        self._check_work()
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.work_s += time.monotonic() - t0

    def _single(self, s: int, c: int) -> int:
        """Compute one transition (for walks along one string, e.g. committing a token)."""
        with self.lock, self.pool.bound.limit(self.timeout_s, "computing an automaton transition"):
            t = int(self.trans[s, c])
            if t == UNKNOWN:
                with self._timed():
                    t = self.state_of(self.pool.deriv(self.exprs[s], self.reps[c]))
                self.trans[s, c] = t
            return t

    def build_transitions(self, states, data) -> None:
        """The transition from each state by the byte beside it, where a mask walk could not build it
        in compiled code (a search past its first budget, full arrays): each alone, as ``step`` builds
        it (a whole row would make a state of every live derivative, where the walk takes one)."""
        for s, b in zip(states, data, strict=True):
            c = int(self.class_map[b])
            if self.trans[s, c] == UNKNOWN:
                self._single(s, c)

    def step(self, s: int, byte: int) -> int:
        c = self.class_map[byte]
        t = int(self.trans[s, c])
        return self._single(s, c) if t == UNKNOWN else t

    def reaches(self, s: int, data: bytes) -> bool:
        """Whether data leads from s to a live state (``walk`` is not DEAD)."""
        return self.walk(s, data) >= 0

    def walk(self, s: int, data: bytes) -> int:
        """The state after data from s, or DEAD."""
        class_map, trans = self.class_map, self.trans
        for i, b in enumerate(data):
            t = trans[s, class_map[b]]
            if t == UNKNOWN:  # lazy work ahead: the rest of the walk runs under one time bound
                with self.pool.bound.limit(self.timeout_s, "accepting a token"):
                    return self._walk_slow(s, data[i:])
            if t < 0:
                return DEAD
            s = t
        return int(s)

    def _walk_slow(self, s: int, data: bytes) -> int:
        """The rest of ``walk`` where transitions are missing: built in compiled code as a mask walk
        builds them (``dfa_rows.walk``), a byte it cannot build by ``step``, in Python."""
        # (argument types as warm_up_core's: a numpy int32 state, or a writable array, is a signature
        # numba would compile anew inside a time bound)
        s, raw, i = int(s), np.frombuffer(bytes(data), dtype=np.uint8), 0
        while i < len(raw):
            with self.native_rows() as a:
                if a.native:
                    s, k, a.arena = dfa_rows.walk(
                        a.arena, s, raw[i:], a.class_of, a.reps, MAX_HEADS, a.column, a.exprs, a.trans, a.computed,
                        a.accepting, a.counts, a.deadline, a.search_budget, a.rep_bytes,
                    )  # fmt: skip
                    i += k
            if s < 0:
                return DEAD
            if i < len(raw):
                s = self.step(s, int(raw[i]))
                i += 1
                if s < 0:
                    return DEAD
        return int(s)


_warm = threading.Event()


def warm_up_core() -> None:
    """Run the compiled expression core's functions (``expr_core``) once, through the pool's own
    calls (so with the argument types real work passes): numba compiles them here, or loads its
    cache, once per process, and never inside a compile's or a mask's time bound."""
    if _warm.is_set():
        return
    words = alt(*(literal(w) for w in ("ab", "ac", "bd", "be", "cf")))  # or_factored
    letters = repeat(chars([(0x61, 0x7A)]), 1, 5)
    node = seq(words, intersect(letters, complement(seq(any_string(), literal("z")))), literal("!"))
    pool = ExprPool()
    e = pool.intern(node)
    pool.arena = core.grow(pool.arena)  # a copy into a larger arena
    pool.is_live(pool.and_([pool.intern(letters), pool.not_(pool.intern(literal("q")))]))  # search, no reps
    dfa = LazyDFA(pool, e)  # classes, then a search with them
    LazyDFA(pool, e).walk(0, b"abz!")  # a token's transitions built in compiled code (``dfa_rows.walk``)
    for b in b"abz!":
        dfa.materialize(0)
        dfa.step(0, b)
    pool.deriv(e, ord("a"))
    pool.deriv_classes(e, dfa._rep_words, dfa.class_map, dfa.n_classes)  # a DFA row, called from Python
    pool.clamp(pool.rep(pool.intern(letters), 0, 100), 10)
    pool.completion_bound(pool.intern(letters))
    pool.byte_masks(e)
    core.deadline_cycles(1.0)
    _warm.set()
