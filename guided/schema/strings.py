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
    negate_ranges,
    repeat,
    seq,
    trie_left,
)

__all__ = [
    "encode",
    "none_of",
    "json_string",
    "json_literal_string",
    "quoted",
    "string_body",
    "ANY_STRING_BODY",
    "ENC_ANY_CHAR",
    "ESCAPES",
    "other_than",
    "word_char",
    "RAW_RANGES",
]

_SHORT = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r", 0x22: '\\"', 0x5C: "\\\\"}
# Characters written as themselves: everything but controls, '"' and '\'.
RAW_RANGES = ((0x20, 0x21), (0x23, 0x5B), (0x5D, 0xD7FF), (0xE000, 0x10FFFF))
_ESCAPED = [c for c in range(0x20)] + [0x22, 0x5C]
_HEX = "0123456789abcdef"


def _escape(c: int) -> str:
    return _SHORT.get(c) or f"\\u00{_HEX[c >> 4]}{_HEX[c & 15]}"


@lru_cache(maxsize=1024)
def _encode_chars(ranges) -> Node:
    """The encoded characters of ``ranges``: those written raw, and the escapes of the others. Where
    every escaped character is in, the escapes are the one shared node ``ESCAPES``: the pool interns
    a two-way union per class instead of a 35-way one it left-factors into the same expression."""
    raw = []
    escaped = []
    for lo, hi in ranges:
        for a, b in RAW_RANGES:
            if max(lo, a) <= min(hi, b):
                raw.append((max(lo, a), min(hi, b)))
        escaped.extend(c for c in _ESCAPED if lo <= c <= hi)
    if len(escaped) == len(_ESCAPED):
        esc = ESCAPES
    else:
        esc = alt(*(literal(_escape(c)) for c in escaped))
    return alt(chars(raw), esc) if raw else esc


# every escape, left-factored: a backslash, then the rest of one
ESCAPES = seq(literal("\\"), alt(*(literal(_escape(c)[1:]) for c in _ESCAPED)))
ANY_CHAR = any_char()
ENC_ANY_CHAR = _encode_chars(ANY_CHAR.ranges)
ANY_STRING_BODY = Repeat(ENC_ANY_CHAR, 0, None)
_QUOTE = literal('"')


@lru_cache(maxsize=1024)
def encode(node: Node) -> Node:
    """The encoded form of a language of decoded strings (see the module docstring); memoized, so
    equal languages (a cached pattern, a shared sub-language) come back as one shared node."""
    if isinstance(node, Chars):
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
    """The encoded strings (unquoted) whose decoded text is none of ``words``, without complement:
    the trie of the words, left at any point (or ended at a node that is not a word's end), a
    ``TrieLeft``. Built encoded, so it costs no ``encode`` pass; ``none_of(w)`` is ``encode`` of the
    decoded trie. Every string of the body's characters begins one of its strings (a ``Cofinite``
    union), so the token side serves them from the string slice."""
    return trie_left(words, word_char, other_than, ANY_STRING_BODY)


def word_char(c: str) -> Node:
    """A character of a name, encoded (``_encode_chars`` keeps one node per character)."""
    return _encode_chars(((ord(c), ord(c)),))


@lru_cache(maxsize=1024)
def other_than(kids: tuple[str, ...]) -> Node:
    """Encoded strings that begin with a character none of ``kids`` (most trie nodes of names have one
    or two children, from a small alphabet: the same few sets come back at every node)."""
    return seq(_encode_chars(negate_ranges(tuple((ord(k), ord(k)) for k in kids))), ANY_STRING_BODY)


def quoted(body: Node) -> Node:
    return seq(_QUOTE, body, _QUOTE)


def string_body(min_len: int = 0, max_len: int | None = None) -> Node:
    """Encoded strings of min_len..max_len characters (unquoted)."""
    if min_len == 0 and max_len is None:
        return ANY_STRING_BODY
    return repeat(ENC_ANY_CHAR, min_len, max_len)


def json_string(decoded: Node | None = None) -> Node:
    """The quoted JSON string language of a decoded-string language (None: every string)."""
    return quoted(ANY_STRING_BODY if decoded is None else encode(decoded))


@lru_cache(maxsize=1024)
def json_literal_string(text: str) -> Node:
    """The one canonical encoding of ``text`` as a quoted JSON string (one shared node per text)."""
    return seq(*(_char(c) for c in json.dumps(text, ensure_ascii=False)))


@lru_cache(maxsize=1024)
def _char(c: str) -> Node:
    """One shared node per character: equal literals then share their leaves (fewer nodes to build
    and to intern)."""
    return literal(c)
