"""Compile-time sharing in ``ExprPool``: the pool-wide intern memo, multi-root ``byte_masks`` and the
compiled ``byte_classes`` give the same expressions and classes as interning and partitioning each
node on its own."""

from __future__ import annotations

import random

from grammar_oracle import boolean_regexes
from hypothesis import given, settings
from hypothesis import strategies as st

from guided.grammar.automata.expr_pool import ExprPool
from guided.grammar.automata.utf8 import utf8_sequences
from guided.grammar.regex_ast import (
    EMPTY,
    EPSILON,
    Alt,
    Seq,
    alt,
    byte_set,
    cat,
    chars,
    literal,
    seq,
)

REGEX = boolean_regexes(
    [chars([(0x41, 0x5A), (0xE9, 0xE9), (0x4E00, 0x4E10)]), byte_set([(0x30, 0x39)])], max_leaves=8, wide_alts=True
)
WORDS = [b"", b"a", b"b", b"ab", b"aa", b"abc", b"\xc3\xa9", b"Z9", b"5", b"a5ab", b"\xe4\xb8\x80", b"\xff"]


def _accepts(pool: ExprPool, e: int, data: bytes) -> bool:
    for b in data:
        e = pool.deriv(e, b)
    return bool(pool.nullable[e])


def _copy(node):
    """A structurally equal node made of new objects (what two lowerings of one subschema give)."""
    if isinstance(node, (Seq, Alt)):
        return type(node)(tuple(_copy(x) for x in node.items))
    return node


@settings(max_examples=200, deadline=None)
@given(first=REGEX, second=REGEX)
def test_interning_after_other_nodes_gives_the_same_language(first, second):
    fresh = ExprPool()
    a = fresh.intern(second)
    shared = ExprPool()
    shared.intern(first)
    b = shared.intern(second)
    for w in WORDS:
        assert _accepts(fresh, a, w) == _accepts(shared, b, w)


@settings(max_examples=100, deadline=None)
@given(node=REGEX)
def test_equal_copies_intern_to_one_expression(node):
    pool = ExprPool()
    e = pool.intern(node)
    assert pool.intern(_copy(node)) == e
    assert pool.intern(seq(node, literal("x"))) == pool.intern(seq(_copy(node), literal("x")))


@settings(max_examples=100, deadline=None)
@given(nodes=st.lists(REGEX, min_size=1, max_size=5), seen=st.lists(REGEX, max_size=2))
def test_a_batch_interns_to_the_expressions_of_one_by_one(nodes, seen):
    """``intern_many`` in a pool that holds other nodes already (some equal to the batch's, built
    apart) gives the expressions ``intern`` gives node by node."""
    one, batch = ExprPool(), ExprPool()
    for n in seen:
        one.intern(n)
        batch.intern(_copy(n))
    nodes = nodes + [_copy(n) for n in nodes[:2]] + nodes[:1]  # equal copies and a repeated object
    ids = batch.intern_many(nodes)
    expected = [one.intern(n) for n in nodes]
    for a, b in zip(ids, expected, strict=True):
        for w in WORDS:
            assert _accepts(batch, a, w) == _accepts(one, b, w)
    assert [ids.index(x) for x in ids] == [expected.index(x) for x in expected]  # equal nodes, one id


def test_a_batch_compares_a_subtree_built_apart_once(monkeypatch):
    """A subtree equal to an interned one but built apart, shared by every node of a batch, is compared
    structurally once for the batch (node by node, once per node: a walk of the whole subtree each)."""
    import guided.grammar.regex_ast as regex_ast

    def big():
        return alt(*(seq(literal(f"key{i}"), chars([(0x61, 0x7A)])) for i in range(50)))

    calls = []
    real = regex_ast._equal
    monkeypatch.setattr(regex_ast, "_equal", lambda a, b: calls.append(1) or real(a, b))
    terms = []
    shared = big()
    for i in range(8):
        terms.append(seq(shared, literal(str(i))))
    one, batch = ExprPool(), ExprPool()
    one.intern(big())
    batch.intern(big())
    calls.clear()
    for t in terms:
        one.intern(t)
    by_one = len(calls)
    calls.clear()
    batch.intern_many(terms)
    assert by_one >= 8 and len(calls) == 1


def test_shared_subtrees_are_interned_once():
    word = alt(*(literal(w) for w in ("true", "false", "null", "none")))
    pool = ExprPool()
    pool.intern(word)
    n = len(pool)
    pool.intern(alt(*(literal(w) for w in ("true", "false", "null", "none"))))  # a copy
    assert len(pool) == n


