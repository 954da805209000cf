"""Mid-token slices stay exact: below a configuration with an unbounded string-body lexeme in flight,
the mask walk ORs in whole trie subtrees that spell only body characters instead of walking them.
Masks are checked against the byte-level recognizer of a separate automaton, token by token, along
random paths on one shared compiled grammar (so inside-the-lexeme records are made, then reused)."""

from __future__ import annotations

import random

import pytest
from grammar_oracle import byte_splits, check_masks_on_random_paths, tiny_vocab

from guided.grammar.automata.cfg_recognizer import CfgState
from guided.grammar.automata.earley import CfgAutomaton
from guided.grammar.frontends.lark_grammar import parse_lark
from guided.grammar.tokens.compiled_cfg import compile_cfg

GRAMMARS = {
    # known keys beside any other string key (the shape of JSON objects with additional properties):
    # after '"' and a byte no known key starts with, only the string body is in flight
    "keys": (
        'start: obj\nobj: "{" [pair ("," pair)*] "}"\npair: (NAME | NICK | STR) ":" value\n'
        'NAME: "\\"name\\""\nNICK: "\\"nick\\""\nSTR: /"[^"\\\\\\n]*"/\nvalue: STR | obj | /[0-9]+/'
    ),
    # an ignored comment whose body ends the lexeme anywhere: skipped tokens are not inside it
    "comments": (
        'start: "[" [item ("," item)*] "]"\nitem: ESCAPED_STRING | "[" item "]"\n'
        "COMMENT: /#[^\\n]*/\n%ignore COMMENT\n%import common.ESCAPED_STRING"
    ),
}
TOKENS = sorted(
    set(byte_splits('abnmeikxz"\\{}[],:#é中\n0'))
    | {b"ab", b"abc", b"abcd", b"xyz", b"na", b"nam", b"name", b'name"', b'"na', b'"x', b'"xab'}
    | {b"\xc3\xa9ab", b"a\xe4\xb8", b"b\xc3", b'a"', b'":', b'"}', b'"]', b"#ab", b"ab\n", b"#\xc3"}
    | {b"abab", b"ababab", b"\xe4\xb8\xadab", b'{"', b'["', b"],", b"x#"}
)
VOCAB = tiny_vocab(TOKENS)


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_mid_token_slices_give_exact_masks(name):
    g = parse_lark(GRAMMARS[name])
    compiled = compile_cfg(VOCAB, g)
    oracle = CfgAutomaton(g)
    check_masks_on_random_paths(compiled, lambda: CfgState(oracle), TOKENS, VOCAB, random.Random(name), 25, 10)
    served = compiled._cfg_tail[: compiled._tail_done]
    assert (served >= 0).any()  # some configuration had its subtrees skipped through a mid-token slice
