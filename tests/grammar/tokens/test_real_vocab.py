"""Real vocabularies (trained BPE, Llama 3, Mistral): strings of a language are accepted token by token
after the tokenizer's own encoding; EOS is allowed exactly where the text so far is in the language."""

from __future__ import annotations

import re

import numpy as np
import pytest
from grammar_oracle import check_threads_get_serial_masks
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guided.grammar import GrammarCompiler
from guided.grammar.automata import lazy_dfa
from guided.grammar.tokens import token_trie
from guided.grammar.tokens.compiled import CompiledGrammar

PATTERNS = [
    r'"[^"\\\x00-\x1f]{0,40}"',
    r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?",
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}",
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    r"(apple|banana|cherry|dragonfruit)( (apple|banana|cherry|dragonfruit))*",
    r"[A-Za-z_][A-Za-z0-9_]{0,30}",
    r'\{"name": "[a-z ]{1,20}", "age": [0-9]{1,3}\}',
    r"[\u00c0-\u024f\u4e00-\u9fff ]{1,20}",
    r"(true|false|null)",
]
TEXT = st.characters(exclude_categories=["Cs"])
# a pattern whose automaton has many states (rows a mask walk meets on its first visits)
MANY_STATES = r"[a-z]{2,30}@(example|sample|test)\.(com|org|net)( [A-Z][a-z]{0,12}){0,4}"


def _compiler(vocab, cache={}):  # noqa: B006 - one compiler per vocabulary for the session
    key = vocab.fingerprint
    if key not in cache:
        cache[key] = GrammarCompiler(vocab)
    return cache[key]


