"""Language questions about regex ASTs, decided on their byte automata at compile time.

For compilers that lower to ``regex_ast`` (JSON Schema: ``oneOf`` exactness, ``patternProperties``
overlap, contradictory ``allOf``): emptiness, inclusion, equivalence, membership, and an eagerly
built, minimised DFA for when an explicit automaton is needed. All are bounded (``LimitError``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from guided.errors import LimitError
from guided.grammar.automata.expr_pool import EMPTY_ID, ExprPool
from guided.grammar.automata.lazy_dfa import DEAD, LazyDFA
from guided.grammar.bounded_cache import BoundedCache
from guided.grammar.regex_ast import Node, difference

__all__ = ["is_empty", "is_subset", "equivalent", "interned", "matches", "ExplicitDFA", "to_dfa"]


def is_empty(node: Node, budget: int = 200_000) -> bool:
    """Whether the node's language has no string."""
    pool = ExprPool()
    return not pool.is_live(pool.intern(node), budget)


def is_subset(a: Node, b: Node, budget: int = 200_000) -> bool:
    """Whether every string of a is in b."""
    return is_empty(difference(a, b), budget)


def equivalent(a: Node, b: Node, budget: int = 200_000) -> bool:
    return is_subset(a, b, budget) and is_subset(b, a, budget)


_INTERNED: BoundedCache[Node, tuple[ExprPool, int]] = BoundedCache(256)


def _alone(node: Node) -> tuple[ExprPool, int]:
    pool = ExprPool()
    return pool, pool.intern(node)


def interned(node: Node) -> tuple[ExprPool, int]:
    """A pool holding ``node`` and its id there, shared by the callers asking about the same node
    (the last 256): its derivatives are kept for the next question (a name language, a format's)."""
    return _INTERNED.get_or_create(node, lambda: _alone(node))


def matches(node: Node, text: str | bytes) -> bool:
    """Whether the whole text (a ``str`` as UTF-8, lone surrogates matching nothing) is in the node's
    language, through byte derivatives in the node's shared pool (``interned``)."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    pool, e = interned(node)
    for b in data:
        e = pool.deriv(e, b)
        if e == EMPTY_ID:
            return False
    return bool(pool.nullable[e])


@dataclass(frozen=True)
class ExplicitDFA:
    """A complete, trimmed, minimal byte DFA: ``trans[state, class_map[byte]]`` (-1: dead); start 0."""

    trans: np.ndarray  # int32 [states, classes]
    class_map: np.ndarray  # int32 [256]
    accepting: np.ndarray  # bool [states]

    @property
    def n_states(self) -> int:
        return len(self.accepting)

    def accepts(self, data: bytes) -> bool:
        s = 0
        for b in data:
            s = int(self.trans[s, self.class_map[b]])
            if s < 0:
                return False
        return bool(self.accepting[s])


def to_dfa(node: Node, max_states: int = 100_000) -> ExplicitDFA:
    """Materialise every state (only states that can still reach acceptance) and minimise (Moore)."""
    pool = ExprPool()
    dfa = LazyDFA(pool, pool.intern(node), max_states=max_states)
    s = 0
    while s < dfa.n_states:
        dfa.materialize(s)
        s += 1
        if s > max_states:
            raise LimitError(f"explicit DFA exceeded {max_states} states")
    n = dfa.n_states
    trans = dfa.trans[:n].copy()
    accepting = dfa.accepting[:n].astype(bool)
    return _minimise(trans, dfa.class_map.copy(), accepting)


def _minimise(trans: np.ndarray, class_map: np.ndarray, accepting: np.ndarray) -> ExplicitDFA:
    # Moore's partition refinement, vectorised: a state's signature is its block and its successors' blocks.
    n = len(accepting)
    block = accepting.astype(np.int64)
    while True:
        succ = np.where(trans >= 0, block[np.maximum(trans, 0)], -1)  # [states, classes]
        sig = np.concatenate([block[:, None], succ], axis=1)
        _, new = np.unique(sig, axis=0, return_inverse=True)
        new = new.reshape(-1)
        if len(np.unique(new)) == len(np.unique(block)):
            break
        block = new
    # renumber so the start state's block is 0, in first-seen order
    order = {}
    for s in range(n):
        order.setdefault(int(block[s]), len(order))
    ids = np.array([order[int(b)] for b in block], dtype=np.int32)
    m = len(order)
    out = np.full((m, trans.shape[1]), DEAD, dtype=np.int32)
    acc = np.zeros(m, dtype=bool)
    for s in range(n):
        out[ids[s]] = np.where(trans[s] >= 0, ids[np.maximum(trans[s], 0)], DEAD)
        acc[ids[s]] = accepting[s]
    return ExplicitDFA(out, class_map, acc)
