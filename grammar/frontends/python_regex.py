"""Python ``re`` syntax (Lark's terminal dialect) -> regex AST, read with the standard library's own
regex parser so the dialect is exactly Python's.

Language semantics: lazy quantifiers match the same strings as greedy ones; ``\\d``, ``\\w``, ``\\s``
are Unicode unless the ASCII flag is set; ``.`` excludes only ``\\n`` unless DOTALL; IGNORECASE adds
the simple case variants of every character. Anchors, lookaround, backreferences, atomic groups and
possessive quantifiers cannot be enforced as a regular language here: GrammarError names them.
"""

from __future__ import annotations

import re
import sys
from functools import cache

from guided.errors import GrammarError
from guided.grammar.regex_ast import MAX_CODEPOINT, Node, alt, any_char, chars, negate_ranges, repeat, seq

try:  # Python >= 3.11
    from re import _constants as C  # type: ignore[attr-defined]
    from re import _parser as P
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as C  # type: ignore[no-redef]
    import sre_parse as P  # type: ignore[no-redef]

__all__ = ["parse_python_regex", "FLAG_LETTERS"]

FLAG_LETTERS = {"i": re.I, "m": re.M, "s": re.S, "l": 0, "u": re.U, "x": re.X}
_UNSUPPORTED = {
    "ASSERT": "lookahead/lookbehind",
    "ASSERT_NOT": "negative lookahead/lookbehind",
    "AT": "an anchor (^, $, \\b, \\A, \\Z)",
    "GROUPREF": "a backreference",
    "GROUPREF_EXISTS": "a conditional group",
    "ATOMIC_GROUP": "an atomic group",
    "POSSESSIVE_REPEAT": "a possessive quantifier",
}


def parse_python_regex(pattern: str, flags: int = 0, name: str = "") -> Node:
    """The regex AST of a Python regex (full-match language)."""
    try:
        tree = P.parse(pattern, flags)
    except re.error as e:
        raise GrammarError(f"bad regex /{pattern}/ in terminal {name}: {e}") from None
    return _Translator(pattern, name).seq(tree, tree.state.flags)


class _Translator:
    def __init__(self, pattern: str, name: str):
        self.pattern = pattern
        self.name = name

    def fail(self, what: str) -> GrammarError:
        where = f" in terminal {self.name}" if self.name else ""
        return GrammarError(f"regex /{self.pattern}/{where} uses {what}, which cannot be enforced exactly")

    def seq(self, items, flags: int) -> Node:
        return seq(*(self.item(op, av, flags) for op, av in items))

    def item(self, op, av, flags: int) -> Node:
        name = str(op)
        if name in _UNSUPPORTED:
            raise self.fail(_UNSUPPORTED[name])
        if op is C.LITERAL:
            return chars(_fold(((av, av),), flags))
        if op is C.NOT_LITERAL:
            return chars(_fold(((av, av),), flags), negate=True)
        if op is C.ANY:
            return any_char() if flags & re.S else chars(((0x0A, 0x0A),), negate=True)
        if op is C.IN:
            return self.char_set(av, flags)
        if op in (C.MAX_REPEAT, C.MIN_REPEAT):
            lo, hi, sub = av
            return repeat(self.seq(sub, flags), lo, None if hi == C.MAXREPEAT else hi)
        if op is C.SUBPATTERN:
            _, add, remove, sub = av
            return self.seq(sub, (flags | add) & ~remove)
        if op is C.BRANCH:
            return alt(*(self.seq(b, flags) for b in av[1]))
        raise self.fail(f"the construct {name}")

    def char_set(self, items, flags: int) -> Node:
        ranges: list[tuple[int, int]] = []
        negate = False
        for op, av in items:
            if op is C.NEGATE:
                negate = True
            elif op is C.LITERAL:
                ranges.append((av, av))
            elif op is C.RANGE:
                ranges.append(av)
            elif op is C.CATEGORY:
                ranges.extend(_category(str(av), bool(flags & re.A)))
            else:
                raise self.fail(f"the class item {op}")
        return chars(_fold(tuple(ranges), flags), negate=negate)


def _fold(ranges, flags: int):
    """Ranges plus the simple case variants of their members when IGNORECASE is set."""
    if not flags & re.I:
        return ranges
    out = list(ranges)
    for lo, hi in ranges:
        if hi - lo > 0x3000:  # large ranges: fold only the cased blocks of the BMP
            lo, hi = max(lo, 0), min(hi, 0xFFFF)
        for cp in range(lo, hi + 1):
            if 0xD800 <= cp <= 0xDFFF:
                continue
            ch = chr(cp)
            for v in {ch.lower(), ch.upper(), ch.swapcase()}:
                if len(v) == 1 and v != ch:
                    out.append((ord(v), ord(v)))
    return tuple(out)


def _category(cat: str, ascii_only: bool):
    base = cat.replace("CATEGORY_", "").replace("UNI_", "").replace("LOC_", "")
    neg = base.startswith("NOT_")
    kind = base[4:] if neg else base
    if kind == "LINEBREAK":
        r = ((0x0A, 0x0A),)
    else:
        r = _ascii_class(kind) if ascii_only else _unicode_class(kind)
    return negate_ranges(r) if neg else r


def _ascii_class(kind: str):
    return {
        "DIGIT": ((0x30, 0x39),),
        "WORD": ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)),
        "SPACE": ((0x09, 0x0D), (0x20, 0x20)),
    }[kind]


@cache
def _unicode_class(kind: str):
    """Python's Unicode \\d (isdecimal), \\w (isalnum or _), \\s (isspace) as codepoint ranges."""
    test = {"DIGIT": str.isdecimal, "WORD": lambda c: c.isalnum() or c == "_", "SPACE": str.isspace}[kind]
    out: list[tuple[int, int]] = []
    for cp in range(sys.maxunicode + 1):
        if test(chr(cp)):
            if out and out[-1][1] == cp - 1:
                out[-1] = (out[-1][0], cp)
            else:
                out.append((cp, cp))
    return tuple(r for r in out if r[0] <= MAX_CODEPOINT)
