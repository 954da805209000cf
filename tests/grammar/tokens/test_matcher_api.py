"""The Matcher / CompiledGrammar / GrammarCompiler contract: bitmask layout, EOS, rollback, copy,
pickling, caching, threads, limits."""

from __future__ import annotations

import pickle
import threading
import time

import numpy as np
import pytest
from grammar_oracle import tiny_vocab

from guided.errors import GrammarError, LimitError
from guided.grammar import GrammarCompiler
from guided.grammar.regex_ast import alt, chars, intersect, literal, repeat, seq

TOKENS = [b"a", b"b", b"ab", b"abc", b"c", b"ca", b"\xc3", b"\xa9", "é".encode(), b"{", b'"', b"}"]
VOCAB = tiny_vocab(TOKENS, size=64)  # padded: ids 14..63 do not exist
PAD, EOS = len(TOKENS), len(TOKENS) + 1
ID = {t: i for i, t in enumerate(TOKENS)}


def allowed_set(m) -> set[int]:
    return set(np.flatnonzero(m.allowed_tokens()).tolist())


def test_bitmask_layout_and_rows():
    m = GrammarCompiler(VOCAB).compile_regex("(ab)*c").matcher()
    bitmask = np.full((3, VOCAB.bitmask_words), -1, dtype=np.int32)
    m.fill_bitmask(bitmask, row=1)
    assert (bitmask[0] == -1).all() and (bitmask[2] == -1).all()
    expect = {ID[b"a"], ID[b"ab"], ID[b"abc"], ID[b"c"]}
    got = {i for i in range(64) if (bitmask[1, i >> 5] >> (i & 31)) & 1}
    assert got == expect == allowed_set(m)


def test_torch_tensor_bitmask():
    torch = pytest.importorskip("torch")
    m = GrammarCompiler(VOCAB).compile_regex("ab").matcher()
    t = torch.zeros((2, VOCAB.bitmask_words), dtype=torch.int32)
    m.fill_bitmask(t, 1)
    assert t[1, 0].item() == (1 << ID[b"a"]) | (1 << ID[b"ab"]) and t[0].eq(0).all()


def test_eos_exactly_where_accepting_and_termination():
    m = GrammarCompiler(VOCAB).compile_regex("a(bc)?").matcher()
    assert EOS not in allowed_set(m) and not m.accept_token(EOS)
    assert m.accept_token(ID[b"a"]) and m.is_accepting() and EOS in allowed_set(m)
    assert m.accept_token(ID[b"b"]) and not m.is_accepting() and allowed_set(m) == {ID[b"c"]}
    assert m.accept_token(ID[b"c"])
    assert allowed_set(m) == {EOS}  # accepting with no continuation: only EOS
    assert not m.accept_token(PAD) and not m.accept_token(63) and not m.accept_token(10_000)
    assert m.accept_token(EOS) and m.is_terminated() and not m.is_accepting()
    assert not m.accept_token(ID[b"a"]) and not m.accept_token(EOS)
    assert allowed_set(m) == {EOS}
    m.rollback(1)
    assert not m.is_terminated() and m.is_accepting()


def test_refused_token_leaves_state_unchanged_and_rollback():
    m = GrammarCompiler(VOCAB).compile_regex("(ab)*c").matcher()
    before = allowed_set(m)
    assert not m.accept_token(ID[b"b"])
    assert allowed_set(m) == before and m.num_accepted == 0
    assert m.accept_token(ID[b"a"]) and m.accept_token(ID[b"b"]) and m.accept_token(ID[b"ab"])
    after3 = allowed_set(m)
    assert m.accept_token(ID[b"c"]) and m.is_accepting()
    m.rollback(1)
    assert allowed_set(m) == after3
    m.rollback(3)
    assert allowed_set(m) == before
    with pytest.raises(ValueError):
        m.rollback(1)


def test_copy_is_independent_and_reset():
    m = GrammarCompiler(VOCAB).compile_regex("(ab)*c").matcher()
    m.accept_token(ID[b"a"])
    c = m.copy()
    assert c.accept_token(ID[b"b"]) and c.accept_token(ID[b"c"]) and c.is_accepting()
    assert m.num_accepted == 1 and allowed_set(m) == {ID[b"b"]}
    c.reset()
    assert c.num_accepted == 0


