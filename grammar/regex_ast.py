"""Regex AST: immutable, hashable, picklable nodes over Unicode text (and raw bytes where needed).

This is the language the regex parser produces and the JSON Schema compiler builds directly; the
byte-level automaton is derived from it (see ``expr_pool.ExprPool.intern``). Semantics are over
strings of valid UTF-8: ``Not`` is the complement within valid UTF-8 strings, never over raw bytes.

Build nodes with the helper functions (``seq``, ``alt``, ``repeat``, ``chars``, ``literal``, ...);
they simplify trivial cases and keep character ranges sorted and merged.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from operator import attrgetter

from guided.grammar.collector import at_rest

__all__ = [
    "Node",
    "Chars",
    "ByteSet",
    "Seq",
    "Alt",
    "Cofinite",
    "TrieLeft",
    "Repeat",
    "And",
    "Not",
    "EMPTY",
    "EPSILON",
    "MAX_CODEPOINT",
    "chars",
    "byte_set",
    "literal",
    "seq",
    "cat",
    "flat_seq",
    "alt",
    "repeat",
    "intersect",
    "complement",
    "difference",
    "any_char",
    "any_string",
    "special_token",
    "with_specials",
    "optional",
    "negate_ranges",
    "trie_left",
    "Recursive",
    "recursive",
    "Let",
]

MAX_CODEPOINT = 0x10FFFF
Ranges = tuple[tuple[int, int], ...]


_HASH = attrgetter("_hash")  # a child's cached hash, read without a Python-level __hash__ call
_MEET = attrgetter("_meet")  # whether a child holds an intersection or complement (``Node.has_meet``)
_OPEN = attrgetter("_open")  # whether a child holds a placeholder (``Node.is_open``)


class Node:
    """Base of regex AST nodes.

    Equality is structural (same node type, equal fields). The hash is computed once, when the node is
    built, from the (already cached) hashes of its fields: recomputing it on every call would re-walk
    the whole subtree, which is exponential over shared subtrees (DAG-shaped ASTs); the node types
    below hash their children's cached hashes directly (``_HASH``). The cached value is
    never pickled: ``__reduce__`` rebuilds the node through its constructor, so the hash is recomputed
    in the unpickling process (string hashes differ between processes).
    """

    __slots__ = ("_hash", "_meet", "_open")

    def __post_init__(self) -> None:
        # (the node types of this module set their own: this is a caller's node type, a placeholder)
        object.__setattr__(self, "_hash", hash((type(self).__name__, *self._fields())))
        object.__setattr__(self, "_meet", False)
        object.__setattr__(self, "_open", True)

    @property
    def has_meet(self) -> bool:
        """Whether an intersection or complement (``And``, ``Not``) occurs in the node: set when the
        node is built, from its children's (a ``Recursive`` leaf's body is not looked into)."""
        return self._meet

    @property
    def is_open(self) -> bool:
        """Whether a placeholder occurs in the node: a node of a type this module does not define (a
        caller's, such as the JSON Schema lowering's ``Hole``), which no automaton takes. Set when
        the node is built, from its children's; a ``Let`` binds its placeholders (only its values
        count), and a ``Recursive`` leaf's body is not looked into. (Loops over many nodes may read
        the slot, ``_open``, without the property call.)"""
        return self._open

    def _fields(self) -> tuple:
        return tuple(getattr(self, f) for f in self.__match_args__)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        if self is other:
            return True
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._hash == other._hash and _equal(self, other)

    def __ne__(self, other) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __reduce__(self):
        return (type(self), self._fields())


def _ranges_equal(self, other) -> bool:
    """``==`` of two leaves (``Chars``, ``ByteSet``): their ranges compared directly, without
    ``_equal``'s walk. Most of a compile's structural comparisons were of a character built apart
    from the common pool's equal one."""
    if self is other:
        return True
    if other.__class__ is not self.__class__:
        return NotImplemented
    return self._hash == other._hash and self.ranges == other.ranges


@dataclass(frozen=True, slots=True, eq=False)
class Chars(Node):
    """One Unicode scalar value from sorted, disjoint, inclusive codepoint ranges (surrogates never match)."""

    ranges: Ranges

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(("Chars", self.ranges)))
        object.__setattr__(self, "_meet", False)
        object.__setattr__(self, "_open", False)

    __eq__ = _ranges_equal
    __hash__ = Node.__hash__


_ASCII = tuple(Chars(((o, o),)) for o in range(128))  # the one node of each ASCII character (literal)


