"""The compiled expression core under ``ExprPool`` (``expr_core``): one arena that grows as nodes are
added, interning that gives one id per expression across growth, pickles and forks, and a
derivative memo that outlives growth."""

from __future__ import annotations

import pickle
import random

import numpy as np

from guided.grammar.automata import expr_core as core
from guided.grammar.automata.expr_pool import ExprPool
from guided.grammar.regex_ast import (
    Alt,
    And,
    ByteSet,
    Chars,
    Not,
    Repeat,
    Seq,
    alt,
    any_string,
    byte_set,
    chars,
    complement,
    intersect,
    literal,
    repeat,
    seq,
)
from guided.grammar.safe_pickle import safe_loads


def _words(n: int) -> list:
    return [literal(f"w{i}x") for i in range(n)]


def _columns(pool: ExprPool, e: int) -> tuple:
    return (pool.kind[e], pool.args[e], pool.nullable[e], pool.has_bool[e], pool.first[e], pool.counter[e],
            pool.min_len[e])  # fmt: skip


def test_the_arena_grows_and_interning_keeps_one_id_per_expression():
    pool = ExprPool()
    start = len(pool.arena)
    ids = [pool.intern(w) for w in _words(3000)]  # far past the first arena's room
    assert len(pool.arena) > start
    n = len(pool)
    fresh = ExprPool()
    assert [fresh.intern(w) for w in _words(3000)] == ids  # the same order gives the same ids
    assert [pool.cat(pool.args[e][0], pool.args[e][1]) for e in ids] == ids  # rebuilt, not added
    assert len(pool) == n
    assert len(set(ids)) == len(ids)


def test_derivatives_are_memoised_across_growth():
    pool = ExprPool()
    e = pool.intern(alt(*_words(200)))
    d = pool.deriv(e, ord("w"))
    work = pool._work
    for w in _words(3000):  # grow the arena many times over
        pool.intern(w)
    assert pool.deriv(e, ord("w")) == d
    assert pool._work == work  # answered from the memo, not derived again


def test_a_pool_pickles_and_forks_with_the_same_ids_and_memos():
    pool = ExprPool()
    node = seq(alt(*_words(20)), intersect(repeat(chars([(0x61, 0x7A)]), 1, 5), repeat(literal("ab"))))
    e = pool.intern(node)
    d = pool.deriv(e, ord("w"))
    assert pool.is_live(e)
    for copy in (safe_loads(pickle.dumps(pool)), pool.fork()):
        assert len(copy) == len(pool)
        assert all(_columns(copy, x) == _columns(pool, x) for x in range(len(pool)))
        work = copy._work
        assert copy.deriv(e, ord("w")) == d and copy._work == work
        assert copy.emptiness.memo.get(e) is True  # the emptiness memo lives in the arena too
        assert copy.intern(node) == e


def test_a_pickled_pool_is_independent_of_its_source():
    pool = ExprPool()
    e = pool.intern(alt(*_words(5)))
    copy = safe_loads(pickle.dumps(pool))
    x = copy.intern(literal("only in the copy"))
    assert len(copy) > len(pool)
    assert pool.intern(literal("only in the copy")) == x  # the same next id, added on its own
    assert copy.args[e] == pool.args[e] and copy.kind[e] == pool.kind[e] == core.K_CAT  # w(0x|1x|...)


def _random_ast(rng: random.Random, depth: int):
    """A random regex AST over a few ASCII and wider characters, with every node kind."""
    if depth == 0 or rng.random() < 0.2:
        return rng.choice([
            literal(rng.choice(["a", "ab", "abc", "b", "ba", "\u00e9", "\u4e2d"])),
            chars([(0x61, 0x63), (0xE9, 0x4E2D)]),
            byte_set([(0x30, 0x39)]),
            seq(),
        ])  # fmt: skip
    kind = rng.choice(["seq", "alt", "alt", "and", "not", "rep"])
    kids = [_random_ast(rng, depth - 1) for _ in range(rng.randint(1, 6))]
    if kind == "seq":
        return seq(*kids)
    if kind == "alt":  # shared heads, so that unions of four or more are left-factored
        head = kids[0]
        return alt(*(seq(head, k) if rng.random() < 0.6 else k for k in kids))
    if kind == "and":
        return intersect(*kids)
    if kind == "not":
        return complement(kids[0])
    lo = rng.randint(0, 2)
    return repeat(kids[0], lo, rng.choice([None, lo + rng.randint(0, 2)]))


