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

import numpy as np

from guided.grammar.automata import expr_core as core

__all__ = ["DerivClasses"]

MAX_HEADS = 24


class DerivClasses:
    """The byte partition an expression's head sets induce (computed in ``expr_core.partition``)."""

    def __init__(self, pool):
        self.pool = pool

    def partition(self, e: int, within: int) -> list[int]:
        """The bytes of ``within`` (a 256-bit set) grouped so that bytes in one group give e the same
        derivative; groups as 256-bit sets (single bytes where e has too many head sets to track)."""
        groups = np.empty((256, 4), dtype=np.int64)
        n = core.partition(self.pool.arena, e, core.words(within), MAX_HEADS, groups)
        if n < 0:
            return [1 << b for b in range(256) if (within >> b) & 1]
        return [int.from_bytes(row.tobytes(), "little") for row in groups[:n]]

    def heads(self, e: int) -> bool:
        """Whether e's head sets are few enough to track (at most MAX_HEADS)."""
        return core.head_masks(self.pool.arena, e, MAX_HEADS, np.empty((MAX_HEADS, 4), dtype=np.int64)) >= 0
