"""The hole helpers of ``guided.schema.recursion``: ``has_hole`` (known since a node is built), the
memos ``hole_memo()`` shares, ``hole_names``, and ``fill_holes`` / ``map_meets`` that rebuild only the
paths down to the holes."""

from __future__ import annotations

import gc
import pickle

from guided.grammar.regex_ast import (
    EPSILON,
    And,
    Cofinite,
    Let,
    Not,
    alt,
    chars,
    intersect,
    literal,
    recursive,
    repeat,
    seq,
)
from guided.schema.recursion import Hole, fill_holes, has_hole, hole_memo, hole_names, map_meets


def _tree():
    plain = seq(literal("ab"), repeat(literal("c")))
    holed = seq(literal("["), Hole("item"), literal("]"))
    return plain, holed, alt(plain, repeat(holed), seq(Hole("any"), plain))


def test_has_hole_in_and_out_of_a_scope():
    plain, holed, root = _tree()
    for scoped in (False, True):
        if scoped:
            with hole_memo():
                answers = [has_hole(n) for n in (plain, holed, root, Hole("x"), literal("x"))]
        else:
            answers = [has_hole(n) for n in (plain, holed, root, Hole("x"), literal("x"))]
        assert answers == [False, True, True, True, False]


def test_has_hole_through_every_node_type():
    plain, holed, _ = _tree()
    assert [has_hole(n) for n in (And((holed, plain)), Not(holed), repeat(holed, 2, 5), alt(plain, holed))] == [True] * 4
    assert [has_hole(n) for n in (And((plain, plain)), Not(plain), repeat(plain), EPSILON, chars([(0, 9)]))] == [False] * 5
    # a Let binds its placeholders: only what it puts in their place counts
    assert not has_hole(Let(holed, (Hole("item"),), (literal("x"),)))
    assert has_hole(Let(plain, (Hole("item"),), (holed,)))
    assert has_hole(Cofinite((holed, plain), repeat(chars([(97, 122)]))))
    # a Recursive leaf stands for its body, which holds its own marker (not a hole of the caller's)
    value = recursive(alt(literal("0"), seq(literal("["), Hole("v"), literal("]"))), Hole("v"), 1 << ord("0") | 1 << ord("["), 1)
    assert not has_hole(value) and not has_hole(seq(literal("x"), value))
    # a node rebuilt from its pickle knows it again (the cached bits are never pickled)
    assert has_hole(pickle.loads(pickle.dumps(seq(literal("a"), holed))))


def test_scope_memo_never_answers_for_a_dead_node():
    # inside one scope, nodes are kept alive: an id cannot be reused by a node with another answer
    with hole_memo():
        for i in range(200):
            node = seq(literal(str(i)), Hole("h")) if i % 2 else seq(literal(str(i)), literal("x"))
            assert has_hole(node) == bool(i % 2)
            del node
            gc.collect(0)  # the node has no cycle: freed at del; young generation only keeps this cheap


def test_nested_scopes_share_one_memo():
    with hole_memo():
        _, holed, _ = _tree()
        assert has_hole(holed)
        with hole_memo():
            assert has_hole(holed)
        assert has_hole(seq(holed, literal("x")))


def test_hole_names():
    _, _, root = _tree()
    assert hole_names(root) == {"item", "any"}
    assert hole_names(literal("x")) == set()


def test_fill_holes_keeps_hole_free_subtrees():
    plain, holed, root = _tree()
    filled = fill_holes(root, lambda h: literal(h.name))
    assert not has_hole(filled)
    assert filled == alt(plain, repeat(seq(literal("[item]"))), seq(literal("any"), plain))
    # the hole-free branch is the very same object, not a rebuilt copy
    assert fill_holes(seq(plain, Hole("x")), lambda h: literal("y")).items[0] is plain.items[0]
    assert fill_holes(plain, lambda h: literal("y")) is plain


def test_map_meets_fixes_only_meets_over_holes():
    plain, holed, _ = _tree()
    meet = intersect(holed, seq(literal("["), repeat(literal("a")), literal("]")))
    plain_meet = intersect(plain, literal("abc"))
    node = alt(meet, plain_meet, Not(holed))
    seen = []
    out = map_meets(node, lambda m: seen.append(type(m)) or literal("fixed"))
    assert sorted(t.__name__ for t in seen) == ["And", "Not"]
    assert isinstance(plain_meet, And) and plain_meet in out.items