def _by_constructors(pool: ExprPool, node) -> int:
    """The expression of node built constructor by constructor (leaves interned alone), unions of
    four or more left-factored as in ``ExprPool.intern``'s documented rule, recursively."""
    if isinstance(node, (Chars, ByteSet)):
        return pool.intern(node)
    if isinstance(node, Seq):
        return pool.cat_all([_by_constructors(pool, x) for x in node.items])
    if isinstance(node, Alt):
        items = [_by_constructors(pool, x) for x in node.items]
        return _factored(pool, items) if len(items) >= core.FACTOR_MIN else pool.or_(items)
    if isinstance(node, And):
        return pool.and_([_by_constructors(pool, x) for x in node.items])
    if isinstance(node, Not):
        return pool.and_([pool.intern(any_string()), pool.not_(_by_constructors(pool, node.item))])
    assert isinstance(node, Repeat)
    return pool.rep(_by_constructors(pool, node.item), node.min, -1 if node.max is None else node.max)


def _factored(pool: ExprPool, items: list, depth: int = 0) -> int:
    """ab|ac -> a(b|c), recursively, down to FACTOR_DEPTH shared heads."""
    if depth > core.FACTOR_DEPTH:
        return pool.or_(items)
    groups: dict[int, list] = {}
    parts = []
    for e in dict.fromkeys(items):
        if pool.kind[e] == core.K_CAT:
            head, tail = pool.args[e]
            groups.setdefault(head, []).append(tail)
        else:
            parts.append(e)
    for head, tails in groups.items():
        parts.append(pool.cat(head, tails[0] if len(tails) == 1 else _factored(pool, tails, depth + 1)))
    return pool.or_(parts)


def test_a_whole_ast_interned_in_one_call_is_the_expression_its_constructors_build():
    rng = random.Random(7)
    for _ in range(150):
        node = _random_ast(rng, 4)
        pool = ExprPool()
        e = pool.intern(node)  # one compiled program for the whole tree
        n = len(pool)
        assert _by_constructors(pool, node) == e
        assert len(pool) == n  # every node the constructors ask for was there already


def _meets_by_walk(node) -> bool:
    if isinstance(node, (And, Not)):
        return True
    if isinstance(node, (Seq, Alt)):
        return any(_meets_by_walk(x) for x in node.items)
    return isinstance(node, Repeat) and _meets_by_walk(node.item)


def test_whether_a_node_holds_an_intersection_is_known_since_it_was_built():
    rng = random.Random(5)
    seen = set()
    for _ in range(300):
        node = _random_ast(rng, 4)
        assert node.has_meet == _meets_by_walk(node)
        assert pickle.loads(pickle.dumps(node)).has_meet == node.has_meet
        seen.add(node.has_meet)
    assert seen == {True, False}


def test_a_union_of_thousands_of_words_is_factored_while_the_arena_grows():
    words = [literal(f"key{i:04d}") for i in range(3000)]
    pool = ExprPool()
    start = len(pool.arena)
    e = pool.intern(alt(*words))  # the arena grows during the program: it runs again, same ids
    assert len(pool.arena) > start
    n = len(pool)
    assert _by_constructors(pool, alt(*words)) == e and len(pool) == n
    assert pool.kind[e] == core.K_CAT  # one shared head, "k", in front of the rest
    d = e
    for b in b"key0042":
        d = pool.deriv(d, b)
    assert pool.nullable[d] and pool.deriv(d, ord("0")) == 0


