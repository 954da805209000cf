"""The Lark and GBNF front ends and the IR: what they accept, what they mean, how they fail."""

from __future__ import annotations

import pytest

from guided.errors import GrammarError
from guided.grammar.automata.cfg_recognizer import CfgState
from guided.grammar.automata.earley import CfgAutomaton
from guided.grammar.cfg_ir import CfgGrammar, Rule, Terminal
from guided.grammar.frontends.gbnf_grammar import parse_gbnf
from guided.grammar.frontends.lark_grammar import parse_lark
from guided.grammar.frontends.python_regex import parse_python_regex
from guided.grammar.regex_ast import literal


def accepts(g: CfgGrammar, text: str) -> bool:
    st = CfgState(CfgAutomaton(g))
    return st.feed_text(text) and st.is_accepting()


@pytest.mark.parametrize(
    "text, good, bad",
    [
        ('root ::= "a" [b-d]* "\\x41\\u00e9"', ["aA\u00e9", "abdcA\u00e9"], ["a", "aeA\u00e9"]),
        ("root ::= [^a-z\\]]+ .", ["AB!x", "!!x"], ["ab", "A]b"]),
        (
            'root ::= x{2} y{1,} z{0,2}\nx ::= "x"\ny ::= "y"\nz ::= "z" | "(" root ")"',
            ["xxy", "xxyyz(xxy)"],
            ["xy", "xxyzzz"],
        ),
        ('root ::= ( "a" |\n  "b" ) # comment\n  "c"?', None, None),
        ('root ::= list\nlist ::= list "," item | item\nitem ::= [0-9]+', ["1,22,3"], ["1,", ",1"]),
        ('root ::= "(" root ")" | ', ["", "(())"], ["(()", ")("]),
    ],
)
def test_gbnf_language(text, good, bad):
    if good is None:
        with pytest.raises(GrammarError, match=r"line 3, column 3"):  # a newline outside () ends a rule
            parse_gbnf(text)
        return
    g = parse_gbnf(text)
    for s in good:
        assert accepts(g, s), s
    for s in bad:
        assert not accepts(g, s), s


@pytest.mark.parametrize(
    "text, message",
    [
        ('root ::= foo "x"', "undefined symbol 'foo'"),
        ('root ::= "a"\n\nfoo ::= "b" ]', "line 3, column 13"),
        ('root ::= "abc', "unterminated string literal (line 1, column 10)"),
        ('root ::= "\\q"', "unknown escape \\q (line 1, column 11)"),
        ('root = "a"', "expected '::='"),
        ('start ::= "a"', "no 'root' rule"),
        ('root ::= "a"{3,1}', "bad repetition bounds"),
        ("root ::= [z-a]", "out of order"),
        ("root ::= a\na ::= a", "derives no finite string"),
        ('root ::= *"a"', "nothing to repeat"),
    ],
)
def test_gbnf_errors_name_the_place(text, message):
    with pytest.raises(GrammarError) as e:
        parse_gbnf(text)
    assert message in str(e.value)


def test_gbnf_regular_rules_become_one_terminal():
    g = parse_gbnf('root ::= word (" " word)*\nword ::= [a-z]+')
    assert list(g.rules) == ["root"] and len(g.terminals) == 1


# Lexemes need no separator between them (scannerless, as Lark's Earley "dynamic" lexers): "selectx".
LARK_CASES = [
    (
        'start: "select"i NAME\nNAME: /[a-z]+/\n%ignore " "',
        ["SeLeCt abc", "select  x ", "selectx"],
        ["sel x", "select"],
    ),
    ('start: a+\na.2: "x" | "y"\n', ["xyx"], ["", "xz"]),
    ('start: pair{"(", ")"} pair{"[", "]"}\npair{l, r}: l "a" r', ["(a)[a]"], ["(a)(a)"]),
    ("start: NUMBER+\n%import common.NUMBER\n%import common.WS\n%ignore WS", ["1 2.5 3e4", "12"], ["1 x"]),
    ('start: e\n?e: e "-" t | t\nt: /[0-9]/ | "(" e ")"', ["1-2-(3-4)"], ["1--2", "(1"]),
    ("start: /a(?i:b)c/", ["aBc", "abc"], ["ABC"]),
    (r"start: /\d\w\s/", ["1a ", "٣é\u2003"], ["a1 "]),
]


