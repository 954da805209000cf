"""CfgGrammar: the one context-free grammar IR that the Lark and GBNF front ends (and, later, recursive
JSON Schemas) lower to, and that the Earley automaton compiles.

A grammar is a set of rules (nonterminals), each a tuple of alternatives, each a sequence of symbol
names; terminals are named regexes (``regex_ast`` nodes), so a terminal may be a whole regular
sub-language. Symbols share one namespace. ``ignore`` names terminals that may occur between any two
lexemes (Lark's ``%ignore``). The language is the scannerless one: every terminal is replaced by its
regular language, lexemes may end wherever the grammar lets them (Lark's Earley
``lexer="dynamic_complete"``), so it is exactly a context-free language over UTF-8 text. Priorities are
kept for reference only: they choose between parse trees, never change the language.

EBNF expressions (``Ref``, ``Lex``, ``ESeq``, ``EAlt``, ``ERepeat``) are lowered to plain rules by
``GrammarBuilder``: maximal runs of terminal-only items become one terminal, repetition of
non-terminal-only items becomes left-recursive helper rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from guided.errors import GrammarError
from guided.grammar.regex_ast import EMPTY, EPSILON, Node, alt, flat_seq, repeat, seq

__all__ = [
    "Terminal",
    "Rule",
    "CfgGrammar",
    "GrammarBuilder",
    "Expr",
    "Ref",
    "Lex",
    "ESeq",
    "EAlt",
    "ERepeat",
    "where_text",
]

Pos = tuple[int, int]  # (line, column), both 1-based


def where_text(pos: Pos | None) -> str:
    return f" (line {pos[0]}, column {pos[1]})" if pos else ""


@dataclass(frozen=True, slots=True)
class Terminal:
    """A named regular language; ``priority`` is informational (it orders parse trees, not strings)."""

    name: str
    node: Node
    priority: int = 0


@dataclass(frozen=True, slots=True)
class Rule:
    """A nonterminal: alternatives of symbol-name sequences (``()`` is the empty alternative)."""

    name: str
    alternatives: tuple[tuple[str, ...], ...]
    priority: int = 0


@dataclass(eq=False)
class CfgGrammar:
    """Rules, terminals, the start rule and the ignorable terminals; ``where`` maps names to positions."""

    rules: dict[str, Rule]
    terminals: dict[str, Terminal]
    start: str
    ignore: tuple[str, ...] = ()
    where: dict[str, Pos] = field(default_factory=dict)
    # an ExprPool where some terminals are interned and their emptiness decided already (by the
    # JSON Schema front end): the grammar's first compile starts from it (``CompiledCfg``) instead of
    # interning and deciding them again
    pool: object = field(default=None, repr=False)

    def symbols_of(self, name: str) -> set[str]:
        return {s for a in self.rules[name].alternatives for s in a} if name in self.rules else set()

    def validate(self, productive: set[str] | None = None) -> CfgGrammar:
        """Check the grammar and return it without unreachable rules and terminals.

        Raises GrammarError for an undefined start or symbol, a name that is both a rule and a
        terminal, and a reachable rule that derives no string (recursion without a base case).
        ``productive``: the grammar's productive symbols (``_productive``), when the caller has them.
        """
        if self.start not in self.rules:
            raise GrammarError(f"the start rule {self.start!r} is not defined")
        for name in self.terminals.keys() & self.rules.keys():
            raise GrammarError(f"{name!r} is both a rule and a terminal{where_text(self.where.get(name))}")
        for name in self.ignore:
            if name not in self.terminals:
                raise GrammarError(f"ignored terminal {name!r} is not defined")
        defined = self.rules.keys() | self.terminals.keys()
        for rule in self.rules.values():
            for a in rule.alternatives:
                if not defined.issuperset(a):
                    sym = min(set(a) - defined)
                    pos = self.where.get(f"ref:{sym}") or self.where.get(rule.name)
                    raise GrammarError(
                        f"undefined symbol {sym!r} used in rule {rule.name!r}{where_text(pos)}"
                    )
        reach = self._reachable()
        barren = (reach & self.rules.keys()) - (self._productive() if productive is None else productive)
        if barren:
            name = min(barren)
            raise GrammarError(
                f"rule {name!r} derives no finite string (recursion without a base case)"
                f"{where_text(self.where.get(name))}"
            )
        rules = {n: r for n, r in self.rules.items() if n in reach}
        terms = {n: t for n, t in self.terminals.items() if n in reach or n in self.ignore}
        return CfgGrammar(rules, terms, self.start, self.ignore, self.where)

    def to_regex(self) -> Node | None:
        """The grammar's language as one regex when no rule recurses (None otherwise): terminals in
        place, ``%ignore`` terminals allowed around every lexeme. Such grammars can use the regular
        engine."""
        ig = repeat(alt(*(self.terminals[n].node for n in self.ignore))) if self.ignore else EPSILON
        if self.start in self.terminals:
            return seq(ig, self.terminals[self.start].node, ig)

        def nonterminals(name: str):
            return (x for a in self.rules[name].alternatives for x in a if x not in self.terminals)

        # depth-first with an explicit stack (a chain of thousands of rules is no RecursionError)
        memo: dict[str, Node] = {}
        stack, active = [(self.start, nonterminals(self.start))], {self.start}
        while stack:
            name, children = stack[-1]
            child = next((c for c in children if c not in memo), None)
            if child is not None:
                if child in active:
                    return None  # recursion: not a regular language as written
                active.add(child)
                stack.append((child, nonterminals(child)))
                continue
            stack.pop()
            active.discard(name)
            alts = [seq(*(seq(self.terminals[x].node, ig) if x in self.terminals else memo[x] for x in a))
                    for a in self.rules[name].alternatives]  # fmt: skip
            memo[name] = alt(*alts)
        return seq(ig, memo[self.start])

    def _reachable(self) -> set[str]:
        seen, stack = {self.start}, [self.start]
        while stack:
            for s in self.symbols_of(stack.pop()):
                if s not in seen:
                    seen.add(s)
                    stack.append(s)
        return seen

    def _productive(self) -> set[str]:
        """The symbols that derive some string: non-empty terminals, and rules with an alternative of
        such symbols. A worklist, linear in the grammar's size: each alternative counts the symbols it
        still waits for, and a symbol found productive counts down the alternatives waiting on it
        (sweeping every rule until nothing changed took one sweep per level of nesting)."""
        good = set(n for n, t in self.terminals.items() if t.node != EMPTY)
        heads: list[str] = []  # per alternative: its rule
        need: list[int] = []  # per alternative: how many distinct symbols it waits for
        waiting: dict[str, list[int]] = {}  # symbol -> the alternatives waiting for it
        ready: list[str] = []
        for rule in self.rules.values():
            for a in rule.alternatives:
                if good.issuperset(a):
                    ready.append(rule.name)
                    continue
                missing = set(a) - good
                for x in missing:
                    waiting.setdefault(x, []).append(len(need))
                heads.append(rule.name)
                need.append(len(missing))
        while ready:
            name = ready.pop()
            if name in good:
                continue
            good.add(name)
            for i in waiting.pop(name, ()):
                need[i] -= 1
                if not need[i]:
                    ready.append(heads[i])
        return good

    def __repr__(self) -> str:
        return f"CfgGrammar(start={self.start!r}, rules={len(self.rules)}, terminals={len(self.terminals)})"


# ---------------------------------------------------------------------- EBNF expressions
class Expr:
    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Ref(Expr):
    """A reference to a rule or terminal by name."""

    name: str
    pos: Pos | None = None


@dataclass(frozen=True, slots=True)
class Lex(Expr):
    """An anonymous regular piece (a literal, a character class)."""

    node: Node


@dataclass(frozen=True, slots=True)
class ESeq(Expr):
    items: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class EAlt(Expr):
    items: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class ERepeat(Expr):
    item: Expr
    min: int
    max: int | None


class GrammarBuilder:
    """Builds a CfgGrammar from EBNF rule bodies.

    ``regular`` maps names of rules already known to be regular to their regex, so references to them
    are inlined into terminals (a grammar whose rules are all regular becomes one terminal).
    """

    def __init__(self, start: str):
        self.start = start
        self.rules: dict[str, Rule] = {}
        self.terminals: dict[str, Terminal] = {}
        self.where: dict[str, Pos] = {}
        self.regular: dict[str, Node] = {}
        self._term_of_node: dict[Node, str] = {}
        self._n = 0
        # to_regex answers by expression identity, each with its expression (kept alive, so its id
        # stays its own); "not regular" answers only while ``regular`` has not grown since
        self._regex: dict[int, tuple[Expr, Node]] = {}
        self._not_regex: dict[int, Expr] = {}
        self._n_regular = 0

    def build(self, ignore: tuple[str, ...] = ()) -> CfgGrammar:
        return CfgGrammar(
            dict(self.rules), dict(self.terminals), self.start, ignore, dict(self.where)
        ).validate()

    def add_rule(self, name: str, body: Expr, pos: Pos | None = None) -> None:
        if pos:
            self.where.setdefault(name, pos)
        self.rules[name] = Rule(name, self.alternatives(body, name))

    def add_terminal(self, name: str, node: Node, priority: int = 0) -> None:
        self.terminals[name] = Terminal(name, node, priority)

    # ------------------------------------------------------------------ lowering
    def to_regex(self, e: Expr) -> Node | None:
        """The regex of a terminal-only expression, or None when it references a non-regular rule.

        Memoized: ``alternatives`` and ``sequence`` ask again about the items of what they asked
        about, which without a memo is quadratic in the nesting depth (and rebuilds the regexes).
        """
        if isinstance(e, Lex):
            return e.node
        if isinstance(e, Ref):
            return self.regular.get(e.name)
        if len(self.regular) != self._n_regular:  # a rule became regular: "not regular" may be stale
            self._not_regex.clear()
            self._n_regular = len(self.regular)
        hit = self._regex.get(id(e))
        if hit is not None:
            return hit[1]
        if id(e) in self._not_regex:
            return None
        node = self._to_regex(e)
        if node is None:
            self._not_regex[id(e)] = e
        else:
            self._regex[id(e)] = (e, node)
        return node

    def _to_regex(self, e: Expr) -> Node | None:
        if isinstance(e, (ESeq, EAlt)):
            parts = []
            for x in e.items:
                part = self.to_regex(x)
                if part is None:
                    return None
                parts.append(part)
            return seq(*parts) if isinstance(e, ESeq) else alt(*parts)
        if isinstance(e, ERepeat):
            inner = self.to_regex(e.item)
            return None if inner is None else repeat(inner, e.min, e.max)
        raise TypeError(e)

    def alternatives(self, e: Expr, owner: str) -> tuple[tuple[str, ...], ...]:
        if isinstance(e, EAlt) and self.to_regex(e) is None:
            out: dict[tuple[str, ...], None] = {}  # repeated alternatives once, in order (a list scan was quadratic)
            for x in e.items:
                out.update(dict.fromkeys(self.alternatives(x, owner)))
            return tuple(out)
        return (self.sequence(e, owner),)

    def sequence(self, e: Expr, owner: str) -> tuple[str, ...]:
        items = e.items if isinstance(e, ESeq) else (e,)
        out: list[str] = []
        run: list[Node] = []
        for x in items:
            node = x.node if x.__class__ is Lex else self.to_regex(x)  # a Lex answers without a call
            if node is not None:
                run.append(node)
                continue
            self._flush(run, out)
            out.extend(self.symbols(x, owner))
        self._flush(run, out)
        return tuple(out)

    def terminals_of(self, node: Node) -> tuple[str, ...]:
        """The terminal symbols a regular node becomes as a sequence of its own (none for the empty
        string)."""
        out: list[str] = []
        self._flush([node], out)
        return tuple(out)

    def _flush(self, run: list[Node], out: list[str]) -> None:
        if run:
            node = flat_seq(*run)  # (a run grouped by ``cat`` is the terminal it is ungrouped)
            run.clear()
            if node != EPSILON:
                out.append(self.terminal_for(node))

    def symbols(self, e: Expr, owner: str) -> list[str]:
        """Symbols for one non-regular item of a sequence."""
        if isinstance(e, Ref):
            if e.pos:
                self.where.setdefault(f"ref:{e.name}", e.pos)
            return [e.name]
        if isinstance(e, ESeq):
            return list(self.sequence(e, owner))
        if isinstance(e, EAlt):
            return [self.helper(owner, self.alternatives(e, owner))]
        if isinstance(e, ERepeat):
            return self._repeat(e, owner)
        raise TypeError(e)

    def _repeat(self, e: ERepeat, owner: str) -> list[str]:
        return self.repeat_symbols(list(self.sequence(e.item, owner)), e.min, e.max, owner)

    def repeat_symbols(self, body: list[str], min: int, max: int | None, owner: str) -> list[str]:
        """The symbols of ``body`` repeated min to max times (helper rules named after ``owner``)."""
        if max is None:
            if min == 0:  # H -> H body | ()
                h = self.fresh(owner)
                self.rules[h] = Rule(h, ((h, *body), ()))
                return [h]
            h = self.fresh(owner)  # H -> H body | body, after min - 1 copies
            self.rules[h] = Rule(h, ((h, *body), tuple(body)))
            return body * (min - 1) + [h]
        out = body * min
        tail: tuple[str, ...] = ()
        for _ in range(max - min):  # nested optionals: (body (body (...)?)?)?
            tail = (self.helper(owner, ((*body, *tail), ())),)
        return out + list(tail)

    def helper(self, owner: str, alternatives: tuple[tuple[str, ...], ...]) -> str:
        h = self.fresh(owner)
        self.rules[h] = Rule(h, alternatives)
        return h

    def fresh(self, owner: str) -> str:
        self._n += 1
        return f"{owner}__{self._n}"

    def terminal_for(self, node: Node) -> str:
        name = self._term_of_node.get(node)
        if name is None:
            name = self._term_of_node[node] = f"__T{len(self._term_of_node)}"
            self.terminals[name] = Terminal(name, node)
        return name
