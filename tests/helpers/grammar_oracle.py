"""Test helpers: an independent exactness oracle (interegular's character FSMs, not our byte automata)
and tiny hand-built vocabularies."""

from __future__ import annotations

import itertools
import threading

import interegular
import numpy as np

from guided.grammar.automata.expr_pool import EMPTY_ID, ExprPool
from guided.grammar.vocab import Vocabulary

ALPHABET = ["a", "b", "c", "é", "中"]
# Characters no generated regex names: they stand for "anything else" when a token ends mid-character.
OTHERS = ["ê", "丮", "z"]


def fsm_of(pattern: str):
    return interegular.parse_pattern(pattern).to_fsm()


class PrefixOracle:
    """Is a byte string a prefix of some string in the FSM's language? Brute force over characters."""

    def __init__(self, fsm):
        self.fsm = fsm
        self.live = {s for s in fsm.states if fsm.islive(s)}

    def _walk(self, text: str):
        fsm, state = self.fsm, self.fsm.initial
        for ch in text:
            sym = fsm.alphabet[ch] if ch in fsm.alphabet else fsm.alphabet[interegular.fsm.anything_else]
            state = fsm.map.get(state, {}).get(sym)
            if state is None:
                return None
        return state

    def is_prefix(self, data: bytes) -> bool:
        for cut in range(len(data), max(len(data) - 4, -1), -1):
            try:
                text = data[:cut].decode("utf-8")
            except UnicodeDecodeError:
                continue
            rest = data[cut:]
            if not rest:
                state = self._walk(text)
                return state is not None and state in self.live
            candidates = [ch for ch in ALPHABET + OTHERS if ch.encode().startswith(rest)]
            candidates += self._other_chars(rest)
            return any(self.is_prefix((text + ch).encode()) for ch in candidates)
        return False

    def _other_chars(self, rest: bytes) -> list[str]:
        """A character starting with ``rest`` that the FSM does not name (it stands for all such)."""
        need = {0xC0: 2, 0xE0: 3, 0xF0: 4}.get(rest[0] & 0xF0 if rest[0] >= 0xE0 else rest[0] & 0xE0, 0)
        if not need or len(rest) >= need or any(b & 0xC0 != 0x80 for b in rest[1:]):
            return []
        for tail in itertools.product(range(0x80, 0xC0), repeat=need - len(rest)):
            try:
                ch = (rest + bytes(tail)).decode("utf-8")
            except UnicodeDecodeError:
                continue
            if ch not in self.fsm.alphabet:
                return [ch]
        return []

    def accepts(self, data: bytes) -> bool:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return False
        state = self._walk(text)
        return state is not None and state in self.fsm.finals



EOS = "<eos>"


def tiny_vocab(tokens: list[bytes], size: int | None = None) -> Vocabulary:
    """Vocabulary of the given token bytes plus a special EOS (last id) and a special `<pad>`."""
    toks = list(tokens) + [b"", b""]
    special = np.zeros(len(toks), dtype=np.bool_)
    special[-2:] = True
    return Vocabulary(
        tokens=tuple(toks), special=special, eos_ids=(len(toks) - 1,), size=size or len(toks),
        special_text={len(toks) - 2: "<pad>", len(toks) - 1: EOS},
    )  # fmt: skip


def byte_splits(text: str) -> list[bytes]:
    """Every character's UTF-8 bytes, whole and split at every inner byte."""
    out = []
    for ch in text:
        b = ch.encode()
        out.append(b)
        for k in range(1, len(b)):
            out.extend([b[:k], b[k:]])
    return out


