"""The context-free mask walk's shortcuts stay exact: vocabulary slices for string bodies (bounded and
unbounded), first-byte DEAD prefill and deferred lexeme-exit masks, each checked against the byte-level
recognizer of a separate automaton on a tiny vocabulary, token by token."""

from __future__ import annotations

import random

import numpy as np
import pytest
from grammar_oracle import (
    allowed_tokens,
    byte_splits,
    check_masks_on_random_paths,
    check_threads_get_serial_masks,
    tiny_vocab,
)

from guided.grammar import GrammarCompiler
from guided.grammar.automata.cfg_recognizer import CfgState
from guided.grammar.automata.earley import CfgAutomaton
from guided.grammar.automata.slice_forms import slice_candidate
from guided.grammar.cfg_ir import CfgGrammar
from guided.grammar.compiler import warm_up
from guided.grammar.frontends.gbnf_grammar import parse_gbnf
from guided.grammar.frontends.lark_grammar import parse_lark
from guided.grammar.tokens.compiled_cfg import compile_cfg
from guided.schema.compiler import compile_json_schema, json_schema_to_grammar

GRAMMARS = {
    # ESCAPED_STRING's body is an unbounded slice class; NAME a bounded one (at most 3 letters)
    "lark_strings": (
        "lark",
        'start: "[" [item ("," item)*] "]"\nitem: ESCAPED_STRING | NAME | "{" item "}"\n'
        "NAME: /[a-z]{1,3}/\n%import common.ESCAPED_STRING",
    ),
    "gbnf_strings": (
        "gbnf",
        'root ::= "[" (item ("," item)*)? "]"\nitem ::= "\\"" [^"\\\\]* "\\"" | [a-z]{0,3} "=" | "{" item "}"',
    ),
}
TOKENS = sorted(
    set(byte_splits('abcxyz"\\[]{},= é中\n'))
    | {b"ab", b"abc", b"abcd", b"zzzz", b"\xc3\xa9a", b"a\xe4\xb8", b"a\xc3", b'a"', b'",', b'"]', b'\\"'}
    | {b'["', b"[{", b"a=", b'{"', b"ab=", b'"}', b"x\n", b" \xe4"}
)
VOCAB = tiny_vocab(TOKENS)


@pytest.fixture(scope="module", autouse=True)
def _compiled_code_loaded():
    """numba's compilation (or cache load) before the first mask, not inside its time bound."""
    warm_up(VOCAB)


def _grammar(name):
    kind, text = GRAMMARS[name]
    return parse_lark(text) if kind == "lark" else parse_gbnf(text)


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_sliced_masks_are_exact(name):
    g = _grammar(name)
    compiled = compile_cfg(VOCAB, g)
    oracle = CfgAutomaton(g)
    sliced = set()

    def seen(m):
        cand = compiled.slice_of(m.state)
        if cand is not None:
            sliced.add(cand[1])

    check_masks_on_random_paths(compiled, lambda: CfgState(oracle), TOKENS, VOCAB, random.Random(name), 12, 12, seen)
    assert -1 in sliced  # the unbounded string body was taken through its slice
    assert any(hi > 0 for hi in sliced)  # and a bounded one ([a-z]{..3})


def test_dead_prefill_never_marks_a_live_byte():
    """Configurations prefill DEAD from the lexemes' first-byte sets; every prefilled entry is truly dead."""
    for name in GRAMMARS:
        a = CfgAutomaton(_grammar(name))
        states = CfgState(a)
        for text in ('["ab", {"é中"}', "[abc=, {x=}]", '["a\\"b"]'):
            states.feed_bytes(text.encode())
        prefilled = [(s, c) for s in range(a.n_states) for c in range(a.n_classes) if a.trans[s, c] == -1]
        assert prefilled
        for s, c in prefilled:  # the parser step itself (not the table) says dead
            assert a._step_config(s, c) == -1, (name, s, c)


