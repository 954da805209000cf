"""SchemaCfg: a JSON Schema lowering with holes (nonterminal references) turned into a CfgGrammar.

The regular lowering (``SchemaLowering``) builds regex AST nodes. Where a ``$ref`` cycle closes, or
where a schema-free value may nest without bound, it leaves a ``Hole`` naming a nonterminal whose
body is another such node. ``SchemaCfg`` converts the root node and the nonterminal bodies into a
``CfgGrammar``: every run of adjacent hole-free items is one regular terminal (so the regular parts
between recursive references stay big lexemes), sequences, alternatives and repeats over holes
become rules' alternatives (and helper rules), and subtrees shared by several parents become rules
of their own instead of copies. Intersections and complements have no context-free
counterpart; a hole below one is resolved by ``on_meet`` (an error or a relaxation chosen by the
lowering) before conversion.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from guided.errors import CompileTimeoutError, GrammarError, LimitError, SchemaError
from guided.grammar import ExprPool
from guided.grammar.cfg_ir import CfgGrammar, GrammarBuilder, Rule
from guided.grammar.regex_ast import (
    EMPTY,
    EPSILON,
    Alt,
    And,
    ByteSet,
    Chars,
    Node,
    Not,
    Repeat,
    Seq,
    TrieLeft,
    alt,
    flat_seq,
    repeat,
    seq,
)

__all__ = ["Hole", "SchemaCfg", "has_hole", "hole_memo", "hole_names", "has_meet", "fill_holes", "map_meets", "START"]

START = "root"
_EMPTINESS_BUDGET = 20_000
_scope = threading.local()  # the memos of the hole_memo() scope in progress, per thread


@dataclass(frozen=True, slots=True, eq=False)
class Hole(Node):
    """A reference to the nonterminal ``name`` inside a regex AST (never reaches the regex engine):
    a placeholder of ``regex_ast``'s, so every node above it is open (``Node.is_open``)."""

    name: str

    def __eq__(self, other) -> bool:
        return other.__class__ is Hole and other.name == self.name

    def __ne__(self, other) -> bool:
        return not self.__eq__(other)

    __hash__ = Node.__hash__


_SKIPPED = frozenset((Chars, ByteSet, TrieLeft, Hole, And, Not))  # nodes SchemaCfg._count does not count


def has_hole(node: Node) -> bool:
    """Whether a hole occurs in the node (known since it was built: ``Node.is_open``; the loops
    below read its slot, ``_open``, directly)."""
    return node.is_open


@contextmanager
def hole_memo() -> Iterator[None]:
    """Share the answers of ``hole_names`` and ``fill_holes`` among all calls in this thread until
    the scope ends (nested scopes join the outer one). Nodes asked about stay alive until then, so
    their ids stay theirs."""
    if getattr(_scope, "keep", None) is not None:
        yield
        return
    _scope.keep, _scope.names, _scope.fills = [], {}, {}
    try:
        yield
    finally:
        _scope.keep = _scope.names = _scope.fills = None


def _in_scope(node: Node) -> bool:
    """Whether a hole_memo() scope is in progress (then node is kept alive until it ends)."""
    keep = getattr(_scope, "keep", None)
    if keep is None:
        return False
    keep.append(node)
    return True


def hole_names(node: Node) -> set[str]:
    """The names of the holes in the node (each shared subtree visited once). Inside ``hole_memo()``
    the name sets of the subtrees are remembered for the scope: intersections nest, and each asked
    about its own subtree, which made a walk of every level below it per level."""
    names_of: dict[int, frozenset] = _scope.names if _in_scope(node) else {}
    got = names_of.get(id(node))
    if got is not None:
        return set(got)
    stack: list[tuple[Node, bool]] = [(node, False)]
    while stack:
        x, expanded = stack.pop()
        if id(x) in names_of:
            continue
        if not x._open:
            names_of[id(x)] = frozenset()
            continue
        if isinstance(x, Hole):
            names_of[id(x)] = frozenset((x.name,))
            continue
        kids = x.items if isinstance(x, (Seq, Alt, And)) else (x.item,)
        if not expanded:
            stack.append((x, True))
            stack.extend((k, False) for k in kids if id(k) not in names_of)
            continue
        sets = [names_of[id(k)] for k in kids]
        names_of[id(x)] = sets[0].union(*sets[1:]) if sets else frozenset()
    return set(names_of[id(node)])