@dataclass(frozen=True, slots=True, eq=False)
class ByteSet(Node):
    """One raw byte from sorted, disjoint, inclusive byte ranges (for byte-level constraints)."""

    ranges: Ranges

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(("ByteSet", self.ranges)))
        object.__setattr__(self, "_meet", False)
        object.__setattr__(self, "_open", False)

    __eq__ = _ranges_equal
    __hash__ = Node.__hash__


@dataclass(frozen=True, slots=True, eq=False)
class Seq(Node):
    """Concatenation; ``Seq(())`` is the empty string."""

    items: tuple[Node, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(("Seq", tuple(map(_HASH, self.items)))))
        object.__setattr__(self, "_meet", any(map(_MEET, self.items)))
        object.__setattr__(self, "_open", any(map(_OPEN, self.items)))


@dataclass(frozen=True, slots=True, eq=False)
class Alt(Node):
    """Union; ``Alt(())`` is the empty language."""

    items: tuple[Node, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(("Alt", tuple(map(_HASH, self.items)))))
        object.__setattr__(self, "_meet", any(map(_MEET, self.items)))
        object.__setattr__(self, "_open", any(map(_OPEN, self.items)))


@dataclass(frozen=True, slots=True, eq=False)
class Cofinite(Alt):
    """A union (its ``items``, and nothing more) of which every string of ``body``'s characters is
    a prefix: ``body`` is a repeat ``X{lo,}`` of a character class, and the union holds all but
    finitely many X-strings (an object's other keys: every string but the declared names). A lexer
    state beginning with one allows every token of X-characters (``slice_forms``), which the plain
    union's shape does not show once interned. Code that does not know it reads an ``Alt``."""

    body: Node

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(("Cofinite", tuple(map(_HASH, self.items)), self.body._hash)))
        object.__setattr__(self, "_meet", self.body._meet or any(map(_MEET, self.items)))
        object.__setattr__(self, "_open", self.body._open or any(map(_OPEN, self.items)))


class TrieLeft(Cofinite):
    """Every string but ``words``, as the union by which the trie of the words is left (see
    ``trie_left``): a ``Cofinite`` over ``body`` whose ``items`` are built the first time code reads
    them. ``ExprPool.intern`` makes its expression from the words directly, without those nodes: an
    object's other member names (every name but the declared ones) were thousands of AST nodes in a
    big schema, built and then interned node by node, a third of its compile; nothing else reads them
    in a compile. ``char(c)`` spells a character of a word, ``other(kids)`` the strings that begin
    with a character none of ``kids`` (and go on in ``body``); both must return equal nodes for equal
    arguments (they are memoised functions: equality and the hash compare them by identity)."""

    __slots__ = ("words", "char", "other", "_items")

    def __init__(self, words, char, other, body: Node):
        words = tuple(sorted(set(words)))
        for name, value in (("words", words), ("char", char), ("other", other), ("body", body), ("_items", None)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "_hash", hash(("TrieLeft", words, char, other, body._hash)))
        object.__setattr__(self, "_meet", body._meet)  # (its items: characters and ``other``'s classes)
        object.__setattr__(self, "_open", body._open)

    @property
    def items(self) -> tuple[Node, ...]:
        built = self._items
        if built is None:
            built = _left(_trie(self.words), self.char, self.other, self.body).items
            object.__setattr__(self, "_items", built)
        return built

    def __eq__(self, other) -> bool:
        if self is other:
            return True
        if other.__class__ is not TrieLeft:
            return NotImplemented
        return (self._hash == other._hash and self.words == other.words and self.char is other.char
                and self.other is other.other and self.body == other.body)  # fmt: skip

    __hash__ = Node.__hash__

    def __reduce__(self):
        return (TrieLeft, (self.words, self.char, self.other, self.body))

    def __repr__(self) -> str:
        return f"TrieLeft(words={self.words!r})"


def trie_left(words, char, other, body: Node) -> Node:
    """The strings (of ``body``'s characters) that are none of ``words``, without complement: the trie
    of the words, left at any point (a first character that is no child there, ``other(kids)``) or
    ended at a node where no word ends (``TrieLeft``; with one word, the empty one: ``other(())``)."""
    words = tuple(sorted(set(words)))
    return other(()) if words == ("",) else TrieLeft(words, char, other, body)


def _trie(words: tuple[str, ...]) -> dict:
    """The words' trie: a dict per node, a character to its child, ``None`` where a word ends."""
    trie: dict = {}
    for w in words:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[None] = True
    return trie