def test_exit_masks_cover_every_lexeme_end():
    """Pruning reads exit masks: each must contain every byte that ends a lexeme of its terminals, and
    is the union of its terminals' exit bytes (filled in two calls: states made after the first)."""
    a = CfgAutomaton(_grammar("lark_strings"))
    CfgState(a).feed_bytes(b'["ab", "c')
    a.prepare_exits()
    first = len(a.lexstates)
    CfgState(a).feed_bytes(b'[{abc}, "x\\"", {{"ab"}}]')
    a.prepare_exits()
    assert any(lex >= 0 for lex in a.pure_lex) and len(a.lexstates) > first
    assert any(len({t for t, _ in state}) > 1 for state in a.lexstates)
    for lex, state in enumerate(a.lexstates):
        union = 0
        for t, _ in state:
            union |= a._term_exit(t)
        assert sum(int(w) << (64 * k) for k, w in enumerate(a.lex_exit[lex])) == union, state
    for lex in range(len(a.lexstates)):
        bits = a.lex_exit[lex]
        for c in range(a.n_classes):
            y = a._lex_step(lex, c)
            if y >= 0 and a._lex_acc[y]:
                for b in np.flatnonzero(a.class_map == c):
                    assert (int(bits[b >> 6]) >> (b & 63)) & 1, (lex, b)


# A lexeme with a long inside (x, then ab/cd pairs, then y) met in two parser contexts ("[" and "{"),
# and two terminals that share prefixes (KEY and NAME), so lexer states hold one or two terminals.
LEXEME_GRAMMAR = (
    'start: "[" item ("," item)* "]" | "{" item "}"\n'
    'item: WORD ";" | KEY "=" WORD | NAME\n'
    "WORD: /x(ab|cd)*y/\nKEY: /ab(cd)*/\nNAME: /a[a-d]*/\n"
)
LEXEME_TOKENS = sorted(
    {b"x", b"xab", b"xabcd", b"ab", b"abab", b"cd", b"cdab", b"abcd", b"a", b"b", b"c", b"d", b"y", b"aby"}
    | {b"cdy", b"y;", b";", b"=", b"=x", b",", b"[", b"{", b"]", b"}", b"[x", b"{x", b"abc", b"da"}
)
LEXEME_VOCAB = tiny_vocab(LEXEME_TOKENS)


def test_lexeme_mode_masks_are_exact():
    """Masks walked in lexeme mode (lexer steps shared by every parser context, the parser asked only
    where a lexeme may end) equal the byte-level recognizer's answers, token by token."""
    g = parse_lark(LEXEME_GRAMMAR)
    compiled = compile_cfg(LEXEME_VOCAB, g, regular_fast_path=False)
    oracle = CfgAutomaton(g)
    check_masks_on_random_paths(
        compiled, lambda: CfgState(oracle), LEXEME_TOKENS, LEXEME_VOCAB, random.Random(7), 30, 14
    )


def test_mask_walks_make_no_configuration_inside_a_lexeme():
    """A mask walk steps through a lexeme's inside on the lexer's table alone: the configurations it
    makes are where lexemes may end, never the positions inside one, in either context it occurs in."""
    g = parse_lark(LEXEME_GRAMMAR)
    compiled = compile_cfg(LEXEME_VOCAB, g, regular_fast_path=False)
    dfa = compiled.dfa
    starts = {dfa.pure_lex[0]}  # the opener's lexeme, at the start
    for opener in (b"[", b"{"):
        m = compiled.matcher()
        assert m.accept_token(LEXEME_TOKENS.index(opener))
        starts.add(dfa.pure_lex[m.state])  # the lexer state a lexeme begins in, in this context
        allowed = allowed_tokens(m, LEXEME_VOCAB)
        assert allowed[LEXEME_TOKENS.index(b"xabcd")] and allowed[LEXEME_TOKENS.index(b"abab")]
        assert not allowed[LEXEME_TOKENS.index(b"y")]
    inside = {lex for lex in dfa.pure_lex if lex >= 0} - starts
    assert starts and not inside, [dfa.lexstates[lex] for lex in inside]
    assert len(dfa.lexstates) > 6  # the walks did step through the lexemes' insides


