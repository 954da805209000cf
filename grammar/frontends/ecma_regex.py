"""ECMA-262 regex syntax (JSON Schema ``pattern``) -> regex AST.

``parse_regex(pattern)`` gives full-match semantics (the whole text must match), as a regex constraint
on generation means; ``parse_regex(pattern, search=True)`` gives JSON Schema's unanchored semantics
(some substring matches, ``^``/``$`` anchor it). Character-class escapes follow ECMA-262: ``\\d`` is
ASCII digits, ``\\w`` ASCII word characters, ``\\s`` includes the Unicode spaces; ``.`` excludes line
terminators. ``^``, ``$``, lookaround (``(?=``, ``(?!``, ``(?<=``, ``(?<!``) and word boundaries
(``\\b``, ``\\B``: lookaround on ``\\w``) are exact anywhere outside a repetition (``_Assertions``:
intersections and complements), as are ``$`` ending / ``^`` starting an iteration of ``*`` or ``+`` and
the tempered token ``((?!a)x)*`` before the end; elsewhere in a repetition, and for backreferences,
``\\p{..}`` and inline flags, a ``GrammarError`` names the construct.
"""

from __future__ import annotations

from dataclasses import dataclass

from guided.errors import GrammarError
from guided.grammar.automata.end_bytes import may_be_empty
from guided.grammar.regex_ast import (
    EMPTY,
    EPSILON,
    MAX_CODEPOINT,
    Alt,
    Chars,
    Node,
    Repeat,
    Seq,
    alt,
    any_string,
    chars,
    complement,
    intersect,
    negate_ranges,
    repeat,
    seq,
)

__all__ = ["parse_regex", "DIGIT", "WORD", "SPACE", "LINE_TERMINATORS"]

