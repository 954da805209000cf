"""Regex AST: immutable, hashable, picklable nodes over Unicode text (and raw bytes where needed).

This is the language the regex parser produces and the JSON Schema compiler builds directly; the
byte-level automaton is derived from it (see ``expr_pool.ExprPool.intern``). Semantics are over
strings of valid UTF-8: ``Not`` is the complement within valid UTF-8 strings, never over raw bytes.

Build nodes with the helper functions (``seq``, ``alt``, ``repeat``, ``chars``, ``literal``, ...);
they simplify trivial cases and keep character ranges sorted and merged.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Node",
    "Chars",
    "ByteSet",
    "Seq",
    "Alt",
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
    "alt",
    "repeat",
    "intersect",
    "complement",
    "difference",
    "any_char",
    "any_string",
    "optional",
    "negate_ranges",
]

MAX_CODEPOINT = 0x10FFFF
Ranges = tuple[tuple[int, int], ...]


class Node:
    """Base of regex AST nodes."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Chars(Node):
    """One Unicode scalar value from sorted, disjoint, inclusive codepoint ranges (surrogates never match)."""

    ranges: Ranges


@dataclass(frozen=True, slots=True)
class ByteSet(Node):
    """One raw byte from sorted, disjoint, inclusive byte ranges (for byte-level constraints)."""

    ranges: Ranges


@dataclass(frozen=True, slots=True)
class Seq(Node):
    """Concatenation; ``Seq(())`` is the empty string."""

    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Alt(Node):
    """Union; ``Alt(())`` is the empty language."""

    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Repeat(Node):
    """``item{min,max}``; ``max=None`` is unbounded."""

    item: Node
    min: int
    max: int | None


@dataclass(frozen=True, slots=True)
class And(Node):
    """Intersection of languages."""

    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Not(Node):
    """Complement within the valid UTF-8 strings."""

    item: Node


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
    return seq(*(Chars(((ord(c), ord(c)),)) for c in text))


def seq(*items: Node) -> Node:
    flat: list[Node] = []
    for it in items:
        if it == EMPTY:
            return EMPTY
        if isinstance(it, Seq):
            flat.extend(it.items)
        else:
            flat.append(it)
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def alt(*items: Node) -> Node:
    flat: dict[Node, None] = {}
    for it in items:
        for x in it.items if isinstance(it, Alt) else (it,):
            flat[x] = None
    return next(iter(flat)) if len(flat) == 1 else Alt(tuple(flat))


def repeat(item: Node, min: int = 0, max: int | None = None) -> Node:
    if min < 0 or (max is not None and max < min):
        raise ValueError(f"bad repeat bounds {{{min},{max}}}")
    if max == 0 or item == EPSILON:
        return EPSILON
    if item == EMPTY:
        return EPSILON if min == 0 else EMPTY
    if min == 1 and max == 1:
        return item
    return Repeat(item, min, max)


def optional(item: Node) -> Node:
    return repeat(item, 0, 1)


def intersect(*items: Node) -> Node:
    return items[0] if len(items) == 1 else And(tuple(items))


def complement(item: Node) -> Node:
    return item.item if isinstance(item, Not) else Not(item)


def difference(a: Node, b: Node) -> Node:
    return And((a, Not(b)))


def any_char() -> Node:
    """Any Unicode scalar value (UTF-8 encodable codepoint)."""
    return Chars(((0, 0xD7FF), (0xE000, MAX_CODEPOINT)))


def any_string() -> Node:
    """Every valid UTF-8 string."""
    return Repeat(any_char(), 0, None)
