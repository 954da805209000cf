"""The Earley automaton against a brute-force chart parser on random small grammars: left recursion,
nullable rules, ambiguity, terminals that are whole regular languages, ignored terminals."""

from __future__ import annotations

import itertools
import random

import pytest
from cfg_oracle import ChartOracle

from guided.errors import GrammarError
from guided.grammar.automata.cfg_recognizer import CfgState
from guided.grammar.automata.earley import CfgAutomaton
from guided.grammar.cfg_ir import CfgGrammar, Rule, Terminal
from guided.grammar.regex_ast import chars, literal, repeat, seq

TERMINALS = {
    "A": literal("a"),
    "B": literal("b"),
    "AB": literal("ab"),
    "APLUS": repeat(literal("a"), 1),
    "BA_OPT": seq(literal("b"), repeat(literal("a"), 0, 1)),
    "ANY": chars(((0x61, 0x62),)),
    "SP": literal(" "),
}
ALPHABET = "ab"


def random_grammar(seed: int) -> CfgGrammar:
    rng = random.Random(seed)
    names = ["s", "x", "y", "z"][: rng.randint(2, 4)]
    terms = rng.sample(sorted(TERMINALS.keys() - {"SP"}), 3)
    rules = {}
    for n in names:
        alts = set()
        for _ in range(rng.randint(1, 3)):
            alts.add(tuple(rng.choice(names + terms + terms) for _ in range(rng.randint(0, 3))))
        rules[n] = Rule(n, tuple(sorted(alts)))
    ignore = ("SP",) if rng.random() < 0.3 else ()
    used = set(terms) | set(ignore)
    return CfgGrammar(rules, {t: Terminal(t, TERMINALS[t]) for t in used}, "s", ignore)


def strings(ignore: bool, max_len: int = 5):
    alphabet = ALPHABET + (" " if ignore else "")
    for n in range(max_len + 1):
        for chars_ in itertools.product(alphabet, repeat=n):
            yield "".join(chars_)


@pytest.mark.parametrize("seed", range(40))
def test_random_grammars_match_the_chart_parser(seed):
    g = None
    for k in itertools.count():  # the first productive grammar of this seed's sequence
        try:
            g = random_grammar(1000 * seed + k).validate()
            break
        except GrammarError:
            continue
    a = CfgAutomaton(g)
    oracle = ChartOracle(g)
    accepted = set()
    for s in strings(bool(g.ignore)):
        st = CfgState(a)
        ok = st.feed_text(s) and st.is_accepting()
        assert ok == oracle.accepts(s), (s, g.rules)
        if ok:
            accepted.add(s)
    for s in accepted:  # every prefix of a sentence is alive
        for k in range(len(s)):
            assert CfgState(a).feed_text(s[:k]), (s[:k], s)
