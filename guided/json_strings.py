"""JSON strings as regex AST: the canonical JSON encoding of a language of decoded strings.

JSON Schema constrains the *decoded* string (``minLength`` counts characters, ``pattern`` matches the
text after unescaping), while the model writes the *encoded* form. Every constraint is therefore built
over decoded characters first and then mapped through ``encode``: each character gets exactly one
encoding, the one ``json.dumps(..., ensure_ascii=False)`` writes (printable characters raw; ``"`` and
``\\`` as ``\\"`` and ``\\\\``; ``\\b \\f \\n \\r \\t``; other controls as lowercase ``\\u00XX``).
Because that code is injective and prefix-free, the map commutes with union, concatenation,
repetition, intersection and complement, so ``And``/``Not`` over decoded strings stay exact after
encoding. Other spellings (``\\u00e9``, ``\\/``) are never generated: a restriction of the output
language, never a relaxation of the schema.
"""

from __future__ import annotations

import json
from functools import lru_cache

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
    alt,
    any_char,
    chars,
    intersect,
    literal,
    repeat,
    seq,
)

__all__ = [
    "encode", "none_of", "json_string", "json_literal_string", "quoted", "string_body", "ANY_STRING_BODY", "RAW_RANGES",
]

_SHORT = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r", 0x22: '\\"', 0x5C: "\\\\"}
# Characters written as themselves: everything but controls, '"' and '\'.
RAW_RANGES = ((0x20, 0x21), (0x23, 0x5B), (0x5D, 0xD7FF), (0xE000, 0x10FFFF))
_ESCAPED = [c for c in range(0x20)] + [0x22, 0x5C]
_HEX = "0123456789abcdef"


def _escape(c: int) -> str:
    return _SHORT.get(c) or f"\\u00{_HEX[c >> 4]}{_HEX[c & 15]}"


class Hashed(Repeat):
    """``item{1,1}`` that hashes in O(1): the lowering's results are shared DAG nodes, and hashing a
    plain AST node re-walks its whole subtree, which is exponential over shared subtrees."""

    __slots__ = ("_h",)

    def __init__(self, item: Node):
        object.__setattr__(self, "item", item)
        object.__setattr__(self, "min", 1)
        object.__setattr__(self, "max", 1)
        object.__setattr__(self, "_h", hash((Repeat, item)))

    def __hash__(self) -> int:
        return self._h

    def __eq__(self, other) -> bool:
        return self is other or (type(other) is Hashed and self._h == other._h and self.item == other.item)

    def __reduce__(self):
        return (Hashed, (self.item,))

    def __repr__(self) -> str:  # shared subtrees would print exponentially often
        return f"Hashed(#{self._h & 0xFFFFFF:06x})"


def hashed(node: Node) -> Node:
    if isinstance(node, (Hashed, Chars)) or node in (EMPTY, EPSILON):
        return node
    return Hashed(node)


@lru_cache(maxsize=4096)
def _encode_chars(ranges) -> Node:
    raw = []
    escaped = []
    for lo, hi in ranges:
        for a, b in RAW_RANGES:
            if max(lo, a) <= min(hi, b):
                raw.append((max(lo, a), min(hi, b)))
        escaped.extend(c for c in _ESCAPED if lo <= c <= hi)
    if len(escaped) == len(_ESCAPED):
        esc = _ALL_ESCAPES
    else:
        esc = alt(*(literal(_escape(c)) for c in escaped))
    return alt(chars(raw), esc) if raw else esc


_ALL_ESCAPES = hashed(alt(*(literal(_escape(c)) for c in _ESCAPED)))
ENC_ANY_CHAR = hashed(_encode_chars(any_char().ranges))
ANY_STRING_BODY = Repeat(ENC_ANY_CHAR, 0, None)


def encode(node: Node) -> Node:
    """The encoded form of a language of decoded strings (see the module docstring)."""
    if isinstance(node, Chars):
        if node.ranges == any_char().ranges:
            return ENC_ANY_CHAR
        return _encode_chars(node.ranges)
    if isinstance(node, Seq):
        return seq(*(encode(x) for x in node.items))
    if isinstance(node, Alt):
        return alt(*(encode(x) for x in node.items))
    if isinstance(node, Repeat):
        return repeat(encode(node.item), node.min, node.max)
    if isinstance(node, And):
        return intersect(*(encode(x) for x in node.items))
    if isinstance(node, Not):
        return And((ANY_STRING_BODY, Not(encode(node.item))))
    if isinstance(node, ByteSet):
        raise ValueError("byte-level nodes have no decoded-string meaning")
    raise TypeError(f"not a regex AST node: {node!r}")


def none_of(words) -> Node:
    """Decoded strings other than the given ones, without complement: the trie of the words, left
    at any point (or ended at a node that is not a word's end)."""
    trie: dict = {}
    for w in words:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[None] = True
    return _leave(trie)


def _leave(node: dict) -> Node:
    kids = sorted(k for k in node if k is not None)
    other = chars([(ord(k), ord(k)) for k in kids], negate=True)
    rest = repeat(any_char(), 0, None)
    return alt(
        EPSILON if None not in node else EMPTY,
        seq(other, rest),
        *(seq(literal(k), _leave(node[k])) for k in kids),
    )


def quoted(body: Node) -> Node:
    return seq(literal('"'), body, literal('"'))


def string_body(min_len: int = 0, max_len: int | None = None) -> Node:
    """Encoded strings of min_len..max_len characters (unquoted)."""
    if min_len == 0 and max_len is None:
        return ANY_STRING_BODY
    return repeat(ENC_ANY_CHAR, min_len, max_len)


def json_string(decoded: Node | None = None) -> Node:
    """The quoted JSON string language of a decoded-string language (None: every string)."""
    return quoted(ANY_STRING_BODY if decoded is None else encode(decoded))


def json_literal_string(text: str) -> Node:
    """The one canonical encoding of ``text`` as a quoted JSON string."""
    return literal(json.dumps(text, ensure_ascii=False))