def fill_holes(
    node: Node, fill: Callable[[Hole], Node], memo: dict[int, Node] | None = None, key=None, meets=None
) -> Node:
    """The node with every hole replaced by ``fill(hole)`` (a hole-free node); hole-free subtrees are
    kept as they are (same objects), so only the paths down to the holes are rebuilt. Calls that pass
    the same ``key`` promise the same ``fill``: inside ``hole_memo()`` they share one memo, so nested
    intersections filled alike rebuild each subtree once in the scope, not once per level. With
    ``meets``, an intersection or complement with a hole below is replaced by ``meets(it)`` (hole-free,
    as ``map_meets`` does) in the same pass."""
    scoped = _in_scope(node)
    if memo is None:
        memo = _scope.fills.setdefault(key, {}) if scoped and key is not None else {}
    return _fill(node, fill, memo, meets)


def _fill(node: Node, fill: Callable[[Hole], Node], memo: dict[int, Node], meets=None) -> Node:
    hit = memo.get(id(node))
    if hit is not None:
        return hit
    if not node._open:
        out = node
    elif isinstance(node, Hole):
        out = fill(node)
    elif meets is not None and isinstance(node, (And, Not)):
        out = meets(node)
    elif isinstance(node, (Seq, Alt, And)):
        # (hole-free items, most of an object's, without a call)
        items = [_fill(x, fill, memo, meets) if x._open else x for x in node.items]
        out = (
            seq(*items)
            if isinstance(node, Seq)
            else alt(*items)
            if isinstance(node, Alt)
            else And(tuple(items))
        )
    elif isinstance(node, Not):
        out = Not(_fill(node.item, fill, memo, meets))
    else:
        out = repeat(_fill(node.item, fill, memo, meets), node.min, node.max)
    memo[id(node)] = out
    return out


def map_meets(node: Node, fix: Callable[[Node], Node], memo: dict[int, Node] | None = None) -> Node:
    """The node with every intersection or complement that has a hole below replaced by ``fix(it)``."""
    return _map_meets(node, fix, {} if memo is None else memo)


def _map_meets(node: Node, fix: Callable[[Node], Node], memo: dict[int, Node]) -> Node:
    if not node._open or isinstance(node, Hole):
        return node
    hit = memo.get(id(node))
    if hit is not None:
        return hit
    if isinstance(node, (And, Not)):
        out = fix(node)
    elif isinstance(node, (Seq, Alt)):
        items = [_map_meets(x, fix, memo) for x in node.items]
        out = seq(*items) if isinstance(node, Seq) else alt(*items)
    else:
        out = repeat(_map_meets(node.item, fix, memo), node.min, node.max)
    memo[id(node)] = out
    return out


