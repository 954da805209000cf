"""Lark grammar text -> CfgGrammar, as Lark defines it.

Lark's own loader reads the text (rules, terminals, string and regex literals with flags, EBNF
operators, templates, ``%import`` of ``common.*`` and relative files, ``%ignore``), so the grammar means
what it means to Lark; this module translates the loaded rules and terminal patterns. Terminal regexes
are Python ``re`` syntax (see ``cfg_pyregex``). The language is that of Lark's Earley parser with
``lexer="dynamic_complete"``: terminals match wherever the grammar lets them, ``%ignore`` terminals may
occur between any two lexemes. Priorities are carried but do not change the language.

Unsupported, as GrammarError: terminals only ``%declare``d (produced by a postlexer such as lark's
Indenter, e.g. python.lark), lookaround, anchors and backreferences in terminal regexes.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence

from guided.errors import GrammarError
from guided.grammar.cfg_ir import CfgGrammar, Rule, Terminal
from guided.grammar.frontends.python_regex import FLAG_LETTERS, _fold, parse_python_regex
from guided.grammar.regex_ast import Node, alt, chars, literal, repeat, seq

__all__ = ["parse_lark"]

# common.lark's ESCAPED_STRING uses a lookbehind; under Lark's lexing its language is a quoted string
# without raw newlines in which a backslash escapes any one character.
_ESCAPED_STRING_RE = '".*?(?<!\\\\)(\\\\\\\\)*?"'
_NOT_NL = chars(((0x0A, 0x0A),), negate=True)
_ESCAPED_STRING = seq(
    literal('"'),
    repeat(alt(chars(((0x0A, 0x0A), (0x22, 0x22), (0x5C, 0x5C)), negate=True), seq(literal("\\"), _NOT_NL))),
    literal('"'),
)
# A C comment written with a lookahead (verilog.lark): a star never directly followed by a slash.
_C_COMMENT_RE = "\\/\\*(\\*(?!\\/)|[^*])*\\*\\/"
_STAR, _SLASH = literal("*"), literal("/")
_C_COMMENT = seq(
    literal("/*"),
    repeat(
        alt(
            chars(((0x2A, 0x2A),), negate=True),
            seq(repeat(_STAR, 1), chars(((0x2A, 0x2A), (0x2F, 0x2F)), negate=True)),
        )
    ),
    repeat(_STAR, 1),
    _SLASH,
)
KNOWN_PATTERNS = {_ESCAPED_STRING_RE: _ESCAPED_STRING, _C_COMMENT_RE: _C_COMMENT}


def parse_lark(text: str, start: str = "start", import_paths: Sequence[str] = ()) -> CfgGrammar:
    """Load Lark grammar text with Lark itself and translate it to a validated CfgGrammar.

    Parameters
    ----------
    text : str
        The grammar.
    start : str
        The start rule (Lark's default ``start``).
    import_paths : sequence of str
        Directories searched for relative ``%import``s (``common`` is always available).
    """
    loaded = _load(text, start, list(import_paths))
    where = _positions(text)
    defined = {t.name for t in loaded.terminals}
    for r in loaded.rules:
        for s in r.expansion:
            if s.is_term and s.name not in defined:
                raise GrammarError(
                    f"terminal {s.name} has no pattern (it is %declare'd, to be produced by a postlexer such "
                    f"as lark's Indenter){_at(where, s.name)}; a grammar that needs a postlexer cannot be "
                    "enforced on text"
                )
    terminals = {t.name: Terminal(t.name, _terminal_node(t, where), t.priority) for t in loaded.terminals}
    rules: dict[str, list] = {}
    prio: dict[str, int] = {}
    for r in loaded.rules:
        name = r.origin.name
        alts = rules.setdefault(name, [])
        exp = tuple(s.name for s in r.expansion)
        if exp not in alts:
            alts.append(exp)
        if r.options and r.options.priority:
            prio[name] = r.options.priority
    g = CfgGrammar(
        {n: Rule(n, tuple(a), prio.get(n, 0)) for n, a in rules.items()},
        terminals,
        start,
        tuple(loaded.ignore_tokens),
        where,
    )
    return g.validate()


class _Loaded:
    """What Lark's grammar loader produces: terminals, rules (with EBNF and templates expanded), ignores."""

    def __init__(self, terminals, rules, ignore_tokens):
        self.terminals, self.rules, self.ignore_tokens = terminals, rules, ignore_tokens


# Lark's loader reads string literals with ast.literal_eval; CPython 3.11 keeps the AST constructor's recursion
# depth per interpreter, so two compile threads loading at once can fail with "AST constructor recursion depth
# mismatch" (a SystemError that Lark reports as a grammar error). Loading is milliseconds: one at a time.
_LOAD_LOCK = threading.Lock()

_RELATIVE_IMPORT = re.compile(r"^[ \t]*%import[ \t]+\.\S*", re.MULTILINE)


def _load(text: str, start: str, import_paths: list) -> _Loaded:
    try:
        from lark.exceptions import LarkError
        from lark.load_grammar import load_grammar
    except ImportError as e:  # pragma: no cover
        raise GrammarError("Lark grammars need the 'lark' package: pip install lark") from e
    if not import_paths and (m := _RELATIVE_IMPORT.search(text)):
        # Lark would read it from the process's working directory: a grammar sent to a server must not
        # read the server's files. A grammar file's own folder is given by Grammar.from_file.
        raise GrammarError(f"Lark grammar: the relative import {m.group(0).strip()!r} needs the folder to read it "
                           "from (import_paths; Grammar.from_file(path) uses the file's folder)")  # fmt: skip
    try:  # the loader alone: building Lark's own parser would double the compile time
        with _LOAD_LOCK:
            grammar, _ = load_grammar(text, "<grammar>", import_paths, False)
            return _Loaded(*grammar.compile([start], set()))
    except LarkError as e:
        raise GrammarError(f"Lark grammar: {e}".strip()) from None
    except AssertionError as e:  # Lark's loader asserts on some imports it cannot resolve
        raise GrammarError(f"Lark grammar: {e}") from None
    except (OSError, re.error) as e:
        raise GrammarError(f"Lark grammar: {e}") from None


def _terminal_node(t, where) -> Node:
    pattern = t.pattern
    flags = 0
    for f in pattern.flags:
        flags |= FLAG_LETTERS.get(f, 0)
    if type(pattern).__name__ == "PatternStr":
        node = literal(pattern.value)
        if flags & re.I:
            node = seq(*(chars(_fold(((ord(c), ord(c)),), flags)) for c in pattern.value))
        return node
    known = KNOWN_PATTERNS.get(pattern.value)
    if known is not None and not flags:
        return known
    try:
        return parse_python_regex(pattern.value, flags, t.name)
    except GrammarError as e:
        raise GrammarError(f"{e}{_at(where, t.name)}") from None


def _positions(text: str) -> dict[str, tuple[int, int]]:
    """Line and column of each rule or terminal definition (``name:`` or ``name.prio:`` at a line start)."""
    out: dict[str, tuple[int, int]] = {}
    for i, line in enumerate(text.splitlines(), 1):
        m = re.match(r"\s*[?!]?([_A-Za-z][_A-Za-z0-9]*)\s*(?:\{[^}]*\})?\s*(?:\.-?\d+)?\s*:", line)
        if m:
            out.setdefault(m.group(1), (i, m.start(1) + 1))
    return out


def _at(where, name: str) -> str:
    pos = where.get(name)
    return f" (line {pos[0]}, column {pos[1]})" if pos else ""
