"""CfgMatcher: the Matcher API over context-free grammars. Masks are exact against the byte-level
recognizer on tiny vocabularies; sentences of every shared grammar are accepted token by token on real
vocabularies; deep nesting, rollback, copy, forced tokens and pickling work."""

from __future__ import annotations

import pickle
import random
from collections import deque

import numpy as np
import pytest
from cfg_oracle import OK, automaton, sentences
from grammar_oracle import byte_splits, tiny_vocab

from guided.grammar.automata.cfg_recognizer import CfgState
from guided.grammar.automata.earley import CfgAutomaton
from guided.grammar.frontends.gbnf_grammar import parse_gbnf
from guided.grammar.frontends.lark_grammar import parse_lark
from guided.grammar.tokens.compiled_cfg import CfgMatcher, compile_cfg, compile_gbnf, compile_lark

HAND = {
    "left_recursion": (
        "lark",
        'start: expr\nexpr: expr "+" term | term\nterm: "a" | "(" expr ")" | NUM\nNUM: /[0-9]+/',
    ),
    "ambiguous": ("lark", 'start: s\ns: s s | "a" | "ab" | "b"'),
    "nullable": ("lark", 'start: a b a c\na: | "x" a\nb: a*\nc: "y"? "z"?'),
    "ignore": ("lark", 'start: "{" [item ("," item)*] "}"\nitem: /[a-z]+/ ":" /[0-9]+/\n%ignore " "'),
    "gbnf_nested": ("gbnf", 'root ::= "(" inner? ")"\ninner ::= root+ | [a-c]{1,3} "é"?'),
    "json_lark": ("lark", None),
    "arith_gbnf": ("gbnf", None),
}
TINY_CHARS = 'ab()+0123xyz{},: é中"[]-.e\\tn\n='


def hand_grammar(name: str):
    kind, text = HAND[name]
    if text is None:
        return automaton("lark/json.lark" if name == "json_lark" else "gbnf/arithmetic.gbnf")[0]
    return parse_lark(text) if kind == "lark" else parse_gbnf(text)


TINY_TOKENS = sorted(
    set(byte_splits(TINY_CHARS))
    | {
        b"ab",
        b"a+",
        b"(a",
        b"a)",
        b"xy",
        b"yz",
        b"12",
        b'{"',
        b'":',
        b'",',
        b"true",
        b"null",
        b"[]",
        b"{}",
        b", ",
        b"e+",
        b"=\n",
    }
)
TINY = tiny_vocab(TINY_TOKENS)
EOS = TINY.eos_ids[0]


def _allowed(m) -> np.ndarray:
    bm = np.zeros((2, TINY.bitmask_words), dtype=np.int32)
    m.fill_bitmask(bm, 1)
    return np.unpackbits(bm[1].view(np.uint8), bitorder="little").astype(bool)[: TINY.size]


def _viable(a: CfgAutomaton, s: int, limit: int = 5000) -> bool:
    """Some byte string leads from configuration s to a sentence (breadth-first over configurations)."""
    seen, todo = {s}, deque([s])
    while todo and len(seen) < limit:
        x = todo.popleft()
        if a.is_accepting(x):
            return True
        a.materialize(x)
        for y in set(a.trans[x].tolist()) - seen - {-1}:
            seen.add(y)
            todo.append(y)
    return False


@pytest.mark.parametrize("name", sorted(HAND))
def test_masks_are_exact_on_a_tiny_vocabulary(name):
    g = hand_grammar(name)
    compiled = compile_cfg(TINY, g)
    oracle = CfgAutomaton(g)  # a separate automaton: its own caches, walked byte by byte
    rng = random.Random(name)
    for _ in range(6):
        m = compiled.matcher()
        state = CfgState(oracle)
        for _ in range(14):
            allowed = _allowed(m)
            for tid, tok in enumerate(TINY_TOKENS):
                probe = state.copy()
                assert allowed[tid] == probe.feed_bytes(tok), (state, tok)
            assert allowed[EOS] == state.is_accepting()
            assert not allowed[EOS - 1]
            assert _viable(compiled.dfa, m.state)
            options = np.flatnonzero(allowed[: len(TINY_TOKENS)])
            if not len(options):
                break
            tid = int(rng.choice(options))
            assert m.accept_token(tid)
            assert state.feed_bytes(TINY_TOKENS[tid])