def test_token_walks_make_no_configuration_inside_a_lexeme(monkeypatch):
    """Accepting a token (and the run-time checks' simulations) walks it through the lexer alone
    while the lexeme in flight cannot end: one configuration where the bytes stop, not one per
    byte; and that configuration is the one a step per byte reaches. The lexer's steps are taken in
    compiled code (``_lex_run``), several bytes at a time, and the ones not made yet are made there
    (``lex_table.step``): each recomputed from the expressions is the lexer's."""
    from guided.grammar.automata import earley

    runs, run = [], earley._lex_run

    def counted(*args):
        got = run(*args)
        runs.append(got[0] - args[5])  # bytes taken (args[5]: the index it starts at)
        return got

    monkeypatch.setattr(earley, "_lex_run", counted)
    g = parse_lark(LEXEME_GRAMMAR)
    dfa = compile_cfg(LEXEME_VOCAB, g, regular_fast_path=False).dfa
    for opener in (b"[", b"{"):
        s = dfa.walk(0, opener)
        walked = {}
        for data in (b"xabcdab", b"xab", b"abcdcd", b"xabcdy;", b"xabcdy"):
            before = dfa.n_states
            walked[data] = dfa.walk(s, data)
            made = dfa.n_states - before
            if opener == b"[" and data == b"xabcdab":  # the first walk, cold: the run made its steps
                assert runs and max(runs) >= 4, runs
            if data.startswith(b"x") and not data.endswith((b";", b"y")):  # inside WORD, which only y ends
                assert made <= 1, (opener, data, made)
        for data, got in walked.items():  # (after every walk: the parser's steps below make their entries)
            ref = s
            for b in data:  # the reference: the parser's step at every byte
                ref = dfa.entry(ref, int(dfa.class_map[b]))
            assert got == ref >= 0, (opener, data)
    assert _check_lexer_table(dfa) > 20


def test_reaches_answers_as_walk_without_making_the_configuration():
    """``reaches`` (asked of every declared name where one is due) answers ``walk(...) >= 0`` and,
    where the data ends inside a lexeme, makes no configuration for it (``walk`` then makes one)."""
    g = parse_lark(LEXEME_GRAMMAR)
    dfa = compile_cfg(LEXEME_VOCAB, g, regular_fast_path=False).dfa
    rng = random.Random(2)
    pieces = [b"x", b"ab", b"cd", b"y", b";", b"=", b"a", b"[", b"{", b",", b"]", b"}", b"q"]
    for _ in range(300):
        data = b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 6)))
        assert dfa.reaches(0, data) == (dfa.walk(0, data) >= 0), data
    for data in (b"[xabcd", b"{xab", b"[xcdcdab"):  # inside WORD, which only y ends
        fresh = compile_cfg(LEXEME_VOCAB, g, regular_fast_path=False).dfa
        s = fresh.walk(0, data[:1])
        before = fresh.n_states
        assert fresh.reaches(s, data[1:]) and fresh.n_states == before, data
        assert fresh.walk(s, data[1:]) >= 0 and fresh.n_states == before + 1, data


def test_threads_walking_one_cold_grammar_get_the_serial_masks():
    """Eight threads fill masks of one context-free grammar from cold at once (lexer states,
    configurations and the pure table grow under them); every mask equals the one a lone thread
    computed on its own copy."""
    g = parse_lark(LEXEME_GRAMMAR)
    rng = random.Random(3)

    def choose(allowed):
        options = np.flatnonzero(allowed[: len(LEXEME_TOKENS)])
        return int(rng.choice(options)) if len(options) else None

    check_threads_get_serial_masks(
        compile_cfg(LEXEME_VOCAB, g, regular_fast_path=False), compile_cfg(LEXEME_VOCAB, g, regular_fast_path=False),
        lambda m: allowed_tokens(m, LEXEME_VOCAB), choose,
    )


def _context_free(schema: dict):
    """The schema's grammar, or an array of itself kept context-free by a recursive $ref: alone, an open
    object's schema-free values are leaves of one regex (``regex_ast.Recursive``)."""
    return json_schema_to_grammar({"anyOf": [schema, {"type": "array", "items": {"$ref": "#"}}]}, key_order="any")


# an object whose other keys are any string but its names (``X* & ~"ab" & ~"a_c"``, as protobuf's JSON
# schemas write each field twice), beside schema-free values, in a context-free grammar
OTHER_KEYS = {"type": "object", "properties": {"ab": {"type": "integer"}},
              "patternProperties": {"^a_c$": {"type": "integer"}}, "additionalProperties": True}  # fmt: skip
KEY_TOKENS = sorted(set(byte_splits('{}"ab:c, 1x_')) | {b'{"', b'"ab', b'ab"', b"a_c", b'":', b'"a', b"cx", b'": 1'})
KEY_VOCAB = tiny_vocab(KEY_TOKENS)


