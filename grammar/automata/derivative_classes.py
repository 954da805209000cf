"""DerivClasses: which bytes an expression's derivative tells apart, so a DFA row costs one derivative
per class of bytes the state actually distinguishes, not one per global byte class.

The derivative of e by byte b only tests b against the byte sets at e's "head" (the first BYTES of a
concatenation, of every nullable prefix's successor, of every branch of a union or intersection, of a
complement's or a repeat's body), and ``first`` masks, which are unions and intersections of those
sets. Two bytes in the same sets give the same derivative (the same interned id). A JSON string body
state, say, has three or four such classes (body character, quote, backslash, the rest) where the
grammar has dozens of global classes.
"""

from __future__ import annotations

__all__ = ["DerivClasses"]

# the ExprPool kinds (kept equal to expr_pool's numbering)
K_EMPTY, K_EPS, K_BYTES, K_CAT, K_OR, K_AND, K_NOT, K_REP = range(8)
MAX_HEADS = 24


class DerivClasses:
    """Head byte sets per interned expression (memoised) and the byte partition they induce."""

    def __init__(self, pool):
        self.pool = pool
        self._heads: dict[int, frozenset] = {}

    def partition(self, e: int, within: int) -> list[int]:
        """The bytes of ``within`` (a 256-bit set) grouped so that bytes in one group give e the same
        derivative; groups as 256-bit sets (single bytes where e has too many head sets to track)."""
        heads = self.heads(e)
        if heads is None:
            return [1 << b for b in range(256) if (within >> b) & 1]
        parts = [within] if within else []
        for m in heads:
            split = []
            for p in parts:
                inside = p & m
                if inside and inside != p:
                    split.append(inside)
                    split.append(p ^ inside)
                else:
                    split.append(p)
            parts = split
        return parts

    def heads(self, e: int) -> frozenset | None:
        """e's head byte sets, or None when there are more than MAX_HEADS (a large union: splitting
        bytes by its heads would cost more than the derivatives it saves)."""
        if e in self._heads:
            return self._heads[e]
        r = self._heads[e] = self._compute(e)
        return r

    def _compute(self, e: int) -> frozenset | None:
        pool = self.pool
        k, a = pool.kind[e], pool.args[e]
        if k == K_BYTES:
            return frozenset((a,))
        if k == K_CAT:  # the heads of every part up to the first non-nullable one
            parts = []
            while True:
                x, y = a
                parts.append(x)
                if not pool.nullable[x]:
                    break
                if pool.kind[y] != K_CAT:
                    parts.append(y)
                    break
                a = pool.args[y]
            return _union(self.heads(x) for x in parts)
        if k in (K_OR, K_AND):
            return None if len(a) > MAX_HEADS else _union(self.heads(x) for x in a)
        if k == K_NOT:
            return self.heads(a)
        if k == K_REP:
            return self.heads(a[0])
        return frozenset()


def _union(sets) -> frozenset | None:
    out: set[int] = set()
    for s in sets:
        if s is None:
            return None
        out |= s
        if len(out) > MAX_HEADS:
            return None
    return frozenset(out)
