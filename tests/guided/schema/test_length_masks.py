"""Masks of strings under ``pattern`` and ``maxLength``: where the length cannot bind within one token,
positions share their masks (``ExprPool.clamp`` makes the count unbounded in the mask's key), and
every mask is still the exact automaton's answer, token by token, up to and past the length bound."""

from __future__ import annotations

import numpy as np
import pytest
from grammar_oracle import tiny_vocab

from guided.grammar import GrammarCompiler
from guided.schema.compiler import compile_json_schema

TOKENS = [b'"', b"a", b"b", b" ", b"ab", b"a ", b" a", b"ab ", b'a"', b'"', b"\\n", b"\\", b"n", b"\xc3\xa9",
          b"\xc3", b"\xa9", b"  ", b"\\u00", b"01", b'b"']  # fmt: skip
VOCAB = tiny_vocab(TOKENS)
WORDS = "^(?:\\S+\\s+){0,29}\\S+$"


def _compiled(schema):
    return compile_json_schema(GrammarCompiler(VOCAB), schema)


def _bits(mask) -> set[int]:
    return {t for t in range(VOCAB.size) if (int(mask[t >> 5]) >> (t & 31)) & 1}


def _exact(g, state) -> set[int]:
    """The allowed tokens by the exact automaton: one walk per token from the state itself."""
    allowed = {t for t in range(VOCAB.size) if not VOCAB.special[t] and g.next_state(state, t) >= 0}
    return allowed | (set(VOCAB.eos_ids) if g.dfa.is_accepting(state) else set())


def _walk(g, text: bytes) -> list[int]:
    """The states along text, one byte at a time."""
    states = [g.start_state]
    for b in text:
        states.append(g.dfa.step(states[-1], b))
        assert states[-1] >= 0, text[: len(states)]
    return states


@pytest.mark.parametrize(
    ("schema", "text"),
    [
        ({"type": "string", "pattern": WORDS, "maxLength": 40}, (b"ab a " * 8)[:39] + b"b"),
        ({"type": "string", "pattern": WORDS, "maxLength": 40, "minLength": 3}, (b"ab a " * 8)[:39] + b"b"),
        ({"type": "string", "pattern": "^[ab]+( [ab]+)*$", "maxLength": 30}, (b"ab a " * 6)[:29] + b"b"),
        # completions of up to 16 characters: a length of 24 binds (no second word) from the first
        ({"type": "string", "pattern": "^(?:ab){8}(?:(?:ab){8})*$", "maxLength": 24}, b"ab" * 8),
    ],
)
def test_masks_under_a_length_bound_are_exact_at_every_position(schema, text):
    g = _compiled(schema)
    states = _walk(g, b'"' + text)
    for s in states:
        assert _bits(g.mask(s)) == _exact(g, s), (s, len(states))
    if len(text) == schema["maxLength"]:  # at the bound: the closing quote and nothing more
        last = _bits(g.mask(states[-1]))
        assert VOCAB.tokens.index(b'"') in last and VOCAB.tokens.index(b"a") not in last
        assert g.dfa.step(states[-1], ord("a")) < 0


def test_positions_far_from_the_bound_share_one_mask_state():
    """Before: every position of the string made its own mask key (the count in the intersection), and
    each mask's walk built states for every position ahead of it."""
    g = _compiled({"type": "string", "pattern": WORDS, "maxLength": 300})
    states = _walk(g, b'"' + b"abababababab " * 19)  # 247 characters, 19 words
    for s in states:
        g.mask(s)
    keys = {g._mask_key[s] for s in states}
    assert len(states) == 249 and len(keys) <= 12, len(keys)
    assert g.dfa.n_states < 3 * len(states), g.dfa.n_states
    for s in states[::25]:
        assert _bits(g.mask(s)) == _exact(g, s)


def test_a_bound_within_reach_of_a_token_is_kept():
    """A count the pattern's completion could exceed keeps its own masks: maxLength 5 under a pattern
    of words, with tokens of three bytes."""
    g = _compiled({"type": "string", "pattern": WORDS, "maxLength": 5})
    states = _walk(g, b'"ab a')
    for s in states:
        assert _bits(g.mask(s)) == _exact(g, s)
    assert np.any(g.mask(states[-1]))


@pytest.fixture
def split_at_two_bytes(monkeypatch):
    """A vocabulary index whose "long" tokens are those over two bytes (LongTokens), so the split masks
    run on the tiny vocabulary: a new vocabulary (its own fingerprint) gets a new index."""
    from guided.grammar.tokens import vocab_index as vi

    monkeypatch.setattr(vi, "LONG", 2)
    return tiny_vocab([*TOKENS, b"ab a b"])


