"""Emptiness: whether an ExprPool expression's language is non-empty, decided structurally.

A concatenation is live when all its parts are, a union when one branch is, a repeat when its item
is (or it may repeat zero times), an expression without intersection/complement whenever it is not
EMPTY. Only an intersection or a complement needs a search, and it searches that sub-expression's
own derivative automaton (best-first, bounded): the context around it (the rest of a JSON
document, say) is never derived. Results are memoised per interned id, so every DFA state that
shares a sub-expression pays for it once.

Exactness: each rule is an identity of languages; a search explores every derivative class (or
stops at a state known live). The one subtlety is re-entrance: a search may meet (inside a
derivative) the intersection it is deciding. ``live`` then answers "unknown" and the search keeps
deriving that state instead of recursing, which is the plain (exact) search.
"""

from __future__ import annotations

import numpy as np

from guided.errors import LimitError
from guided.grammar.automata import expr_core as core
from guided.grammar.automata.derivative_classes import MAX_HEADS

_ALL_WORDS = np.full(4, -1, dtype=np.int64)  # every byte, as the arena's four words
FIRST_TRY = 2000  # states of the first, min_len-ordered try of a search (see Emptiness._search)

__all__ = ["Emptiness"]

# the ExprPool kinds (kept equal to expr_pool's numbering; imported lazily there to avoid a cycle)


class _LiveMemo:
    """The arena's emptiness memo column as a mapping id -> bool (absent: unknown)."""

    __slots__ = ("pool",)

    def __init__(self, pool):
        self.pool = pool

    def get(self, e: int, default=None):
        a = self.pool.arena
        v = a[a[core.O_LIVE] + core.NW * e]
        return default if v == core.LIVE_UNKNOWN else bool(v == core.LIVE_YES)

    def __contains__(self, e: int) -> bool:
        a = self.pool.arena
        return a[a[core.O_LIVE] + core.NW * e] != core.LIVE_UNKNOWN

    def __getitem__(self, e: int) -> bool:
        r = self.get(e)
        if r is None:
            raise KeyError(e)
        return r

    def __setitem__(self, e: int, v: bool) -> None:
        a = self.pool.arena
        a[a[core.O_LIVE] + core.NW * e] = core.LIVE_YES if v else core.LIVE_NO


class Emptiness:
    """Liveness of a pool's expressions, memoised; ``live(e)`` is exact, searches are bounded."""

    def __init__(self, pool, budget: int = 200_000):
        self.pool = pool
        self.budget = budget
        self.memo = _LiveMemo(pool)  # in the pool's arena: shared by forks, kept by pickles
        self._searching: set[int] = set()  # intersections/complements being searched right now
        self._reps: tuple = (None, 0)  # (the pool's reps list, its bytes as a 256-bit set)
        self._parts_first = False

    def is_live(self, e: int, budget: int | None = None) -> bool:
        if budget is not None and budget != self.budget:
            saved, self.budget = self.budget, budget
            try:
                return self.is_live(e)
            finally:
                self.budget = saved
        try:
            r = self.live(e)
        except RecursionError:
            raise LimitError(
                "regex nesting too deep: deciding emptiness exceeded Python's recursion limit"
            ) from None
        return self._search(e) if r is None else r

    def live(self, e: int) -> bool | None:
        """True / False, or None when e depends on a search in progress (the caller derives e).

        The structural rules run in compiled code (``expr_core.live``) over the memo column; it
        stops at an intersection or complement only a search decides, which is searched here (or,
        when that search is in progress, answered None)."""
        pool = self.pool
        while True:
            r = core.live(pool.arena, e)
            if r >= 0:
                return bool(r)
            x = core.SEARCH - r
            if x in self._searching:
                return None
            self.memo[x] = self._search(x)

    def _search(self, e: int) -> bool:
        """Best-first over e's derivatives until a state known live; every byte class of every state
        reached is tried, so an exhausted search proves emptiness. A state's successors are derived
        lazily: the first one that gets closer to acceptance is followed at once (the rest of the row
        later, if needed), so a witness that must finish a long JSON value is found along it, not
        after every shorter prefix. "Closer" is min_len for the first FIRST_TRY states, then the
        parts' bounds summed plus the depth (below). Runs in compiled code (``expr_core.search``);
        at most ``budget`` states."""
        pool = self.pool
        reps = pool.reps
        if reps is not None:
            if self._reps[0] is not reps:
                self._reps = (reps, core.words(sum(1 << b for b in reps)))
            within = self._reps[1]
        else:
            within = _ALL_WORDS
        self._searching.add(e)
        # First greedily by min_len, for at most FIRST_TRY states; then, for the whole budget, by the
        # sum of an intersection's parts' min_len and the depth (``expr_core._guide``): most searches
        # end in the first try, and the few that wander there (oneOf exclusions) end in the second.
        # A pool's searches come in runs of one shape (a lexeme's derivatives, one oneOf's exclusions):
        # where the parts' guide answered the last one, it goes first (each within FIRST_TRY states,
        # then the whole budget as before). Either order is exact: a try that runs out decides nothing.
        first = min(FIRST_TRY, self.budget)
        if self._parts_first:
            tries = [(True, first), (False, first), (True, self.budget)]
        else:
            tries = [(False, first), (True, self.budget)]
        try:
            while True:
                by_parts, budget = tries[0]
                deadline = core.deadline_cycles(pool.bound.remaining())
                with pool._lock:  # the search grows the arena when it is full: keep the one it returns
                    r, pool.arena = core.search(
                        pool.arena, e, budget, within, reps is not None, MAX_HEADS, deadline, by_parts
                    )
                if r >= 0:
                    self._parts_first = by_parts  # the guide that answered goes first next time
                    return bool(r)
                if r == core.TIMEOUT:
                    pool.bound.check()  # raises: the deadline has passed (else search again)
                    continue
                if r == core.BUDGET and len(tries) > 1:
                    tries.pop(0)
                    continue
                if r == core.BUDGET:
                    raise LimitError(
                        f"deciding emptiness of a regex intersection/complement exceeded {self.budget} states"
                    )
                pool._grow_or_raise(r)
        finally:
            self._searching.discard(e)
            pool.bound.check()
