"""Mid-token slices stay exact: below a configuration with an unbounded string-body lexeme in flight,
the mask walk ORs in whole trie subtrees that spell only body characters instead of walking them.
Masks are checked against the byte-level recognizer of a separate automaton, token by token, along
random paths on one shared compiled grammar (so inside-the-lexeme records are made, then reused)."""

from __future__ import annotations

import random

import pytest
from grammar_oracle import allowed_tokens, byte_splits, check_masks_on_random_paths, tiny_vocab

from guided.grammar.automata.cfg_recognizer import CfgState
from guided.grammar.automata.earley import CfgAutomaton
from guided.grammar.frontends.lark_grammar import parse_lark
from guided.grammar.tokens import compiled_cfg
from guided.grammar.tokens.compiled_cfg import compile_cfg
from guided.grammar.tokens.vocab_index import TailRows

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


@pytest.fixture(autouse=True)
def _rows_everywhere(monkeypatch):
    """Every state a walk meets reads its slice row, whatever the subtree below (this vocabulary's
    subtrees are all far smaller than ``ROW_SUBTREE``)."""
    monkeypatch.setattr(compiled_cfg, "ROW_SUBTREE", 0)


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_mid_token_slices_give_exact_masks(name):
    g = parse_lark(GRAMMARS[name])
    compiled = compile_cfg(VOCAB, g)
    oracle = CfgAutomaton(g)
    check_masks_on_random_paths(compiled, lambda: CfgState(oracle), TOKENS, VOCAB, random.Random(name), 25, 10)
    # some configuration or lexeme had its subtrees skipped through a mid-token slice
    assert (compiled._cfg_tail >= 0).any() or (compiled._lex_tail >= 0).any()


def test_tails_rows_all_taken_start_a_new_epoch_and_masks_stay_exact():
    """The tails rows of a vocabulary are a fixed number (``TailRows.capacity``), filled in place, so
    that adding one never copies the others; once every row is taken, a new epoch starts with a new
    array and each grammar makes its row numbers again. With one row, the two grammars' string
    classes take it in turn: every switch starts an epoch, and the masks stay exact throughout."""
    shared = None
    grammars = []
    for name in sorted(GRAMMARS):
        g = parse_lark(GRAMMARS[name])
        compiled = compile_cfg(VOCAB, g)
        shared = shared or TailRows(compiled.index, capacity=1)
        compiled._tails = shared
        compiled._restart_tails(shared.epoch)
        grammars.append((name, compiled, CfgAutomaton(g)))
    served = 0
    for turn in range(4):
        for name, compiled, oracle in grammars:
            rng = random.Random(f"{name}{turn}")
            check_masks_on_random_paths(compiled, lambda o=oracle: CfgState(o), TOKENS, VOCAB, rng, 6, 10)
            served += int((compiled._cfg_tail >= 0).sum() + (compiled._lex_tail >= 0).sum())
    assert shared.epoch >= 3 and served > 0, (shared.epoch, served)
    # configurations made (by accepting tokens) and recorded by a first mask, before another grammar
    # starts an epoch: their masks, computed after it, make their row numbers again too
    fresh = {}
    for name in ("keys", "comments"):
        g = parse_lark(GRAMMARS[name])
        fresh[name] = (compile_cfg(VOCAB, g), CfgAutomaton(g))
        fresh[name][0]._tails = shared
        fresh[name][0]._restart_tails(shared.epoch)
    keys, comments = fresh["keys"][0], fresh["comments"][0]
    path = [b"{", b'"x', b"ab", b"ab", b"abc"]
    m = keys.matcher()
    assert all(m.accept_token(TOKENS.index(t)) for t in path)
    keys.matcher().allowed_tokens()  # its first mask: the configurations its walk meets get their rows
    epoch = shared.epoch
    comments.matcher().allowed_tokens()
    assert shared.epoch > epoch  # the comments' class took the one row
    state = CfgState(fresh["keys"][1])
    assert state.feed_bytes(b"".join(path))
    allowed = allowed_tokens(m, VOCAB)
    assert [bool(allowed[i]) for i in range(len(TOKENS))] == [state.copy().feed_bytes(t) for t in TOKENS]


def test_slice_rows_are_read_only_above_big_subtrees(monkeypatch, vocab_builtin):
    """A walk asks for a state's slice row only above a subtree of more than ``ROW_SUBTREE`` nodes
    (reading a slice is Python time; a small subtree is cheaper walked): on the same random paths,
    fewer states have their row read than when every state asks, and the masks are the same."""
    from grammar_oracle import allowed_tokens

    g = parse_lark(GRAMMARS["keys"])
    runs = {}
    for limit in (0, 8):
        monkeypatch.setattr(compiled_cfg, "ROW_SUBTREE", limit)
        compiled, rng, masks = compile_cfg(vocab_builtin, g), random.Random(3), []
        for _ in range(8):
            m = compiled.matcher()
            for _ in range(12):
                allowed = allowed_tokens(m, vocab_builtin)
                masks.append(allowed.tobytes())
                options = [i for i in range(len(allowed)) if allowed[i]]
                if not options or not m.accept_token(rng.choice(options)):
                    break
        read = int((compiled._cfg_tail >= -1).sum() + (compiled._lex_tail >= -1).sum())
        runs[limit] = (masks, read)
    assert runs[8][0] == runs[0][0]
    assert 0 < runs[8][1] < runs[0][1], (runs[8][1], runs[0][1])
