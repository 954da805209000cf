"""Every grammar in ../shared/data/grammars compiles, or fails with the reason recorded here; random
sentences are accepted by the byte-level Earley recognizer, and mutated strings get the oracle's verdict
(Lark's own Earley parser for Lark grammars, a brute-force chart parser for GBNF)."""

from __future__ import annotations

import random
import re

import pytest
from cfg_oracle import (
    GRAMMARS,
    N_MUTATIONS,
    OK,
    ChartOracle,
    LarkOracle,
    automaton,
    load,
    mutate,
    recognizes,
    sentences,
)

from guided.errors import GrammarError
from guided.grammar.automata.earley import CfgAutomaton


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_grammar_compiles_or_fails_as_recorded(name):
    _, expected = GRAMMARS[name]
    if expected == "ok":
        g, a = automaton(name)
        assert a.n_states >= 1 and g.start in g.rules
    else:
        with pytest.raises(GrammarError, match=re.escape(expected)):
            CfgAutomaton(load(name))


@pytest.mark.parametrize("name", OK)
def test_random_sentences_are_accepted(name):
    _, a = automaton(name)
    for text in sentences(name):
        assert recognizes(a, text), text


@pytest.mark.parametrize("name", OK)
def test_mutations_get_the_oracles_verdict(name):
    g, a = automaton(name)
    oracle = LarkOracle(name) if name.endswith(".lark") else ChartOracle(g)
    rng = random.Random(7)
    texts = sentences(name, max_len=40 if name.endswith(".gbnf") else 120)
    alphabet = "".join(sorted(set("".join(texts)))) + ' \n"{}[]()0aZ\\é'
    rejected = 0
    for text in texts:
        assert oracle.accepts(text), f"oracle rejects a generated sentence: {text!r}"
        for _ in range(N_MUTATIONS):
            m = mutate(text, rng, alphabet)
            verdict = oracle.accepts(m)
            assert recognizes(a, m) == verdict, (m, verdict)
            rejected += not verdict
    assert rejected > 0 or name in ("gbnf/english.gbnf", "gbnf/japanese.gbnf", "gbnf/list.gbnf")