@pytest.mark.parametrize(
    ("schema", "text"),
    [
        ({"type": "string", "maxLength": 12}, b"ab a ab a ab"),
        ({"type": "string", "pattern": WORDS, "maxLength": 20}, b"ab a ab a ab a ab ab"),
        ({"type": "string", "pattern": "^(?:ab){3}(?:(?:ab){3})*$", "maxLength": 14}, b"ab" * 6),
        ({"type": "array", "items": {"type": "string", "maxLength": 9}, "maxItems": 3}, b'ab a b", "ab'),
    ],
)
def test_split_masks_are_exact(split_at_two_bytes, schema, text):
    """Counters a long token could exhaust but a short one cannot: the short tokens' bits come from the
    expression clamped past two bytes (shared by positions), the long tokens' from a walk of their
    paths from the state itself; every mask equals the exact automaton's."""
    vocab = split_at_two_bytes
    g = compile_json_schema(GrammarCompiler(vocab), schema)
    start = b'["' if schema["type"] == "array" else b'"'
    states = [g.start_state]
    for b in start + text:
        states.append(g.dfa.step(states[-1], b))
        assert states[-1] >= 0
    split = 0
    for s in states:
        m = g.mask(s)
        bits = {t for t in range(vocab.size) if (int(m[t >> 5]) >> (t & 31)) & 1}
        exact = {t for t in range(vocab.size) if not vocab.special[t] and g.next_state(s, t) >= 0}
        exact |= set(vocab.eos_ids) if g.dfa.is_accepting(s) else set()
        assert bits == exact, (s, sorted(bits ^ exact))
        split += g._mask_key[s] < 0
    assert split  # the split path ran


def test_mask_walks_build_only_the_transitions_they_take(split_at_two_bytes):
    """A mask's trie walk builds the transitions it takes, one at a time (``dfa_rows.single``), never
    whole rows: every state a mask makes lies on some token's path from the state masked, where a row
    made a state of every live derivative of each state passed (under a pattern of words, about six
    per step on real vocabularies; under counters and lookarounds, thousands of states and ~0.5 s per
    mask). Masks, split ones among them, are the exact automaton's."""
    vocab = tiny_vocab([*TOKENS, b"ab a b", b"aaaaaaaa", b"        ", b"a b a b", b"\\n\\n\\n", b"\\u00e9"])
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": WORDS, "maxLength": 16},
                                               "t": {"type": "string", "pattern": "^(?!.*ab b)(?=.{1,9}$)(.{1,3} ){1,3}a+$"}},
              "additionalProperties": False}  # fmt: skip
    for doc in (b'{"s": "ab a ab a ab', b'{"t": "ab a a'):
        g = compile_json_schema(GrammarCompiler(vocab), schema, key_order="declared")
        g = getattr(g, "compiled", g)
        states = [g.start_state]
        for b in doc:
            states.append(g.dfa.step(states[-1], b))
            assert states[-1] >= 0
        made = 0
        for s in states:
            before = g.dfa.n_states
            m = g.mask(s)
            new = set(range(before, g.dfa.n_states))
            made += len(new)
            # the states walked from: s, and its expression clamped past the longest token and past
            # the split's two bytes (``_clamped_state``, ``_split_mask``)
            key = g.dfa.state_of(g.pool.clamp(g.dfa.exprs[s], g.trie.max_token_len + 1))
            keys = {s, key, g.dfa.state_of(g.pool.clamp(g.dfa.exprs[key], 3))}
            paths = keys | {
                g.dfa.walk(k, t[:n]) for k in keys for t in vocab.tokens if t for n in range(1, len(t) + 1)
            }
            assert new <= paths, (doc, s, sorted(new - paths))
            bits = {t for t in range(vocab.size) if (int(m[t >> 5]) >> (t & 31)) & 1}
            exact = {t for t in range(vocab.size) if not vocab.special[t] and g.next_state(s, t) >= 0}
            assert bits == exact | (set(vocab.eos_ids) if g.dfa.is_accepting(s) else set())
        assert made  # the masks made states


TREE = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 40, "pattern": WORDS}, "kids": {"type": "array", "items": {"$ref": "#"}}},
    "required": ["name"],
    "additionalProperties": False,
}


def test_context_free_masks_share_a_bounded_string_and_stay_exact():
    """A recursive schema takes the context-free path, whose masks were keyed by the parser
    configuration alone: every position of a bounded string had its own. Clamped lexer states
    (``CfgAutomaton.clamped``) share them, and every mask equals the exact automaton's."""
    from guided.grammar.tokens.compiled_cfg import CompiledCfg

    g = compile_json_schema(GrammarCompiler(VOCAB), TREE, key_order="declared")
    g = getattr(g, "compiled", g)  # the grammar under the run-time check of member names
    assert isinstance(g, CompiledCfg)
    doc = b'{"name":"' + (b"ab a " * 8)[:39] + b'b","kids":[{"name":"ab"}]}'
    states = _walk(g, doc)
    in_string = states[9:49]
    for s in states:
        assert _bits(g.mask(s)) == _exact(g, s), s
    assert len({g._mask_key[s] for s in in_string}) < len(in_string) // 2


@pytest.mark.parametrize("schema", [{"type": "string", "pattern": WORDS},
                                    {"type": "string", "pattern": WORDS, "maxLength": 300}])  # fmt: skip
def test_word_counts_that_cannot_bind_within_a_token_share_masks(schema):
    """A repeat of at least two bytes an iteration cannot bind within a token once its iterations left
    take more bytes than the longest token (``expr_core.rep_span``): the words of a long pattern share
    their masks until the last few. Before: a mask key per word (counters were clamped past the
    longest token's length in iterations, not in bytes; under maxLength, inside its intersection not
    at all)."""
    g = _compiled(schema)
    states = _walk(g, b'"' + b"ab " * 29 + b"b")  # the 30 words the pattern allows
    for s in states:
        g.mask(s)
    keys = {g._mask_key[s] for s in states}
    assert len(states) == 90 and len(keys) <= 12, len(keys)
    for s in states:
        assert _bits(g.mask(s)) == _exact(g, s)
    assert g.dfa.step(states[-1], ord(" ")) < 0 and g.dfa.step(states[-1], ord('"')) >= 0  # no 31st word