DIGIT = ((0x30, 0x39),)
WORD = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
SPACE = (
    (0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
    (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF),
)  # fmt: skip
LINE_TERMINATORS = ((0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029))
_CLASS_ESCAPES = {"d": DIGIT, "w": WORD, "s": SPACE}
_CONTROL_ESCAPES = {"t": 9, "n": 10, "v": 11, "f": 12, "r": 13}
MAX_REPEAT = 1_000_000


@dataclass(frozen=True, slots=True)
class _Anchor(Node):
    """``^`` (start=True) or ``$``; only a parse-time marker, removed before the AST is returned."""

    start: bool


@dataclass(frozen=True, slots=True)
class _Look(Node):
    """``(?=body)``, ``(?!body)``, ``(?<=body)``, ``(?<!body)``; a parse-time marker like ``_Anchor``."""

    ahead: bool
    negative: bool
    body: Node


def parse_regex(pattern: str, search: bool = False) -> Node:
    """Parse an ECMA-262 pattern into a regex AST.

    Parameters
    ----------
    pattern : str
    search : bool
        False: the text must match the whole pattern (anchors at the ends are no-ops).
        True: JSON Schema semantics, the text must contain a match (``^``/``$`` anchor it).
    """
    node = _Parser(pattern).parse()
    if not _has_anchor(node):
        return seq(any_string(), node, any_string()) if search else node
    around = any_string() if search else EPSILON
    if _has_look(node):
        return _Assertions(pattern).resolve(node, around, around)
    try:
        anchored = _anchored_branches(node, pattern)
    except GrammarError:  # an anchor inside: the general resolution (its error names what it cannot do)
        return _Assertions(pattern).resolve(node, around, around)
    branches = []
    for start, end, body in anchored:
        if search:
            body = seq(EPSILON if start else any_string(), body, EPSILON if end else any_string())
        branches.append(body)
    return alt(*branches)


MAX_ASSERTION_BRANCHES = 64


class _Assertions:
    """Anchors and lookaround, resolved into intersections and complements (regular languages are
    closed under both) wherever they are not inside a repetition.

    A pattern is split into branches (alternatives, and ``?`` groups taken or not) of flat items.
    In a branch, a lookbehind or ``^`` constrains what was read before it: the language of the
    input up to there (the context before the match, then the items) is intersected with
    ``any · body`` (or its complement, negative); ``^`` with the empty string. A lookahead or ``$``
    constrains what follows, to the end of the input: the rest of the branch and the context after
    the match, intersected with ``body · any`` (complement) or the empty string. Bodies are
    resolved the same way. Adjacent assertions commute (lookbehinds first); a lookahead before a
    later lookbehind of a branch, or an assertion under ``*``/``+``/``{n,m}``, is a GrammarError.
    """

    def __init__(self, pattern: str):
        self.pattern = pattern

    def error(self, what: str) -> GrammarError:
        return GrammarError(f"{what} in {self.pattern!r} cannot be enforced")

    def resolve(self, node: Node, pre: Node, post: Node) -> Node:
        return alt(*[self._branch(items, pre, post) for items in self._flatten(node)])

    def _flatten(self, node: Node) -> list[list[Node]]:
        if isinstance(node, (_Anchor, _Look)):
            return [[node]]
        if not _has_anchor(node):
            return [[node]]
        if isinstance(node, Seq):
            out: list[list[Node]] = [[]]
            for item in node.items:
                parts = self._flatten(item)
                out = [a + b for a in out for b in parts]
                if len(out) > MAX_ASSERTION_BRANCHES:
                    raise self.error(f"more than {MAX_ASSERTION_BRANCHES} alternatives around assertions")
            return out
        if isinstance(node, Alt):
            return [b for item in node.items for b in self._flatten(item)]
        if isinstance(node, Repeat) and node.max == 1:
            return self._flatten(node.item) + ([[]] if node.min == 0 else [])
        if isinstance(node, Repeat) and node.max is None and node.min <= 1 and not _has_look(node.item):
            return self._repeated_anchors(node)
        tempered = _tempered(node)
        if tempered is not None:
            return [[tempered]]
        raise self.error("an anchor or lookaround inside a repetition")

    def _repeated_anchors(self, node: Repeat) -> list[list[Node]]:
        """``(x|y$)*`` / ``(x|y$)+``: an iteration ending in ``$`` can only be the last (those after
        it match nothing), one starting with ``^`` only the first: ``x*`` or ``x* y $`` (and
        ``^ y x*``). Other anchors in a repetition are refused."""
        plain, ends, starts = [], [], []
        for items in self._flatten(node.item):
            marks = [i for i, x in enumerate(items) if isinstance(x, _Anchor)]
            if not marks:
                plain.append(seq(*items))
            elif marks == [len(items) - 1] and not items[-1].start:
                ends.append(seq(*items[:-1]))
            elif marks == [0] and items[0].start:
                starts.append(seq(*items[1:]))
            else:
                raise self.error("an anchor inside a repetition, neither ending nor starting an iteration")
        body = alt(*plain) if plain else EMPTY
        out: list[list[Node]] = [[repeat(body, node.min, None)]]
        if ends:
            out.append([repeat(body, 0, None), alt(*ends), _Anchor(False)])
        if starts:
            out.append([_Anchor(True), alt(*starts), repeat(body, 0, None)])
        if starts and ends:
            out.append([_Anchor(True), alt(*starts), repeat(body, 0, None), alt(*ends), _Anchor(False)])
        return out

    def _branch(self, items: list[Node], pre: Node, post: Node) -> Node:
        # adjacent assertions hold at one position, so they commute: those looking back go first
        out: list[Node] = []
        for x in items:
            run = len(out)
            while run and isinstance(out[run - 1], (_Anchor, _Look)):
                run -= 1
            out.append(x)
            if isinstance(x, (_Anchor, _Look)):
                out[run:] = sorted(out[run:], key=lambda y: not _looks_back(y))
        items = out
        behind = [i for i, x in enumerate(items) if _looks_back(x)]
        split = behind[-1] + 1 if behind else 0
        left = pre
        for x in items[:split]:
            if isinstance(x, _Anchor):
                if not x.start:
                    raise self.error("'$' before a lookbehind or '^'")
                left = _only_empty(left)
            elif isinstance(x, _Look):
                if x.ahead:
                    raise self.error("a lookahead before a lookbehind")
                body = self.resolve(x.body, any_string(), EPSILON)
                left = intersect(left, complement(body) if x.negative else body)
            else:
                left = seq(left, x)
        right = post
        for x in reversed(items[split:]):
            if isinstance(x, _Anchor):
                right = _only_empty(right)
            elif isinstance(x, _Look):
                body = self.resolve(x.body, EPSILON, any_string())
                right = intersect(complement(body) if x.negative else body, right)
            elif isinstance(x, _Tempered):
                if right != EPSILON:
                    raise self.error("a repeated lookahead not followed by the end of the input")
                # no position of the run starts a refused text (none of them is empty: see _tempered)
                refused = alt(*(self.resolve(b, EPSILON, any_string()) for b in x.refused))
                right = intersect(repeat(x.step, x.min, None), complement(seq(any_string(), refused)))
            else:
                right = seq(x, right)
        return seq(left, right)


@dataclass(frozen=True, slots=True)
class _Tempered(Node):
    """The tempered token ``((?!a)(?!b)x)*``: runs of ``step`` (one character) where no position
    starts ``a`` or ``b``; exact when the end of the input follows (``_Assertions._branch``)."""

    refused: tuple
    step: Node
    min: int


def _tempered(node: Repeat) -> _Tempered | None:
    """``node`` as a tempered token: an unbounded repeat of negative lookaheads whose bodies hold no
    assertion and not the empty string, then one look-free character class; else None."""
    items = node.item.items if isinstance(node.item, Seq) else (node.item,)
    if node.max is not None or len(items) < 2 or _has_anchor(items[-1]) or not isinstance(items[-1], Chars):
        return None
    looks = items[:-1]
    if not all(isinstance(x, _Look) and x.ahead and x.negative and not _has_anchor(x.body) for x in looks):
        return None
    if any(may_be_empty(x.body) for x in looks):
        return None
    return _Tempered(tuple(x.body for x in looks), items[-1], node.min)


def _looks_back(x: Node) -> bool:
    return (isinstance(x, _Anchor) and x.start) or (isinstance(x, _Look) and not x.ahead)


def _only_empty(node: Node) -> Node:
    """The empty string, if node's language has it (an anchor's condition on what is around it)."""
    if node == EPSILON or node == any_string():
        return EPSILON
    return intersect(EPSILON, node)


def _has_look(node: Node) -> bool:
    if isinstance(node, _Look):
        return True
    if isinstance(node, (Seq, Alt)):
        return any(_has_look(x) for x in node.items)
    return isinstance(node, Repeat) and _has_look(node.item)


def _anchored_branches(node: Node, pattern: str) -> list[tuple[bool, bool, Node]]:
    """Split a parsed pattern into (anchored at start, anchored at end, anchor-free body) branches."""
    if isinstance(node, _Anchor):
        return [(node.start, not node.start, EPSILON)]
    if isinstance(node, Alt):
        return [b for item in node.items for b in _anchored_branches(item, pattern)]
    if not isinstance(node, Seq) or not node.items:
        _check_no_anchor(node, pattern)
        return [(False, False, node)]
    items = list(node.items)
    for mid in items[1:-1]:
        _check_no_anchor(mid, pattern)
    if len(items) == 1:
        return _anchored_branches(items[0], pattern)
    out = []
    for s1, e1, first in _anchored_branches(items[0], pattern):
        if e1 and first == EPSILON and not s1:
            raise GrammarError(f"'$' before the end of the pattern in {pattern!r} cannot be enforced")
        for s2, e2, last in _anchored_branches(items[-1], pattern):
            if s2 and last == EPSILON and not e2:
                raise GrammarError(f"'^' after the start of the pattern in {pattern!r} cannot be enforced")
            if e1 or s2:
                raise GrammarError(f"an anchor in the middle of {pattern!r} cannot be enforced")
            out.append((s1, e2, seq(first, *items[1:-1], last)))
    return out


def _has_anchor(node: Node) -> bool:
    """An anchor or a lookaround (both are assertions about the text around the match)."""
    if isinstance(node, (_Anchor, _Look)):
        return True
    if isinstance(node, (Seq, Alt)):
        return any(_has_anchor(x) for x in node.items)
    return isinstance(node, Repeat) and _has_anchor(node.item)


def _check_no_anchor(node: Node, pattern: str) -> None:
    if isinstance(node, _Anchor):
        raise GrammarError(f"'^'/'$' in the middle of {pattern!r} cannot be enforced (only at the ends)")
    for child in getattr(node, "items", ()) or ((node.item,) if hasattr(node, "item") else ()):
        _check_no_anchor(child, pattern)


class _Parser:
    def __init__(self, pattern: str):
        self.p = pattern
        self.i = 0

    # ------------------------------------------------------------------ helpers
    def error(self, what: str) -> GrammarError:
        return GrammarError(f"{what} at position {self.i} of regex {self.p!r}")

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.p[j] if j < len(self.p) else ""

    def take(self) -> str:
        if self.i >= len(self.p):
            raise self.error("unexpected end")
        c = self.p[self.i]
        self.i += 1
        return c

    # ------------------------------------------------------------------ grammar
    def parse(self) -> Node:
        node = self.alternation()
        if self.i < len(self.p):
            raise self.error(f"unbalanced {self.peek()!r}")
        return node

    def alternation(self) -> Node:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.sequence())
        return branches[0] if len(branches) == 1 else Alt(tuple(branches))

    def sequence(self) -> Node:
        items: list[Node] = []
        while self.i < len(self.p) and self.peek() not in "|)":
            atom = self.atom()
            items.append(self.quantified(atom))
        return seq(*items) if items else EPSILON

    def quantified(self, atom: Node) -> Node:
        """An atom and at most one quantifier (ECMA-262: ``a**`` is "nothing to repeat")."""
        bounds = self._quantifier()
        if bounds is None:
            return atom
        if isinstance(atom, _Anchor):
            raise self.error("quantified anchor")
        self.i += 1
        if self.peek() == "?":  # lazy quantifier: same language
            self.i += 1
        elif self.peek() == "+":
            raise self.error("possessive quantifier")
        at = self.i
        if at < len(self.p) and self._quantifier() is not None:
            self.i = at
            raise self.error(f"nothing to repeat before {self.peek()!r}")
        return repeat(atom, *bounds)

    def _quantifier(self) -> tuple[int, int | None] | None:
        """(min, max) of the quantifier here, leaving ``i`` on its last character; None if none."""
        c = self.peek()
        if c == "*":
            return 0, None
        if c == "+":
            return 1, None
        if c == "?":
            return 0, 1
        if c == "{" and self._bounds() is not None:
            lo, hi, end = self._bounds()
            self.i = end - 1
            return lo, hi
        return None

    def _bounds(self):
        """(min, max, index after '}') when a valid {n}, {n,}, {n,m} starts here, else None."""
        j = self.p.find("}", self.i)
        if j < 0:
            return None
        body = self.p[self.i + 1 : j]
        parts = body.split(",")
        if len(parts) > 2 or not parts[0].isdigit() or (len(parts) == 2 and parts[1] and not parts[1].isdigit()):
            return None
        lo = int(parts[0])
        hi = lo if len(parts) == 1 else (int(parts[1]) if parts[1] else None)
        if (hi is not None and hi < lo) or lo > MAX_REPEAT or (hi or 0) > MAX_REPEAT:
            raise self.error(f"repeat bounds {{{body}}} are invalid or too large")
        return lo, hi, j + 1

    def atom(self) -> Node:
        c = self.take()
        if c == "(":
            return self.group()
        if c == "[":
            return chars(*self.char_class())
        if c == ".":
            return chars(LINE_TERMINATORS, negate=True)
        if c == "^":
            return _Anchor(True)
        if c == "$":
            return _Anchor(False)
        if c == "\\":
            return self.escape()
        if c in "*+?":
            raise self.error(f"nothing to repeat before {c!r}")
        if c == "{" and self._bounds_here():
            raise self.error("nothing to repeat before '{'")
        return chars(((ord(c), ord(c)),))

    def _bounds_here(self) -> bool:
        self.i -= 1
        ok = self._bounds() is not None
        self.i += 1
        return ok

    def group(self) -> Node:
        if self.peek() == "?":
            nxt = self.peek(1)
            if nxt == ":":
                self.i += 2
            elif nxt in "=!" or (nxt == "<" and self.peek(2) in "=!"):
                behind = nxt == "<"
                self.i += 3 if behind else 2
                negative = self.p[self.i - 1] == "!"
                body = self.alternation()
                if self.peek() != ")":
                    raise self.error("missing ')'")
                self.i += 1
                return _Look(not behind, negative, body)
            elif nxt == "<" or (nxt == "P" and self.peek(2) == "<"):  # named group (also Python's form)
                end = self.p.find(">", self.i)
                if end < 0:
                    raise self.error("unterminated group name")
                self.i = end + 1
            else:
                raise self.error("inline flags or unknown group syntax '(?'")
        node = self.alternation()
        if self.peek() != ")":
            raise self.error("missing ')'")
        self.i += 1
        return node

    def char_class(self) -> tuple[tuple[tuple[int, int], ...], bool]:
        negate = self.peek() == "^"
        if negate:
            self.i += 1
        ranges: list[tuple[int, int]] = []
        while True:
            if self.i >= len(self.p):
                raise self.error("missing ']'")
            if self.peek() == "]":
                self.i += 1
                return tuple(ranges), negate
            lo = self.class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                hi = self.class_atom()
                if isinstance(lo, tuple) or isinstance(hi, tuple):  # [\w-.]: a literal '-' (Annex B)
                    for part in (lo, ord("-"), hi):
                        ranges.extend(part if isinstance(part, tuple) else ((part, part),))
                    continue
                if hi < lo:
                    raise self.error("range out of order")
                ranges.append((lo, hi))
            elif isinstance(lo, tuple):
                ranges.extend(lo)
            else:
                ranges.append((lo, lo))

    def class_atom(self):
        """A codepoint, or a tuple of ranges for a class escape."""
        c = self.take()
        if c != "\\":
            return ord(c)
        e = self.take()
        if e == "b":
            return 8
        if e == "-":
            return ord("-")
        return self._escape_value(e)

    def escape(self) -> Node:
        e = self.take()
        if e in "bB":  # a word character on exactly one side (\b) or on neither or both (\B)
            w = chars(WORD)
            before_word, after_word = _Look(False, False, w), _Look(True, False, w)
            before_other, after_other = _Look(False, True, w), _Look(True, True, w)
            if e == "b":
                return alt(seq(before_word, after_other), seq(before_other, after_word))
            return alt(seq(before_word, after_word), seq(before_other, after_other))
        if e.isdigit() and e != "0":
            raise self.error(f"backreference '\\{e}'")
        if e == "k" and self.peek() == "<":
            raise self.error("named backreference '\\k'")
        v = self._escape_value(e)
        return chars(v) if isinstance(v, tuple) else chars(((v, v),))

    def _escape_value(self, e: str):
        if e.lower() in _CLASS_ESCAPES:
            rs = _CLASS_ESCAPES[e.lower()]
            return negate_ranges(rs, MAX_CODEPOINT) if e.isupper() else rs
        if e in _CONTROL_ESCAPES:
            return _CONTROL_ESCAPES[e]
        if e == "0" and not self.peek().isdigit():
            return 0
        if e == "x":
            return self._hex(2)
        if e == "u":
            if self.peek() == "{":
                end = self.p.find("}", self.i)
                if end < 0:
                    raise self.error("unterminated '\\u{'")
                text = self.p[self.i + 1 : end]
                self.i = end + 1
                return self._codepoint(text)
            cp = self._hex(4)
            if 0xD800 <= cp <= 0xDBFF and self.p[self.i : self.i + 2] == "\\u":
                save = self.i
                self.i += 2
                low = self._hex(4)
                if 0xDC00 <= low <= 0xDFFF:
                    return 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00)
                self.i = save
            return cp
        if e == "c" and self.peek().isalpha():
            return ord(self.take()) % 32
        if e in "pP":
            raise self.error(f"Unicode property escape '\\{e}'")
        if e.isalnum():
            raise self.error(f"unknown escape '\\{e}'")
        return ord(e)

    def _hex(self, n: int) -> int:
        text = self.p[self.i : self.i + n]
        if len(text) != n:
            raise self.error("truncated hex escape")
        self.i += n
        return self._codepoint(text)

    def _codepoint(self, text: str) -> int:
        try:
            cp = int(text, 16)
        except ValueError:
            raise self.error(f"bad hex escape {text!r}") from None
        if cp > MAX_CODEPOINT:
            raise self.error(f"codepoint {text!r} out of range")
        return cp
