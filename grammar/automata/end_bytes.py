"""The bytes a regex's strings can end with, read off its AST (a superset, never missing one).

A mask walk that starts inside a lexeme may skip a trie subtree when none of its bytes can end the
lexeme (see ``CfgAutomaton.lex_exit``); the last bytes of the terminal's regex bound those bytes for
every lexer state of the terminal without exploring its derivatives.
"""

from __future__ import annotations

from guided.grammar.regex_ast import Alt, ByteSet, Chars, Node, Repeat, Seq, TrieLeft

__all__ = ["ALL_BYTES", "last_bytes", "may_be_empty"]

ALL_BYTES = (1 << 256) - 1
CONTINUATION_BYTES = (1 << 0xC0) - (1 << 0x80)


def last_bytes(node: Node) -> int:
    """A superset of the last bytes of node's strings, as a 256-bit int (bit b: byte b)."""
    return _last_bytes(node, {})


def _last_bytes(node, memo: dict) -> int:
    """A superset of the last bytes of the strings of a regex AST node, as a 256-bit int."""
    r = memo.get(node)
    if r is not None:
        return r
    if isinstance(node, ByteSet):
        r = sum(((1 << (hi + 1)) - (1 << lo) for lo, hi in node.ranges), 0)
    elif isinstance(node, Chars):  # ASCII members end in themselves, others in a continuation byte
        r = 0
        for lo, hi in node.ranges:
            if lo <= 0x7F:
                r |= (1 << (min(hi, 0x7F) + 1)) - (1 << lo)
            if hi > 0x7F:
                r |= CONTINUATION_BYTES
    elif node.__class__ is TrieLeft:  # strings of its body's characters (its items are never built)
        r = _last_bytes(node.body, memo)
    elif isinstance(node, Alt):
        r = 0
        for x in node.items:
            r |= _last_bytes(x, memo)
    elif isinstance(node, Seq):
        r = 0
        for x in reversed(node.items):
            r |= _last_bytes(x, memo)
            if not may_be_empty(x):
                break
    elif isinstance(node, Repeat):
        r = 0 if node.max == 0 else _last_bytes(node.item, memo)
    else:  # intersections, complements: no syntactic answer
        r = ALL_BYTES
    memo[node] = r
    return r


def may_be_empty(node) -> bool:
    """Whether node may match the empty string (True when unsure)."""
    if isinstance(node, (ByteSet, Chars)):
        return False
    if isinstance(node, Seq):
        return all(may_be_empty(x) for x in node.items)
    if node.__class__ is TrieLeft:
        return "" not in node.words
    if isinstance(node, Alt):
        return any(may_be_empty(x) for x in node.items)
    if isinstance(node, Repeat):
        return node.min == 0 or may_be_empty(node.item)
    return True
