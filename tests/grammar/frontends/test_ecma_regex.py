"""ECMA-262 regex syntax: what parses, what it means (checked against Python `re` where the dialects
agree), and what is refused with a GrammarError naming the construct."""

from __future__ import annotations

import re

import pytest
from grammar_oracle import tiny_vocab
from hypothesis import given, settings
from hypothesis import strategies as st

from guided.errors import GrammarError
from guided.grammar import GrammarCompiler, parse_regex
from guided.grammar.automata.utf8 import utf8_sequences

COMPILER = GrammarCompiler(tiny_vocab([b"a"]))


def full(pattern: str, text: str, search: bool = False) -> bool:
    m = COMPILER.compile_regex(pattern, search=search).matcher()
    return m.accept_text(text) and m.is_accepting()


PATTERNS = [
    r"[a-zA-Z0-9_]+",
    r"\d{3}-\d{4}",
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}",
    r"(foo|bar|baz)+",
    r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?",
    r"[^\x00-\x1f\"\\]{0,12}",
    r"\w+@\w+\.(com|org)",
    r"x{2,}y{0,3}z?",
    r"[.\-+*?(){}]+",
    r"(?:ab|c)*(?<name>d)",
    r"[\u00e0-\u00ff]+[^\u4e00-\u9fff]",
    r"\u00e9\x41\t",
    r"[\w\s]{1,5}",
]


