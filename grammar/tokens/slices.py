"""Slice: precomputed token masks for one character class, so dense masks skip most of the trie walk.

For a class X (e.g. a JSON string body ``[^"\\\\\\x00-\\x1f]``), a token is *pure* when its bytes are a
sequence of X characters, possibly ending inside one; n(t) counts them (a partial one counts). In a
state ``X{lo,hi} rest`` (or a union with such a branch) every pure token with n(t) <= hi is allowed,
whatever ``rest`` is: ``masks[hi]`` holds them all, precomputed once per (vocabulary, X). The trie walk
then skips every subtree made only of such tokens (``skipcap[node] <= hi``) and walks the rest (tokens
leaving X, or longer than hi characters) against the DFA as usual. llguidance's "slices" do the same.
"""

from __future__ import annotations

import numba
import numpy as np

from guided.grammar.automata.expr_pool import ExprPool
from guided.grammar.automata.lazy_dfa import LazyDFA
from guided.grammar.regex_ast import ByteSet, Chars, Repeat
from guided.grammar.tokens.token_trie import trie_parents

__all__ = ["Slice"]

NO_SKIP = np.iinfo(np.int32).max
# JSON string bodies without and with the control-character exclusion (keys as ExprPool.char_class)
COMMON_CLASSES = (
    ("chars", ((0x20, 0x21), (0x23, 0x5B), (0x5D, 0x10FFFF))),
    ("chars", ((0x00, 0x21), (0x23, 0x5B), (0x5D, 0x10FFFF))),
)


class Slice:
    """Pure-token masks and subtree skip caps of one character class over one trie.

    ``tails`` serves states reached in the middle of a token: ``tails[node]`` is 1 when every path
    from that node down (its own byte included) spells X-characters, the last possibly cut short, so
    in a state with an unbounded ``X* rest`` lexeme in flight the node's whole subtree is allowed.
    """

    def __init__(self, trie, key: tuple):
        kind, ranges = key
        item = Chars(ranges) if kind == "chars" else ByteSet(ranges)
        pool = ExprPool()
        dfa = LazyDFA(pool, pool.intern(Repeat(item, 0, None)), max_states=64)
        s = 0
        while s < dfa.n_states:  # X* is tiny (a few partial-character states): materialise it all
            dfa.materialize(s)
            s += 1
        self.cap = trie.max_token_len + 1  # hi >= cap behaves as unbounded within one token
        self.skipcap, self.masks = _scan(
            trie.node_byte, trie.node_depth, trie.node_end, trie.tok_start, trie.tok_end, trie.token_ids,
            dfa.class_map, dfa.trans, self.cap, (trie.vocab_size + 31) // 32,
        )  # fmt: skip
        self.tails = _tails(trie.node_byte, trie.node_depth, dfa.class_map, dfa.trans[: dfa.n_states])

    def mask(self, hi: int) -> np.ndarray:
        """Pure tokens of at most hi characters (hi < 0: unbounded)."""
        return self.masks[self.cap if hi < 0 or hi > self.cap else hi]

    def bound(self, hi: int) -> int:
        return self.cap if hi < 0 or hi > self.cap else hi


@numba.njit(cache=True)
def _scan(node_byte, node_depth, node_end, tok_start, tok_end, token_ids, class_map, trans, cap, words):
    n = len(node_byte)
    nx = np.full(n, -1, np.int32)  # characters along the path when it is pure, else -1
    parent = np.full(n, -1, np.int32)
    path = np.zeros(4097, np.int32)
    state = np.zeros(4097, np.int32)
    count = np.zeros(4097, np.int32)
    i = 0
    while i < n:
        d = node_depth[i]
        parent[i] = path[d - 1] if d > 1 else -1
        path[d] = i
        t = trans[state[d - 1], class_map[node_byte[i]]]
        if t < 0:
            i = node_end[i]  # the whole subtree leaves X: not pure
            continue
        c = count[d - 1] + (1 if t == 0 else 0)  # back in the start state: a character completed
        state[d] = t
        count[d] = c
        nx[i] = c if t == 0 else c + 1
        i += 1
    # subtree aggregates, children before parents (reverse DFS preorder)
    sub_max = np.zeros(n, np.int32)
    pure = np.ones(n, np.bool_)
    for j in range(n - 1, -1, -1):
        if nx[j] < 0:
            pure[j] = False
        elif tok_end[j] > tok_start[j] and nx[j] > sub_max[j]:
            sub_max[j] = nx[j]
        p = parent[j]
        if p >= 0:
            if sub_max[j] > sub_max[p]:
                sub_max[p] = sub_max[j]
            if not pure[j]:
                pure[p] = False
    skipcap = np.full(n, np.iinfo(np.int32).max, np.int32)
    masks = np.zeros((cap + 1, words), np.uint32)
    for j in range(n):
        if pure[j]:
            skipcap[j] = sub_max[j]
        if nx[j] >= 0 and nx[j] <= cap:
            for k in range(tok_start[j], tok_end[j]):
                tid = token_ids[k]
                masks[nx[j], tid >> 5] |= np.uint32(1) << np.uint32(tid & 31)
    for h in range(1, cap + 1):
        masks[h] |= masks[h - 1]
    return skipcap, masks


@numba.njit(cache=True)
def _tails(node_byte, node_depth, class_map, trans):
    """uint8 [nodes]: 1 where every path from the node down, from the X* start state (a character
    boundary), stays live in X*; children before parents (reverse preorder), per DFA state."""
    n, m = len(node_byte), trans.shape[0]
    good = np.ones((n, m), np.bool_)  # good[j, q]: every path from j down is live from state q
    parent = trie_parents(node_depth)
    for j in range(n - 1, -1, -1):
        c = class_map[node_byte[j]]
        for q in range(m):
            if trans[q, c] < 0:
                good[j, q] = False
        p = parent[j]
        if p >= 0:  # j's row is final here: all of its children came before it
            cp = class_map[node_byte[p]]
            for q in range(m):
                t = trans[q, cp]
                if t >= 0 and not good[j, t]:
                    good[p, q] = False
    out = np.zeros(n, np.uint8)
    for j in range(n):
        out[j] = good[j, 0]
    return out
