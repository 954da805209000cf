"""VocabIndex: what token masks need of one vocabulary, built once and shared by every grammar over it.

The byte trie and its numba walk (``token_trie``), the slices of character classes (``slices``: built
on first use, a few ms each, the JSON string-body classes at once), and the tables of the
context-free walk (descendant bytes per node, the first token at or after each node, and the rows of
``Slice.tails`` of unbounded slices). ``vocab_index(vocabulary)`` returns the cached index of a
vocabulary (a few vocabularies at a time, keyed by fingerprint).
"""

from __future__ import annotations

import threading

import numpy as np

from guided.grammar.bounded_cache import BoundedCache
from guided.grammar.tokens.slices import COMMON_CLASSES, Slice
from guided.grammar.tokens.token_trie import TokenTrie, descendant_bytes, next_tokens

__all__ = ["VocabIndex", "TailRows", "vocab_index"]

MAX_SLICES = 256  # character classes with a slice per vocabulary
MAX_INDEXES = 4  # vocabularies indexed at once


class VocabIndex:
    """The trie of a vocabulary's tokens, its slices and the context-free walk's tables."""

    def __init__(self, vocab):
        self.vocab = vocab
        self.trie = TokenTrie(vocab)
        self._slices: BoundedCache[tuple, Slice] = BoundedCache(MAX_SLICES)
        self._cfg_tables: tuple | None = None
        self._by_bytes: dict[bytes, int] | None = None
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


class TailRows:
    """The ``Slice.tails`` of one trie's unbounded slices, stacked as rows for the walk (shared by
    every grammar over the trie; rows are only appended, so an older array stays valid for its rows)."""

    def __init__(self, index: VocabIndex):
        self.index = index
        self.rows = np.zeros((1, index.trie.n_nodes), dtype=np.uint8)  # one unused row until the first slice
        self._row: dict[tuple, int] = {}  # slice key -> row
        self._lock = threading.Lock()

    def row(self, key: tuple, hi: int) -> int:
        """The row of the slice (key, hi) when it is unbounded within one token, else -1."""
        sl = self.index.slice_for(key, lazy=True)
        if sl is None or sl.bound(hi) < sl.cap:
            return -1
        with self._lock:
            r = self._row.get(key)
            if r is None:
                r = self._row[key] = len(self._row)
                rows = np.zeros((max(r + 1, len(self.rows)), self.index.trie.n_nodes), dtype=np.uint8)
                rows[:r] = self.rows[:r]
                rows[r] = sl.tails
                self.rows = rows
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