@pytest.mark.parametrize("pattern", PATTERNS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_agrees_with_python_re(pattern, data):
    py = pattern.replace("(?<name>", "(?P<name>")
    flags = re.ASCII
    text = data.draw(
        st.one_of(
            st.from_regex(re.compile(py, flags), fullmatch=True),
            st.text(st.sampled_from("abc019_-.@xyz \té"), max_size=10),
        )
    )
    assert full(pattern, text) == bool(re.fullmatch(py, text, flags)), text


@pytest.mark.parametrize(
    "pattern, yes, no",
    [
        (r"\s", ["\u00a0", "\u3000", "\ufeff", " ", "\n"], ["a", "\u200b"]),
        (r"\d", ["7"], ["\u0663", "a"]),
        (r"\w", ["_", "Z"], ["é", "-"]),
        (r".", ["a", "中", "😀"], ["\n", "\r", "\u2028"]),
        (r"[^a]", ["😀", "\n"], ["a"]),
        (r"\D\S\W", ["ax-", "\u00a0é\u00a0"], ["1 -", "a\u00a0-"]),
        (r"\u{1F600}", ["😀"], ["a"]),
        (r"\ud83d\ude00", ["😀"], ["a"]),
        (r"[\b]", ["\b"], ["b"]),
        (r"a{,2}", ["a{,2}"], ["aa"]),
        (r"^abc$", ["abc"], ["xabc"]),
    ],
)
def test_ecma_semantics(pattern, yes, no):
    for text in yes:
        assert full(pattern, text), text
    for text in no:
        assert not full(pattern, text), text


@pytest.mark.parametrize(
    "pattern, yes, no",
    [
        ("abc", ["abc", "xxabcxx", "abc\n"], ["ab", ""]),
        ("^abc", ["abc", "abcdef"], ["xabc"]),
        ("abc$", ["abc", "xxabc"], ["abcx"]),
        ("^a|b$", ["ax", "xb"], ["xa", "bx"]),
        ("^(ab|cd)$", ["ab", "cd"], ["abcd", "xab"]),
        ("", ["", "anything"], []),
    ],
)
def test_search_semantics(pattern, yes, no):
    for text in yes:
        assert full(pattern, text, search=True), text
        assert bool(re.search(pattern, text)) or text == ""
    for text in no:
        assert not full(pattern, text, search=True), text


@pytest.mark.parametrize(
    "pattern, construct",
    [
        ("(?:(?=a)b)*", "inside a repetition"),
        ("(a$b|c)+", "inside a repetition"),
        ("a(?=b)c(?<=c)", "a lookahead before a lookbehind"),
        (r"(a)\1", "backreference"),
        (r"(?<x>a)\k<x>", "backreference"),
        (r"\bword\b", "a lookahead before a lookbehind"),  # two boundaries: the second looks back
        ("^((?!a).)*b", "not followed by the end"),  # a tempered token must end the input
        ("((?!a)(?=b).)*$", "inside a repetition"),  # only negative lookaheads temper
        (r"\p{L}+", "Unicode property"),
        ("(?i)abc", "inline flags"),
        ("(a|b", "missing ')'"),
        ("a)", "unbalanced"),
        ("[a-", "missing ']'"),
        ("*a", "nothing to repeat"),
        ("a{3,1}", "repeat bounds"),
        ("[z-a]", "out of order"),
        (r"\q", "unknown escape"),
        ("a++", "possessive"),
    ],
)
def test_unsupported_constructs_are_named(pattern, construct):
    with pytest.raises(GrammarError, match=re.escape(construct)):
        parse_regex(pattern)


LOOKAROUND = [
    r"^(?!@@)[@a-z0-9_-]+$",
    r"^(?!.*://)(?=.{1,12}$)((.{1,4}\.){1,3}(?![0-9]*$)[a-z0-9-]+\.?)$",
    r"^(?!org\.b\.)([a-z_$][a-z\d_$]*\.)*[a-z_$][a-z\d_$]*$",
    r"^(?=[^=]+$)(?!\s+$)(.|\n)+$",
    r"^(?!pattern$).*$",
    r"^@([\da-z](?:(?!.*--)[\da-z-]*[\da-z])?)$",
    r"(?<=a)b",
    r"(?<!a)b",
    r"x(?!y)",
    r"(?<=^a)b",
    r"a$|^b",
    r"(?=.*[0-9])(?=.*[a-z])^.{3,6}$",  # adjacent assertions commute: '^' may come after lookaheads
    r"^(?:(?=a)a|b)c",
    r"^$[a-z]*$",  # '$' in the middle: only the empty string
    r"/^[0-9]{2}$/",  # '^' after a character: nothing
    r"^(\/?((\.{2})|([a-z0-9\-]*))($|\/))*$",  # '$' ending an iteration: only the last one
    r"(a($|b))+",
    r"(^a|b$|c)+d",
    r"x(a|b$)*",
    r"^https?:\/\/[a-z.]{1,6}\b([-a-z0-9/]*)",  # a word boundary: \w on exactly one side
    r"ab\b",
    r"\Bb.",
    r"^((?!ab)(?!\.\.).)*$",  # the tempered token: no position starts a refused text
    r"^x((?!a.)[a-c.])+$",
]


@pytest.mark.parametrize("pattern", LOOKAROUND)
def test_lookaround_and_inner_anchors_match_python_re(pattern):
    import random

    from guided.grammar.languages import matches

    rng = random.Random(pattern)
    texts = {"".join(rng.choice("ab.0-@/:=x y9cd") for _ in range(rng.randint(0, 10))) for _ in range(300)}
    texts |= {"", "@@a", "abc", "org.b.X", "org.c.x", "pattern", "patterns", "@a--b", "@ab-c", "ab", "b",
              "a.b", "a.1", "xy", "xz", "a1b", "1ab", "ac", "bc", "/12/", "http://ab.c", "https://abcdefg/x",
              "http://a.b/c", "xa.", "xab", "xbca", "a..b"}  # fmt: skip
    search, whole = parse_regex(pattern, search=True), parse_regex(pattern)
    for text in texts:  # no newlines: Python's '$' also matches before a final one, ECMA's does not
        assert matches(search, text) == (re.search(pattern, text) is not None), text
        assert matches(whole, text) == (re.fullmatch(pattern, text) is not None), text


def test_an_anchor_that_cannot_hold_leaves_nothing():
    for pattern in ("a^b", "a$b", "(?<=x)y"):
        with pytest.raises(GrammarError, match="empty"):
            COMPILER.compile_regex(pattern)


def test_empty_language_is_an_error():
    with pytest.raises(GrammarError, match="empty"):
        COMPILER.compile_regex("[^\\s\\S]")


@settings(max_examples=200, deadline=None)
@given(lo=st.integers(0, 0x10FFFF), span=st.integers(0, 5000))
def test_utf8_sequences_cover_exactly_the_range(lo, span):
    hi = min(lo + span, 0x10FFFF)
    seqs = utf8_sequences(lo, hi)
    for cp in {lo, hi, (lo + hi) // 2, lo + 1, hi - 1}:
        if not lo <= cp <= hi or 0xD800 <= cp <= 0xDFFF:
            continue
        enc = chr(cp).encode()
        assert sum(len(s) == len(enc) and all(a <= b <= c for (a, c), b in zip(s, enc, strict=False)) for s in seqs) == 1
    for s in seqs:  # every sequence's corners are codepoints of the range
        for pick in (0, 1):
            cp = ord(bytes(r[pick] for r in s).decode())
            assert lo <= cp <= hi


def test_lenient_forms():
    assert full(r"[\w-.]+", "a-.b")  # Annex B: '-' next to a class escape is literal
    assert not full(r"[\w-.]+", "a,b")
    assert full(r"(?P<year>\d{4})", "2024")


def test_alternations_with_duplicates_and_shared_prefixes():
    assert full("a|a|a|a|b", "a") and not full("a|a|a|a|b", "aa")
    assert full("(|a|a|ab|abc)", "") and full("(|a|a|ab|abc)", "abc")
    words = ["x" * 300 + str(i) for i in range(5)]  # a shared prefix longer than the factoring depth
    assert full("|".join(words), words[3]) and not full("|".join(words), "x" * 300)
