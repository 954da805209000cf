"""CompiledGrammar: a regular constraint compiled against one Vocabulary; shared by all its Matchers.

Holds the lazy byte DFA, the vocabulary trie and a per-state cache of token bitmasks (LRU, bounded in
bytes). Masks are keyed by the state's *clamped* expression: counters past the longest token's length
are indistinguishable within one token, so ``x{0,100000}`` shares one mask over most of its states
(only where the expression has no intersection/complement, whose emptiness counters can decide;
``ExprPool.clamp`` also frees a character count beside a pattern when it cannot bind). A vocabulary's
longest tokens are a few runs of spaces or dashes (Llama 3: 128 bytes, 231 tokens over 32): where
clamping past 32 bytes frees more, the clamped state's mask serves the shorter tokens and the long
ones are walked from the state itself (``_split_mask``), so ``maxLength: 100`` shares masks too.
Immutable from the outside and safe to share across threads; pickles as its source AST plus the
vocabulary, and rebuilds its caches on load. ``disk_state`` / ``from_disk_state`` keep the built
automaton instead (the on-disk grammar cache, ``guided.grammar.disk_cache``).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from guided.errors import LimitError
from guided.grammar.automata.expr_pool import ExprPool
from guided.grammar.automata.lazy_dfa import LazyDFA
from guided.grammar.automata.slice_forms import slice_candidate
from guided.grammar.bounded_cache import BoundedCache
from guided.grammar.safe_pickle import safe_loads
from guided.grammar.tokens.completion import Completion, shortest_bytes, spell
from guided.grammar.tokens.forced import ForcedTokenizer
from guided.grammar.tokens.matcher import Matcher
from guided.grammar.tokens.vocab_index import vocab_index

_NEXT_MEMO = 1 << 16  # token transitions memoised per compiled constraint (about 8 MB at most)

if TYPE_CHECKING:
    from guided.grammar.vocab import Vocabulary

__all__ = ["AutomatonQueries", "CompiledGrammar"]

Encode = Callable[[bytes], list[int]]


class AutomatonQueries:
    """What every compiled constraint shares: pickling as its source (rebuilt on load), the start
    state, EOS, and token transitions through ``self.dfa.walk``. Subclasses set ``_SOURCE`` (the
    attribute holding the constraint's source) and define ``_build(pool)``: ``pool`` is where the
    source's nodes are interned already, or None (a fresh pool, as after a disk-cache load)."""

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
        pool: ExprPool | None = None,
    ):
        self.vocabulary = vocabulary
        setattr(self, self._SOURCE, source)
        self.key = key
        self.encode = encode
        self.max_states = max_states
        self.mask_cache_bytes = mask_cache_bytes
        self.mask_timeout_s = mask_timeout_s  # bounds one mask / transition / forced query (LimitError)
        self._build(pool)

    # what depends on the vocabulary alone (``_build_vocabulary_side``) or on this process: a disk cache
    # keeps neither, the loading process builds them again
    # (and ``_wrappers``: what callers keep on the grammar, such as the JSON checks' wrappers)
    _VOCABULARY_SIDE = ("vocabulary", "encode", "index", "trie", "eos_ids", "_eos_set", "_special", "_tokens",
                        "_words", "_eos_mask", "_masks", "forced", "_stack_len", "_next", "_wrappers",
                        "_shortest")  # fmt: skip

    def __getstate__(self):
        fields = ("vocabulary", "key", "encode", "max_states", "mask_cache_bytes", "mask_timeout_s")
        return {self._SOURCE: self.source, **{k: getattr(self, k) for k in fields}}

    @property
    def spent(self) -> bool:
        """Whether a capacity bound was hit while masks or transitions were computed (the expression
        arena, the automaton's states or parser configurations, its total work): no new state can be
        made, so every query that needs one fails at once. Matchers in use keep failing; the compiler
        cache drops a spent grammar, so the next compile of the constraint starts afresh."""
        return self.pool.spent or self.dfa.spent

    @property
    def source(self):
        """The constraint's source (regex AST or grammar IR); loaded on demand after a disk cache load
        or ``release_source``."""
        src = getattr(self, self._SOURCE)
        if src is None:
            blob = getattr(self, "_source_blob", None)
            src = safe_loads(blob) if blob is not None else self._source_rebuild()
            setattr(self, self._SOURCE, src)
        return src

    def release_source(self, rebuild: Callable[[], object]) -> None:
        """Drop the source AST and the pool's memo of its nodes: masks and matchers need neither, and a
        large grammar's AST is most of the objects every full pass of the garbage collector walks while
        the grammar lives (70k of 96k on one JSON Schema). ``source`` is kept as the pickled blob when
        there is one (a disk cache wrote it), else made again by ``rebuild()`` (which must not refer to
        this grammar) if ever asked for: pickling is the only reader."""
        if getattr(self, self._SOURCE) is None:
            return
        if getattr(self, "_source_blob", None) is None:
            self._source_rebuild = rebuild
        setattr(self, self._SOURCE, None)
        self.pool._interned = {}
        release_nodes = getattr(self.dfa, "release_nodes", None)
        if release_nodes is not None:
            release_nodes()

    def disk_state(self) -> dict:
        """The built automaton, its masks and forced-token caches aside: what an on-disk cache keeps
        (``from_disk_state`` takes it back). The source travels as a pickled blob, unpickled only if
        asked for. Call it before the grammar is shared with other threads."""
        skip = {*self._VOCABULARY_SIDE, self._SOURCE, "_source_blob", "_source_rebuild"}
        state = {k: v for k, v in self.__dict__.items() if k not in skip}
        # kept on the grammar too: ``release_source`` then keeps the blob, not a way to lower again
        self._source_blob = state["_source_blob"] = getattr(self, "_source_blob", None) or pickle.dumps(
            self.source, protocol=5
        )
        state["_saved_masks"] = self._masks.items()
        return state

    @classmethod
    def from_disk_state(cls, state: dict, vocabulary: Vocabulary, encode: Encode | None = None,
                        max_states: int = 500_000, mask_cache_bytes: int = 256 << 20,
                        mask_timeout_s: float | None = 5.0):  # fmt: skip
        """A grammar from ``disk_state()`` for the same vocabulary, under this process's bounds."""
        self = cls.__new__(cls)
        state = dict(state)
        masks = state.pop("_saved_masks")
        self.__dict__.update(state)
        setattr(self, self._SOURCE, None)
        self.vocabulary, self.encode = vocabulary, encode
        self.max_states, self.mask_cache_bytes, self.mask_timeout_s = max_states, mask_cache_bytes, mask_timeout_s
        self.dfa.max_states, self.dfa.timeout_s = max_states, mask_timeout_s
        self._build_vocabulary_side()
        self._attach()
        for key, mask in masks:
            self._masks.put(key, mask)
        return self

    def _attach(self) -> None:
        """After ``from_disk_state``: what a subclass keeps beside the vocabulary side."""

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
        self._next: dict[tuple[int, int], int] = {}  # (state, token) -> next_state, up to _NEXT_MEMO entries

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._build()

    @property
    def start_state(self) -> int:
        return 0

    def is_eos(self, token_id: int) -> bool:
        return token_id in self._eos_set

    def next_state(self, state: int, token_id: int) -> int:
        """The state after a non-EOS token, or -1 when the token is not allowed (memoised: a walk
        over the token's bytes costs microseconds of Python, a lookup a tenth of one)."""
        memo = self._next
        key = (state, token_id)
        nxt = memo.get(key)
        if nxt is None:
            if not 0 <= token_id < len(self._tokens) or self._special[token_id] or not self._tokens[token_id]:
                return -1
            nxt = self._walk_token(state, self._tokens[token_id])
            if len(memo) >= _NEXT_MEMO:
                memo.clear()
            memo[key] = nxt
        return nxt

    def _walk_token(self, state: int, data: bytes) -> int:
        return self.dfa.walk(state, data)

    def shortest_completion(self, state: int) -> Completion | None:
        """``Matcher.shortest_completion`` for a state (memoised per state; None: the bounded search
        gave up, or its time bound ``mask_timeout_s`` passed)."""
        memo = self.__dict__.setdefault("_shortest", {})
        if state in memo:
            return memo[state]
        try:
            with self.pool.bound.limit(self.mask_timeout_s, "finding a shortest completion"):
                text = shortest_bytes(self.dfa, state, self._bytes_needed)
        except LimitError:
            text = None
        out = None if text is None else Completion(text, spell(self.vocabulary, text))
        if len(memo) >= _NEXT_MEMO:
            memo.clear()
        memo[state] = out
        return out

    def _bytes_needed(self, state: int) -> int:
        """A lower bound of the bytes a completion from ``state`` takes (0: none known)."""
        return 0