class SchemaCfg:
    """Converts (root node, nonterminal bodies) into a validated CfgGrammar.

    ``on_meet(node)`` is called for an intersection or complement with a hole below it and returns
    a hole-free replacement (or raises ``SchemaError``).
    """

    def __init__(
        self, rules: dict[str, Node], on_meet: Callable[[Node], Node], seconds: float = 1.0, separator: Node | None = None
    ):
        self.bodies = rules
        self.on_meet = on_meet
        self.seconds = seconds  # what is left of the compile time bound (SchemaOptions.timeout_s)
        self.deadline = time.monotonic() + seconds
        self._steps = 0
        self.builder = _HoleRules(START, separator)
        self._parents: dict[int, int] = {}
        self._holey_at: dict[int, list[int]] = {}
        self._shared: dict[int, str] = {}
        self._keep: list[Node] = []

    def grammar(self, root: Node) -> CfgGrammar:
        names = list(self.bodies)
        for node in (root, *(self.bodies[n] for n in names)):
            self._count(node)
        self._rule(START, root)
        for name in names:
            self._rule(name, self.bodies[name])
        return self._build()

    # ------------------------------------------------------------------ conversion
    def _count(self, node: Node) -> None:
        """How many parents each hole-containing node has (its children are visited once), and where
        the items with a hole are in each sequence and alternative among them (``_holey``)."""
        parents = self._parents
        skip = _SKIPPED
        stack = [node]
        while stack:
            x = stack.pop()
            cls = x.__class__
            if cls in skip or not x._open:
                continue
            n = parents.get(id(x), 0)
            parents[id(x)] = n + 1
            if n == 0:
                if cls is Seq or cls is Alt:
                    items = x.items
                    stack += [y for y in map(items.__getitem__, self._holey(x)) if y.__class__ not in skip]
                else:
                    stack.append(x.item)

    def _holey(self, node: Seq | Alt) -> list[int]:
        """The positions of the items with a hole in a sequence or alternative (remembered: ``_count``
        finds them, ``_conv`` reads them)."""
        at = self._holey_at.get(id(node))
        if at is None:
            at = self._holey_at[id(node)] = [i for i, x in enumerate(node.items) if x._open]
        return at

    def _rule(self, name: str, node: Node) -> None:
        """Add the rule ``name`` whose body is ``node`` (itself, not a reference to it where shared)."""
        self.builder.rules[name] = Rule(name, tuple(self._as_alternatives(self._conv(node, name, True))))

    def _as_alternatives(self, piece):
        """A piece (``_conv``'s) as the alternatives of a rule."""
        cls = piece.__class__
        if cls is dict:
            return piece
        return (tuple(piece),) if cls is list else (self.builder.terminals_of(piece),)

    def _as_symbols(self, piece, owner: str) -> list[str]:
        """A piece with a hole left (a list or a dict) as symbols in a sequence of the rule ``owner``."""
        return piece if piece.__class__ is list else [self.builder.helper(owner, tuple(piece))]

    def _conv(self, node: Node, owner: str, top: bool = False):
        """node as a piece of the rule ``owner``: a hole-free node (a regular piece: the parent puts
        it in a terminal with its regular neighbours), a list of symbols (a sequence), or a dict whose
        keys are alternatives (symbol tuples, each once, in order). A node with several parents is a
        rule of its own, which the piece references, unless ``top``."""
        self._steps += 1
        if not self._steps & 1023 and time.monotonic() > self.deadline:
            raise CompileTimeoutError("JSON Schema grammar construction exceeded the compile time bound")
        if not node._open:
            return node
        cls = node.__class__
        if cls is Hole:
            if node.name not in self.bodies:
                raise GrammarError(f"internal: undefined nonterminal {node.name!r}")
            return [node.name]
        if cls is And or cls is Not:
            fixed = self.on_meet(node)
            self._keep.append(fixed)  # (kept alive: the memos of this conversion are by identity)
            return self._conv(fixed, owner, top)
        if not top and self._parents.get(id(node), 0) > 1:
            return [self._share(node)]
        if cls is Seq:
            return self._sequence(node, owner)
        if cls is Alt:
            return self._alternatives(node, owner)
        assert cls is Repeat
        inner = self._conv(node.item, owner, node.min == node.max == 1)
        if node.min == node.max == 1:
            return inner
        if inner.__class__ is list or inner.__class__ is dict:
            return self.builder.repeat_symbols(self._as_symbols(inner, owner), node.min, node.max, owner)
        return repeat(inner, node.min, node.max)

    def _sequence(self, node: Seq, owner: str):
        """A sequence with a hole: the hole-free items between those with a hole (most items are:
        characters, literals) go to terminals as runs of nodes, without a look at each."""
        out: list[str] = []
        run: list[Node] = []
        if self._spell(node, owner, run, out):  # every hole below was under an intersection on_meet replaced
            return seq(*run)
        self.builder._flush(run, out)
        return out

    def _spell(self, node: Seq, owner: str, run: list[Node], out: list[str]) -> bool:
        """The items of a sequence with a hole into ``run`` (regular pieces) and ``out`` (symbols,
        the run flushed before them); whether every piece was regular. A sequence item with a hole
        and no other parent (an object's member kept whole by ``cat``) is spelled in place, as the
        items ``seq`` would have put there: its first and last regular items join their neighbours'
        terminals (a member's name and colon, and the bracket its value opens)."""
        items, flush = node.items, self.builder._flush
        regular = True
        start = 0
        for i in self._holey(node):
            run += items[start:i]
            start = i + 1
            x = items[i]
            if x.__class__ is Seq and self._parents.get(id(x), 0) <= 1:
                self._steps += 1
                regular = self._spell(x, owner, run, out) and regular
                continue
            got = self._conv(x, owner)
            if got.__class__ is list or got.__class__ is dict:
                flush(run, out)
                out += self._as_symbols(got, owner)
                regular = False
            else:
                run.append(got)
        run += items[start:]
        return regular

    def _alternatives(self, node: Alt, owner: str):
        """A union with a hole: its alternatives (a union among them flattened), or a regular piece
        where every hole below was under an intersection that on_meet replaced."""
        items = node.items
        got = list(items)
        for i in self._holey(node):
            got[i] = self._conv(items[i], owner)
        for x in got:
            if x.__class__ is list or x.__class__ is dict:
                break
        else:
            return alt(*got)
        out: dict[tuple[str, ...], None] = {}
        for x in got:
            out.update(dict.fromkeys(self._as_alternatives(x)))
        return out

    def _share(self, node: Node) -> str:
        name = self._shared.get(id(node))
        if name is None:
            name = self._shared[id(node)] = f"shared_{len(self._shared)}"
            self._rule(name, node)
        return name

    # ------------------------------------------------------------------ validation
    def _build(self) -> CfgGrammar:
        """Drop what derives no finite string (a recursion without a base case), then validate."""
        b = self.builder
        pool = ExprPool.with_common()  # the grammar's compile starts from it (CfgGrammar.pool)
        left = max(self.deadline - time.monotonic(), 0.05)
        with pool.bound.limit(left, "checking the terminals of a JSON Schema grammar"):
            live = {n: t for n, t in b.terminals.items() if t.node != EMPTY and not _surely_empty(pool, t.node)}
        draft = CfgGrammar(dict(b.rules), live, START)
        good = draft._productive()
        if START not in good:
            raise SchemaError("the schema accepts no (finite) instance")
        bad = (b.rules.keys() | b.terminals.keys()) - good  # usually none: then every rule stays whole
        rules = {}
        for name, rule in b.rules.items():
            if name in good:
                if bad and not all(bad.isdisjoint(a) for a in rule.alternatives):
                    rule = Rule(name, tuple(a for a in rule.alternatives if bad.isdisjoint(a)), rule.priority)
                rules[name] = rule
        grammar = CfgGrammar(rules, live, START).validate(productive=good)  # the rules kept are productive
        grammar.pool = pool
        return grammar


