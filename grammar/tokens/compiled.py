"""CompiledGrammar: a regular constraint compiled against one Vocabulary; shared by all its Matchers.

Holds the lazy byte DFA, the vocabulary trie and a per-state cache of token bitmasks (LRU, bounded in
bytes). Masks are keyed by the state's *clamped* expression: counters past the longest token's length
are indistinguishable within one token, so ``x{0,100000}`` shares one mask over most of its states
(only where the expression has no intersection/complement, whose emptiness counters can decide).
Immutable from the outside and safe to share across threads; pickles as its source AST plus the
vocabulary, and rebuilds its caches on load.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from guided.grammar.automata.expr_pool import ExprPool
from guided.grammar.automata.lazy_dfa import LazyDFA
from guided.grammar.automata.slice_forms import slice_candidate
from guided.grammar.bounded_cache import BoundedCache
from guided.grammar.tokens.forced import ForcedTokenizer
from guided.grammar.tokens.matcher import Matcher
from guided.grammar.tokens.vocab_index import vocab_index

if TYPE_CHECKING:
    from guided.grammar.vocab import Vocabulary

__all__ = ["AutomatonQueries", "CompiledGrammar"]

Encode = Callable[[bytes], list[int]]


class AutomatonQueries:
    """What every compiled constraint shares: pickling as its source (rebuilt on load), the start
    state, EOS, and token transitions through ``self.dfa.walk``. Subclasses set ``_SOURCE`` (the
    attribute holding the constraint's source) and define ``_build``."""

    _SOURCE = "node"

    def __init__(
        self,
        vocabulary: Vocabulary,
        source,
        key: object = None,
        encode: Encode | None = None,
        max_states: int = 500_000,
        mask_cache_bytes: int = 256 << 20,
        mask_timeout_s: float | None = 5.0,
    ):
        self.vocabulary = vocabulary
        setattr(self, self._SOURCE, source)
        self.key = key
        self.encode = encode
        self.max_states = max_states
        self.mask_cache_bytes = mask_cache_bytes
        self.mask_timeout_s = mask_timeout_s  # bounds one mask / transition / forced query (LimitError)
        self._build()

    def __getstate__(self):
        fields = (
            "vocabulary",
            self._SOURCE,
            "key",
            "encode",
            "max_states",
            "mask_cache_bytes",
            "mask_timeout_s",
        )
        return {k: getattr(self, k) for k in fields}

    def _build_vocabulary_side(self) -> None:
        """What depends on the vocabulary alone: trie, EOS mask, token bytes, the mask LRU, forced tokens."""
        vocab = self.vocabulary
        self.index = vocab_index(vocab)
        self.trie = self.index.trie
        self.eos_ids = tuple(vocab.eos_ids)
        self._eos_set = frozenset(vocab.eos_ids)
        self._special = vocab.special
        self._tokens = vocab.tokens
        self._words = vocab.bitmask_words
        self._eos_mask = np.zeros(self._words, dtype=np.uint32)
        for i in self.eos_ids:
            self._eos_mask[i >> 5] |= np.uint32(1 << (i & 31))
        # mask key -> uint32 [words], bounded in bytes
        self._masks: BoundedCache[int, np.ndarray] = BoundedCache(max(4, self.mask_cache_bytes // (4 * self._words)))
        self.forced = ForcedTokenizer(self, self.encode)
        self._stack_len = self.trie.max_token_len + 2

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._build()

    @property
    def start_state(self) -> int:
        return 0

    def is_eos(self, token_id: int) -> bool:
        return token_id in self._eos_set

    def next_state(self, state: int, token_id: int) -> int:
        """The state after a non-EOS token, or -1 when the token is not allowed."""
        if not 0 <= token_id < len(self._tokens) or self._special[token_id]:
            return -1
        data = self._tokens[token_id]
        return self.dfa.walk(state, data) if data else -1


class CompiledGrammar(AutomatonQueries):
    """A constraint's automaton over a vocabulary. Create with ``GrammarCompiler``; use via ``matcher()``.

    ``mask_timeout_s`` bounds the lazy work of one mask, one token's transition or one forced-token
    query (first visits of states): past it that call raises ``LimitError`` (the request fails alone
    instead of stalling the batch). None: unbounded.
    """

    def _build(self) -> None:
        self.pool = ExprPool.with_common()
        root = self.pool.intern(self.node)
        self.dfa = LazyDFA(self.pool, root, self.max_states, self.mask_timeout_s)
        self._build_vocabulary_side()
        self._mask_key: dict[int, int] = {}  # state -> state of its clamped expression

    # ------------------------------------------------------------------ queries
    def matcher(self) -> Matcher:
        return Matcher(self)

    def cached_mask(self, state: int) -> np.ndarray | None:
        """The state's mask when it is computed already (microseconds), else None; never computes."""
        key = self._mask_key.get(state)
        return self._masks.get(key) if key is not None else None

    def mask(self, state: int) -> np.ndarray:
        """The allowed-token bitmask of a state: uint32 [words], bit (id & 31) of word (id >> 5). Do not modify."""
        key = self._mask_key.get(state)
        m = self._masks.get(key) if key is not None else None
        if m is None:
            with self.pool.bound.limit(self.mask_timeout_s, "computing a token mask"):
                if key is None:
                    key = self._clamped_state(state)
                m = self._masks.get(key)
                if m is None:
                    m = self._masks.put(key, self._compute_mask(key))
        return m

    def _clamped_state(self, state: int) -> int:
        dfa = self.dfa
        with dfa.lock:
            e = dfa.exprs[state]
            c = self.pool.clamp(e, self.trie.max_token_len + 1)
            key = state if c == e else dfa.state_of(c)
        self._mask_key[state] = key
        return key

    def _compute_mask(self, state: int) -> np.ndarray:
        stack = np.zeros(self._stack_len, dtype=np.int32)
        stack[0] = state
        with self.dfa.lock:
            candidate = slice_candidate(self.pool, self.dfa.exprs[state])
        sl = None if candidate is None else self.index.slice_for(candidate[0], lazy=True)
        if sl is None:
            mask = np.zeros(self._words, dtype=np.uint32)
            self.trie.fill(mask, stack, self.dfa)
        else:
            hi = sl.bound(candidate[1])
            mask = sl.masks[hi].copy()
            self.trie.fill(mask, stack, self.dfa, sl.skipcap, hi)
        if self.dfa.accepting[state]:
            mask |= self._eos_mask
        return mask

    def __repr__(self) -> str:
        return (
            f"CompiledGrammar({self.key!r}, states={self.dfa.n_states}, vocabulary={self.vocabulary.name!r})"
        )