def _left(node: dict, char, other, body: Node) -> Node:
    """The strings left once the trie is at ``node`` (``TrieLeft.items``; ``ExprPool`` builds the same
    expression from the trie)."""
    kids = tuple(sorted(k for k in node if k is not None))
    out = alt(
        EPSILON if None not in node else EMPTY,
        other(kids),
        *(seq(char(k), _left(node[k], char, other, body)) for k in kids),
    )
    return Cofinite(out.items, body) if out.__class__ is Alt else out


@dataclass(frozen=True, slots=True, eq=False)
class Recursive(Node):
    """A language defined in terms of itself (made by ``recursive``): the leaf stands for its
    ``body``, in which the leaf itself occurs, each time after at least one byte (a JSON value inside
    an array or an object). Such a language is not regular, but its derivatives are expressions like
    any other (the body's, with the leaf still unexpanded inside): the lazy DFA builds the states a
    text reaches, nested as deep as it nests. Equal by name (one per definition in a process); it
    pickles as its definition."""

    name: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(("Recursive", self.name)))
        object.__setattr__(self, "_meet", False)
        object.__setattr__(self, "_open", False)

    def __eq__(self, other) -> bool:
        return other.__class__ is Recursive and other.name == self.name

    def __ne__(self, other) -> bool:
        return not self.__eq__(other)

    __hash__ = Node.__hash__

    def __reduce__(self):
        template, marker, _, first_bytes, min_len = _RECURSIVE[self.name]
        return (recursive, (template, marker, first_bytes, min_len))

    @property
    def body(self) -> Node:
        return _RECURSIVE[self.name][2]

    @property
    def definition(self) -> tuple[Node, Node]:
        """(template, marker), as ``recursive`` took them: no cycle, unlike the body."""
        return _RECURSIVE[self.name][:2]

    @property
    def first_bytes(self) -> int:
        """The bytes its strings may begin with (a 256-bit set)."""
        return _RECURSIVE[self.name][3]

    @property
    def min_len(self) -> int:
        """The length of its shortest string."""
        return _RECURSIVE[self.name][4]


@dataclass(frozen=True, slots=True, eq=False)
class Let(Node):
    """``body`` in which every node equal to ``names[i]`` (a placeholder: a node of a class of the
    caller's, compared by structural equality) stands for ``values[i]`` (an expression without
    placeholders, a ``Recursive`` leaf say). Only as the root of what ``ExprPool.intern`` is given:
    interning takes each placeholder as its value where it meets it, so the body's paths down to
    the placeholders are never rebuilt to put the values in (a schema's open objects each hold the
    schema-free value: that rebuilt nearly the whole schema)."""

    body: Node
    names: tuple[Node, ...]
    values: tuple[Node, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(("Let", self.body._hash, self.names, self.values)))
        object.__setattr__(self, "_meet", self.body._meet or any(map(_MEET, self.values)))
        object.__setattr__(self, "_open", any(map(_OPEN, self.values)))  # (the names are bound)


# name -> (template, marker, body, first bytes, shortest length); (template, marker) -> name
_RECURSIVE: dict[str, tuple] = {}
_RECURSIVE_NAMES: dict[tuple[Node, Node], str] = {}
_RECURSIVE_LOCK = threading.Lock()


def recursive(template: Node, marker: Node, first_bytes: int, min_len: int) -> Recursive:
    """The language L = ``template`` with every node equal to ``marker`` replaced by L, as a
    ``Recursive`` leaf (one per (template, marker) in the process). Every marker must follow at least
    one byte in the template; ``first_bytes`` is the 256-bit set of the bytes L's strings begin with
    and ``min_len`` the length of its shortest one, which the leaf's expression needs before its body
    is interned (``ExprPool`` checks them against the body). The template's unions, concatenations,
    repeats, intersections and complements are rebuilt down to the markers (nothing else may hold
    one)."""
    key = (template, marker)
    with _RECURSIVE_LOCK:
        name = _RECURSIVE_NAMES.get(key)
        if name is None:
            name = f"rec{len(_RECURSIVE)}"
            leaf = Recursive(name)
            _RECURSIVE[name] = (template, marker, _substituted(template, marker, leaf, {}), first_bytes, min_len)
            _RECURSIVE_NAMES[key] = name
    return Recursive(name)


def _substituted(node: Node, marker: Node, leaf: Node, memo: dict) -> Node:
    got = memo.get(id(node))
    if got is not None:
        return got
    cls = node.__class__
    if node == marker:
        out = leaf
    elif cls is Seq or cls is Alt or cls is And:
        items = tuple(_substituted(x, marker, leaf, memo) for x in node.items)
        out = node if all(a is b for a, b in zip(items, node.items, strict=True)) else cls(items)
    elif cls is Repeat or cls is Not:
        item = _substituted(node.item, marker, leaf, memo)
        out = node if item is node.item else Repeat(item, node.min, node.max) if cls is Repeat else Not(item)
    else:
        out = node
    memo[id(node)] = out
    return out