@settings(max_examples=100, deadline=None)
@given(nodes=st.lists(REGEX, min_size=1, max_size=4))
def test_byte_masks_of_several_roots_is_the_union(nodes):
    pool = ExprPool()
    roots = [pool.intern(n) for n in nodes]
    union: set[int] = set()
    for r in roots:
        union |= pool.byte_masks(r)
    assert pool.byte_masks(*roots) == union


def _byte_classes_reference(masks):
    sig: dict[tuple, int] = {}
    cls, reps = [0] * 256, []
    for b in range(256):
        key = tuple((m >> b) & 1 for m in sorted(masks))
        if key not in sig:
            sig[key] = len(reps)
            reps.append(b)
        cls[b] = sig[key]
    return cls, reps


def _chars_reference(pool: ExprPool, ranges) -> int:
    """A character class built the direct way: every UTF-8 sequence of every range, or'ed."""
    alts = []
    for lo, hi in ranges:
        for q in utf8_sequences(lo, hi):
            alts.append(pool.cat_all([pool.bytes_(((1 << (b - a + 1)) - 1) << a) for a, b in q]))
    return pool.or_(alts)


def test_character_classes_intern_to_their_direct_construction():
    rng = random.Random(11)
    edges = [0, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF]
    pool = ExprPool()
    for _ in range(1500):
        cuts = sorted(
            min(
                max(
                    rng.choice(
                        [
                            rng.randint(0, 0x10FFFF),
                            rng.randint(0, 300),
                            rng.choice(edges) + rng.randint(-2, 2),
                        ]
                    ),
                    0,
                ),
                0x10FFFF,
            )
            for _ in range(2 * rng.randint(1, 4))
        )
        ranges = [(lo, hi) for lo, hi in zip(cuts[::2], cuts[1::2], strict=True)]
        node = chars(ranges)
        assert pool.intern(node) == _chars_reference(pool, node.ranges), node.ranges


@settings(max_examples=100, deadline=None)
@given(common=REGEX, node=REGEX)
def test_a_fork_gives_the_same_language_and_leaves_its_source_alone(common, node):
    source = ExprPool()
    c = source.intern(common)
    n = len(source)
    fork = source.fork()
    assert fork.intern(common) == c  # found by the copied memo, not rebuilt
    assert len(fork) == n
    e = fork.intern(node)
    assert len(source) == n  # interning into the fork added nothing to its source
    fresh = ExprPool()
    f = fresh.intern(node)
    for w in WORDS:
        assert _accepts(fork, e, w) == _accepts(fresh, f, w)


@given(st.integers(min_value=0, max_value=(1 << 256) - 1))
def test_intern_words_are_the_arenas_words(mask):
    """The int64 words an intern program holds for a byte set (built without an array) are the
    arena's own (``expr_core.words``), the top bit of each word included."""
    from guided.grammar.automata import expr_core as core
    from guided.grammar.automata.expr_pool import _int64_words

    assert _int64_words(mask) == tuple(core.words(mask).tolist())


@settings(max_examples=100, deadline=None)
@given(nodes=st.lists(REGEX, min_size=1, max_size=4), seed=st.integers(0, 2**16))
def test_pool_byte_classes_partition_the_reachable_sets(nodes, seed):
    """``ExprPool.byte_classes`` (one compiled pass) gives the classes of the sets ``byte_masks``
    collects, classes numbered by their first byte, for any set of roots."""
    pool = ExprPool()
    roots = [pool.intern(n) for n in nodes]
    rng = random.Random(seed)
    assert pool.byte_classes() == _byte_classes_reference(set())
    for k in range(1, len(roots) + 1):
        for _ in range(4):
            picked = rng.sample(roots, k)
            assert pool.byte_classes(*picked) == _byte_classes_reference(pool.byte_masks(*picked))


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(REGEX, min_size=1, max_size=4), extra=st.sampled_from([None, EMPTY, EPSILON]))
def test_cat_interns_to_the_expression_seq_does_without_copying_its_sequences(parts, extra):
    """``cat`` keeps each argument one item where ``seq`` copies the items of a sequence: the pool
    right-nests concatenation, so both give one expression (the same id in one pool); EMPTY anywhere
    is EMPTY, EPSILON drops out."""
    parts = [*parts, literal("ab")] if extra is None else [*parts[:1], extra, *parts[1:]]
    flat, kept = seq(*parts), cat(*parts)
    pool = ExprPool()
    assert pool.intern(kept) == pool.intern(flat)
    if any(p is EMPTY or (p.__class__ is Alt and not p.items) for p in parts):
        assert kept is EMPTY
        return
    items = [p for p in parts if p != EPSILON]
    if len(items) == 1:
        assert kept is items[0]
    else:
        assert isinstance(kept, Seq) and list(kept.items) == items  # each argument one item, in order
