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


def test_a_chain_of_thousands_of_rules_is_regular_without_deep_recursion():
    """to_regex walks with an explicit stack: a non-recursive chain deeper than Python's recursion
    limit (a big schema's nesting) still takes the regular engine; recursion still does not."""
    import sys

    from guided.grammar.cfg_ir import CfgGrammar, Rule, Terminal
    from guided.grammar.regex_ast import literal

    depth = sys.getrecursionlimit() + 500
    rules = {f"r{i}": Rule(f"r{i}", ((f"r{i + 1}", "A"), ("B",))) for i in range(depth)}
    rules[f"r{depth}"] = Rule(f"r{depth}", (("B",),))
    terms = {"A": Terminal("A", literal("a")), "B": Terminal("B", literal("b"))}
    node = CfgGrammar(rules, terms, "r0").to_regex()
    assert node is not None
    looped = dict(rules, **{f"r{depth}": Rule(f"r{depth}", (("r0",), ("B",)))})
    assert CfgGrammar(looped, terms, "r0").to_regex() is None