def test_unions_of_long_chains_are_factored_as_the_rule_says_past_the_depth_limit_too():
    # words hundreds of bytes long, sharing prefixes of every length (none, a few heads, past
    # FACTOR_DEPTH), one a prefix of another, repeated, ending in a non-literal tail: the factoring
    # expands a path one item alone reached only when another item reaches it
    rng = random.Random(11)
    for _ in range(30):
        stem = "".join(rng.choice("ab") for _ in range(core.FACTOR_DEPTH + 60))
        words = []
        for _ in range(rng.randint(core.FACTOR_MIN, 12)):
            cut = rng.choice([0, 1, 3, 40, core.FACTOR_DEPTH - 1, core.FACTOR_DEPTH, core.FACTOR_DEPTH + 1,
                              core.FACTOR_DEPTH + 30, len(stem)])  # fmt: skip
            tail = "".join(rng.choice("abc") for _ in range(rng.randint(0, 30)))
            end = rng.choice([seq(), repeat(literal("c"), 0, None), alt(literal("x"), literal("yz"))])
            words.append(seq(literal(stem[:cut] + tail), end))
        words.append(rng.choice(words))  # an item twice
        pool = ExprPool()
        e = pool.intern(alt(*words))
        n = len(pool)
        assert _by_constructors(pool, alt(*words)) == e and len(pool) == n


# ---------------------------------------------------------------------------------- counter clamping
_ABC = b"abc"


def _walk_agrees(pool: ExprPool, e: int, c: int, depth: int) -> None:
    """Along every string over a, b, c of at most ``depth`` bytes, e and c accept and stay live alike."""
    if pool.is_live(e) != pool.is_live(c):
        raise AssertionError("liveness differs")
    if pool.nullable[e] != pool.nullable[c]:
        raise AssertionError("acceptance differs")
    if depth and pool.is_live(e):
        for b in _ABC:
            _walk_agrees(pool, pool.deriv(e, b), pool.deriv(c, b), depth - 1)


def _counted_ast(rng: random.Random, depth: int, unit):
    """A random AST over a, b, c with counters past the clamp's limit, and character counts
    (``A & unit{0,n}``, n past the limit plus A's completions) beside intersections they do not
    free."""
    if depth == 0 or rng.random() < 0.2:
        return rng.choice([literal("a"), literal("bc"), chars([(0x61, 0x62)]), unit])
    kind = rng.choice(["seq", "alt", "rep", "rep", "count", "and"])
    kids = [_counted_ast(rng, depth - 1, unit) for _ in range(rng.randint(1, 3))]
    if kind == "seq":
        return seq(*kids)
    if kind == "alt":
        return alt(*kids)
    if kind == "and":
        return intersect(kids[0], repeat(chars([(0x61, 0x62)]), 0, rng.randint(2, 40)))
    if kind == "count":  # A free of intersections: its own counters only
        free = seq(repeat(literal("a"), rng.randint(0, 3), rng.choice([None, 30])), literal("b"))
        return intersect(free, repeat(unit, 0, rng.choice([9, 12, 60])))
    lo = rng.choice([0, 1, 3, 8, 20])
    return repeat(kids[0], lo, rng.choice([None, lo + rng.choice([0, 2, 9, 30])]))


def test_clamping_past_the_limit_keeps_every_string_within_it():
    rng = random.Random(11)
    limit = 6
    unit = chars([(0x61, 0x63)])
    clamped_some = 0
    for _ in range(120):
        pool = ExprPool()
        pool.char_units = (pool.intern(unit),)
        e = pool.intern(_counted_ast(rng, 3, unit))
        c = pool.clamp(e, limit)
        assert pool.counter[c] <= max(limit, pool.counter[e]) and pool.clamp(e, limit) == c  # memoised
        if c != e:
            clamped_some += 1
            assert not pool.has_bool[e] or pool.counter[c] <= pool.counter[e]
        _walk_agrees(pool, e, c, limit - 1)
    assert clamped_some > 60  # the generator does exercise counters past the limit


def test_a_character_count_that_cannot_bind_becomes_unbounded():
    pool = ExprPool()
    unit = chars([(0x61, 0x63)])
    pool.char_units = (pool.intern(unit),)
    free = seq(repeat(literal("a"), 0, None), literal("b"))  # completes within 2 bytes (the rules' bound)
    e = pool.intern(intersect(free, repeat(unit, 0, 100)))
    assert pool.completion_bound(pool.intern(free)) == 2
    assert pool.clamp(e, 10) == pool.and_([pool.intern(free), pool.rep(pool.intern(unit), 0, -1)])
    tight = pool.intern(intersect(free, repeat(unit, 0, 11)))  # 11 < limit + bound: it may bind
    assert pool.clamp(tight, 10) == tight
    assert pool.clamp(pool.intern(intersect(free, repeat(unit, 0, 12))), 10) == pool.clamp(e, 10)
    assert pool.completion_bound(pool.intern(intersect(free, complement(literal("b"))))) is None