def test_other_keys_take_the_string_slice_and_stay_exact():
    """Inside a key that is none of the declared names, every string token stays inside the key
    (infinitely many keys remain, whatever is written), so the string body's unbounded slice serves
    it (``slice_forms._intersection_form``; before, each first visit inside such a key walked the
    whole vocabulary); the masks equal the byte-level recognizer's, token by token."""
    g = _context_free(OTHER_KEYS)
    compiled = compile_cfg(KEY_VOCAB, g, regular_fast_path=False)
    oracle = CfgAutomaton(g)
    m = compiled.matcher()
    for tok in (b'{"', b"a", b"x"):  # into a key that is no declared name
        assert m.accept_token(KEY_TOKENS.index(tok))
    candidate = compiled.slice_of(m.state)
    assert candidate is not None and candidate[1] == -1, candidate
    check_masks_on_random_paths(compiled, lambda: CfgState(oracle), KEY_TOKENS, KEY_VOCAB, random.Random(5), 30, 10)


def test_other_keys_of_a_regular_object_take_the_string_slice_and_stay_exact():
    """The same keys in a regular language (values of one type): the slice serves them, and every mask
    equals the tokens whose bytes the automaton takes one by one."""
    g = compile_json_schema(GrammarCompiler(KEY_VOCAB), {**OTHER_KEYS, "additionalProperties": {"type": "integer"}})
    s = g.start_state
    for tok in (b'{"', b"a", b"x"):  # into a key that is no declared name
        s = g.next_state(s, KEY_TOKENS.index(tok))
    candidate = slice_candidate(g.pool, g.dfa.exprs[s])
    assert candidate is not None and candidate[1] == -1, candidate
    rng = random.Random(9)
    for _ in range(30):
        s = g.start_state
        for _ in range(10):
            mask = g.mask(s)
            allowed = [bool((int(mask[t >> 5]) >> (t & 31)) & 1) for t in range(len(KEY_TOKENS))]
            for tid in range(len(KEY_TOKENS)):
                assert allowed[tid] == (g.next_state(s, tid) >= 0), (s, KEY_TOKENS[tid])
            options = np.flatnonzero(allowed)
            if not len(options):
                break
            s = g.next_state(s, int(rng.choice(options)))



# keys of an open object (any string but the declared names, spelled as a trie of the names: no
# complement), and a string value of at least one character
TRIE_KEYS = {"type": "object", "properties": {"ab": {"type": "integer"}, "ac": {"type": "string", "minLength": 1}}}
TRIE_TOKENS = sorted(set(byte_splits('{}"abcx:, 1é')) | {b'{"', b'"a', b'ab"', b'":', b'"ab', b'":"', b"ab", b"ac", b"cx", b"xa", b'a"'})
TRIE_VOCAB = tiny_vocab(TRIE_TOKENS)


def test_trie_keys_and_nonempty_strings_take_the_string_slice_and_stay_exact():
    """Every string of string characters begins some key that is none of the declared names (the
    trie's ``regex_ast.Cofinite`` unions; past a whole name, ``x x*``: one more character at least):
    the keys take the string body's unbounded slice at their start, inside a name's prefix and past
    a whole name, as the value does; the masks equal the byte-level recognizer's, token by token
    (before, such keys had no slice: each first visit walked the whole vocabulary)."""
    g = _context_free(TRIE_KEYS)
    compiled = compile_cfg(TRIE_VOCAB, g, regular_fast_path=False)
    oracle = CfgAutomaton(g)
    for path in ((b'{"',), (b'{"', b"a"), (b'{"', b"ab"), (b'{"', b"ac", b'":"')):
        m = compiled.matcher()
        for tok in path:
            assert m.accept_token(TRIE_TOKENS.index(tok)), path
        candidate = compiled.slice_of(m.state)
        assert candidate is not None and candidate[1] == -1, (path, candidate)
    check_masks_on_random_paths(
        compiled, lambda: CfgState(oracle), TRIE_TOKENS, TRIE_VOCAB, random.Random(13), 40, 10
    )

# open objects (declared keys beside any other key, values nested without bound) and arrays of strings
NATIVE_SCHEMA = {
    "type": "object",
    "properties": {
        "departure_date": {"type": "string"},
        "destination": {"type": "string", "maxLength": 12},
        "passengers": {"type": "integer"},
        "legs": {"type": "array", "items": {"type": "object", "properties": {"from": {"type": "string"}}}},
    },
    "required": ["destination"],
}



