"""Shortest completions: from a grammar state, a shortest byte string that ends the output validly,
and a spelling of it in tokens.

``shortest_bytes`` searches the lazily built automaton (``StateTable``: ``LazyDFA`` or
``CfgAutomaton``) best-first over byte classes, one byte per step (A*), guided by a lower bound of
the bytes still needed: on the regular engine ``ExprPool.min_len`` (exact for expressions without
intersection or complement), on the context-free one ``CfgAutomaton.bytes_needed`` (the lexemes in
flight, then the fewest bytes the rest of the parse derives). The first accepting state popped is at
the shortest distance, so the bytes are a shortest completion, exact. ``spell`` writes those bytes
with the fewest tokens of the vocabulary (an upper bound on the tokens a completion needs, since
another completion as short or longer in bytes may take fewer tokens); every token spells bytes the
grammar takes, so a matcher accepts them in order and ends accepting.

Among equally short completions the search prefers the smaller bytes (their first ``TIE_BYTES``),
then the automaton's state order. The search is bounded (``max_states`` expanded): past it the
answer is None (unknown), never a guess.
"""

from __future__ import annotations

import bisect
import heapq

import numpy as np

from guided.grammar.tokens.vocab_index import vocab_index

__all__ = ["shortest_bytes", "spell", "byte_of_class", "Completion"]

MAX_STATES = 20_000
TIE_BYTES = 32  # how many leading bytes break ties between equally short completions


class Completion:
    """A shortest completion: ``text`` (bytes, shortest) and ``tokens`` (token ids spelling it with
    as few tokens as the vocabulary allows; EOS not included)."""

    __slots__ = ("text", "tokens")

    def __init__(self, text: bytes, tokens: list[int]):
        self.text = text
        self.tokens = tokens

    def __repr__(self) -> str:
        return f"Completion(text={self.text!r}, tokens={len(self.tokens)})"


def shortest_bytes(dfa, state: int, lower_bound=None, max_states: int = MAX_STATES) -> bytes | None:
    """A shortest byte string leading from ``state`` to an accepting state of ``dfa``, or None when
    more than ``max_states`` states would have to be expanded. ``lower_bound(s)``: bytes needed from
    s at least (admissible; states may be reopened, so it need not be consistent)."""
    h = lower_bound or (lambda s: 0)
    best = {state: 0}
    parent: dict[int, tuple[int, int]] = {}
    # Ties (same bound, same length) go to the smaller bytes so far (their first TIE_BYTES), so the
    # answer does not depend on how the automaton happens to number its states.
    heap = [(h(state), 0, b"", state)]
    expanded = 0
    byte_of: dict[int, int] = {}  # class -> the byte the witness spells it with
    while heap:
        _, g, path, s = heapq.heappop(heap)
        if g > best.get(s, g):
            continue  # a shorter way to s was found after this entry was pushed
        if dfa.accepting[s]:
            out = bytearray()
            while s != state:
                s, b = parent[s]
                out.append(b)
            return bytes(reversed(out))
        expanded += 1
        if expanded > max_states:
            return None
        dfa.materialize(s)
        row = dfa.trans[s]  # (after materialize, which may regrow trans)
        for c in np.flatnonzero(row >= 0).tolist():
            t = int(row[c])
            if g + 1 < best.get(t, g + 2):
                best[t] = g + 1
                if c not in byte_of:
                    byte_of[c] = byte_of_class(dfa, c)
                parent[t] = (s, byte_of[c])
                key = path + bytes((byte_of[c],)) if g < TIE_BYTES else path
                heapq.heappush(heap, (g + 1 + h(t), g + 1, key, t))
    return None  # no accepting state reachable (live automata always reach one)


def byte_of_class(dfa, c: int) -> int:
    """A byte of class c: printable ASCII where the class has one (readable witnesses)."""
    members = np.flatnonzero(dfa.class_map == c)
    printable = members[(members >= 0x20) & (members < 0x7F)]
    return int(printable[0] if len(printable) else members[0])


def spell(vocab, text: bytes) -> list[int]:
    """The fewest tokens of ``vocab`` (special tokens aside) whose bytes concatenate to ``text``;
    ValueError when none do (a byte without a token: byte-level vocabularies have them all)."""
    index = vocab_index(vocab)
    table, ordered = index.token_of(), index.trie.sorted_tokens
    n = len(text)
    cost = [0] + [n + 1] * n  # fewest tokens for text[:i]
    back = [0] * (n + 1)
    for i in range(n):
        if cost[i] > n:
            continue
        for k in range(1, n - i + 1):
            piece = text[i : i + k]
            if piece in table and cost[i] + 1 < cost[i + k]:
                cost[i + k], back[i + k] = cost[i] + 1, k
            j = bisect.bisect_right(ordered, piece)  # a longer token starting with piece comes next
            if j == len(ordered) or not ordered[j].startswith(piece):
                break
    if cost[n] > n:
        raise ValueError(f"the vocabulary cannot spell {text!r} (a byte has no token)")
    out, i = [], n
    while i:
        k = back[i]
        out.append(table[text[i - k : i]])
        i -= k
    return out[::-1]
