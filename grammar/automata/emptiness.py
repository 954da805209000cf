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

import heapq

from guided.errors import LimitError
from guided.grammar.automata.derivative_classes import DerivClasses

__all__ = ["Emptiness", "min_length"]

# the ExprPool kinds (kept equal to expr_pool's numbering; imported lazily there to avoid a cycle)
K_EMPTY, K_EPS, K_BYTES, K_CAT, K_OR, K_AND, K_NOT, K_REP = range(8)
ALL_BYTES = (1 << 256) - 1
NEVER = 1 << 40  # min_length of an empty language


def min_length(min_len: list[int], kind: int, args, nullable: bool) -> int:
    """A lower bound on the length of the strings of a new expression, from its children's bounds
    (exact without intersection/complement; for those, the larger bound of the parts)."""
    if nullable:
        return 0
    if kind == K_BYTES:
        return 1
    if kind == K_CAT:
        return min(min_len[args[0]] + min_len[args[1]], NEVER)
    if kind == K_OR:
        return min(min_len[x] for x in args)
    if kind == K_AND:
        return max(min_len[x] for x in args)
    if kind == K_REP:
        return min(args[1] * min_len[args[0]], NEVER)
    return NEVER if kind == K_EMPTY else 1  # a complement that does not contain the empty string


