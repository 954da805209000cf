"""SchemaCfg: a JSON Schema lowering with holes (nonterminal references) turned into a CfgGrammar.

The regular lowering (``SchemaLowering``) builds regex AST nodes. Where a ``$ref`` cycle closes, or
where a schema-free value may nest without bound, it leaves a ``Hole`` naming a nonterminal whose
body is another such node. ``SchemaCfg`` converts the root node and the nonterminal bodies into a
``CfgGrammar``: every hole-free subtree is one regular terminal (the ``GrammarBuilder`` merges
adjacent ones, so the regular parts between recursive references stay big lexemes), sequences,
alternatives and repeats over holes become EBNF, and subtrees shared by several parents become
rules of their own instead of copies. Intersections and complements have no context-free
counterpart; a hole below one is resolved by ``on_meet`` (an error or a relaxation chosen by the
lowering) before conversion.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from guided.errors import CompileTimeoutError, GrammarError, LimitError, SchemaError
from guided.grammar.cfg_ir import CfgGrammar, EAlt, ERepeat, ESeq, Expr, GrammarBuilder, Lex, Ref, Rule
from guided.grammar.expr_pool import ExprPool
from guided.grammar.regex_ast import EMPTY, Alt, And, Node, Not, Repeat, Seq, alt, repeat, seq

__all__ = ["Hole", "SchemaCfg", "has_hole", "fill_holes", "map_meets", "START"]

START = "root"
_EMPTINESS_BUDGET = 20_000


@dataclass(frozen=True, slots=True, eq=False)
class Hole(Node):
    """A reference to the nonterminal ``name`` inside a regex AST (never reaches the regex engine)."""

    name: str

    def __eq__(self, other) -> bool:
        return other.__class__ is Hole and other.name == self.name

    def __ne__(self, other) -> bool:
        return not self.__eq__(other)

    __hash__ = Node.__hash__


def has_hole(node: Node, memo: dict[int, bool] | None = None) -> bool:
    """Whether a hole occurs in the node (memoized per node object: ASTs are DAGs)."""
    memo = {} if memo is None else memo
    key = id(node)
    hit = memo.get(key)
    if hit is not None:
        return hit
    if isinstance(node, Hole):
        out = True
    elif isinstance(node, (Seq, Alt, And)):
        out = any(has_hole(x, memo) for x in node.items)
    elif isinstance(node, (Repeat, Not)):
        out = has_hole(node.item, memo)
    else:
        out = False
    memo[key] = out
    return out


def fill_holes(node: Node, fill: Callable[[Hole], Node], memo: dict[int, Node] | None = None) -> Node:
    """The node with every hole replaced by ``fill(hole)`` (a hole-free node)."""
    memo = {} if memo is None else memo
    hit = memo.get(id(node))
    if hit is not None:
        return hit
    if isinstance(node, Hole):
        out = fill(node)
    elif isinstance(node, (Seq, Alt, And)):
        items = [fill_holes(x, fill, memo) for x in node.items]
        out = (
            seq(*items)
            if isinstance(node, Seq)
            else alt(*items)
            if isinstance(node, Alt)
            else And(tuple(items))
        )
    elif isinstance(node, Not):
        out = Not(fill_holes(node.item, fill, memo))
    elif isinstance(node, Repeat):
        out = repeat(fill_holes(node.item, fill, memo), node.min, node.max)
    else:
        out = node
    memo[id(node)] = out
    return out


def map_meets(node: Node, fix: Callable[[Node], Node], memo: dict[int, Node] | None = None) -> Node:
    """The node with every intersection or complement that has a hole below replaced by ``fix(it)``."""
    memo = {} if memo is None else memo
    if not has_hole(node) or isinstance(node, Hole):
        return node
    hit = memo.get(id(node))
    if hit is not None:
        return hit
    if isinstance(node, (And, Not)):
        out = fix(node)
    elif isinstance(node, (Seq, Alt)):
        items = [map_meets(x, fix, memo) for x in node.items]
        out = seq(*items) if isinstance(node, Seq) else alt(*items)
    else:
        out = repeat(map_meets(node.item, fix, memo), node.min, node.max)
    memo[id(node)] = out
    return out


class SchemaCfg:
    """Converts (root node, nonterminal bodies) into a validated CfgGrammar.

    ``on_meet(node)`` is called for an intersection or complement with a hole below it and returns
    a hole-free replacement (or raises ``SchemaError``).
    """

    def __init__(self, rules: dict[str, Node], on_meet: Callable[[Node], Node], seconds: float = 1.0):
        self.bodies = rules
        self.on_meet = on_meet
        self.seconds = seconds  # what is left of the compile time bound (SchemaOptions.timeout_s)
        self.deadline = time.monotonic() + seconds
        self._steps = 0
        self.builder = GrammarBuilder(START)
        self._holes: dict[int, bool] = {}
        self._parents: dict[int, int] = {}
        self._shared: dict[int, str] = {}
        self._keep: list[Node] = []

    def grammar(self, root: Node) -> CfgGrammar:
        names = list(self.bodies)
        for node in (root, *(self.bodies[n] for n in names)):
            self._count(node)
        self.builder.add_rule(START, self.expr(root))
        for name in names:
            self.builder.add_rule(name, self.expr(self.bodies[name]))
        return self._build()

    # ------------------------------------------------------------------ conversion
    def _count(self, node: Node) -> None:
        """How many parents each hole-containing node has (its children are visited once)."""
        stack = [node]
        while stack:
            x = stack.pop()
            if not has_hole(x, self._holes) or isinstance(x, (Hole, And, Not)):
                continue
            n = self._parents.get(id(x), 0)
            self._parents[id(x)] = n + 1
            if n == 0:
                stack.extend(x.items if isinstance(x, (Seq, Alt)) else (x.item,))

    def expr(self, node: Node, top: bool = True) -> Expr:
        self._steps += 1
        if not self._steps & 1023 and time.monotonic() > self.deadline:
            raise CompileTimeoutError("JSON Schema grammar construction exceeded the compile time bound")
        if not has_hole(node, self._holes):
            return Lex(node)
        if isinstance(node, Hole):
            if node.name not in self.bodies:
                raise GrammarError(f"internal: undefined nonterminal {node.name!r}")
            return Ref(node.name)
        if isinstance(node, (And, Not)):
            fixed = self.on_meet(node)
            self._keep.append(fixed)
            return self.expr(fixed, top)
        if not top and self._parents.get(id(node), 0) > 1:
            return Ref(self._share(node))
        if isinstance(node, Seq):
            return ESeq(tuple(self.expr(x, False) for x in node.items))
        if isinstance(node, Alt):
            return EAlt(tuple(self.expr(x, False) for x in node.items))
        assert isinstance(node, Repeat)
        inner = self.expr(node.item, node.min == node.max == 1)
        return inner if node.min == node.max == 1 else ERepeat(inner, node.min, node.max)

    def _share(self, node: Node) -> str:
        name = self._shared.get(id(node))
        if name is None:
            name = self._shared[id(node)] = f"shared_{len(self._shared)}"
            self.builder.add_rule(name, self.expr(node, True))
        return name

    # ------------------------------------------------------------------ validation
    def _build(self) -> CfgGrammar:
        """Drop what derives no finite string (a recursion without a base case), then validate."""
        b = self.builder
        pool = ExprPool()
        left = max(self.deadline - time.monotonic(), 0.05)
        with pool.bound.limit(left, "checking the terminals of a JSON Schema grammar"):
            live = {
                n: t for n, t in b.terminals.items() if t.node != EMPTY and not _surely_empty(pool, t.node)
            }
        draft = CfgGrammar(dict(b.rules), live, START)
        good = draft._productive()
        if START not in good:
            raise SchemaError("the schema accepts no (finite) instance")
        rules = {}
        for name, rule in b.rules.items():
            if name in good:
                alts = tuple(a for a in rule.alternatives if all(s in good for s in a))
                rules[name] = Rule(name, alts, rule.priority)
        return CfgGrammar(rules, live, START).validate()


def _surely_empty(pool: ExprPool, node: Node) -> bool:
    """Whether a terminal with an intersection or complement inside matches nothing (the plain
    constructors already reduce an empty language without them to EMPTY)."""
    if not _has_meet(node, {}):
        return False
    try:
        return not pool.is_live(pool.intern(node), _EMPTINESS_BUDGET)
    except LimitError:
        return False


def _has_meet(node: Node, memo: dict[int, bool]) -> bool:
    hit = memo.get(id(node))
    if hit is None:
        if isinstance(node, (And, Not)):
            hit = True
        elif isinstance(node, (Seq, Alt)):
            hit = any(_has_meet(x, memo) for x in node.items)
        elif isinstance(node, Repeat):
            hit = _has_meet(node.item, memo)
        else:
            hit = False
        memo[id(node)] = hit
    return hit
