"""The Earley automaton against a brute-force chart parser on random small grammars: left recursion,
nullable rules, ambiguity, terminals that are whole regular languages, ignored terminals."""

from __future__ import annotations

import itertools
import random

import pytest
from cfg_oracle import ChartOracle

from guided.errors import GrammarError
from guided.grammar.automata.cfg_recognizer import CfgState
from guided.grammar.automata.earley import CfgAutomaton, _nullable
from guided.grammar.cfg_ir import CfgGrammar, Rule, Terminal
from guided.grammar.regex_ast import EMPTY, chars, literal, repeat, seq

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


def _productive_by_sweeps(g: CfgGrammar) -> set[str]:
    """The definition: sweep the rules until no rule becomes productive."""
    good = {n for n, t in g.terminals.items() if t.node != EMPTY}
    while True:
        more = {r.name for r in g.rules.values() if any(all(s in good for s in a) for a in r.alternatives)} - good
        if not more:
            return good
        good |= more


@pytest.mark.parametrize("seed", range(8))
def test_productive_symbols_match_the_definition(seed):
    """``CfgGrammar._productive`` (a worklist) against rule sweeps, on random grammars (an empty
    terminal among them) and on a chain defined from its far end, beside a cycle with no base case."""
    rng = random.Random(seed)
    for k in range(50):
        g = random_grammar(1000 * seed + k)
        if rng.random() < 0.3:
            name = rng.choice(sorted(g.terminals))
            g.terminals[name] = Terminal(name, EMPTY)
        assert g._productive() == _productive_by_sweeps(g), g.rules
    rules = {f"r{i}": Rule(f"r{i}", ((f"r{i + 1}",), ("p", f"r{i}"))) for i in range(200)}
    rules["r200"] = Rule("r200", (("A",),))
    rules["p"] = Rule("p", (("p", "q"),))
    rules["q"] = Rule("q", (("p",), ("A", "q")))
    chain = CfgGrammar(rules, {"A": Terminal("A", TERMINALS["A"])}, "r0")
    assert chain._productive() == _productive_by_sweeps(chain) == {"A", *(f"r{i}" for i in range(201))}


def _nullable_by_passes(n, prods):
    """The definition: passes over every production until none changes."""
    out = [False] * n
    changed = True
    while changed:
        changed = False
        for head, body in prods:
            if not out[head] and all(s >= 0 and out[s] for s in body):
                out[head] = changed = True
    return out


def test_nullable_nonterminals_match_the_fixed_point():
    """``earley._nullable`` (a worklist) finds the nonterminals the fixed point of passes finds, on
    random grammars: empty bodies, terminals (negative), repeated symbols, chains and cycles."""
    rng = random.Random(5)
    for _ in range(400):
        n = rng.randint(1, 12)
        prods = []
        for _ in range(rng.randint(1, 30)):
            body = tuple(rng.choice([rng.randrange(n), ~rng.randrange(3)]) if rng.random() < 0.8 else rng.randrange(n)
                         for _ in range(rng.choice([0, 0, 1, 1, 2, 3, 4])))  # fmt: skip
            prods.append((rng.randrange(n), body))
        assert _nullable(n, prods) == _nullable_by_passes(n, prods), prods
