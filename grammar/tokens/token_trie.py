"""TokenTrie: the vocabulary's byte trie, flattened in DFS order, and the numba walk over a DFA.

Tokens sorted by bytes list the trie in DFS preorder, so node i's subtree is nodes [i, end[i]).
The walk keeps one DFA state per depth; a byte with no live transition skips the whole subtree.
Special tokens and empty tokens are not in the trie: they never match text.
"""

from __future__ import annotations

import threading

import numba
import numpy as np

__all__ = ["TokenTrie", "trie_for"]


class TokenTrie:
    """Flattened trie of a Vocabulary's non-special tokens."""

    def __init__(self, vocab):
        self.vocab_size = vocab.size
        self.max_token_len = max((len(t) for t in vocab.tokens), default=0)
        ids = [i for i, t in enumerate(vocab.tokens) if t and not vocab.special[i]]
        ids.sort(key=vocab.tokens.__getitem__)
        self.token_ids = np.asarray(ids, dtype=np.int32)  # tokens in byte order
        toks = [vocab.tokens[i] for i in ids]
        self.sorted_tokens = toks  # for prefix queries (bisect)
        offsets = np.zeros(len(toks) + 1, dtype=np.int64)
        np.cumsum([len(t) for t in toks], out=offsets[1:])
        data = np.frombuffer(b"".join(toks), dtype=np.uint8)
        lcp = np.zeros(len(toks), dtype=np.int64)
        for k in range(1, len(toks)):
            a, b = toks[k - 1], toks[k]
            n = min(len(a), len(b))
            j = 0
            while j < n and a[j] == b[j]:
                j += 1
            lcp[k] = j
        (self.node_byte, self.node_depth, self.node_end, self.tok_start, self.tok_end) = _build(
            data, offsets, lcp
        )
        self.no_skip = np.full(len(self.node_byte), np.iinfo(np.int32).max, dtype=np.int32)
        self._slices: dict = {}
        self._lock = threading.Lock()

    def warm_up(self) -> None:
        """Compile the walk and precompute the slices of the classes JSON strings use (a few ms each,
        once per vocabulary): neither then counts against a mask's time bound."""
        from guided.grammar.tokens.slices import COMMON_CLASSES

        self._compile_walk()
        for key in COMMON_CLASSES:
            self.slice_for(key)

    def _compile_walk(self) -> None:
        """Run the numba walk once on no jobs (JIT compilation or a cache load, outside any mask)."""

        i32, no_jobs = np.int32, np.zeros(0, dtype=np.int32)
        stacks, cont = np.zeros((0, 2), dtype=i32), np.zeros(0, dtype=np.uint8)
        _walk_batch(
            self.node_byte, self.node_depth, self.node_end, self.tok_start, self.tok_end, self.token_ids,
            np.zeros(256, dtype=i32), np.zeros((1, 1), dtype=i32), np.ones(1, dtype=np.uint8), no_jobs, no_jobs,
            stacks, cont, no_jobs, no_jobs, stacks, cont, np.zeros(1, dtype=np.uint32), self.no_skip, -1,
        )  # fmt: skip

    def slice_for(self, key: tuple, lazy: bool = False):
        """The (cached) Slice of a character class key (see ExprPool.char_class).

        With ``lazy``, None for a class that few tokens are made of (fewer than 20 lowercase
        letters, e.g. digits or hex): building a slice costs a few ms, more than the walks it saves.
        """
        from guided.grammar.tokens.slices import Slice

        with self._lock:
            sl = self._slices.get(key)
            if sl is None and lazy and not _dense(key):
                return None
        if sl is None:
            sl = Slice(self, key)
            with self._lock:
                sl = self._slices.setdefault(key, sl)
                while len(self._slices) > 256:
                    self._slices.pop(next(iter(self._slices)))
        return sl

    @property
    def n_nodes(self) -> int:
        return len(self.node_byte)

    def fill(self, mask: np.ndarray, stack: np.ndarray, dfa, skipcap=None, hi: int = -1) -> None:
        """OR into mask (uint32 words) every token whose bytes lead from stack[0] to a live state,
        except in subtrees with ``skipcap[node] <= hi`` (their tokens are already in mask).

        The walk runs in rounds: subtrees under states whose rows are not materialised yet are set
        aside (node range + the states above them), Python materialises those rows, and the next
        round walks the set-aside subtrees: one numba call per round, not one per new state.
        """
        if skipcap is None:
            skipcap = self.no_skip
        width = len(stack)
        jobs_node = np.array([0], dtype=np.int32)
        jobs_end = np.array([self.n_nodes], dtype=np.int32)
        jobs_stack = stack[None, :].copy()
        jobs_cont = np.zeros(1, dtype=np.uint8)
        while len(jobs_node):
            out_node = np.empty(_BATCH, dtype=np.int32)
            out_end = np.empty(_BATCH, dtype=np.int32)
            out_stack = np.empty((_BATCH, width), dtype=np.int32)
            out_cont = np.empty(_BATCH, dtype=np.uint8)
            n_out, n_done = _walk_batch(
                self.node_byte, self.node_depth, self.node_end, self.tok_start, self.tok_end, self.token_ids,
                dfa.class_map, dfa.trans, dfa.computed, jobs_node, jobs_end, jobs_stack, jobs_cont,
                out_node, out_end, out_stack, out_cont, mask, skipcap, hi,
            )  # fmt: skip
            depth = self.node_depth[out_node[:n_out]]
            for s in set(out_stack[np.arange(n_out), depth - 1].tolist()):
                dfa.materialize(s)
            # out holds the set-aside subtrees, then (if it filled up) where the walk stopped
            jobs_node = np.concatenate([out_node[:n_out], jobs_node[n_done:]])
            jobs_end = np.concatenate([out_end[:n_out], jobs_end[n_done:]])
            jobs_stack = np.concatenate([out_stack[:n_out], jobs_stack[n_done:]])
            jobs_cont = np.concatenate([out_cont[:n_out], jobs_cont[n_done:]])