def test_accept_bytes_and_text_mid_character():
    m = GrammarCompiler(VOCAB).compile_regex("é+").matcher()
    assert m.accept_bytes(b"\xc3") and not m.is_accepting()
    assert allowed_set(m) == {ID[b"\xa9"]}
    assert not m.accept_bytes(b"\xaa")
    assert m.accept_bytes(b"\xa9") and m.accept_text("é") and m.is_accepting()
    assert not m.accept_text("e")


def test_pickle_roundtrip_keeps_behaviour():
    g = GrammarCompiler(VOCAB).compile_regex("(ab)*c")
    g2 = pickle.loads(pickle.dumps(g))
    m1, m2 = g.matcher(), g2.matcher()
    for tid in (ID[b"ab"], ID[b"a"], ID[b"b"], ID[b"c"]):
        assert allowed_set(m1) == allowed_set(m2)
        assert m1.accept_token(tid) and m2.accept_token(tid)
    assert m2.is_accepting()


def test_compiler_cache_and_ast_entry():
    compiler = GrammarCompiler(VOCAB, cache_size=2)
    assert compiler.compile_regex("a+") is compiler.compile_regex("a+")
    node = seq(literal("{"), repeat(chars([(ord("a"), ord("c"))]), 1, 3), literal("}"))
    g = compiler.compile_ast(node, key="braces")
    assert compiler.compile_ast(node, key="braces") is g
    m = g.matcher()
    assert m.accept_text("{ab") and allowed_set(m) == {ID[b"a"], ID[b"b"], ID[b"c"], ID[b"}"]}
    compiler.compile_regex("b"), compiler.compile_regex("c")
    assert compiler.compile_regex("a+") is not None  # evicted and rebuilt


def test_intersection_and_difference_are_exact():
    compiler = GrammarCompiler(VOCAB)
    words = alt(literal("ab"), literal("abc"), literal("ca"))
    node = intersect(words, repeat(chars([(ord("a"), ord("b"))]), 0, None))  # only "ab"
    m = compiler.compile_ast(node).matcher()
    assert allowed_set(m) == {ID[b"a"], ID[b"ab"]}  # "abc" and "c" lead to dead ends
    assert m.accept_token(ID[b"a"]) and allowed_set(m) == {ID[b"b"]}


def test_empty_intersection_is_a_compile_error():
    with pytest.raises(GrammarError, match="empty"):
        GrammarCompiler(VOCAB).compile_ast(intersect(literal("a"), literal("b")))


def test_state_limit():
    compiler = GrammarCompiler(VOCAB, max_states=50)
    g = compiler.compile_regex("[abc]{0,1000}")
    m = g.matcher()
    with pytest.raises(LimitError, match="states"):
        for _ in range(200):
            m.accept_token(ID[b"a"])


def test_huge_bounded_repeat_is_lazy():
    compiler = GrammarCompiler(VOCAB)
    t = time.perf_counter()
    g = compiler.compile_regex("[a-c]{0,100000}x?")
    m = g.matcher()
    for _ in range(50):
        m.fill_bitmask(np.zeros((1, VOCAB.bitmask_words), np.int32))
        assert m.accept_token(ID[b"abc"])
    assert time.perf_counter() - t < 2.0
    assert g.dfa.n_states < 1000


def test_threads_share_one_compiled_grammar():
    g = GrammarCompiler(VOCAB).compile_regex("((ab)*c|é){1,50}")
    expected = []
    m = g.matcher()
    for tid in [ID[b"ab"], ID[b"c"], ID[b"\xc3"], ID[b"\xa9"]] * 20:
        expected.append(allowed_set(m))
        assert m.accept_token(tid)
    g = GrammarCompiler(VOCAB).compile_regex("((ab)*c|é){1,50}")
    g2 = pickle.loads(pickle.dumps(g))  # a fresh, empty cache
    errors = []

    def run():
        try:
            m = g2.matcher()
            for k, tid in enumerate([ID[b"ab"], ID[b"c"], ID[b"\xc3"], ID[b"\xa9"]] * 20):
                assert allowed_set(m) == expected[k]
                assert m.accept_token(tid)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
