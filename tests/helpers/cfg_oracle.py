"""Context-free oracles for tests: the shared grammars (Lark and GBNF) with what guided makes of each,
random sentences and mutations of them, and two independent recognizers (Lark's own parser, an
Earley chart over the grammar IR)."""

from __future__ import annotations

import random
import re

from shared_data import shared_path

from guided.grammar.automata.cfg_recognizer import CfgState
from guided.grammar.automata.earley import CfgAutomaton
from guided.grammar.cfg_ir import CfgGrammar
from guided.grammar.cfg_sampler import CfgSampler, to_python_regex
from guided.grammar.frontends.gbnf_grammar import parse_gbnf
from guided.grammar.frontends.lark_grammar import parse_lark

# grammar file -> (start rule, "ok" or a substring of the expected GrammarError)
GRAMMARS = {
    "gbnf/arithmetic.gbnf": ("root", "ok"),
    "gbnf/c.gbnf": ("root", "ok"),
    "gbnf/chess.gbnf": ("root", "ok"),
    "gbnf/english.gbnf": ("root", "ok"),
    "gbnf/japanese.gbnf": ("root", "ok"),
    "gbnf/json.gbnf": ("root", "ok"),
    "gbnf/json_arr.gbnf": ("root", "ok"),
    "gbnf/list.gbnf": ("root", "ok"),
    "gbnf/vllm-sql.gbnf": ("root", "ok"),
    "lark/common.lark": ("start", "start rule 'start' is not defined"),  # a library of terminals, no rules
    "lark/csv.lark": ("start", "ok"),
    "lark/json.lark": ("start", "ok"),
    "lark/lark.lark": ("start", "lookahead"),  # OP: /[+*]|[?](?![a-z])/ looks past the lexeme
    "lark/python.lark": ("file_input", "%declare"),  # _INDENT/_DEDENT come from lark's Indenter
    "lark/python2.lark": ("file_input", "%declare"),
    "lark/storage.lark": ("start", "ok"),
    "lark/template_lark.lark": ("start", "lookahead"),
    "lark/unicode.lark": ("start", "start rule 'start' is not defined"),  # terminals only
    "lark/verilog.lark": ("start", "ok"),
}
OK = sorted(k for k, (_, v) in GRAMMARS.items() if v == "ok")
N_SENTENCES = 12
N_MUTATIONS = 4


def load(name: str) -> CfgGrammar:
    path = shared_path("data", "grammars", *name.split("/"))
    start, _ = GRAMMARS[name]
    text = path.read_text(encoding="utf-8")
    if name.endswith(".gbnf"):
        return parse_gbnf(text, start)
    return parse_lark(text, start, import_paths=[str(path.parent)])


_AUTOMATA: dict[str, tuple[CfgGrammar, CfgAutomaton]] = {}


def automaton(name: str) -> tuple[CfgGrammar, CfgAutomaton]:
    if name not in _AUTOMATA:
        g = load(name)
        _AUTOMATA[name] = (g, CfgAutomaton(g))
    return _AUTOMATA[name]


def recognizes(a: CfgAutomaton, text: str) -> bool:
    st = CfgState(a)
    return st.feed_text(text) and st.is_accepting()


def sentences(name: str, n: int = N_SENTENCES, max_len: int = 120) -> list[str]:
    g, _ = automaton(name)
    seed = sum(map(ord, name))
    sampler = CfgSampler(g, seed=seed)
    return [sampler.sentence(max_depth=6 + k % 6, max_len=max_len) for k in range(n)]


def mutate(text: str, rng: random.Random, alphabet: str) -> str:
    if not text:
        return rng.choice(alphabet)
    i = rng.randrange(len(text))
    op = rng.randrange(4)
    if op == 0:
        return text[:i] + text[i + 1 :]
    if op == 1:
        return text[:i] + rng.choice(alphabet) + text[i:]
    if op == 2 and len(text) > 1:
        j = min(i + 1, len(text) - 1)
        return text[:i] + text[j] + text[i] + text[j + 1 :]
    j = rng.randrange(i, len(text) + 1)
    return text[:j] + text[i:j] + text[j:]


# ---------------------------------------------------------------------- oracles
class LarkOracle:
    def __init__(self, name: str):
        from lark import Lark

        path = shared_path("data", "grammars", *name.split("/"))
        self.parser = Lark(
            path.read_text(encoding="utf-8"), parser="earley", lexer="dynamic_complete",
            start=GRAMMARS[name][0], import_paths=[str(path.parent)],
        )  # fmt: skip

    def accepts(self, text: str) -> bool:
        from lark.exceptions import LarkError

        try:
            self.parser.parse(text)
            return True
        except LarkError:
            return False


class ChartOracle:
    """Brute-force least-fixpoint recognizer over the IR: ends[symbol][i] = where it can end from i."""

    def __init__(self, g: CfgGrammar):
        self.g = g
        self.res = {n: re.compile(to_python_regex(t.node)) for n, t in g.terminals.items()}

    def accepts(self, text: str) -> bool:
        n, g = len(text), self.g
        term = {}
        for name, rx in self.res.items():
            term[name] = [{j for j in range(i + 1, n + 1) if rx.fullmatch(text, i, j)} for i in range(n + 1)]
        skip = [self._skip(term, i) for i in range(n + 1)]
        after = {
            name: [set().union(*(skip[j] for j in ends)) if ends else set() for ends in rows]
            for name, rows in term.items()
        }
        ends = {name: [set() for _ in range(n + 1)] for name in g.rules}
        changed = True
        while changed:
            changed = False
            for rule in g.rules.values():
                for i in range(n + 1):
                    cur = ends[rule.name][i]
                    for alt in rule.alternatives:
                        pos = {i}
                        for s in alt:
                            table = after[s] if s in after else ends[s]
                            pos = set().union(*(table[p] for p in pos)) if pos else set()
                            if not pos:
                                break
                        if pos - cur:
                            cur |= pos
                            changed = True
        return any(n in ends[g.start][i] for i in skip[0])

    def _skip(self, term, i: int) -> set[int]:
        seen, stack = {i}, [i]
        while stack:
            p = stack.pop()
            for name in self.g.ignore:
                for j in term[name][p]:
                    if j not in seen:
                        seen.add(j)
                        stack.append(j)
        return seen


# ---------------------------------------------------------------------- tests