def boolean_regexes(extra_leaves=(), max_leaves: int = 7, wide_alts: bool = False):
    """Hypothesis strategy: small regex ASTs over a few leaves with concatenation, union,
    intersection, complement and bounded/unbounded repetition (``wide_alts``: also unions of 4-6
    items, which the pool factors)."""
    from hypothesis import strategies as st

    from guided.grammar.regex_ast import alt, any_char, chars, complement, intersect, literal, repeat, seq

    leaves = st.sampled_from(
        [literal("a"), literal("b"), literal("ab"), chars([(0x61, 0x63)]), *extra_leaves, any_char(),
         literal("é"), repeat(literal("a"))]
    )  # fmt: skip

    def node(inner):
        pair = st.tuples(inner, inner)
        wide = [st.lists(inner, min_size=4, max_size=6).map(lambda xs: alt(*xs))] if wide_alts else []
        return st.one_of(
            pair.map(lambda t: seq(*t)),
            pair.map(lambda t: alt(*t)),
            *wide,
            pair.map(lambda t: intersect(*t)),
            inner.map(complement),
            st.tuples(inner, st.sampled_from([(0, None), (1, None), (0, 1), (2, 3), (3, 3)])).map(
                lambda t: repeat(t[0], *t[1])
            ),
        )

    return st.recursive(leaves, node, max_leaves=max_leaves)


def allowed_tokens(matcher, vocab) -> np.ndarray:
    """The matcher's current mask as one bool per token id."""
    bm = np.zeros((1, vocab.bitmask_words), dtype=np.int32)
    matcher.fill_bitmask(bm, 0)
    return np.unpackbits(bm[0].view(np.uint8), bitorder="little").astype(bool)[: vocab.size]


def check_masks_on_random_paths(compiled, new_state, tokens, vocab, rng, walks: int, steps: int, seen=None):
    """Along ``walks`` random paths of up to ``steps`` tokens through ``compiled``'s matcher, every
    token's mask bit equals whether the oracle (``new_state()``: a byte-level recognizer with
    ``copy``/``feed_bytes``/``is_accepting``) takes its bytes, and EOS equals acceptance;
    ``seen(matcher)`` is called at each state before its mask."""
    for _ in range(walks):
        m, state = compiled.matcher(), new_state()
        for _ in range(steps):
            if seen is not None:
                seen(m)
            allowed = allowed_tokens(m, vocab)
            for tid, tok in enumerate(tokens):
                assert allowed[tid] == state.copy().feed_bytes(tok), (m.state, tok)
            assert allowed[vocab.eos_ids[0]] == state.is_accepting()
            options = np.flatnonzero(allowed[: len(tokens)])
            if not len(options):
                break
            tid = int(rng.choice(options))
            assert m.accept_token(tid) and state.feed_bytes(tokens[tid])


def check_threads_get_serial_masks(serial, shared, allowed_of, choose, walks: int = 8, steps: int = 12,
                                   join_s: float = 60) -> None:  # fmt: skip
    """Record ``walks`` random paths of up to ``steps`` tokens through ``serial``'s matcher (at each
    step the mask ``allowed_of(matcher)`` and the token ``choose(mask)`` picks, None to stop), then
    replay them at once, one thread each, on ``shared`` (another copy of the grammar, cold): every
    mask equals the one recorded."""
    paths = []
    for _ in range(walks):
        m, path = serial.matcher(), []
        for _ in range(steps):
            allowed = allowed_of(m)
            tid = choose(allowed)
            if tid is None:
                break
            path.append((allowed, tid))
            assert m.accept_token(tid)
        paths.append(path)
    errors: list = []

    def run(path):
        try:
            m = shared.matcher()
            for allowed, tid in path:
                assert np.array_equal(allowed_of(m), allowed)
                assert m.accept_token(tid)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(p,)) for p in paths]
    for t in threads:
        t.start()
    for t in threads:
        t.join(join_s)
    assert not any(t.is_alive() for t in threads) and not errors, errors[:1]

def live_by_whole_search(pool: ExprPool, e: int) -> bool:
    """The reference: breadth-first over every derivative of e (no structure), live iff a nullable
    state is reachable."""
    reps = pool.classes_of(e)[1]
    seen, frontier = {e}, [e]
    while frontier:
        nxt = []
        for x in frontier:
            if pool.nullable[x]:
                return True
            for b in reps:
                y = pool.deriv(x, b)
                if y != EMPTY_ID and y not in seen:
                    seen.add(y)
                    nxt.append(y)
        frontier = nxt
    return False


BOOL_REGEX = boolean_regexes()