@dataclass(frozen=True, slots=True, eq=False)
class Repeat(Node):
    """``item{min,max}``; ``max=None`` is unbounded."""

    item: Node
    min: int
    max: int | None

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(("Repeat", self.item._hash, self.min, self.max)))
        object.__setattr__(self, "_meet", self.item._meet)
        object.__setattr__(self, "_open", self.item._open)


@dataclass(frozen=True, slots=True, eq=False)
class And(Node):
    """Intersection of languages."""

    items: tuple[Node, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(("And", tuple(map(_HASH, self.items)))))
        object.__setattr__(self, "_meet", True)
        object.__setattr__(self, "_open", any(map(_OPEN, self.items)))


@dataclass(frozen=True, slots=True, eq=False)
class Not(Node):
    """Complement within the valid UTF-8 strings."""

    item: Node

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(("Not", self.item._hash)))
        object.__setattr__(self, "_meet", True)
        object.__setattr__(self, "_open", self.item._open)


_PLAIN = frozenset((Chars, ByteSet, Seq, Alt, Cofinite, Repeat, And, Not, Let))


# Pairs of distinct nodes found equal, by their ids, with the two nodes (kept alive, so that the ids
# stay theirs): a compile compares the same separately built subtrees again and again (the lowering's
# canonical nodes, the expression pool's memo), each time a walk of both. Emptied when the last
# compile running ends (``collector.at_rest``) and when full.
_SAME: dict[tuple[int, int], tuple] = {}
_SAME_MAX = 1 << 16


@at_rest
def forget_equal_pairs() -> None:
    """Drop the pairs ``_equal`` remembers (what they keep alive goes with them)."""
    _SAME.clear()


def _equal(a: Node, b: Node) -> bool:
    """Structural equality, iteratively and once per pair of subtrees: comparing two separately built
    but equal DAGs field by field would re-compare shared subtrees exponentially often (and recurse
    as deep as the nesting). Every pair of subtrees a walk that ends equal compared is equal too:
    they are remembered (``_SAME``), and a later walk stops at them."""
    seen: dict[tuple[int, int], tuple] = {}
    same = _SAME
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if x is y:
            continue
        cls = x.__class__
        if cls is not y.__class__:
            return False
        if cls not in _PLAIN:  # a leaf value, or a subclass with its own equality
            if not x == y:
                return False
            continue
        if x._hash != y._hash:
            return False
        key = (id(x), id(y))
        if key in seen or key in same:
            continue
        seen[key] = (x, y)
        for f in cls.__match_args__:
            u, v = getattr(x, f), getattr(y, f)
            if isinstance(u, Node):
                stack.append((u, v))
            elif f == "items" and type(u) is tuple and type(v) is tuple:
                if len(u) != len(v):
                    return False
                stack.extend(zip(u, v, strict=True))
            elif u != v:
                return False
    if len(same) + len(seen) > _SAME_MAX:
        same.clear()
    same.update(seen)
    return True


EMPTY = Alt(())
EPSILON = Seq(())


def _normalize(ranges, top: int) -> Ranges:
    out: list[list[int]] = []
    for lo, hi in sorted((int(a), int(b)) for a, b in ranges):
        if lo > hi or hi < 0 or lo > top:
            continue
        lo, hi = max(lo, 0), min(hi, top)
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((a, b) for a, b in out)


def negate_ranges(ranges: Ranges, top: int = MAX_CODEPOINT) -> Ranges:
    """The complement of sorted disjoint ranges within [0, top]."""
    out, nxt = [], 0
    for lo, hi in _normalize(ranges, top):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= top:
        out.append((nxt, top))
    return tuple(out)


def chars(ranges, negate: bool = False) -> Node:
    """A character class from (lo, hi) codepoint pairs (inclusive); EMPTY when it has no member."""
    if len(ranges) == 1 and not negate:
        lo, hi = ranges[0]
        if 0 <= lo <= hi <= MAX_CODEPOINT:
            return Chars(((lo, hi),))
    rs = _normalize(ranges, MAX_CODEPOINT)
    if negate:
        rs = negate_ranges(rs)
    return Chars(rs) if rs else EMPTY


def byte_set(ranges, negate: bool = False) -> Node:
    rs = _normalize(ranges, 255)
    if negate:
        rs = negate_ranges(rs, 255)
    return ByteSet(rs) if rs else EMPTY


