"""GBNF (llama.cpp's grammar format) -> CfgGrammar.

Syntax: ``name ::= alternatives`` (names of letters, digits, ``-`` and ``_``), string literals with
escapes (``\\x..``, ``\\u....``, ``\\U........``, ``\\t \\n \\r`` and escaped punctuation), character
classes ``[a-z]`` / ``[^...]``, ``.``, groups, ``|``, postfix ``* + ?`` and ``{m}``, ``{m,}``,
``{m,n}``, comments from ``#`` to the end of the line; a rule ends at a newline outside parentheses;
``root`` is the start. GBNF has no lexer, so everything is character level: rules that do not recurse
are inlined as regexes and maximal terminal-only runs become single terminals, which keeps the Earley
parser's work to the genuinely context-free part.
"""

from __future__ import annotations

from guided.errors import GrammarError
from guided.grammar.cfg_ir import CfgGrammar, EAlt, ERepeat, ESeq, Expr, GrammarBuilder, Lex, Ref
from guided.grammar.regex_ast import any_char, chars, literal

__all__ = ["parse_gbnf"]

_ESCAPES = {"t": 9, "n": 10, "r": 13, "0": 0}
_HEX = {"x": 2, "u": 4, "U": 8}
MAX_REPEAT = 10_000


def parse_gbnf(text: str, start: str = "root") -> CfgGrammar:
    """Parse GBNF text into a validated CfgGrammar; GrammarError with line and column on bad input."""
    rules = _Parser(text).parse()
    if start not in rules:
        raise GrammarError(f"GBNF grammar has no {start!r} rule")
    b = GrammarBuilder(start)
    for name, (_, pos) in rules.items():
        b.where[name] = pos
    _inline_regular(b, rules)
    for name, (body, pos) in rules.items():
        if name not in b.regular or name == start:
            b.add_rule(name, body, pos)
    return b.build()