def _check_lexer_table(dfa) -> int:
    """Every known lexer step, recomputed from the expressions (the derivative of each pair, empty ones
    dropped, the same order) and the flags and first-byte DEAD classes of each state; the flat table
    holds each state as the Python side does. Returns the steps checked."""
    pool, checked = dfa.pool, 0
    assert len(dfa.lex_table) == len(dfa.lexstates)
    for lex, state in enumerate(dfa.lexstates):
        assert dfa.lex_table.state(lex) == state
        acc = any(pool.nullable[e] for _, e in state)
        cont = any(dfa._can_continue(e) for _, e in state)
        assert dfa.lex_flags[lex] == (1 if acc else 0) | (2 if cont else 0), state
        first = 0
        for _, e in state:
            first |= pool.first[e]
        for c in range(dfa.n_classes):
            r = int(dfa.lex_trans[lex, c])
            if r == -2:
                continue
            derived = ((t, pool.deriv(e, dfa.reps[c])) for t, e in state)
            out = tuple((t, d) for t, d in derived if d != 0 and (not pool.has_bool[d] or pool.is_live(d)))
            assert (dfa.lexstates[r] if r >= 0 else ()) == out, (state, c)
            if not first & dfa.class_bits[c]:
                assert r == -1
            checked += 1
    return checked


def _random_masks(compiled, vocab, seed: int, paths: int, steps: int) -> list[bytes]:
    """The masks along random token paths of a compiled grammar (each path a fresh matcher)."""
    rng, masks = random.Random(seed), []
    for _ in range(paths):
        m = compiled.matcher()
        for _ in range(steps):
            allowed = allowed_tokens(m, vocab)
            masks.append(np.packbits(allowed).tobytes())
            options = np.flatnonzero(allowed)
            if not len(options):
                break
            assert m.accept_token(int(rng.choice(options)))
    return masks


def test_lexer_steps_made_in_compiled_code_are_pythons(vocab_builtin, monkeypatch):
    """Mask walks make the lexer's steps in compiled code (``lex_table.step``) instead of going back to
    Python for each: on the same random token paths of a real vocabulary, the masks equal those of
    walks that leave every step to Python, and every step either made, recomputed from the
    expressions, is the lexer's (``_check_lexer_table``)."""
    runs = _both_step_sides(monkeypatch, vocab_builtin, NATIVE_SCHEMA, (11, 6, 40))
    assert runs[True][0] == runs[False][0]
    for native in (False, True):
        assert _check_lexer_table(runs[native][1]) > 500
    in_python, still_in_python = len(runs[False][2]), len(runs[True][2])  # states made by the Python side
    assert in_python > 80 and still_in_python < in_python / 4, (in_python, still_in_python)


def _both_step_sides(monkeypatch, vocab, schema, paths) -> dict:
    """native -> (masks on the random token paths ``paths`` = (seed, count, length), the automaton,
    the lexer states the Python side made in it), with every lexer step in Python (native False)
    and with the mask walks' steps in compiled code (True)."""
    from guided.grammar.automata import lex_table

    g = json_schema_to_grammar(schema, key_order="any")
    if not isinstance(g, CfgGrammar):  # kept context-free by a member that nests the object itself
        g = json_schema_to_grammar({**schema, "properties": {**schema["properties"], "self": {"$ref": "#"}}}, key_order="any")
    made = []
    add = lex_table.LexTable.add

    def counted(self, state):
        made.append((self, state))
        return add(self, state)

    monkeypatch.setattr(lex_table.LexTable, "add", counted)
    runs = {}
    for native in (False, True):
        monkeypatch.setattr(lex_table, "NATIVE_STEPS", native)
        compiled = compile_cfg(vocab, g, regular_fast_path=False)
        masks = _random_masks(compiled, vocab, *paths)
        dfa = compiled.dfa
        runs[native] = (masks, dfa, [state for table, state in made if table is dfa.lex_table])
    return runs

# names that must match a pattern and not be declared, and a string value that must not be one of two:
# lexer states with complements and intersections, whose liveness the compiled step decides
BOOLEAN_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "not": {"enum": ["x", "yy"]}},
        "n": {"type": "integer"},
        "kids": {"type": "array", "items": {"$ref": "#"}},
    },
    "patternProperties": {"^x-[a-z]+$": {"type": "string", "pattern": "^[a-z]+$"}, "^[0-9]{2,}$": {"type": "integer"}},
    "required": ["name"],
}