_GREEDY: dict[int, dict[bytes, int]] = {}


def _tokenize(tok, vocab, text: str) -> list[int]:
    """The tokenizer's encoding when it spells text exactly, else greedy longest match over the vocabulary
    (SentencePiece adds a dummy prefix and normalises): any spelling of a sentence must be accepted."""
    ids = tok.encode(text, add_special_tokens=False)
    data = text.encode("utf-8")
    if vocab.decode_bytes(ids) == data:
        return ids
    table = _GREEDY.get(id(vocab))
    if table is None:
        table = _GREEDY[id(vocab)] = {}
        for i, t in enumerate(vocab.tokens):
            if t and not vocab.special[i]:
                table.setdefault(t, i)
    out, i = [], 0
    while i < len(data):
        j = next(j for j in range(min(len(data), i + 32), i, -1) if data[i:j] in table)
        out.append(table[data[i:j]])
        i = j
    return out


def _check_sentence(compiled, tok, vocab, text: str) -> None:
    ids = _tokenize(tok, vocab, text)
    m = compiled.matcher()
    bm = np.zeros((1, vocab.bitmask_words), dtype=np.int32)
    for i in ids:
        m.fill_bitmask(bm)
        assert (int(bm[0, i >> 5]) >> (i & 31)) & 1, (text, i, vocab.tokens[i])
        assert m.accept_token(i), (text, vocab.tokens[i])
    m.fill_bitmask(bm)
    eos = vocab.eos_ids[0]
    assert (int(bm[0, eos >> 5]) >> (eos & 31)) & 1 and m.is_accepting(), text
    assert m.accept_token(eos) and m.is_terminated()


@pytest.mark.parametrize("family", ["builtin", "llama3", "mistral"])
@pytest.mark.parametrize("name", OK)
def test_sentences_are_accepted_token_by_token(name, family, request):
    tok = request.getfixturevalue(f"tokenizer_{family}")
    vocab = request.getfixturevalue(f"vocab_{family}")
    compiled = compile_cfg(vocab, automaton(name)[0])
    for text in sentences(name, n=4, max_len=80):
        _check_sentence(compiled, tok, vocab, text)


def _deep_json(depth: int) -> str:
    out = ""
    for k in range(depth):
        out += f'{{"k{k}": [' if k % 2 else "["
    out += '1.5, "x"'
    for k in reversed(range(depth)):
        out += "]}" if k % 2 else "]"
    return out


@pytest.mark.parametrize("grammar", ["lark/json.lark", "gbnf/json.gbnf"])
def test_json_nested_50_deep_is_accepted(grammar, tokenizer_llama3, vocab_llama3):
    g = automaton(grammar)[0]
    text = _deep_json(50)
    if grammar.endswith(".gbnf"):
        text = '{"a": ' + text + "}"
    assert CfgState(CfgAutomaton(g)).feed_text(text)
    _check_sentence(compile_cfg(vocab_llama3, g), tokenizer_llama3, vocab_llama3, text)


def test_matcher_api_rollback_copy_bytes():
    compiled = compile_lark(TINY, HAND["left_recursion"][1])
    m = compiled.matcher()
    assert isinstance(m, CfgMatcher)
    ids = {t: i for i, t in enumerate(TINY_TOKENS)}
    assert m.accept_token(ids[b"(a"]) and m.accept_token(ids[b"+"])
    assert not m.accept_token(ids[b")"]) and m.num_accepted == 2
    before = _allowed(m).copy()
    c = m.copy()
    assert m.accept_token(ids[b"12"]) and m.accept_token(ids[b")"]) and m.is_accepting()
    assert not c.is_accepting() and (_allowed(c) == before).all()
    m.rollback(2)
    assert (_allowed(m) == before).all()
    assert m.accept_text("3)+a") and m.is_accepting()
    assert not m.accept_bytes(b"+)")
    assert m.accept_token(EOS) and m.is_terminated() and not m.accept_token(ids[b"+"])


