"""VocabIndex: what token masks need of one vocabulary, built once and shared by every grammar over it.

The byte trie and its numba walk (``token_trie``), the slices of character classes (``slices``: built
on first use, a few ms each, the JSON string-body classes at once), and the tables of the
context-free walk (descendant bytes per node, the first token at or after each node, and the rows of
``Slice.tails`` of unbounded slices). ``vocab_index(vocabulary)`` returns the cached index of a
vocabulary (a few vocabularies at a time, keyed by fingerprint).
"""

from __future__ import annotations

import threading

import numba
import numpy as np

from guided.grammar.bounded_cache import BoundedCache
from guided.grammar.tokens.slices import COMMON_CLASSES, Slice
from guided.grammar.tokens.token_trie import TokenTrie, descendant_bytes, next_tokens, trie_parents

__all__ = ["VocabIndex", "TailRows", "LongTokens", "vocab_index"]

MAX_SLICES = 256  # character classes with a slice per vocabulary
MAX_INDEXES = 4  # vocabularies indexed at once
LONG = 32  # tokens longer than this many bytes are "long" (LongTokens)
TAIL_ROWS_BYTES = 256 << 20  # the unbounded slices' tails rows of one vocabulary (TailRows)


class VocabIndex:
    """The trie of a vocabulary's tokens, its slices and the context-free walk's tables."""

    def __init__(self, vocab):
        self.vocab = vocab
        self.trie = TokenTrie(vocab)
        self._slices: BoundedCache[tuple, Slice] = BoundedCache(MAX_SLICES)
        self._cfg_tables: tuple | None = None
        self._by_bytes: dict[bytes, int] | None = None
        self._long: LongTokens | None | bool = False  # not built yet
        self._lock = threading.Lock()

    def token_of(self) -> dict[bytes, int]:
        """Token bytes -> the lowest id spelling them (special tokens aside), built once."""
        with self._lock:
            if self._by_bytes is None:
                table: dict[bytes, int] = {}
                for i, data in enumerate(self.vocab.tokens):
                    if data and not self.vocab.special[i]:
                        table.setdefault(data, i)
                self._by_bytes = table
            return self._by_bytes

    def warm_up(self) -> None:
        """Compile the walk and build the slices JSON strings use (once per vocabulary): neither then
        counts against a mask's time bound."""
        self.trie.warm_up()
        self.long_tokens()
        for key in COMMON_CLASSES:
            self.slice_for(key)

    def slice_for(self, key: tuple, lazy: bool = False) -> Slice | None:
        """The (cached) Slice of a character class key (see ``ExprPool.char_class``).

        With ``lazy``, None for a class that few tokens are made of (fewer than 20 lowercase
        letters, e.g. digits or hex): building a slice costs a few ms, more than the walks it saves.
        """
        sl = self._slices.get(key)
        if sl is None and lazy and not _dense(key):
            return None
        return sl if sl is not None else self._slices.setdefault(key, Slice(self.trie, key))

    def long_tokens(self) -> LongTokens | None:
        """The split of the vocabulary at ``LONG`` bytes (None when no token is longer), built once."""
        with self._lock:
            if self._long is False:
                self._long = LongTokens(self.trie, self.vocab) if self.trie.max_token_len > LONG else None
            return self._long

    def cfg_tables(self) -> tuple[np.ndarray, np.ndarray, TailRows]:
        """(descendant bytes per node, first token at or after each node, the tails rows), built once."""
        with self._lock:
            if self._cfg_tables is None:
                trie = self.trie
                self._cfg_tables = (
                    descendant_bytes(trie.node_byte, trie.node_depth),
                    next_tokens(trie.tok_start, trie.tok_end, len(trie.token_ids)),
                    TailRows(self),
                )
            return self._cfg_tables