_BATCH = 1024


def _dense(key: tuple) -> bool:
    kind, ranges = key
    if kind != "chars":
        return False
    lower = sum(max(0, min(hi, ord("z")) - max(lo, ord("a")) + 1) for lo, hi in ranges)
    return lower >= 20


_TRIES: dict[str, TokenTrie] = {}
_TRIES_LOCK = threading.Lock()


def trie_for(vocab) -> TokenTrie:
    """The (cached) trie of a vocabulary."""
    key = vocab.fingerprint
    with _TRIES_LOCK:
        trie = _TRIES.get(key)
        if trie is None:
            trie = _TRIES[key] = TokenTrie(vocab)
            trie.warm_up()
            while len(_TRIES) > 4:
                _TRIES.pop(next(iter(_TRIES)))
        return trie


@numba.njit(cache=True)
def _build(data, offsets, lcp):
    n_tok = len(offsets) - 1
    n_nodes = 0
    for k in range(n_tok):
        n_nodes += offsets[k + 1] - offsets[k] - lcp[k]
    node_byte = np.zeros(n_nodes, np.uint8)
    node_depth = np.zeros(n_nodes, np.int32)
    node_end = np.zeros(n_nodes, np.int32)
    tok_start = np.zeros(n_nodes, np.int32)
    tok_end = np.zeros(n_nodes, np.int32)
    path = np.zeros(4096, np.int32)  # node index per depth along the current token
    i = 0
    for k in range(n_tok):
        length = offsets[k + 1] - offsets[k]
        for d in range(lcp[k], length):
            node_byte[i] = data[offsets[k] + d]
            node_depth[i] = d + 1
            path[d] = i
            i += 1
        last = path[length - 1]
        if tok_end[last] == 0:  # first token ending here; duplicates (same bytes) follow it
            tok_start[last] = k
        tok_end[last] = k + 1
    # subtree ends: the next node at the same or a smaller depth
    stack = np.zeros(4096, np.int32)
    top = 0
    for j in range(n_nodes):
        d = node_depth[j]
        while top > 0 and node_depth[stack[top - 1]] >= d:
            node_end[stack[top - 1]] = j
            top -= 1
        stack[top] = j
        top += 1
    while top > 0:
        node_end[stack[top - 1]] = n_nodes
        top -= 1
    return node_byte, node_depth, node_end, tok_start, tok_end


@numba.njit(cache=True, nogil=True)
def _walk_batch(node_byte, node_depth, node_end, tok_start, tok_end, token_ids, class_map, trans, computed,
                jobs_node, jobs_end, jobs_stack, jobs_cont, out_node, out_end, out_stack, out_cont, mask, skipcap,
                hi):  # fmt: skip
    """Walk each job's node range [jobs_node[j], jobs_end[j]) from its stack of states (one per depth).

    A node whose parent state has no row yet sets its remaining siblings aside in out (with the
    stack). Returns (entries in out, jobs finished); when out fills up, the last entry is the
    unfinished rest of the current job and the jobs after it are left for the caller.
    """
    cap = out_node.shape[0]
    width = jobs_stack.shape[1]
    stack = np.empty(width, np.int32)
    ends = np.empty(width, np.int32)  # ends[d]: end of the range the nodes at depth d+1 lie in
    n_out = 0
    for j in range(len(jobs_node)):
        i = jobs_node[j]
        stop = jobs_end[j]
        stack[:] = jobs_stack[j]
        d0 = node_depth[i] if i < stop else 1
        for k in range(d0):
            ends[k] = stop
        if jobs_cont[j]:  # the rest of an interrupted walk: ancestors' ranges end where they end
            a, k = i, d0 - 1
            while k >= 1 and a > 0:
                a -= 1
                if node_depth[a] == k:
                    ends[k] = min(node_end[a], stop)
                    k -= 1
        while i < stop:
            if skipcap[i] <= hi:
                i = node_end[i]
                continue
            d = node_depth[i]
            s = stack[d - 1]
            if computed[s] == 0:
                if n_out >= cap - 1:  # keep the last slot for the rest of this job
                    out_node[n_out] = i
                    out_end[n_out] = stop
                    out_stack[n_out, :] = stack
                    out_cont[n_out] = 1
                    return n_out + 1, j + 1
                out_node[n_out] = i
                out_end[n_out] = ends[d - 1]
                out_stack[n_out, :] = stack
                out_cont[n_out] = 0
                n_out += 1
                i = ends[d - 1]  # the remaining siblings go with the set-aside entry
                continue
            t = trans[s, class_map[node_byte[i]]]
            if t < 0:
                i = node_end[i]
                continue
            stack[d] = t
            ends[d] = node_end[i]
            for k in range(tok_start[i], tok_end[i]):
                tid = token_ids[k]
                mask[tid >> 5] |= np.uint32(1) << np.uint32(tid & 31)
            i += 1
    return n_out, len(jobs_node)


@numba.njit(cache=True)
def trie_parents(node_depth):
    """int64 [nodes]: each node's parent in the preorder trie arrays (-1 for the top level)."""
    n = len(node_depth)
    parent = np.full(n, -1, np.int64)
    path = np.zeros(4097, np.int64)
    for j in range(n):
        d = node_depth[j]
        path[d] = j
        if d > 1:
            parent[j] = path[d - 1]
    return parent