@pytest.mark.parametrize("text, good, bad", LARK_CASES)
def test_lark_language(text, good, bad):
    g = parse_lark(text)
    for s in good:
        assert accepts(g, s), s
    for s in bad:
        assert not accepts(g, s), s


@pytest.mark.parametrize(
    "text, message",
    [
        ("start: A\nA: /a(?=b)/", "lookahead"),
        ("start: A\nA: /^a/", "anchor"),
        (r"start: A" "\n" r"A: /(a)\1/", "backreference"),
        ("start: x", "used but not defined"),
        ("start: _INDENT\n%declare _INDENT", "%declare"),
        ("start: (", "Lark grammar"),
    ],
)
def test_lark_errors(text, message):
    with pytest.raises(GrammarError, match=message.replace("(", r"\(")):
        parse_lark(text)


def test_python_regex_dialect():
    node = parse_python_regex(r"[^\n]*?x", 0)
    g = CfgGrammar({"s": Rule("s", (("T",),))}, {"T": Terminal("T", node)}, "s").validate()
    assert accepts(g, "abcx") and accepts(g, "xx") and not accepts(g, "a\nx")


def test_ir_validation():
    t = {"A": Terminal("A", literal("a"))}
    with pytest.raises(GrammarError, match="undefined symbol 'b'"):
        CfgGrammar({"s": Rule("s", (("b",),))}, t, "s").validate()
    with pytest.raises(GrammarError, match="start rule"):
        CfgGrammar({"s": Rule("s", (("A",),))}, t, "x").validate()
    g = CfgGrammar({"s": Rule("s", (("A",),)), "unused": Rule("unused", (("unused",),))}, t, "s").validate()
    assert list(g.rules) == ["s"]  # unreachable rules are dropped, as Lark does


def test_builder_lowers_ebnf_for_generated_grammars():
    """The IR builder as a recursive JSON Schema lowering would use it: regex pieces plus references."""
    from guided.grammar.cfg_ir import EAlt, ERepeat, ESeq, GrammarBuilder, Lex, Ref
    from guided.grammar.regex_ast import chars, repeat, seq

    ws = Lex(repeat(literal(" ")))
    integer = Lex(seq(chars(((0x31, 0x39),)), repeat(chars(((0x30, 0x39),)))))
    children = ESeq((Lex(literal("[")), ws, ERepeat(ESeq((Ref("tree"), ERepeat(ESeq((Lex(literal(",")), ws, Ref("tree"))), 0, None))), 0, 1), ws, Lex(literal("]"))))  # fmt: skip
    tree = ESeq((Lex(literal('{"value":')), ws, integer, EAlt((Lex(literal("")), ESeq((Lex(literal(',"children":')), ws, children)))), Lex(literal("}"))))  # fmt: skip
    b = GrammarBuilder("tree")
    b.add_rule("tree", tree)
    g = b.build()
    assert accepts(g, '{"value": 1,"children": [{"value":2}, {"value":3,"children":[]}]}')
    assert not accepts(g, '{"value": 1,"children": [{"value":2},]}')
    deep = "".join('{"value":1,"children":[' for _ in range(60)) + '{"value":2}' + "]}" * 60
    assert accepts(g, deep)


def test_lark_relative_imports_never_read_the_working_directory(tmp_path, monkeypatch):
    """A grammar sent to a server must not read the server's files: without import_paths a relative
    %import is an error, even where the working directory holds the file; with them it is read there."""
    (tmp_path / "words.lark").write_text('WORD: "w"+\n')
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "more.lark").write_text('NUM: "1"+\n')
    monkeypatch.chdir(tmp_path)
    for text in ('%import .words.WORD\nstart: WORD', 'start: NUM\n  %import .sub.more.NUM', '%import .words (WORD)\nstart: WORD'):
        with pytest.raises(GrammarError, match="relative import .* needs the folder"):
            parse_lark(text)
    with pytest.raises(GrammarError, match="Lark grammar"):  # not Lark's AssertionError
        parse_lark("%import words.WORD\nstart: WORD")
    grammar = parse_lark('%import .words.WORD\nstart: WORD "!"', import_paths=[str(tmp_path)])
    assert isinstance(grammar, CfgGrammar)