def literal(text: str) -> Node:
    return seq(*(_ASCII[o] if o < 128 else Chars(((o, o),)) for o in map(ord, text)))


def seq(*items: Node) -> Node:
    flat: list[Node] = []
    for it in items:
        if it is EMPTY or (it.__class__ is Alt and not it.items):
            return EMPTY
        if isinstance(it, Seq):
            flat.extend(it.items)
        else:
            flat.append(it)
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def cat(*items: Node) -> Node:
    """``seq(*items)`` without flattening its arguments: a sequence argument stays one item. The
    same language, and interned the same expression (``ExprPool.intern`` right-nests concatenation),
    in a node of at most ``len(items)`` items, where ``seq`` copies every item of each sequence
    argument: for an object's members (name, colon, value) and the edges of objects in any order
    (one per member and set of members written), which spelled each member's name out again per
    edge. On 60 schemas of MaskBench's slowest percent to compile, ``cat`` there built 57% fewer
    sequence items and 15% less of the interning program."""
    kept: list[Node] = []
    for it in items:
        cls = it.__class__
        if cls is Seq:
            if it.items:
                kept.append(it)
        elif it is EMPTY or (cls is Alt and not it.items):
            return EMPTY
        else:
            kept.append(it)
    return kept[0] if len(kept) == 1 else Seq(tuple(kept))


def flat_seq(*items: Node) -> Node:
    """``seq(*items)`` with sequences inside sequence items expanded too, at every depth (``cat``'s
    nesting undone): one node for the same run of items however it was grouped, where a node is a
    key by its structure (a context-free grammar's terminals)."""
    return seq(*_unnested(items))


def _unnested(items):
    """The items, each sequence among them (at any depth) replaced by its own items, in order."""
    stack = list(reversed(items))
    while stack:
        it = stack.pop()
        if it.__class__ is Seq:
            stack.extend(reversed(it.items))
        else:
            yield it


def alt(*items: Node) -> Node:
    flat: dict[Node, None] = {}
    for it in items:
        for x in it.items if isinstance(it, Alt) else (it,):
            flat[x] = None
    return next(iter(flat)) if len(flat) == 1 else Alt(tuple(flat))


def repeat(item: Node, min: int = 0, max: int | None = None) -> Node:
    if min < 0 or (max is not None and max < min):
        raise ValueError(f"bad repeat bounds {{{min},{max}}}")
    if max == 0 or (item.__class__ is Seq and not item.items):
        return EPSILON
    if item.__class__ is Alt and not item.items:
        return EPSILON if min == 0 else EMPTY
    if min == 1 and max == 1:
        return item
    return Repeat(item, min, max)


def optional(item: Node) -> Node:
    return repeat(item, 0, 1)


def intersect(*items: Node) -> Node:
    """The intersection of one or more languages (none would mean "every string": refused, since a
    caller that built an empty list meant something else)."""
    if not items:
        raise ValueError("intersect() needs at least one language")
    return items[0] if len(items) == 1 else And(tuple(items))


def complement(item: Node) -> Node:
    return item.item if isinstance(item, Not) else Not(item)


def difference(a: Node, b: Node) -> Node:
    return And((a, Not(b)))


def any_char() -> Node:
    """Any Unicode scalar value (UTF-8 encodable codepoint)."""
    return Chars(((0, 0xD7FF), (0xE000, MAX_CODEPOINT)))


# gpt-oss's harmony format frames a reply with special tokens (``<|channel|>final<|message|>``). A
# vocabulary that has them (``Vocabulary.from_tokenizer``) spells each for grammars SPECIAL_OPEN + its
# text + SPECIAL_CLOSE: bytes that never occur in UTF-8, so no text matches them.
HARMONY_SPECIALS = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>")
SPECIAL_OPEN, SPECIAL_CLOSE = b"\xff", b"\xfe"


def special_token(text: str) -> Node:
    """A harmony special token (``<|channel|>``) as such a vocabulary spells it."""
    return seq(ByteSet(((SPECIAL_OPEN[0],) * 2,)), literal(text), ByteSet(((SPECIAL_CLOSE[0],) * 2,)))


def with_specials(text: str) -> Node:
    """``text`` whose harmony special tokens' names stand for the tokens (``special_token``), the rest
    for itself: ``"<|channel|>final<|message|>"`` is two special tokens around ``final``."""
    parts = re.split("(" + "|".join(map(re.escape, HARMONY_SPECIALS)) + ")", text)
    return seq(*(special_token(p) if p in HARMONY_SPECIALS else literal(p) for p in parts if p))


def any_string() -> Node:
    """Every valid UTF-8 string."""
    return Repeat(any_char(), 0, None)
