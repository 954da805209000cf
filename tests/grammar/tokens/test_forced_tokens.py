"""Forced tokens: the certain continuation, tokenized as the tokenizer itself would, holding back
tokens that could merge with what follows; accepting them never leaves the language."""

from __future__ import annotations

import re

import pytest
from grammar_oracle import tiny_vocab
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guided.grammar import GrammarCompiler
from guided.grammar.vocab import Vocabulary

PATTERNS = [
    r'\{"name": "[a-z ]{1,12}", "age": [0-9]{1,3}, "city": "(Paris|London|Berlin)"\}',
    r'\[("[a-z]{1,6}", ){0,3}"[a-z]{1,6}"\]',
    r"(GET|POST) /api/v1/(users|items)/[0-9]{1,6} HTTP/1\.1",
    r"<tool_call>\n\{\"arguments\": \{\}\}\n</tool_call>",
    r"the answer is: (yes|no)\.",
]


@pytest.fixture(scope="module", params=["builtin", "llama3"])
def setup(request):
    tokenizer = request.getfixturevalue(f"tokenizer_{request.param}")
    vocab = Vocabulary.from_tokenizer(tokenizer)

    def encode(data: bytes) -> list[int]:
        return tokenizer.encode(data.decode("utf-8"), add_special_tokens=False)

    return vocab, encode, GrammarCompiler(vocab, encode=encode)


@pytest.mark.parametrize("pattern", PATTERNS)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_forced_tokens_are_canonical_and_stay_in_language(setup, pattern, data):
    vocab, encode, compiler = setup
    text = data.draw(st.from_regex(re.compile(pattern), fullmatch=True, alphabet=st.characters(codec="ascii")))
    ids = encode(text.encode())
    m = compiler.compile_regex(pattern).matcher()
    for i, tid in enumerate(ids):
        forced = m.forced_tokens()
        if forced:
            forced_text = vocab.decode_bytes(forced)
            assert m.forced_bytes().startswith(forced_text)
            prev = vocab.tokens[ids[i - 1]] if i else b""
            assert encode(prev + m.forced_bytes())[1 if i else 0 :][: len(forced)] == forced
            # the same tokens the tokenizer chose for the whole text: no non-canonical split
            assert ids[i : i + len(forced)] == forced, (text, [vocab.tokens[t] for t in forced])
            probe = m.copy()
            assert probe.accept_tokens(forced) == len(forced)
        assert m.accept_token(tid)
    assert m.is_accepting()


def test_forced_run_to_the_end_includes_last_token(setup):
    vocab, encode, compiler = setup
    m = compiler.compile_regex(r"(yes|no), final answer\.").matcher()
    assert m.forced_tokens() == []
    assert m.accept_text("no")  # bytes: no previous token to merge with
    forced = m.forced_tokens()
    assert vocab.decode_bytes(forced) == b", final answer."  # the language ends here: nothing held back
    assert m.accept_tokens(forced) == len(forced) and m.is_accepting()
    assert m.forced_tokens() == []


def test_nothing_forced_at_a_choice_or_when_accepting(setup):
    vocab, encode, compiler = setup
    m = compiler.compile_regex(r"a|b").matcher()
    assert m.forced_tokens() == [] and m.forced_bytes() == b""
    m = compiler.compile_regex(r"ab(cd)?").matcher()
    assert m.accept_text("ab") and m.forced_tokens() == []


def test_greedy_fallback_without_encode():
    vocab = tiny_vocab([b"a", b"b", b"ab", b"abc", b"c", b"d"])
    m = GrammarCompiler(vocab).compile_regex("abcab[cd]").matcher()
    ids = {t: i for i, t in enumerate(vocab.tokens)}
    # "abcab" then a choice: greedy gives abc|ab; "ab" could merge with a following "c" into "abc".
    assert m.forced_tokens() == [ids[b"abc"]]
    m = GrammarCompiler(vocab).compile_regex("abcabd").matcher()
    assert m.forced_tokens() == [ids[b"abc"], ids[b"ab"], ids[b"d"]]


def test_forced_text_cut_inside_a_character(setup):
    vocab, encode, compiler = setup
    m = compiler.compile_regex("(日本語のテキストà|日本語のテキストè)!").matcher()
    assert m.forced_bytes() == "日本語のテキスト".encode() + b"\xc3"  # à and è share their first byte
    forced = m.forced_tokens()
    assert "日本語のテキスト".encode().startswith(vocab.decode_bytes(forced))
    assert forced == encode("日本語のテキスト".encode())[: len(forced)]
    assert m.accept_tokens(forced) == len(forced)
