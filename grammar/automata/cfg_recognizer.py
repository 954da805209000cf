"""CfgState: a byte-level recognizer over a CfgAutomaton, with rollback (the tests' oracle and a
debugging aid; matchers work on token ids through ``CfgMatcher``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from guided.grammar.automata.earley import CfgAutomaton

__all__ = ["CfgState"]


class CfgState:
    """A byte-level recognizer over a CfgAutomaton, with rollback: ``feed_bytes`` / ``allowed_next_bytes``."""

    __slots__ = ("automaton", "_states")

    def __init__(self, automaton: CfgAutomaton):
        self.automaton = automaton
        self._states = [0]

    def feed_bytes(self, data: bytes) -> bool:
        """Advance by data (one history entry); False, state unchanged, when it leaves the language."""
        s = self.automaton.walk(self._states[-1], data)
        if s < 0:
            return False
        self._states.append(s)
        return True

    def feed_text(self, text: str) -> bool:
        return self.feed_bytes(text.encode("utf-8"))

    def allowed_next_bytes(self) -> set[int]:
        return set(np.flatnonzero(self.automaton.allowed_bytes(self._states[-1])).tolist())

    def is_accepting(self) -> bool:
        return self.automaton.is_accepting(self._states[-1])

    def rollback(self, n: int = 1) -> None:
        if n < 0 or n >= len(self._states):
            raise ValueError(f"cannot roll back {n} steps: {len(self._states) - 1} taken")
        if n:
            del self._states[-n:]

    def copy(self) -> CfgState:
        c = CfgState(self.automaton)
        c._states = list(self._states)
        return c