def test_forced_tokens_and_pickle(vocab_llama3):
    compiled = compile_gbnf(vocab_llama3, 'root ::= "SELECT " col " FROM t"\ncol ::= "a" | "b" | "(" col ")"')
    m = compiled.matcher()
    forced = m.forced_tokens()
    assert forced and b"".join(vocab_llama3.tokens[t] for t in forced) in b"SELECT "
    assert m.accept_tokens(forced) == len(forced)
    clone = pickle.loads(pickle.dumps(compiled))
    m2 = clone.matcher()
    assert m2.accept_text("SELECT ((a)) FROM t") and m2.is_accepting()


def test_inside_lexeme_records_give_the_same_masks(vocab_llama3):
    """Masks that reuse a lexer state's inside-the-lexeme record equal masks from a full walk."""
    grammar = automaton("lark/json.lark")[0]
    shared = compile_cfg(vocab_llama3, grammar)
    prefixes = ['{"a', '[{"a": "b', '[[["x\\u00', '{"k": [1, {"z": "q ', "[-12", '["\\', "[1.5e", '{"a": tr']
    for p in prefixes:  # record in another parser context first: one more enclosing array
        m = shared.matcher()
        assert m.accept_text("[" + p)
        m.allowed_tokens()
    reused = sliced = 0
    for p in prefixes:
        m, fresh = shared.matcher(), compile_cfg(vocab_llama3, grammar).matcher()
        assert m.accept_text(p) and fresh.accept_text(p)
        sliced += shared.slice_of(m.state) is not None  # string bodies: the vocabulary's slice instead
        reused += shared.slice_of(m.state) is None and shared.dfa.pure_lex[m.state] in shared._inside
        assert (m.allowed_tokens() == fresh.allowed_tokens()).all(), p
    assert reused >= 2 and sliced >= 3


def test_a_regular_grammar_compiles_in_the_pool_its_terminals_are_interned_in():
    """A front end that interned terminals already (the JSON Schema one decides their emptiness) hands
    its pool on with the grammar: the regular engine takes it, as the context-free one does, instead
    of interning every terminal again in a fresh pool; the masks are the same."""
    from guided.grammar.automata.expr_pool import ExprPool
    from guided.grammar.tokens.compiled import CompiledGrammar

    text = 'start: item ["," item]\nitem: NAME | "(" NAME ")"\nNAME: /[a-z]+é?/'
    g = parse_lark(text)
    pool = ExprPool.with_common()
    pool.intern_many([t.node for t in g.terminals.values()])
    g.pool = pool
    compiled = compile_cfg(TINY, g)
    assert isinstance(compiled, CompiledGrammar) and compiled.pool is pool and g.pool is None
    fresh = compile_cfg(TINY, parse_lark(text))
    assert fresh.pool is not pool
    a, b = compiled.matcher(), fresh.matcher()
    for tok in (b"(", b"ab", b")", b",", b"x"):
        assert (_allowed(a) == _allowed(b)).all()
        tid = TINY_TOKENS.index(tok)
        assert a.accept_token(tid) and b.accept_token(tid)
    assert (_allowed(a) == _allowed(b)).all() and _allowed(a)[EOS]


def test_regular_grammars_take_the_regular_engine():
    """A grammar without recursion compiles to the regex engine; both engines give the same masks."""
    from guided.grammar.tokens.compiled import CompiledGrammar

    text = 'start: item ("," item)*\nitem: NAME | "(" NAME ")"\nNAME: /[a-z]+é?/\n%ignore " "'
    g = parse_lark(text.replace('("," item)*', '["," item ["," item]]'))
    regular, general = compile_cfg(TINY, g), compile_cfg(TINY, g, regular_fast_path=False)
    assert isinstance(regular, CompiledGrammar) and isinstance(general.matcher(), CfgMatcher)
    rng = random.Random(3)
    for _ in range(4):
        a, b = regular.matcher(), general.matcher()
        for _ in range(10):
            mask = _allowed(a)
            assert (mask == _allowed(b)).all()
            options = np.flatnonzero(mask[: len(TINY_TOKENS)])
            if not len(options):
                break
            tid = int(rng.choice(options))
            assert a.accept_token(tid) and b.accept_token(tid)