class _HoleRules(GrammarBuilder):
    """The rules and terminals ``SchemaCfg`` makes. It writes the rules' alternatives itself (from
    the AST, where a piece is regular exactly when it has no hole: the generic EBNF path built an
    expression per node and asked ``to_regex`` about every item again and again), and asks here for
    the terminals of each run of hole-free items. A run shared by several places (each place builds
    it from the same AST nodes) becomes its terminals once, found by its nodes' identities instead
    of building and structurally comparing a new ``Seq`` each time.

    With a ``separator`` (the lowering's ``ws , ws`` between members and items), a run is cut around
    each separator in it, which becomes a terminal of its own: the same comma was otherwise the
    start of one terminal (``, "other name": ``, an object's further members) and a terminal alone
    in another place (before declared names), so two lexemes were in flight after it and the mask
    walk took a parser step at every byte of every name, where one lexeme goes on in the lexer alone.
    The language is the same (only where terminals meet moves)."""

    def __init__(self, start: str, separator: Node | None = None):
        super().__init__(start)
        self._runs: dict[tuple[int, ...], tuple[tuple[Node, ...], tuple[str, ...]]] = {}  # nodes kept
        self._sep = separator
        self._sep_items = () if separator is None or separator == EPSILON else (
            separator.items if separator.__class__ is Seq else (separator,)
        )  # fmt: skip

    def _flush(self, run: list[Node], out: list[str]) -> None:
        if not run:
            return
        key = tuple(map(id, run))
        hit = self._runs.get(key)
        if hit is None:
            names = tuple(self.terminal_for(p) for p in self._pieces(flat_seq(*run)))  # (one terminal per run)
            hit = self._runs[key] = (tuple(run), names)
        run.clear()
        out.extend(hit[1])

    def _pieces(self, node: Node) -> list[Node]:
        """node cut around each separator in its items (the separators kept, in order); EPSILON none."""
        if node == EPSILON:
            return []
        sep = self._sep_items
        if not sep or node.__class__ is not Seq or len(node.items) <= len(sep):
            return [node]
        items, k = node.items, len(sep)
        mark, before = sep[k // 2], k // 2  # the comma, and the items of the separator before it
        if not any(x is mark for x in items):  # the lowering's own nodes: found by identity
            return [node]
        pieces: list[Node] = []
        start = 0
        for i, x in enumerate(items):
            if x is mark:
                at = i - before
                if at >= start and at + k <= len(items) and all(items[at + j] is sep[j] for j in range(k)):
                    if at > start:
                        pieces.append(seq(*items[start:at]))
                    pieces.append(self._sep)
                    start = at + k
        if start < len(items):
            pieces.append(seq(*items[start:]))
        return pieces


def _surely_empty(pool: ExprPool, node: Node) -> bool:
    """Whether a terminal with an intersection or complement inside matches nothing (the plain
    constructors already reduce an empty language without them to EMPTY)."""
    if not node.has_meet:
        return False
    try:
        return not pool.is_live(pool.intern(node), _EMPTINESS_BUDGET)
    except LimitError:
        return False


def survey_holes(node: Node, names: frozenset[str]) -> tuple[set[str], bool] | None:
    """What filling the node's holes (``fill_holes`` with ``meets``: the intersections above holes
    resolved apart) meets: None where it would still leave an intersection or complement (one with
    no hole below) or a hole named otherwise than ``names`` (one not below an intersection); else
    (the names of the holes not below an intersection, whether an intersection has a hole below).
    One walk, which stops at the first obstacle; an intersection with a hole below is not entered
    (its replacement is another's to check)."""
    seen: set[int] = set()
    found: set[str] = set()
    meets = False
    stack = [node]
    while stack:
        x = stack.pop()
        if not x._open:
            if x._meet:  # an intersection or complement with no hole below
                return None
            continue
        if id(x) in seen:
            continue
        seen.add(id(x))
        cls = x.__class__
        if cls is Hole:
            if x.name not in names:
                return None
            found.add(x.name)
        elif cls is And or cls is Not:
            meets = True
        elif cls is Seq or cls is Alt:
            stack += x.items
        elif cls is Repeat:
            stack.append(x.item)
    return found, meets


def has_meet(node: Node) -> bool:
    """Whether an intersection or complement occurs in the node (``Node.has_meet``: known since the
    node was built)."""
    return node.has_meet