def test_counters_clamp_by_the_bytes_of_their_iterations():
    """Iterations of two bytes: within 9 bytes at most 4 complete, so an upper bound of 6 (12 bytes)
    cannot bind and a lower bound of 8 reads as 5 (``expr_core.rep_span``); a bound of 5 (10 bytes)
    is kept. Under an unbounded character count the intersection's other side clamps as well. Before,
    counters clamped past the limit in iterations: 29 two-byte words kept their count."""
    pool = ExprPool()
    unit = chars([(0x61, 0x63)])
    pool.char_units = (pool.intern(unit),)
    two, c = literal("ab"), literal("c")
    cases = [
        (seq(repeat(two, 0, 29), c), seq(repeat(two, 0, None), c)),
        (seq(repeat(two, 0, 6), c), seq(repeat(two, 0, None), c)),
        (seq(repeat(two, 0, 5), c), seq(repeat(two, 0, 5), c)),
        (seq(repeat(two, 8, None), c), seq(repeat(two, 5, None), c)),
        (seq(repeat(two, 8, 40), c), seq(repeat(two, 5, None), c)),
        (intersect(seq(repeat(two, 0, 29), c), repeat(unit, 0, None)),
         intersect(seq(repeat(two, 0, None), c), repeat(unit, 0, None))),
    ]  # fmt: skip
    for node, expected in cases:
        e = pool.intern(node)
        clamped = pool.clamp(e, 10)
        assert clamped == pool.intern(expected), node
        _walk_agrees(pool, e, clamped, 9)
        assert pool.counter[clamped] <= 10 and pool.clamp(clamped, 10) == clamped


def _derived(pool: ExprPool, e: int, text: bytes) -> int:
    for b in text:
        e = pool.deriv(e, b)
    return e


def test_clamping_grows_the_arena_and_its_memo_survives_forks():
    pool = ExprPool()
    words = [seq(literal(f"w{i}x"), repeat(literal("z"), 0, 50)) for i in range(3000)]
    e = pool.intern(seq(alt(*words), repeat(literal("y"), 100, 100)))
    i = 0
    while len(pool) + 8 < pool.arena[core.H_NCAP]:  # fill the nodes' region to its last few places
        pool.intern(literal(f"filler{i}"))
        i += 1
    start = len(pool.arena)
    c = pool.clamp(e, 8)
    assert len(pool.arena) > start  # a clamped chain per word: the arena grew during the call
    assert pool.counter[c] <= 8
    # past the limit the clamped counters are unbounded; within it the two agree
    assert pool.nullable[_derived(pool, c, b"w17x" + b"z" * 60 + b"y" * 8)]
    assert not pool.is_live(_derived(pool, e, b"w17x" + b"z" * 60))
    for text in (b"w2999x", b"w1x", b"w1xzzzy", b"w1xy"):
        assert pool.is_live(_derived(pool, e, text)) == pool.is_live(_derived(pool, c, text))
    n = len(pool)
    for copy in (pool, pool.fork(), safe_loads(pickle.dumps(pool))):
        assert copy.clamp(e, 8) == c and len(copy) == n  # answered from the arena's memo
    assert pool.clamp(e, core.CLAMP_LIMITS) == e  # past the limits clamp takes: as it is


def _used_regions_equal(x: np.ndarray, y: np.ndarray) -> bool:
    """Whether two arenas hold the same header, node records, hash table, memo entries and children."""
    n, klen = int(x[core.H_N]), int(x[core.H_KLEN])
    lo, ht, mk, mv, kids = (int(x[s]) for s in (core.O_KIND, core.O_HT, core.O_MK, core.O_MV, core.O_KIDS))
    keys = x[mk:mv]
    return (
        np.array_equal(x[: core.HEADER], y[: core.HEADER])
        and np.array_equal(x[lo : lo + core.NW * n], y[lo : lo + core.NW * n])
        and np.array_equal(x[ht:mv], y[ht:mv])
        and np.array_equal(x[mv : mv + len(keys)][keys >= 0], y[mv : mv + len(keys)][keys >= 0])
        and np.array_equal(x[kids : kids + klen], y[kids : kids + klen])
    )