class LongTokens:
    """The vocabulary split at ``LONG`` bytes: ``short`` (uint32 words) has the bits of the tokens of at
    most LONG bytes; ``skip`` (a trie walk's skipcap with hi 0) leaves out every subtree without a
    longer token, so a walk from a state visits only the paths of the long ones (231 of Llama 3's 128k
    tokens are longer than 32 bytes: runs of spaces, dashes, slashes)."""

    def __init__(self, trie: TokenTrie, vocab):
        self.bytes = LONG
        lengths = np.fromiter(map(len, vocab.tokens), dtype=np.int64, count=len(vocab.tokens))
        special = np.asarray(vocab.special[: len(lengths)], dtype=bool)
        ids = np.flatnonzero((lengths > 0) & (lengths <= LONG) & ~special)
        self.short = np.zeros((vocab.size + 31) // 32, dtype=np.uint32)
        np.bitwise_or.at(self.short, ids >> 5, np.uint32(1) << (ids & 31).astype(np.uint32))
        self.skip = _long_skip(trie.node_depth, trie.tok_start, trie.tok_end, LONG)


@numba.njit(cache=True)
def _long_skip(node_depth, tok_start, tok_end, longest):
    """int32 [nodes]: 0 where no token of the node's subtree is longer than ``longest`` bytes, else the
    largest int32 (a skipcap for a walk with hi 0)."""
    n = len(node_depth)
    deepest = np.zeros(n, np.int32)  # the longest token ending in each node's subtree
    parent = trie_parents(node_depth)
    for j in range(n - 1, -1, -1):
        if tok_end[j] > tok_start[j] and node_depth[j] > deepest[j]:
            deepest[j] = node_depth[j]
        p = parent[j]
        if p >= 0 and deepest[j] > deepest[p]:
            deepest[p] = deepest[j]
    out = np.zeros(n, np.int32)
    for j in range(n):
        if deepest[j] > longest:
            out[j] = np.iinfo(np.int32).max
    return out


class TailRows:
    """The ``Slice.tails`` of one trie's unbounded slices, stacked as rows for the walk (shared by
    every grammar over the trie).

    ``table`` is (epoch, rows): one array of ``capacity`` rows (``TAIL_ROWS_BYTES`` in all), allocated
    zeroed at once (pages no row was written to take no memory) and filled in place, a row per slice
    met, so that adding one copies nothing (growing the array by one row at a time copied all the
    rows before it: 1-2 s stalls once a long-lived process had met a few thousand classes, and memory
    without bound). When every row is taken, a new epoch starts with a new array; walks in flight keep
    the old one. A row number is valid only with its epoch's array: callers read ``table`` once and
    start their own records afresh when the epoch changes (``CompiledCfg._sync_tails``)."""

    def __init__(self, index: VocabIndex, capacity: int | None = None):
        self.index = index
        n_nodes = index.trie.n_nodes
        self.capacity = capacity or max(16, min(4096, TAIL_ROWS_BYTES // max(n_nodes, 1)))
        self.table: tuple[int, np.ndarray] = (0, np.zeros((self.capacity, n_nodes), dtype=np.uint8))
        self._row: dict[tuple, int] = {}  # slice key -> row in this epoch's array
        self._lock = threading.Lock()

    @property
    def epoch(self) -> int:
        return self.table[0]

    def row(self, key: tuple, hi: int, epoch: int) -> int | None:
        """The row of the slice (key, hi) in ``epoch`` when it is unbounded within one token, else -1;
        None when ``epoch`` is over (or this call ended it: every row was taken), and the caller's row
        numbers with it."""
        sl = self.index.slice_for(key, lazy=True)
        if sl is None or sl.bound(hi) < sl.cap:
            return -1
        with self._lock:
            now, rows = self.table
            if now != epoch:
                return None
            r = self._row.get(key)
            if r is None:
                if len(self._row) >= len(rows):  # every row taken: a new array (walks in flight keep theirs)
                    rows = np.zeros_like(rows)
                    self._row = {key: 0}
                    rows[0] = sl.tails
                    self.table = (now + 1, rows)
                    return None
                r = self._row[key] = len(self._row)
                rows[r] = sl.tails  # a row no caller knows yet: written in place
            return r


def _dense(key: tuple) -> bool:
    kind, ranges = key
    if kind != "chars":
        return False
    lower = sum(max(0, min(hi, ord("z")) - max(lo, ord("a")) + 1) for lo, hi in ranges)
    return lower >= 20


_INDEXES: BoundedCache[str, VocabIndex] = BoundedCache(MAX_INDEXES)
_BUILD_LOCK = threading.Lock()  # one build at a time: an index of a 128k vocabulary takes ~1 s


def vocab_index(vocab) -> VocabIndex:
    """The (cached, warmed-up) index of a vocabulary."""
    index = _INDEXES.get(vocab.fingerprint)
    if index is None:
        with _BUILD_LOCK:
            index = _INDEXES.get(vocab.fingerprint)
            if index is None:
                index = VocabIndex(vocab)
                index.warm_up()
                _INDEXES.put(vocab.fingerprint, index)
    return index
