"""Matcher: one sequence's cursor over a CompiledGrammar.

Keeps the history of states (one entry per accepted token or byte string) so ``rollback`` is a pop.
All heavy work (masks, DFA rows, forced tokens) is cached in the shared CompiledGrammar.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from guided.grammar.tokens.completion import Completion

if TYPE_CHECKING:
    from guided.grammar.tokens.compiled import CompiledGrammar

__all__ = ["Matcher"]

TERMINATED = -2  # history entry after EOS


class Matcher:
    """Per-sequence state: ``fill_bitmask`` / ``accept_token`` / ``forced_tokens`` / ``rollback``."""

    __slots__ = ("compiled", "_states", "_tokens")

    def __init__(self, compiled: CompiledGrammar):
        self.compiled = compiled
        self._states: list[int] = [compiled.start_state]
        self._tokens: list[int | None] = [None]  # token that led to each state (None: bytes or start)

    # ------------------------------------------------------------------ state
    @property
    def state(self) -> int:
        return self._states[-1]

    def is_terminated(self) -> bool:
        return self._states[-1] == TERMINATED

    def is_accepting(self) -> bool:
        s = self._states[-1]
        return s != TERMINATED and self.compiled.dfa.is_accepting(s)

    def reset(self) -> None:
        del self._states[1:], self._tokens[1:]

    def copy(self) -> Matcher:
        m = type(self).__new__(type(self))  # keeps the subclass (e.g. CfgMatcher)
        m.compiled = self.compiled
        m._states = list(self._states)
        m._tokens = list(self._tokens)
        return m

    def rollback(self, n: int) -> None:
        """Undo the last n accepted tokens (or accepted byte strings)."""
        if n < 0 or n >= len(self._states):
            raise ValueError(f"cannot roll back {n} tokens: {len(self._states) - 1} accepted")
        if n:
            del self._states[-n:], self._tokens[-n:]

    @property
    def num_accepted(self) -> int:
        return len(self._states) - 1

    # ------------------------------------------------------------------ masks
    def fill_bitmask(self, bitmask, row: int = 0) -> None:
        """Write the allowed tokens into ``bitmask[row]`` (int32 [batch, words] numpy array or CPU tensor).

        Bit ``id & 31`` of word ``id >> 5`` is 1 when token ``id`` may come next. After EOS only EOS
        is allowed.
        """
        s = self._states[-1]
        _write_row(bitmask, row, self.compiled._eos_mask if s == TERMINATED else self.compiled.mask(s))

    def _cached_mask(self) -> np.ndarray | None:
        s = self._states[-1]
        return self.compiled._eos_mask if s == TERMINATED else self.compiled.cached_mask(s)

    def has_cached_mask(self) -> bool:
        """Whether the current mask is computed already (``fill_bitmask`` then takes microseconds)."""
        return self._cached_mask() is not None

    def fill_bitmask_if_cached(self, bitmask, row: int = 0) -> bool:
        """``fill_bitmask`` when the mask is computed already (a copy, microseconds); False, leaving
        the row alone, when it would have to be computed (the engine then computes it off the step)."""
        mask = self._cached_mask()
        if mask is not None:
            _write_row(bitmask, row, mask)
        return mask is not None

    def allowed_tokens(self) -> np.ndarray:
        """bool [vocabulary.size]: the current mask, unpacked (for tests and debugging)."""
        words = np.zeros(self.compiled.vocabulary.bitmask_words, dtype=np.int32)
        self.fill_bitmask(words)
        bits = np.unpackbits(words.view(np.uint8), bitorder="little").astype(bool)
        return bits[: self.compiled.vocabulary.size]

    def is_allowed(self, token_id: int) -> bool:
        s = self._states[-1]
        if s == TERMINATED:
            return False
        if self.compiled.is_eos(token_id):
            return self.compiled.dfa.is_accepting(s)
        return self.compiled.next_state(s, token_id) >= 0

    # ------------------------------------------------------------------ advancing
    def accept_token(self, token_id: int) -> bool:
        """Advance by one token; False (state unchanged) when it is not allowed."""
        s = self._states[-1]
        if s == TERMINATED:
            return False
        if self.compiled.is_eos(token_id):
            if not self.compiled.dfa.is_accepting(s):
                return False
            nxt = TERMINATED
        else:
            nxt = self.compiled.next_state(s, token_id)
            if nxt < 0:
                return False
        self._states.append(nxt)
        self._tokens.append(token_id)
        return True

    def accept_tokens(self, token_ids) -> int:
        """Accept tokens in order until one is refused; returns how many were accepted."""
        n = 0
        for t in token_ids:
            if not self.accept_token(t):
                break
            n += 1
        return n

    def accept_bytes(self, data: bytes) -> bool:
        """Advance by raw bytes (one history entry); False (state unchanged) when they leave the language."""
        s = self._states[-1]
        if s == TERMINATED:
            return False
        nxt = self.compiled.dfa.walk(s, data)
        if nxt < 0:
            return False
        self._states.append(nxt)
        self._tokens.append(None)
        return True

    def accept_text(self, text: str) -> bool:
        return self.accept_bytes(text.encode("utf-8"))

    def forced_tokens(self) -> list[int]:
        """Tokens certain to come next, canonically tokenized and safe to prefill; [] when none."""
        s = self._states[-1]
        if s == TERMINATED:
            return []
        return self.compiled.forced.forced_tokens(s, self._tokens[-1])

    def forced_bytes(self) -> bytes:
        s = self._states[-1]
        return b"" if s == TERMINATED else self.compiled.forced.forced_bytes(s)[0]

    def shortest_completion(self) -> Completion | None:
        """A shortest way to end the output validly from here: ``text`` (the fewest bytes) and
        ``tokens`` (them spelled in the fewest tokens; EOS not included). None when the bounded
        search gives up (see ``guided.grammar.tokens.completion``)."""
        s = self._states[-1]
        return Completion(b"", []) if s == TERMINATED else self.compiled.shortest_completion(s)

    def __repr__(self) -> str:
        return f"Matcher(state={self.state}, accepted={self.num_accepted}, grammar={self.compiled.key!r})"


def _write_row(bitmask, row: int, mask: np.ndarray) -> None:
    """``mask`` into ``bitmask[row]`` (an int32 [batch, words] numpy array or CPU tensor, or one row)."""
    arr = bitmask if isinstance(bitmask, np.ndarray) else bitmask.numpy()
    # a row assignment (no [:] slice of a row view): ~0.6 us less per mask, which every token pays
    if arr.ndim == 2:
        arr[row] = mask.view(_I32)
    else:
        arr[:] = mask.view(_I32)


_I32 = np.dtype(np.int32)