def _encode(tokenizer, vocab, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("pattern", PATTERNS)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_strings_are_accepted_token_by_token(any_tokenizer, pattern, data):
    from guided.grammar.vocab import Vocabulary

    vocab = _vocab_of(any_tokenizer, Vocabulary)
    text = data.draw(st.from_regex(re.compile(pattern), fullmatch=True, alphabet=TEXT))
    ids = _encode(any_tokenizer, vocab, text)
    lead = b" " if vocab.add_prefix_space else b""  # SentencePiece's dummy prefix on the first token
    full_pattern = f"( ?)(?:{pattern})" if lead else pattern
    compiled = _compiler(vocab).compile_regex(full_pattern)
    m = compiled.matcher()
    done = b""
    eos = vocab.eos_ids[0]
    for tid in ids:
        allowed = m.allowed_tokens()
        assert allowed[tid], (pattern, text, vocab.tokens[tid])
        assert allowed[eos] == m.is_accepting()
        others = vocab.special.copy()
        others[list(vocab.eos_ids)] = False
        assert not allowed[: vocab.n_tokens][others].any()
        assert m.accept_token(tid)
        done += vocab.tokens[tid]
        try:
            so_far = done.decode()
        except UnicodeDecodeError:
            continue
        assert m.is_accepting() == bool(re.fullmatch(full_pattern, so_far)), so_far
    assert m.is_accepting()
    assert m.accept_token(eos) and m.is_terminated()
    assert not m.accept_token(ids[0] if ids else eos)


_VOCABS: dict[int, object] = {}


def _vocab_of(tokenizer, Vocabulary):
    v = _VOCABS.get(id(tokenizer))
    if v is None:
        v = _VOCABS[id(tokenizer)] = Vocabulary.from_tokenizer(tokenizer)
    return v


def _check_against_brute_force(compiled, state, allowed: np.ndarray) -> None:
    """Every allowed token, and every 5th token of the vocabulary, walked byte by byte in Python."""
    vocab = compiled.vocabulary
    ids = set(np.flatnonzero(allowed).tolist()) | set(range(0, vocab.n_tokens, 5))
    for tid in sorted(ids):
        if tid in vocab.eos_ids:
            expect = compiled.dfa.is_accepting(state)
        else:
            expect = tid < vocab.n_tokens and compiled.next_state(state, tid) >= 0
        assert allowed[tid] == expect, vocab.token_bytes(tid)


@pytest.mark.parametrize(
    "pattern, prefix",
    [
        (r'"[^"\\]{0,300}"', '"abc'),
        (r"[a-z]{2,5}(-[0-9]+)?", "abc"),
        (r'"([^"\\\x00-\x1f]|\\["\\nt]){0,6}"', '"a\\n'),  # a class inside a repeated union
        (r"(.{0,3}x|[0-9]+)", "1"),
    ],
)
def test_trie_walk_equals_brute_force_llama3(vocab_llama3, pattern, prefix, monkeypatch):
    if "x00" in pattern:
        monkeypatch.setattr(token_trie, "_BATCH", 3)  # the walk's set-aside buffer overflows all the time
    compiled = _compiler(vocab_llama3).compile_regex(pattern)
    m = compiled.matcher()
    for ch in prefix:
        _check_against_brute_force(compiled, m.state, m.allowed_tokens())
        assert m.accept_text(ch)


def test_padded_vocabulary_never_allows_padding(vocab_builtin):
    padded = vocab_builtin.padded(vocab_builtin.size + 100)
    m = GrammarCompiler(padded).compile_regex(r"[\s\S]*").matcher()
    allowed = m.allowed_tokens()
    assert allowed.shape == (padded.size,)
    assert not allowed[vocab_builtin.n_tokens :].any()
    ascii_ids = [i for i, t in enumerate(vocab_builtin.tokens) if t and t.isascii() and not vocab_builtin.special[i]]
    assert allowed[ascii_ids].all()
    assert not allowed[np.flatnonzero(vocab_builtin.special)].any() or m.is_accepting()


def test_regular_mask_walks_build_their_transitions_in_compiled_code(vocab_llama3, monkeypatch):
    """The trie walk of a regular grammar builds the transitions it takes itself (``LazyDFA.native_rows``)
    instead of stopping for a round per layer of new states: on random paths through a pattern with
    many states, every mask equals the one built with every row in Python's ``materialize_many``,
    and a mask takes about one walk round instead of three."""
    walk, rounds, computed = token_trie._walk_batch, [], []
    monkeypatch.setattr(token_trie, "_walk_batch", lambda *a: rounds.append(1) or walk(*a))
    compute = CompiledGrammar._compute_mask
    monkeypatch.setattr(CompiledGrammar, "_compute_mask", lambda self, s: computed.append(1) or compute(self, s))
    runs = {}
    for native in (False, True):
        monkeypatch.setattr(lazy_dfa, "NATIVE_ROWS", native)
        compiled = GrammarCompiler(vocab_llama3, cache_size=1).compile_regex(MANY_STATES)
        rng, masks, rounds[:], computed[:] = np.random.default_rng(4), [], [], []
        for _ in range(8):
            m = compiled.matcher()
            for _ in range(12):
                allowed = m.allowed_tokens()
                masks.append(np.packbits(allowed).tobytes())
                options = np.flatnonzero(allowed[: vocab_llama3.size])
                options = options[options != vocab_llama3.eos_ids[0]]
                if not len(options):
                    break
                assert m.accept_token(int(rng.choice(options)))
        runs[native] = (masks, len(rounds) / len(computed))
    assert runs[True][0] == runs[False][0]
    assert runs[False][1] > 2.5 and runs[True][1] < 1.3, (runs[False][1], runs[True][1])  # rounds per mask


def test_threads_filling_one_cold_regular_grammar_get_the_serial_masks(vocab_llama3):
    """Eight threads fill masks of one cold regular grammar at once: the walks that hold the
    automaton build rows in compiled code, the others set them aside for Python, and every mask
    equals the one a lone thread computed on its own copy."""
    rng = np.random.default_rng(7)

    def choose(allowed):
        options = np.flatnonzero(allowed[: vocab_llama3.size])
        options = options[options != vocab_llama3.eos_ids[0]]
        return int(rng.choice(options)) if len(options) else None

    check_threads_get_serial_masks(
        GrammarCompiler(vocab_llama3, cache_size=1).compile_regex(MANY_STATES),
        GrammarCompiler(vocab_llama3, cache_size=1).compile_regex(MANY_STATES),
        lambda m: m.allowed_tokens(), choose, steps=10, join_s=120,
    )