class Emptiness:
    """Liveness of a pool's expressions, memoised; ``live(e)`` is exact, searches are bounded."""

    def __init__(self, pool, budget: int = 200_000):
        self.pool = pool
        self.budget = budget
        self.memo: dict[int, bool] = {}
        self._searching: set[int] = set()  # intersections/complements being searched right now
        self._classes = DerivClasses(pool)
        self._reps: tuple = (None, 0)  # (the pool's reps list, its bytes as a 256-bit set)

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
        """True / False, or None when e depends on a search in progress (the caller derives e)."""
        pool = self.pool
        if e == 0:
            return False
        if not pool.has_bool[e] or pool.nullable[e]:
            return True
        r = self.memo.get(e)
        if r is not None:
            return r
        k, a = pool.kind[e], pool.args[e]
        if k == K_CAT:
            r = self._cat_live(e)
        elif k == K_OR:  # a branch without intersection/complement is live: no search needed
            r = True if not all(pool.has_bool[x] for x in a) else self._any(a)
        elif k == K_REP:
            r = self.live(a[0])
        elif k == K_NOT and pool.first[a] != ALL_BYTES:
            r = True  # some byte leaves a: NOT a contains that byte followed by anything
        elif e in self._searching:
            return None
        else:
            r = self._search(e)
        if r is not None:
            self.memo[e] = r
        return r

    def _cat_live(self, e: int) -> bool | None:
        """live(e) for a right-nested concatenation: every part with intersections/complements live.

        The walk down the chain stops at a tail whose answer is known (memoised, or without
        intersection/complement), and the answer is memoised for every concatenation walked: the
        states of a lazy DFA are mostly ``d(x) rest`` with one long ``rest`` (the remainder of a JSON
        document, say) shared by all of them, which is then walked once, not once per state. Parts
        are decided in order, stopping at the first empty one.
        """
        pool, memo = self.pool, self.memo
        cats: list[int] = []  # the concatenations walked, outermost first
        parts: list[tuple[int, int]] = []  # (index in cats, a part to decide)
        end: bool | None = True
        while True:
            cats.append(e)
            x, e = pool.args[e]
            if pool.has_bool[x]:
                parts.append((len(cats) - 1, x))
            if not pool.has_bool[e] or pool.nullable[e]:
                break
            if e in memo:
                end = memo[e]
                break
            if pool.kind[e] != K_CAT:
                parts.append((len(cats) - 1, e))
                break
        if end is False:
            return self._memo_all(cats, False)
        unknown = False
        for i, x in parts:
            r = self.live(x)
            if r is False:
                return self._memo_all(cats[: i + 1], False)  # the concatenations that contain x
            unknown |= r is None
        return None if unknown else self._memo_all(cats, True)

    def _memo_all(self, cats: list[int], r: bool) -> bool:
        for c in cats:
            self.memo[c] = r
        return r

    def _any(self, items) -> bool | None:
        unknown = False
        for x in items:
            r = self.live(x)
            if r:
                return True
            unknown |= r is None
        return None if unknown else False

    def _search(self, e: int) -> bool:
        """Best-first over e's derivatives until a state known live; every byte class of every state
        reached is tried, so an exhausted search proves emptiness. States whose strings can be shortest
        (``min_len``) go first, and a state's successors are derived lazily: the first one that gets
        closer to acceptance is followed at once (the rest of the row later, if needed). A witness that
        must finish a long JSON value is then found along it, not after every shorter prefix."""
        pool, min_len = self.pool, self.pool.min_len
        parent: dict[int, int] = {e: -1}
        heap: list = [(min_len[e], 0, e, None, 0)]  # (bound, order, state, its bytes to try, next index)
        self._searching.add(e)
        try:
            while heap:
                h, _, x, todo, i = heapq.heappop(heap)
                if todo is None:
                    todo = self._bytes_to_try(x)
                for k in range(i, len(todo)):
                    y = pool.deriv(x, todo[k])
                    if y == 0 or y in parent:
                        continue
                    parent[y] = x
                    r = self._peek(y)
                    if r or (r is None and pool.nullable[y]):
                        self._mark_path(parent, y)
                        return True
                    if r is None:
                        self._check(len(parent))
                        heapq.heappush(heap, (min_len[y], -len(parent), y, None, 0))
                        if min_len[y] < h and k + 1 < len(todo):  # progress: follow y, resume x later
                            heapq.heappush(heap, (h, len(parent), x, todo, k + 1))
                            break
        finally:
            self._searching.discard(e)
        for x in parent:
            self.memo[x] = False
        return False

    def _bytes_to_try(self, x: int) -> list[int]:
        """One byte per class of bytes that give x distinct derivatives, among the bytes x can start
        with: each class of ``DerivClasses.partition`` (bytes with the same head sets), represented
        by its lowest byte. Deriving one byte per global byte class instead would compute the same
        derivative many times over (a string body's dozens of classes, say, share one). Without a
        DFA's global classes (a search while a schema is lowered) the head sets alone split the
        bytes: walking all of x for its byte sets would cost a walk of the whole expression per
        state; only an expression with too many heads to track pays for that walk."""
        pool = self.pool
        within = pool.first[x]
        reps = pool.reps
        if reps is not None:
            if self._reps[0] is not reps:
                self._reps = (reps, sum(1 << b for b in reps))
            within &= self._reps[1]
        try:
            heads = self._classes.heads(x)
        except RecursionError:  # very deep nesting: every byte on its own
            heads = None
        if heads is None:
            reps = reps if reps is not None else pool.classes_of(x)[1]
            return [b for b in reps if (within >> b) & 1]
        groups = self._classes.partition(x, within)
        return sorted((g & -g).bit_length() - 1 for g in groups)

    def _check(self, n: int) -> None:
        if n > self.budget:
            raise LimitError(
                f"deciding emptiness of a regex intersection/complement exceeded {self.budget} states"
            )
        if not n & 255:
            self.pool.bound.check()

    def _peek(self, y: int) -> bool | None:
        """live(y) within a search: structural for unions, concatenations and repeats; for an
        intersection/complement only what is already known (the search itself derives it)."""
        pool = self.pool
        k = pool.kind[y]
        if k == K_AND:
            return self.memo.get(y)
        if k == K_NOT:
            return True if pool.first[pool.args[y]] != ALL_BYTES else self.memo.get(y)
        return self.live(y)

    def _mark_path(self, parent: dict[int, int], y: int) -> None:
        while y != -1:
            self.memo[y] = True
            y = parent[y]
