"""StateTable: queries shared by the lazily built byte automata (``LazyDFA``, ``CfgAutomaton``).

Both keep ``trans`` (int32 [states, byte classes], negative = dead or not computed yet),
``class_map`` (uint8 [256]: byte -> class), ``accepting`` (bool [states]) and ``materialize(s)``,
which computes every transition of state s (``materialize_many`` several).
"""

from __future__ import annotations

import threading

import numpy as np

__all__ = ["StateTable", "grown"]


def grown(old: np.ndarray, cap: int, fill) -> np.ndarray:
    """A copy of ``old`` with ``cap`` rows, the new ones set to ``fill``. Only the new rows are
    filled (``np.full`` then a copy wrote the old half twice: on a DFA of 136k states and 94
    classes, one regrowth took 89 ms inside a mask); a walk may still read ``old``."""
    new = np.empty((cap, *old.shape[1:]), dtype=old.dtype)
    new[: len(old)] = old
    new[len(old) :] = fill
    return new


class StateTable:
    # True once a capacity bound (states, configurations) or the total work bound was hit: the
    # automaton can take no new state, so the grammar is spent (``AutomatonQueries.spent``)
    spent = False

    def __getstate__(self):
        """The automaton as built so far (an on-disk grammar cache keeps it); the lock is made anew."""
        with self.lock:
            state = dict(self.__dict__)
        del state["lock"]
        return state

    def __setstate__(self, state) -> None:
        self.__dict__.update(state)
        self.lock = threading.RLock()

    def materialize_many(self, states) -> None:
        """Compute the rows of several states (an automaton may build them together)."""
        for s in states:
            self.materialize(s)

    def is_accepting(self, s: int) -> bool:
        return bool(self.accepting[s])

    def is_final(self, s: int) -> bool:
        """Accepting with no way to continue: only EOS may follow."""
        self.materialize(s)
        return bool(self.accepting[s]) and bool((self.trans[s] < 0).all())

    def single_byte(self, s: int) -> int:
        """The only byte that can follow s (s not accepting), or -1 when there are none or several."""
        if self.accepting[s]:
            return -1
        self.materialize(s)
        live = np.flatnonzero(self.trans[s] >= 0)
        if len(live) != 1:
            return -1
        members = np.flatnonzero(self.class_map == live[0])
        return int(members[0]) if len(members) == 1 else -1