def test_lexer_steps_with_complements_are_made_in_compiled_code(vocab_builtin, monkeypatch):
    """A lexer state holding an intersection or complement is stepped in compiled code too, where the
    structural rules or the memo decide its liveness (``expr_core.live``); only a search goes back to
    Python. Masks equal those of Python's steps on the same random paths, every step made is the
    lexer's, and Python makes fewer such states (the others wait on a search the first time)."""
    runs = _both_step_sides(monkeypatch, vocab_builtin, BOOLEAN_SCHEMA, (1, 20, 60))
    assert runs[True][0] == runs[False][0]
    counts = {}
    for native, (_, dfa, made) in runs.items():
        assert _check_lexer_table(dfa) > 300
        with_bool = [state for state in dfa.lexstates if any(dfa.pool.has_bool[e] for _, e in state)]
        counts[native] = (sum(1 for state in made if state in with_bool), len(with_bool))
    assert counts[False][0] == counts[False][1] > 15, counts
    assert counts[True][1] == counts[False][1] and counts[True][0] <= 0.75 * counts[False][0], counts


def test_compiled_lexer_step_leaves_searches_to_python_and_drops_empty_derivatives():
    """``lex_table.step`` on a state whose first pair becomes an intersection no structural rule
    decides (even-length and odd-length x-strings): UNKNOWN until Python's search has settled it,
    then the step drops that empty derivative and keeps the live pair, as ``_lex_step`` does."""
    from guided.grammar.automata.expr_pool import ExprPool
    from guided.grammar.automata.lex_table import UNKNOWN, LexTable, step

    pool = ExprPool()
    a, x = pool.bytes_(1 << ord("a")), pool.bytes_(1 << ord("x"))
    even = pool.rep(pool.cat(x, x), 0, -1)
    never = pool.cat(a, pool.and_([even, pool.cat(x, even)]))
    alive = pool.cat(a, pool.rep(x, 0, -1))
    table = LexTable()
    table.add(((0, never), (1, alive)))
    words = np.zeros((2, 4), dtype=np.uint64)  # class 0: the byte a; class 1: every other byte
    words[0, ord("a") >> 6] = np.uint64(1 << (ord("a") & 63))
    words[1] = ~words[0]
    reps = np.array([ord("a"), ord("x")], dtype=np.int64)

    def stepped():
        lex_trans = np.full((4, 2), UNKNOWN, dtype=np.int32)
        flags = np.zeros(4, dtype=np.uint8)
        r = pool.call(step, 0, 0, reps, table.items, table.off, table.ht, table.hdr, lex_trans, flags,
                      words.view(np.int64))  # fmt: skip
        return r, flags

    d = pool.deriv(never, ord("a"))
    assert pool.has_bool[d]
    assert stepped()[0] == UNKNOWN and len(table) == 1  # nothing made while a search is owed
    assert not pool.is_live(d)  # Python's search, memoised in the arena
    r, flags = stepped()
    assert r == 1 and table.state(r) == ((1, pool.deriv(alive, ord("a"))),)
    assert flags[r] == 3  # x* accepts here and goes on


def test_slice_forms_are_read_once_per_expression(monkeypatch):
    """``slice_candidate`` reads each branch of a union once per pool: an unanchored counted pattern's
    derivatives are unions of the same shifted branches (``[a-z]{k} .*`` for every k), and a memo-free
    reading read them again for every derivative. The memo answers as that reading does."""
    from collections import Counter

    from guided.grammar.automata import slice_forms
    from guided.grammar.automata.expr_pool import ExprPool
    from guided.grammar.frontends.ecma_regex import parse_regex

    pool = ExprPool()
    exprs = [pool.intern(parse_regex(".*[a-z]{40}.*"))]
    for _ in range(30):
        exprs.append(pool.deriv(exprs[-1], ord("q")))
    calls, read = Counter(), slice_forms._form_of
    monkeypatch.setattr(slice_forms, "_form_of", lambda p, e: calls.update([e]) or read(p, e))
    first = [slice_candidate(pool, e) for e in exprs]
    assert first[-1] is not None and max(calls.values()) == 1, calls
    with_memo = sum(calls.values())
    monkeypatch.setattr(slice_forms, "_slice_form", lambda p, e: slice_forms._form_of(p, e))  # no memo
    pool.__dict__.pop("_slice_memo")
    calls.clear()
    assert [slice_candidate(pool, e) for e in exprs] == first
    assert sum(calls.values()) > 5 * with_memo, (sum(calls.values()), with_memo)