class CompiledGrammar(AutomatonQueries):
    """A constraint's automaton over a vocabulary. Create with ``GrammarCompiler``; use via ``matcher()``.

    ``mask_timeout_s`` bounds the lazy work of one mask, one token's transition or one forced-token
    query (first visits of states): past it that call raises ``LimitError`` (the request fails alone
    instead of stalling the batch). None: unbounded.
    """

    def _build(self, pool: ExprPool | None = None) -> None:
        self.pool = pool if pool is not None and not pool.spent else ExprPool.with_common()
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
                    m = self._masks.put(key, self._split_mask(~key) if key < 0 else self._compute_mask(key))
        return m

    def _clamped_state(self, state: int) -> int:
        """The mask key of a state: the state of its expression with counters clamped past the longest
        token (itself when nothing changes), whose mask is the same. When clamping that expression
        again past the vocabulary's few long tokens (``LongTokens``) changes more, the key is ~(its
        state): the mask is then split (``_split_mask``)."""
        dfa, long = self.dfa, self.index.long_tokens()
        with dfa.lock:
            e = dfa.exprs[state]
            c = self.pool.clamp(e, self.trie.max_token_len + 1)
            key = state if c == e else dfa.state_of(c)
            if long is not None and self.pool.clamp(c, long.bytes + 1) != c:
                key = ~key
        self._mask_key[state] = key
        return key

    def _split_mask(self, state: int) -> np.ndarray:
        """The mask of a state whose expression clamped past ``LongTokens.bytes`` (state ``base``) allows
        the same short tokens: base's mask (cached under its own key, shared by every state clamped to
        it: the positions of a string under ``maxLength: 100``, say) for those, and a walk of the long
        tokens' paths (their subtrees alone) from the state itself for the rest."""
        long = self.index.long_tokens()
        with self.dfa.lock:
            base = self.dfa.state_of(self.pool.clamp(self.dfa.exprs[state], long.bytes + 1))
        base_mask = self._masks.get(base)
        if base_mask is None:
            base_mask = self._masks.put(base, self._compute_mask(base))
        return self._fill(base_mask & long.short, state, long.skip, 0)

    def _bytes_needed(self, state: int) -> int:
        return self.pool.min_len[self.dfa.exprs[state]]  # a lower bound; exact without and/not

    def _compute_mask(self, state: int) -> np.ndarray:
        with self.dfa.lock:
            candidate = slice_candidate(self.pool, self.dfa.exprs[state])
        sl = None if candidate is None else self.index.slice_for(candidate[0], lazy=True)
        if sl is None:
            return self._fill(np.zeros(self._words, dtype=np.uint32), state)
        hi = sl.bound(candidate[1])
        return self._fill(sl.masks[hi].copy(), state, sl.skipcap, hi)

    def _fill(self, mask: np.ndarray, state: int, skipcap=None, hi: int = -1) -> np.ndarray:
        """mask OR the tokens the trie walk from state allows (``TokenTrie.fill``), and EOS where the
        state accepts."""
        stack = np.zeros(self._stack_len, dtype=np.int32)
        stack[0] = state
        self.trie.fill(mask, stack, self.dfa, skipcap, hi)
        if self.dfa.accepting[state]:
            mask |= self._eos_mask
        return mask

    def __repr__(self) -> str:
        return (
            f"CompiledGrammar({self.key!r}, states={self.dfa.n_states}, vocabulary={self.vocabulary.name!r})"
        )
