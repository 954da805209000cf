"""Masks are exact: a token is allowed iff its bytes extend the text to a prefix of the language.

The oracle is interegular's character FSM, an implementation independent of our byte automata.
"""

from __future__ import annotations

import re

import numpy as np
from grammar_oracle import ALPHABET, OTHERS, PrefixOracle, byte_splits, fsm_of, tiny_vocab
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guided.grammar import GrammarCompiler, parse_regex
from guided.grammar.regex_ast import complement, difference, intersect

CHARS = "".join(ALPHABET)


def _regexes() -> st.SearchStrategy[str]:
    atom = st.one_of(
        st.sampled_from(ALPHABET),
        st.sampled_from(["[ab]", "[^a]", "[a-c]", "[^é中]", ".", "[中é]"]),
    )

    def extend(inner):
        quant = st.sampled_from(["", "*", "+", "?", "{2}", "{0,2}", "{1,3}"])
        group = st.tuples(inner, quant).map(lambda t: f"({t[0]}){t[1]}" if t[1] else t[0])
        cat = st.lists(group, min_size=1, max_size=3).map("".join)
        return st.one_of(cat, st.tuples(cat, cat).map(lambda t: f"{t[0]}|{t[1]}"))

    return st.recursive(atom, extend, max_leaves=6)


VOCAB_TOKENS = sorted(set(byte_splits(CHARS + "".join(OTHERS))) | {b"ab", b"ba", b"abc", "é中".encode(), b"aa", b"ca"})
VOCAB = tiny_vocab(VOCAB_TOKENS)
COMPILER = GrammarCompiler(VOCAB)
EOS_ID = VOCAB.eos_ids[0]
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check_path(compiled, oracle, choices):
    """Walk the grammar by allowed tokens chosen by `choices`, checking every mask against the oracle."""
    m = compiled.matcher()
    text = b""
    for choice in choices:
        allowed = m.allowed_tokens()
        for tid, tok in enumerate(VOCAB_TOKENS):
            assert allowed[tid] == oracle.is_prefix(text + tok), (text, tok)
        assert allowed[EOS_ID] == oracle.accepts(text), text
        assert not allowed[EOS_ID - 1], "special tokens are never allowed"
        assert m.is_accepting() == oracle.accepts(text)
        options = np.flatnonzero(allowed[: len(VOCAB_TOKENS)])
        if len(options) == 0:
            return
        tid = int(options[choice % len(options)])
        assert m.accept_token(tid)
        text += VOCAB_TOKENS[tid]


@SETTINGS
@given(pattern=_regexes(), choices=st.lists(st.integers(0, 1000), max_size=8))
def test_masks_match_oracle(pattern, choices):
    compiled = COMPILER.compile_regex(pattern)
    _check_path(compiled, PrefixOracle(fsm_of(pattern)), choices)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=_regexes(), b=_regexes(), op=st.sampled_from(["and", "not", "diff"]), choices=st.lists(st.integers(0, 1000), max_size=6))
def test_boolean_operations_match_oracle(a, b, op, choices):
    fa, fb = fsm_of(a), fsm_of(b)
    na, nb = parse_regex(a), parse_regex(b)
    if op == "and":
        node, fsm = intersect(na, nb), fa & fb
    elif op == "not":
        node, fsm = complement(na), fa.everythingbut()
    else:
        node, fsm = difference(na, nb), fa - fb
    if fsm.empty():
        return  # an empty language is a compile error, tested elsewhere
    _check_path(COMPILER.compile_ast(node), PrefixOracle(fsm), choices)


@SETTINGS
@given(pattern=_regexes(), data=st.data())
def test_acceptance_agrees_with_python_re(pattern, data):
    compiled = COMPILER.compile_regex(pattern)
    text = data.draw(st.one_of(st.from_regex(re.compile(pattern), fullmatch=True), st.text(CHARS, max_size=6)))
    m = compiled.matcher()
    ok = m.accept_text(text) and m.is_accepting()
    assert ok == bool(re.fullmatch(pattern, text)), text