def _inline_regular(b: GrammarBuilder, rules: dict) -> None:
    """Turn every rule that only references regular rules (so never recurses) into a regex."""
    changed = True
    while changed:
        changed = False
        for name, (body, _) in rules.items():
            if name not in b.regular:
                node = b.to_regex(body)
                if node is not None:
                    b.regular[name] = node
                    changed = True


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    def where(self, pos: int | None = None) -> tuple[int, int]:
        p = self.pos if pos is None else pos
        line = self.text.count("\n", 0, p) + 1
        return line, p - (self.text.rfind("\n", 0, p) + 1) + 1

    def error(self, what: str, pos: int | None = None) -> GrammarError:
        line, col = self.where(pos)
        return GrammarError(f"GBNF: {what} (line {line}, column {col})")

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def space(self, newline_ok: bool) -> None:
        t = self.text
        while self.pos < len(t):
            c = t[self.pos]
            if c in " \t" or (newline_ok and c in "\r\n"):
                self.pos += 1
            elif c == "#":
                while self.pos < len(t) and t[self.pos] not in "\r\n":
                    self.pos += 1
            else:
                return

    def name(self) -> str:
        start = self.pos
        while self.pos < len(self.text) and (self.text[self.pos].isalnum() or self.text[self.pos] in "-_"):
            self.pos += 1
        if self.pos == start:
            raise self.error(
                f"expected a rule name, found {self.peek()!r}" if self.peek() else "expected a rule name"
            )
        return self.text[start : self.pos]

    # ------------------------------------------------------------------ rules
    def parse(self) -> dict[str, tuple[Expr, tuple[int, int]]]:
        rules: dict[str, tuple[Expr, tuple[int, int]]] = {}
        self.space(True)
        while self.pos < len(self.text):
            at = self.pos
            name = self.name()
            self.space(False)
            if not self.text.startswith("::=", self.pos):
                raise self.error(f"expected '::=' after rule name {name!r}")
            self.pos += 3
            self.space(True)
            body = self.alternates(nested=False)
            if name in rules:
                raise self.error(f"rule {name!r} is defined twice", at)
            rules[name] = (body, self.where(at))
            if self.peek() and self.peek() not in "\r\n":
                raise self.error(f"unexpected {self.peek()!r}")
            self.space(True)
        return rules

    def alternates(self, nested: bool) -> Expr:
        items = [self.sequence(nested)]
        while self.peek() == "|":
            self.pos += 1
            self.space(True)
            items.append(self.sequence(nested))
        return items[0] if len(items) == 1 else EAlt(tuple(items))

    def sequence(self, nested: bool) -> Expr:
        items: list[Expr] = []
        while True:
            self.space(nested)
            c = self.peek()
            if not c or c in "|)\r\n":
                break
            at = self.pos
            if c == '"':
                item = self.string()
            elif c == "[":
                item = self.char_class()
            elif c == ".":
                self.pos += 1
                item = Lex(any_char())
            elif c == "(":
                self.pos += 1
                self.space(True)
                item = self.alternates(nested=True)
                self.space(True)
                if self.peek() != ")":
                    raise self.error("expected ')'", self.pos)
                self.pos += 1
            elif c.isalnum() or c in "-_":
                item = Ref(self.name(), self.where(at))
            elif c in "*+?{":
                raise self.error(f"{c!r} has nothing to repeat")
            else:
                raise self.error(f"unexpected {c!r}")
            items.append(self.postfix(item))
        return items[0] if len(items) == 1 else ESeq(tuple(items))

    def postfix(self, item: Expr) -> Expr:
        while True:
            c = self.peek()
            if c in ("*", "+", "?") and c:
                self.pos += 1
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
                item = ERepeat(item, lo, hi)
            elif c == "{":
                item = ERepeat(item, *self.bounds())
            else:
                return item

    def bounds(self) -> tuple[int, int | None]:
        at = self.pos
        end = self.text.find("}", self.pos)
        if end < 0:
            raise self.error("unterminated '{'", at)
        body = self.text[self.pos + 1 : end].replace(" ", "")
        parts = body.split(",")
        try:
            if len(parts) == 1:
                lo = hi = int(parts[0])
            elif len(parts) == 2:
                lo, hi = int(parts[0]), (int(parts[1]) if parts[1] else None)
            else:
                raise ValueError
        except ValueError:
            raise self.error(f"bad repetition bounds {{{body}}}", at) from None
        if lo < 0 or (hi is not None and hi < lo) or max(lo, hi or 0) > MAX_REPEAT:
            raise self.error(f"bad repetition bounds {{{body}}}", at)
        self.pos = end + 1
        return lo, hi

    # ------------------------------------------------------------------ terminals
    def string(self) -> Expr:
        at = self.pos
        self.pos += 1
        out = []
        while True:
            c = self.peek()
            if not c or c in "\r\n":
                raise self.error("unterminated string literal", at)
            if c == '"':
                self.pos += 1
                return Lex(literal("".join(out)))
            out.append(chr(self.char()))

    def char_class(self) -> Expr:
        at = self.pos
        self.pos += 1
        negate = self.peek() == "^"
        if negate:
            self.pos += 1
        ranges = []
        while True:
            c = self.peek()
            if not c:
                raise self.error("unterminated character class", at)
            if c == "]":
                self.pos += 1
                break
            lo = self.char()
            hi = lo
            if self.peek() == "-" and self.pos + 1 < len(self.text) and self.text[self.pos + 1] != "]":
                self.pos += 1
                hi = self.char()
                if hi < lo:
                    raise self.error("character range is out of order", self.pos - 1)
            ranges.append((lo, hi))
        return Lex(chars(ranges, negate=negate))

    def char(self) -> int:
        """One (possibly escaped) character of a literal or class, as a codepoint."""
        c = self.peek()
        at = self.pos
        self.pos += 1
        if c != "\\":
            return ord(c)
        e = self.peek()
        self.pos += 1
        if e in _HEX:
            n = _HEX[e]
            digits = self.text[self.pos : self.pos + n]
            if len(digits) != n or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise self.error(f"bad \\{e} escape", at)
            self.pos += n
            cp = int(digits, 16)
            if cp > 0x10FFFF:
                raise self.error(f"escape \\{e}{digits} is past U+10FFFF", at)
            return cp
        if e in _ESCAPES:
            return _ESCAPES[e]
        if e and not e.isalnum() and e not in "\r\n":
            return ord(e)
        raise self.error(f"unknown escape \\{e}", at)
