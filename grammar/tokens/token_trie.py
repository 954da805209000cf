"""TokenTrie: the vocabulary's byte trie, flattened in DFS order, and the numba walk over a DFA.

Tokens sorted by bytes list the trie in DFS preorder, so node i's subtree is nodes [i, end[i]).
The walk keeps one DFA state per depth; a byte with no live transition skips the whole subtree.
Special tokens and empty tokens are not in the trie: they never match text.
"""

from __future__ import annotations

import numba
import numpy as np

from guided.grammar.automata.derivative_classes import MAX_HEADS
from guided.grammar.automata.dfa_rows import UNKNOWN, single

__all__ = ["TokenTrie", "trie_parents", "descendant_bytes", "next_tokens"]


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

    def warm_up(self) -> None:
        """Run the numba walk once on no jobs (JIT compilation or a cache load, outside any mask)."""
        i32, no_jobs = np.int32, np.zeros(0, dtype=np.int32)
        stacks, cont = np.zeros((0, 2), dtype=i32), np.zeros(0, dtype=np.uint8)
        i64, u8 = np.zeros(4, dtype=np.int64), np.zeros(1, dtype=np.uint8)
        _walk_batch(
            self.node_byte, self.node_depth, self.node_end, self.tok_start, self.tok_end, self.token_ids,
            np.zeros(256, dtype=i32), np.zeros((1, 1), dtype=i32), np.ones(1, dtype=np.uint8), no_jobs, no_jobs,
            stacks, cont, no_jobs, no_jobs, stacks, cont, np.zeros(1, dtype=np.uint32), self.no_skip, -1,
            False, 0, i64, i64, MAX_HEADS, np.zeros(1, dtype=i32), i64, u8, i64, -1, 0, i64,
        )  # fmt: skip

    @property
    def n_nodes(self) -> int:
        return len(self.node_byte)

    def fill(self, mask: np.ndarray, stack: np.ndarray, dfa, skipcap=None, hi: int = -1) -> None:
        """OR into mask (uint32 words) every token whose bytes lead from stack[0] to a live state,
        except in subtrees with ``skipcap[node] <= hi`` (their tokens are already in mask).

        The walk builds the transitions it takes, one at a time (``dfa_rows.single``), never whole
        rows: a row makes a state of every live derivative of its state (each with its liveness, a
        search where an intersection or complement is below), where the walk follows only the bytes
        the vocabulary's tokens continue with there. (Under a pattern with counters and lookarounds,
        ``^(?=.{1,255}$)((.{1,63}\\.){1,127}[a-z0-9-]+)$``, rows made ~3,000 states per mask, ~0.3-0.8 s;
        the transitions taken ~600, ~40 ms.)

        The walk runs in rounds: subtrees under transitions it could not build (a search past its first
        budget, full arrays, the round's budget) are set aside (node range + the states above them),
        Python builds those transitions (``LazyDFA.build_transitions``), and the next round walks the
        set-aside subtrees: one numba call per round, not one per new state.
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
            with dfa.native_rows() as a:  # transitions built by the walk itself, where it may
                n_out, n_done, a.arena = _walk_batch(
                    self.node_byte, self.node_depth, self.node_end, self.tok_start, self.tok_end, self.token_ids,
                    a.class_of, a.trans, a.computed, jobs_node, jobs_end, jobs_stack, jobs_cont,
                    out_node, out_end, out_stack, out_cont, mask, skipcap, hi,
                    a.native, _STEP_BUDGET, a.arena, a.reps, MAX_HEADS, a.column, a.exprs, a.accepting,
                    a.counts, a.deadline, a.search_budget, a.rep_bytes,
                )  # fmt: skip
            if not n_out:  # nothing set aside: every job was walked (most walks, in one round)
                break
            above = out_stack[np.arange(n_out), self.node_depth[out_node[:n_out]] - 1]
            if a.native:  # what the walk could not build here: those transitions alone, searched in full
                dfa.build_transitions(above.tolist(), self.node_byte[out_node[:n_out]].tolist())
            else:  # the walk built nothing (another thread holds the automaton): rows, a layer per round
                dfa.materialize_many(np.unique(above).tolist())
            # out holds the set-aside subtrees, then (if it filled up) where the walk stopped
            jobs_node = np.concatenate([out_node[:n_out], jobs_node[n_done:]])
            jobs_end = np.concatenate([out_end[:n_out], jobs_end[n_done:]])
            jobs_stack = np.concatenate([out_stack[:n_out], jobs_stack[n_done:]])
            jobs_cont = np.concatenate([out_cont[:n_out], jobs_cont[n_done:]])


_BATCH = 1024
_STEP_BUDGET = 16384  # transitions one walk round builds at most (the time bound is checked between rounds)


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
                hi, native, budget, arena, reps, max_heads, column, exprs, accepting, counts, deadline,
                search_budget, rep_bytes):  # fmt: skip
    """Walk each job's node range [jobs_node[j], jobs_end[j]) from its stack of states (one per depth).

    A node whose transition from its parent's state is not known sets its remaining siblings aside
    in out (with the stack), unless ``native`` (the caller holds the automaton and its arena:
    ``LazyDFA.native_rows``) and the transition is built here (``dfa_rows.single``, a byte per class
    in ``rep_bytes``; at most ``budget`` of them): a transition it cannot build (full arrays, a search
    past its first budget, the deadline) is set aside the same way, and the caller builds it. Returns
    (entries in out, jobs finished, the arena: grown here when it was full); when out fills up, the
    last entry is the unfinished rest of the current job and the jobs after it are left for the caller.
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
            c = class_map[node_byte[i]]
            known = trans[s, c] != UNKNOWN
            if not known and native and budget > 0 and s < len(computed):
                budget -= 1
                _, arena = single(arena, s, c, rep_bytes[c], reps, max_heads, column, exprs, trans, computed,
                                  accepting, counts, deadline, search_budget)  # fmt: skip
                known = trans[s, c] != UNKNOWN
            if not known:
                if n_out >= cap - 1:  # keep the last slot for the rest of this job
                    out_node[n_out] = i
                    out_end[n_out] = stop
                    out_stack[n_out, :] = stack
                    out_cont[n_out] = 1
                    return n_out + 1, j + 1, arena
                out_node[n_out] = i
                out_end[n_out] = ends[d - 1]
                out_stack[n_out, :] = stack
                out_cont[n_out] = 0
                n_out += 1
                i = ends[d - 1]  # the remaining siblings go with the set-aside entry
                continue
            t = trans[s, c]
            if t < 0:
                i = node_end[i]
                continue
            stack[d] = t
            ends[d] = node_end[i]
            for k in range(tok_start[i], tok_end[i]):
                tid = token_ids[k]
                mask[tid >> 5] |= np.uint32(1) << np.uint32(tid & 31)
            i += 1
    return n_out, len(jobs_node), arena


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


@numba.njit(cache=True)
def descendant_bytes(node_byte, node_depth):
    """uint64 [nodes, 4]: the bytes of each node's strict descendants, as 256-bit masks."""
    n = len(node_byte)
    desc = np.zeros((n, 4), np.uint64)
    parent = trie_parents(node_depth)
    for j in range(n - 1, -1, -1):
        p = parent[j]
        if p >= 0:
            b = node_byte[j]
            desc[p, b >> 6] |= np.uint64(1) << np.uint64(b & 63)
            for w in range(4):
                desc[p, w] |= desc[j, w]
    return desc


@numba.njit(cache=True)
def next_tokens(tok_start, tok_end, n_tokens):
    """int32 [nodes + 1]: the index (in token_ids) of the first token ending at or after each node in
    preorder; tokens are in byte order, so a subtree i's tokens are next[i]:next[node_end[i]]."""
    n = len(tok_start)
    nxt = np.full(n + 1, n_tokens, np.int32)
    for i in range(n - 1, -1, -1):
        nxt[i] = tok_start[i] if tok_end[i] > tok_start[i] else nxt[i + 1]
    return nxt