_GARBAGE = -0x5EED_BAD_BEEF  # no id, count, offset or set word the arena holds


def _dirty(pool: ExprPool) -> None:
    """Write garbage where an arena holds nothing: records not made, memo values of empty slots,
    children past the last (what unwritten memory may hold: ``_layout`` does not zero them)."""
    a = pool.arena
    lo, mk, mv, kids = (int(a[s]) for s in (core.O_KIND, core.O_MK, core.O_MV, core.O_KIDS))
    a[lo + core.NW * int(a[core.H_N]) : lo + core.NW * int(a[core.H_NCAP])] = _GARBAGE
    values = a[mv : mv + int(a[core.H_MCAP])]
    values[a[mk : mk + int(a[core.H_MCAP])] < 0] = _GARBAGE
    a[kids + int(a[core.H_KLEN]) :] = _GARBAGE


def test_unwritten_arena_memory_is_never_read():
    """An arena's unused regions are left unwritten (``_layout``): a pool whose unused regions hold
    garbage, after every growth too, builds the same expressions with the same derivatives and
    emptiness answers as one whose regions are zero."""
    clean, dirty = ExprPool(), ExprPool()
    _dirty(dirty)
    letters = repeat(chars([(0x61, 0x7A)]), 1, 6)
    for k, w in enumerate(f"w{i}x{'ab' * (i % 3)}" for i in range(600)):
        node = alt(literal(w), intersect(letters, Not(literal(w[::-1]))), seq(literal(w[:2]), letters))
        cap = dirty.arena[core.H_NCAP]
        e = clean.intern(node)
        assert dirty.intern(node) == e
        if dirty.arena[core.H_NCAP] != cap or k % 97 == 0:
            _dirty(dirty)
        assert dirty.is_live(e) == clean.is_live(e)
        for b in w.encode()[:3]:
            d = clean.deriv(e, b)
            assert dirty.deriv(e, b) == d
            assert dirty.is_live(d) == clean.is_live(d)
    assert dirty.arena[core.H_NCAP] > 4096  # the arena grew
    assert _used_regions_equal(clean.arena, dirty.arena)


def test_a_pickle_copies_the_arena_in_use_and_zeros_the_rest():
    """A pickle writes only the regions in use (``_arena_copy``), with an empty memo and a full one:
    the same entries, and zeros where the source holds unwritten memory (a large arena's unused
    regions); a fork copies the same regions (and leaves the rest unwritten), and derives the same
    expressions as its source."""
    pool = ExprPool()
    e = pool.intern(alt(literal("abc"), seq(repeat(chars([(0x61, 0x7A)]), 2, 5), literal("!"))))
    for full in (False, True):
        if full:
            for b in b"abcxyz!":
                pool.deriv(e, b)
        assert (pool.arena[core.H_MCOUNT] > 0) == full
        _dirty(pool)
        copy = safe_loads(pickle.dumps(pool)).arena
        assert _used_regions_equal(pool.arena, copy)
        assert not (copy == _GARBAGE).any()
        fork = pool.fork()
        assert len(fork.arena) == len(pool.arena) and _used_regions_equal(pool.arena, fork.arena)
        for b in b"abz!":
            assert fork.deriv(e, b) == pool.deriv(e, b)


def test_a_new_arena_has_its_header_and_table_keys_written_and_a_small_one_zeros():
    """``_layout`` writes, for any size, the header (counts zero) and the two tables' empty keys;
    an arena under ``LAZY`` bytes is zeroed whole, a larger one's other regions are left unwritten
    (nothing reads them: above), which no test can tell from zeros."""
    small = core._layout(1 << 10, 1 << 10, 2_000_000)
    assert small.nbytes < core.LAZY
    assert not small[core.HEADER : small[core.O_HT]].any()  # the records: zeros
    big = core._layout(1 << 17, 1 << 17, 2_000_000)
    assert big.nbytes >= core.LAZY
    for a in (small, big):
        ht, mk, mv = a[core.O_HT], a[core.O_MK], a[core.O_MV]
        assert (a[ht:mk] == -1).all() and (a[mk:mv] == -1).all()
        assert a[core.H_N] == a[core.H_KLEN] == a[core.H_MCOUNT] == a[core.H_WORK] == 0
