"""The context-free mask walk's shortcuts stay exact: vocabulary slices for string bodies (bounded and
unbounded), first-byte DEAD prefill and deferred lexeme-exit masks, each checked against the byte-level
recognizer of a separate automaton on a tiny vocabulary, token by token."""

from __future__ import annotations

import random

import numpy as np
import pytest
from grammar_oracle import byte_splits, check_masks_on_random_paths, tiny_vocab

from guided.grammar.automata.cfg_recognizer import CfgState
from guided.grammar.automata.earley import CfgAutomaton
from guided.grammar.frontends.gbnf_grammar import parse_gbnf
from guided.grammar.frontends.lark_grammar import parse_lark
from guided.grammar.tokens.compiled_cfg import compile_cfg

GRAMMARS = {
    # ESCAPED_STRING's body is an unbounded slice class; NAME a bounded one (at most 3 letters)
    "lark_strings": (
        "lark",
        'start: "[" [item ("," item)*] "]"\nitem: ESCAPED_STRING | NAME | "{" item "}"\n'
        "NAME: /[a-z]{1,3}/\n%import common.ESCAPED_STRING",
    ),
    "gbnf_strings": (
        "gbnf",
        'root ::= "[" (item ("," item)*)? "]"\nitem ::= "\\"" [^"\\\\]* "\\"" | [a-z]{0,3} "=" | "{" item "}"',
    ),
}
TOKENS = sorted(
    set(byte_splits('abcxyz"\\[]{},= é中\n'))
    | {b"ab", b"abc", b"abcd", b"zzzz", b"\xc3\xa9a", b"a\xe4\xb8", b"a\xc3", b'a"', b'",', b'"]', b'\\"'}
    | {b'["', b"[{", b"a=", b'{"', b"ab=", b'"}', b"x\n", b" \xe4"}
)
VOCAB = tiny_vocab(TOKENS)


def _grammar(name):
    kind, text = GRAMMARS[name]
    return parse_lark(text) if kind == "lark" else parse_gbnf(text)


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_sliced_masks_are_exact(name):
    g = _grammar(name)
    compiled = compile_cfg(VOCAB, g)
    oracle = CfgAutomaton(g)
    sliced = set()

    def seen(m):
        cand = compiled.slice_of(m.state)
        if cand is not None:
            sliced.add(cand[1])

    check_masks_on_random_paths(compiled, lambda: CfgState(oracle), TOKENS, VOCAB, random.Random(name), 12, 12, seen)
    assert -1 in sliced  # the unbounded string body was taken through its slice
    assert any(hi > 0 for hi in sliced)  # and a bounded one ([a-z]{..3})


def test_dead_prefill_never_marks_a_live_byte():
    """Configurations prefill DEAD from the lexemes' first-byte sets; every prefilled entry is truly dead."""
    for name in GRAMMARS:
        a = CfgAutomaton(_grammar(name))
        states = CfgState(a)
        for text in ('["ab", {"é中"}', "[abc=, {x=}]", '["a\\"b"]'):
            states.feed_bytes(text.encode())
        prefilled = [(s, c) for s in range(a.n_states) for c in range(a.n_classes) if a.trans[s, c] == -1]
        assert prefilled
        for s, c in prefilled:  # the parser step itself (not the table) says dead
            assert a._step_config(s, c) == -1, (name, s, c)


def test_exit_masks_cover_every_lexeme_end():
    """Pruning reads exit masks: each must contain every byte that ends a lexeme of its terminals."""
    a = CfgAutomaton(_grammar("lark_strings"))
    CfgState(a).feed_bytes(b'["ab", "c')
    a.prepare_exits()
    for i, lex in enumerate(a.pure_lex):
        if lex < 0:
            continue
        bits = a.exit_bytes[i]
        for c in range(a.n_classes):
            y = a._lex_step(lex, c)
            if y >= 0 and a._lex_acc[y]:
                for b in np.flatnonzero(a.class_map == c):
                    assert (int(bits[b >> 6]) >> (b & 63)) & 1, (i, b)
